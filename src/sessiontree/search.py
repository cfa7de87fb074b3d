"""Full-text search across sessions: what a query may ask and what a hit holds.

Contract: ``search(storage, query, ...)`` checks the filters (a known role and
kind, a positive limit, a non-blank query), asks the backend for the best
matches (SQLite: FTS5 over every node's text, tool names, arguments and
results; see ``migrations/0004_search.sql``) and returns ``SearchHit``s that
name, for each node, the branches and checkpoints whose path contains it, so a
hit can be opened where it lives. The query is FTS5 syntax (words, "phrases",
AND/OR/NOT, prefix*); a query it cannot parse raises ``InvalidQuery``.
"""

from __future__ import annotations

from .errors import InvalidQuery
from .model import KINDS, ROLES, SearchHit
from .names import check_lookup
from .storage import Storage


def search(
    storage: Storage,
    query: str,
    *,
    session_id: str | None = None,
    branch: str | None = None,
    role: str | None = None,
    kind: str | None = None,
    limit: int = 20,
    tools: bool = True,
    newest: bool = False,
) -> list[SearchHit]:
    """The best ``limit`` nodes matching ``query``; see the module docstring."""
    if not isinstance(query, str) or not query.strip():
        raise InvalidQuery("the search query is empty: give at least one word")
    check_lookup(query, "match for search query", InvalidQuery)
    if branch is not None:
        check_lookup(branch, "branch", InvalidQuery)
    if role is not None and role not in ROLES:
        raise InvalidQuery(f"no role {role!r}; roles are {', '.join(sorted(ROLES))}")
    if kind is not None and kind not in KINDS:
        raise InvalidQuery(f"no node kind {kind!r}; kinds are {', '.join(sorted(KINDS))}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidQuery(f"the search limit must be a whole number >= 1, not {limit!r}")
    with storage.snapshot():
        found = storage.search(
            query,
            session_id=session_id,
            branch=branch,
            role=role,
            kind=kind,
            limit=limit,
            tools=tools,
            newest=newest,
        )
        refs = storage.refs_containing([match.node.id for match in found])
    return [
        SearchHit(m.node, m.node.session_id, m.snippet, refs[m.node.id].branches, refs[m.node.id].checkpoints)
        for m in found
    ]
