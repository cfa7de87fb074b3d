"""The tree writer: every import, bulk write and copy, handed over record by record.

Contract:
- A feed reports records to a ``Sink``: ``session`` (a header; its node, run and
  ref lists are ignored), then ``run``, ``redaction``, ``node``, ``branch``,
  ``checkpoint`` and ``title`` records naming the session, and optionally ``end``
  (nothing more of that session follows). A node's run and its redaction come
  before the node. The feeds: the streaming parsers (``formats.native``,
  ``formats.pi``, ``formats.yoagent``), ``bulk.feed`` (whole ``ImportedSession``s:
  ``bulk.write_sessions`` and ``write_each``) and ``bulk.feed_stored`` (a session
  read from a store: ``copy``).
- ``Collector`` is the in-memory sink: it builds the ``ImportedSession``s the
  pure ``parse_*`` functions and ``bulk.read_session`` return.
- ``write_stream(storage, feed)`` runs ``feed(sink)`` with a ``StreamWriter``
  inside ONE write transaction: everything the feed reported, or nothing (a
  parser error or a refused record halfway rolls it all back). The writer holds
  a batch of ``BATCH`` encoded nodes, per open session its id, key, refs and the
  redactions whose node has not come, a cache of run keys (at most
  ``RUN_CACHE``), and nodes whose parent has not come yet; every other node is
  looked up in the store it has already been written to. So memory does not grow
  with the feed's nodes or payloads when parents come before children, as every
  exporter and the store write them; each payload dict is dropped as soon as it
  is encoded (unless ``consume=False``).
- The rules, each written here once: a node's depth follows from its parent,
  which must be in the feed or already a node of the same session (else
  ``InvalidTree``: a missing parent, a cycle, a declared depth that disagrees, a
  decision that is not the child of a pause, a node twice in one session). A
  session already stored merges by id, idempotently: equal nodes, runs and refs
  are left alone; its title and metadata win. ``ImportConflict`` refuses a node
  id stored with another parent, kind or payload or in another session, a run of
  another session, a checkpoint name that points elsewhere, a name that is a
  branch on one side and a checkpoint on the other, and a branch whose heads
  have diverged; a branch whose store head is an ancestor of the input's is
  fast-forwarded, one already ahead is kept. A recorded strip travels with its
  node: a new node arrives stripped with its record; a stored node that differs
  only in the stripped field is stripped the same way; a stored strip is kept
  whatever the input holds; a strip excuses no other difference, and one whose
  node is not in the feed or whose field does not hold its marker is refused.
  Refs are written when their session ends. Messages name the record
  (``ImportedNode.source``, e.g. ``line 7``), the id, and the session's
  ``source`` (e.g. ``conversation 2``) first.
- While the feed runs, the write lock is held: other writers wait (see
  docs/reliability.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

from .errors import Conflict, ImportConflict, InvalidPayload, InvalidTree, SessionTreeError
from .ids import now
from .model import check_latency, encode_json, encode_payload, encode_usage
from .names import check_name, check_text
from .records import ImportedSession, where

if TYPE_CHECKING:
    from .records import ImportedNode, ImportedRedaction, ImportedRef, ImportedRun, Progress
    from .storage import Storage
    from .storage.rows import StoredNode
    from .store import Store

BATCH = 1000  # nodes encoded and written together
RUN_CACHE = 10_000  # run keys remembered before the cache starts over


class Sink(Protocol):
    """Where a feed reports the records of session trees."""

    def session(self, s: ImportedSession) -> None: ...
    def run(self, session_id: str, run: ImportedRun) -> None: ...
    def redaction(self, session_id: str, r: ImportedRedaction) -> None: ...
    def node(self, session_id: str, node: ImportedNode) -> None: ...
    def branch(self, session_id: str, ref: ImportedRef) -> None: ...
    def checkpoint(self, session_id: str, ref: ImportedRef) -> None: ...
    def title(self, session_id: str, title: str | None) -> None: ...
    def end(self, session_id: str) -> None: ...


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

    def redaction(self, session_id: str, r: ImportedRedaction) -> None:
        self.by_id[session_id].redactions.append(r)

    def node(self, session_id: str, node: ImportedNode) -> None:
        self.by_id[session_id].nodes.append(node)

    def branch(self, session_id: str, ref: ImportedRef) -> None:
        self.by_id[session_id].branches.append(ref)

    def checkpoint(self, session_id: str, ref: ImportedRef) -> None:
        self.by_id[session_id].checkpoints.append(ref)

    def title(self, session_id: str, title: str | None) -> None:
        self.by_id[session_id].title = title

    def end(self, session_id: str) -> None:
        pass


@contextmanager
def named(source: str) -> Iterator[None]:
    """Errors raised inside name the session's ``source`` first (once)."""
    try:
        yield
    except SessionTreeError as e:
        if source and not str(e).startswith(source):
            raise type(e)(f"{source}: {e}") from None
        raise


@dataclass
class _Open:
    """A session being written: its key, its header (refs collected there), whether
    this import created it (then a later title is applied), the strips it holds, the
    redactions whose node has not come yet, and the first node key written since its
    header came (a stored node from there on came twice)."""

    key: int
    header: ImportedSession
    created: bool
    redacted: StoredRedactions
    strips: dict[str, ImportedRedaction] = field(default_factory=dict)
    since: int | None = None


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
    strip: ImportedRedaction | None = None


PROVISIONAL = -(2**40)
"""Where a flush's provisional node keys start: below every real key."""


@dataclass
class StreamWriter:
    """The sink that writes; use it through ``write_stream``."""

    storage: Storage
    progress: Progress | None = None
    total: int = 0  # the nodes the feed will report, when it knows (0: not known until the end)
    consume: bool = True  # drop each payload dict once encoded (the feed must not read it again)
    next_key: int = 0  # provisional keys inside a flush (see ``_insert``)
    sessions: dict[str, _Open] = field(default_factory=dict)
    batch: list[_Waiting] = field(default_factory=list)
    waiting: dict[str, list[_Waiting]] = field(default_factory=dict)  # parent id -> children
    waiting_ids: set[str] = field(default_factory=set)
    run_keys: dict[str, int] = field(default_factory=dict)
    ids: list[str] = field(default_factory=list)  # the sessions written, in order
    strips_written: list[tuple[str, ImportedRedaction]] = field(default_factory=list)
    done: int = 0
    arrived: int = 0

    def _named(self, session_id: str) -> AbstractContextManager[None]:
        return named(self.sessions[session_id].header.source)

    def session(self, s: ImportedSession) -> None:
        if s.id in self.sessions:  # the same session again: the first one ends here
            self.end(s.id)
        with named(s.source):
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
        self.ids.append(s.id)

    def run(self, session_id: str, run: ImportedRun) -> None:
        open_ = self.sessions[session_id]
        if len(self.run_keys) >= RUN_CACHE:
            self.run_keys.clear()
        with self._named(session_id):
            self.run_keys[run.id] = write_run(self.storage, open_.key, open_.header, run)

    def redaction(self, session_id: str, r: ImportedRedaction) -> None:
        strips = self.sessions[session_id].strips
        if r.node_id in strips:
            with self._named(session_id):
                raise InvalidTree(f"session {session_id}: node {r.node_id} has two redactions")
        strips[r.node_id] = r

    def node(self, session_id: str, node: ImportedNode) -> None:
        self.arrived += 1
        with self._named(session_id):
            strip = self.sessions[session_id].strips.pop(node.id, None)
            if strip is not None:  # checked before the payload is consumed
                check_redaction(node, strip)
            text = encode_node(node, self.consume)
        self.batch.append(_Waiting(session_id, node, text, self.arrived, strip))
        if len(self.batch) >= BATCH:
            self.flush()

    def branch(self, session_id: str, ref: ImportedRef) -> None:
        self.sessions[session_id].header.branches.append(ref)

    def checkpoint(self, session_id: str, ref: ImportedRef) -> None:
        self.sessions[session_id].header.checkpoints.append(ref)

    def title(self, session_id: str, title: str | None) -> None:
        open_ = self.sessions[session_id]
        if open_.created:  # a session already stored keeps its title
            with self._named(session_id):
                self.storage.set_title(open_.key, check_text(title, "session title"))

    def end(self, session_id: str) -> None:
        """The session is complete: write its nodes, check them all placed, write its refs."""
        self.flush()
        if any(w.session_id == session_id for ws in self.waiting.values() for w in ws):
            with self._named(session_id):
                raise InvalidTree(self._why_waiting())
        open_ = self.sessions.pop(session_id)
        self.run_keys.clear()  # a session's nodes name its own runs; any other is looked up
        with named(open_.header.source):
            if open_.strips:
                raise InvalidTree(
                    f"session {session_id}: a redaction names node {next(iter(open_.strips))},"
                    " which is not in the input"
                )
            check_refs(open_.header)
            write_refs(self.storage, open_.key, open_.header, {})

    # -- nodes ------------------------------------------------------------------

    def flush(self) -> None:
        """Write the batch: every node whose parent is known; the others wait for it."""
        batch, self.batch = self.batch, []
        seen: set[str] = set()
        for item in batch:
            if item.node.id in seen or item.node.id in self.waiting_ids:
                with self._named(item.session_id):
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
            with self._named(item.session_id):
                self._merge(item, old)
            placed[item.node.id] = _Placed(old.key, old.session_id, old.depth, old.kind)
            self.done += 1
        outside = {i.node.parent_id for i in todo if i.node.parent_id is not None} - seen
        for id, row in self.storage.nodes_by_ids(sorted(outside)).items():
            placed.setdefault(id, _Placed(row.key, row.session_id, row.depth, row.kind))
        rows: list[tuple[Any, ...]] = []
        first = self.next_key = PROVISIONAL
        queue = list(reversed(todo))
        while queue:
            item = queue.pop()
            with self._named(item.session_id):
                released = self._place(item, placed, rows)
            queue.extend(reversed(released))
        self._insert(rows, first)

    def _merge(self, item: _Waiting, old: StoredNode) -> None:
        """Check an input node against the stored one of its id (``old``); strip it as the input does."""
        open_ = self.sessions[item.session_id]
        if open_.since is not None and old.key >= open_.since:
            raise InvalidTree(f"{where(item.node)} appears twice")
        strip = item.strip
        if check_same(item.node, item.text, item.session_id, old, open_.redacted, strip) and strip:
            self.storage.trash.redact(
                strip.node_id, strip.field, strip.marker, strip.reason, strip.created_at
            )
        check_depth(item.node, old.depth)  # which its parents gave it

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
        if item.strip is not None:  # written stripped: the record that says so comes with it
            self.strips_written.append((item.session_id, item.strip))
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
        for open_ in self.sessions.values():
            if open_.since is None:
                open_.since = real
        session_id = self._session_of(rows)
        with self._named(session_id):
            try:
                self.storage.insert_nodes(rows, keys_from=real)
            except Conflict as e:  # the schema refused: a second decision for a pause
                why = f"a pause would get a second decision ({e})"
                raise InvalidTree(f"session {session_id}: {why}") from None
            except SessionTreeError as e:
                raise InvalidTree(f"session {session_id}: {e}") from None
        for _, strip in self.strips_written:
            self.storage.trash.record_redaction(
                strip.node_id, strip.field, strip.bytes, strip.marker, strip.reason, strip.created_at
            )
        self.strips_written.clear()
        self.done += len(rows)
        self._tick()

    def _session_of(self, rows: list[tuple[Any, ...]]) -> str:
        keys = {o.key: id for id, o in self.sessions.items()}
        return keys.get(rows[0][1], "?")

    def _tick(self) -> None:
        if self.progress is not None:
            self.progress(self.done, self.total)

    # -- the end ------------------------------------------------------------------

    def finish(self) -> list[str]:
        """End every open session; the ids of the sessions written, in order."""
        self.flush()
        if self.waiting:
            first = min((w for ws in self.waiting.values() for w in ws), key=lambda w: w.order)
            with self._named(first.session_id):
                raise InvalidTree(self._why_waiting())
        for session_id in list(self.sessions):
            self.end(session_id)
        if self.progress is not None:
            self.progress(self.done, self.done)
        return self.ids

    def _why_waiting(self) -> str:
        """The message for nodes whose parent never came: walked up from the first of
        them, a missing parent or a cycle."""
        items = sorted((w for ws in self.waiting.values() for w in ws), key=lambda w: w.order)
        by_id = {w.node.id: w for w in items}
        chain = [items[0]]
        while True:
            parent_id = chain[-1].node.parent_id
            if parent_id not in by_id:
                return f"{where(chain[-1].node)}: parent {parent_id} is neither in the input nor in the store"
            if (parent := by_id[parent_id]) in chain:
                break
            chain.append(parent)
        cycle = chain[chain.index(parent) :]
        return f"{where(cycle[0].node)} is its own ancestor: cycle {' -> '.join(w.node.id for w in cycle)}"


def storage_of(target: Store | Storage) -> Storage:
    """The storage of a ``Store``, or the ``Storage`` itself."""
    return cast("Storage", getattr(target, "storage", target))


def write_stream(
    target: Store | Storage,
    feed: Callable[[Sink], None],
    progress: Progress | None = None,
    *,
    total: int = 0,
    consume: bool = True,
) -> list[str]:
    """Run ``feed`` on a ``StreamWriter`` in one transaction; the ids of the sessions written.
    ``total``: the nodes the feed will report, when known (for ``progress``)."""
    storage = storage_of(target)
    with storage.transaction():
        writer = StreamWriter(storage, progress, total, consume)
        feed(writer)
        return writer.finish()


# -- the rules, one function each ---------------------------------------------------

_CONSUMED: dict[str, Any] = {}  # what a consumed node's payload becomes (its text is kept)


def encode_node(node: ImportedNode, consume: bool = False) -> str:
    """The node's payload as stored text (validated by kind); with ``consume`` the
    node's payload dict is dropped (the caller must not read it afterwards)."""
    role = node.payload.get("role") if isinstance(node.payload, dict) else None
    if node.kind == "message" and isinstance(role, list | dict):  # the role check below needs a hashable
        kind = "an array" if isinstance(role, list) else "an object"
        raise InvalidTree(f"{where(node)}: a message's 'role' should be a string, got {kind}")
    try:
        text = encode_payload(node.payload, node.kind)
    except InvalidPayload as e:
        raise InvalidTree(f"{where(node)}: {e}") from None
    if consume:
        node.payload = _CONSUMED
    return text


def check_redaction(node: ImportedNode, r: ImportedRedaction) -> None:
    """Refuse a redaction its node does not back: its field must hold its marker."""
    for value, what in (
        (r.field, "field"),
        (r.marker, "marker"),
        (r.reason, "reason"),
        (r.created_at, "time"),
    ):
        if not isinstance(value, str):
            raise InvalidTree(f"{where(node)}: the redaction's {what} is not text")
        check_text(value, f"{where(node)}: the redaction's {what}")
    if isinstance(r.bytes, bool) or not isinstance(r.bytes, int) or r.bytes < 0:
        raise InvalidTree(f"{where(node)}: the redaction's bytes is not a whole number >= 0")
    if not isinstance(node.payload, dict) or node.payload.get(r.field) != r.marker:
        raise InvalidTree(
            f"{where(node)}: it is recorded as stripped, but its {r.field!r} does not hold the marker"
        )


def check_refs(session: ImportedSession) -> None:
    """Refuse a branch or checkpoint name that is invalid or used twice."""
    for ref in (*session.branches, *session.checkpoints):
        try:
            check_name(ref.name, "branch or checkpoint")
        except Conflict as e:
            raise InvalidTree(f"session {session.id}: {e}") from None
    names = [r.name for r in (*session.branches, *session.checkpoints)]
    if len(names) != len(set(names)):
        dup = next(n for n in names if names.count(n) > 1)
        raise InvalidTree(f"session {session.id}: the name {dup!r} is used twice")


def check_depth(node: ImportedNode, depth: int) -> None:
    """Refuse a declared depth (native files carry one) other than the node's depth."""
    if node.depth is not None and node.depth != depth:
        raise InvalidTree(
            f"{where(node)} declares depth {node.depth}, but its parents put it at depth {depth}"
        )


def check_decision(node: ImportedNode, parent_kind: str | None) -> None:
    """A decision must be the child of a pause: the same rule Session.append enforces."""
    if node.kind == "decision" and parent_kind != "pause":
        raise InvalidTree(f"{where(node)}: a decision must be the child of a pause")


class StoredRedactions:
    """The redactions the store holds for one session's nodes (node id -> field), read
    the first time a stored node differs from the input, then kept."""

    def __init__(self, storage: Storage, session_key: int) -> None:
        self.storage, self.session_key = storage, session_key
        self._fields: dict[str, str] | None = None

    def field(self, node_id: str) -> str | None:
        if self._fields is None:
            self._fields = {r["node"]: r["field"] for r in self.storage.trash.redactions(self.session_key)}
        return self._fields.get(node_id)


def check_same(
    node: ImportedNode,
    text: str,
    session_id: str,
    old: StoredNode,
    here: StoredRedactions | None = None,
    strip: ImportedRedaction | None = None,
) -> bool:
    """Refuse an input node whose id is stored (``old``: a ``nodes_by_ids`` row) as
    something else; an equal one is merged (left alone). A recorded strip excuses a
    difference in its field only: the store's own (``here``; the stored node stays as
    it is), or the input's (``strip``; True: the stored node must be stripped so)."""
    if old.session_id != session_id:
        raise ImportConflict(f"{where(node)} already exists in another session, {old.session_id}")
    if (old.parent_id, old.kind) == (node.parent_id, node.kind):
        stored, given = json.loads(old.payload), json.loads(text)
        if stored == given:
            return False
        kept = here.field(node.id) if here is not None else None
        if kept is not None and _same_but(stored, given, kept):
            return False  # stripped here already: a merge never brings the text back
        if strip is not None and kept is None and _same_but(stored, given, strip.field):
            return True
    raise ImportConflict(
        f"{where(node)} already exists with a different parent, kind or payload; refusing to import over it"
    )


def _same_but(a: Any, b: Any, field: str) -> bool:
    """Whether two payloads are equal but for ``field``."""
    if not isinstance(a, dict) or not isinstance(b, dict):
        return False
    return {k: v for k, v in a.items() if k != field} == {k: v for k, v in b.items() if k != field}


def write_run(storage: Storage, session_key: int, s: ImportedSession, run: ImportedRun) -> int:
    """The key of the run: inserted when new, refused when it belongs to another session."""
    found = storage.run_handle(run.id)
    if found is not None:
        if found.session_id != s.id:
            raise ImportConflict(f"run {run.id} already exists in another session, {found.session_id}")
        return found.key
    return storage.insert_run(
        run.id,
        session_key,
        (
            check_text(run.model, f"run {run.id}: model"),
            check_text(run.provider, f"run {run.id}: provider"),
            encode_json(run.params, "run params"),
            encode_usage(run.usage, f"run {run.id}: usage"),
            check_latency(run.latency_ms, f"run {run.id}: latency_ms"),
            check_text(run.finish_reason, f"run {run.id}: finish_reason"),
            check_text(run.created_at, f"run {run.id}: created_at") or s.created_at,
        ),
    )


def stored_run(storage: Storage, s: ImportedSession, node: ImportedNode) -> int:
    """The key of a run the input does not carry: it must be a run of this session already."""
    found = storage.run_handle(node.run_id or "")
    if found is None or found.session_id != s.id:
        raise InvalidTree(
            f"{where(node)}: run {node.run_id} is neither in the input nor a run of this session"
        )
    return found.key


def write_refs(storage: Storage, key: int, s: ImportedSession, node_keys: dict[str, int]) -> None:
    """Write the session's checkpoints and branches (after its nodes); ``node_keys``
    need not hold the stored nodes they name."""
    node_keys = _with_session_refs(storage, s, node_keys)
    _write_checkpoints(storage, key, s, node_keys)
    _write_branches(storage, key, s, node_keys)


def _target(s: ImportedSession, what: str, ref: ImportedRef, node_keys: dict[str, int]) -> int | None:
    """The key of the node a ref points at, which must be a node of this session."""
    if ref.node_id is None:
        return None
    if ref.node_id not in node_keys:
        raise InvalidTree(
            f"session {s.id}: {what} {ref.name!r} points at {ref.node_id},"
            " which is not a node of this session"
        )
    return node_keys[ref.node_id]


def _write_checkpoints(
    storage: Storage, session_key: int, s: ImportedSession, node_keys: dict[str, int]
) -> None:
    for cp in s.checkpoints:
        target = _target(s, "checkpoint", cp, node_keys)
        if target is None:
            raise InvalidTree(f"session {s.id}: checkpoint {cp.name!r} points at nothing")
        found = storage.ref(session_key, cp.name)
        if found is None:
            storage.insert_checkpoint(session_key, cp.name, target, cp.created_at or now())
        elif (found.kind, found.id) != ("checkpoint", cp.node_id):
            raise ImportConflict(
                f"session {s.id}: the store has a {found.kind} {cp.name!r} at {found.id};"
                f" the input has a checkpoint at {cp.node_id}"
            )


def _with_session_refs(storage: Storage, s: ImportedSession, node_keys: dict[str, int]) -> dict[str, int]:
    """``node_keys`` plus the keys of the nodes the input's refs name that are already stored."""
    wanted = [r.node_id for r in (*s.branches, *s.checkpoints) if r.node_id and r.node_id not in node_keys]
    extra = {i: row.key for i, row in storage.nodes_by_ids(wanted).items() if row.session_id == s.id}
    return {**node_keys, **extra} if extra else node_keys


def _write_branches(
    storage: Storage, session_key: int, s: ImportedSession, node_keys: dict[str, int]
) -> None:
    for b in s.branches:
        target = _target(s, "branch", b, node_keys)
        found = storage.ref(session_key, b.name)
        if found is None:
            created = b.created_at or now()
            storage.insert_branch(
                session_key, b.name, target, encode_json(b.metadata, "branch metadata"), created, b.updated_at
            )
            continue
        head_key, head = found.key, found.id
        if found.kind != "branch":
            raise ImportConflict(
                f"session {s.id}: {b.name!r} is a checkpoint in the store and a branch in the input"
            )
        if target is None or head == b.node_id:
            continue
        if head_key is None or storage.is_ancestor(head_key, target):  # fast-forward
            storage.set_head(session_key, b.name, target, b.updated_at or now())
        elif not storage.is_ancestor(target, head_key):  # store ahead of the input: keep it
            raise ImportConflict(
                f"session {s.id}: branch {b.name!r} has diverged: the store's head is {head},"
                f" the input's is {b.node_id}"
            )
