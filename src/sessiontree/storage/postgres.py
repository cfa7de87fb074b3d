"""The PostgreSQL backend: the same store for many processes on many machines.

Contract: ``PostgresStorage(url)`` connects (a pool, psycopg 3), migrates (see
``postgres_db``) and implements ``Storage`` with the same keys, rows and
invariants as the SQLite backend: tests/conformance/ runs every promise of the store on both.
It is its own tree (``tree.Tree``) and holds the other parts: ``trash``
(``postgres_trash``), ``search`` (``postgres_find``), ``upkeep``
(``postgres_upkeep``) and ``paths``.

Concurrency. SQLite has one writer at a time; here many transactions write at
once, so the promise of ``Storage`` (a head read inside a write transaction
cannot change until it ends) is kept with advisory locks:
- the first time a write transaction reads or writes a session's refs or nodes,
  it takes that session's lock until it ends (with the first one, ``STORE_LOCK``
  shared: prune takes it exclusively). Writers to different sessions
  never wait for each other; two writers of one session take turns, and the
  second then sees the first one's head, so compare-and-set is exact. Every key
  starts with the schema's ``pgdb.lock_class``: stores in other schemas of the
  database never wait for these locks.
- ``lock_sessions`` takes the locks of many sessions at once (in key order), for
  a write that decided from a listing made without them (emptying the trash, a
  retention policy): it lists again once it holds them, and statements from then
  on see what the sessions' last writers committed (READ COMMITTED).
Node keys come from ``sessiontree_reserve_node_keys`` (a block per call).

Round trips (schema step 12). A read of a branch or checkpoint is one statement
(``_ref_walk``: the ref, the walk to the nearest cached path end, the redaction
count when due); an append under a branch head and a fork are one call each of a
server function (``append_at_head``, ``fork_at``) that takes the same locks and
goes through the same triggers, in its own transaction. Anything else, and any
case those functions do not take (SQLSTATE SW001, or a trigger's refusal, with
nothing written), goes the long way: a transaction of statements as above.
The path and tree walks are functions whose plans are fixed; every other
statement is planned for the tables as they are (``postgres_db.PLANS``).

Connections: a write transaction or a snapshot holds one pooled connection for
the thread that opened it; any other read borrows one for a single statement.
A connection lost before a write's COMMIT is ``Unavailable`` (the server rolls
it back); lost once COMMIT was sent, ``OutcomeUnknown``, naming the last node the
write inserted and the server process, by which a caller learns what happened.
``wait_for_decisions`` LISTENs on a connection of its own, opened again when it drops
(a restart, a failover, an idle timeout): the caller's poll covers the gap, and a
reopened listener says a decision may have come meanwhile. ``tool_lease`` holds an
advisory lock (shared; ``_tool_lock`` names it) on another connection of its own,
which the server gives up when the process dies; ``unleased`` tries the exclusive
lock on a pooled connection, for the length of one statement.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg_pool import PoolTimeout

from ..errors import Conflict, NotFound, ReadOnly, SessionTreeError, Unavailable
from ..names import FULL_ID
from . import postgres_db as pgdb
from . import postgres_pool
from .base import SESSION_GONE
from .cache import DEFAULT_MAX_BYTES, PathCache
from .paths import CachedPaths, PathRow
from .postgres_find import PostgresSearch
from .postgres_trash import PostgresTrash
from .postgres_upkeep import TREE, PostgresUpkeep
from .reads import RUN_COLUMNS, SharedReads
from .rows import AppendedAt, BranchHead, Neighbour, RefTarget, SessionRow, StoredNode
from .shared_sql import BRANCH_HEAD, INSERT_BRANCH, REF, for_postgres

# The walk up a path, with its plan pinned (schema step 12: an index lookup per step,
# whatever the table's statistics say).
_PATH = "SELECT * FROM sessiontree_path(%(key)s, %(stop)s)"

# A read of a branch or checkpoint in one round trip (schema step 13): its node and the
# walk up from it to the nearest cached path end (only the node, unread, when it is one),
# with the redaction count when the cache is due to look at it.
_REF_WALK = "SELECT * FROM sessiontree_ref_walk(%(s)s, %(name)s, %(stop)s, %(redactions)s)"


_REF, _BRANCH_HEAD, _INSERT_BRANCH = (for_postgres(s) for s in (REF, BRANCH_HEAD, INSERT_BRANCH))

T = TypeVar("T")

STREAM_ROWS = 500
"""Rows a server-side cursor fetches a round trip (``tree_stream``, ``runs_stream``)."""

ONE_STATEMENT_STEP = 13
"""The schema step from which the one-statement reads and writes are all there (step 12's
``sessiontree_append``, step 13's ``sessiontree_ref_walk``)."""


class _Held(threading.local):
    """The connection this thread's transaction or snapshot holds, if any."""

    conn: psycopg.Connection[Any] | None = None
    writing: bool = False
    claimed: set[int]
    last_node: str | None = None
    """The id of the last node the write transaction inserted, for ``OutcomeUnknown``."""


class PostgresStorage(SharedReads):
    """One PostgreSQL schema (``?schema=`` in the URL, default ``sessiontree``)."""

    is_tool_message = "sessiontree_json(h.payload) ->> 'role' = 'tool'"
    tree_walk = TREE
    usage_number = "sessiontree_usage_tokens(r.usage, '{name}', '{name}')"

    # A look at the redaction count is a round trip here: at most one a second, so
    # another process's redaction reaches this store's cached reads within a second.
    redaction_check_every = 1.0

    def __init__(self, url: str, *, readonly: bool = False, cache_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.target = pgdb.parse_url(url)
        self.url = self.target.shown
        self.readonly = readonly
        self.lock_class = pgdb.lock_class(self.target.schema)
        self.cache = PathCache(cache_bytes)
        self.paths = CachedPaths(self)
        self.trash = PostgresTrash(self)
        self.upkeep = PostgresUpkeep(self)
        self.search = PostgresSearch(self)
        self._held = _Held()
        self._listener: psycopg.Connection[Any] | None = None
        self._relisten = False  # the listener dropped: signals may have been missed
        self._leaser: psycopg.Connection[Any] | None = None
        self._leaser_lock = threading.Lock()
        self.pool, self.one_statement = postgres_pool.acquire(self.target, self._check_schema)
        self._closed = False
        # Behind PgBouncer each transaction sets what a connection would have kept.
        self._local_settings = b""
        if self.target.pgbouncer:
            with pgdb.clear_errors(self.url), postgres_pool.borrow(self.pool) as conn:
                self._local_settings = pgdb.settings(self.target.schema, local=True).as_bytes(conn)

    def _check_schema(self) -> bool:
        """Migrate the schema (or, read-only, check it needs nothing); whether it has every
        one-statement function. Once per process and URL (``postgres_pool``)."""
        readonly = self.readonly
        with pgdb.connect(self.target) as conn, pgdb.clear_errors(self.url):
            if readonly:
                waiting = pgdb.pending(conn, self.target.schema)
                if waiting and pgdb.schema_version(conn, self.target.schema) == 0:
                    raise ReadOnly(
                        f"{self.url}: no sessiontree store in schema {self.target.schema} yet;"
                        " create it with `sessiontree migrate`"
                    )
                if waiting:
                    raise ReadOnly(
                        f"{self.url} needs {len(waiting)} schema migration(s); open it once read-write"
                        " (or run `sessiontree migrate`) before reading it read-only"
                    )
            else:
                pgdb.migrate(conn, self.target.schema)
            # The one-statement functions; a schema migrated only part way (as the upgrade
            # tests make one) goes the long way.
            return pgdb.schema_version(conn, self.target.schema) >= ONE_STATEMENT_STEP

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            postgres_pool.release(self.target)
        for own in (self._listener, self._leaser):
            if own is not None:
                own.close()

    # -- transactions and statements --------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection[Any]]:
        """One atomic write; nested use makes a savepoint. A connection lost before COMMIT
        is ``Unavailable`` (rolled back); once COMMIT was sent, ``OutcomeUnknown``."""
        if self.readonly:
            raise ReadOnly(f"{self.url} is open read-only; nothing was written")
        held = self._held
        if held.conn is not None:
            if not held.writing:  # its snapshot would hide the heads other writers just moved
                raise SessionTreeError("a write cannot start inside snapshot(): end the snapshot first")
            before = held.last_node
            try:
                with pgdb.clear_errors(self.url), held.conn.transaction():
                    yield held.conn
            except BaseException:
                held.last_node = before  # rolled back to the savepoint
                raise
            return
        with pgdb.clear_errors(self.url), self._begun(self._begin_write) as conn:
            held.conn, held.writing, held.claimed, held.last_node = conn, True, set(), None
            backend, committing = conn.info.backend_pid, False  # read now: a lost connection forgets it
            try:
                try:
                    yield conn
                except BaseException:
                    with contextlib.suppress(psycopg.Error):
                        conn.execute("ROLLBACK")
                    raise
                committing = True  # the block ended: COMMIT goes now
                conn.execute("COMMIT")
            except (psycopg.OperationalError, psycopg.InterfaceError) as e:
                if committing and pgdb.connection_lost(e):
                    raise pgdb.outcome_unknown(self.url, backend, held.last_node) from None
                raise
            finally:
                held.conn, held.writing = None, False

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Several reads from one consistent state (REPEATABLE READ)."""
        held = self._held
        if held.conn is not None:
            yield
            return
        with pgdb.clear_errors(self.url), self._begun(self._begin_snapshot) as conn:
            held.conn = conn
            try:
                yield
            finally:
                held.conn = None
                conn.execute("COMMIT")

    @property
    def _begin_write(self) -> bytes:
        return b"; ".join(filter(None, [b"BEGIN", self._local_settings]))

    @property
    def _begin_snapshot(self) -> bytes:
        return b"; ".join(filter(None, [b"BEGIN ISOLATION LEVEL REPEATABLE READ", self._local_settings]))

    @contextmanager
    def _begun(self, begin: bytes) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection in a transaction begun with ``begin`` (a script: one round
        trip). A connection found lost as it begins has run nothing: another is tried, once."""
        for attempt in (1, 2):
            with postgres_pool.borrow(self.pool) as conn:
                try:
                    conn.execute(begin)
                except (psycopg.OperationalError, psycopg.InterfaceError) as e:
                    if attempt == 2 or not pgdb.connection_lost(e):
                        raise
                    continue
                yield conn
                return

    def _statement(self, run: Callable[[psycopg.Connection[Any]], T]) -> T:
        """``run`` (one statement) on a pooled connection of its own: a read, so it runs
        again once, on another connection, when the first was lost (a server restart, a
        pooler's idle timeout). Behind PgBouncer, inside a transaction that sets what the
        statement needs."""
        for attempt in (1, 2):
            try:
                with postgres_pool.borrow(self.pool) as conn:
                    if not self._local_settings:
                        return run(conn)
                    conn.execute(self._begin_write)
                    result = run(conn)
                    conn.execute("COMMIT")
                    return result
            except (psycopg.OperationalError, psycopg.InterfaceError) as e:
                if attempt == 2 or not pgdb.connection_lost(e):
                    raise
        raise AssertionError("unreachable")

    def claim(self, session_key: int) -> None:
        """Inside a write transaction: this session's writers wait for us from now on. The
        first claim also takes the store lock, shared (prune takes it exclusively)."""
        held = self._held
        if held.writing and session_key not in held.claimed:
            assert held.conn is not None
            if held.claimed:
                held.conn.execute(
                    "SELECT pg_advisory_xact_lock(%s, %s)", (self.lock_class, session_key % 2**31)
                )
            else:
                held.conn.execute(
                    "SELECT pg_advisory_xact_lock_shared(%(c)s, %(store)s),"
                    " pg_advisory_xact_lock(%(c)s, %(s)s)",
                    {"c": self.lock_class, "store": pgdb.STORE_LOCK, "s": session_key % 2**31},
                )
            held.claimed.add(session_key)

    def lock_sessions(self, session_ids: Sequence[str]) -> dict[str, int]:
        """Claim these sessions (see ``claim``), in key order, in one round trip after the
        first; the keys of those that exist. Outside a write transaction, only the keys."""
        rows = self.fetch_all(
            "SELECT id, key FROM sessions WHERE id = ANY(%s) ORDER BY key", (list(session_ids),)
        )
        held = self._held
        unclaimed = [int(key) for _, key in rows if key not in held.claimed] if held.writing else []
        if unclaimed:
            self.claim(unclaimed[0])  # with the store lock, if this transaction has none yet
            locks = sorted({key % 2**31 for key in unclaimed[1:]})
            if locks:
                assert held.conn is not None
                held.conn.execute(
                    "SELECT count(pg_advisory_xact_lock(%s, k)) FROM unnest(%s::int[]) AS k",
                    (self.lock_class, locks),
                )
            held.claimed.update(unclaimed)
        return {id: int(key) for id, key in rows}

    def fetch_all(self, query: Any, params: Any = None) -> list[tuple[Any, ...]]:
        conn = self._held.conn
        with pgdb.clear_errors(self.url):
            if conn is not None:
                return conn.execute(query, params).fetchall()
            return self._statement(lambda borrowed: borrowed.execute(query, params).fetchall())

    def _rows(self, sql: str, params: dict[str, Any] | None = None) -> list[Any]:
        return self.fetch_all(for_postgres(sql), params)

    def _stream(self, sql: str, params: dict[str, Any]) -> Iterator[Any]:
        conn = self._held.conn
        if conn is None:  # no snapshot to hold a cursor open in
            return iter(self._rows(sql, params))
        return self._cursor_rows(conn, for_postgres(sql), params)

    def _cursor_rows(self, conn: psycopg.Connection[Any], query: Any, params: Any) -> Iterator[Any]:
        """A server-side cursor's rows, ``STREAM_ROWS`` a round trip."""
        with pgdb.clear_errors(self.url), conn.cursor(name="sessiontree_stream") as cursor:
            cursor.itersize = STREAM_ROWS
            cursor.execute(query, params)
            yield from cursor

    def fetch_row(self, query: Any, params: Any = None) -> tuple[Any, ...] | None:
        rows = self.fetch_all(query, params)
        return rows[0] if rows else None

    def fetch_value(self, query: Any, params: Any = None) -> Any:
        row = self.fetch_row(query, params)
        return None if row is None else row[0]

    def write(self, query: Any, params: Any = None) -> int:
        """A statement inside the current write transaction; the rows it changed."""
        conn = self._held.conn
        assert conn is not None, "writes happen inside transaction()"
        return conn.execute(query, params).rowcount

    @property
    def schema_version(self) -> int:
        with pgdb.clear_errors(self.url):
            return self._statement(lambda conn: pgdb.schema_version(conn, self.target.schema))

    # -- ids ---------------------------------------------------------------------

    def has_id(self, table: str, id: str, session_key: int | None = None) -> bool:
        scope = sql.SQL("" if session_key is None else "AND session = %(s)s")
        query = sql.SQL("SELECT 1 FROM {} WHERE id = %(id)s {}").format(sql.Identifier(table), scope)
        return self.fetch_value(query, {"id": id, "s": session_key}) is not None

    def ids_starting_with(
        self, table: str, prefix: str, session_key: int | None = None, limit: int = 2
    ) -> list[str]:
        scope = sql.SQL("" if session_key is None else "AND session = %(s)s")
        query = sql.SQL(
            "SELECT id FROM {} WHERE id >= %(lo)s AND id < %(hi)s {} ORDER BY id LIMIT %(limit)s"
        ).format(sql.Identifier(table), scope)
        rows = self.fetch_all(
            query, {"lo": prefix, "hi": prefix + "\uffff", "s": session_key, "limit": limit}
        )
        return [str(r[0]) for r in rows]

    def neighbours(self, ids: Sequence[str]) -> list[Neighbour]:
        rows = self.fetch_all(
            "SELECT w.id,"
            " (SELECT max(id) FROM nodes WHERE id < w.id), (SELECT min(id) FROM nodes WHERE id > w.id),"
            " (SELECT max(id) FROM sessions WHERE id < w.id), (SELECT min(id) FROM sessions WHERE id > w.id)"
            " FROM unnest(%(ids)s::text[]) AS w(id)",
            {"ids": list(ids)},
        )
        return [Neighbour(row[0], other) for row in rows for other in row[1:] if other is not None]

    # -- sessions ------------------------------------------------------------------

    def insert_session(
        self, id: str, title: str | None, metadata: str, created_at: str, archived_at: str | None = None
    ) -> int:
        conn = self._held.conn
        assert conn is not None
        try:
            with conn.transaction():
                row = conn.execute(
                    "INSERT INTO sessions (id, title, metadata, created_at, archived_at)"
                    " VALUES (%s, %s, %s, %s, %s) RETURNING key",
                    (id, title, metadata, created_at, archived_at),
                ).fetchone()
        except pg_errors.UniqueViolation:
            raise Conflict(f"session {id} already exists") from None
        assert row is not None
        self.claim(row[0])
        return int(row[0])

    def session_row(self, id: str) -> SessionRow:
        row = self.fetch_row(
            "SELECT key, id, title, metadata, created_at, archived_at, trashed_at FROM sessions"
            " WHERE id = %s",
            (id,),
        )
        if row is None:
            raise NotFound(f"no session {id!r}")
        return SessionRow(row[0], row[1], row[2], json.loads(row[3]), row[4], row[5], row[6])

    def session_ids(self) -> list[str]:
        return [r[0] for r in self.fetch_all("SELECT id FROM sessions ORDER BY id")]

    def set_archived(self, session_key: int, when: str | None) -> None:
        self.claim(session_key)
        self.write("UPDATE sessions SET archived_at = %s WHERE key = %s", (when, session_key))

    def set_title(self, session_key: int, title: str | None) -> None:
        self.claim(session_key)
        self.write("UPDATE sessions SET title = %s WHERE key = %s", (title, session_key))

    def delete_session(self, session_key: int) -> int:
        self.claim(session_key)
        doomed = [r[0] for r in self.fetch_all(for_postgres(TREE) + "SELECT key FROM t", {"s": session_key})]
        self.write("DELETE FROM branches WHERE session = %s", (session_key,))
        self.write("DELETE FROM checkpoints WHERE session = %s", (session_key,))
        self.write("DELETE FROM nodes WHERE key = ANY(%s)", (doomed,))
        self.write("DELETE FROM runs WHERE session = %s", (session_key,))
        self.write("DELETE FROM sessions WHERE key = %s", (session_key,))
        self.cache.clear()
        return len(doomed)

    # -- nodes -----------------------------------------------------------------------

    def reserve_node_keys(self, count: int) -> int:
        return int(self.fetch_value("SELECT sessiontree_reserve_node_keys(%s)", (count,)))

    def insert_nodes(self, rows: Sequence[tuple[Any, ...]], keys_from: int | None = None) -> int:
        held = self._held
        conn = held.conn
        assert conn is not None, "writes happen inside transaction()"
        self.claim(rows[0][1])
        try:
            if keys_from is None:  # one node: its key reserved in the same statement
                (row,) = rows
                inserted = conn.execute(
                    "INSERT INTO nodes (key, id, session, parent, depth, kind, payload, created_at, run)"
                    " VALUES (sessiontree_reserve_node_keys(1), %s, %s, %s, %s, %s, %s, %s, %s)"
                    " RETURNING key",
                    row,
                ).fetchone()
                assert inserted is not None
                held.last_node = row[0]
                return int(inserted[0])
            with conn.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO nodes (key, id, session, parent, depth, kind, payload, created_at, run)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    [(keys_from + i, *row) for i, row in enumerate(rows)],
                )
            held.last_node = rows[-1][0]
            return keys_from + len(rows) - 1
        except pg_errors.UniqueViolation as e:
            if "nodes_one_decision" in str(e):
                raise Conflict(f"pause {self._committed_id(rows[0][2])} already has a decision") from None
            if e.diag.constraint_name == "nodes_id_key":  # a caller's id, taken since append_many checked
                found = FULL_ID.search(e.diag.message_detail or "")
                taken = found[0] if found else None
                raise Conflict(f"node id {taken} is taken: a node of this store has it") from None
            raise
        except (pg_errors.IntegrityConstraintViolation, pg_errors.ForeignKeyViolation) as e:
            if "in the trash" in str(e):
                session_id = self._committed_session_id(rows[0][1])
                raise Conflict(f"session {session_id} is in the trash: restore it to write to it") from None
            if "existing session" in str(e):  # deleted by a transaction that held its lock first
                raise NotFound(SESSION_GONE) from None
            if "same session" in str(e) or isinstance(e, pg_errors.ForeignKeyViolation):
                raise NotFound(
                    f"parent node {self._committed_id(rows[0][2])} is not in this session"
                ) from None
            raise

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
        run_id, fields = run if run is not None else (None, None)
        recorded = list(fields[:6]) if fields is not None else [None] * 6
        row = self._one_write(
            # The arrays in binary: as text each payload's quotes are escaped on the way.
            "SELECT * FROM sessiontree_append(%s, %s, %s, %s, %s, %s, %b, %b, %s, %s, %s,"
            " %s, %s, %s, %s, %s, %s)",
            (
                self.lock_class,
                session_key,
                branch,
                expect,
                parent,
                kind,
                [n[0] for n in nodes],
                [n[1] for n in nodes],
                created,
                run_id,
                fields is not None,
                *recorded,
            ),
            nodes[-1][0],
        )
        return None if row is None else AppendedAt(row[0], int(row[1]))

    def decide_at(self, session_id: str, pause_id: str, decision: tuple[str, str], created: str) -> bool:
        row = self._one_write(
            "SELECT sessiontree_decide(%s, %s, %s, %s, %s, %s)",
            (self.lock_class, session_id, pause_id, *decision, created),
            decision[0],
        )
        return row is not None

    def fork_at(
        self,
        session_key: int,
        name: str,
        at: str,
        at_is_id: bool,
        metadata: str | None,
        created: str,
    ) -> str | None:
        row = self._one_write(
            "SELECT sessiontree_fork(%s, %s, %s, %s, %s, %s, %s, %s)",
            (self.lock_class, session_key, name, at, at_is_id, metadata, created, metadata is None),
            None,
        )
        return None if row is None else str(row[0])

    def _one_write(
        self, statement: str, params: Sequence[Any], node_id: str | None
    ) -> tuple[Any, ...] | None:
        """A write function's one row, run as its own transaction on a pooled connection;
        None when it took the long way (SQLSTATE SW001) or a trigger refused it (nothing
        was written: the long way says why). Lost once sent: ``OutcomeUnknown``."""
        if self.readonly or self._held.conn is not None:
            return None  # the long way says it is read-only, or joins the open transaction
        with pgdb.clear_errors(self.url), postgres_pool.borrow(self.pool) as conn:
            backend = conn.info.backend_pid  # read now: a lost connection forgets it
            sent = False  # whether what commits was sent: the call, or behind PgBouncer its COMMIT
            try:
                if not self._local_settings:
                    sent = True
                    return conn.execute(statement, params).fetchone()
                conn.execute(self._begin_write)  # behind PgBouncer: BEGIN and the settings first
                row = conn.execute(statement, params).fetchone()
                sent = True
                conn.execute("COMMIT")
                return row
            except psycopg.IntegrityError:
                return None
            except (psycopg.OperationalError, psycopg.InterfaceError) as e:
                if sent and pgdb.connection_lost(e):
                    raise pgdb.outcome_unknown(self.url, backend, node_id) from None
                raise
            except psycopg.Error as e:
                if e.sqlstate == "SW001":
                    return None
                raise

    def _elsewhere(self, query: str, key: int) -> tuple[Any, ...] | None:
        """One row read outside this thread's transaction (which its error aborted), for the
        message of that error: on a pooled connection if one is free at once, else on a new
        one, since every pooled one may be held by a transaction that waits for this one
        (one, with pool_size=1: waiting for it took the pool's 30 s and then said the server
        could not be reached)."""
        with pgdb.clear_errors(self.url), contextlib.ExitStack() as stack:
            try:
                other = stack.enter_context(postgres_pool.borrow(self.pool, timeout=0.1))
            except PoolTimeout:
                other = stack.enter_context(pgdb.connect(self.target))
            if self._local_settings:  # behind PgBouncer: the settings last one transaction
                other.execute(self._begin_write)
            rows = other.execute(query, (key,)).fetchall()
            if self._local_settings:
                other.execute("ROLLBACK")
        return rows[0] if rows else None

    def _committed_session_id(self, key: int) -> str | None:
        row = self._elsewhere("SELECT id FROM sessions WHERE key = %s", key)
        return None if row is None else str(row[0])

    def _committed_id(self, key: int | None) -> str | None:
        """A node's id read on another connection: the refused insert aborted ours (the
        transaction, or its savepoint when nested, rolls back as the error passes)."""
        if key is None:
            return None
        row = self._elsewhere("SELECT id FROM nodes WHERE key = %s", key)
        return None if row is None else str(row[0])

    def _path_rows(self, key: int, stops: list[str]) -> list[PathRow]:
        return self.fetch_all(_PATH, {"key": key, "stop": stops})

    def _ref_walk(
        self, session_key: int, name: str, stops: list[str], redactions: bool
    ) -> tuple[int, str, int | None, list[PathRow]] | None:
        if self._held.conn is not None:  # inside a snapshot or a write: read as it does
            return None
        rows = self.fetch_all(
            _REF_WALK, {"s": session_key, "name": name, "stop": stops, "redactions": redactions}
        )
        if not rows or rows[0][0] is None:
            return None
        return rows[0][0], rows[0][2], rows[0][1], [r[2:] for r in rows]

    def redaction_count(self) -> int:
        return int(self.fetch_value("SELECT redactions FROM change_counts"))

    def wait_for_decisions(self, timeout: float) -> bool:
        """LISTEN for the trigger's NOTIFY; a missed signal costs one ``timeout``. Behind
        PgBouncer in transaction mode a LISTEN lasts one transaction: the caller polls."""
        if self.target.pgbouncer:
            time.sleep(timeout)
            return False
        if self._listener is None:
            try:
                self._listener = self._listen()
            except Unavailable:  # the server is away: wait as a poll would, try again next time
                time.sleep(timeout)
                return False
            if self._relisten:  # listening again: what came while nobody listened is unknown
                self._relisten = False
                return True
        try:
            with pgdb.clear_errors(self.url):
                return any(True for _ in self._listener.notifies(timeout=timeout, stop_after=1))
        except Unavailable:  # the connection dropped: the next call opens another
            with contextlib.suppress(psycopg.Error):
                self._listener.close()
            self._listener, self._relisten = None, True
            return False

    def _listen(self) -> psycopg.Connection[Any]:
        with pgdb.clear_errors(self.url):
            listener = pgdb.connect(self.target)
            # The trigger's own derivation: a channel name fits in 63 bytes.
            channel = listener.execute(
                "SELECT sessiontree_decision_channel(%s)", (self.target.schema,)
            ).fetchone()
            assert channel is not None
            listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel[0])))
        return listener

    def _tool_lock(self, session_key: int) -> tuple[int, int]:
        """A session's tool lease, as an advisory lock key: the store's lock class, and a
        second half below the ones taken (a session's write lock is its key modulo 2**31,
        never negative; -1 and -2 are the migration and store locks)."""
        return self.lock_class, -3 - session_key % (2**31 - 3)

    @contextmanager
    def tool_lease(self, session_key: int) -> Iterator[None]:
        lock = self._tool_lock(session_key)
        if self.target.pgbouncer:
            with self._lease_in_a_transaction(lock):
                yield
            return
        self._on_leaser("SELECT pg_advisory_lock_shared(%s, %s)", lock, reconnect=True)
        try:
            yield
        finally:  # a leaser that dropped meanwhile holds nothing any more: nothing to undo
            with contextlib.suppress(Unavailable):
                self._on_leaser("SELECT pg_advisory_unlock_shared(%s, %s)", lock, reconnect=False)

    @contextmanager
    def _lease_in_a_transaction(self, lock: tuple[int, int]) -> Iterator[None]:
        """Behind PgBouncer in transaction mode, where a session-level lock would stay with a
        server connection other clients then get: the lease is a transaction-level lock,
        held by a transaction left open on a connection of its own (PgBouncer keeps its
        server connection for it) until the lease ends, or the process does."""
        with pgdb.clear_errors(self.url):
            conn = pgdb.connect(self.target)
            try:
                conn.execute("BEGIN")
                conn.execute("SELECT pg_advisory_xact_lock_shared(%s, %s)", lock)
            except BaseException:
                conn.close()
                raise
        try:
            yield
        finally:
            conn.close()  # the server rolls the transaction back, and gives the lock up

    def _on_leaser(self, statement: str, params: tuple[int, int], *, reconnect: bool) -> None:
        """Run ``statement`` on the connection that holds this store's tool leases."""
        with self._leaser_lock, pgdb.clear_errors(self.url):
            if self._leaser is not None and self._leaser.broken and reconnect:
                self._leaser = None  # its leases went with it
            if self._leaser is None:
                if not reconnect:
                    return
                self._leaser = pgdb.connect(self.target)
            self._leaser.execute(statement, params)

    def unleased(self, session_keys: Sequence[int]) -> set[int]:
        if not session_keys:
            return set()
        by_lock = {self._tool_lock(key)[1]: key for key in session_keys}
        # A transaction of one statement: each lock it takes is given back as it ends.
        with pgdb.clear_errors(self.url):
            rows = self._statement(
                lambda conn: conn.execute(
                    "SELECT k FROM unnest(%s::int[]) AS k WHERE pg_try_advisory_xact_lock(%s, k)",
                    (list(by_lock), self.lock_class),
                ).fetchall()
            )
        return {by_lock[r[0]] for r in rows}

    def nodes_by_ids(self, ids: Sequence[str]) -> dict[str, StoredNode]:
        rows = self.fetch_all(
            "SELECT n.id, n.key, s.id, p.id, n.kind, n.payload, n.depth FROM nodes n"
            " JOIN sessions s ON s.key = n.session LEFT JOIN nodes p ON p.key = n.parent"
            " WHERE n.id = ANY(%s)",
            (list(ids),),
        )
        return {r[0]: StoredNode(r[1], r[2], r[3], r[4], r[5], r[6]) for r in rows}

    # -- usage -------------------------------------------------------------------------

    # -- branches and checkpoints ----------------------------------------------------

    def ref(self, session_key: int, name: str) -> RefTarget | None:
        self.claim(session_key)
        row = self.fetch_row(_REF, {"s": session_key, "name": name})
        return None if row is None else RefTarget(row[0], row[1], row[2])

    def branch_head(self, session_key: int, name: str) -> BranchHead | None:
        self.claim(session_key)
        row = self.fetch_row(_BRANCH_HEAD, {"s": session_key, "name": name})
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
        self.claim(session_key)
        branch = {"s": session_key, "name": name, "head": head, "metadata": metadata, "created": created}
        self.write(_INSERT_BRANCH, {**branch, "updated": updated or created})

    def set_head(self, session_key: int, name: str, head: int | None, when: str) -> None:
        self.claim(session_key)
        self.write(
            "UPDATE branches SET head = %s, updated_at = %s WHERE session = %s AND name = %s",
            (head, when, session_key, name),
        )

    def rename_branch(self, session_key: int, old: str, new: str, when: str) -> None:
        self.claim(session_key)
        self.write(
            "UPDATE branches SET name = %s, updated_at = %s WHERE session = %s AND name = %s",
            (new, when, session_key, old),
        )

    def delete_branch(self, session_key: int, name: str) -> None:
        self.claim(session_key)
        self.write("DELETE FROM branches WHERE session = %s AND name = %s", (session_key, name))

    def insert_checkpoint(self, session_key: int, name: str, node: int, when: str) -> None:
        self.claim(session_key)
        self.write(
            "INSERT INTO checkpoints (session, name, node, created_at) VALUES (%s, %s, %s, %s)",
            (session_key, name, node, when),
        )

    def delete_checkpoint(self, session_key: int, name: str) -> bool:
        self.claim(session_key)
        return self.write("DELETE FROM checkpoints WHERE session = %s AND name = %s", (session_key, name)) > 0

    # -- runs --------------------------------------------------------------------------

    def insert_run(self, id: str, session_key: int, fields: Sequence[Any]) -> int:
        self.claim(session_key)
        conn = self._held.conn
        assert conn is not None
        try:
            row = conn.execute(
                f"INSERT INTO runs (id, session, {RUN_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
                " RETURNING key",
                (id, session_key, *fields),
            ).fetchone()
        except pg_errors.ForeignKeyViolation:  # its one reference: the session, deleted meanwhile
            raise NotFound(SESSION_GONE) from None
        assert row is not None
        return int(row[0])

    # -- metadata ----------------------------------------------------------------

    def set_session_metadata(self, session_key: int, metadata: str) -> None:
        self.claim(session_key)
        self.write("UPDATE sessions SET metadata = %s WHERE key = %s", (metadata, session_key))

    def set_branch_metadata(self, session_key: int, name: str, metadata: str) -> None:
        self.claim(session_key)
        self.write(
            "UPDATE branches SET metadata = %s WHERE session = %s AND name = %s",
            (metadata, session_key, name),
        )
