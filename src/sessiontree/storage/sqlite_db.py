"""The SQLite backend's connections, transactions and schema migrations.

Contract:
- ``connect(path)`` opens a connection in autocommit mode (we issue BEGIN and
  COMMIT ourselves), refuses a schema newer than this code *before* writing a
  byte, applies pending migrations, then sets the per-connection pragmas:
  foreign keys on, WAL, a busy timeout, synchronous=NORMAL. A new database gets
  ``PAGE_SIZE`` pages before its first byte is written.
- ``read_only_reason(path)`` says why this process cannot write an existing
  file (the file is read-only, or its directory is and the ``-wal``/``-shm``
  files WAL needs are not already there and writable), or None; a store opens
  such a file read-only by itself. ``connect(path, readonly=True)`` reads a
  file in a read-only directory that has no (or an empty) ``-wal`` beside it as immutable
  (SQLite cannot make the ``-shm`` it needs otherwise), and refuses one that
  has a ``-wal`` it cannot read, saying so. A full disk, where SQLite cannot
  make the ``-shm`` either, is read the same way; opening it to write is
  ``DiskFull``.
- ``transaction(conn)`` is ``BEGIN IMMEDIATE`` .. ``COMMIT``, rolled back on any
  exception; nested use joins the outer transaction. Taking the write lock up
  front means a writer never fails half-way for lack of it. A busy database is
  waited for (the busy timeout, again and again, up to WRITE_WAIT_ROUNDS of them:
  30 s), then refused with ``Busy``, which says what to do, instead of a raw
  "database is locked". The switch of a new file to WAL, which needs the lock
  too, is waited for the same way.
- Migrations are the schema's steps (``storage.migrations``: the ``NNNN_name.sql``
  files of the top-level ``migrations/`` folder); the number of applied steps is
  ``PRAGMA user_version``. Each step runs in its own
  transaction, so a failed step leaves the previous version intact. The
  version and the table list that decide whether a file is ours are read from
  one snapshot, and each step re-reads the version once it holds the write
  lock, so any number of processes can open (and migrate) a new file at once.
"""

from __future__ import annotations

import os
import random
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

from ..errors import Busy, DiskFull, InvalidPayload, NotOurs, ReadOnly, SchemaTooNew, SessionTreeError
from .migrations import Migration, schema_steps
from .migrations import migrations_dir as migrations_dir  # re-exported: ``sessiontree.db`` is this module

BUSY_TIMEOUT_MS = 5_000
TOOLS_SUFFIX = "-tools"
COMPANIONS = ("-wal", "-shm", "-journal", TOOLS_SUFFIX)
"""The files a store keeps beside its database file: SQLite's log, shared memory and
rollback journal, and the tool leases (``storage.leases``)."""
PAGE_SIZE = 8_192


def companions(path: str | Path) -> list[Path]:
    """The companion files (``COMPANIONS``) of the database file at ``path``."""
    return [Path(f"{path}{end}") for end in COMPANIONS]


"""Page size of a new database file (SQLite's default is 4,096). Messages of about 1 KB
fill a 4 KB page three to a page and waste a fifth of it; 8 KB pages hold seven with
little waste (``docs/performance.md``). An existing file keeps the page size it has."""
WRITE_WAIT_ROUNDS = 6
"""A writer gives up (``Busy``) after this many busy timeouts in all: 30 s by default."""


def migrations() -> list[Migration]:
    """All migration steps, in order (``migrations.schema_steps``: SQLite runs them as written)."""
    return list(schema_steps())


def schema_version(conn: sqlite3.Connection) -> int:
    version: int = conn.execute("PRAGMA user_version").fetchone()[0]
    return version


def foreign_tables(conn: sqlite3.Connection) -> list[str]:
    """The tables of a database, but SQLite's own."""
    return [
        name
        for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
        )
    ]


def version_and_tables(conn: sqlite3.Connection) -> tuple[int, list[str]]:
    """(schema version, ``foreign_tables``) read from one snapshot. Read apart, they can
    disagree: a process opening a new file sees version 0, another commits the first
    migration, and the tables it made look like another program's."""
    if conn.in_transaction:
        return schema_version(conn), foreign_tables(conn)
    conn.execute("BEGIN")  # deferred: one snapshot (or a shared lock) until COMMIT; no write
    try:
        return schema_version(conn), foreign_tables(conn)
    finally:
        if conn.in_transaction:  # a file that is not a database may have ended it already
            conn.execute("COMMIT")


def pending_migrations(conn: sqlite3.Connection) -> list[Migration]:
    """The steps this database still needs. A version-0 file that already holds tables is
    someone else's: refused (``NotOurs``) before anything is written to it."""
    version, tables = version_and_tables(conn)
    if version > 0 and "nodes" not in tables:
        raise NotOurs(
            f"not a sessiontree database: its schema version is {version}, but it has no nodes table"
        )
    if version == 0 and tables:
        raise NotOurs(
            f"not a sessiontree database: it already holds other tables ({', '.join(tables[:5])}"
            f"{', ...' if len(tables) > 5 else ''}); nothing was written to it"
        )
    steps = migrations()
    if version > len(steps):
        raise SchemaTooNew(
            f"database schema version {version} is newer than this sessiontree knows "
            f"({len(steps)}); upgrade sessiontree to open it. Nothing was written."
        )
    return steps[version:]


def pending_steps(path: str | Path) -> tuple[int, list[Migration]]:
    """(schema version, steps still to apply) of a database file, read without writing
    (also on a read-only file system, where SQLite cannot make the ``-shm`` it wants)."""
    conn = _open_read_only(str(path))
    try:
        try:
            return schema_version(conn), pending_migrations(conn)
        except sqlite3.DatabaseError as e:
            raise SessionTreeError(f"{path} is not a sessiontree database: {e}") from None
    finally:
        conn.close()


def migrate_file(path: str | Path) -> tuple[list[Migration], int]:
    """Apply a file's pending steps; (the steps applied, the version now). ``ReadOnly``
    when this process cannot write the file (see ``read_only_reason``)."""
    reason = read_only_reason(path)
    if reason is not None:
        raise ReadOnly(f"cannot migrate {path}: {reason}; nothing was written")
    conn = connect(path, apply_migrations=False)
    try:
        applied = migrate(conn)
        return applied, schema_version(conn)
    finally:
        conn.close()


def needs_migration(path: str | Path) -> bool:
    """Whether an existing database file is behind this code (read without writing)."""
    try:
        conn = sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True)
        try:
            return schema_version(conn) < len(migrations())
        finally:
            conn.close()
    except sqlite3.DatabaseError:
        return False  # not a database: opening it reports that properly


REBUILDS = "-- sessiontree: foreign-keys off"
"""First line of a migration that rebuilds tables: it runs with foreign keys off
and must leave ``PRAGMA foreign_key_check`` clean before it commits."""


def migrate(conn: sqlite3.Connection) -> list[Migration]:
    """Apply pending steps, each in its own transaction; return the steps applied."""
    applied = []
    for step in pending_migrations(conn):
        rebuilds = step.sql.startswith(REBUILDS)
        foreign_keys = conn.execute("PRAGMA foreign_keys").fetchone()[0]
        if rebuilds:  # a no-op inside a transaction, so before BEGIN
            conn.execute("PRAGMA foreign_keys = OFF")
        try:
            with transaction(conn):
                # Another process may have applied it while we waited for the lock.
                if schema_version(conn) >= step.version:
                    continue
                for statement in split_statements(step.sql):
                    conn.execute(statement)
                broken = conn.execute("PRAGMA foreign_key_check").fetchone() if rebuilds else None
                if broken is not None:
                    raise SessionTreeError(
                        f"migration {step.version:04d}_{step.name} would leave a broken reference "
                        f"in table {broken[0]} (row {broken[1]}); nothing was changed"
                    )
                conn.execute(f"PRAGMA user_version = {step.version:d}")
        finally:
            if rebuilds:
                conn.execute(f"PRAGMA foreign_keys = {int(foreign_keys)}")
        applied.append(step)
    return applied


def split_statements(sql: str) -> Iterator[str]:
    """Complete SQL statements of a script (trigger bodies hold semicolons too)."""
    buffer = ""
    for line in sql.splitlines(keepends=True):
        if not buffer and (not line.strip() or line.lstrip().startswith("--")):
            continue
        buffer += line
        if sqlite3.complete_statement(buffer):
            yield buffer.strip()
            buffer = ""
    if buffer.strip():
        raise SessionTreeError(f"incomplete SQL statement in migration: {buffer.strip()[:80]!r}")


def read_only_reason(path: str | Path) -> str | None:
    """Why this process cannot write the existing database file at ``path``, or None."""
    file = Path(path)
    if str(path) == ":memory:" or not file.exists():
        return None
    try:  # even root cannot write a file system mounted read-only
        if os.statvfs(file).f_flag & os.ST_RDONLY:
            return "its file system is mounted read-only"
    except OSError:
        pass
    if not os.access(file, os.W_OK):
        return "the file is read-only"
    beside = (Path(f"{file}-wal"), Path(f"{file}-shm"))
    if not os.access(file.parent, os.W_OK | os.X_OK) and not all(
        p.exists() and os.access(p, os.W_OK) for p in beside
    ):
        return "its directory is read-only"
    return None


LOW_SPACE = 1 << 20
"""Free bytes under which a failure to open a file is put down to a full disk."""


def disk_full(path: str | Path) -> bool:
    """Whether the file system holding ``path`` has (next to) no room left."""
    try:
        stat = os.statvfs(Path(path).resolve().parent)
    except OSError:
        return False
    return stat.f_bavail * stat.f_frsize < LOW_SPACE


def _open_read_only(path: str) -> sqlite3.Connection:
    """A read-only connection; see the module docstring for a read-only directory
    (a full disk, where SQLite cannot make the ``-shm`` either, is read the same way)."""
    file = Path(path).resolve()
    conn = sqlite3.connect(f"file:{file}?mode=ro", uri=True, isolation_level=None, check_same_thread=False)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return conn
    except sqlite3.DatabaseError as e:
        conn.close()
        full = disk_full(file)
        cannot_make_files = "readonly" in str(e) or "unable to open" in str(e)
        if not full and (not cannot_make_files or os.access(file.parent, os.W_OK | os.X_OK)):
            raise NotOurs(f"{path} is not a sessiontree database: {e}") from None
    wal = Path(f"{file}-wal")
    if wal.exists() and wal.stat().st_size:  # its pages would be ignored: refuse rather than show stale data
        why, do = (
            ("the disk is full", "free some space")
            if full
            else (
                "its directory is read-only",
                "open it once where it can be written (or copy both files to such a place)",
            )
        )
        raise (DiskFull if full else ReadOnly)(
            f"cannot read {path}: {why} and it has a write-ahead log ({file.name}-wal) that SQLite"
            f" can only read by creating {file.name}-shm beside it; {do}"
        )
    # Nothing can be in a log, and no process can start one here: the file is all there is.
    return sqlite3.connect(
        f"file:{file}?mode=ro&immutable=1", uri=True, isolation_level=None, check_same_thread=False
    )


def _open_read_write(path: str) -> sqlite3.Connection:
    """A read-write connection; a file that cannot be created is one clear error."""
    file = Path(path)
    if path != ":memory:" and not file.exists():
        if not file.parent.is_dir():
            raise SessionTreeError(f"cannot create {path}: no such directory {str(file.parent)!r}")
        if not os.access(file.parent, os.W_OK | os.X_OK):
            raise ReadOnly(f"cannot create {path}: its directory is read-only; nothing was written")
    try:
        return sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    except sqlite3.OperationalError as e:
        raise SessionTreeError(f"cannot open {path}: {e}") from None


def connect(path: str | Path, *, readonly: bool = False, apply_migrations: bool = True) -> sqlite3.Connection:
    """Open a store database. See the module docstring for what is checked and set."""
    path = str(path)
    memory = path == ":memory:"
    if readonly:
        if memory or not Path(path).exists():
            raise SessionTreeError(f"cannot open {path!r} read-only: no such database file")
        conn = _open_read_only(path)
    else:
        conn = _open_read_write(path)
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        try:
            pending = pending_migrations(conn)  # SchemaTooNew or NotOurs before any write
        except NotOurs as e:
            raise NotOurs(f"{path} is {e}") from None
        except sqlite3.DatabaseError as e:
            if not memory and disk_full(path):  # not even the -shm could be made
                raise DiskFull(f"cannot open {path}: the disk is full; nothing was written") from None
            cannot_make_files = "readonly" in str(e) or "unable to open" in str(e)
            reason = read_only_reason(path) if cannot_make_files and not readonly and not memory else None
            if reason is not None:  # not even the -shm could be made: the file is not to blame
                raise ReadOnly(f"cannot open {path} to write: {reason}; nothing was written") from None
            raise NotOurs(f"{path} is not a sessiontree database: {e}") from None
        conn.execute("PRAGMA foreign_keys = ON")
        if not readonly:
            if pending and pending[0].version == 1:
                # Nothing is written yet (no table, version 0): the page size can still be
                # chosen. Switching to WAL below writes the first page and fixes it.
                conn.execute(f"PRAGMA page_size = {PAGE_SIZE:d}")
            if not memory:
                _wait_for_lock(conn, "PRAGMA journal_mode = WAL")  # a no-op once it is WAL
            conn.execute("PRAGMA synchronous = NORMAL")
            if apply_migrations and pending:
                migrate(conn)
        elif pending:
            raise SessionTreeError(
                f"{path} needs {len(pending)} schema migration(s); open it once read-write "
                "(or run `sessiontree migrate`) before reading it read-only"
            )
    except BaseException:
        conn.close()
        raise
    return conn


def _is_busy(error: sqlite3.OperationalError) -> bool:
    text = str(error).lower()
    return "locked" in text or "busy" in text


def _wait_for_lock(conn: sqlite3.Connection, statement: str) -> None:
    """Run a statement that needs the write lock (``BEGIN IMMEDIATE``, the switch to WAL).

    Each try waits up to the busy timeout; SQLite's busy handler is not fair, so a
    writer among many busy ones may lose several times in a row, and some lock
    upgrades (a new file's switch to WAL while others open it) fail at once without
    waiting at all: try again until WRITE_WAIT_ROUNDS busy timeouts have passed in
    all, then say so (``Busy``).
    """
    started = time.monotonic()
    while True:
        try:
            conn.execute(statement)
            return
        except sqlite3.OperationalError as e:
            if not _is_busy(e):
                raise
            # Read only when busy: an uncontended write does not pay for the pragma.
            timeout = conn.execute("PRAGMA busy_timeout").fetchone()[0] / 1000
            if time.monotonic() >= started + timeout * WRITE_WAIT_ROUNDS:
                raise Busy(
                    f"another writer has held the database for more than {timeout * WRITE_WAIT_ROUNDS:g} s"
                    " (a long import, or an open store.transaction() in another process?); nothing was"
                    " written: try again when it has finished"
                ) from None
            time.sleep(random.uniform(0.001, 0.02))


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """BEGIN IMMEDIATE .. COMMIT; inside an open transaction, a savepoint.

    The savepoint makes a nested failure undo only its own writes, so a caller
    that catches the error inside an outer transaction keeps nothing half-done.
    """
    if conn.in_transaction:
        conn.execute("SAVEPOINT nested")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK TO nested")
            conn.execute("RELEASE nested")
            raise
        conn.execute("RELEASE nested")
        return
    _wait_for_lock(conn, "BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException as e:
        _roll_back(conn, e)
    try:
        conn.execute("COMMIT")
    except BaseException as e:
        _roll_back(conn, e)


def _roll_back(conn: sqlite3.Connection, error: BaseException) -> NoReturn:
    """Roll the open transaction back after ``error``, and raise it as ``storage_error``
    says (a plain call in the ``except``: nothing on the path of a commit that works)."""
    if conn.in_transaction:
        conn.execute("ROLLBACK")
    clear = storage_error(error)
    if clear is not error:
        raise clear from None
    raise error


def storage_error(error: BaseException) -> BaseException:
    """A clear sessiontree error for what SQLite reports about the file itself (read-only,
    full) or a value over its length limit (one lowered below ``names.MAX_VALUE_BYTES``,
    which the API checks first); any other error as it is."""
    if isinstance(error, sqlite3.DataError) and "too big" in str(error):
        return InvalidPayload(
            "a value is longer than this SQLite database's length limit (SQLITE_LIMIT_LENGTH);"
            " nothing was written"
        )
    if not isinstance(error, sqlite3.OperationalError):
        return error
    text = str(error)
    if "readonly database" in text:
        return ReadOnly("the database is open read-only (or its file is not writable); nothing was written")
    if "database or disk is full" in text:
        return DiskFull("the disk is full (or the database reached its size limit); nothing was written")
    return error
