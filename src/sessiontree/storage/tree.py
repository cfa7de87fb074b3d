"""The tree part of the storage interface: sessions, nodes, refs, runs and the path walks.

Contract: ``Tree`` is what ``Session``, ``Store``, ``bulk`` and ``worker`` ask of
a database about conversations: sessions, nodes, branches and checkpoints,
runs, pauses and tool leases, and the walks ``paths.CachedPaths`` reads paths
through. A backend class is its own tree (``SQLiteStorage``, ``PostgresStorage``
inherit it through ``base.Storage``): callers reach these as ``storage.node(...)``.
Inside a write transaction, a read of a branch head (``branch_head``, ``ref``)
sees the head no other transaction can move until this one ends.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any

from ..model import Branch, Checkpoint, Node, Run, SessionInfo, Usage
from .paths import PathRow
from .rows import (
    AppendedAt,
    BranchHead,
    Neighbour,
    NodeHandle,
    NodeKey,
    RefTarget,
    ResumablePause,
    RunHandle,
    SessionRow,
    StoredNode,
    ToolHead,
)

NodeRow = tuple[str, int, "int | None", int, str, str, str, "int | None"]
"""A node to insert: (id, session key, parent key, depth, kind, payload, created_at, run key)."""


class Tree(ABC):
    """Sessions, nodes, refs, runs and the path walks of one database."""

    # -- ids -------------------------------------------------------------------

    @abstractmethod
    def has_id(self, table: str, id: str, session_key: int | None = None) -> bool:
        """Whether ``table`` ("nodes" or "sessions") has a row of id ``id`` (with
        ``session_key``: a node of that session). ``refs`` holds what a ref means."""

    @abstractmethod
    def ids_starting_with(
        self, table: str, prefix: str, session_key: int | None = None, limit: int = 2
    ) -> list[str]:
        """The first ``limit`` ids in ``table`` that start with ``prefix``, in order (with
        ``session_key``: that session's nodes only); one range scan of the id index."""

    @abstractmethod
    def neighbours(self, ids: Sequence[str]) -> list[Neighbour]:
        """Each of ``ids`` with each id next to it in sorted order among all nodes and
        sessions, in one query for all of them."""

    # -- sessions --------------------------------------------------------------

    @abstractmethod
    def insert_session(
        self, id: str, title: str | None, metadata: str, created_at: str, archived_at: str | None = None
    ) -> int: ...

    @abstractmethod
    def session_row(self, id: str) -> SessionRow:
        """A session's row; ``NotFound`` when there is none."""

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
    def set_session_metadata(self, session_key: int, metadata: str) -> None:
        """Replace a session's metadata (JSON text), inside a transaction that holds its lock."""

    @abstractmethod
    def set_branch_metadata(self, session_key: int, name: str, metadata: str) -> None:
        """Replace a branch's metadata (JSON text), inside a transaction that holds its lock."""

    @abstractmethod
    def delete_session(self, session_key: int) -> int:
        """Delete a session and everything in it; the number of nodes removed."""

    # -- nodes -----------------------------------------------------------------

    @abstractmethod
    def node(self, id: str) -> Node: ...

    @abstractmethod
    def handle(self, id: str) -> NodeHandle | None:
        """The handle of a node id, or None."""

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
    def ancestor(self, key: int, generations: int, *, messages_only: bool = False) -> NodeKey | None:
        """The node ``generations`` steps above ``key``, or None past the root;
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
    def resumable(self) -> list[ResumablePause]:
        """Every decided pause whose decision is still a branch
        head and has no child, outside the trash: decided, and not yet carried on by any
        run. Oldest first."""

    @abstractmethod
    def tool_heads(self) -> list[ToolHead]:
        """Every branch, outside the trash,
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
    def nodes_by_ids(self, ids: Sequence[str]) -> dict[str, StoredNode]:
        """id -> its stored node, for the ids that exist."""

    # -- usage -----------------------------------------------------------------

    @abstractmethod
    def path_usage(self, key: int, after_depth: int = -1) -> Usage: ...

    @abstractmethod
    def subtree_usage(self, key: int) -> Usage: ...

    # -- branches and checkpoints ---------------------------------------------

    @abstractmethod
    def ref(self, session_key: int, name: str) -> RefTarget | None:
        """The branch or checkpoint of that name in a session, or None."""

    @abstractmethod
    def branch_head(self, session_key: int, name: str) -> BranchHead | None:
        """The head of a branch, or None when there is no such branch."""

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
    def run_handle(self, id: str) -> RunHandle | None: ...

    @abstractmethod
    def run(self, id: str) -> Run: ...

    @abstractmethod
    def runs(self, session_key: int) -> list[Run]: ...

    @abstractmethod
    def wait_for_decisions(self, timeout: float) -> bool:
        """Return when a decision may have been written (True: a signal came), or after
        ``timeout`` seconds (False)."""

    # -- reads and writes in one statement --------------------------------------------

    one_statement = False
    """Whether ``path_at_ref``, ``messages_at_ref``, ``append_at_head``, ``decide_at`` and
    ``fork_at`` do anything: where each statement is a round trip (PostgreSQL). Elsewhere the callers go
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
    ) -> AppendedAt | None:
        """The common append in one statement, its own transaction: (id, payload) nodes
        as a chain under the head of the existing branch ``branch`` (which must be
        ``expect`` and ``parent`` when given), moving it; ``run`` is (run id, its
        ``RUN_FIELDS`` to record it, or None for an existing run of the session). The
        head it went under; None, having written nothing, for anything
        else (the caller then takes the long way, which raises what it raises), or when
        the backend has no such statement (SQLite: its transactions cost no round trip).
        A connection lost once the statement was sent is ``OutcomeUnknown``."""
        return None

    def decide_at(self, session_id: str, pause_id: str, decision: tuple[str, str], created: str) -> bool:
        """A decision (id, payload) under the pause ``pause_id`` of session ``session_id`` in
        one statement, its own transaction, every branch at the pause moved to it; whether
        it was written (False, having written nothing: as ``append_at_head``'s None)."""
        return False

    def fork_at(
        self, session_key: int, name: str, at: str, at_is_id: bool, metadata: str | None, created: str
    ) -> str | None:
        """A new branch ``name`` with ``metadata`` (None: a checkpoint ``name``) at ``at`` (a
        whole node id of the session, or a branch or checkpoint name) in one statement;
        the node's id, or None as ``append_at_head``."""
        return None

    # -- the walks the path cache reads through (``paths.CachedPaths``) -----------------

    @abstractmethod
    def _path_rows(self, key: int, stops: list[str]) -> list[PathRow]:
        """The walk up from node ``key``, head first, ending at the root or at the first
        node whose id is in ``stops`` (that row flagged)."""

    redaction_check_every: float = 0.0
    """Seconds between two looks at the redaction count (0: before every read of a path)."""

    @abstractmethod
    def redaction_count(self) -> int:
        """How many redactions were ever recorded here (it never counts down)."""

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
