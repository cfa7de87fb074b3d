"""PostgreSQL connections, errors and schema migrations.

Contract:
- ``parse_url(url)`` splits a ``postgresql://`` URL into what libpq takes and
  sessiontree's own settings, given as query parameters and removed before
  libpq sees them: ``schema`` (the PostgreSQL schema that holds the tables,
  default ``sessiontree``), ``pool_size`` (default 4), ``prepare_threshold``
  and ``pgbouncer`` (``true``: a pooler in transaction mode is in between, so no
  setting is kept on a connection, nothing is prepared on the server unless
  ``prepare_threshold`` says so, and LISTEN and session locks are not used; see
  docs/postgres.md; without it in the URL, the environment variable
  ``SESSIONTREE_PGBOUNCER`` says it). Every other parameter reaches
  libpq exactly as written (libpq decodes its own %-escapes and reads ``+`` as a
  plus sign, so re-encoding them would change them).
- ``migrate(conn, schema)`` refuses a newer schema (``SchemaTooNew``) or a
  schema holding someone else's tables (``NotOurs``, read from the catalog, which
  shows every table, even those the role may not read) before writing anything,
  then applies each pending step of ``migrations/postgres/`` in its own
  transaction under an advisory lock, so workers starting together migrate
  exactly once. Step numbers are the SQLite steps': a PostgreSQL store starts
  at step 3, and every later step has a file for each dialect.
- ``lock_class(schema)`` is the first half of every advisory lock key of that
  schema's store, so stores in different schemas of one database never wait
  for each other.
- ``clear_errors()`` turns what psycopg raises about the server itself into
  sessiontree errors, each one line saying what happened: a connection that
  cannot be made or was lost is ``Unavailable``; a server that refuses the
  connection for good (a bad option, a wrong password, no such database), a
  statement timeout, a PostgreSQL limit, a server out of resources are
  ``SessionTreeError``s naming it; full, locked too long and read-only have
  classes of their own. Anything else passes through.
- ``connection_lost(error)`` says whether an error is about the connection
  itself; ``outcome_unknown`` is the error for one lost while a write committed.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from ..errors import (
    Busy,
    DiskFull,
    NotOurs,
    OutcomeUnknown,
    ReadOnly,
    SchemaTooNew,
    SessionTreeError,
    Unavailable,
)
from ..names import shown
from .migrations import Migration, migrations_dir, read_folder, schema_steps

MIGRATION_LOCK = -1
STORE_LOCK = -2
"""Writers hold it shared for their whole transaction; prune takes it exclusively. (The
second halves of lock keys: a session's lock is its key modulo 2**31, never negative.)"""
LOCK_TIMEOUT = "30s"
"""How long a writer waits for a lock before ``Busy`` (SQLite's writers wait as long)."""
PLANS = "SET plan_cache_mode TO force_custom_plan"
"""Every execution of a prepared statement is planned for the tables as they are then.
psycopg prepares a statement on the server after ``prepare_threshold`` runs, and the
server's default then keeps the generic plan it chose while ``nodes`` was tiny (a
sequential scan and a hash join, cheap on three pages) until statistics change: on a
store that fills fast with autovacuum behind, every step of a path walk scanned the
whole table (a cold read at depth 2,100 of 20,000 nodes: 8.8 s, 23 ms once analyzed).
A custom plan is made with the table's current size, which the planner reads from the
file even when it was never analyzed, so a key lookup stays an index lookup whatever
the statistics say; it costs a plan per execution (tens of µs for these statements),
and keeps what preparing saves (the parse). Pinning plans instead (``enable_seqscan``
off in functions) would have to be repeated for every statement that reads by key."""
VERSION_TABLE = "schema_version"
FIRST_STEP = 3


@dataclass(frozen=True)
class Target:
    conninfo: str
    schema: str
    pool_size: int
    prepare_threshold: int | None
    shown: str
    """The URL with its password hidden, for messages."""
    pgbouncer: bool = False
    """Behind a pooler in transaction mode: each transaction sets what it needs (``settings``)."""


def parse_url(url: str) -> Target:
    """Split a ``postgresql://`` URL (see the module docstring). A URL libpq cannot read
    is ``SessionTreeError`` saying why, with any password in it hidden."""
    try:
        parts = urlsplit(url)
    except ValueError as e:
        raise SessionTreeError(f"invalid PostgreSQL URL {_hide_password(url)}: {e}") from None
    ours = {
        "schema": "sessiontree",
        "pool_size": "4",
        "prepare_threshold": "",
        "pgbouncer": os.environ.get("SESSIONTREE_PGBOUNCER") or "false",
    }
    kept = []  # libpq's own parameters, as written: libpq decodes them itself
    secrets = [parts.password or ""]
    for piece in parts.query.split("&"):
        key, _, value = (unquote(half) for half in piece.partition("="))
        if key in ours:
            ours[key] = value
        elif piece:
            kept.append(piece)
            if key == "password":
                secrets.append(value)
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", ours["schema"]):
        raise SessionTreeError(
            f"schema={shown(ours['schema'])}: a schema name is lower-case letters, digits and _ (at most 63)"
        )
    if ours["pgbouncer"].lower() not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
        raise SessionTreeError(f"pgbouncer={shown(ours['pgbouncer'])}: pgbouncer is true or false")
    pgbouncer = ours["pgbouncer"].lower() in ("true", "1", "yes", "on")
    # PgBouncer in transaction mode hands each transaction any server connection, which
    # knows none of the statements prepared on another (1.21 and later can, when asked).
    threshold_text = ours["prepare_threshold"] or ("none" if pgbouncer else "5")
    try:
        pool_size = int(ours["pool_size"])
        threshold = None if threshold_text.lower() == "none" else int(threshold_text)
    except ValueError:
        raise SessionTreeError("pool_size must be a number, prepare_threshold a number or none") from None
    if pool_size < 1:
        raise SessionTreeError("pool_size must be at least 1")
    # Rebuilt by hand: urlunsplit drops the // of a URL without a host (postgresql:///db).
    base = f"{parts.scheme}://{parts.netloc}{parts.path}"
    conninfo = (
        base + (f"?{'&'.join(kept)}" if kept else "") + (f"#{parts.fragment}" if parts.fragment else "")
    )
    shown_url = _hide_password(base)
    try:
        conninfo_to_dict(conninfo)  # what libpq itself refuses: a bad option, a bad %-escape
    except psycopg.ProgrammingError as e:
        raise SessionTreeError(
            f"invalid PostgreSQL URL {shown_url}: {_without(secrets, _first_line(e))}"
        ) from None
    if ours["schema"] != "sessiontree":
        shown_url += f"?schema={ours['schema']}"
    return Target(conninfo, ours["schema"], pool_size, threshold, shown_url, pgbouncer)


def _hide_password(url: str) -> str:
    """A URL without its query, its password replaced by ``***``, and shortened if huge."""
    hidden = re.sub(r"(://[^:/@]*):[^/]*@", r"\1:***@", url.partition("?")[0])
    return hidden if len(hidden) <= 200 else f"{hidden[:100]}... ({len(hidden):,} characters)"


def _without(secrets: list[str], text: str) -> str:
    """``text`` with every quoted piece of a secret (libpq quotes the token it refuses) hidden."""

    def hide(match: re.Match[str]) -> str:
        return '"***"' if match[1] and any(match[1] in secret for secret in secrets) else match[0]

    return re.sub(r'"([^"]*)"', hide, text)


def lock_class(schema: str) -> int:
    """The first half of the advisory lock keys of the store in ``schema``: 32 bits of a
    hash of its name, the same in every process. Advisory locks belong to the whole
    database, so a key shared by all schemas made each store wait for every other
    one's writers and prunes; two names that collide only wait for each other."""
    digest = hashlib.sha256(f"sessiontree:{schema}".encode()).digest()
    return int.from_bytes(digest[:4], "big", signed=True)


def settings(schema: str, *, local: bool) -> sql.Composed:
    """What every statement of the store needs set: our schema first on the search path,
    the lock wait, and plans made for the tables as they are now (``PLANS``). ``local``:
    for the current transaction only (behind PgBouncer, where a connection's settings
    would reach whichever client gets that server connection next)."""
    scope = sql.SQL("SET LOCAL" if local else "SET")
    return sql.SQL("; ").join(
        [
            sql.SQL("{} search_path TO {}").format(scope, sql.Identifier(schema)),
            sql.SQL("{} lock_timeout TO {}").format(scope, sql.Literal(LOCK_TIMEOUT)),
            sql.SQL("{} {}").format(scope, sql.SQL(PLANS.removeprefix("SET "))),
        ]
    )


def configure(conn: psycopg.Connection[Any], schema: str, *, readonly: bool) -> None:
    """Per-connection settings (``settings``), in one round trip."""
    conn.execute(settings(schema, local=False).as_bytes(conn))  # a script: the simple protocol
    if readonly:
        conn.execute("SET default_transaction_read_only TO on")


def connect(target: Target, *, readonly: bool = False) -> psycopg.Connection[Any]:
    with clear_errors(target.shown):
        conn = psycopg.connect(
            target.conninfo, autocommit=True, connect_timeout=10, prepare_threshold=target.prepare_threshold
        )
        if not target.pgbouncer:  # behind PgBouncer each transaction sets its own (``settings``)
            configure(conn, target.schema, readonly=readonly)
        return conn


@contextmanager
def clear_errors(where: str) -> Iterator[None]:
    """psycopg's errors about the server as sessiontree errors (see the module docstring)."""
    try:
        yield
    except (pg_errors.LockNotAvailable, pg_errors.DeadlockDetected, pg_errors.SerializationFailure):
        raise Busy(
            f"other writers held {where} for more than {LOCK_TIMEOUT} (or the writes crossed);"
            " nothing was written: try again"
        ) from None
    except pg_errors.DiskFull:
        raise DiskFull("the PostgreSQL server's disk is full; nothing was written") from None
    except pg_errors.ReadOnlySqlTransaction:
        raise ReadOnly(
            f"{where} is open read-only (or the server is a standby); nothing was written"
        ) from None
    except pg_errors.InsufficientPrivilege as e:
        raise SessionTreeError(f"{where}: permission denied ({_first_line(e)})") from None
    except (psycopg.OperationalError, psycopg.InterfaceError) as e:
        raise _said(e, where) from None


_GONE = frozenset({"57P01", "57P02", "57P03", "57P04", "57P05", "25P03", "53300"})
"""SQLSTATEs that end or refuse the connection itself (besides class 08): a shutdown by an
administrator or a crash, a server starting up, a dropped database, an idle timeout, too
many clients."""

_FOR_NOW = re.compile(
    r"starting up|shutting down|recovery mode|not (yet )?accepting connections|too many clients"
    r"|connection slots are reserved|administrator command"
)
"""A server's refusals of a new connection that pass (it is starting or stopping, or full);
any other (a bad option, a wrong password, no such database) stays until the URL changes."""


_CONNECTING = ("connection failed", "connection is bad", "couldn't get a connection")
"""How psycopg's (and its pool's) messages about a connection it could not make begin."""


def connection_lost(error: BaseException) -> bool:
    """Whether ``error`` is about the connection itself (a server that cannot be reached,
    went away or ended the connection), not about a statement it ran."""
    if isinstance(error, psycopg.InterfaceError):  # a connection already closed
        return True
    if not isinstance(error, psycopg.OperationalError):
        return False
    state = error.sqlstate
    return state is None or state.startswith("08") or state in _GONE


def _said(error: psycopg.Error, where: str) -> SessionTreeError:
    """One line saying what an ``OperationalError`` (or ``InterfaceError``) is."""
    text = _first_line(error)
    state = getattr(error, "sqlstate", None)
    if connection_lost(error):
        # libpq reports a connection the server refused as a failed connection, without a
        # SQLSTATE: the server's own FATAL line says why.
        connecting = text.startswith(_CONNECTING)
        refused = re.search(r"FATAL:\s+(.*)", text) if connecting else None
        if refused and not _FOR_NOW.search(refused[1]):
            return SessionTreeError(f"PostgreSQL at {where} refused the connection: {refused[1]}")
        if connecting:
            return Unavailable(f"cannot reach PostgreSQL at {where}: {text}")
        return Unavailable(f"lost the connection to PostgreSQL at {where}: {text}; nothing was written")
    if isinstance(error, pg_errors.QueryCanceled):
        return SessionTreeError(
            f"PostgreSQL at {where} canceled the statement: {text} (statement_timeout, or a cancel"
            " request); nothing was written"
        )
    if state is not None and state.startswith("54"):  # program_limit_exceeded and its kind
        return SessionTreeError(f"a PostgreSQL limit was exceeded at {where}: {text}; nothing was written")
    if state is not None and state.startswith("53"):
        return SessionTreeError(
            f"the PostgreSQL server at {where} is out of resources ({text}); nothing was written"
        )
    return SessionTreeError(f"PostgreSQL at {where} failed: {text} (SQLSTATE {state}); nothing was written")


def outcome_unknown(where: str, backend_pid: int, node_id: str | None) -> OutcomeUnknown:
    """The error for a connection lost once COMMIT was sent: it may have been done."""
    check = f"store.node({node_id!r}) finds its last node" if node_id else "reading it back tells"
    return OutcomeUnknown(
        f"lost the connection to PostgreSQL at {where} while committing: the write may or may not"
        f" have been saved ({check} if it was; if not, it never will be once server process"
        f" {backend_pid} has ended)",
        node_id=node_id,
        backend_pid=backend_pid,
    )


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def steps() -> list[Migration]:
    """The PostgreSQL steps, numbered as the schema's steps they match."""
    found = list(read_folder(migrations_dir() / "postgres", "postgres/"))
    expected = list(range(FIRST_STEP, len(schema_steps()) + 1))
    if [s.version for s in found] != expected:
        raise SessionTreeError(
            f"the PostgreSQL migrations are {[s.version for s in found]}, expected steps {expected}"
        )
    return found


def schema_version(conn: psycopg.Connection[Any], schema: str) -> int:
    """The schema's step (0 when it has no sessiontree tables yet); ``NotOurs`` when it
    holds tables that are not ours. Read from the catalog: ``information_schema`` shows a
    role only the tables it has a privilege on, and an empty-looking schema would be
    migrated next to another application's tables."""
    relations = conn.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace"
        " WHERE ns.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S') ORDER BY 1",
        (schema,),
    ).fetchall()
    tables = [name for (name,) in relations]
    if VERSION_TABLE not in tables or not _is_our_version_table(conn, schema):
        if tables:
            raise NotOurs(
                f"PostgreSQL schema {schema!r} already holds other tables ({', '.join(tables[:5])}); "
                "nothing was written to it: choose another with ?schema=NAME"
            )
        return 0
    row = conn.execute(
        sql.SQL("SELECT version FROM {}.{}").format(sql.Identifier(schema), sql.Identifier(VERSION_TABLE))
    ).fetchone()
    return 0 if row is None else int(row[0])


def _is_our_version_table(conn: psycopg.Connection[Any], schema: str) -> bool:
    """Whether ``schema_version`` is sessiontree's (one integer column, ``version``), not
    another tool's table of that common name."""
    columns = conn.execute(
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a"
        " JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace ns ON ns.oid = c.relnamespace"
        " WHERE ns.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped",
        (schema, VERSION_TABLE),
    ).fetchall()
    return [tuple(c) for c in columns] == [("version", "integer")]


def pending(conn: psycopg.Connection[Any], schema: str) -> list[Migration]:
    version = schema_version(conn, schema)
    every = steps()
    known = every[-1].version if every else 0
    if version > known:
        raise SchemaTooNew(
            f"database schema version {version} is newer than this sessiontree knows ({known});"
            " upgrade sessiontree to open it. Nothing was written."
        )
    return [step for step in every if step.version > version]


def migrate(conn: psycopg.Connection[Any], schema: str) -> list[Migration]:
    """Apply the pending steps, each in its own transaction under the migration lock."""
    applied = []
    for step in pending(conn, schema):
        with conn.transaction():
            conn.execute(settings(schema, local=True).as_bytes(conn))  # behind PgBouncer too
            conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (lock_class(schema), MIGRATION_LOCK))
            if schema_version(conn, schema) >= step.version:  # another worker did it meanwhile
                continue
            # Only when missing: CREATE SCHEMA needs the database's CREATE privilege even
            # with IF NOT EXISTS, and a role may be given just a schema to create in.
            if conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone() is None:
                conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
            conn.execute(
                sql.SQL("CREATE TABLE IF NOT EXISTS {}.{} (version integer NOT NULL)").format(
                    sql.Identifier(schema), sql.Identifier(VERSION_TABLE)
                )
            )
            conn.execute(step.sql.encode())  # a script: the simple query protocol runs it whole
            conn.execute(sql.SQL("DELETE FROM {}").format(sql.Identifier(VERSION_TABLE)))
            conn.execute(
                sql.SQL("INSERT INTO {} (version) VALUES (%s)").format(sql.Identifier(VERSION_TABLE)),
                (step.version,),
            )
        applied.append(step)
    return applied


def pending_steps(url: str) -> tuple[int, list[Migration]]:
    """(schema version, steps still to apply) of a server store, read without writing."""
    target = parse_url(url)
    with connect(target) as conn, clear_errors(target.shown):
        return schema_version(conn, target.schema), pending(conn, target.schema)
