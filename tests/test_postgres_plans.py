"""Plans that stay right on a PostgreSQL store that fills fast, without ``ANALYZE``.

psycopg prepares a statement on the server once a connection has run it five times, and
the server may then keep a generic plan it chose while ``nodes`` was tiny (a sequential
scan, cheap on three pages). Kept on a long-lived connection while the table grows, that
plan made every step of a path walk scan the whole table: a cold read at depth 2,100 of
a 20,000-node store took 8.8 s, against 23 ms once the table was analyzed. These tests
fill a fresh schema with autovacuum off for ``nodes`` and look at the plan the store's
own connection runs for its prepared path and tree statements.
"""

from __future__ import annotations

from typing import Any

import pytest

from sessiontree import Store

from conftest import raw, user, without_pgbouncer

DEEP = 2_100
TOTAL = 20_000


def prepared_plan(store: Store, fragment: str, params: str) -> str:
    """EXPLAIN of the statement psycopg prepared on the store's one connection whose text
    holds ``fragment``, executed with ``params`` (SQL literals)."""
    with store.storage.pool.connection() as conn:  # type: ignore[attr-defined]
        names = [
            name
            for name, statement in conn.execute("SELECT name, statement FROM pg_prepared_statements")
            if fragment in statement
        ]
        assert names, f"no prepared statement holds {fragment!r}"
        rows: list[Any] = conn.execute(f"EXPLAIN EXECUTE {names[0]}({params})").fetchall()
    return "\n".join(r[0] for r in rows)


def nested_plans(store: Store, statement: str) -> list[str]:
    """The plans of every statement ``statement`` runs, its functions' bodies included
    (auto_explain, sent back as notices: the test server's role is a superuser)."""
    plans: list[str] = []
    with store.storage.pool.connection() as conn:  # type: ignore[attr-defined]
        conn.add_notice_handler(lambda notice: plans.append(notice.message_primary or ""))
        conn.execute(
            "LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0;"
            " SET auto_explain.log_nested_statements = on; SET auto_explain.log_level = notice"
        )
        try:
            conn.execute(statement)
        finally:
            conn.execute("SET auto_explain.log_min_duration = -1")
    return [p for p in plans if "sessiontree_" not in p.split("\n", 1)[0]]


@pytest.mark.slow
@without_pgbouncer(
    "the store prepares no statement on the server (prepare_threshold none): no prepared plan can go stale"
)
def test_a_store_filled_fast_without_analyze_keeps_reading_paths_by_index(pg_url):
    with Store(pg_url + "&pool_size=1", cache_bytes=0) as store:
        raw(store, "ALTER TABLE nodes SET (autovacuum_enabled = false)")
        deep = store.create_session("deep")
        deep.append_many([user(f"turn {i}") for i in range(3)])
        for _ in range(10):  # prepared, and planned, while the table is tiny
            deep.messages("main")
            deep.tree()
        while len(deep.path("main")) < DEEP:
            deep.append_many([user("a few words of prose " * 20)] * 300)
        wide = store.create_session("wide")
        while raw(store, "SELECT count(*) FROM nodes")[0][0] < TOTAL:
            wide.append_many([user("more words of prose " * 20)] * 500)
        assert (
            raw(
                store,
                "SELECT reltuples FROM pg_class WHERE relname = 'nodes' AND relnamespace = "
                "current_schema()::regnamespace",
            )[0][0]
            < 0
        )  # never analyzed

        ((head, session_key),) = raw(
            store,
            "SELECT b.head, b.session FROM branches b JOIN sessions s ON s.key = b.session WHERE s.id = ?",
            (deep.id,),
        )
        # What the store's long-lived connection runs: the walks, and its own joins by key.
        path = prepared_plan(store, "sessiontree_ref_walk(", f"{session_key}, 'main', '{{}}', true")
        tree = prepared_plan(store, "ORDER BY n.depth, n.id", f"{session_key}")
        for plan in (path, tree):
            assert "Seq Scan on nodes" not in plan and "Hash Join" not in plan, plan
        # What the walks themselves run, planned by this new connection and kept.
        for call in (
            f"sessiontree_ref_walk({session_key}, 'main', '{{}}', true)",
            f"sessiontree_path({head}, '{{}}')",
            f"sessiontree_tree({session_key})",
        ):
            plans = nested_plans(store, f"SELECT count(*) FROM {call}")
            assert plans and "Index Scan" in plans[0], plans
            assert not any("Seq Scan on nodes" in p or "Hash Join" in p for p in plans), plans
