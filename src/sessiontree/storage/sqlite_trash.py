"""The SQLite backend's trash part: the trash, retention and redactions (schema step 5).

Contract: ``SQLiteTrash(storage)`` is ``storage.trash`` of a ``SQLiteStorage``
(``trash.Trash``), reaching the file through the backend's public helpers
(``hosts.SQLiteHost``). It marks sessions trashed or restores them, lists the
trash, finds what a retention policy would touch (old unmarked sessions, large
old tool results) and strips tool results through the ``redactions`` table,
the only change the schema lets a node undergo. Public ids in and out; which
sessions and nodes qualify, and the wording of markers, are decided in
``retention``.
"""

from __future__ import annotations

from typing import Any

from ..model import TrashEntry
from .hosts import Part, SQLiteHost
from .rows import DroppableSession, StrippableResult
from .shared_sql import DROPPABLE, REDACTION_FIELDS, REDACTIONS
from .trash import Trash

# Tool messages with a large text result, written before the cutoff, not stripped yet,
# in sessions that are not in the trash.
_STRIPPABLE = """
SELECT n.id, s.id, length(CAST(json_extract(n.payload, '$.content') AS BLOB))
FROM nodes n JOIN sessions s ON s.key = n.session
WHERE n.kind = 'message' AND n.created_at < :cutoff AND s.trashed_at IS NULL
  AND json_valid(n.payload) AND json_extract(n.payload, '$.role') = 'tool'
  AND json_type(n.payload, '$.content') = 'text'
  AND length(CAST(json_extract(n.payload, '$.content') AS BLOB)) >= :min_bytes
  AND NOT EXISTS (SELECT 1 FROM redactions r WHERE r.node = n.key)
ORDER BY n.id
"""


class SQLiteTrash(Part[SQLiteHost], Trash):
    """Trash, retention policy and redactions of one SQLite store."""

    def set_trashed(self, session_key: int, when: str | None) -> None:
        """Put a session in the trash at ``when`` (a session already there keeps its
        time), or take it out (``None``)."""
        self.storage.conn.execute(
            "UPDATE sessions SET trashed_at = CASE WHEN ? IS NULL THEN NULL ELSE coalesce(trashed_at, ?) END"
            " WHERE key = ?",
            (when, when, session_key),
        )

    def trashed(self, before: str | None = None) -> list[TrashEntry]:
        """The sessions in the trash (trashed
        before ``before``, an ISO time, if given), oldest first."""
        rows = self.storage.conn.execute(
            "SELECT s.id, s.title, s.trashed_at,"
            " (SELECT count(*) FROM nodes n WHERE n.session = s.key)"
            " FROM sessions s WHERE s.trashed_at IS NOT NULL AND (:before IS NULL OR s.trashed_at < :before)"
            " ORDER BY s.trashed_at, s.id",
            {"before": before},
        )
        return [TrashEntry(r[0], r[1], r[2], r[3]) for r in rows]

    def droppable_sessions(self, cutoff: str) -> list[DroppableSession]:
        """The sessions a drop policy may trash (see ``shared_sql.DROPPABLE``)."""
        return [
            DroppableSession(r[0], r[1], bool(r[2]))
            for r in self.storage.conn.execute(DROPPABLE, {"cutoff": cutoff})
        ]

    def strippable_results(self, cutoff: str, min_bytes: int) -> list[StrippableResult]:
        """The tool results a strip policy may redact."""
        rows = self.storage.conn.execute(_STRIPPABLE, {"cutoff": cutoff, "min_bytes": min_bytes})
        return [StrippableResult(r[0], r[1], r[2]) for r in rows]

    def redact(self, node_id: str, field: str, marker: str, reason: str, when: str) -> int:
        """Replace a payload field by ``marker``, recorded in ``redactions`` (inside a
        transaction); the bytes removed."""
        path, conn = "$." + field, self.storage.conn
        row = conn.execute(
            "SELECT key, length(CAST(json_extract(payload, ?) AS BLOB)) FROM nodes WHERE id = ?",
            (path, node_id),
        ).fetchone()
        key, size = row[0], row[1] or 0
        conn.execute(
            "INSERT INTO redactions (node, field, bytes, marker, reason, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (key, field, size, marker, reason, when),
        )
        conn.execute("UPDATE nodes SET payload = json_set(payload, ?, ?) WHERE key = ?", (path, marker, key))
        self.storage.cache.clear()  # cached paths hold the old payload
        return int(size)

    def record_redaction(
        self, node_id: str, field: str, size: int, marker: str, reason: str, when: str
    ) -> None:
        """Record a strip the node's payload already holds (inside a transaction)."""
        self.storage.conn.execute(
            "INSERT INTO redactions (node, field, bytes, marker, reason, created_at)"
            " SELECT key, ?, ?, ?, ?, ? FROM nodes WHERE id = ?",
            (field, size, marker, reason, when, node_id),
        )

    def retention_policy(self) -> dict[str, float]:
        """The saved retention policy: setting name -> value."""
        return {
            name: value
            for name, value in self.storage.conn.execute("SELECT name, value FROM retention_policy")
        }

    def set_retention_policy(self, policy: dict[str, float]) -> None:
        """Replace the saved retention policy (inside a transaction)."""
        conn = self.storage.conn
        conn.execute("DELETE FROM retention_policy")
        conn.executemany("INSERT INTO retention_policy (name, value) VALUES (?, ?)", policy.items())

    def redactions(self, session_key: int | None = None) -> list[dict[str, Any]]:
        """Every recorded redaction (of one session, if given), oldest first."""
        rows = self.storage.conn.execute(REDACTIONS, {"s": session_key})
        return [dict(zip(REDACTION_FIELDS, r, strict=True)) for r in rows]
