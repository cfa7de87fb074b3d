"""Full-text search across sessions: what a query may ask and what a hit holds.

Contract: ``search(storage, query)`` checks the ``SearchQuery`` (a known role and
kind, a positive limit, a non-blank text), asks the backend for the best matches
with it, unchanged (SQLite: FTS5 over every node's text, tool names, arguments
and results; see ``migrations/0004_search.sql``), and returns ``SearchHit``s
that name, for each node, the branches and checkpoints whose path contains it,
so a hit can be opened where it lives. The text is FTS5 syntax (words,
"phrases", AND/OR/NOT, prefix*); a query it cannot parse raises ``InvalidQuery``.
"""

from __future__ import annotations

from .errors import InvalidQuery
from .model import KINDS, ROLES, SearchHit, SearchQuery
from .names import check_lookup
from .storage import Storage


def check(query: SearchQuery) -> None:
    """``InvalidQuery`` naming what is wrong with ``query``, if anything."""
    text, branch, role, kind, limit = query.text, query.branch, query.role, query.kind, query.limit
    if not isinstance(text, str) or not text.strip():
        raise InvalidQuery("the search query is empty: give at least one word")
    check_lookup(text, "match for search query", InvalidQuery)
    if branch is not None:
        check_lookup(branch, "branch", InvalidQuery)
    if role is not None and role not in ROLES:
        raise InvalidQuery(f"no role {role!r}; roles are {', '.join(sorted(ROLES))}")
    if kind is not None and kind not in KINDS:
        raise InvalidQuery(f"no node kind {kind!r}; kinds are {', '.join(sorted(KINDS))}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidQuery(f"the search limit must be a whole number >= 1, not {limit!r}")


def search(storage: Storage, query: SearchQuery) -> list[SearchHit]:
    """The best ``query.limit`` nodes matching ``query``; see the module docstring."""
    check(query)
    with storage.snapshot():
        found = storage.search.find(query)
        refs = storage.search.refs_containing([match.node.id for match in found])
    return [
        SearchHit(m.node, m.node.session_id, m.snippet, refs[m.node.id].branches, refs[m.node.id].checkpoints)
        for m in found
    ]
