"""The Store: one SQLite file holding many session trees.

Contract: ``Store(path)`` opens (creating if needed) and migrates the file;
``Store(path, readonly=True)`` opens it for inspection and never writes.
Every multi-row write happens in one ``BEGIN IMMEDIATE`` transaction, so a
failure leaves nothing half-written. The store, ``Session`` and
``maintenance`` are the only modules that hold SQL.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlite_utils

from . import db as _db
from .errors import Conflict, NotFound, ReadOnly
from .ids import new_id, now
from .maintenance import backup, prune, stats, verify
from .model import Node, PruneReport, Run, SessionInfo, VerifyReport, encode_json
from .session import NODE_COLUMNS, Session, check_text, node_from_row, resolve_prefix


class Store:
    """A sessiontree database. Use as a context manager to close it when done."""

    def __init__(self, path: str | Path = ":memory:", *, readonly: bool = False) -> None:
        self.path = str(path)
        self.readonly = readonly
        self.conn: sqlite3.Connection = _db.connect(self.path, readonly=readonly)
        self.db = sqlite_utils.Database(self.conn)

    # -- lifecycle -------------------------------------------------------

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({self.path!r})"

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """Group several writes into one atomic transaction (nesting makes a savepoint)."""
        if self.readonly:
            raise ReadOnly(f"{self.path} is open read-only; nothing was written")
        with _db.transaction(self.conn) as conn:
            yield conn

    @property
    def schema_version(self) -> int:
        return _db.schema_version(self.conn)

    # -- sessions --------------------------------------------------------

    def create_session(
        self, title: str | None = None, metadata: dict[str, Any] | None = None, *, id: str | None = None
    ) -> Session:
        """Start a new, empty session tree."""
        session_id = id or new_id()
        created = now()
        meta = encode_json(metadata or {}, "session metadata")
        check_text(title, "session title")
        with self.transaction() as conn:
            try:
                conn.execute(
                    "INSERT INTO sessions (id, title, metadata, created_at) VALUES (?, ?, ?, ?)",
                    (session_id, title, meta, created),
                )
            except sqlite3.IntegrityError:
                raise Conflict(f"session {session_id} already exists") from None
        return Session(self, session_id, title, metadata or {}, created)

    def session(self, id_or_prefix: str) -> Session:
        """The session with this id, or the one session whose id starts with this prefix."""
        session_id = self.resolve_session_id(id_or_prefix)
        row = self.conn.execute(
            "SELECT id, title, metadata, created_at, archived_at FROM sessions WHERE id = ?",
            (session_id,),
        ).fetchone()
        return Session(self, row[0], row[1], json.loads(row[2]), row[3], row[4])

    def resolve_session_id(self, id_or_prefix: str) -> str:
        return self._resolve_prefix("sessions", "session", id_or_prefix)

    def sessions(self, *, include_archived: bool = False) -> list[SessionInfo]:
        """All sessions, newest first, with their node counts and last activity."""
        where = "" if include_archived else "WHERE s.archived_at IS NULL"
        rows = self.conn.execute(
            f"""
            SELECT s.id, s.title, s.metadata, s.created_at, s.archived_at,
                   (SELECT count(*) FROM nodes n WHERE n.session_id = s.id),
                   (SELECT max(n.created_at) FROM nodes n WHERE n.session_id = s.id)
            FROM sessions s {where}
            ORDER BY s.created_at DESC, s.id DESC
            """
        ).fetchall()
        return [
            SessionInfo(
                id=r[0],
                title=r[1],
                metadata=json.loads(r[2]),
                created_at=r[3],
                archived_at=r[4],
                node_count=r[5],
                last_activity=r[6] or r[3],
            )
            for r in rows
        ]

    def archive_session(self, session_id: str, *, archived: bool = True) -> None:
        """Hide a session from ``sessions()`` (its tree is kept); ``archived=False`` undoes it."""
        session_id = self.resolve_session_id(session_id)
        with self.transaction() as conn:
            conn.execute(
                "UPDATE sessions SET archived_at = ? WHERE id = ?", (now() if archived else None, session_id)
            )

    def delete_session(self, session_id: str) -> int:
        """Delete a session with all its nodes, refs and runs; return the nodes removed."""
        session_id = self.resolve_session_id(session_id)
        with self.transaction() as conn:
            count = conn.execute("SELECT count(*) FROM nodes WHERE session_id = ?", (session_id,)).fetchone()[
                0
            ]
            # Refs first, then nodes (children before parents is not needed: the
            # foreign keys are checked when the statement ends), then runs.
            conn.execute("DELETE FROM branches WHERE session_id = ?", (session_id,))
            conn.execute("DELETE FROM checkpoints WHERE session_id = ?", (session_id,))
            conn.execute("DELETE FROM nodes WHERE session_id = ?", (session_id,))
            conn.execute("DELETE FROM runs WHERE session_id = ?", (session_id,))
            conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
        return count

    # -- lookups across sessions ---------------------------------------

    def node(self, id_or_prefix: str) -> Node:
        """A node of any session, by id or unique id prefix."""
        node_id = self._resolve_prefix("nodes", "node", id_or_prefix)
        row = self.conn.execute(f"SELECT {NODE_COLUMNS} FROM nodes WHERE id = ?", (node_id,)).fetchone()
        return node_from_row(row)

    def run(self, run_id: str) -> Run:
        row = self.conn.execute(
            "SELECT id, session_id, model, provider, params, usage, latency_ms, finish_reason,"
            " created_at FROM runs WHERE id = ?",
            (run_id,),
        ).fetchone()
        if row is None:
            raise NotFound(f"no run {run_id!r}")
        return Run(
            row[0], row[1], row[2], row[3], json.loads(row[4]), json.loads(row[5]), row[6], row[7], row[8]
        )

    def pending(self, session_id: str | None = None) -> list[Node]:
        """Unresolved pauses (no decision yet) across all sessions (or one), oldest first."""
        rows = self.conn.execute(
            f"""
            SELECT {NODE_COLUMNS} FROM nodes p
            WHERE p.kind = 'pause' AND (:s IS NULL OR p.session_id = :s) AND NOT EXISTS (
                SELECT 1 FROM nodes d WHERE d.parent_id = p.id AND d.kind = 'decision')
            ORDER BY p.id
            """,
            {"s": session_id},
        ).fetchall()
        return [node_from_row(r) for r in rows]

    def _resolve_prefix(self, table: str, what: str, id_or_prefix: str) -> str:
        if not isinstance(id_or_prefix, str) or not id_or_prefix:
            raise NotFound(f"no {what} {id_or_prefix!r}")
        if self.conn.execute(f"SELECT 1 FROM {table} WHERE id = ?", (id_or_prefix,)).fetchone():
            return id_or_prefix
        return resolve_prefix(self.conn, table, what, id_or_prefix)

    # -- maintenance -----------------------------------------------------

    def prune(
        self, *, dry_run: bool = True, vacuum: bool = False, session_id: str | None = None
    ) -> PruneReport:
        """Remove nodes no branch, checkpoint or unresolved pause can reach. See ``maintenance``."""
        if session_id is not None:
            session_id = self.resolve_session_id(session_id)
        return prune(self, dry_run=dry_run, vacuum=vacuum, session_id=session_id)

    def verify(self, session_id: str | None = None) -> VerifyReport:
        """Check every session's (or one session's) integrity; see ``maintenance.verify``."""
        if session_id is not None:
            session_id = self.resolve_session_id(session_id)
        return verify(self, session_id=session_id)

    def stats(self) -> dict[str, Any]:
        """Counts, sizes and per-model token usage; see ``maintenance.stats``."""
        return stats(self)

    def backup(self, destination: str | Path) -> int:
        """Write a consistent, compacted copy (VACUUM INTO) to a new file; return its size."""
        return backup(self, str(destination))
