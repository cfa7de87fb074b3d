"""Bulk reads and writes of whole session trees: the store side of import and export.

Contract:
- ``ImportedSession`` (with ``ImportedNode``, ``ImportedRef``, ``ImportedRun``)
  is a plain in-memory tree that format parsers build without touching SQL.
- ``write_sessions(store, sessions)`` writes any number of them in ONE
  ``BEGIN IMMEDIATE`` transaction: all of it or none of it. It computes each
  node's depth from its parent, accepts nodes in any order (parents are
  sorted first), and refuses a parent that is neither in the input nor
  already a node of the same session, a cycle, and a declared depth that
  disagrees (``InvalidTree``). ``write_each`` does the same for sessions taken one
  at a time from an iterator (one conversation in memory at once).
- Writing a session that already exists merges by id and is idempotent:
  nodes, runs, refs already present and equal are left alone; the session's
  title and metadata in the store win. It refuses (``ImportConflict``,
  nothing written) a node id that exists with another parent, kind or
  payload or in another session; a checkpoint name that points elsewhere; a
  name that is a branch on one side and a checkpoint on the other; and a
  branch whose store head and input head have diverged. A branch whose store
  head is an ancestor of the input head is fast-forwarded; one already ahead
  of the input head is left where it is.
- Recorded strips (``ImportedRedaction``: retention's redactions) travel with
  their session: a new node arrives with its stripped payload and its record;
  a stored node that differs from the input only in the field the input
  records as stripped is stripped the same way (``Storage.redact``); a stored
  node already stripped keeps its strip, whatever the input holds in that
  field. A merge never brings back text a strip removed, and a strip excuses
  no other difference. A redaction whose node is not in the input, or whose
  field does not hold its marker, is refused (``InvalidTree``).
- ``read_session(store, id)`` returns one session as an ``ImportedSession``,
  read inside one transaction so the snapshot is consistent, its redactions too.
- Error messages name the record (``ImportedNode.source``, e.g. ``line 7``)
  and the id.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import Conflict, ImportConflict, InvalidPayload, InvalidTree, SessionTreeError
from .ids import now
from .model import check_latency, encode_json, encode_payload
from .names import check_name, check_text

if TYPE_CHECKING:
    from .storage import Storage
    from .store import Store

Progress = Callable[[int, int], None]
PROGRESS_EVERY = 1000


@dataclass(slots=True)  # an import may hold millions: no per-node __dict__
class ImportedNode:
    id: str
    parent_id: str | None
    kind: str
    payload: dict[str, Any]
    created_at: str
    run_id: str | None = None
    depth: int | None = None  # when given (native files), it must match the computed depth
    source: str = ""  # where the node came from, for error messages: "line 7", "node 'abc'"


@dataclass
class ImportedRef:
    """A branch (``node_id`` may be None: an empty branch) or a checkpoint."""

    name: str
    node_id: str | None
    created_at: str | None = None
    updated_at: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class ImportedRun:
    id: str
    model: str | None = None
    provider: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)
    latency_ms: float | None = None
    finish_reason: str | None = None
    created_at: str | None = None


@dataclass
class ImportedRedaction:
    """A recorded strip: ``field`` of node ``node_id`` holds ``marker`` instead of the
    ``bytes`` bytes of text it had (see ``retention``)."""

    node_id: str
    field: str
    bytes: int
    marker: str
    reason: str
    created_at: str


@dataclass
class ImportedSession:
    id: str
    title: str | None
    metadata: dict[str, Any]
    created_at: str
    nodes: list[ImportedNode] = field(default_factory=list)
    branches: list[ImportedRef] = field(default_factory=list)
    checkpoints: list[ImportedRef] = field(default_factory=list)
    runs: list[ImportedRun] = field(default_factory=list)
    archived_at: str | None = None
    source: str = ""  # e.g. "conversation 2", prefixed to this session's error messages
    notes: list[str] = field(default_factory=list)  # what the import should say (not stored)
    redactions: list[ImportedRedaction] = field(default_factory=list)


# -- writing ---------------------------------------------------------------


def write_sessions(
    store: Store,
    sessions: Sequence[ImportedSession],
    progress: Progress | None = None,
    *,
    consume: bool = False,
) -> list[str]:
    """Write (or merge) every session in one transaction; return their ids in order.

    With ``consume`` the nodes' payload dicts are dropped as soon as they are
    encoded, so a big import never holds a payload twice (as a dict and as text);
    the caller must not read them afterwards.
    """
    encoded = [_encode(s, consume) for s in sessions]  # validate everything before taking the lock
    total = sum(len(s.nodes) for s in sessions)
    done = [0]

    def tick(n: int) -> None:
        done[0] += n
        if progress is not None:
            progress(done[0], total)

    storage = store.storage
    with storage.transaction():
        for session, texts in zip(sessions, encoded, strict=True):
            _write_named(storage, session, texts, tick)
    if progress is not None and total == 0:
        progress(0, 0)
    return [s.id for s in sessions]


def write_each(
    store: Store, sessions: Iterable[ImportedSession], progress: Progress | None = None
) -> list[str]:
    """``write_sessions`` for sessions made as they are asked for (a parser reading a
    file one conversation at a time): each is encoded, its payloads consumed, and
    written before the next is taken, all in ONE transaction, so memory holds one
    session, not the file. The same rules and messages; a session is checked only
    when its turn comes (an error rolls back the ones before it). The total is not
    known until the end: ``progress(done, 0)`` until then, as a streamed import.
    The sessions are consumed: each one's nodes are cleared once written."""
    done = [0]

    def tick(n: int) -> None:
        done[0] += n
        if progress is not None:
            progress(done[0], 0)

    ids = []
    storage = store.storage
    with storage.transaction():
        for session in sessions:
            _write_named(storage, session, _encode(session, consume=True), tick)
            ids.append(session.id)
            session.nodes.clear()  # the parser's frame still holds the session until the next
    if progress is not None:
        progress(done[0], done[0])
    return ids


def _write_named(
    storage: Storage, session: ImportedSession, texts: dict[str, str], tick: Callable[[int], None]
) -> None:
    """``_write_one``; its errors name the session's source once."""
    try:
        _write_one(storage, session, texts, tick)
    except SessionTreeError as e:
        if session.source and not str(e).startswith(session.source):
            raise type(e)(f"{session.source}: {e}") from None
        raise


def where(node: ImportedNode) -> str:
    """How error messages name a node: its record in the input and its id."""
    return f"{node.source}: node {node.id}" if node.source else f"node {node.id}"


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


def _encode(session: ImportedSession, consume: bool = False) -> dict[str, str]:
    texts = {}
    redacted = _redactions(session)
    for node in session.nodes:
        if node.id in texts:
            raise InvalidTree(f"{where(node)} appears twice")
        if node.id in redacted:  # checked before the payload may be consumed
            check_redaction(node, redacted.pop(node.id))
        texts[node.id] = encode_node(node, consume)
    if redacted:
        raise InvalidTree(
            f"session {session.id}: a redaction names node {next(iter(redacted))}, which is not in the input"
        )
    check_refs(session)
    return texts


def _redactions(session: ImportedSession) -> dict[str, ImportedRedaction]:
    """The session's redactions by node id; at most one a node (as the schema keeps them)."""
    found: dict[str, ImportedRedaction] = {}
    for r in session.redactions:
        if r.node_id in found:
            raise InvalidTree(f"session {session.id}: node {r.node_id} has two redactions")
        found[r.node_id] = r
    return found


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


def _write_one(
    storage: Storage, s: ImportedSession, texts: dict[str, str], tick: Callable[[int], None]
) -> None:
    key = storage.session_key(s.id)
    if key is None:
        key = storage.insert_session(
            s.id,
            check_text(s.title, "session title"),
            encode_json(s.metadata, "session metadata"),
            s.created_at,
            s.archived_at,
        )
    run_keys = _write_runs(storage, key, s)
    by_id = {n.id: n for n in s.nodes}
    existing = storage.nodes_by_ids(list(by_id))
    outside_ids = sorted(
        {n.parent_id for n in s.nodes if n.parent_id is not None and n.parent_id not in by_id}
    )
    outside = storage.nodes_by_ids(outside_ids)
    depths = _depths(s, by_id, {i: (row[1], row[5], row[3]) for i, row in outside.items()})
    node_keys = {i: row[0] for i, row in outside.items()}
    redacted = {r.node_id: r for r in s.redactions}
    here = StoredRedactions(storage, key)
    new_nodes = []
    for node in sorted(s.nodes, key=lambda n: depths[n.id]):
        check_depth(node, depths[node.id])
        parent = by_id.get(node.parent_id or "")
        stored = outside.get(node.parent_id or "")
        check_decision(node, parent.kind if parent else stored[3] if stored else None)
        old = existing.get(node.id)
        if old is None:
            new_nodes.append(node)
            continue
        node_keys[node.id] = old[0]
        strip = redacted.get(node.id)
        if check_same(node, texts[node.id], s.id, old, here, strip) and strip is not None:
            storage.redact(node.id, strip.field, strip.marker, strip.reason, strip.created_at)
    first = storage.reserve_node_keys(len(new_nodes))
    node_keys.update((node.id, first + i) for i, node in enumerate(new_nodes))
    rows = []
    for node in new_nodes:
        run_key = None
        if node.run_id is not None:
            run_key = run_keys.get(node.run_id) or stored_run(storage, s, node)
        parent_key = None if node.parent_id is None else node_keys[node.parent_id]
        rows.append(
            (node.id, key, parent_key, depths[node.id], node.kind, texts[node.id], node.created_at, run_key)
        )
    for i in range(0, len(rows), PROGRESS_EVERY):
        batch = rows[i : i + PROGRESS_EVERY]
        try:
            storage.insert_nodes(batch, keys_from=first + i)
        except Conflict as e:  # the schema refused: a second decision for a pause
            raise InvalidTree(f"session {s.id}: a pause would get a second decision ({e})") from None
        except SessionTreeError as e:
            raise InvalidTree(f"session {s.id}: {e}") from None
        tick(len(batch))
    tick(len(s.nodes) - len(rows))
    for node in new_nodes:  # written stripped: the record that says so comes with it
        if (strip := redacted.get(node.id)) is not None:
            storage.record_redaction(
                node.id, strip.field, strip.bytes, strip.marker, strip.reason, strip.created_at
            )
    write_refs(storage, key, s, node_keys)


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
            self._fields = {r["node"]: r["field"] for r in self.storage.redactions(self.session_key)}
        return self._fields.get(node_id)


def check_same(
    node: ImportedNode,
    text: str,
    session_id: str,
    old: tuple[Any, ...],
    here: StoredRedactions | None = None,
    strip: ImportedRedaction | None = None,
) -> bool:
    """Refuse an input node whose id is stored (``old``: a ``nodes_by_ids`` row) as
    something else; an equal one is merged (left alone). A recorded strip excuses a
    difference in its field only: the store's own (``here``; the stored node stays as
    it is), or the input's (``strip``; True: the stored node must be stripped so)."""
    if old[1] != session_id:
        raise ImportConflict(f"{where(node)} already exists in another session, {old[1]}")
    if (old[2], old[3]) == (node.parent_id, node.kind):
        stored, given = json.loads(old[4]), json.loads(text)
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


def write_refs(storage: Storage, key: int, s: ImportedSession, node_keys: dict[str, int]) -> None:
    """Write the session's checkpoints and branches (after its nodes); ``node_keys``
    need not hold the stored nodes they name."""
    node_keys = _with_session_refs(storage, s, node_keys)
    _write_checkpoints(storage, key, s, node_keys)
    _write_branches(storage, key, s, node_keys)


def _depths(
    s: ImportedSession, by_id: dict[str, ImportedNode], outside: dict[str, tuple[Any, ...]]
) -> dict[str, int]:
    """Depth of every node from its parent chain; refuses missing parents and cycles."""
    depths: dict[str, int] = {}
    for start in s.nodes:
        chain: list[ImportedNode] = []
        on_chain: set[str] = set()
        node: ImportedNode | None = start
        base = -1
        while node is not None and node.id not in depths:
            if node.id in on_chain:
                cycle = [n.id for n in chain[chain.index(node) :]]
                raise InvalidTree(f"{where(node)} is its own ancestor: cycle {' -> '.join(cycle)}")
            chain.append(node)
            on_chain.add(node.id)
            parent = node.parent_id
            if parent is None:
                node = None
            elif parent in by_id:
                node = by_id[parent]
            elif parent in outside:
                if outside[parent][0] != s.id:
                    raise InvalidTree(
                        f"{where(node)}: parent {parent} belongs to another session, {outside[parent][0]}"
                    )
                base = outside[parent][1]
                node = None
            else:
                raise InvalidTree(f"{where(node)}: parent {parent} is neither in the input nor in the store")
        if node is not None:
            base = depths[node.id]
        for n in reversed(chain):
            base += 1
            depths[n.id] = base
    return depths


def _write_runs(storage: Storage, session_key: int, s: ImportedSession) -> dict[str, int]:
    """Insert the input's runs that are new; their keys (and those of the ones already there)."""
    return {run.id: write_run(storage, session_key, s, run) for run in s.runs}


def write_run(storage: Storage, session_key: int, s: ImportedSession, run: ImportedRun) -> int:
    """The key of the run: inserted when new, refused when it belongs to another session."""
    found = storage.run_handle(run.id)
    if found is not None:
        if found[1] != s.id:
            raise ImportConflict(f"run {run.id} already exists in another session, {found[1]}")
        return found[0]
    return storage.insert_run(
        run.id,
        session_key,
        (
            check_text(run.model, f"run {run.id}: model"),
            check_text(run.provider, f"run {run.id}: provider"),
            encode_json(run.params, "run params"),
            encode_json(run.usage, "run usage"),
            check_latency(run.latency_ms, f"run {run.id}: latency_ms"),
            check_text(run.finish_reason, f"run {run.id}: finish_reason"),
            check_text(run.created_at, f"run {run.id}: created_at") or s.created_at,
        ),
    )


def stored_run(storage: Storage, s: ImportedSession, node: ImportedNode) -> int:
    """The key of a run the input does not carry: it must be a run of this session already."""
    found = storage.run_handle(node.run_id or "")
    if found is None or found[1] != s.id:
        raise InvalidTree(
            f"{where(node)}: run {node.run_id} is neither in the input nor a run of this session"
        )
    return found[0]


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
        elif (found[0], found[2]) != ("checkpoint", cp.node_id):
            raise ImportConflict(
                f"session {s.id}: the store has a {found[0]} {cp.name!r} at {found[2]};"
                f" the input has a checkpoint at {cp.node_id}"
            )


def _with_session_refs(storage: Storage, s: ImportedSession, node_keys: dict[str, int]) -> dict[str, int]:
    """``node_keys`` plus the keys of the nodes the input's refs name that are already stored."""
    wanted = [r.node_id for r in (*s.branches, *s.checkpoints) if r.node_id and r.node_id not in node_keys]
    extra = {i: row[0] for i, row in storage.nodes_by_ids(wanted).items() if row[1] == s.id}
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
        kind, head_key, head = found
        if kind != "branch":
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


# -- reading ---------------------------------------------------------------


def read_session(store: Store, session_id: str) -> ImportedSession:
    """One session, whole, as a consistent snapshot (see the module docstring)."""
    storage = store.storage
    with storage.snapshot():
        key, id, title, metadata, created_at, archived_at, _ = storage.session_row(session_id)
        s = ImportedSession(id, title, metadata, created_at, archived_at=archived_at)
        s.runs = [
            ImportedRun(
                r.id, r.model, r.provider, r.params, r.usage, r.latency_ms, r.finish_reason, r.created_at
            )
            for r in storage.runs(key)
        ]
        s.nodes = [
            ImportedNode(n.id, n.parent_id, n.kind, n.payload, n.created_at, n.run_id, depth=n.depth)
            for n in storage.tree(key)
        ]
        s.branches = [
            ImportedRef(b.name, b.head_id, b.created_at, b.updated_at, b.metadata)
            for b in storage.branches(key, id)
        ]
        s.checkpoints = [ImportedRef(c.name, c.node_id, c.created_at) for c in storage.checkpoints(key, id)]
        s.redactions = [
            ImportedRedaction(r["node"], r["field"], r["bytes"], r["marker"], r["reason"], r["created_at"])
            for r in storage.redactions(key)
        ]
    return s


def session_ids(store: Store) -> list[str]:
    """Every session id, archived ones too, oldest first."""
    return store.storage.session_ids()
