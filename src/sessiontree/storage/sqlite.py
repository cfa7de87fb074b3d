"""The SQLite backend: its tree (sessions, nodes, refs, runs) and the parts it holds.

Contract: ``SQLiteStorage(path)`` opens (and migrates, see ``sqlite_db``) one file;
it is its own tree (``tree.Tree``) and holds the other parts: ``trash``
(``sqlite_trash``), ``search`` (``sqlite_search``), ``upkeep``
(``sqlite_upkeep``) and ``paths``.
Public ids (UUIDv7 text) go in and come out; inside the file every link is an
integer row key (schema step 3). Methods on hot paths take and return those
keys as opaque handles, valid inside one transaction or read (a session's key,
a branch head's key), so an append or a path read never looks an id up twice.
Keys are never kept across calls by the layers above: a deleted row's key can
be given to a new row. The rules (what may be
written, compare-and-set decisions, error wording) live above, in ``Session``,
``Store`` and ``bulk``. Writes happen inside ``transaction()``. Integrity errors
the schema raises come back as sessiontree errors naming the row.

Threads may share a store: ``conn`` is the calling thread's connection (a file: one
per thread; ``:memory:``: the one connection, serialised), and ``transaction()`` and
``snapshot()`` hold what ``sqlite_threads`` says they must. The counters a commit
keeps (commits since the log was measured, nodes not yet indexed) live with each
connection, so threads never share one.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import Conflict, NotFound, ReadOnly, SessionTreeError
from . import leases
from . import sqlite_db as _db
from .base import SESSION_GONE
from .cache import DEFAULT_MAX_BYTES, PathCache
from .paths import CachedPaths, PathRow
from .reads import RUN_COLUMNS, SharedReads
from .rows import BranchHead, Neighbour, RefTarget, SessionRow, StoredNode
from .shared_sql import BRANCH_HEAD, INSERT_BRANCH, REF, TREE
from .sqlite_search import SEARCH_BATCH, SQLiteSearch
from .sqlite_threads import Connections, Slot
from .sqlite_trash import SQLiteTrash
from .sqlite_upkeep import SQLiteUpkeep

if TYPE_CHECKING:
    import sqlite_utils

WAL_LIMIT = 32 * 1024 * 1024
"""Write-ahead log size past which a writer checkpoints and empties it (see ``_bound_wal``)."""
CHECKPOINT_WAIT_MS = 1_000
"""How long that checkpoint waits for readers of old snapshots (other writers wait meanwhile)."""
WAL_CHECK_EVERY = 16
"""Commits between two looks at the log's size (a stat call)."""

# Root-to-node is walked head first: one row-key lookup per step, no sort. The
# walk carries only keys (its queue copies whatever it carries, and carrying the
# payloads made the query over 2,000 nodes 15% slower); each node's columns are
# read once at the end, in the walk's order (CROSS JOIN keeps the walk outside).
# The walk stops at the first node whose path is cached (``:stop``, a JSON array
# of ids); the caller reverses the rows and knows each parent id (the next row's).
# With nothing cached for the session (a cold read) the walk has no stop test.
# A node's run id is looked up only when it has a run (a LEFT JOIN probed every row).
_COLUMNS = """
SELECT n.id, n.depth, n.kind, n.payload, n.created_at,
       CASE WHEN n.run IS NULL THEN NULL ELSE (SELECT id FROM runs WHERE key = n.run) END, p.stop
FROM p CROSS JOIN nodes n ON n.key = p.key
"""
_PATH = (
    """
WITH RECURSIVE p(key, parent, stop) AS (
    SELECT key, parent, 0 FROM nodes WHERE key = :key
    UNION ALL
    SELECT n.key, n.parent, n.id IN (SELECT value FROM json_each(:stop))
    FROM p JOIN nodes n ON n.key = p.parent WHERE NOT p.stop
)"""
    + _COLUMNS
)
_WHOLE_PATH = (
    """
WITH RECURSIVE p(key, parent, stop) AS (
    SELECT key, parent, 0 FROM nodes WHERE key = :key
    UNION ALL
    SELECT n.key, n.parent, 0 FROM p JOIN nodes n ON n.key = p.parent
)"""
    + _COLUMNS
)

# Four index probes per id, all ids in one statement (an HTML export asks about thousands).
_CHUNK = 500
"""Ids per statement in ``lock_sessions`` (well under SQLite's limit on parameters)."""

_NEIGHBOURS = """
SELECT w.value,
       (SELECT max(id) FROM nodes WHERE id < w.value), (SELECT min(id) FROM nodes WHERE id > w.value),
       (SELECT max(id) FROM sessions WHERE id < w.value), (SELECT min(id) FROM sessions WHERE id > w.value)
FROM json_each(:ids) w
"""


class SQLiteStorage(SharedReads):
    """One SQLite database file (or ``:memory:``)."""

    search: SQLiteSearch  # its writes index what they wrote (``index_pending``)

    is_tool_message = "json_valid(h.payload) AND json_extract(h.payload, '$.role') = 'tool'"
    usage_number = "CAST(json_extract(r.usage, '$.{name}') AS INTEGER)"

    def __init__(
        self, path: str | Path, *, readonly: bool = False, cache_bytes: int = DEFAULT_MAX_BYTES
    ) -> None:
        self.path = self.url = str(path)
        # A file this process cannot write is opened read-only; writes say why.
        self.why_readonly = None if readonly else _db.read_only_reason(self.path)
        self.readonly = readonly or self.why_readonly is not None
        # The first connection is opened here, so a file that cannot be a store says so now.
        self._connections = Connections(
            _db.connect(self.path, readonly=self.readonly),
            lambda: _db.connect(self.path, readonly=self.readonly),
            memory=self.path == ":memory:",
        )
        self._local = self._connections.local
        self.cache = PathCache(cache_bytes)
        self.paths = CachedPaths(self)
        self.trash = SQLiteTrash(self)
        self.upkeep = SQLiteUpkeep(self)
        self.search = SQLiteSearch(self)
        self.wal_limit = WAL_LIMIT

    @property
    def conn(self) -> sqlite3.Connection:
        """This thread's connection (see ``sqlite_threads``)."""
        try:
            return self._local.conn
        except AttributeError:  # a thread new to this store
            return self._connections.slot().conn

    @property
    def db(self) -> sqlite_utils.Database:
        """sqlite-utils on this thread's connection, for schema introspection (no plugins,
        and no pragma changes on a connection that is ours)."""
        import sqlite_utils  # here, not at import: it imports pandas when that is installed (0.4 s, 80 MB)

        return sqlite_utils.Database(self.conn, recursive_triggers=False, execute_plugins=False)

    @property
    def _slot(self) -> Slot:
        try:
            return self._local.slot
        except AttributeError:
            return self._connections.slot()

    def close(self) -> None:
        unindexed = any(slot.unindexed for slot in self._connections.slots())
        if unindexed and not self.readonly:  # what this store wrote, indexed for search
            with contextlib.suppress(SessionTreeError, sqlite3.Error), self.transaction():
                self.search.index_pending()
        self._connections.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One atomic write (``BEGIN IMMEDIATE``); nested use makes a savepoint."""
        self.check_writable()
        with self._connections.writing():
            slot = self._slot
            outermost = not slot.conn.in_transaction
            with _db.transaction(slot.conn) as conn:
                yield conn
            if outermost:
                self._bound_wal(slot)
                if slot.unindexed >= SEARCH_BATCH:  # index a batch in one statement, not one per commit
                    slot.unindexed = 0
                    with _db.transaction(slot.conn):
                        self.search.index_pending()

    def check_writable(self) -> None:
        """``ReadOnly`` when this store cannot write (opened so, or the file or its
        directory is read-only)."""
        if self.why_readonly is not None:
            raise ReadOnly(f"{self.path} cannot be written ({self.why_readonly}); nothing was written")
        if self.readonly:
            raise ReadOnly(f"{self.path} is open read-only; nothing was written")

    def _bound_wal(self, slot: Slot) -> None:
        """Keep the write-ahead log near ``wal_limit`` bytes.

        SQLite's automatic checkpoints are passive: while readers keep arriving,
        some reader always needs the log, it is never restarted, and it grows
        without bound beside a small database. Every ``WAL_CHECK_EVERY`` commits
        the writer looks at the log's size; past the limit it runs a TRUNCATE
        checkpoint, which waits (up to ``CHECKPOINT_WAIT_MS``) for the readers of old
        snapshots to finish, copies everything into the database and empties the
        log. New readers go on unimpeded; other writers wait for it. If it cannot
        finish in time, nothing is lost: a later check tries again.
        """
        slot.commits += 1
        if self.path == ":memory:" or slot.commits % WAL_CHECK_EVERY:
            return
        try:
            size = os.path.getsize(self.path + "-wal")
        except OSError:
            return
        if size > self.wal_limit:
            # Other writers wait while this runs: wait for readers for a second at most,
            # well inside the writers' own busy timeout.
            conn = slot.conn
            timeout = conn.execute("PRAGMA busy_timeout").fetchone()[0]
            conn.execute(f"PRAGMA busy_timeout = {min(timeout, CHECKPOINT_WAIT_MS)}")
            try:
                with contextlib.suppress(sqlite3.OperationalError):  # busy: try again later
                    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                conn.execute(f"PRAGMA busy_timeout = {timeout}")

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Several reads from one consistent state (a deferred read transaction)."""
        with self._connections.reading():
            conn = self.conn
            if conn.in_transaction:
                yield
                return
            conn.execute("BEGIN")
            try:
                yield
            finally:
                if conn.in_transaction:
                    conn.execute("COMMIT")

    def lock_sessions(self, session_ids: Sequence[str]) -> dict[str, int]:
        """The keys of those of these sessions that exist. Nothing to lock: inside
        ``transaction()`` this connection already holds the database's only write lock, so
        nothing listed inside it can change before it ends."""
        ids, keys = list(session_ids), dict[str, int]()
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start : start + _CHUNK]
            rows = self.conn.execute(
                f"SELECT id, key FROM sessions WHERE id IN ({', '.join('?' * len(chunk))})", chunk
            )
            keys.update((r[0], int(r[1])) for r in rows)
        return keys

    @property
    def schema_version(self) -> int:
        return _db.schema_version(self.conn)

    def _rows(self, sql: str, params: dict[str, Any] | None = None) -> list[Any]:
        return self.conn.execute(sql, params or {}).fetchall()

    def _stream(self, sql: str, params: dict[str, Any]) -> Iterator[Any]:
        return iter(self.conn.execute(sql, params))  # sqlite3 steps the statement as rows are taken

    def _one(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> Any:
        row = self.conn.execute(sql, params).fetchone()
        return None if row is None else row[0]

    # -- ids ---------------------------------------------------------------

    def has_id(self, table: str, id: str, session_key: int | None = None) -> bool:
        scope = "" if session_key is None else "AND session = ?"
        params: tuple[Any, ...] = (id,) if session_key is None else (id, session_key)
        return self._one(f"SELECT 1 FROM {table} WHERE id = ? {scope}", params) is not None

    def ids_starting_with(
        self, table: str, prefix: str, session_key: int | None = None, limit: int = 2
    ) -> list[str]:
        scope = "" if session_key is None else "AND session = ?"
        params: tuple[Any, ...] = () if session_key is None else (session_key,)
        # A range scan on the id index: every id starting with the prefix sorts in it.
        rows = self.conn.execute(
            f"SELECT id FROM {table} WHERE id >= ? AND id < ? {scope} ORDER BY id LIMIT ?",
            (prefix, prefix + "\uffff", *params, limit),
        )
        return [str(r[0]) for r in rows]

    def neighbours(self, ids: Sequence[str]) -> list[Neighbour]:
        rows = self.conn.execute(_NEIGHBOURS, {"ids": json.dumps(list(ids))}).fetchall()
        return [Neighbour(row[0], other) for row in rows for other in row[1:] if other is not None]

    # -- sessions ----------------------------------------------------------

    def insert_session(
        self, id: str, title: str | None, metadata: str, created_at: str, archived_at: str | None = None
    ) -> int:
        """A new session row (inside a transaction); its key."""
        try:
            cursor = self.conn.execute(
                "INSERT INTO sessions (id, title, metadata, created_at, archived_at) VALUES (?, ?, ?, ?, ?)",
                (id, title, metadata, created_at, archived_at),
            )
        except sqlite3.IntegrityError:
            raise Conflict(f"session {id} already exists") from None
        assert cursor.lastrowid is not None
        return cursor.lastrowid

    def session_row(self, id: str) -> SessionRow:
        row = self.conn.execute(
            "SELECT key, id, title, metadata, created_at, archived_at, trashed_at FROM sessions WHERE id = ?",
            (id,),
        ).fetchone()
        if row is None:
            raise NotFound(f"no session {id!r}")
        return SessionRow(row[0], row[1], row[2], json.loads(row[3]), row[4], row[5], row[6])

    def set_title(self, session_key: int, title: str | None) -> None:
        """Set a session's title (inside a transaction)."""
        self.conn.execute("UPDATE sessions SET title = ? WHERE key = ?", (title, session_key))

    def session_ids(self) -> list[str]:
        """Every session id, archived ones too, oldest first."""
        return [r[0] for r in self.conn.execute("SELECT id FROM sessions ORDER BY id")]

    def set_archived(self, session_key: int, when: str | None) -> None:
        self.conn.execute("UPDATE sessions SET archived_at = ? WHERE key = ?", (when, session_key))

    def delete_session(self, session_key: int) -> int:
        """Delete a session and everything in it (inside a transaction); the nodes removed."""
        self.conn.execute("CREATE TEMP TABLE IF NOT EXISTS doomed (key INTEGER PRIMARY KEY)")
        self.conn.execute("DELETE FROM doomed")
        self.conn.execute(TREE + "INSERT INTO doomed SELECT key FROM t", {"s": session_key})
        count = int(self._one("SELECT count(*) FROM doomed"))
        # Refs first, then nodes (the foreign keys are checked when each statement
        # ends, so children and parents go together), then runs.
        self.conn.execute("DELETE FROM branches WHERE session = ?", (session_key,))
        self.conn.execute("DELETE FROM checkpoints WHERE session = ?", (session_key,))
        self.conn.execute("DELETE FROM nodes WHERE key IN (SELECT key FROM doomed)")
        self.conn.execute("DELETE FROM runs WHERE session = ?", (session_key,))
        self.conn.execute("DELETE FROM sessions WHERE key = ?", (session_key,))
        self.conn.execute("DELETE FROM doomed")
        self.cache.clear()
        return count

    # -- nodes -------------------------------------------------------------

    def reserve_node_keys(self, count: int) -> int:
        # Inside a write transaction nobody else writes: the keys after the largest are free.
        return int(self._one("SELECT coalesce(max(key), 0) + 1 FROM nodes"))

    def insert_nodes(self, rows: Sequence[tuple[Any, ...]], keys_from: int | None = None) -> int:
        """Insert nodes (``NodeRow``s) inside a transaction; return the last one's key. With
        ``keys_from``, row i gets key ``keys_from + i`` (so a chain can name its parents
        before they exist); without it, one row is inserted and gets the next free key."""
        self._slot.unindexed += len(rows)  # above the search watermark until a batch is indexed
        try:
            if keys_from is None:
                (row,) = rows
                cursor = self.conn.execute(
                    "INSERT INTO nodes (id, session, parent, depth, kind, payload, created_at, run)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    row,
                )
                assert cursor.lastrowid is not None
                return cursor.lastrowid
            self.conn.executemany(
                "INSERT INTO nodes (key, id, session, parent, depth, kind, payload, created_at, run)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(keys_from + i, *row) for i, row in enumerate(rows)],
            )
            return keys_from + len(rows) - 1
        except sqlite3.IntegrityError as e:
            parent = rows[0][2]
            if "in the trash" in str(e):
                session_id = self._one("SELECT id FROM sessions WHERE key = ?", (rows[0][1],))
                raise Conflict(f"session {session_id} is in the trash: restore it to write to it") from None
            if "existing session" in str(e):  # a stale handle: another writer deleted it
                raise NotFound(SESSION_GONE) from None
            if "nodes.id" in str(e):  # a caller's id (session.append_many checks it first)
                is_taken = "SELECT 1 FROM nodes WHERE id = ?"
                taken = next((r[0] for r in rows if self.conn.execute(is_taken, (r[0],)).fetchone()), None)
                raise Conflict(f"node id {taken} is taken: a node of this store has it") from None
            if "nodes.parent" in str(e):  # the unique index: one decision per pause
                raise Conflict(f"pause {self._id_of(parent)} already has a decision") from None
            if "same session" in str(e) or "FOREIGN KEY" in str(e):
                raise NotFound(f"parent node {self._id_of(parent)} is not in this session") from None
            raise

    def _id_of(self, key: int | None) -> str | None:
        return None if key is None else self._one("SELECT id FROM nodes WHERE key = ?", (key,))

    def _path_rows(self, key: int, stops: list[str]) -> list[PathRow]:
        if not stops:
            return self.conn.execute(_WHOLE_PATH, {"key": key}).fetchall()
        return self.conn.execute(_PATH, {"key": key, "stop": json.dumps(stops)}).fetchall()

    def redaction_count(self) -> int:
        return int(self._one("SELECT redactions FROM change_counts"))

    def tool_lease(self, session_key: int) -> AbstractContextManager[None]:
        return leases.hold(self.path, session_key)

    def unleased(self, session_keys: Sequence[int]) -> set[int]:
        return leases.free(self.path, session_keys)

    def wait_for_decisions(self, timeout: float) -> bool:
        # SQLite has no way to signal another process: the caller polls ``resumable``.
        time.sleep(timeout)
        return False

    # -- usage ---------------------------------------------------------------

    # -- branches and checkpoints -------------------------------------------

    def ref(self, session_key: int, name: str) -> RefTarget | None:
        row = self.conn.execute(REF, {"s": session_key, "name": name}).fetchone()
        return None if row is None else RefTarget(row[0], row[1], row[2])

    def branch_head(self, session_key: int, name: str) -> BranchHead | None:
        row = self.conn.execute(BRANCH_HEAD, {"s": session_key, "name": name}).fetchone()
        if row is None:
            return None
        return BranchHead(row[0], row[1], -1 if row[2] is None else row[2], row[3])

    def insert_branch(
        self,
        session_key: int,
        name: str,
        head: int | None,
        metadata: str,
        created: str,
        updated: str | None = None,
    ) -> None:
        branch = {"s": session_key, "name": name, "head": head, "metadata": metadata, "created": created}
        self.conn.execute(INSERT_BRANCH, {**branch, "updated": updated or created})

    def set_head(self, session_key: int, name: str, head: int | None, when: str) -> None:
        self.conn.execute(
            "UPDATE branches SET head = ?, updated_at = ? WHERE session = ? AND name = ?",
            (head, when, session_key, name),
        )

    def rename_branch(self, session_key: int, old: str, new: str, when: str) -> None:
        self.conn.execute(
            "UPDATE branches SET name = ?, updated_at = ? WHERE session = ? AND name = ?",
            (new, when, session_key, old),
        )

    def delete_branch(self, session_key: int, name: str) -> None:
        self.conn.execute("DELETE FROM branches WHERE session = ? AND name = ?", (session_key, name))

    def insert_checkpoint(self, session_key: int, name: str, node: int, when: str) -> None:
        self.conn.execute(
            "INSERT INTO checkpoints (session, name, node, created_at) VALUES (?, ?, ?, ?)",
            (session_key, name, node, when),
        )

    def delete_checkpoint(self, session_key: int, name: str) -> bool:
        """Whether a checkpoint of that name was there to delete."""
        cursor = self.conn.execute(
            "DELETE FROM checkpoints WHERE session = ? AND name = ?", (session_key, name)
        )
        return cursor.rowcount > 0

    # -- runs ----------------------------------------------------------------

    def insert_run(self, id: str, session_key: int, fields: Sequence[Any]) -> int:
        """Insert a run (``RUN_FIELDS`` values) inside a transaction; its key."""
        try:
            cursor = self.conn.execute(
                f"INSERT INTO runs (id, session, {RUN_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (id, session_key, *fields),
            )
        except sqlite3.IntegrityError as e:
            if "FOREIGN KEY" in str(e):  # its one reference: the session, deleted meanwhile
                raise NotFound(SESSION_GONE) from None
            raise
        assert cursor.lastrowid is not None
        return cursor.lastrowid

    # -- bulk reads and writes (import, export) ---------------------------------

    def nodes_by_ids(self, ids: Sequence[str]) -> dict[str, StoredNode]:
        found = {}
        for start in range(0, len(ids), 500):  # well under SQLite's variable limit
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for r in self.conn.execute(
                f"SELECT n.id, n.key, s.id, p.id, n.kind, n.payload, n.depth FROM nodes n"
                f" JOIN sessions s ON s.key = n.session LEFT JOIN nodes p ON p.key = n.parent"
                f" WHERE n.id IN ({marks})",
                chunk,
            ):
                found[r[0]] = StoredNode(r[1], r[2], r[3], r[4], r[5], r[6])
        return found

    # -- metadata ----------------------------------------------------------------

    def set_session_metadata(self, session_key: int, metadata: str) -> None:
        self.conn.execute("UPDATE sessions SET metadata = ? WHERE key = ?", (metadata, session_key))

    def set_branch_metadata(self, session_key: int, name: str, metadata: str) -> None:
        self.conn.execute(
            "UPDATE branches SET metadata = ? WHERE session = ? AND name = ?", (metadata, session_key, name)
        )
