"""The PostgreSQL backend's upkeep part: prune, verify, stats, vacuum (and why no backup).

Contract: ``PostgresUpkeep(storage)`` is ``storage.upkeep`` of a
``PostgresStorage`` (``upkeep.Upkeep``), reaching the server through the
backend's public helpers (``hosts.PostgresHost``), the twin of
``sqlite_upkeep``: the same answers from the same rows. It has no ``backup``
(pg_dump makes one) and no ``sql`` (psql runs it): both are None. A prune
that deletes takes the store lock exclusively, so no writer is half-way
through pointing at what it removes.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from ..model import Problem
from . import postgres_db as pgdb
from . import shared_sql
from .hosts import PostgresHost
from .rows import BranchTip, Counts, NodeKey, Unreachable
from .shared_sql import for_postgres
from .upkeep import Upkeep

TREE = "WITH t(key) AS (SELECT key FROM sessiontree_tree(:s))\n"
"""``shared_sql.TREE`` with its plan pinned (schema step 12), as the same ``t(key)``; in
SQLite's parameter style, as ``SharedReads`` writes its statements."""

TABLES = ("sessions", "runs", "nodes", "branches", "checkpoints")


class PostgresUpkeep(Upkeep):
    """Maintenance queries of one PostgreSQL store; no ``backup`` or ``sql`` of its own."""

    no_backup = (
        "{url} is a PostgreSQL store: back it up with pg_dump, or copy it into a new"
        " SQLite file with `sessiontree copy {url} {destination}`"
    )
    no_sql = "sql reads SQLite files; for a PostgreSQL store use psql on its schema"

    def __init__(self, storage: PostgresHost) -> None:
        self.storage = storage

    def unreachable(self, session_key: int | None, *, delete: bool, cutoff: str = "") -> Unreachable:
        with self.storage.transaction() if delete else self.storage.snapshot():
            if delete:  # writers finish first, and none starts until the prune commits
                self.storage.fetch_value(
                    "SELECT pg_advisory_xact_lock(%s, %s)", (self.storage.lock_class, pgdb.STORE_LOCK)
                )
            query = shared_sql.REACHED + ", " + shared_sql.PRUNE_SCOPE[session_key is None]
            gone = self.storage.fetch_all(
                for_postgres(query + shared_sql.UNREACHABLE), {"s": session_key, "cutoff": cutoff or "9999"}
            )
            dying_runs = {run: run_id for _, _, run, run_id in gone if run is not None}
            if delete and gone:
                self.storage.write("DELETE FROM nodes WHERE key = ANY(%s)", ([key for key, _, _, _ in gone],))
                self.storage.write("DELETE FROM runs WHERE key = ANY(%s)", (list(dying_runs),))
                self.storage.cache.clear()
        return Unreachable([node_id for _, node_id, _, _ in gone], sorted(dying_runs.values()))

    def vacuum(self) -> int | None:
        """VACUUM ANALYZE sessiontree's tables; PostgreSQL keeps the space for reuse, so the
        bytes freed are not known (None)."""
        for table in TABLES:  # with its schema: behind PgBouncer no search_path outlives a statement
            name = sql.Identifier(self.storage.target.schema, table)
            self._all_autocommit(sql.SQL("VACUUM (ANALYZE) {}").format(name))
        return None

    def _all_autocommit(self, query: Any) -> None:
        with (
            pgdb.clear_errors(self.storage.url),
            psycopg.connect(self.storage.target.conninfo, autocommit=True) as conn,
        ):
            pgdb.configure(conn, self.storage.target.schema, readonly=False)
            conn.execute(query)

    def integrity_problems(self, session_key: int | None) -> list[Problem]:
        scope = "" if session_key is None else shared_sql.INTEGRITY_SCOPE
        problems: list[Problem] = []
        for check, detail, sql_text in shared_sql.INTEGRITY_CHECKS:
            query = sql_text.format(scope=scope, bad_json="NOT sessiontree_json_valid(c.payload)")
            for row in self.storage.fetch_all(for_postgres(query), {"s": session_key}):
                node_id = row[1] if check in ("parent", "depth", "payload") else None
                problems.append(Problem(row[0], check, detail.format(*row), node_id))
        return problems

    def branch_heads(self, session_key: int | None) -> list[BranchTip]:
        rows = self.storage.fetch_all(for_postgres(shared_sql.BRANCH_HEADS), {"s": session_key})
        return [BranchTip(r[0], r[1], NodeKey(r[2], r[3])) for r in rows]

    def counts(self, session_key: int | None) -> Counts:
        if session_key is None:
            return Counts(
                int(self.storage.fetch_value("SELECT count(*) FROM sessions")),
                int(self.storage.fetch_value("SELECT count(*) FROM nodes")),
            )
        return Counts(
            1,
            int(self.storage.fetch_value(for_postgres(TREE) + "SELECT count(*) FROM t", {"s": session_key})),
        )

    def stats(self) -> dict[str, Any]:
        tables = {
            name: int(
                self.storage.fetch_value(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(name)))
            )
            for name in TABLES
        }
        size = self.storage.fetch_value(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c"
            " JOIN pg_namespace ns ON ns.oid = c.relnamespace WHERE ns.nspname = %s AND c.relkind = 'r'",
            (self.storage.target.schema,),
        )
        return {
            "file": self.storage.url,
            "bytes": int(size),
            "schema_version": self.storage.schema_version,
            "sessions": tables["sessions"],
            "nodes": {
                k: int(n)
                for k, n in self.storage.fetch_all(
                    "SELECT kind, count(*) FROM nodes GROUP BY kind ORDER BY kind"
                )
            },
            "branches": tables["branches"],
            "checkpoints": tables["checkpoints"],
            "pending": len(self.storage.pending()),
            "payload_bytes": int(
                self.storage.fetch_value("SELECT coalesce(sum(octet_length(payload)), 0) FROM nodes")
            ),
            "tables": tables,
            "models": [
                {"model": m, "runs": int(n), "input_tokens": int(i or 0), "output_tokens": int(o or 0)}
                for m, n, i, o in self.storage.fetch_all(
                    "SELECT coalesce(model, '?'), count(*), sum(input_tokens), sum(output_tokens)"
                    " FROM runs GROUP BY 1 ORDER BY 2 DESC, 1"
                )
            ],
        }
