"""The SQLite backend: every SQL statement of the store, session and maintenance.

Contract: ``SQLiteStorage(path)`` opens (and migrates, see ``db``) one file.
Its methods take and return public ids and model objects (``Node``,
``Branch``, ``Checkpoint``, ``Run``, ``SessionInfo``); the rules (what may
be written, compare-and-set decisions, error wording) live above it, in
``Session`` and ``Store``. Writes must happen inside ``transaction()``; the
methods that need one say so. Integrity errors the schema raises (a second
decision on a pause, a foreign parent, a missing run) come back as
sessiontree errors that name the row.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import sqlite_utils

from .. import db as _db
from ..errors import AmbiguousRef, Conflict, NotFound, ReadOnly
from ..model import Branch, Checkpoint, ModelUsage, Node, Run, SessionInfo, Usage
from ..names import MIN_PREFIX

NODE_COLUMNS = "id, session_id, parent_id, depth, kind, payload, created_at, run_id"
BRANCH_COLUMNS = "session_id, name, head_id, created_at, updated_at, metadata"
RUN_COLUMNS = "id, session_id, model, provider, params, usage, latency_ms, finish_reason, created_at"

_PATH_SQL = f"""
WITH RECURSIVE path({NODE_COLUMNS}) AS (
    SELECT {NODE_COLUMNS} FROM nodes WHERE id = ?
    UNION ALL
    SELECT {", ".join("n." + c.strip() for c in NODE_COLUMNS.split(","))}
    FROM nodes n JOIN path ON n.id = path.parent_id
)
SELECT {NODE_COLUMNS} FROM path ORDER BY depth
"""

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


# (check, detail, query): each query returns (session id, node id, details...).
_INTEGRITY_CHECKS = [
    (
        "parent",
        "node {1} has a missing parent {2}",
        """SELECT c.session_id, c.id, c.parent_id FROM nodes c LEFT JOIN nodes p ON p.id = c.parent_id
        WHERE c.parent_id IS NOT NULL AND p.id IS NULL {scope}""",
    ),
    (
        "parent",
        "node {1} has its parent in another session {2}",
        """SELECT c.session_id, c.id, p.session_id FROM nodes c JOIN nodes p ON p.id = c.parent_id
        WHERE p.session_id != c.session_id {scope}""",
    ),
    (
        "depth",
        "node {1} has depth {2} under a parent of depth {3}",
        """SELECT c.session_id, c.id, c.depth, p.depth FROM nodes c JOIN nodes p ON p.id = c.parent_id
        WHERE c.depth != p.depth + 1 {scope}""",
    ),
    (
        "payload",
        "node {1} has a payload that is not valid JSON",
        "SELECT c.session_id, c.id FROM nodes c WHERE json_valid(c.payload) = 0 {scope}",
    ),
    (
        "ref",
        "branch {2!r} points at {1}, which is not a node of its session",
        """SELECT c.session_id, c.head_id, c.name FROM branches c
        LEFT JOIN nodes n ON n.id = c.head_id AND n.session_id = c.session_id
        WHERE c.head_id IS NOT NULL AND n.id IS NULL {scope}""",
    ),
    (
        "ref",
        "checkpoint {2!r} points at {1}, which is not a node of its session",
        """SELECT c.session_id, c.node_id, c.name FROM checkpoints c
        LEFT JOIN nodes n ON n.id = c.node_id AND n.session_id = c.session_id
        WHERE n.id IS NULL {scope}""",
    ),
]


def _node(row: Sequence[Any]) -> Node:
    return Node(*row)


def _branch(row: Sequence[Any]) -> Branch:
    return Branch(row[0], row[1], row[2], row[3], row[4], json.loads(row[5]))


def _run(row: Sequence[Any]) -> Run:
    return Run(row[0], row[1], row[2], row[3], json.loads(row[4]), json.loads(row[5]), *row[6:])


class SQLiteStorage:
    """One SQLite database file (or ``:memory:``)."""

    def __init__(self, path: str | Path, *, readonly: bool = False) -> None:
        self.path = str(path)
        self.readonly = readonly
        self.conn: sqlite3.Connection = _db.connect(self.path, readonly=readonly)
        # sqlite-utils for schema introspection (and, later, its FTS helpers); no
        # plugins and no pragma changes on a connection that is ours.
        self.db = sqlite_utils.Database(self.conn, recursive_triggers=False, execute_plugins=False)

    def close(self) -> None:
        self.conn.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One atomic write (``BEGIN IMMEDIATE``); nested use makes a savepoint."""
        if self.readonly:
            raise ReadOnly(f"{self.path} is open read-only; nothing was written")
        with _db.transaction(self.conn) as conn:
            yield conn

    @property
    def schema_version(self) -> int:
        return _db.schema_version(self.conn)

    def _one(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> Any:
        row = self.conn.execute(sql, params).fetchone()
        return None if row is None else row[0]

    # -- ids ---------------------------------------------------------------

    def resolve_id(self, table: str, what: str, ref: str, session_id: str | None = None) -> str:
        """The id in ``table`` equal to ``ref``, or the one starting with it (MIN_PREFIX+ chars)."""
        if self._one(f"SELECT 1 FROM {table} WHERE id = ?", (ref,)):
            return ref
        if len(ref) < MIN_PREFIX:
            raise NotFound(f"no {what} {ref!r} (id prefixes need at least {MIN_PREFIX} characters)")
        # A range scan on the primary key: ids are lower-case hex and dashes.
        where, params = ("AND session_id = ?", (session_id,)) if session_id else ("", ())
        rows = self.conn.execute(
            f"SELECT id FROM {table} WHERE id >= ? AND id < ? {where} ORDER BY id LIMIT 2",
            (ref.lower(), ref.lower() + "\uffff", *params),
        ).fetchall()
        if not rows:
            raise NotFound(f"no {what} {ref!r}")
        if len(rows) > 1:
            raise AmbiguousRef(f"{what} prefix {ref!r} is ambiguous: {rows[0][0]}, {rows[1][0]}, ...")
        return str(rows[0][0])

    def neighbours(self, id: str) -> list[str]:
        """The ids next to ``id`` in sorted order among all nodes and sessions."""
        found = []
        for table in ("nodes", "sessions"):
            for sql in (
                f"SELECT max(id) FROM {table} WHERE id < ?",
                f"SELECT min(id) FROM {table} WHERE id > ?",
            ):
                value = self._one(sql, (id,))
                if value is not None:
                    found.append(value)
        return found

    # -- sessions ----------------------------------------------------------

    def insert_session(self, id: str, title: str | None, metadata: str, created_at: str) -> None:
        try:
            self.conn.execute(
                "INSERT INTO sessions (id, title, metadata, created_at) VALUES (?, ?, ?, ?)",
                (id, title, metadata, created_at),
            )
        except sqlite3.IntegrityError:
            raise Conflict(f"session {id} already exists") from None

    def session_row(self, id: str) -> tuple[str, str | None, dict[str, Any], str, str | None]:
        row = self.conn.execute(
            "SELECT id, title, metadata, created_at, archived_at FROM sessions WHERE id = ?", (id,)
        ).fetchone()
        if row is None:
            raise NotFound(f"no session {id!r}")
        return row[0], row[1], json.loads(row[2]), row[3], row[4]

    def sessions(self, *, include_archived: bool) -> list[SessionInfo]:
        where = "" if include_archived else "WHERE s.archived_at IS NULL"
        rows = self.conn.execute(
            f"""
            SELECT s.id, s.title, s.metadata, s.created_at, s.archived_at,
                   (SELECT count(*) FROM nodes n WHERE n.session_id = s.id),
                   (SELECT max(n.created_at) FROM nodes n WHERE n.session_id = s.id)
            FROM sessions s {where}
            ORDER BY s.created_at DESC, s.id DESC
            """
        ).fetchall()
        return [
            SessionInfo(
                id=r[0],
                title=r[1],
                metadata=json.loads(r[2]),
                created_at=r[3],
                archived_at=r[4],
                node_count=r[5],
                last_activity=r[6] or r[3],
            )
            for r in rows
        ]

    def set_archived(self, id: str, when: str | None) -> None:
        self.conn.execute("UPDATE sessions SET archived_at = ? WHERE id = ?", (when, id))

    def delete_session(self, id: str) -> int:
        """Delete a session and everything in it (inside a transaction); the nodes removed."""
        count = self._one("SELECT count(*) FROM nodes WHERE session_id = ?", (id,))
        # Refs first, then nodes (children before parents is not needed: the
        # foreign keys are checked when the statement ends), then runs.
        for table in ("branches", "checkpoints", "nodes", "runs"):
            self.conn.execute(f"DELETE FROM {table} WHERE session_id = ?", (id,))
        self.conn.execute("DELETE FROM sessions WHERE id = ?", (id,))
        return int(count)

    # -- nodes -------------------------------------------------------------

    def node(self, id: str) -> Node:
        row = self.conn.execute(f"SELECT {NODE_COLUMNS} FROM nodes WHERE id = ?", (id,)).fetchone()
        if row is None:
            raise NotFound(f"no node {id!r}")
        return _node(row)

    def node_session(self, id: str) -> str | None:
        """The session a node id belongs to, or None when there is no such node."""
        value = self._one("SELECT session_id FROM nodes WHERE id = ?", (id,))
        return None if value is None else str(value)

    def node_place(self, id: str) -> tuple[int, str]:
        """(depth, kind) of a node."""
        row = self.conn.execute("SELECT depth, kind FROM nodes WHERE id = ?", (id,)).fetchone()
        if row is None:
            raise NotFound(f"no node {id!r}")
        return row[0], row[1]

    def insert_nodes(self, rows: list[tuple[Any, ...]]) -> None:
        """Insert node rows (``NODE_COLUMNS`` order), inside a transaction."""
        try:
            self.conn.executemany(f"INSERT INTO nodes ({NODE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
        except sqlite3.IntegrityError as e:
            session_id, parent_id, run_id = rows[0][1], rows[0][2], rows[0][7]
            if "nodes.parent_id" in str(e):
                raise Conflict(f"pause {parent_id} already has a decision") from None
            if "FOREIGN KEY" in str(e):
                if run_id and not self._one("SELECT 1 FROM runs WHERE id = ?", (run_id,)):
                    raise NotFound(f"no run {run_id!r}") from None
                raise NotFound(f"parent node {parent_id} is not in session {session_id}") from None
            raise

    def children(self, id: str) -> list[Node]:
        rows = self.conn.execute(f"SELECT {NODE_COLUMNS} FROM nodes WHERE parent_id = ? ORDER BY id", (id,))
        return [_node(r) for r in rows]

    def path_to(self, id: str) -> list[Node]:
        """Root-to-node, in one recursive query."""
        return [_node(r) for r in self.conn.execute(_PATH_SQL, (id,))]

    def ancestor(self, id: str, generations: int) -> str | None:
        """The id ``generations`` steps above ``id``, or None past the root."""
        return self._one(
            """WITH RECURSIVE up(id, parent_id, k) AS (
                 SELECT id, parent_id, 0 FROM nodes WHERE id = :id
                 UNION ALL SELECT n.id, n.parent_id, up.k + 1 FROM nodes n JOIN up ON n.id = up.parent_id
                 WHERE up.k < :n)
               SELECT id FROM up WHERE k = :n""",
            {"id": id, "n": generations},
        )

    def tree(self, session_id: str) -> list[Node]:
        rows = self.conn.execute(
            f"SELECT {NODE_COLUMNS} FROM nodes WHERE session_id = ? ORDER BY depth, id", (session_id,)
        )
        return [_node(r) for r in rows]

    def leaves(self, session_id: str) -> list[Node]:
        rows = self.conn.execute(
            f"SELECT {NODE_COLUMNS} FROM nodes n WHERE session_id = ? AND NOT EXISTS"
            " (SELECT 1 FROM nodes c WHERE c.parent_id = n.id) ORDER BY id",
            (session_id,),
        )
        return [_node(r) for r in rows]

    def pending(self, session_id: str | None = None) -> list[Node]:
        """Pauses without a decision, oldest first."""
        rows = self.conn.execute(
            f"""
            SELECT {NODE_COLUMNS} FROM nodes p
            WHERE p.kind = 'pause' AND (:s IS NULL OR p.session_id = :s) AND NOT EXISTS (
                SELECT 1 FROM nodes d WHERE d.parent_id = p.id AND d.kind = 'decision')
            ORDER BY p.id
            """,
            {"s": session_id},
        )
        return [_node(r) for r in rows]

    def common_ancestor(self, a: str, b: str) -> Node | None:
        row = self.conn.execute(
            f"""
            WITH RECURSIVE
              pa(id, parent_id) AS (SELECT id, parent_id FROM nodes WHERE id = :a
                UNION ALL SELECT n.id, n.parent_id FROM nodes n JOIN pa ON n.id = pa.parent_id),
              pb(id, parent_id) AS (SELECT id, parent_id FROM nodes WHERE id = :b
                UNION ALL SELECT n.id, n.parent_id FROM nodes n JOIN pb ON n.id = pb.parent_id)
            SELECT {NODE_COLUMNS} FROM nodes
            WHERE id IN (SELECT id FROM pa INTERSECT SELECT id FROM pb)
            ORDER BY depth DESC LIMIT 1
            """,
            {"a": a, "b": b},
        ).fetchone()
        return None if row is None else _node(row)

    # -- usage ---------------------------------------------------------------

    def path_usage(self, id: str, after_depth: int = -1) -> Usage:
        """Model calls on the path to ``id``, counting only nodes deeper than ``after_depth``."""
        return self._usage(
            """WITH RECURSIVE picked(id, parent_id, depth, run_id) AS (
                 SELECT id, parent_id, depth, run_id FROM nodes WHERE id = :start AND depth > :after
                 UNION ALL SELECT n.id, n.parent_id, n.depth, n.run_id
                 FROM nodes n JOIN picked ON n.id = picked.parent_id WHERE n.depth > :after)""",
            {"start": id, "after": after_depth},
        )

    def subtree_usage(self, id: str) -> Usage:
        """Model calls in ``id`` and everything below it."""
        return self._usage(
            """WITH RECURSIVE picked(id, run_id) AS (
                 SELECT id, run_id FROM nodes WHERE id = :start
                 UNION ALL SELECT n.id, n.run_id FROM nodes n JOIN picked ON n.parent_id = picked.id)""",
            {"start": id},
        )

    def _usage(self, picked_cte: str, params: dict[str, Any]) -> Usage:
        rows = self.conn.execute(
            picked_cte
            + """
            SELECT coalesce(r.model, '?'), count(*), coalesce(sum(r.input_tokens), 0),
                   coalesce(sum(r.output_tokens), 0), coalesce(sum(r.latency_ms), 0.0)
            FROM (SELECT DISTINCT run_id FROM picked WHERE run_id IS NOT NULL) p
            JOIN runs r ON r.id = p.run_id
            GROUP BY 1 ORDER BY 1""",
            params,
        ).fetchall()
        return Usage(
            {model: ModelUsage(calls, tin, tout, latency) for model, calls, tin, tout, latency in rows}
        )

    # -- branches and checkpoints -------------------------------------------

    def ref(self, session_id: str, name: str) -> tuple[str, str | None] | None:
        """("branch" | "checkpoint", node id) for a name in a session, or None."""
        row = self.conn.execute(
            "SELECT 'branch', head_id FROM branches WHERE session_id = ? AND name = ?"
            " UNION ALL SELECT 'checkpoint', node_id FROM checkpoints WHERE session_id = ? AND name = ?",
            (session_id, name, session_id, name),
        ).fetchone()
        return None if row is None else (row[0], row[1])

    def branch_head(self, session_id: str, name: str) -> tuple[str | None, int | None, str | None] | None:
        """(head id, head depth, head kind) of a branch, or None when there is no such branch."""
        row = self.conn.execute(
            "SELECT b.head_id, n.depth, n.kind FROM branches b LEFT JOIN nodes n ON n.id = b.head_id"
            " WHERE b.session_id = ? AND b.name = ?",
            (session_id, name),
        ).fetchone()
        return None if row is None else (row[0], row[1], row[2])

    def branch(self, session_id: str, name: str) -> Branch | None:
        row = self.conn.execute(
            f"SELECT {BRANCH_COLUMNS} FROM branches WHERE session_id = ? AND name = ?", (session_id, name)
        ).fetchone()
        return None if row is None else _branch(row)

    def branches(self, session_id: str) -> list[Branch]:
        rows = self.conn.execute(
            f"SELECT {BRANCH_COLUMNS} FROM branches WHERE session_id = ? ORDER BY name", (session_id,)
        )
        return [_branch(r) for r in rows]

    def insert_branch(
        self, session_id: str, name: str, head_id: str | None, metadata: str, when: str
    ) -> None:
        self.conn.execute(
            "INSERT INTO branches (session_id, name, head_id, metadata, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (session_id, name, head_id, metadata, when, when),
        )

    def set_head(self, session_id: str, name: str, head_id: str | None, when: str) -> None:
        self.conn.execute(
            "UPDATE branches SET head_id = ?, updated_at = ? WHERE session_id = ? AND name = ?",
            (head_id, when, session_id, name),
        )

    def rename_branch(self, session_id: str, old: str, new: str, when: str) -> None:
        self.conn.execute(
            "UPDATE branches SET name = ?, updated_at = ? WHERE session_id = ? AND name = ?",
            (new, when, session_id, old),
        )

    def delete_branch(self, session_id: str, name: str) -> None:
        self.conn.execute("DELETE FROM branches WHERE session_id = ? AND name = ?", (session_id, name))

    def checkpoints(self, session_id: str) -> list[Checkpoint]:
        rows = self.conn.execute(
            "SELECT session_id, name, node_id, created_at FROM checkpoints"
            " WHERE session_id = ? ORDER BY name",
            (session_id,),
        )
        return [Checkpoint(*r) for r in rows]

    def insert_checkpoint(self, session_id: str, name: str, node_id: str, when: str) -> None:
        self.conn.execute(
            "INSERT INTO checkpoints (session_id, name, node_id, created_at) VALUES (?, ?, ?, ?)",
            (session_id, name, node_id, when),
        )

    def delete_checkpoint(self, session_id: str, name: str) -> bool:
        """Whether a checkpoint of that name was there to delete."""
        cursor = self.conn.execute(
            "DELETE FROM checkpoints WHERE session_id = ? AND name = ?", (session_id, name)
        )
        return cursor.rowcount > 0

    # -- runs ----------------------------------------------------------------

    def insert_run(self, row: tuple[Any, ...]) -> None:
        """Insert a run row (``RUN_COLUMNS`` order), inside a transaction."""
        self.conn.execute(f"INSERT INTO runs ({RUN_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", row)

    def run(self, id: str) -> Run:
        row = self.conn.execute(f"SELECT {RUN_COLUMNS} FROM runs WHERE id = ?", (id,)).fetchone()
        if row is None:
            raise NotFound(f"no run {id!r}")
        return _run(row)

    # -- maintenance -----------------------------------------------------------

    def unreachable(self, session_id: str | None, *, delete: bool) -> tuple[list[str], list[str]]:
        """(node ids, run ids) no branch, checkpoint or unresolved pause reaches; with
        ``delete``, remove them (inside a transaction)."""
        scope = "" if session_id is None else "AND session_id = :s"
        params: dict[str, Any] = {"s": session_id}
        reached = _REACHED.format(scope_b=scope, scope_p=scope.replace("session_id", "p.session_id"))
        # A dry run only reads, so it also works on a read-only store.
        with self.transaction() if delete else nullcontext(self.conn) as conn:
            node_ids = [
                r[0]
                for r in conn.execute(
                    reached + f"SELECT id FROM nodes WHERE id NOT IN (SELECT id FROM reached) {scope}"
                    " ORDER BY id",
                    params,
                )
            ]
            n_scope = scope.replace("session_id", "n.session_id")
            run_ids = [
                r[0]
                for r in conn.execute(
                    reached
                    + f"""
                    SELECT DISTINCT n.run_id FROM nodes n
                    WHERE n.run_id IS NOT NULL AND n.id NOT IN (SELECT id FROM reached) {n_scope}
                      AND NOT EXISTS (SELECT 1 FROM nodes k JOIN reached r ON r.id = k.id
                                      WHERE k.run_id = n.run_id)
                    ORDER BY n.run_id""",
                    params,
                )
            ]
            if delete and node_ids:
                conn.execute("CREATE TEMP TABLE IF NOT EXISTS prune_ids (id TEXT PRIMARY KEY)")
                conn.execute("DELETE FROM prune_ids")
                conn.executemany("INSERT INTO prune_ids VALUES (?)", ((i,) for i in node_ids))
                conn.execute("DELETE FROM nodes WHERE id IN (SELECT id FROM prune_ids)")
                conn.executemany("DELETE FROM runs WHERE id = ?", ((i,) for i in run_ids))
                conn.execute("DELETE FROM prune_ids")
        return node_ids, run_ids

    def vacuum(self) -> int | None:
        """Compact the file; the bytes freed (None for an in-memory database)."""
        if self.path == ":memory:":
            return None
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        before = os.path.getsize(self.path)
        self.conn.execute("VACUUM")
        # In WAL mode VACUUM writes the new pages to the log; fold them back in.
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return before - os.path.getsize(self.path)

    def integrity_problems(self, session_id: str | None) -> list[tuple[str, str, str, str | None]]:
        """(session id, check, detail, node id) for every row that breaks a tree invariant."""
        scope = "" if session_id is None else "AND c.session_id = :s"
        problems: list[tuple[str, str, str, str | None]] = []
        if session_id is None:
            problems += [
                ("", "sqlite", m, None) for (m,) in self.conn.execute("PRAGMA quick_check") if m != "ok"
            ]
        for check, detail, sql in _INTEGRITY_CHECKS:
            for row in self.conn.execute(sql.format(scope=scope), {"s": session_id}):
                problems.append((row[0], check, detail.format(*row), row[1]))
        return problems

    def branch_heads(self, session_id: str | None) -> list[tuple[str, str, str]]:
        """(session id, branch name, head id) of every non-empty branch whose head exists."""
        rows = self.conn.execute(
            "SELECT b.session_id, b.name, b.head_id FROM branches b JOIN nodes n ON n.id = b.head_id"
            " WHERE :s IS NULL OR b.session_id = :s ORDER BY b.session_id, b.name",
            {"s": session_id},
        )
        return [(r[0], r[1], r[2]) for r in rows]

    def counts(self, session_id: str | None) -> tuple[int, int]:
        """(sessions, nodes), in one session or in all."""
        row = self.conn.execute(
            "SELECT (SELECT count(*) FROM sessions WHERE :s IS NULL OR id = :s),"
            " (SELECT count(*) FROM nodes WHERE :s IS NULL OR session_id = :s)",
            {"s": session_id},
        ).fetchone()
        return row[0], row[1]

    def stats(self) -> dict[str, Any]:
        """Counts, sizes, tables and per-model token usage of the whole database."""
        q = self.conn.execute
        files = [self.path, self.path + "-wal"] if self.path != ":memory:" else []
        # sqlite-utils introspects the schema: every table with its row count.
        tables = {t.name: t.count for t in self.db.tables}
        return {
            "file": self.path,
            "bytes": sum(os.path.getsize(f) for f in files if os.path.exists(f)),
            "schema_version": self.schema_version,
            "sessions": tables.get("sessions", 0),
            "nodes": dict(q("SELECT kind, count(*) FROM nodes GROUP BY kind ORDER BY kind").fetchall()),
            "branches": tables.get("branches", 0),
            "checkpoints": tables.get("checkpoints", 0),
            "pending": len(self.pending()),
            "payload_bytes": q(
                "SELECT coalesce(sum(length(CAST(payload AS BLOB))), 0) FROM nodes"
            ).fetchone()[0],
            "tables": tables,
            "models": [
                {"model": m, "runs": n, "input_tokens": i or 0, "output_tokens": o or 0}
                for m, n, i, o in q(
                    "SELECT coalesce(model, '?'), count(*), sum(input_tokens), sum(output_tokens)"
                    " FROM runs GROUP BY 1 ORDER BY 2 DESC, 1"
                )
            ],
        }

    def backup(self, destination: str) -> int:
        """A consistent, compacted copy (VACUUM INTO) at a new path; its size in bytes."""
        if os.path.exists(destination):
            raise Conflict(f"{destination} already exists; choose a new file")
        self.conn.execute("VACUUM INTO ?", (destination,))
        return os.path.getsize(destination)
