"""One session tree: append, read paths, and move named pointers.

Contract:
- Nodes are immutable and only ever added. ``append`` adds a child of a
  branch's head (or of an explicit ``parent``) and moves the head, in one
  transaction; ``expect_head`` (a ``Node`` or an id) makes the move a
  compare-and-set that raises ``BranchMoved`` when the head is not what the
  caller last saw.
- A *ref* is a branch name, a checkpoint name, a node id, a unique id prefix
  (4+ characters) or a ``Node``, optionally with a git-style ``~N`` suffix
  for the Nth ancestor message (``~N!``: the Nth ancestor node, markers
  included). Branch and checkpoint names share one namespace per session and
  can never look like an id, so a ref always means one thing; ``refs`` says
  which, and words what names nothing.
- Branches move; checkpoints never do. Forking is one row; nothing is copied.
- ``path`` reads root-to-node in one recursive query, whatever the depth.
- The rules live here; every statement runs in the storage backend. Row keys
  are used within one call only (inside one read snapshot or transaction).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any, NamedTuple

from . import compaction, maintenance, refs
from .errors import BranchMoved, CheckpointImmutable, Conflict, InvalidPayload, MetadataChanged, NotFound
from .ids import is_stamp, new_id, new_ids, now
from .model import (
    Branch,
    Checkpoint,
    Completion,
    Diff,
    Node,
    PruneReport,
    Usage,
    VerifyReport,
    check_latency,
    encode_json,
    encode_payload,
    encode_usage,
)
from .names import (
    FULL_ID,
    check_lookup,
    check_name,
    check_text,
    shown,
    unstorable,
)
from .refs import Ref
from .storage import Storage
from .storage.rows import SessionRow

PIN_PREFIX = "pin-"
"""A pin is the checkpoint ``pin-<node id>`` (``Session.pin``)."""
RunLike = str | Completion | dict[str, Any] | None


class Session:
    """A handle on one conversation tree; get one from ``Store.session`` or ``Store.create_session``."""

    def __init__(
        self,
        storage: Storage,
        key: int,
        id: str,
        title: str | None,
        metadata: dict[str, Any],
        created_at: str,
        archived_at: str | None = None,
        trashed_at: str | None = None,
    ) -> None:
        self.storage = storage
        self._key = key  # the session's row key; never reused (AUTOINCREMENT)
        self.id = id
        self.title = title
        self.metadata = metadata
        self.created_at = created_at
        self.archived_at = archived_at
        self.trashed_at = trashed_at

    @classmethod
    def from_row(cls, storage: Storage, row: SessionRow) -> Session:
        """The session of a row ``storage.session_row`` read."""
        return cls(
            storage, row.key, row.id, row.title, row.metadata, row.created_at, row.archived_at, row.trashed_at
        )

    def __repr__(self) -> str:
        return f"Session(id={self.id!r}, title={self.title!r})"

    # -- resolving refs --------------------------------------------------

    def resolve(self, ref: Ref) -> str:
        """The node id a ref points at (see the module docstring for what a ref is)."""
        with self.storage.snapshot():
            return self._locate(ref)[1]

    def _locate(self, ref: Ref) -> tuple[int, str]:
        """(row key, id) of the node a ref points at (``refs.locate``); call inside a
        snapshot or transaction."""
        return refs.locate(self.storage, self._key, self.id, ref)

    def expected_head(self, expect_head: Ref | None) -> str | None:
        """The node id an ``expect_head=`` argument names (None: no compare-and-set)."""
        if expect_head is None:  # most appends: no call more on their path
            return None
        return refs.expected_head(self.storage, self._key, self.id, expect_head)

    # -- writing nodes ---------------------------------------------------

    def append(
        self,
        payload: dict[str, Any],
        *,
        branch: str | None = "main",
        parent: Ref | None = None,
        kind: str = "message",
        run: RunLike = None,
        expect_head: Ref | None = None,
        id: str | None = None,
        created_at: str | None = None,
    ) -> Node:
        """Add one node and move ``branch`` to it.

        The node is a child of ``parent`` if given, else of the branch head (a
        new root when the branch is new). With ``branch=None`` no branch moves.
        Given both, the branch must be new or at ``parent``. ``id`` and
        ``created_at`` name and date the node instead of the store (see ``append_many``).
        """
        return self.append_many(
            [payload],
            branch=branch,
            parent=parent,
            kind=kind,
            run=run,
            expect_head=expect_head,
            ids=None if id is None else [id],
            created_at=created_at,
        )[0]

    def append_many(
        self,
        payloads: Iterable[dict[str, Any]],
        *,
        branch: str | None = "main",
        parent: Ref | None = None,
        kind: str = "message",
        run: RunLike = None,
        expect_head: Ref | None = None,
        ids: Sequence[str] | None = None,
        created_at: str | None = None,
    ) -> list[Node]:
        """Append a chain of nodes (each the child of the one before) in one transaction.

        ``ids``, one per payload, are the nodes' ids instead of new UUIDv7s: each a
        lower-case UUID string, none repeated, none already in the store (``Conflict``,
        and nothing is written). ``created_at`` is the chain's one time, in ``ids.now()``'s
        form (``2026-11-30T09:14:15.123Z``), as the store dates a chain it names itself.
        """
        texts = [encode_payload(p, kind) for p in payloads]
        chosen = _chosen_ids(ids, len(texts))
        if created_at is not None and not is_stamp(created_at):
            raise InvalidPayload(
                f"created_at {shown(str(created_at))} is not a UTC time like 2026-11-30T09:14:15.123Z"
            )
        if not texts:
            return []
        if branch is not None:
            check_name(branch, new=False)
        expected = self.expected_head(expect_head)
        if branch is not None:
            done = self._append_in_one(texts, branch, parent, kind, run, expected, chosen, created_at)
            if done is not None:
                return done
        with self.storage.transaction():
            place = self._place(branch, parent, expected)
            if kind == "decision" and place.kind != "pause":
                raise Conflict(
                    "a decision must be the child of a pause, not of "
                    f"{place.kind or 'nothing'} node {place.id}"
                )
            for node_id in chosen or ():
                if self.storage.handle(node_id) is not None:
                    raise Conflict(f"node id {node_id} is taken: a node of this store has it")
            run_key, run_id = self._record_run(run, created_at)
            created = created_at or now()
            # A chain names each parent by its key before it exists: keys are taken in order.
            first = self.storage.reserve_node_keys(len(texts)) if len(texts) > 1 else None
            parent_key, parent_id, depth = place.key, place.id, place.depth + 1
            rows, nodes = [], []
            session_key, session_id, key = self._key, self.id, first or 0
            for node_id, text in zip(chosen or new_ids(len(texts)), texts, strict=True):
                rows.append((node_id, session_key, parent_key, depth, kind, text, created, run_key))
                nodes.append(Node(node_id, session_id, parent_id, depth, kind, text, created, run_id))
                parent_key, parent_id, depth, key = key, node_id, depth + 1, key + 1
            last_key = self.storage.insert_nodes(rows, keys_from=first)
            if branch is not None:
                self._set_head(branch, last_key, created, exists=place.branch_exists)
            self.storage.paths.remember(place.id, nodes)
        return nodes

    def _place(self, branch: str | None, parent: Ref | None, expect_head: str | None) -> _Place:
        """Where a new node goes: under ``parent``, else under the branch head."""
        head = None
        if branch is not None:
            found = self.storage.branch_head(self._key, branch)
            if found is not None:
                head = _Place(found.key, found.id, found.depth, found.kind, branch_exists=True)
            if expect_head is not None and expect_head != (head.id if head else None):
                raise BranchMoved(branch, expect_head, head.id if head else None)
        elif expect_head is not None:
            raise Conflict("expect_head needs a branch")
        if parent is None:
            if branch is None:
                raise Conflict("append needs a branch or a parent")
            return head or _Place(None, None, -1, None, branch_exists=False)
        key, parent_id = self._locate(parent)
        handle = self.storage.handle(parent_id)
        assert handle is not None  # just located, inside this transaction
        if head is not None and head.id is not None and head.id != parent_id:
            raise Conflict(
                f"branch {branch!r} is at {head.id}, not at the parent {parent_id}: "
                "append with branch=None, fork a new branch, or move this one first"
            )
        return _Place(key, parent_id, handle.depth, handle.kind, branch_exists=head is not None)

    def _set_head(
        self,
        branch: str,
        head: int | None,
        when: str,
        *,
        exists: bool,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        if exists:
            self.storage.set_head(self._key, branch, head, when)
            return
        self._check_name_free(branch, "branch")
        self.storage.insert_branch(
            self._key, branch, head, encode_json(metadata or {}, "branch metadata"), when
        )

    def _check_name_free(self, name: str, what: str) -> None:
        check_name(name, what)
        found = self.storage.ref(self._key, name)
        if found is not None:
            raise Conflict(f"a {found.kind} named {shown(name)} already exists in session {self.id}")

    def record_run(self, run: Completion | dict[str, Any]) -> str:
        """Store a model call's provenance (without its message) and return the run id."""
        with self.storage.transaction():
            run_id = self._record_run(run)[1]
        assert run_id is not None
        return run_id

    def _record_run(self, run: RunLike, when: str | None = None) -> tuple[int | None, str | None]:
        """(key, id) of the run a new node names: recorded now (or at ``when``, the time
        given for its nodes), or an earlier one by id."""
        if run is None:
            return None, None
        if isinstance(run, str):
            found = self.storage.run_handle(check_lookup(run, "run"))
            if found is None or found.session_id != self.id:
                raise NotFound(f"no run {shown(run)} in session {self.id}")
            return found.key, run
        run_id = new_id()
        return self.storage.insert_run(run_id, self._key, _run_fields(run, when)), run_id

    def _append_in_one(
        self,
        texts: list[str],
        branch: str,
        parent: Ref | None,
        kind: str,
        run: RunLike,
        expected: str | None,
        chosen: list[str] | None,
        created_at: str | None,
    ) -> list[Node] | None:
        """``append_many``'s common case (under the head of an existing branch) in the one
        statement of ``Storage.append_at_head``; None when it is not that case, or when
        the input is wrong (the long way then says what is, in its own order: a taken
        ``chosen`` id makes the statement fail on the unique index, writing nothing)."""
        if not self.storage.one_statement:
            return None
        if parent is not None:
            parent = parent.id if isinstance(parent, Node) and parent.session_id == self.id else parent
            if not isinstance(parent, str) or FULL_ID.fullmatch(parent) is None:
                return None
        recorded: tuple[str, Sequence[Any] | None] | None = None
        if isinstance(run, str):
            if unstorable(run) is not None:
                return None
            recorded = (run, None)
        elif run is not None:
            try:
                recorded = (new_id(), _run_fields(run))
            except Exception:  # noqa: BLE001 - the long way raises it, after what it checks first
                return None
        created = created_at or now()
        chain = list(zip(chosen or new_ids(len(texts)), texts, strict=True))
        place = self.storage.append_at_head(
            self._key, branch, expected, parent, kind, chain, created, recorded
        )
        if place is None:
            return None
        parent_id, depth = place.parent_id, place.parent_depth
        run_id = recorded[0] if recorded is not None else None
        nodes = []
        for node_id, text in chain:
            depth += 1
            nodes.append(Node(node_id, self.id, parent_id, depth, kind, text, created, run_id))
            parent_id = node_id
        self.storage.paths.remember(place.parent_id, nodes)
        return nodes

    def edit(self, node: Ref, payload: dict[str, Any], *, branch: str) -> Node:
        """A sibling of ``node`` carrying ``payload``, on the new branch ``branch``."""
        with self.storage.transaction():
            original = self.node(node)
            text = encode_payload(payload, original.kind)
            self._check_name_free(branch, "branch")
            parent_key = None if original.parent_id is None else self._locate(original.parent_id)[0]
            created = now()
            new = Node(new_id(), self.id, original.parent_id, original.depth, original.kind, text, created)
            key = self.storage.insert_nodes(
                [(new.id, self._key, parent_key, new.depth, new.kind, text, created, None)]
            )
            self._set_head(branch, key, created, exists=False)
            self.storage.paths.remember(original.parent_id, [new])
        return new

    # -- reading ---------------------------------------------------------

    def node(self, ref: Ref) -> Node:
        with self.storage.snapshot():
            return self.storage.node(self._locate(ref)[1])

    def head(self, branch: str = "main") -> Node | None:
        """The node a branch points at, or None for a branch with no node yet."""
        head_id = self.branch(branch).head_id
        return None if head_id is None else self.node(head_id)

    def children(self, ref: Ref) -> list[Node]:
        with self.storage.snapshot():
            return self.storage.children(self._locate(ref)[0])

    def path(self, ref: Ref = "main") -> list[Node]:
        """Root-to-node (main's head by default, as ``messages``), in one recursive query."""
        if refs.plain_name(ref):  # a branch or checkpoint: one statement where it costs a round trip
            found = self.storage.paths.path_at_ref(self._key, self.id, ref)
            if found is not None:
                return list(found)
        with self.storage.snapshot():
            return list(self.storage.paths.path_to(*self._locate(ref), self.id))

    def messages(self, ref: Ref = "main") -> list[dict[str, Any]]:
        """The chat messages on the path to ``ref``: what a chat-completions API takes.

        A summary on the path stands in for the span it covers (see ``compact``). A new
        list; the dicts in it are the nodes' payloads, shared with the store's cache, so
        treat them as read-only (``copy.deepcopy`` one to change it).
        """
        if refs.plain_name(ref):
            messages = self.storage.paths.messages_at_ref(self._key, self.id, ref)
            if messages is not None:
                return messages
        with self.storage.snapshot():
            return self.storage.paths.messages(*self._locate(ref), self.id)

    def compact(
        self,
        branch: str = "main",
        *,
        summarize: Callable[[list[dict[str, Any]]], Any],
        keep_last: int = 4,
        run: RunLike = None,
    ) -> Node | None:
        """Append a ``summary`` node to ``branch`` that stands for its path but the last
        ``keep_last`` messages (and any leading system messages); None when there is
        nothing to cover.

        ``summarize(messages)`` gets the messages to cover and returns the summary's
        text (or a message dict, or a ``Completion``, whose content is taken; a
        ``Completion`` is recorded as the summary's run). ``messages()`` then sends the
        summary instead of the covered messages; every original node stays on the path.
        The append is a compare-and-set on the head that was summarised.
        """
        path = self.path(branch)
        if path and path[-1].kind in ("pause", "decision"):
            # A summary there becomes the head: the decision would then go off the
            # branch, and resume would find nothing left to continue.
            todo = "decide and resume it" if path[-1].kind == "pause" else "resume it"
            raise Conflict(
                f"branch {shown(branch)} waits at {path[-1].kind} {path[-1].id}: {todo} before compacting"
            )
        planned = compaction.plan(path, keep_last)
        if planned is None:
            return None
        result = summarize(planned.messages)
        if inspect.isawaitable(result):
            close = getattr(result, "close", None)
            if close is not None:
                close()
            raise TypeError(
                "summarize must return its result, not an awaitable; the agent loop takes async ones"
            )
        text, completion = summary_text(result)
        return self.append(
            planned.payload(text),
            branch=branch,
            kind="summary",
            run=completion if completion is not None else run,
            expect_head=path[-1].id,
        )

    def tree(self) -> list[Node]:
        """Every node of the session, parents before children."""
        return self.storage.tree(self._key)

    def leaves(self) -> list[Node]:
        """Nodes without children."""
        return self.storage.leaves(self._key)

    def pending(self) -> list[Node]:
        """This session's pauses a human can decide (see ``Store.pending``)."""
        return self.storage.pending(self._key)

    def tool_lease(self) -> AbstractContextManager[None]:
        """Held by a run while it is inside tool calls of this session: what tells a live
        run from one cut off (see ``Storage.tool_lease``)."""
        return self.storage.tool_lease(self._key)

    def common_ancestor(self, a: Ref, b: Ref) -> Node | None:
        """The deepest node on both paths, or None when they share no root."""
        with self.storage.snapshot():
            return self.storage.common_ancestor(self._locate(a)[0], self._locate(b)[0])

    def diff(self, a: Ref, b: Ref) -> Diff:
        """The common ancestor of two refs and the nodes each adds after it."""
        with self.storage.snapshot():
            path_a, path_b = self.path(a), self.path(b)
        shared = 0
        for x, y in zip(path_a, path_b, strict=False):
            if x.id != y.id:
                break
            shared += 1
        return Diff(path_a[shared - 1] if shared else None, path_a[shared:], path_b[shared:])

    # -- usage -------------------------------------------------------------

    def usage(self, ref: Ref = "main", *, since: Ref | None = None) -> Usage:
        """Model calls on the path to ``ref`` (only those after ``since``, if given).

        ``since`` must be on that path (an ancestor of ``ref``, or ``ref`` itself):
        ``Conflict`` otherwise.
        """
        with self.storage.snapshot():
            key, node_id = self._locate(ref)
            after = -1
            if since is not None:
                since_key, since_id = self._locate(since)
                if not self.storage.is_ancestor(since_key, key):
                    raise Conflict(
                        f"{refs.ref_text(since)} ({since_id}) is not an ancestor of {refs.ref_text(ref)}"
                        f" ({node_id}): usage counts the calls after a node on the path"
                    )
                after = self.storage.node(since_id).depth
            return self.storage.path_usage(key, after)

    def subtree_usage(self, ref: Ref) -> Usage:
        """Model calls in ``ref`` and everything below it, on every branch."""
        with self.storage.snapshot():
            return self.storage.subtree_usage(self._locate(ref)[0])

    # -- branches --------------------------------------------------------

    def branch(self, name: str) -> Branch:
        found = self.storage.branch(self._key, self.id, check_lookup(name, "branch"))
        if found is None:
            raise NotFound(f"no branch {shown(name)} in session {self.id}")
        return found

    def branches(self) -> list[Branch]:
        return self.storage.branches(self._key, self.id)

    def branches_at(self, ref: Ref) -> list[str]:
        """Names of the branches whose head is the node ``ref`` points at."""
        with self.storage.snapshot():
            return self.storage.branches_at(self._key, self._locate(ref)[0])

    def fork(self, name: str, at: Ref, *, metadata: dict[str, Any] | None = None) -> Branch:
        """A new branch pointing at ``at`` (``fork("b", "main~1")`` or ``at=``). One row;
        nothing is copied."""
        forked = self._fork_in_one(name, at, metadata)
        if forked is not None:
            return forked
        with self.storage.transaction():
            key, node_id = self._locate(at)
            when = now()
            self._set_head(name, key, when, exists=False, metadata=metadata)
        # What was just written, without reading it back (a round trip on a server); the
        # metadata as it reads back from its JSON.
        stored = json.loads(encode_json(metadata or {}, "branch metadata"))
        return Branch(self.id, name, node_id, when, when, stored)

    def _fork_in_one(self, name: str, at: Ref, metadata: dict[str, Any] | None) -> Branch | None:
        """``fork`` at a whole node id, or at a branch or checkpoint, in the one statement
        of ``Storage.fork_at``; None otherwise, or for wrong input (the long way says
        what is wrong, in its own order)."""
        if not self.storage.one_statement:
            return None
        try:
            encoded = encode_json(metadata or {}, "branch metadata")
        except Exception:  # noqa: BLE001 - the long way raises it, after what it checks first
            return None
        found = self._pointer_in_one(name, "branch", at, encoded)
        if found is None:
            return None
        node_id, when = found
        return Branch(self.id, name, node_id, when, when, json.loads(encoded))

    def _pointer_in_one(self, name: str, what: str, at: Ref, metadata: str | None) -> tuple[str, str] | None:
        """(node id, time) of a new branch (``metadata``) or checkpoint (None) made in one
        statement, or None for the long way."""
        if not self.storage.one_statement:
            return None
        if isinstance(at, Node):
            at = at.id if at.session_id == self.id else ""
        if not refs.plain_name(at) and not (isinstance(at, str) and FULL_ID.fullmatch(at)):
            return None
        try:
            check_name(name, what)
        except Exception:  # noqa: BLE001 - the long way raises it, after what it checks first
            return None
        when = now()
        node_id = self.storage.fork_at(
            self._key,
            name,
            at,
            FULL_ID.fullmatch(at) is not None,
            metadata,
            when,
        )
        return None if node_id is None else (node_id, when)

    def move(self, name: str, to: Ref, *, expect_head: Ref | None = None) -> Branch:
        """Point an existing branch somewhere else (``to`` by position or keyword;
        compare-and-set with ``expect_head``)."""
        expected = self.expected_head(expect_head)
        with self.storage.transaction():
            current = self._existing_branch_head(name)
            if expected is not None and expected != current:
                raise BranchMoved(name, expected, current)
            self._set_head(name, self._locate(to)[0], now(), exists=True)
            return self.branch(name)

    def _existing_branch_head(self, name: str, doing: str = "move") -> str | None:
        found = self.storage.ref(self._key, check_lookup(name, "branch"))
        if found is None:
            raise NotFound(f"no branch {shown(name)} in session {self.id}")
        if found.kind == "checkpoint":
            if doing == "move":
                raise CheckpointImmutable(
                    f"{shown(name)} is a checkpoint, and checkpoints never move; fork a branch from it"
                )
            raise Conflict(
                f"{shown(name)} is a checkpoint, not a branch"
                + ("; use delete_checkpoint" if doing == "delete" else "")
            )
        return found.id

    def rename(self, old: str, new: str) -> Branch:
        """Give branch ``old`` the name ``new``."""
        with self.storage.transaction():
            self._existing_branch_head(old, "rename")
            if new != old:
                self._check_name_free(new, "branch")
                self.storage.rename_branch(self._key, old, new, now())
            return self.branch(new)

    def delete_branch(self, name: str) -> None:
        """Remove the pointer only; its nodes stay until ``prune``."""
        with self.storage.transaction():
            self._existing_branch_head(name, "delete")
            self.storage.delete_branch(self._key, name)

    # -- checkpoints -----------------------------------------------------

    def checkpoint(self, name: str, at: Ref) -> Checkpoint:
        """A named pointer at ``at`` that never moves (``checkpoint("cp", "main~1")`` or ``at=``)."""
        found = self._pointer_in_one(name, "checkpoint", at, None)
        if found is not None:
            return Checkpoint(self.id, name, found[0], found[1])
        with self.storage.transaction():
            self._check_name_free(name, "checkpoint")
            created = now()
            key, node_id = self._locate(at)
            self.storage.insert_checkpoint(self._key, name, key, created)
        return Checkpoint(self.id, name, node_id, created)

    def checkpoints(self) -> list[Checkpoint]:
        return self.storage.checkpoints(self._key, self.id)

    def delete_checkpoint(self, name: str) -> None:
        """Remove a checkpoint (its node stays until ``prune``)."""
        with self.storage.transaction():
            if not self.storage.delete_checkpoint(self._key, check_lookup(name, "checkpoint")):
                found = self.storage.ref(self._key, name)
                if found is not None and found.kind == "branch":
                    raise Conflict(f"{shown(name)} is a branch, not a checkpoint; use delete_branch")
                raise NotFound(f"no checkpoint {shown(name)} in session {self.id}")

    # -- pins ------------------------------------------------------------

    def pin(self, node: Ref) -> Checkpoint:
        """Keep ``node`` (and its ancestors) from ``prune`` while it is on no branch's path:
        a checkpoint named ``pin-<node id>``, so it is kept, listed, exported and imported
        as every checkpoint is. Pinning a pinned node returns the pin it has."""
        with self.storage.transaction():
            # The session's lock first (on a server; prune takes the store's): a prune
            # then either ended before the node is looked up, or waits for the pin.
            self.storage.lock_sessions([self.id])
            key, node_id = self._locate(node)
            name = PIN_PREFIX + node_id
            found = self.storage.ref(self._key, name)
            if found is None:
                created = now()
                self.storage.insert_checkpoint(self._key, name, key, created)
                return Checkpoint(self.id, name, node_id, created)
            if found.kind != "checkpoint" or found.id != node_id:
                taken = f"{shown(name)} is taken by a {found.kind}"
                raise Conflict(f"{taken} that is not a pin of node {node_id}")
        return next(c for c in self.checkpoints() if c.name == name)

    def unpin(self, node: Ref) -> None:
        """Remove ``node``'s pin (``NotFound`` when it has none); ``prune`` may then remove
        it, if nothing else keeps it."""
        node_id = node.id if isinstance(node, Node) else self.resolve(node)
        try:
            self.delete_checkpoint(PIN_PREFIX + node_id)
        except NotFound:
            raise NotFound(f"node {node_id} is not pinned in session {self.id}") from None

    def pins(self) -> list[Checkpoint]:
        """The pins of this session (the checkpoints ``pin`` made), oldest first."""
        return [c for c in self.checkpoints() if c.name == PIN_PREFIX + c.node_id]

    # -- metadata ----------------------------------------------------------

    def set_metadata(
        self, metadata: dict[str, Any], *, expect: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Replace the session's metadata, in one transaction; with ``expect`` (the metadata
        as the caller last read it) a compare-and-set that raises ``MetadataChanged`` when
        another writer changed it since. Returns the metadata as stored."""
        encoded = encode_json(metadata, "session metadata")
        with self.storage.transaction():
            self.storage.lock_sessions([self.id])  # on a server: the next writer waits
            current = self.storage.session_row(self.id).metadata
            _compare(f"session {self.id}", expect, current)
            self.storage.set_session_metadata(self._key, encoded)
        self.metadata = json.loads(encoded)
        return self.metadata

    def set_branch_metadata(
        self, name: str, metadata: dict[str, Any], *, expect: dict[str, Any] | None = None
    ) -> Branch:
        """``set_metadata`` for the branch ``name``: its metadata replaced in one
        transaction, compare-and-set with ``expect`` (``MetadataChanged``)."""
        encoded = encode_json(metadata, "branch metadata")
        with self.storage.transaction():
            self._existing_branch_head(name, "set the metadata of")  # on a server: the session's lock
            _compare(f"branch {shown(name)}", expect, self.branch(name).metadata)
            self.storage.set_branch_metadata(self._key, name, encoded)
            return self.branch(name)

    # -- whole-session operations ----------------------------------------

    def archive(self, archived: bool = True) -> None:
        """Hide the session from ``Store.sessions()``; ``archived=False`` undoes it."""
        with self.storage.transaction():
            self.storage.set_archived(self._key, now() if archived else None)

    def delete(self, *, permanently: bool = False) -> int:
        """Move the session to the trash (hidden from listings and search, restorable with
        ``Store.restore_session`` until the trash is emptied); with ``permanently=True``,
        remove it with all its nodes, refs and runs at once. Returns its node count. A
        session already in the trash stays there as it was (its time there is not restarted)."""
        with self.storage.transaction():
            if permanently:
                return self.storage.delete_session(self._key)
            if self.storage.session_row(self.id).trashed_at is None:
                self.storage.trash.set_trashed(self._key, now())
            self.trashed_at = self.storage.session_row(self.id).trashed_at
            return self.storage.upkeep.counts(self._key).nodes

    def prune(
        self, *, dry_run: bool = True, vacuum: bool = False, grace: float = maintenance.GRACE_SECONDS
    ) -> PruneReport:
        """``Store.prune`` for this session only."""
        return maintenance.prune(
            self.storage, dry_run=dry_run, vacuum=vacuum, session_key=self._key, grace=grace
        )

    def verify(self) -> VerifyReport:
        """``Store.verify`` for this session only."""
        return maintenance.verify(self.storage, session_key=self._key)


def _compare(what: str, expect: dict[str, Any] | None, current: dict[str, Any]) -> None:
    """``MetadataChanged`` unless ``expect`` is None (no compare-and-set) or equals
    ``current`` as JSON reads it back."""
    if expect is None:
        return
    if not isinstance(expect, dict):
        raise TypeError(f"expect must be a dict of metadata or None, not {type(expect).__name__}")
    if json.loads(encode_json(expect, "expected metadata")) != current:
        raise MetadataChanged(what, expect, current)


def _run_fields(run: Completion | dict[str, Any], when: str | None = None) -> tuple[Any, ...]:
    """The ``RUN_FIELDS`` values of a run to record (at ``when``, default now), checked."""
    fields = run.__dict__ if isinstance(run, Completion) else run
    return (
        check_text(fields.get("model"), "run model"),
        check_text(fields.get("provider"), "run provider"),
        encode_json(fields.get("params") or {}, "run params", default=str),
        encode_usage(fields.get("usage") or {}, "run usage", default=str),
        check_latency(fields.get("latency_ms")),
        check_text(fields.get("finish_reason"), "run finish_reason"),
        when or now(),
    )


_SOME_ID = "0192f4c1-8e3a-7b2c-9d4e-5f6a7b8c9d0e"


def _chosen_ids(ids: Sequence[str] | None, count: int) -> list[str] | None:
    """The caller's node ids for ``count`` payloads, checked as far as they can be
    without the store (well-formed, one each, none twice); None when the store names them."""
    if ids is None:
        return None
    if isinstance(ids, str):  # a lone id would zip as its characters
        raise InvalidPayload(f"ids must be a list of node ids, not the string {shown(ids)}")
    chosen = list(ids)
    if len(chosen) != count:
        raise InvalidPayload(f"ids has {len(chosen)} ids for {count} payloads: give one id per payload")
    seen: set[str] = set()
    for node_id in chosen:
        if not isinstance(node_id, str) or FULL_ID.fullmatch(node_id) is None:
            raise InvalidPayload(f"node id {shown(str(node_id))} is not a lower-case UUID like {_SOME_ID}")
        if node_id in seen:
            raise InvalidPayload(f"node id {node_id} is given twice: each node needs its own")
        seen.add(node_id)
    return chosen


def summary_text(result: Any) -> tuple[str, Completion | None]:
    """(the text, the Completion if any) of what a summarize function returned."""
    completion = result if isinstance(result, Completion) else None
    message = completion.message if completion is not None else result
    if isinstance(message, dict):
        message = message.get("content")
    if not isinstance(message, str) or not message.strip():
        raise InvalidPayload(f"summarize returned {str(result)[:80]!r}, not a summary text")
    return message, completion


class _Place(NamedTuple):
    """Where a new node goes: under ``key``/``id`` (None: a new root) at ``depth`` + 1."""

    key: int | None
    id: str | None
    depth: int
    kind: str | None
    branch_exists: bool
