"""Streamed imports: sessions handed over record by record, written in one transaction.

Contract:
- A streaming parser (``formats.native``, ``formats.pi``) reports what it reads
  to a ``Sink``: ``session`` (a header; its node, run and ref lists are
  ignored), then ``run``, ``node``, ``branch``, ``checkpoint`` and ``title``
  records naming the session. A node's run comes before the node.
- ``Collector`` is the in-memory sink: it builds the ``ImportedSession``s the
  pure ``parse_*`` functions return (written later by ``bulk.write_sessions``).
- ``write_stream(store, feed)`` runs ``feed(sink)`` with a ``StreamWriter``
  inside ONE ``BEGIN IMMEDIATE`` transaction: everything the feed reported, or
  nothing (a parser error or a refused record halfway rolls it all back).
  The writer holds a batch of ``BATCH`` encoded nodes, per session its id,
  key and refs (a few hundred bytes), a cache of run keys (at most
  ``RUN_CACHE``), and nodes whose parent has not come yet; every other node
  is looked up in the store it has already been written to. So memory does
  not grow with the file's nodes or payloads when parents come before
  children, as every exporter writes them; each payload dict is dropped as
  soon as it is encoded.
- It applies ``bulk.write_sessions``'s rules (merge by id, conflicts, depths,
  decisions under pauses, refs written last, a stored strip kept) with the same
  messages, except that a node naming a run must come after that run. (Streamed
  formats carry no redactions: a copy, which does, goes through ``write_sessions``.)
- While the feed runs, the write lock is held: other writers wait (see
  docs/reliability.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from .bulk import (
    ImportedNode,
    ImportedRef,
    ImportedRun,
    ImportedSession,
    Progress,
    StoredRedactions,
    check_decision,
    check_depth,
    check_refs,
    check_same,
    encode_node,
    stored_run,
    where,
    write_refs,
    write_run,
)
from .errors import Conflict, InvalidTree, SessionTreeError
from .model import encode_json
from .names import check_text

if TYPE_CHECKING:
    from .storage import Storage
    from .store import Store

BATCH = 1000  # nodes encoded and written together
RUN_CACHE = 10_000  # run keys remembered before the cache starts over


class Sink(Protocol):
    """Where a streaming parser reports the records it reads."""

    def session(self, s: ImportedSession) -> None: ...
    def run(self, session_id: str, run: ImportedRun) -> None: ...
    def node(self, session_id: str, node: ImportedNode) -> None: ...
    def branch(self, session_id: str, ref: ImportedRef) -> None: ...
    def checkpoint(self, session_id: str, ref: ImportedRef) -> None: ...
    def title(self, session_id: str, title: str | None) -> None: ...


class Collector:
    """The in-memory sink: ``sessions`` in the order their headers came."""

    def __init__(self) -> None:
        self.by_id: dict[str, ImportedSession] = {}

    @property
    def sessions(self) -> list[ImportedSession]:
        return list(self.by_id.values())

    def session(self, s: ImportedSession) -> None:
        self.by_id[s.id] = s

    def run(self, session_id: str, run: ImportedRun) -> None:
        self.by_id[session_id].runs.append(run)

    def node(self, session_id: str, node: ImportedNode) -> None:
        self.by_id[session_id].nodes.append(node)

    def branch(self, session_id: str, ref: ImportedRef) -> None:
        self.by_id[session_id].branches.append(ref)

    def checkpoint(self, session_id: str, ref: ImportedRef) -> None:
        self.by_id[session_id].checkpoints.append(ref)

    def title(self, session_id: str, title: str | None) -> None:
        self.by_id[session_id].title = title


@dataclass
class _Open:
    """A session being written: its key, its header (refs collected there), whether
    this import created it (then a later title is applied), the strips it holds."""

    key: int
    header: ImportedSession
    created: bool
    redacted: StoredRedactions


@dataclass
class _Placed:
    key: int
    session_id: str
    depth: int
    kind: str


@dataclass
class _Waiting:
    session_id: str
    node: ImportedNode
    text: str
    order: int = 0


PROVISIONAL = -(2**40)
"""Where a flush's provisional node keys start: below every real key."""


@dataclass
class StreamWriter:
    """The sink that writes; use it through ``write_stream``."""

    storage: Storage
    progress: Progress | None = None
    first_key: int | None = None  # nodes this import writes get keys from here on
    next_key: int = 0  # provisional keys inside a flush (see ``_insert``)
    sessions: dict[str, _Open] = field(default_factory=dict)
    batch: list[_Waiting] = field(default_factory=list)
    waiting: dict[str, list[_Waiting]] = field(default_factory=dict)  # parent id -> children
    waiting_ids: set[str] = field(default_factory=set)
    run_keys: dict[str, int] = field(default_factory=dict)
    done: int = 0
    arrived: int = 0

    def session(self, s: ImportedSession) -> None:
        key = self.storage.session_key(s.id)
        created = key is None
        if key is None:
            key = self.storage.insert_session(
                s.id,
                check_text(s.title, "session title"),
                encode_json(s.metadata, "session metadata"),
                s.created_at,
                s.archived_at,
            )
        # Kept until the end for the refs: only what the checks and messages need.
        header = ImportedSession(s.id, None, {}, s.created_at, source=s.source)
        self.sessions[s.id] = _Open(key, header, created, StoredRedactions(self.storage, key))

    def run(self, session_id: str, run: ImportedRun) -> None:
        open_ = self.sessions[session_id]
        if len(self.run_keys) >= RUN_CACHE:
            self.run_keys.clear()
        self.run_keys[run.id] = write_run(self.storage, open_.key, open_.header, run)

    def node(self, session_id: str, node: ImportedNode) -> None:
        self.arrived += 1
        self.batch.append(_Waiting(session_id, node, encode_node(node, consume=True), self.arrived))
        if len(self.batch) >= BATCH:
            self.flush()

    def branch(self, session_id: str, ref: ImportedRef) -> None:
        self.sessions[session_id].header.branches.append(ref)

    def checkpoint(self, session_id: str, ref: ImportedRef) -> None:
        self.sessions[session_id].header.checkpoints.append(ref)

    def title(self, session_id: str, title: str | None) -> None:
        open_ = self.sessions[session_id]
        if open_.created:  # a session already stored keeps its title (as write_sessions does)
            self.storage.set_title(open_.key, check_text(title, "session title"))

    # -- nodes ------------------------------------------------------------------

    def flush(self) -> None:
        """Write the batch: every node whose parent is known; the others wait for it."""
        batch, self.batch = self.batch, []
        seen: set[str] = set()
        for item in batch:
            if item.node.id in seen or item.node.id in self.waiting_ids:
                raise InvalidTree(f"{where(item.node)} appears twice")
            seen.add(item.node.id)
        existing = self.storage.nodes_by_ids([i.node.id for i in batch])
        placed: dict[str, _Placed] = {}
        todo = []
        for item in batch:
            old = existing.get(item.node.id)
            if old is None:
                todo.append(item)
                continue
            if self.first_key is not None and old[0] >= self.first_key:
                raise InvalidTree(f"{where(item.node)} appears twice")
            check_same(item.node, item.text, item.session_id, old, self.sessions[item.session_id].redacted)
            check_depth(item.node, old[5])  # the stored node's depth, which its parents gave it
            placed[item.node.id] = _Placed(old[0], old[1], old[5], old[3])
            self.done += 1
        outside = {i.node.parent_id for i in todo if i.node.parent_id is not None} - seen
        for id, row in self.storage.nodes_by_ids(sorted(outside)).items():
            placed.setdefault(id, _Placed(row[0], row[1], row[5], row[3]))
        rows: list[tuple[Any, ...]] = []
        first = self.next_key = PROVISIONAL
        queue = list(reversed(todo))
        while queue:
            item = queue.pop()
            released = self._place(item, placed, rows)
            queue.extend(reversed(released))
        self._insert(rows, first)

    def _place(
        self, item: _Waiting, placed: dict[str, _Placed], rows: list[tuple[Any, ...]]
    ) -> list[_Waiting]:
        """Give the node its key and row when its parent is known; else let it wait."""
        node, parent_id = item.node, item.node.parent_id
        parent = placed.get(parent_id) if parent_id is not None else None
        if parent_id is not None and parent is None:
            self.waiting.setdefault(parent_id, []).append(item)
            self.waiting_ids.add(node.id)
            return []
        if parent is not None and parent.session_id != item.session_id:
            raise InvalidTree(
                f"{where(node)}: parent {parent_id} belongs to another session, {parent.session_id}"
            )
        depth = 0 if parent is None else parent.depth + 1
        check_depth(node, depth)
        check_decision(node, parent.kind if parent else None)
        open_ = self.sessions[item.session_id]
        run_key = None
        if node.run_id is not None:
            run_key = self.run_keys.get(node.run_id) or stored_run(self.storage, open_.header, node)
        key = self.next_key
        self.next_key += 1
        rows.append(
            (
                node.id,
                open_.key,
                None if parent is None else parent.key,
                depth,
                node.kind,
                item.text,
                node.created_at,
                run_key,
            )
        )
        placed[node.id] = _Placed(key, item.session_id, depth, node.kind)
        released = self.waiting.pop(node.id, [])
        self.waiting_ids.difference_update(w.node.id for w in released)
        return released

    def _insert(self, rows: list[tuple[Any, ...]], first: int) -> None:
        """Insert a flush's rows under keys reserved now; their parents inside the flush
        were named by provisional keys from ``first`` (negative: no real key is one)."""
        if not rows:
            self._tick()
            return
        real = self.storage.reserve_node_keys(len(rows))
        shift = real - first
        rows = [
            (*row[:2], row[2] + shift if row[2] is not None and row[2] < 0 else row[2], *row[3:])
            for row in rows
        ]
        if self.first_key is None:
            self.first_key = real
        try:
            self.storage.insert_nodes(rows, keys_from=real)
        except Conflict as e:  # the schema refused: a second decision for a pause
            raise InvalidTree(
                f"session {self._session_of(rows)}: a pause would get a second decision ({e})"
            ) from None
        except SessionTreeError as e:
            raise InvalidTree(f"session {self._session_of(rows)}: {e}") from None
        self.done += len(rows)
        self._tick()

    def _session_of(self, rows: list[tuple[Any, ...]]) -> str:
        keys = {o.key: id for id, o in self.sessions.items()}
        return keys.get(rows[0][1], "?")

    def _tick(self) -> None:
        if self.progress is not None:
            self.progress(self.done, 0)  # the total is not known until the end

    # -- the end ------------------------------------------------------------------

    def finish(self) -> list[str]:
        """Write what is left and every session's refs; the sessions' ids in order."""
        self.flush()
        if self.waiting:
            raise InvalidTree(self._why_waiting())
        for open_ in self.sessions.values():
            try:
                check_refs(open_.header)
                write_refs(self.storage, open_.key, open_.header, {})
            except SessionTreeError as e:
                source = open_.header.source
                if source and not str(e).startswith(source):
                    raise type(e)(f"{source}: {e}") from None
                raise
        if self.progress is not None:
            self.progress(self.done, self.done)
        return list(self.sessions)

    def _why_waiting(self) -> str:
        """The message for nodes whose parent never came: a missing parent or a cycle."""
        items = sorted((w for ws in self.waiting.values() for w in ws), key=lambda w: w.order)
        by_id = {w.node.id: w for w in items}
        for item in items:
            parent_id = item.node.parent_id
            if parent_id not in by_id:
                return f"{where(item.node)}: parent {parent_id} is neither in the input nor in the store"
        chain = [items[0]]
        while (parent := by_id[chain[-1].node.parent_id or ""]) not in chain:
            chain.append(parent)
        cycle = chain[chain.index(parent) :]
        return f"{where(cycle[0].node)} is its own ancestor: cycle {' -> '.join(w.node.id for w in cycle)}"


def write_stream(store: Store, feed: Callable[[Sink], None], progress: Progress | None = None) -> list[str]:
    """Run ``feed`` on a ``StreamWriter`` in one transaction; the ids of the sessions written."""
    storage = store.storage
    with storage.transaction():
        writer = StreamWriter(storage, progress)
        feed(writer)
        return writer.finish()
