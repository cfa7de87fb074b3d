"""SQL that both backends run as it is, written once.

Contract: each constant is written for SQLite (``:name`` parameters);
``for_postgres(sql)`` gives the same statement with psycopg's ``%(name)s``
parameters. Only portable SQL belongs here: recursive CTEs, ``CAST(... AS
BIGINT)`` where a parameter may be NULL (PostgreSQL must know its type), and
``{placeholders}`` for the few spots where the dialects differ, filled by the
backend (named in each constant's comment). Also the snippet marks both
backends' searches put around a match.
"""

from __future__ import annotations

import functools
import re

SNIPPET_TOKENS = 16
"""Words around the match in a search snippet (both backends' snippets look alike)."""
MARK_START, MARK_END, ELLIPSIS = "«", "»", "…"
"""What a snippet puts around a matched word, and where it cut the text."""

# A session's nodes, walked down from its roots (parameter :s, the session key).
TREE = """
WITH RECURSIVE t(key) AS (
    SELECT key FROM nodes WHERE session = :s AND parent IS NULL
    UNION ALL
    SELECT n.key FROM t JOIN nodes n ON n.parent = t.key
)
"""

_IN_SCOPE = "(CAST(:s AS BIGINT) IS NULL OR {column} = :s)"

# Every node some ref (branch head, checkpoint, unresolved pause) reaches, in one
# session (:s) or all (:s NULL). UNION, not UNION ALL: shared ancestors are walked once.
REACHED = f"""
WITH RECURSIVE
  refs(key) AS (
    SELECT head FROM branches WHERE head IS NOT NULL AND {_IN_SCOPE.format(column="session")}
    UNION SELECT node FROM checkpoints WHERE {_IN_SCOPE.format(column="session")}
    UNION SELECT p.key FROM nodes p WHERE p.kind = 'pause' AND {_IN_SCOPE.format(column="p.session")}
      AND NOT EXISTS (SELECT 1 FROM nodes d WHERE d.parent = p.key AND d.kind = 'decision')
    -- a human's decision that no run has carried on from yet
    UNION SELECT d.key FROM nodes d WHERE d.kind = 'decision' AND {_IN_SCOPE.format(column="d.session")}
      AND NOT EXISTS (SELECT 1 FROM nodes c WHERE c.parent = d.key)
    -- anything written inside the grace period: a writer may be about to point at it
    UNION SELECT y.key FROM nodes y WHERE y.created_at > :cutoff AND {_IN_SCOPE.format(column="y.session")}
  ),
  reached(key) AS (
    SELECT key FROM refs
    UNION
    SELECT n.parent FROM reached JOIN nodes n ON n.key = reached.key WHERE n.parent IS NOT NULL
  )
"""

# Nodes of one session (:s) or of all, for prune.
PRUNE_SCOPE = {
    True: "scope(key) AS (SELECT key FROM nodes)",
    False: "scope(key) AS (SELECT key FROM nodes WHERE session = :s AND parent IS NULL"
    " UNION ALL SELECT n.key FROM scope JOIN nodes n ON n.parent = scope.key)",
}
# Each unkept node, with its run when no kept node names that run too.
UNREACHABLE = (
    " SELECT n.key, n.id, r.key, r.id FROM scope JOIN nodes n ON n.key = scope.key"
    " LEFT JOIN runs r ON r.key = n.run AND NOT EXISTS (SELECT 1 FROM nodes k WHERE k.run = n.run"
    " AND (k.key IN (SELECT key FROM reached) OR k.key NOT IN (SELECT key FROM scope)))"
    " WHERE n.key NOT IN (SELECT key FROM reached) ORDER BY n.id"
)

# (check, detail, query): each query returns (session id, node id, details...); {scope}
# narrows to one session, {bad_json} is the dialect's "c.payload is not valid JSON".
INTEGRITY_CHECKS = [
    (
        "parent",
        "node {1} has a missing parent (row {2})",
        """SELECT s.id, c.id, c.parent FROM nodes c JOIN sessions s ON s.key = c.session
        LEFT JOIN nodes p ON p.key = c.parent WHERE c.parent IS NOT NULL AND p.key IS NULL {scope}""",
    ),
    (
        "parent",
        "node {1} has its parent in another session {2}",
        """SELECT s.id, c.id, ps.id FROM nodes c JOIN nodes p ON p.key = c.parent
        JOIN sessions s ON s.key = c.session JOIN sessions ps ON ps.key = p.session
        WHERE p.session != c.session {scope}""",
    ),
    (
        "depth",
        "node {1} has depth {2} under a parent of depth {3}",
        """SELECT s.id, c.id, c.depth, p.depth FROM nodes c JOIN nodes p ON p.key = c.parent
        JOIN sessions s ON s.key = c.session WHERE c.depth != p.depth + 1 {scope}""",
    ),
    (
        "payload",
        "node {1} has a payload that is not valid JSON",
        """SELECT s.id, c.id FROM nodes c JOIN sessions s ON s.key = c.session
        WHERE {bad_json} {scope}""",
    ),
    (
        "ref",
        "branch {2!r} points at row {1}, which is not a node of its session",
        """SELECT s.id, c.head, c.name FROM branches c JOIN sessions s ON s.key = c.session
        LEFT JOIN nodes n ON n.key = c.head AND n.session = c.session
        WHERE c.head IS NOT NULL AND n.key IS NULL {scope}""",
    ),
    (
        "ref",
        "checkpoint {2!r} points at row {1}, which is not a node of its session",
        """SELECT s.id, c.node, c.name FROM checkpoints c JOIN sessions s ON s.key = c.session
        LEFT JOIN nodes n ON n.key = c.node AND n.session = c.session WHERE n.key IS NULL {scope}""",
    ),
]
INTEGRITY_SCOPE = "AND c.session = :s"

# (session id, branch, head key, head id) of every non-empty branch whose head exists.
BRANCH_HEADS = (
    "SELECT s.id, b.name, b.head, n.id FROM branches b JOIN sessions s ON s.key = b.session"
    " JOIN nodes n ON n.key = b.head AND n.session = b.session"
    f" WHERE {_IN_SCOPE.format(column='b.session')} ORDER BY s.id, b.name"
)

# Each ref of the sessions the nodes {wanted} are in, walked up to its root; a node a
# walk passes is on that ref's path. {wanted}: the dialect's "id is one of :ids".
REFS_CONTAINING = """
WITH RECURSIVE
  wanted(key, session) AS (SELECT key, session FROM nodes WHERE {wanted}),
  up(kind, name, key) AS (
    SELECT 'branch', name, head FROM branches
    WHERE head IS NOT NULL AND session IN (SELECT session FROM wanted)
    UNION ALL
    SELECT 'checkpoint', name, node FROM checkpoints WHERE session IN (SELECT session FROM wanted)
    UNION ALL
    SELECT up.kind, up.name, n.parent FROM up JOIN nodes n ON n.key = up.key
    WHERE n.parent IS NOT NULL
      AND n.depth > (SELECT min(depth) FROM nodes WHERE key IN (SELECT key FROM wanted))
  )
SELECT n.id, up.kind, up.name FROM up JOIN nodes n ON n.key = up.key
WHERE up.key IN (SELECT key FROM wanted)
ORDER BY up.kind, up.name
"""

# (session key, session id, branch, head id) of the branches, outside the trash, whose head
# is a tool_start or a tool result: where a run cut off inside a tool stopped. {is_tool}:
# the dialect's "h is a tool message". Payloads are stored with compact separators, so the
# LIKE passes every tool message and spares parsing the other heads (a look at 5,000 heads
# took 67 ms on PostgreSQL without it).
TOOL_HEADS = """
SELECT s.key, s.id, b.name, h.id FROM branches b
JOIN nodes h ON h.key = b.head JOIN sessions s ON s.key = b.session
WHERE s.trashed_at IS NULL AND (h.kind = 'tool_start'
  OR (h.kind = 'message' AND h.payload LIKE '%"role":"tool"%' AND {is_tool}))
ORDER BY h.id, b.name
"""

# The sessions a drop policy looks at: not trashed yet, no checkpoint, nothing written
# since :cutoff; the third column is 1 when work is in flight (a branch stands at a pause, a
# decision or a tool_start: a human or a worker will carry it on), which a drop leaves alone.
DROPPABLE = """
SELECT s.id, coalesce(max(n.created_at), s.created_at),
  CASE WHEN EXISTS (
    SELECT 1 FROM branches b JOIN nodes h ON h.key = b.head
    WHERE b.session = s.key AND h.kind IN ('pause', 'decision', 'tool_start')) THEN 1 ELSE 0 END
FROM sessions s LEFT JOIN nodes n ON n.session = s.key
WHERE s.trashed_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM checkpoints c WHERE c.session = s.key)
GROUP BY s.key, s.id, s.created_at
HAVING coalesce(max(n.created_at), s.created_at) < :cutoff
ORDER BY s.id
"""

# The branch or checkpoint :name of session :s: ('branch' | 'checkpoint', node key, node id);
# an empty branch has no node (key and id NULL). Read for every append and every ref.
REF = """
SELECT 'branch', b.head, n.id FROM branches b LEFT JOIN nodes n ON n.key = b.head
WHERE b.session = :s AND b.name = :name
UNION ALL SELECT 'checkpoint', c.node, n.id FROM checkpoints c JOIN nodes n ON n.key = c.node
WHERE c.session = :s AND c.name = :name
"""

# The head of branch :name of session :s: (key, id, depth, kind), NULLs for an empty branch.
BRANCH_HEAD = """
SELECT b.head, n.id, n.depth, n.kind FROM branches b LEFT JOIN nodes n ON n.key = b.head
WHERE b.session = :s AND b.name = :name
"""

INSERT_BRANCH = """
INSERT INTO branches (session, name, head, metadata, created_at, updated_at)
VALUES (:s, :name, :head, :metadata, :created, :updated)
"""

# Every recorded redaction (of session :s, when not NULL), oldest first, as the columns
# of ``REDACTION_FIELDS``.
REDACTIONS = """
SELECT n.id, s.id, r.field, r.bytes, r.marker, r.reason, r.created_at FROM redactions r
JOIN nodes n ON n.key = r.node JOIN sessions s ON s.key = n.session
WHERE CAST(:s AS BIGINT) IS NULL OR n.session = :s ORDER BY r.created_at, n.id
"""
REDACTION_FIELDS = ("node", "session", "field", "bytes", "marker", "reason", "created_at")
"""The keys of a redaction as ``Trash.redactions`` gives it, in ``REDACTIONS``'s order."""


_PARAMETER = re.compile(r"(?<![:\w]):([a-z_]+)\b")


@functools.lru_cache(maxsize=256)
def for_postgres(sql: str) -> str:
    """The statement with psycopg's ``%(name)s`` parameters instead of ``:name``."""
    return _PARAMETER.sub(r"%(\1)s", sql)
