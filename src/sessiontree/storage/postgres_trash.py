"""The PostgreSQL backend's trash and redactions (schema step 5).

Contract: ``PostgresTrash`` holds the trash operations of ``Storage`` for
``PostgresStorage``, which inherits them (callers reach the trash as methods of
the backend). Each method takes its backend as ``self``, typed as what it uses
(``hosts.PostgresHost``): no helper is re-declared here. The twin of
``sqlite_retention``. A redaction rewrites the field in Python, so the payload
stays in sessiontree's own JSON encoding (jsonb would reorder and re-space it).
"""

from __future__ import annotations

import json
from typing import Any

from ..model import TrashEntry, encode_payload
from . import shared_sql
from .hosts import PostgresHost
from .rows import DroppableSession, StrippableResult
from .shared_sql import for_postgres

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


class PostgresTrash:
    """Trash and redactions, inherited by ``PostgresStorage``."""

    def set_trashed(self: PostgresHost, session_key: int, when: str | None) -> None:
        self.claim(session_key)
        self.write(
            "UPDATE sessions SET trashed_at = CASE WHEN %(when)s::text IS NULL THEN NULL"
            " ELSE coalesce(trashed_at, %(when)s) END WHERE key = %(key)s",
            {"when": when, "key": session_key},
        )

    def trashed(self: PostgresHost, before: str | None = None) -> list[TrashEntry]:
        rows = self.fetch_all(
            "SELECT s.id, s.title, s.trashed_at, (SELECT count(*) FROM nodes n WHERE n.session = s.key)"
            " FROM sessions s WHERE s.trashed_at IS NOT NULL"
            " AND (%(before)s::text IS NULL OR s.trashed_at < %(before)s) ORDER BY s.trashed_at, s.id",
            {"before": before},
        )
        return [TrashEntry(r[0], r[1], r[2], int(r[3])) for r in rows]

    def droppable_sessions(self: PostgresHost, cutoff: str) -> list[DroppableSession]:
        return [
            DroppableSession(r[0], r[1], bool(r[2])) for r in self.fetch_all(_DROPPABLE, {"cutoff": cutoff})
        ]

    def strippable_results(self: PostgresHost, cutoff: str, min_bytes: int) -> list[StrippableResult]:
        rows = self.fetch_all(_STRIPPABLE, {"cutoff": cutoff, "min_bytes": min_bytes})
        return [StrippableResult(r[0], r[1], int(r[2])) for r in rows]

    def redact(self: PostgresHost, node_id: str, field: str, marker: str, reason: str, when: str) -> int:
        row = self.fetch_all("SELECT key, session, kind, payload FROM nodes WHERE id = %s", (node_id,))[0]
        key, session_key, kind, payload = row[0], row[1], row[2], json.loads(row[3])
        self.claim(session_key)
        removed = payload.get(field)
        size = len(removed.encode("utf-8", "surrogatepass")) if isinstance(removed, str) else 0
        payload[field] = marker
        self.write(
            "INSERT INTO redactions (node, field, bytes, marker, reason, created_at)"
            " VALUES (%s, %s, %s, %s, %s, %s)",
            (key, field, size, marker, reason, when),
        )
        self.write("UPDATE nodes SET payload = %s WHERE key = %s", (encode_payload(payload, kind), key))
        self.cache.clear()  # cached paths hold the old payload
        return size

    def record_redaction(
        self: PostgresHost, node_id: str, field: str, size: int, marker: str, reason: str, when: str
    ) -> None:
        key, session_key = self.fetch_all("SELECT key, session FROM nodes WHERE id = %s", (node_id,))[0]
        self.claim(session_key)
        self.write(
            "INSERT INTO redactions (node, field, bytes, marker, reason, created_at)"
            " VALUES (%s, %s, %s, %s, %s, %s)",
            (key, field, size, marker, reason, when),
        )

    def retention_policy(self: PostgresHost) -> dict[str, float]:
        return {
            name: float(value) for name, value in self.fetch_all("SELECT name, value FROM retention_policy")
        }

    def set_retention_policy(self: PostgresHost, policy: dict[str, float]) -> None:
        self.write("DELETE FROM retention_policy")
        for name, value in policy.items():
            self.write("INSERT INTO retention_policy (name, value) VALUES (%s, %s)", (name, value))

    def redactions(self: PostgresHost, session_key: int | None = None) -> list[dict[str, Any]]:
        rows = self.fetch_all(_REDACTIONS, {"s": session_key})
        return [dict(zip(shared_sql.REDACTION_FIELDS, r, strict=True)) for r in rows]
