"""The storage interface every backend implements, and the path cache they share.

Contract: ``Storage`` lists every operation the layers above (``Session``,
``Store``, ``bulk``, ``maintenance``, ``worker``) may ask of a database; a
backend (``SQLiteStorage``, ``PostgresStorage``) implements each with its own
SQL and nothing else. Public ids (UUIDv7 text) and model objects go in and
come out; row keys (``int``) are opaque handles, valid inside one transaction
or read, never kept across calls. The rules (what may be written,
compare-and-set, error wording) live above. Writes happen inside
``transaction()``; several reads that must agree happen inside ``snapshot()``.

Concurrency is each backend's business, with one promise: inside a write
transaction, a read of a branch head (``branch_head``, ``ref``) sees the head
no other transaction can move until this one ends. SQLite gets that from its
single writer; PostgreSQL from a per-session advisory lock taken by the first
such read. A write that decides from a listing of many sessions (emptying the
trash, a retention policy) calls ``lock_sessions`` on what it listed, then
lists again: only what the second listing still holds may be acted on.

Root-to-node paths are read through ``path_to`` here: a backend supplies
``_path_rows`` (the walk up from a node, stopping at a cached ancestor) and
the shared ``PathCache`` does the rest.
"""

from __future__ import annotations

import json
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any

from ..compaction import project
from ..model import Branch, Checkpoint, Node, Run, SearchIndex, SessionInfo, Usage
from .cache import PathCache

NodeRow = tuple[str, int, "int | None", int, str, str, str, "int | None"]
"""A node to insert: (id, session key, parent key, depth, kind, payload, created_at, run key)."""

PathRow = tuple[str, int, str, str, str, "str | None", int]
"""One step of a walk up a path: (id, depth, kind, payload, created_at, run id, is a cached
stop); the flag is any true value (SQLite gives 1, PostgreSQL True)."""

SESSION_GONE = "the session no longer exists (another writer deleted it); nothing was written"
"""``NotFound`` for a write into a session deleted after the writer looked it up (both backends)."""

RUN_FIELDS = ("model", "provider", "params", "usage", "latency_ms", "finish_reason", "created_at")


class Storage(ABC):
    """One database. See the module docstring for the contract."""

    cache: PathCache
    readonly: bool
    url: str
    """What the store was opened with: a file path, ``:memory:`` or a postgresql:// URL
    (its password hidden)."""

    # -- lifecycle and transactions ------------------------------------------

    @abstractmethod
    def close(self) -> None: ...

    @abstractmethod
    def transaction(self) -> AbstractContextManager[Any]:
        """One atomic write; nested use joins it (a savepoint)."""

    @abstractmethod
    def snapshot(self) -> AbstractContextManager[None]:
        """Several reads from one consistent state."""

    @property
    @abstractmethod
    def schema_version(self) -> int: ...

    # -- ids -------------------------------------------------------------------

    @abstractmethod
    def resolve_id(self, table: str, what: str, ref: str, session_key: int | None = None) -> str:
        """The id in ``table`` ("nodes" or "sessions") equal to ``ref``, or the one starting
        with it; ``NotFound`` / ``AmbiguousRef`` otherwise."""

    @abstractmethod
    def neighbours(self, ids: Sequence[str]) -> list[tuple[str, str]]:
        """(id, neighbour) for each of ``ids`` and each id next to it in sorted order among
        all nodes and sessions, in one query for all of them."""

    # -- sessions --------------------------------------------------------------

    @abstractmethod
    def insert_session(
        self, id: str, title: str | None, metadata: str, created_at: str, archived_at: str | None = None
    ) -> int: ...

    @abstractmethod
    def session_row(
        self, id: str
    ) -> tuple[int, str, str | None, dict[str, Any], str, str | None, str | None]:
        """(key, id, title, metadata, created_at, archived_at, trashed_at) of a session."""

    @abstractmethod
    def session_key(self, id: str) -> int | None: ...

    @abstractmethod
    def sessions(self, *, include_archived: bool) -> list[SessionInfo]:
        """The sessions not in the trash (archived ones too, if asked), newest first."""

    @abstractmethod
    def session_ids(self) -> list[str]:
        """Every session id, archived ones too, oldest first."""

    @abstractmethod
    def set_archived(self, session_key: int, when: str | None) -> None: ...

    @abstractmethod
    def set_title(self, session_key: int, title: str | None) -> None: ...

    @abstractmethod
    def delete_session(self, session_key: int) -> int:
        """Delete a session and everything in it; the number of nodes removed."""

    # -- nodes -----------------------------------------------------------------

    @abstractmethod
    def node(self, id: str) -> Node: ...

    @abstractmethod
    def handle(self, id: str) -> tuple[int, str, int, str] | None:
        """(key, session id, depth, kind) of a node id, or None."""

    @abstractmethod
    def reserve_node_keys(self, count: int) -> int:
        """The first of ``count`` consecutive node keys this transaction may use."""

    @abstractmethod
    def insert_nodes(self, rows: Sequence[NodeRow], keys_from: int | None = None) -> int:
        """Insert nodes; the last one's key. With ``keys_from`` (from ``reserve_node_keys``),
        row i gets key ``keys_from + i``; without it, one row gets the next free key.
        ``Conflict`` for a second decision on a pause, ``NotFound`` for a parent that is not
        a node of the session."""

    @abstractmethod
    def children(self, key: int) -> list[Node]: ...

    @abstractmethod
    def ancestor(self, key: int, generations: int, *, messages_only: bool = False) -> tuple[int, str] | None:
        """(key, id) of the node ``generations`` steps above ``key``, or None past the root;
        ``messages_only``: the ``generations``-th message node above it, stepping over markers."""

    @abstractmethod
    def is_ancestor(self, ancestor: int, key: int) -> bool: ...

    @abstractmethod
    def tree(self, session_key: int) -> list[Node]:
        """Every node of a session, parents before children."""

    def tree_stream(self, session_key: int) -> Iterator[Node]:
        """``tree``, read as it is consumed where the backend can (inside ``snapshot()``,
        so memory does not follow the session's size)."""
        return iter(self.tree(session_key))

    def runs_stream(self, session_key: int) -> Iterator[Run]:
        """``runs``, read as it is consumed where the backend can (as ``tree_stream``)."""
        return iter(self.runs(session_key))

    @abstractmethod
    def leaves(self, session_key: int) -> list[Node]: ...

    @abstractmethod
    def pending(self, session_key: int | None = None) -> list[Node]:
        """Pauses without a decision that a branch stands at (its head), outside the
        trash, oldest first: the pauses a human can still decide."""

    @abstractmethod
    def resumable(self) -> list[tuple[str, str]]:
        """(pause id, session id) of every decided pause whose decision is still a branch
        head and has no child, outside the trash: decided, and not yet carried on by any
        run. Oldest first."""

    @abstractmethod
    def tool_heads(self) -> list[tuple[int, str, str, str]]:
        """(session key, session id, branch, head id) of every branch, outside the trash,
        whose head is a ``tool_start`` or a tool message: where a run cut off inside a tool
        stopped (or a live one is), oldest head first."""

    @abstractmethod
    def tool_lease(self, session_key: int) -> AbstractContextManager[None]:
        """Held by a run while it is inside tool calls of the session, from before its
        ``tool_start`` is written until its last result is; shared, so any number of runs
        hold it at once. Given up when the process dies, however it dies (SQLite: a lock
        the operating system drops, see ``leases``; PostgreSQL: an advisory lock of a
        connection of its own, which the server drops)."""

    @abstractmethod
    def unleased(self, session_keys: Sequence[int]) -> set[int]:
        """The keys of the sessions whose ``tool_lease`` no live run holds, in any
        process (this one included). When a backend cannot tell, a session is not in it."""

    @abstractmethod
    def common_ancestor(self, a: int, b: int) -> Node | None: ...

    @abstractmethod
    def nodes_by_ids(self, ids: Sequence[str]) -> dict[str, tuple[int, str, str | None, str, str, int]]:
        """id -> (key, session id, parent id, kind, payload, depth) for the ids that exist."""

    # -- usage -----------------------------------------------------------------

    @abstractmethod
    def path_usage(self, key: int, after_depth: int = -1) -> Usage: ...

    @abstractmethod
    def subtree_usage(self, key: int) -> Usage: ...

    # -- branches and checkpoints ---------------------------------------------

    @abstractmethod
    def ref(self, session_key: int, name: str) -> tuple[str, int | None, str | None] | None:
        """("branch" | "checkpoint", node key, node id) for a name in a session, or None."""

    @abstractmethod
    def branch_head(
        self, session_key: int, name: str
    ) -> tuple[int | None, str | None, int, str | None] | None:
        """(head key, head id, head depth, head kind) of a branch (None, None, -1, None when
        empty), or None when there is no such branch."""

    @abstractmethod
    def branch(self, session_key: int, session_id: str, name: str) -> Branch | None: ...

    @abstractmethod
    def branches(self, session_key: int, session_id: str) -> list[Branch]: ...

    @abstractmethod
    def branches_at(self, session_key: int, key: int) -> list[str]: ...

    @abstractmethod
    def insert_branch(
        self,
        session_key: int,
        name: str,
        head: int | None,
        metadata: str,
        created: str,
        updated: str | None = None,
    ) -> None: ...

    @abstractmethod
    def set_head(self, session_key: int, name: str, head: int | None, when: str) -> None: ...

    @abstractmethod
    def rename_branch(self, session_key: int, old: str, new: str, when: str) -> None: ...

    @abstractmethod
    def delete_branch(self, session_key: int, name: str) -> None: ...

    @abstractmethod
    def checkpoints(self, session_key: int, session_id: str) -> list[Checkpoint]: ...

    @abstractmethod
    def insert_checkpoint(self, session_key: int, name: str, node: int, when: str) -> None: ...

    @abstractmethod
    def delete_checkpoint(self, session_key: int, name: str) -> bool: ...

    # -- runs ------------------------------------------------------------------

    @abstractmethod
    def insert_run(self, id: str, session_key: int, fields: Sequence[Any]) -> int:
        """Insert a run (values of ``RUN_FIELDS``); its key."""

    @abstractmethod
    def run_handle(self, id: str) -> tuple[int, str] | None: ...

    @abstractmethod
    def run(self, id: str) -> Run: ...

    @abstractmethod
    def runs(self, session_key: int) -> list[Run]: ...

    # -- search ------------------------------------------------------------------

    @abstractmethod
    def search(
        self,
        query: str,
        *,
        session_id: str | None = None,
        branch: str | None = None,
        role: str | None = None,
        kind: str | None = None,
        limit: int = 20,
        tools: bool = True,
        newest: bool = False,
    ) -> list[tuple[Node, str]]:
        """(node, snippet) of the best ``limit`` full-text matches (``newest``: the newest
        instead) outside the trash; ``tools=False`` leaves tool calls and results out;
        ``InvalidQuery`` for a query the backend cannot parse."""

    @abstractmethod
    def refs_containing(self, node_ids: Sequence[str]) -> dict[str, tuple[list[str], list[str]]]:
        """node id -> (branches, checkpoints) of its session whose path contains it."""

    @abstractmethod
    def search_index(self) -> SearchIndex:
        """Whether the full-text index is on, what it holds, what is pending, its size."""

    @abstractmethod
    def set_search_index(
        self, enabled: bool, *, rebuild: bool = False, progress: Callable[[int, int], None] | None = None
    ) -> int:
        """Turn the index on (indexing every node) or off (emptying it); ``rebuild``
        empties it and indexes every node again, reporting ``progress(done, total)``. How
        many nodes it holds after (one transaction). A backend whose index cannot be off
        raises ``SessionTreeError``."""

    @abstractmethod
    def check_search_index(self) -> str | None:
        """None when the index holds exactly the text of the nodes it covers, else what
        is wrong (``rebuild`` repairs it)."""

    # -- trash and redactions ------------------------------------------------------

    @abstractmethod
    def lock_sessions(self, session_ids: Sequence[str]) -> dict[str, int]:
        """Inside a write transaction: no other transaction writes these sessions until this
        one ends, and what is read about them from now on is what it wrote last (SQLite: so
        already, its write transaction is the only one). The keys of those of them that
        exist; read again whatever the caller decided from before this call."""

    @abstractmethod
    def set_trashed(self, session_key: int, when: str | None) -> None:
        """Put a session in the trash at ``when`` (keeping an earlier time), or take it out."""

    @abstractmethod
    def trashed(self, before: str | None = None) -> list[tuple[str, str | None, str, int]]:
        """(session id, title, trashed_at, nodes) in the trash (before ``before``), oldest first."""

    @abstractmethod
    def droppable_sessions(self, cutoff: str) -> list[tuple[str, str, bool]]:
        """(session id, last activity, work in flight) of sessions a drop policy looks at:
        not trashed, no checkpoint, nothing written since ``cutoff``. Work is in flight when a
        branch stands at a pause, a decision or a ``tool_start``; the policy leaves those."""

    @abstractmethod
    def strippable_results(self, cutoff: str, min_bytes: int) -> list[tuple[str, str, int]]:
        """(node id, session id, bytes) of unredacted tool results of at least ``min_bytes``
        written before ``cutoff``, outside the trash."""

    @abstractmethod
    def redact(self, node_id: str, field: str, marker: str, reason: str, when: str) -> int:
        """Replace a payload field by ``marker``, recorded in ``redactions``; bytes removed."""

    @abstractmethod
    def record_redaction(
        self, node_id: str, field: str, size: int, marker: str, reason: str, when: str
    ) -> None:
        """Record that a node written with ``marker`` in its field (a copy of a stripped
        node) had ``size`` bytes there removed; the payload is left as it is."""

    @abstractmethod
    def retention_policy(self) -> dict[str, float]: ...

    @abstractmethod
    def set_retention_policy(self, policy: dict[str, float]) -> None: ...

    @abstractmethod
    def redactions(self, session_key: int | None = None) -> list[dict[str, Any]]:
        """Every recorded redaction (of one session), oldest first."""

    # -- upkeep ----------------------------------------------------------------

    @abstractmethod
    def unreachable(
        self, session_key: int | None, *, delete: bool, cutoff: str = ""
    ) -> tuple[list[str], list[str]]:
        """(node ids, run ids) nothing keeps; with ``delete``, remove them."""

    @abstractmethod
    def vacuum(self) -> int | None:
        """Give free space back; the bytes freed, when known."""

    @abstractmethod
    def integrity_problems(self, session_key: int | None) -> list[tuple[str, str, str, str | None]]:
        """(session id, check, detail, node id) for every row that breaks a tree invariant."""

    @abstractmethod
    def branch_heads(self, session_key: int | None) -> list[tuple[str, str, tuple[int, str]]]: ...

    @abstractmethod
    def counts(self, session_key: int | None) -> tuple[int, int]:
        """(sessions, nodes), in one session or in all."""

    @abstractmethod
    def stats(self) -> dict[str, Any]: ...

    @abstractmethod
    def backup(self, destination: str) -> int: ...

    @abstractmethod
    def wait_for_decisions(self, timeout: float) -> bool:
        """Return when a decision may have been written (True: a signal came), or after
        ``timeout`` seconds (False)."""

    # -- reads and writes in one statement --------------------------------------------

    one_statement = False
    """Whether ``path_at_ref``, ``messages_at_ref``, ``append_at_head`` and ``fork_at`` do
    anything: where each statement is a round trip (PostgreSQL). Elsewhere the callers go
    their usual way."""

    def append_at_head(
        self,
        session_key: int,
        branch: str,
        expect: str | None,
        parent: str | None,
        kind: str,
        nodes: Sequence[tuple[str, str]],
        created: str,
        run: tuple[str, Sequence[Any] | None] | None,
    ) -> tuple[str | None, int] | None:
        """The common append in one statement, its own transaction: (id, payload) nodes
        as a chain under the head of the existing branch ``branch`` (which must be
        ``expect`` and ``parent`` when given), moving it; ``run`` is (run id, its
        ``RUN_FIELDS`` to record it, or None for an existing run of the session). The
        head's (id, depth) it went under; None, having written nothing, for anything
        else (the caller then takes the long way, which raises what it raises), or when
        the backend has no such statement (SQLite: its transactions cost no round trip).
        A connection lost once the statement was sent is ``OutcomeUnknown``."""
        return None

    def fork_at(
        self, session_key: int, name: str, at: str, at_is_id: bool, metadata: str | None, created: str
    ) -> str | None:
        """A new branch ``name`` with ``metadata`` (None: a checkpoint ``name``) at ``at`` (a
        whole node id of the session, or a branch or checkpoint name) in one statement;
        the node's id, or None as ``append_at_head``."""
        return None

    # -- paths, through the cache -------------------------------------------------

    @abstractmethod
    def _path_rows(self, key: int, stops: list[str]) -> list[PathRow]:
        """The walk up from node ``key``, head first, ending at the root or at the first
        node whose id is in ``stops`` (that row flagged)."""

    redaction_check_every: float = 0.0
    """Seconds between two looks at the redaction count (0: before every read of a path)."""
    _next_redaction_check = 0.0

    @abstractmethod
    def redaction_count(self) -> int:
        """How many redactions were ever recorded here (it never counts down)."""

    def _drop_stale_paths(self) -> int:
        """Clear the cache if a redaction was recorded (by any process) since the last
        look: it is the one change a node may undergo, and a cached path would go on
        holding the old payload. The cache generation what this read puts must name
        (``PathCache.agree``)."""
        generation = self.cache.generation  # before the look: a clear after it voids this read
        now = time.monotonic()
        if now < self._next_redaction_check:
            return generation
        self._next_redaction_check = now + self.redaction_check_every
        return self.cache.agree(self.redaction_count())

    def path_to(self, key: int, node_id: str, session_id: str) -> tuple[Node, ...]:
        """Root-to-node: from the cache, or reading only the nodes after the nearest
        cached ancestor (see ``cache``)."""
        return self._cached_path(key, node_id, session_id, self._drop_stale_paths())

    def _ref_walk(
        self, session_key: int, name: str, stops: list[str], redactions: bool
    ) -> tuple[int, str, int | None, list[PathRow]] | None:
        """In one statement, outside any transaction: (node key, node id, the redaction
        count if asked, the walk up from the node as ``_path_rows`` with ``stops``, the
        node itself flagged when it is one of them) of the branch or checkpoint ``name``;
        None when there is none, it has no node, or the backend has no such statement
        (then the caller reads as before). PostgreSQL has one: a
        read there is a round trip, where SQLite's cost none."""
        return None

    def path_at_ref(self, session_key: int, session_id: str, name: str) -> tuple[Node, ...] | None:
        """The path to the node a branch or checkpoint named ``name`` points at, in the one
        statement of ``_ref_walk``; None when that gives nothing (no such name, no node
        yet, or no such statement)."""
        found = self._walk_ref(session_key, session_id, name)
        return None if found is None else self._cached_path(*found)

    def messages_at_ref(self, session_key: int, session_id: str, name: str) -> list[dict[str, Any]] | None:
        """``messages`` of the node a branch or checkpoint named ``name`` points at, as
        ``path_at_ref``."""
        found = self._walk_ref(session_key, session_id, name)
        if found is None:
            return None
        projected = self.cache.messages(found[1])
        if projected is None:
            path = self._cached_path(*found)
            projected = self.cache.messages(found[1])
            if projected is None:  # not cacheable (too big, or the cache is off)
                return project(path)
        return projected

    def _walk_ref(
        self, session_key: int, session_id: str, name: str
    ) -> tuple[int, str, str, int, list[PathRow]] | None:
        """``_cached_path``'s arguments from one ``_ref_walk``, the redaction count looked
        at when due."""
        if not self.one_statement:
            return None
        # Taken before the statement: a clear after it (by another thread that saw a
        # redaction, or by this look at the count) voids what this read would put.
        generation = self.cache.generation
        now = time.monotonic()
        due = now >= self._next_redaction_check
        found = self._ref_walk(session_key, name, self.cache.heads(session_id), due)
        if found is None:
            return None
        key, node_id, count, rows = found
        if due:
            self._next_redaction_check = now + self.redaction_check_every
            self.cache.agree(count or 0)
        return key, node_id, session_id, generation, rows

    def _cached_path(
        self, key: int, node_id: str, session_id: str, generation: int, rows: list[PathRow] | None = None
    ) -> tuple[Node, ...]:
        cached = self.cache.get(node_id)
        if cached is not None:
            return cached
        if rows is None:
            rows = self._path_rows(key, self.cache.heads(session_id))
        base: tuple[Node, ...] = ()
        if rows[-1][6]:  # stopped at a cached ancestor
            base = self.cache.get(rows[-1][0]) or ()
            if not base:  # evicted meanwhile: read the whole path
                rows = self._path_rows(key, [])
            else:
                rows.pop()
        rows.reverse()  # root first; each row's parent is the one before it
        ids = [base[-1].id if base else None, *(r[0] for r in rows)]
        path = (
            *base,
            *[
                Node(r[0], session_id, parent, r[1], r[2], r[3], r[4], r[5])
                for r, parent in zip(rows, ids[:-1], strict=True)
            ],
        )
        self.cache.put(path, len(base), generation)
        return path

    def messages(self, key: int, node_id: str, session_id: str) -> list[dict[str, Any]]:
        """The projection of the path to a node (``compaction.project``), root first (the
        dicts are shared with the cache: read-only). Re-reading a grown path costs O(new
        nodes)."""
        generation = self._drop_stale_paths()
        found = self.cache.messages(node_id)  # a new list
        if found is None:
            path = self._cached_path(key, node_id, session_id, generation)
            found = self.cache.messages(node_id)
            if found is None:  # not cacheable (too big, or the cache is off)
                return project(path)
        return found

    def remember(self, parent_id: str | None, nodes: Sequence[Node]) -> None:
        """Nodes just written under ``parent_id``: extend its cached path, if any."""
        if parent_id is None:
            self.cache.put(tuple(nodes))
        else:
            self.cache.extend(parent_id, tuple(nodes))

    # -- metadata (``Session.set_metadata``, ``Session.set_branch_metadata``) -------

    @abstractmethod
    def set_session_metadata(self, session_key: int, metadata: str) -> None:
        """Replace a session's metadata (JSON text), inside a transaction that holds its lock."""

    @abstractmethod
    def set_branch_metadata(self, session_key: int, name: str, metadata: str) -> None:
        """Replace a branch's metadata (JSON text), inside a transaction that holds its lock."""


def decode_run(row: Sequence[Any]) -> Run:
    """A Run from (id, session id, *RUN_FIELDS) with params and usage as JSON text."""
    return Run(row[0], row[1], row[2], row[3], json.loads(row[4]), json.loads(row[5]), *row[6:])
