"""The PostgreSQL backend's search part (schema step 4 and on).

Contract: ``PostgresSearch(storage)`` is ``storage.search`` of a
``PostgresStorage`` (``search.Search``), reaching the server through its public
helpers (``hosts.PostgresHost``), the twin of ``sqlite_search``. It matches the generated
``tsvector`` column (``migrations/postgres/0013_lighter_writes.sql``) with
``websearch_to_tsquery('simple', query)``: words, "quoted phrases", ``OR`` and
``-word`` mean what they mean in FTS5 (AND by default); FTS5's column filters,
``NEAR`` and ``prefix*`` are not read as such. It never fails on syntax: a query
with no words finds nothing. Snippets come from ``ts_headline``, marked as on
SQLite.
"""

from __future__ import annotations

from collections.abc import Sequence

from psycopg import errors as pg_errors

from ..errors import SearchIndexOff
from ..model import Node, SearchIndex, SearchQuery
from . import shared_sql
from .hosts import PostgresHost
from .rows import RefsOnPath, SearchMatch, refs_on_path
from .search import Progress, Search
from .shared_sql import ELLIPSIS, MARK_END, MARK_START, SNIPPET_TOKENS, for_postgres

_TEXT = "coalesce(sessiontree_node_text(n.kind, n.payload), '')"
_ALL = f"{_TEXT} || ' ' || coalesce(sessiontree_node_tools(n.kind, n.payload), '')"
ALL_VECTOR = "n.search_vector"
"""What every search matches: the one stored vector (schema step 13), the column of the one
index, ``nodes_search_all``. The text's words carry weight A: ``tools=False`` matches the
query with its words restricted to A (``q.text``)."""
_RANKED = {
    True: "ts_rank('{0.1,0.1,0.1,0.1}', n.search_vector, q.q)",
    False: "ts_rank('{0.1,0.1,0.1,0.1}', ts_filter(n.search_vector, '{a}'), q.q)",
}
"""What a match is ranked by: every weight counted as the default one, and for ``tools=False``
the text's words alone, so that the ranks are those of steps 4 to 12's unweighted vectors."""
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


class PostgresSearch(Search):
    """Full-text queries and the index of one PostgreSQL store."""

    def __init__(self, storage: PostgresHost) -> None:
        self.storage = storage

    def find(self, query: SearchQuery) -> list[SearchMatch]:
        tools = query.tools
        order = "n.key DESC" if query.newest else f"{_RANKED[tools]} DESC, n.id"
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
            rows = self.storage.fetch_all(sql, params)
        except pg_errors.UndefinedColumn:  # turned off (by any process): no search columns
            raise self._search_off() from None
        return [SearchMatch(Node(*r[1:9]), r[9] or "") for r in rows]

    # The index is one generated tsvector column and a GIN index on it: in step with the
    # rows (a GIN index's pending list is visible to every query), or, turned off, neither
    # (``sessiontree_search``, schema step 13).

    def _search_off(self) -> SearchIndexOff:
        return SearchIndexOff(
            f"the search index of {self.storage.url} is off; turn it on with `sessiontree search-index on`"
        )

    def index(self) -> SearchIndex:
        ((nodes, size),) = self.storage.fetch_all(
            "SELECT (SELECT count(*) FROM nodes), (SELECT pg_relation_size(to_regclass('nodes_search_all')))"
        )
        if size is None:
            return SearchIndex(False, 0, 0, 0)
        return SearchIndex(True, int(nodes), 0, int(size))

    def set_index(self, enabled: bool, *, rebuild: bool = False, progress: Progress | None = None) -> int:
        with self.storage.transaction():
            self.storage.write("SELECT sessiontree_search(%s)", (enabled,))
            if rebuild and enabled:
                self.storage.write("REINDEX INDEX nodes_search_all")
        if not enabled:
            return 0
        count = int(self.storage.fetch_value("SELECT count(*) FROM nodes"))
        if progress is not None:
            progress(count, count)
        return count

    def check_index(self) -> str | None:
        return None  # generated columns cannot disagree with their rows

    def refs_containing(self, node_ids: Sequence[str]) -> dict[str, RefsOnPath]:
        return refs_on_path(
            node_ids, lambda: self.storage.fetch_all(_REFS_CONTAINING, {"ids": list(node_ids)})
        )
