"""The PostgreSQL backend's search, trash and redactions (schema steps 4 and 5).

Contract: ``PostgresFind`` is mixed into ``PostgresStorage``, the twin of
``sqlite_search`` and ``sqlite_retention``. Search matches the generated
``tsvector`` columns (``migrations/postgres/0004_search.sql`` and ``0009``) with
``websearch_to_tsquery('simple', query)``: words, "quoted phrases", ``OR`` and
``-word`` mean what they mean in FTS5 (AND by default); FTS5's column filters,
``NEAR`` and ``prefix*`` are not read as such. It never fails on syntax: a query
with no words finds nothing. Snippets come from ``ts_headline``, marked as on
SQLite. A redaction rewrites the field in Python, so the payload stays in
sessiontree's own JSON encoding (jsonb would reorder and re-space it).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from psycopg import errors as pg_errors

from ..errors import SearchIndexOff
from ..model import Node, SearchIndex, SearchQuery, TrashEntry, encode_payload
from . import shared_sql
from .base import Storage
from .rows import DroppableSession, RefsOnPath, SearchMatch, StrippableResult, refs_on_path
from .shared_sql import ELLIPSIS, MARK_END, MARK_START, SNIPPET_TOKENS, for_postgres

_TEXT = "coalesce(sessiontree_node_text(n.kind, n.payload), '')"
_ALL = f"{_TEXT} || ' ' || coalesce(sessiontree_node_tools(n.kind, n.payload), '')"
ALL_VECTOR = "(setweight(n.search_text, 'A') || n.search_tools)"
"""What every search matches: the expression of the one index, ``nodes_search_all`` (step
12), written the same, so that the planner can use it. The text's words carry weight A:
``tools=False`` matches the query with its words restricted to A (``q.text``)."""
_RANKED = {True: "(n.search_text || n.search_tools)", False: "n.search_text"}
"""What a match is ranked by (unweighted: the ranks of steps 4 to 11)."""
_HEADLINE = (
    f'StartSel="{MARK_START}", StopSel="{MARK_END}", MaxWords={SNIPPET_TOKENS}, MinWords=4,'
    f' MaxFragments=1, FragmentDelimiter="{ELLIPSIS}"'
)

_SEARCH = """
WITH RECURSIVE on_branch(key) AS (
    SELECT b.head FROM branches b
    WHERE %(branch)s::text IS NOT NULL AND b.name = %(branch)s AND b.head IS NOT NULL
      AND (%(session)s::text IS NULL OR b.session = (SELECT key FROM sessions WHERE id = %(session)s))
    UNION
    SELECT n.parent FROM on_branch JOIN nodes n ON n.key = on_branch.key WHERE n.parent IS NOT NULL
), q AS (
    SELECT w.q, sessiontree_text_query(w.q) AS text FROM websearch_to_tsquery('simple', %(query)s) AS w(q)
)
SELECT n.key, n.id, s.id, p.id, n.depth, n.kind, n.payload, n.created_at, r.id,
       ts_headline('simple', {document}, q.q, %(headline)s)
FROM q, nodes n
JOIN sessions s ON s.key = n.session
LEFT JOIN nodes p ON p.key = n.parent
LEFT JOIN runs r ON r.key = n.run
WHERE {vector} @@ {query} AND s.trashed_at IS NULL
  AND (%(session)s::text IS NULL OR s.id = %(session)s)
  AND (%(kind)s::text IS NULL OR n.kind = %(kind)s)
  AND (%(role)s::text IS NULL OR (n.kind = 'message' AND sessiontree_json(n.payload) ->> 'role' = %(role)s))
  AND (%(branch)s::text IS NULL OR n.key IN (SELECT key FROM on_branch))
ORDER BY {order}
LIMIT %(limit)s
"""

_REFS_CONTAINING = for_postgres(shared_sql.REFS_CONTAINING.format(wanted="id = ANY(:ids)"))
_DROPPABLE = for_postgres(shared_sql.DROPPABLE)

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


class PostgresFind(Storage):
    """Search, trash and redactions; mixed into ``PostgresStorage``, whose helpers these use."""

    def _all(self, query: Any, params: Any = None) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _one(self, query: Any, params: Any = None) -> Any:
        raise NotImplementedError

    def _write(self, query: Any, params: Any = None) -> int:
        raise NotImplementedError

    def _claim(self, session_key: int) -> None:
        raise NotImplementedError

    def search(self, query: SearchQuery) -> list[SearchMatch]:
        tools = query.tools
        order = "n.key DESC" if query.newest else f"ts_rank({_RANKED[tools]}, q.q) DESC, n.id"
        sql = _SEARCH.format(
            document=_ALL if tools else _TEXT,
            vector=ALL_VECTOR,
            query="q.q" if tools else "q.text",
            order=order,
        )
        params = {
            "query": query.text,
            "session": query.session_id,
            "branch": query.branch,
            "role": query.role,
            "kind": query.kind,
            "limit": query.limit,
            "headline": _HEADLINE,
        }
        try:
            rows = self._all(sql, params)
        except pg_errors.UndefinedColumn:  # turned off (by any process): no search columns
            raise self._search_off() from None
        return [SearchMatch(Node(*r[1:9]), r[9] or "") for r in rows]

    # The index is two generated tsvector columns and one GIN index on both: in step with
    # the rows (a GIN index's pending list is visible to every query), or, turned off, no
    # columns and no index at all (``sessiontree_search``, schema step 12).

    def _search_off(self) -> SearchIndexOff:
        return SearchIndexOff(
            f"the search index of {self.url} is off; turn it on with `sessiontree search-index on`"
        )

    def search_index(self) -> SearchIndex:
        ((nodes, size),) = self._all(
            "SELECT (SELECT count(*) FROM nodes), (SELECT pg_relation_size(to_regclass('nodes_search_all')))"
        )
        if size is None:
            return SearchIndex(False, 0, 0, 0)
        return SearchIndex(True, int(nodes), 0, int(size))

    def set_search_index(
        self, enabled: bool, *, rebuild: bool = False, progress: Callable[[int, int], None] | None = None
    ) -> int:
        with self.transaction():
            self._write("SELECT sessiontree_search(%s)", (enabled,))
            if rebuild and enabled:
                self._write("REINDEX INDEX nodes_search_all")
        if not enabled:
            return 0
        count = int(self._one("SELECT count(*) FROM nodes"))
        if progress is not None:
            progress(count, count)
        return count

    def check_search_index(self) -> str | None:
        return None  # generated columns cannot disagree with their rows

    def refs_containing(self, node_ids: Sequence[str]) -> dict[str, RefsOnPath]:
        return refs_on_path(node_ids, lambda: self._all(_REFS_CONTAINING, {"ids": list(node_ids)}))

    # -- trash and redactions ---------------------------------------------------------

    def set_trashed(self, session_key: int, when: str | None) -> None:
        self._claim(session_key)
        self._write(
            "UPDATE sessions SET trashed_at = CASE WHEN %(when)s::text IS NULL THEN NULL"
            " ELSE coalesce(trashed_at, %(when)s) END WHERE key = %(key)s",
            {"when": when, "key": session_key},
        )

    def trashed(self, before: str | None = None) -> list[TrashEntry]:
        rows = self._all(
            "SELECT s.id, s.title, s.trashed_at, (SELECT count(*) FROM nodes n WHERE n.session = s.key)"
            " FROM sessions s WHERE s.trashed_at IS NOT NULL"
            " AND (%(before)s::text IS NULL OR s.trashed_at < %(before)s) ORDER BY s.trashed_at, s.id",
            {"before": before},
        )
        return [TrashEntry(r[0], r[1], r[2], int(r[3])) for r in rows]

    def droppable_sessions(self, cutoff: str) -> list[DroppableSession]:
        return [DroppableSession(r[0], r[1], bool(r[2])) for r in self._all(_DROPPABLE, {"cutoff": cutoff})]

    def strippable_results(self, cutoff: str, min_bytes: int) -> list[StrippableResult]:
        rows = self._all(_STRIPPABLE, {"cutoff": cutoff, "min_bytes": min_bytes})
        return [StrippableResult(r[0], r[1], int(r[2])) for r in rows]

    def redact(self, node_id: str, field: str, marker: str, reason: str, when: str) -> int:
        row = self._all("SELECT key, session, kind, payload FROM nodes WHERE id = %s", (node_id,))[0]
        key, session_key, kind, payload = row[0], row[1], row[2], json.loads(row[3])
        self._claim(session_key)
        removed = payload.get(field)
        size = len(removed.encode("utf-8", "surrogatepass")) if isinstance(removed, str) else 0
        payload[field] = marker
        self._write(
            "INSERT INTO redactions (node, field, bytes, marker, reason, created_at)"
            " VALUES (%s, %s, %s, %s, %s, %s)",
            (key, field, size, marker, reason, when),
        )
        self._write("UPDATE nodes SET payload = %s WHERE key = %s", (encode_payload(payload, kind), key))
        self.cache.clear()  # cached paths hold the old payload
        return size

    def record_redaction(
        self, node_id: str, field: str, size: int, marker: str, reason: str, when: str
    ) -> None:
        key, session_key = self._all("SELECT key, session FROM nodes WHERE id = %s", (node_id,))[0]
        self._claim(session_key)
        self._write(
            "INSERT INTO redactions (node, field, bytes, marker, reason, created_at)"
            " VALUES (%s, %s, %s, %s, %s, %s)",
            (key, field, size, marker, reason, when),
        )

    def retention_policy(self) -> dict[str, float]:
        return {name: float(value) for name, value in self._all("SELECT name, value FROM retention_policy")}

    def set_retention_policy(self, policy: dict[str, float]) -> None:
        self._write("DELETE FROM retention_policy")
        for name, value in policy.items():
            self._write("INSERT INTO retention_policy (name, value) VALUES (%s, %s)", (name, value))

    def redactions(self, session_key: int | None = None) -> list[dict[str, Any]]:
        rows = self._all(
            "SELECT n.id, s.id, r.field, r.bytes, r.marker, r.reason, r.created_at FROM redactions r"
            " JOIN nodes n ON n.key = r.node JOIN sessions s ON s.key = n.session"
            " WHERE %(s)s::bigint IS NULL OR n.session = %(s)s ORDER BY r.created_at, n.id",
            {"s": session_key},
        )
        keys = ("node", "session", "field", "bytes", "marker", "reason", "created_at")
        return [dict(zip(keys, r, strict=True)) for r in rows]
