"""The PostgreSQL backend's trash part: the trash, retention and redactions (schema step 5).

Contract: ``PostgresTrash(storage)`` is ``storage.trash`` of a ``PostgresStorage``
(``trash.Trash``), reaching the server through the backend's public helpers
(``hosts.PostgresHost``), the twin of ``sqlite_trash``. Every write claims its
session first (``claim``), as the backend's own writes do. A redaction rewrites
the field in Python, so the payload stays in sessiontree's own JSON encoding
(jsonb would reorder and re-space it).
"""

from __future__ import annotations

import json
from typing import Any

from ..model import TrashEntry, encode_payload
from . import shared_sql
from .hosts import Part, PostgresHost
from .rows import DroppableSession, StrippableResult
from .shared_sql import for_postgres
from .trash import Trash

_DROPPABLE = for_postgres(shared_sql.DROPPABLE)
_REDACTIONS = for_postgres(shared_sql.REDACTIONS)

_CONTENT_BYTES = "octet_length(sessiontree_json(n.payload) ->> 'content')"

_STRIPPABLE = f"""
SELECT n.id, s.id, {_CONTENT_BYTES}
FROM nodes n JOIN sessions s ON s.key = n.session
WHERE n.kind = 'message' AND n.created_at < %(cutoff)s AND s.trashed_at IS NULL
  AND sessiontree_json(n.payload) ->> 'role' = 'tool'
  AND json_typeof(sessiontree_json(n.payload) -> 'content') = 'string'
  AND {_CONTENT_BYTES} >= %(min_bytes)s
  AND NOT EXISTS (SELECT 1 FROM redactions r WHERE r.node = n.key)
ORDER BY n.id
"""


class PostgresTrash(Part[PostgresHost], Trash):
    """Trash, retention policy and redactions of one PostgreSQL schema."""

    def set_trashed(self, session_key: int, when: str | None) -> None:
        storage = self.storage
        storage.claim(session_key)
        storage.write(
            "UPDATE sessions SET trashed_at = CASE WHEN %(when)s::text IS NULL THEN NULL"
            " ELSE coalesce(trashed_at, %(when)s) END WHERE key = %(key)s",
            {"when": when, "key": session_key},
        )

    def trashed(self, before: str | None = None) -> list[TrashEntry]:
        rows = self.storage.fetch_all(
            "SELECT s.id, s.title, s.trashed_at, (SELECT count(*) FROM nodes n WHERE n.session = s.key)"
            " FROM sessions s WHERE s.trashed_at IS NOT NULL"
            " AND (%(before)s::text IS NULL OR s.trashed_at < %(before)s) ORDER BY s.trashed_at, s.id",
            {"before": before},
        )
        return [TrashEntry(r[0], r[1], r[2], int(r[3])) for r in rows]

    def droppable_sessions(self, cutoff: str) -> list[DroppableSession]:
        return [
            DroppableSession(r[0], r[1], bool(r[2]))
            for r in self.storage.fetch_all(_DROPPABLE, {"cutoff": cutoff})
        ]

    def strippable_results(self, cutoff: str, min_bytes: int) -> list[StrippableResult]:
        rows = self.storage.fetch_all(_STRIPPABLE, {"cutoff": cutoff, "min_bytes": min_bytes})
        return [StrippableResult(r[0], r[1], int(r[2])) for r in rows]

    def redact(self, node_id: str, field: str, marker: str, reason: str, when: str) -> int:
        storage = self.storage
        row = storage.fetch_all("SELECT key, session, kind, payload FROM nodes WHERE id = %s", (node_id,))[0]
        key, session_key, kind, payload = row[0], row[1], row[2], json.loads(row[3])
        storage.claim(session_key)
        removed = payload.get(field)
        size = len(removed.encode("utf-8", "surrogatepass")) if isinstance(removed, str) else 0
        payload[field] = marker
        storage.write(
            "INSERT INTO redactions (node, field, bytes, marker, reason, created_at)"
            " VALUES (%s, %s, %s, %s, %s, %s)",
            (key, field, size, marker, reason, when),
        )
        storage.write("UPDATE nodes SET payload = %s WHERE key = %s", (encode_payload(payload, kind), key))
        storage.cache.clear()  # cached paths hold the old payload
        return size

    def record_redaction(
        self, node_id: str, field: str, size: int, marker: str, reason: str, when: str
    ) -> None:
        storage = self.storage
        key, session_key = storage.fetch_all("SELECT key, session FROM nodes WHERE id = %s", (node_id,))[0]
        storage.claim(session_key)
        storage.write(
            "INSERT INTO redactions (node, field, bytes, marker, reason, created_at)"
            " VALUES (%s, %s, %s, %s, %s, %s)",
            (key, field, size, marker, reason, when),
        )

    def retention_policy(self) -> dict[str, float]:
        return {
            name: float(value)
            for name, value in self.storage.fetch_all("SELECT name, value FROM retention_policy")
        }

    def set_retention_policy(self, policy: dict[str, float]) -> None:
        storage = self.storage
        storage.write("DELETE FROM retention_policy")
        for name, value in policy.items():
            storage.write("INSERT INTO retention_policy (name, value) VALUES (%s, %s)", (name, value))

    def redactions(self, session_key: int | None = None) -> list[dict[str, Any]]:
        rows = self.storage.fetch_all(_REDACTIONS, {"s": session_key})
        return [dict(zip(shared_sql.REDACTION_FIELDS, r, strict=True)) for r in rows]
