"""The SQLite backend's search part: full-text search (FTS5, schema step 4) and its index.

Contract: ``SQLiteSearch(storage)`` is ``storage.search`` of a ``SQLiteStorage``
(``search.Search``), reaching the file through its public helpers
(``hosts.SQLiteHost``); the backend calls ``index_pending`` as its writes
commit. ``find`` runs one FTS5 query over ``nodes_fts`` (kept in step with
``nodes`` by triggers; see ``migrations/0004_search.sql``) and returns the
matches with their snippets, best first; ``refs_containing`` says which branches and checkpoints have each of
some nodes on their path. Public ids in, public ids and ``Node``s out; the
rules (which filters are valid, what a hit holds) live in ``search``. A query
FTS5 cannot parse raises ``InvalidQuery`` naming it.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Sequence
from typing import Any

from ..errors import InvalidQuery, ReadOnly, SearchIndexOff
from ..model import Node, SearchIndex, SearchQuery
from .hosts import Part, SQLiteHost
from .rows import RefsOnPath, SearchMatch, refs_on_path
from .search import Progress, Search
from .shared_sql import ELLIPSIS, MARK_END, MARK_START, REFS_CONTAINING, SNIPPET_TOKENS

SEARCH_BATCH = 64
"""Nodes a writer inserts before it indexes them (see migration 0007)."""
INDEX_CHUNK = 10_000
"""Nodes indexed per statement when the whole store is (re)indexed, between two progress reports."""
# What FTS5 says about a query it cannot parse (anything else is about the file).
_QUERY_ERROR = re.compile(r"fts5: |no such column: |unterminated string|unknown special query|.*syntax error")

_SEARCH = """
WITH RECURSIVE on_branch(key) AS (
    SELECT b.head FROM branches b
    WHERE :branch IS NOT NULL AND b.name = :branch AND b.head IS NOT NULL
      AND (:session IS NULL OR b.session = (SELECT key FROM sessions WHERE id = :session))
    UNION
    SELECT n.parent FROM on_branch JOIN nodes n ON n.key = on_branch.key WHERE n.parent IS NOT NULL
)
SELECT n.key, n.id, s.id, p.id, n.depth, n.kind, n.payload, n.created_at, r.id,
       CAST(snippet({fts}, -1, :start, :end, :ellipsis, :tokens) AS BLOB), {fts}.rank
FROM {fts}
JOIN nodes n ON n.key = {fts}.rowid
JOIN sessions s ON s.key = n.session
LEFT JOIN nodes p ON p.key = n.parent
LEFT JOIN runs r ON r.key = n.run
WHERE {fts} MATCH :query
  AND (:session IS NULL OR s.id = :session)
  AND (:kind IS NULL OR n.kind = :kind)
  AND (:role IS NULL OR (n.kind = 'message' AND json_extract(n.payload, '$.role') = :role))
  AND (:branch IS NULL OR n.key IN (SELECT key FROM on_branch))
  {visible}
ORDER BY {order}
LIMIT :limit
"""

_REFS_CONTAINING = REFS_CONTAINING.format(wanted="id IN (SELECT value FROM json_each(:ids))")


class SQLiteSearch(Part[SQLiteHost], Search):
    """Full-text queries and the index of one SQLite store."""

    visible = "AND s.trashed_at IS NULL"
    """The condition on ``s`` (the session) a hit must meet: search never shows the trash."""

    @property
    def conn(self) -> sqlite3.Connection:
        """The calling thread's connection to the file."""
        return self.storage.conn

    def _watermark(self) -> int | None:
        """The largest key the index holds every node up to; None when the index is off."""
        through: int | None = self.conn.execute("SELECT indexed_through FROM search_state").fetchone()[0]
        return through

    def index_pending(self, progress: Progress | None = None) -> int:
        """Index every node above the watermark, ``INDEX_CHUNK`` nodes a statement (one
        FTS5 segment each; a writer's batch is one chunk), moving the watermark after each
        and reporting ``progress(done, total)``; how many nodes that was (inside a write
        transaction). Nothing when the index is off."""
        through = self._watermark()
        if through is None:
            return 0
        (total,) = self.conn.execute("SELECT count(*) FROM nodes WHERE key > ?", (through,)).fetchone()
        done = 0
        while done < total:
            (last,) = self.conn.execute(
                "SELECT max(key) FROM (SELECT key FROM nodes WHERE key > ? ORDER BY key LIMIT ?)",
                (through, INDEX_CHUNK),
            ).fetchone()
            self.conn.execute(
                "INSERT INTO nodes_fts (rowid, text, tools)"
                " SELECT key, text, tools FROM node_text_all WHERE key > ? AND key <= ?",
                (through, last),
            )
            self.conn.execute("UPDATE search_state SET indexed_through = ?", (last,))
            done, through = min(done + INDEX_CHUNK, total), last
            if progress is not None:
                progress(done, total)
        return int(total)

    def index(self) -> SearchIndex:
        through = self._watermark()
        if through is None:
            return SearchIndex(False, 0, 0, self._index_bytes())
        (indexed,) = self.conn.execute("SELECT count(*) FROM nodes_fts_docsize").fetchone()
        (pending,) = self.conn.execute("SELECT count(*) FROM nodes WHERE key > ?", (through,)).fetchone()
        return SearchIndex(True, indexed, pending, self._index_bytes())

    def _index_bytes(self) -> int | None:
        try:  # dbstat is a compile-time option of SQLite; without it the size is unknown
            (size,) = self.conn.execute(
                "SELECT sum(pgsize) FROM dbstat WHERE name LIKE 'nodes\\_fts\\_%' ESCAPE '\\'"
            ).fetchone()
        except sqlite3.OperationalError:
            return None
        return int(size or 0)

    def set_index(self, enabled: bool, *, rebuild: bool = False, progress: Progress | None = None) -> int:
        """Turn the index on (indexing every node), off (emptying it), or with ``rebuild``
        empty it and index every node again, all in one transaction (``index_pending``
        reports the progress); how many nodes it holds now."""
        with self.storage.transaction():
            if self._watermark() is not None and (rebuild or not enabled):
                self.conn.execute("INSERT INTO nodes_fts (nodes_fts) VALUES ('delete-all')")
                self.conn.execute("UPDATE search_state SET indexed_through = NULL")
            if not enabled:
                return 0
            self.conn.execute("UPDATE search_state SET indexed_through = 0 WHERE indexed_through IS NULL")
            self.index_pending(progress)
            return int(self.conn.execute("SELECT count(*) FROM nodes_fts_docsize").fetchone()[0])

    def check_index(self) -> str | None:
        """FTS5's own check that the index holds exactly the text of the nodes it covers:
        None when it does, else what it found."""
        if self._watermark() is None:
            return None
        if self.storage.readonly:  # FTS5 takes its check as an INSERT, which a read-only connection refuses
            raise ReadOnly(
                f"{self.storage.path} is open read-only, and checking the search index needs write access"
            )
        try:
            self.conn.execute("INSERT INTO nodes_fts (nodes_fts, rank) VALUES ('integrity-check', 1)")
        except sqlite3.DatabaseError as e:  # SQLITE_CORRUPT_VTAB: the index disagrees with the nodes
            return f"FTS5 integrity-check: {e}"
        return None

    def _catch_up(self) -> bool:
        """Before a search: refuse when the index is off; on a store that may write,
        index what is pending. Whether nodes are left unindexed (a read-only store's)."""
        through = self._watermark()
        if through is None:
            path = self.storage.path
            raise SearchIndexOff(
                f"the search index of {path} is off; turn it on with `sessiontree search-index on`"
            )
        if self.conn.execute("SELECT 1 FROM nodes WHERE key > ? LIMIT 1", (through,)).fetchone() is None:
            return False
        if self.storage.readonly:
            return True
        with self.storage.transaction():
            self.index_pending()
        return False

    def _index_pending_in_temp(self) -> None:
        """A read-only store cannot move the watermark; it indexes the nodes above it in
        a temporary table of its own connection (never in the file), searched beside the
        index."""
        self.conn.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.pending_fts USING fts5("
            "text, tools, tokenize = 'unicode61 remove_diacritics 2')"
        )
        self.conn.execute("DELETE FROM temp.pending_fts")
        self.conn.execute(
            "INSERT INTO temp.pending_fts (rowid, text, tools) SELECT key, text, tools FROM node_text_all"
            " WHERE key > (SELECT indexed_through FROM search_state)"
        )

    def _matches(self, fts: str, params: dict[str, Any], newest: bool) -> list[Any]:
        order = f"{fts}.rowid DESC" if newest else f"{fts}.rank, n.id"
        sql = _SEARCH.format(fts=fts, visible=self.visible, order=order)
        return self.conn.execute(sql, params).fetchall()

    def find(self, query: SearchQuery) -> list[SearchMatch]:
        """The best ``query.limit`` matches of its FTS5 text (with ``newest``, the newest
        matches instead: read in index order, so a common word stops after ``limit`` rows
        instead of ranking every match); with ``tools=False`` tool names, arguments and
        results are not searched."""
        unindexed = self._catch_up()
        text, limit, newest = query.text, query.limit, query.newest
        if not query.tools and _closes_early(text):  # ')' would end the column filter early
            raise InvalidQuery(f"search query {text!r} closes a parenthesis it never opened")
        params: dict[str, Any] = {
            "query": text if query.tools else f"{{text}} : ({text})",
            "session": query.session_id,
            "branch": query.branch,
            "role": query.role,
            "kind": query.kind,
            "limit": limit,
            "start": MARK_START,
            "end": MARK_END,
            "ellipsis": ELLIPSIS,
            "tokens": SNIPPET_TOKENS,
        }
        try:
            rows = self._matches("nodes_fts", params, newest)
            if unindexed:  # nodes no writer has indexed yet
                self._index_pending_in_temp()
                # temp: no table of the file has the name
                rows += self._matches("pending_fts", params, newest)
                # Node keys grow with time (a key is never reused while its row lives).
                rows.sort(key=(lambda r: -r[0]) if newest else (lambda r: (r[10], r[1])))
                del rows[limit:]
        except sqlite3.OperationalError as e:
            said = str(e)
            if not _QUERY_ERROR.match(said):  # the file, not the query: busy, I/O, ...
                raise
            raise InvalidQuery(
                f"search query {text!r} is not valid full-text syntax ({said}); "
                "put words in double quotes to search for them as written, e.g. '\"a-b\"'"
            ) from None
        # A lone surrogate is stored as a JSON escape; json_extract turns it into bytes
        # that are not UTF-8, so the snippet is decoded leniently.
        return [SearchMatch(Node(*r[1:9]), bytes(r[9] or b"").decode("utf-8", "replace")) for r in rows]

    def refs_containing(self, node_ids: Sequence[str]) -> dict[str, RefsOnPath]:
        """node id -> the branches and checkpoints of its session whose path contains it."""
        return refs_on_path(
            node_ids, lambda: self.conn.execute(_REFS_CONTAINING, {"ids": json.dumps(list(node_ids))})
        )


def _closes_early(query: str) -> bool:
    """Whether a ``)`` outside double quotes closes more parentheses than were opened."""
    depth, quoted = 0, False
    for char in query:
        if char == '"':
            quoted = not quoted  # a doubled "" inside quotes flips twice: still quoted
        elif not quoted and char in "()":
            depth += 1 if char == "(" else -1
            if depth < 0:
                return True
    return False
