"""Prune and verify: the store's housekeeping.

Contract:
- ``prune`` removes exactly the nodes that no branch head, checkpoint or
  unresolved pause reaches (a node is reached when it is one of those or an
  ancestor of one), plus the runs only they referenced. A dry run reports the
  same set and writes nothing. The removal is one transaction.
- ``verify`` reads and never writes. It reports each problem with the session,
  the node when there is one, and which check found it.
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

from .errors import Conflict
from .model import Problem, PruneReport, VerifyReport

if TYPE_CHECKING:
    from .store import Store

# Every node some ref (branch head, checkpoint, unresolved pause) reaches.
# UNION, not UNION ALL: shared ancestors are walked once, not once per ref.
_REACHED = """
WITH RECURSIVE
  refs(id) AS (
    SELECT head_id FROM branches WHERE head_id IS NOT NULL {scope_b}
    UNION SELECT node_id FROM checkpoints WHERE 1 {scope_b}
    UNION SELECT p.id FROM nodes p WHERE p.kind = 'pause' {scope_p} AND NOT EXISTS (
        SELECT 1 FROM nodes d WHERE d.parent_id = p.id AND d.kind = 'decision')
  ),
  reached(id) AS (
    SELECT id FROM refs
    UNION
    SELECT n.parent_id FROM nodes n JOIN reached ON n.id = reached.id
    WHERE n.parent_id IS NOT NULL
  )
"""


def prune(
    store: Store, *, dry_run: bool = True, vacuum: bool = False, session_id: str | None = None
) -> PruneReport:
    """Remove unreachable nodes (and runs only they used); report what goes."""
    scope = "" if session_id is None else "AND session_id = :s"
    params: dict[str, Any] = {"s": session_id}
    reached = _REACHED.format(scope_b=scope, scope_p=scope.replace("session_id", "p.session_id"))
    # A dry run only reads, so it also works on a read-only store.
    with nullcontext(store.conn) if dry_run else store.transaction() as conn:
        node_ids = [
            r[0]
            for r in conn.execute(
                reached + f"SELECT id FROM nodes WHERE id NOT IN (SELECT id FROM reached) {scope}"
                " ORDER BY id",
                params,
            )
        ]
        run_ids = [
            r[0]
            for r in conn.execute(
                reached
                + """
            SELECT DISTINCT n.run_id FROM nodes n
            WHERE n.run_id IS NOT NULL AND n.id NOT IN (SELECT id FROM reached) {scope}
              AND NOT EXISTS (SELECT 1 FROM nodes k JOIN reached r ON r.id = k.id
                              WHERE k.run_id = n.run_id)
            ORDER BY n.run_id""".format(scope=scope.replace("session_id", "n.session_id")),
                params,
            )
        ]
        if not dry_run and node_ids:
            conn.execute("CREATE TEMP TABLE IF NOT EXISTS prune_ids (id TEXT PRIMARY KEY)")
            conn.execute("DELETE FROM prune_ids")
            conn.executemany("INSERT INTO prune_ids VALUES (?)", ((i,) for i in node_ids))
            conn.execute("DELETE FROM nodes WHERE id IN (SELECT id FROM prune_ids)")
            conn.executemany("DELETE FROM runs WHERE id = ?", ((i,) for i in run_ids))
            conn.execute("DELETE FROM prune_ids")
    freed = None
    if vacuum and not dry_run and store.path != ":memory:":
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        before = os.path.getsize(store.path)
        store.conn.execute("VACUUM")
        # In WAL mode VACUUM writes the new pages to the log; fold them back in.
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        freed = before - os.path.getsize(store.path)
    return PruneReport(node_ids=node_ids, run_ids=run_ids, dry_run=dry_run, bytes_freed=freed)


def verify(store: Store, *, session_id: str | None = None) -> VerifyReport:
    """Check the tree invariants; see the module docstring."""
    conn = store.conn
    scope = "" if session_id is None else "AND c.session_id = :s"
    params = {"s": session_id}
    problems: list[Problem] = []

    def add(rows: Any, check: str, detail: str) -> None:
        for row in rows:
            problems.append(Problem(row[0], check, detail.format(*row), row[1]))

    if session_id is None:
        problems += [
            Problem("", "sqlite", message)
            for (message,) in conn.execute("PRAGMA quick_check")
            if message != "ok"
        ]
    add(
        conn.execute(
            f"""
        SELECT c.session_id, c.id, c.parent_id FROM nodes c LEFT JOIN nodes p ON p.id = c.parent_id
        WHERE c.parent_id IS NOT NULL AND p.id IS NULL {scope}""",
            params,
        ),
        "parent",
        "node {1} has a missing parent {2}",
    )
    add(
        conn.execute(
            f"""
        SELECT c.session_id, c.id, p.session_id FROM nodes c JOIN nodes p ON p.id = c.parent_id
        WHERE p.session_id != c.session_id {scope}""",
            params,
        ),
        "parent",
        "node {1} has its parent in another session {2}",
    )
    add(
        conn.execute(
            f"""
        SELECT c.session_id, c.id, c.depth, p.depth FROM nodes c JOIN nodes p ON p.id = c.parent_id
        WHERE c.depth != p.depth + 1 {scope}""",
            params,
        ),
        "depth",
        "node {1} has depth {2} under a parent of depth {3}",
    )
    add(
        conn.execute(
            f"""
        SELECT c.session_id, c.id FROM nodes c WHERE json_valid(c.payload) = 0 {scope}""",
            params,
        ),
        "payload",
        "node {1} has a payload that is not valid JSON",
    )
    for table, column, what in (("branches", "head_id", "branch"), ("checkpoints", "node_id", "checkpoint")):
        add(
            conn.execute(
                f"""
            SELECT c.session_id, c.{column}, c.name FROM {table} c
            LEFT JOIN nodes n ON n.id = c.{column} AND n.session_id = c.session_id
            WHERE c.{column} IS NOT NULL AND n.id IS NULL {scope}""",
                params,
            ),
            "ref",
            what + " {2!r} points at {1}, which is not a node of its session",
        )
    problems.extend(_check_tool_calls(store, session_id))
    counts = conn.execute(
        "SELECT (SELECT count(*) FROM sessions WHERE :s IS NULL OR id = :s),"
        " (SELECT count(*) FROM nodes WHERE :s IS NULL OR session_id = :s)",
        params,
    ).fetchone()
    return VerifyReport(problems=problems, sessions=counts[0], nodes=counts[1])


def _check_tool_calls(store: Store, session_id: str | None) -> list[Problem]:
    """On each branch path, every tool call is answered by exactly one tool message
    before the conversation moves on (the next non-tool message)."""
    rows = store.conn.execute(
        "SELECT b.session_id, b.name FROM branches b JOIN nodes n ON n.id = b.head_id"
        " WHERE :s IS NULL OR b.session_id = :s ORDER BY b.session_id, b.name",
        {"s": session_id},
    ).fetchall()
    problems = []
    sessions: dict[str, Any] = {}
    for sid, name in rows:
        session = sessions.get(sid) or sessions.setdefault(sid, store.session(sid))
        open_calls: dict[str, bool] = {}  # call id -> answered
        for node in session.path(name):
            if node.kind != "message":
                continue
            message = node.payload
            role = message.get("role")
            if role == "tool":
                call_id = message.get("tool_call_id")
                if call_id not in open_calls:
                    problems.append(
                        Problem(
                            sid,
                            "tool-calls",
                            f"on branch {name!r}, tool message {node.id} answers no open call {call_id!r}",
                            node.id,
                        )
                    )
                elif open_calls[call_id]:
                    problems.append(
                        Problem(
                            sid,
                            "tool-calls",
                            f"on branch {name!r}, tool call {call_id!r} is answered twice",
                            node.id,
                        )
                    )
                else:
                    open_calls[call_id] = True
                continue
            unanswered = [c for c, done in open_calls.items() if not done]
            if unanswered:
                problems.append(
                    Problem(
                        sid,
                        "tool-calls",
                        f"on branch {name!r}, tool calls {unanswered} are unanswered before node {node.id}",
                        node.id,
                    )
                )
            open_calls = {}
            if role == "assistant":
                for call in message.get("tool_calls") or []:
                    open_calls[call.get("id")] = False
    return problems


def stats(store: Store) -> dict[str, Any]:
    """Counts, sizes and per-model token usage of the whole store."""
    q = store.conn.execute
    files = [store.path, store.path + "-wal"] if store.path != ":memory:" else []
    return {
        "file": store.path,
        "bytes": sum(os.path.getsize(f) for f in files if os.path.exists(f)),
        "schema_version": store.schema_version,
        "sessions": q("SELECT count(*) FROM sessions").fetchone()[0],
        "nodes": dict(q("SELECT kind, count(*) FROM nodes GROUP BY kind ORDER BY kind").fetchall()),
        "branches": q("SELECT count(*) FROM branches").fetchone()[0],
        "checkpoints": q("SELECT count(*) FROM checkpoints").fetchone()[0],
        "pending": len(store.pending()),
        "payload_bytes": q("SELECT coalesce(sum(length(CAST(payload AS BLOB))), 0) FROM nodes").fetchone()[0],
        "models": [
            {"model": m, "runs": n, "input_tokens": i or 0, "output_tokens": o or 0}
            for m, n, i, o in q(
                "SELECT coalesce(model, '?'), count(*), sum(input_tokens),"
                " sum(output_tokens) FROM runs GROUP BY 1 ORDER BY 2 DESC, 1"
            )
        ],
    }


def backup(store: Store, destination: str) -> int:
    """A consistent, compacted copy of the database at ``destination``; its size in bytes."""
    if os.path.exists(destination):
        raise Conflict(f"{destination} already exists; choose a new file")
    store.conn.execute("VACUUM INTO ?", (destination,))
    return os.path.getsize(destination)
