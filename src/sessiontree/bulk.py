"""Bulk reads and writes of whole session trees: the store side of import and export.

Contract:
- ``ImportedSession`` (with ``ImportedNode``, ``ImportedRef``, ``ImportedRun``)
  is a plain in-memory tree that format parsers build without touching SQL.
- ``write_sessions(store, sessions)`` writes any number of them in ONE
  ``BEGIN IMMEDIATE`` transaction: all of it or none of it. It computes each
  node's depth from its parent, accepts nodes in any order (parents are
  sorted first), and refuses a parent that is neither in the input nor
  already a node of the same session, a cycle, and a declared depth that
  disagrees (``InvalidTree``).
- Writing a session that already exists merges by id and is idempotent:
  nodes, runs, refs already present and equal are left alone; the session's
  title and metadata in the store win. It refuses (``ImportConflict``,
  nothing written) a node id that exists with another parent, kind or
  payload or in another session; a checkpoint name that points elsewhere; a
  name that is a branch on one side and a checkpoint on the other; and a
  branch whose store head and input head have diverged. A branch whose store
  head is an ancestor of the input head is fast-forwarded; one already ahead
  of the input head is left where it is.
- ``read_session(store, id)`` returns one session as an ``ImportedSession``,
  read inside one transaction so the snapshot is consistent.
- Error messages name the record (``ImportedNode.source``, e.g. ``line 7``)
  and the id.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import Conflict, ImportConflict, InvalidPayload, InvalidTree, NotFound, SessionTreeError
from .ids import now
from .model import encode_json, encode_payload
from .names import check_name, check_text

if TYPE_CHECKING:
    from .store import Store

Progress = Callable[[int, int], None]
CHUNK = 500  # ids per IN (...) query: well under SQLite's variable limit
PROGRESS_EVERY = 1000


@dataclass
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


# -- writing ---------------------------------------------------------------


def write_sessions(
    store: Store, sessions: Sequence[ImportedSession], progress: Progress | None = None
) -> list[str]:
    """Write (or merge) every session in one transaction; return their ids in order."""
    encoded = [_encode(s) for s in sessions]  # validate everything before taking the lock
    total = sum(len(s.nodes) for s in sessions)
    done = [0]

    def tick(n: int) -> None:
        done[0] += n
        if progress is not None:
            progress(done[0], total)

    with store.transaction() as conn:
        for session, texts in zip(sessions, encoded, strict=True):
            try:
                _write_one(conn, session, texts, tick)
            except SessionTreeError as e:
                if session.source:
                    raise type(e)(f"{session.source}: {e}") from None
                raise
    if progress is not None and total == 0:
        progress(0, 0)
    return [s.id for s in sessions]


def _where(node: ImportedNode) -> str:
    return f"{node.source}: node {node.id}" if node.source else f"node {node.id}"


def _encode(session: ImportedSession) -> dict[str, str]:
    texts = {}
    for node in session.nodes:
        if node.id in texts:
            raise InvalidTree(f"{_where(node)} appears twice")
        try:
            texts[node.id] = encode_payload(node.payload, node.kind)
        except InvalidPayload as e:
            raise InvalidTree(f"{_where(node)}: {e}") from None
    for ref in (*session.branches, *session.checkpoints):
        try:
            check_name(ref.name, "branch or checkpoint")
        except Conflict as e:
            raise InvalidTree(f"session {session.id}: {e}") from None
    names = [r.name for r in (*session.branches, *session.checkpoints)]
    if len(names) != len(set(names)):
        dup = next(n for n in names if names.count(n) > 1)
        raise InvalidTree(f"session {session.id}: the name {dup!r} is used twice")
    return texts


def _chunks(items: Sequence[str]) -> Iterable[Sequence[str]]:
    for i in range(0, len(items), CHUNK):
        yield items[i : i + CHUNK]


def _rows_by_id(conn: sqlite3.Connection, columns: str, ids: Sequence[str]) -> dict[str, tuple[Any, ...]]:
    found: dict[str, tuple[Any, ...]] = {}
    for chunk in _chunks(ids):
        marks = ",".join("?" * len(chunk))
        for row in conn.execute(f"SELECT id, {columns} FROM nodes WHERE id IN ({marks})", chunk):
            found[row[0]] = row[1:]
    return found


def _write_one(
    conn: sqlite3.Connection, s: ImportedSession, texts: dict[str, str], tick: Callable[[int], None]
) -> None:
    if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (s.id,)).fetchone() is None:
        conn.execute(
            "INSERT INTO sessions (id, title, metadata, created_at, archived_at) VALUES (?, ?, ?, ?, ?)",
            (
                s.id,
                check_text(s.title, "session title"),
                encode_json(s.metadata, "session metadata"),
                s.created_at,
                s.archived_at,
            ),
        )
    _write_runs(conn, s)
    _check_run_ids(conn, s)
    by_id = {n.id: n for n in s.nodes}
    existing = _rows_by_id(conn, "session_id, parent_id, kind, payload, depth", list(by_id))
    outside = sorted({n.parent_id for n in s.nodes if n.parent_id is not None and n.parent_id not in by_id})
    outside_rows = _rows_by_id(conn, "session_id, depth, kind", outside)
    depths = _depths(s, by_id, outside_rows)
    new_rows = []
    for node in sorted(s.nodes, key=lambda n: depths[n.id]):
        if node.depth is not None and node.depth != depths[node.id]:
            raise InvalidTree(
                f"{_where(node)} declares depth {node.depth}, but its parents"
                f" put it at depth {depths[node.id]}"
            )
        if node.kind == "decision":  # the same rule Session.append enforces
            parent = by_id.get(node.parent_id or "")
            stored = outside_rows.get(node.parent_id or "")
            parent_kind = parent.kind if parent else stored[2] if stored else None
            if parent_kind != "pause":
                raise InvalidTree(f"{_where(node)}: a decision must be the child of a pause")
        old = existing.get(node.id)
        if old is None:
            new_rows.append(
                (
                    node.id,
                    s.id,
                    node.parent_id,
                    depths[node.id],
                    node.kind,
                    texts[node.id],
                    node.created_at,
                    node.run_id,
                )
            )
            continue
        if old[0] != s.id:
            raise ImportConflict(f"{_where(node)} already exists in another session, {old[0]}")
        if (old[1], old[2]) != (node.parent_id, node.kind) or json.loads(old[3]) != json.loads(
            texts[node.id]
        ):
            raise ImportConflict(
                f"{_where(node)} already exists with a different parent, kind"
                " or payload; refusing to import over it"
            )
    for i in range(0, len(new_rows), PROGRESS_EVERY):
        batch = new_rows[i : i + PROGRESS_EVERY]
        try:
            conn.executemany(
                "INSERT INTO nodes (id, session_id, parent_id, depth, kind, payload,"
                " created_at, run_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                batch,
            )
        except sqlite3.IntegrityError as e:
            if "nodes.parent_id" in str(e):  # the unique index: one decision per pause
                raise InvalidTree(f"session {s.id}: a pause would get a second decision") from None
            raise InvalidTree(f"session {s.id}: {e}") from None
        tick(len(batch))
    tick(len(s.nodes) - len(new_rows))
    _write_checkpoints(conn, s)
    _write_branches(conn, s)


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
                raise InvalidTree(f"{_where(node)} is its own ancestor: cycle {' -> '.join(cycle)}")
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
                        f"{_where(node)}: parent {parent} belongs to another session, {outside[parent][0]}"
                    )
                base = outside[parent][1]
                node = None
            else:
                raise InvalidTree(f"{_where(node)}: parent {parent} is neither in the input nor in the store")
        if node is not None:
            base = depths[node.id]
        for n in reversed(chain):
            base += 1
            depths[n.id] = base
    return depths


def _write_runs(conn: sqlite3.Connection, s: ImportedSession) -> None:
    for run in s.runs:
        row = conn.execute("SELECT session_id FROM runs WHERE id = ?", (run.id,)).fetchone()
        if row is not None:
            if row[0] != s.id:
                raise ImportConflict(f"run {run.id} already exists in another session, {row[0]}")
            continue
        conn.execute(
            "INSERT INTO runs (id, session_id, model, provider, params, usage, latency_ms,"
            " finish_reason, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                run.id,
                s.id,
                run.model,
                run.provider,
                encode_json(run.params, "run params"),
                encode_json(run.usage, "run usage"),
                run.latency_ms,
                run.finish_reason,
                run.created_at or s.created_at,
            ),
        )


def _check_run_ids(conn: sqlite3.Connection, s: ImportedSession) -> None:
    known = {r.id for r in s.runs}
    for node in s.nodes:
        if node.run_id is None or node.run_id in known:
            continue
        row = conn.execute("SELECT session_id FROM runs WHERE id = ?", (node.run_id,)).fetchone()
        if row is None or row[0] != s.id:
            raise InvalidTree(
                f"{_where(node)}: run {node.run_id} is neither in the input nor a run of this session"
            )
        known.add(node.run_id)


def _ref_kind(conn: sqlite3.Connection, session_id: str, name: str) -> tuple[str, str | None] | None:
    row: tuple[str, str | None] | None = conn.execute(
        "SELECT 'branch', head_id FROM branches WHERE session_id = ? AND name = ?"
        " UNION ALL SELECT 'checkpoint', node_id FROM checkpoints WHERE session_id = ? AND name = ?",
        (session_id, name, session_id, name),
    ).fetchone()
    return row


def _check_ref_target(conn: sqlite3.Connection, s: ImportedSession, what: str, ref: ImportedRef) -> None:
    if ref.node_id is None:
        return
    row = conn.execute("SELECT session_id FROM nodes WHERE id = ?", (ref.node_id,)).fetchone()
    if row is None or row[0] != s.id:
        raise InvalidTree(
            f"session {s.id}: {what} {ref.name!r} points at {ref.node_id},"
            " which is not a node of this session"
        )


def _write_checkpoints(conn: sqlite3.Connection, s: ImportedSession) -> None:
    for cp in s.checkpoints:
        _check_ref_target(conn, s, "checkpoint", cp)
        if cp.node_id is None:
            raise InvalidTree(f"session {s.id}: checkpoint {cp.name!r} points at nothing")
        found = _ref_kind(conn, s.id, cp.name)
        if found is None:
            conn.execute(
                "INSERT INTO checkpoints (session_id, name, node_id, created_at) VALUES (?, ?, ?, ?)",
                (s.id, cp.name, cp.node_id, cp.created_at or now()),
            )
        elif found != ("checkpoint", cp.node_id):
            raise ImportConflict(
                f"session {s.id}: the store has a {found[0]} {cp.name!r} at"
                f" {found[1]}; the input has a checkpoint at {cp.node_id}"
            )


def _is_ancestor(conn: sqlite3.Connection, ancestor: str, node: str) -> bool:
    return (
        conn.execute(
            "WITH RECURSIVE up(id, parent_id) AS (SELECT id, parent_id FROM nodes WHERE id = ?"
            " UNION ALL SELECT n.id, n.parent_id FROM nodes n JOIN up ON n.id = up.parent_id)"
            " SELECT 1 FROM up WHERE id = ?",
            (node, ancestor),
        ).fetchone()
        is not None
    )


def _write_branches(conn: sqlite3.Connection, s: ImportedSession) -> None:
    for b in s.branches:
        _check_ref_target(conn, s, "branch", b)
        found = _ref_kind(conn, s.id, b.name)
        if found is None:
            created = b.created_at or now()
            conn.execute(
                "INSERT INTO branches (session_id, name, head_id, metadata, created_at,"
                " updated_at) VALUES (?, ?, ?, ?, ?, ?)",
                (
                    s.id,
                    b.name,
                    b.node_id,
                    encode_json(b.metadata, "branch metadata"),
                    created,
                    b.updated_at or created,
                ),
            )
            continue
        kind, head = found
        if kind != "branch":
            raise ImportConflict(
                f"session {s.id}: {b.name!r} is a checkpoint in the store and a branch in the input"
            )
        if b.node_id is None or head == b.node_id:
            continue
        if head is None or _is_ancestor(conn, head, b.node_id):  # fast-forward
            conn.execute(
                "UPDATE branches SET head_id = ?, updated_at = ? WHERE session_id = ? AND name = ?",
                (b.node_id, b.updated_at or now(), s.id, b.name),
            )
        elif not _is_ancestor(conn, b.node_id, head):  # store ahead of the input: keep it
            raise ImportConflict(
                f"session {s.id}: branch {b.name!r} has diverged: the store's"
                f" head is {head}, the input's is {b.node_id}"
            )


# -- reading ---------------------------------------------------------------


def read_session(store: Store, session_id: str) -> ImportedSession:
    """One session, whole, as a consistent snapshot (see the module docstring)."""
    conn = store.conn
    own = not conn.in_transaction
    if own:
        conn.execute("BEGIN")  # deferred: a read snapshot, no write lock
    try:
        return _read(conn, session_id)
    finally:
        if own and conn.in_transaction:
            conn.execute("COMMIT")


def _read(conn: sqlite3.Connection, session_id: str) -> ImportedSession:
    row = conn.execute(
        "SELECT id, title, metadata, created_at, archived_at FROM sessions WHERE id = ?", (session_id,)
    ).fetchone()
    if row is None:
        raise NotFound(f"no session {session_id!r}")
    s = ImportedSession(row[0], row[1], json.loads(row[2]), row[3], archived_at=row[4])
    s.runs = [
        ImportedRun(r[0], r[1], r[2], json.loads(r[3]), json.loads(r[4]), r[5], r[6], r[7])
        for r in conn.execute(
            "SELECT id, model, provider, params, usage, latency_ms, finish_reason, created_at"
            " FROM runs WHERE session_id = ? ORDER BY id",
            (session_id,),
        )
    ]
    s.nodes = [
        ImportedNode(r[0], r[1], r[3], json.loads(r[4]), r[5], r[6], depth=r[2])
        for r in conn.execute(
            "SELECT id, parent_id, depth, kind, payload, created_at, run_id FROM nodes"
            " WHERE session_id = ? ORDER BY depth, id",
            (session_id,),
        )
    ]
    s.branches = [
        ImportedRef(r[0], r[1], r[2], r[3], json.loads(r[4]))
        for r in conn.execute(
            "SELECT name, head_id, created_at, updated_at, metadata FROM branches"
            " WHERE session_id = ? ORDER BY name",
            (session_id,),
        )
    ]
    s.checkpoints = [
        ImportedRef(r[0], r[1], r[2])
        for r in conn.execute(
            "SELECT name, node_id, created_at FROM checkpoints WHERE session_id = ? ORDER BY name",
            (session_id,),
        )
    ]
    return s


def session_ids(store: Store) -> list[str]:
    """Every session id, archived ones too, oldest first."""
    return [r[0] for r in store.conn.execute("SELECT id FROM sessions ORDER BY id")]
