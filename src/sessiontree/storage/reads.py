"""The reads both backends answer with the same SQL, written once.

Contract: ``SharedReads`` implements the ``Storage`` reads whose statements are
portable (nodes, children, trees, pending and resumable pauses, ancestry, usage,
branches, checkpoints, sessions, runs) on top of one method a backend supplies,
``_rows(sql, params)``: run a statement written for SQLite's ``:name``
parameters and return its rows (PostgreSQL translates it with
``shared_sql.for_postgres``). Reads that differ (the path walk, id prefixes) or
that take locks on PostgreSQL (branch heads and refs inside a write) stay with
each backend.
"""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Iterator, Sequence
from typing import Any

from ..errors import NotFound
from ..model import Branch, Checkpoint, ModelUsage, Node, Run, SessionInfo, Usage
from .base import RUN_FIELDS, Storage, decode_run
from .rows import NodeHandle, NodeKey, ResumablePause, RunHandle, ToolHead
from .shared_sql import TOOL_HEADS, TREE

# A node as a Node: its own columns, then the ids of its session, parent and run.
NODE = "n.key, n.id, s.id, p.id, n.depth, n.kind, n.payload, n.created_at, r.id"
NODE_JOINS = (
    "JOIN sessions s ON s.key = n.session LEFT JOIN nodes p ON p.key = n.parent"
    " LEFT JOIN runs r ON r.key = n.run"
)
RUN_COLUMNS = ", ".join(RUN_FIELDS)
_RUN_SELECT = ", ".join("r." + f for f in RUN_FIELDS)
_RUNS = (
    f"SELECT r.id, s.id, {_RUN_SELECT} FROM runs r JOIN sessions s ON s.key = r.session"
    " WHERE r.session = :s ORDER BY r.id"
)
_BRANCH = "SELECT b.name, n.id, b.created_at, b.updated_at, b.metadata FROM branches b"


def node_from_row(row: Sequence[Any]) -> Node:
    """A Node from a ``NODE`` row."""
    return Node(row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8])


def _branch(row: Sequence[Any], session_id: str) -> Branch:
    return Branch(session_id, row[0], row[1], row[2], row[3], json.loads(row[4]))


class SharedReads(Storage):
    """Portable reads; mixed into each backend, which supplies ``_rows``."""

    is_tool_message: str
    """The dialect's condition "node ``h`` (a message) is a tool result", for ``TOOL_HEADS``."""
    usage_number: str
    """The dialect's "the number ``usage.{name}`` of run ``r``, else NULL" (a format string)."""
    tree_walk: str = TREE
    """The CTE ``t(key)`` of every node of session ``:s`` (a backend may pin its plan)."""

    @abstractmethod
    def _rows(self, sql: str, params: dict[str, Any] | None = None) -> list[Any]:
        """The rows of a statement written with ``:name`` parameters."""

    def _first(self, sql: str, params: dict[str, Any]) -> Any:
        rows = self._rows(sql, params)
        return rows[0] if rows else None

    def _nodes(self, sql: str, params: dict[str, Any]) -> list[Node]:
        return [node_from_row(r) for r in self._rows(sql, params)]

    # -- nodes -------------------------------------------------------------------

    def node(self, id: str) -> Node:
        row = self._first(f"SELECT {NODE} FROM nodes n {NODE_JOINS} WHERE n.id = :id", {"id": id})
        if row is None:
            raise NotFound(f"no node {id!r}")
        return node_from_row(row)

    def handle(self, id: str) -> NodeHandle | None:
        row = self._first(
            "SELECT n.key, s.id, n.depth, n.kind FROM nodes n JOIN sessions s ON s.key = n.session"
            " WHERE n.id = :id",
            {"id": id},
        )
        return None if row is None else NodeHandle(row[0], row[1], row[2], row[3])

    def children(self, key: int) -> list[Node]:
        return self._nodes(
            f"SELECT {NODE} FROM nodes n {NODE_JOINS} WHERE n.parent = :k ORDER BY n.id", {"k": key}
        )

    def _stream(self, sql: str, params: dict[str, Any]) -> Iterator[Any]:
        """The rows of a statement as they are consumed (a backend that can reads them
        a batch at a time inside a snapshot); by default all at once."""
        return iter(self._rows(sql, params))

    def _tree_sql(self) -> str:
        select = f"SELECT {NODE} FROM t JOIN nodes n ON n.key = t.key {NODE_JOINS} ORDER BY n.depth, n.id"
        return self.tree_walk + select

    def tree(self, session_key: int) -> list[Node]:
        return self._nodes(self._tree_sql(), {"s": session_key})

    def tree_stream(self, session_key: int) -> Iterator[Node]:
        return map(node_from_row, self._stream(self._tree_sql(), {"s": session_key}))

    def leaves(self, session_key: int) -> list[Node]:
        return self._nodes(
            self.tree_walk + f"SELECT {NODE} FROM t JOIN nodes n ON n.key = t.key {NODE_JOINS}"
            " WHERE NOT EXISTS (SELECT 1 FROM nodes c WHERE c.parent = n.key) ORDER BY n.id",
            {"s": session_key},
        )

    def pending(self, session_key: int | None = None) -> list[Node]:
        # Driven from the branches: a pause counts only while a branch stands at it.
        return self._nodes(
            f"SELECT {NODE} FROM nodes n {NODE_JOINS}"
            " WHERE n.key IN (SELECT head FROM branches WHERE CAST(:s AS BIGINT) IS NULL OR session = :s)"
            " AND n.kind = 'pause' AND s.trashed_at IS NULL AND NOT EXISTS ("
            " SELECT 1 FROM nodes d WHERE d.parent = n.key AND d.kind = 'decision') ORDER BY n.id",
            {"s": session_key},
        )

    def resumable(self) -> list[ResumablePause]:
        rows = self._rows(
            "SELECT DISTINCT p.id, s.id FROM branches b"
            " JOIN nodes d ON d.key = b.head AND d.kind = 'decision'"
            " JOIN nodes p ON p.key = d.parent JOIN sessions s ON s.key = p.session"
            " WHERE s.trashed_at IS NULL AND NOT EXISTS (SELECT 1 FROM nodes c WHERE c.parent = d.key)"
            " ORDER BY p.id"
        )
        return [ResumablePause(r[0], r[1]) for r in rows]

    def tool_heads(self) -> list[ToolHead]:
        rows = self._rows(TOOL_HEADS.format(is_tool=self.is_tool_message))
        return [ToolHead(int(r[0]), r[1], r[2], r[3]) for r in rows]

    def common_ancestor(self, a: int, b: int) -> Node | None:
        row = self._first(
            f"""
            WITH RECURSIVE
              pa(key, parent) AS (SELECT key, parent FROM nodes WHERE key = :a
                UNION ALL SELECT n.key, n.parent FROM pa JOIN nodes n ON n.key = pa.parent),
              pb(key, parent) AS (SELECT key, parent FROM nodes WHERE key = :b
                UNION ALL SELECT n.key, n.parent FROM pb JOIN nodes n ON n.key = pb.parent)
            SELECT {NODE} FROM nodes n {NODE_JOINS}
            WHERE n.key IN (SELECT key FROM pa INTERSECT SELECT key FROM pb)
            ORDER BY n.depth DESC LIMIT 1
            """,
            {"a": a, "b": b},
        )
        return None if row is None else node_from_row(row)

    def ancestor(self, key: int, generations: int, *, messages_only: bool = False) -> NodeKey | None:
        # k counts the steps that land on a counted node; the walk stops at the one
        # that makes it :n (with messages_only, always a message node).
        step = "CASE WHEN n.kind = 'message' THEN 1 ELSE 0 END" if messages_only else "1"
        row = self._first(
            f"""WITH RECURSIVE up(key, id, parent, k) AS (
                 SELECT key, id, parent, 0 FROM nodes WHERE key = :key
                 UNION ALL SELECT n.key, n.id, n.parent, up.k + {step}
                 FROM up JOIN nodes n ON n.key = up.parent WHERE up.k < :n)
               SELECT key, id FROM up WHERE k = :n""",
            {"key": key, "n": generations},
        )
        return None if row is None else NodeKey(row[0], row[1])

    def is_ancestor(self, ancestor: int, key: int) -> bool:
        found = self._first(
            "WITH RECURSIVE up(key, parent) AS (SELECT key, parent FROM nodes WHERE key = :key"
            " UNION ALL SELECT n.key, n.parent FROM up JOIN nodes n ON n.key = up.parent)"
            " SELECT 1 FROM up WHERE key = :ancestor",
            {"key": key, "ancestor": ancestor},
        )
        return found is not None

    # -- usage ---------------------------------------------------------------------

    def path_usage(self, key: int, after_depth: int = -1) -> Usage:
        return self._usage(
            """WITH RECURSIVE picked(key, parent, depth, run) AS (
                 SELECT key, parent, depth, run FROM nodes WHERE key = :start AND depth > :after
                 UNION ALL SELECT n.key, n.parent, n.depth, n.run
                 FROM picked JOIN nodes n ON n.key = picked.parent WHERE n.depth > :after)""",
            {"start": key, "after": after_depth},
        )

    def subtree_usage(self, key: int) -> Usage:
        return self._usage(
            """WITH RECURSIVE picked(key, run) AS (
                 SELECT key, run FROM nodes WHERE key = :start
                 UNION ALL SELECT n.key, n.run FROM picked JOIN nodes n ON n.parent = picked.key)""",
            {"start": key},
        )

    def _usage(self, picked_cte: str, params: dict[str, Any]) -> Usage:
        # Cache tokens are read from the usage JSON: only Anthropic's runs have them.
        cache_write = self.usage_number.format(name="cache_creation_input_tokens")
        cache_read = self.usage_number.format(name="cache_read_input_tokens")
        rows = self._rows(
            picked_cte
            + f"""
            SELECT coalesce(r.model, '?'), count(*), coalesce(sum(r.input_tokens), 0),
                   coalesce(sum(r.output_tokens), 0), coalesce(sum(r.latency_ms), 0.0),
                   coalesce(sum({cache_write}), 0), coalesce(sum({cache_read}), 0)
            FROM (SELECT DISTINCT run FROM picked WHERE run IS NOT NULL) p
            JOIN runs r ON r.key = p.run
            GROUP BY 1 ORDER BY 1""",
            params,
        )
        return Usage(
            {
                m: ModelUsage(int(calls), int(tin), int(tout), float(ms), int(cw), int(cr))
                for m, calls, tin, tout, ms, cw, cr in rows
            }
        )

    # -- branches, checkpoints, sessions, runs ---------------------------------------

    def branch(self, session_key: int, session_id: str, name: str) -> Branch | None:
        row = self._first(
            _BRANCH + " LEFT JOIN nodes n ON n.key = b.head WHERE b.session = :s AND b.name = :name",
            {"s": session_key, "name": name},
        )
        return None if row is None else _branch(row, session_id)

    def branches(self, session_key: int, session_id: str) -> list[Branch]:
        rows = self._rows(
            _BRANCH + " LEFT JOIN nodes n ON n.key = b.head WHERE b.session = :s ORDER BY b.name",
            {"s": session_key},
        )
        return [_branch(r, session_id) for r in rows]

    def branches_at(self, session_key: int, key: int) -> list[str]:
        rows = self._rows(
            "SELECT name FROM branches WHERE session = :s AND head = :k ORDER BY name",
            {"s": session_key, "k": key},
        )
        return [r[0] for r in rows]

    def checkpoints(self, session_key: int, session_id: str) -> list[Checkpoint]:
        rows = self._rows(
            "SELECT c.name, n.id, c.created_at FROM checkpoints c JOIN nodes n ON n.key = c.node"
            " WHERE c.session = :s ORDER BY c.name",
            {"s": session_key},
        )
        return [Checkpoint(session_id, *r) for r in rows]

    def session_key(self, id: str) -> int | None:
        row = self._first("SELECT key FROM sessions WHERE id = :id", {"id": id})
        return None if row is None else int(row[0])

    def sessions(self, *, include_archived: bool) -> list[SessionInfo]:
        where = "WHERE s.trashed_at IS NULL" + ("" if include_archived else " AND s.archived_at IS NULL")
        rows = self._rows(
            f"""
            SELECT s.id, s.title, s.metadata, s.created_at, s.archived_at, coalesce(c.n, 0), c.last
            FROM sessions s
            LEFT JOIN (SELECT session, count(*) AS n, max(created_at) AS last FROM nodes GROUP BY session) c
              ON c.session = s.key
            {where}
            ORDER BY coalesce(c.last, s.created_at) DESC, s.id DESC
            """
        )
        return [
            SessionInfo(
                id=r[0],
                title=r[1],
                metadata=json.loads(r[2]),
                created_at=r[3],
                archived_at=r[4],
                node_count=int(r[5]),
                last_activity=r[6] or r[3],
            )
            for r in rows
        ]

    def run(self, id: str) -> Run:
        row = self._first(
            f"SELECT r.id, s.id, {_RUN_SELECT} FROM runs r JOIN sessions s ON s.key = r.session"
            " WHERE r.id = :id",
            {"id": id},
        )
        if row is None:
            raise NotFound(f"no run {id!r}")
        return decode_run(row)

    def runs(self, session_key: int) -> list[Run]:
        return [decode_run(r) for r in self._rows(_RUNS, {"s": session_key})]

    def runs_stream(self, session_key: int) -> Iterator[Run]:
        return map(decode_run, self._stream(_RUNS, {"s": session_key}))

    def run_handle(self, id: str) -> RunHandle | None:
        row = self._first(
            "SELECT r.key, s.id FROM runs r JOIN sessions s ON s.key = r.session WHERE r.id = :id", {"id": id}
        )
        return None if row is None else RunHandle(row[0], row[1])
