"""The SQLite backend's upkeep part: prune, verify, stats, backup, vacuum and read-only SQL.

Contract: ``SQLiteUpkeep(storage)`` is ``storage.upkeep`` of a ``SQLiteStorage``
(``upkeep.Upkeep``), reaching the file through the backend's public helpers
(``hosts.SQLiteHost``). Like the rest of the backend it takes row keys and
returns public ids; it decides nothing (``maintenance`` does). It has both
optional operations: ``backup`` (VACUUM INTO) and ``sql``.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import Conflict, NotFound, SessionTreeError
from ..model import Problem
from . import sqlite_db as _db
from .hosts import SQLiteHost
from .rows import BranchTip, Counts, NodeKey, Unreachable
from .shared_sql import (
    BRANCH_HEADS,
    INTEGRITY_CHECKS,
    INTEGRITY_SCOPE,
    PRUNE_SCOPE,
    REACHED,
    TREE,
    UNREACHABLE,
)
from .upkeep import Upkeep


class SQLiteUpkeep(Upkeep):
    """Maintenance queries of one SQLite store."""

    def __init__(self, storage: SQLiteHost) -> None:
        self.storage = storage
        self.backup = self.copy_to
        self.sql = self.read_sql

    def unreachable(self, session_key: int | None, *, delete: bool, cutoff: str = "") -> Unreachable:
        # A dry run only reads, so it also works on a read-only store.
        storage = self.storage
        with storage.transaction() if delete else storage.snapshot():
            conn = storage.conn
            gone = conn.execute(
                REACHED + ", " + PRUNE_SCOPE[session_key is None] + UNREACHABLE,
                {"s": session_key, "cutoff": cutoff or "9999"},
            ).fetchall()
            gone_keys = {key for key, _, _, _ in gone}
            dying_runs = {run: run_id for _, _, run, run_id in gone if run is not None}
            run_ids = sorted(dying_runs.values())
            if delete and gone:
                conn.execute("CREATE TEMP TABLE IF NOT EXISTS doomed (key INTEGER PRIMARY KEY)")
                conn.execute("DELETE FROM doomed")
                conn.executemany("INSERT INTO doomed VALUES (?)", ((key,) for key in gone_keys))
                conn.execute("DELETE FROM nodes WHERE key IN (SELECT key FROM doomed)")
                conn.executemany("DELETE FROM runs WHERE key = ?", ((run,) for run in dying_runs))
                conn.execute("DELETE FROM doomed")
                storage.cache.clear()
        return Unreachable([node_id for _, node_id, _, _ in gone], run_ids)

    def vacuum(self) -> int | None:
        """Compact the file; the bytes freed (None for an in-memory database)."""
        path = self.storage.path
        if path == ":memory:":
            return None
        self.storage.check_writable()
        conn = self.storage.conn
        # A full disk can stop any of the three: folding the log into a file that must grow
        # to take its pages, the copy, the fold after. Each leaves what is stored as it was.
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            before = os.path.getsize(path)
            conn.execute("VACUUM")
            # In WAL mode VACUUM writes the new pages to the log; fold them back in.
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.OperationalError as e:
            raise _db.storage_error(e) from None
        return before - os.path.getsize(path)

    def integrity_problems(self, session_key: int | None) -> list[Problem]:
        """A problem for every row that breaks a tree invariant."""
        scope, conn = "" if session_key is None else INTEGRITY_SCOPE, self.storage.conn
        problems: list[Problem] = []
        if session_key is None:
            problems += [
                Problem("", "sqlite", m, None) for (m,) in conn.execute("PRAGMA quick_check") if m != "ok"
            ]
        for check, detail, sql in INTEGRITY_CHECKS:
            query = sql.format(scope=scope, bad_json="json_valid(c.payload) = 0")
            for row in conn.execute(query, {"s": session_key}):
                node_id = row[1] if check in ("parent", "depth", "payload") else None
                problems.append(Problem(row[0], check, detail.format(*row), node_id))
        return problems

    def branch_heads(self, session_key: int | None) -> list[BranchTip]:
        """Every non-empty branch whose head exists."""
        rows = self.storage.conn.execute(BRANCH_HEADS, {"s": session_key})
        return [BranchTip(r[0], r[1], NodeKey(r[2], r[3])) for r in rows]

    def counts(self, session_key: int | None) -> Counts:
        """Sessions and nodes, in one session or in all."""
        conn = self.storage.conn
        if session_key is None:
            row = conn.execute(
                "SELECT (SELECT count(*) FROM sessions), (SELECT count(*) FROM nodes)"
            ).fetchone()
            return Counts(row[0], row[1])
        return Counts(1, int(conn.execute(TREE + "SELECT count(*) FROM t", {"s": session_key}).fetchone()[0]))

    def stats(self) -> dict[str, Any]:
        storage = self.storage
        q = storage.conn.execute
        files = [storage.path, storage.path + "-wal"] if storage.path != ":memory:" else []
        # sqlite-utils introspects the schema: every table with its row count.
        tables = {t.name: t.count for t in storage.db.tables}
        return {
            "file": storage.path,
            "bytes": sum(os.path.getsize(f) for f in files if os.path.exists(f)),
            "schema_version": storage.schema_version,
            "sessions": tables.get("sessions", 0),
            "nodes": dict(q("SELECT kind, count(*) FROM nodes GROUP BY kind ORDER BY kind").fetchall()),
            "branches": tables.get("branches", 0),
            "checkpoints": tables.get("checkpoints", 0),
            "pending": len(storage.pending()),
            "payload_bytes": q(
                "SELECT coalesce(sum(length(CAST(payload AS BLOB))), 0) FROM nodes"
            ).fetchone()[0],
            "tables": tables,
            "models": [
                {"model": m, "runs": n, "input_tokens": i or 0, "output_tokens": o or 0}
                for m, n, i, o in q(
                    "SELECT coalesce(model, '?'), count(*), sum(input_tokens), sum(output_tokens)"
                    " FROM runs GROUP BY 1 ORDER BY 2 DESC, 1"
                )
            ],
        }

    def read_sql(self, query: str, params: dict[str, Any]) -> tuple[list[str], Iterator[tuple[Any, ...]]]:
        """(column names, rows) of one SQL statement that only reads, run through
        sqlite-utils on a read-only connection of its own (``PRAGMA query_only``: a
        statement that would write is refused by SQLite itself, whatever it is)."""
        if self.storage.path == ":memory:":
            raise Conflict("sql reads a database file; an in-memory store has none")
        conn = _db.connect(self.storage.path, readonly=True, apply_migrations=False)
        conn.execute("PRAGMA query_only = ON")
        try:
            import sqlite_utils  # see SQLiteStorage.db: imported when used

            cursor = sqlite_utils.Database(conn).execute(query, params)
        except (sqlite3.Error, sqlite3.Warning, ValueError, OverflowError) as e:
            conn.close()
            raise Conflict(f"SQL error: {e}") from None
        columns = [d[0] for d in cursor.description or []]

        def rows() -> Iterator[tuple[Any, ...]]:
            try:
                yield from cursor
            except sqlite3.Error as e:  # a row that fails to compute (a bad json_extract, say)
                raise Conflict(f"SQL error: {e}") from None
            finally:
                conn.close()

        return columns, rows()

    def copy_to(self, destination: str) -> int:
        """A consistent, compacted copy (VACUUM INTO) at a new path; its size in bytes.

        Atomic: the copy is written to a hidden file beside the destination and
        linked into place only when complete, so a backup killed half-way leaves
        no file that could be mistaken for a store. A symbolic link is refused.
        """
        target = Path(destination)
        if target.is_symlink():
            raise Conflict(f"{destination} is a symbolic link; give the path of a new file")
        if target.exists():
            raise Conflict(f"{destination} already exists; choose a new file")
        if not target.parent.is_dir():
            raise NotFound(f"cannot back up to {destination}: no directory {target.parent}")
        partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
        try:
            self.storage.conn.execute("VACUUM INTO ?", (str(partial),))
            os.link(partial, target)  # fails, rather than replaces, if the name was taken meanwhile
        except FileExistsError:
            raise Conflict(f"{destination} already exists; choose a new file") from None
        except sqlite3.OperationalError as e:
            clear = _db.storage_error(e)
            raise (
                clear if clear is not e else SessionTreeError(f"cannot back up to {destination}: {e}")
            ) from None
        finally:
            partial.unlink(missing_ok=True)
        return os.path.getsize(target)
