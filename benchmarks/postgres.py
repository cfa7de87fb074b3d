"""sessiontree on PostgreSQL beside raw psycopg on the same server, in the same run.

The baseline is the floor schema of ``floor.py`` written for PostgreSQL with psycopg 3
and nothing else: ``nodes(id bigserial, parent_id bigint, payload text)`` with an index
on ``parent_id``, ``heads(name primary key, node_id)``; an append is one transaction
(insert, head upsert); a read is one recursive CTE from the head plus ``json.loads``;
a fork is one ``heads`` row. No ids, no compare-and-set, no locks, no validation.

Printed: medians of ``--repeat`` timings and sessiontree ÷ baseline for one append, a
path read at depth 1,000 and 10,000 (with the path cache off, so every read walks the
path), a fork; then appends per second with 1, 4 and 8 writer processes (each its
own session, its own pool over TCP), as a ratio to one writer.

``--plans`` instead fills two fresh schemas alike with 20,000 nodes (one session a
chain of 2,100, autovacuum off), analyzes one, and times cold path reads at depth 2,000
and tree reads of that session in both, interleaved: the ratio is what a store that
fills faster than autovacuum pays for statistics it does not have yet.
``--round-trips`` instead counts the round trips of each operation on the wire, through
``tests/pg_proxy.py``, and times it there with the proxy adding D = 0 and 1 ms to every
round trip (medians of ``--repeat`` × 20; the proxy's own cost is in the D = 0 row).
``--storage`` instead writes 200 turns of ``peers.py``'s shape with prose-like text
(pseudo-words drawn Zipf-like from 5,000, seeded) and prints the bytes on the server
per message (every table, indexes and TOAST included, after VACUUM, less the empty
schema): at schema step 11 (two search indexes), now, and with the index off.

    python benchmarks/postgres.py [--repeat 5] [--seconds 3]
    python benchmarks/postgres.py --plans [--repeat 15]
    python benchmarks/postgres.py --storage
    python benchmarks/postgres.py --round-trips [--repeat 5]

Uses ``SESSIONTREE_TEST_POSTGRES`` when set, else starts a throwaway cluster
(``tests/pg_cluster.py``).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from peers import chat_turn  # noqa: E402

import pg_cluster  # noqa: E402
from sessiontree import Store  # noqa: E402

MESSAGE = {"role": "user", "content": "x" * 1000}
CTX = multiprocessing.get_context("spawn")


class RawFloor:
    def __init__(self, server: str) -> None:
        self.schema = f"floor_{uuid.uuid4().hex[:8]}"
        self.conn = psycopg.connect(server, autocommit=True)
        self.conn.execute(f"CREATE SCHEMA {self.schema}; SET search_path TO {self.schema}")
        self.conn.execute(
            "CREATE TABLE nodes (id bigserial PRIMARY KEY, parent_id bigint, payload text);"
            " CREATE INDEX nodes_parent ON nodes(parent_id);"
            " CREATE TABLE heads (name text PRIMARY KEY, node_id bigint)"
        )
        self.head: int | None = None

    def append(self, name: str, payload: dict[str, Any]) -> None:
        with self.conn.transaction():
            row = self.conn.execute(
                "INSERT INTO nodes (parent_id, payload) VALUES (%s, %s) RETURNING id",
                (self.head, json.dumps(payload)),
            ).fetchone()
            assert row is not None
            self.head = row[0]
            self.conn.execute(
                "INSERT INTO heads VALUES (%s, %s)"
                " ON CONFLICT (name) DO UPDATE SET node_id = excluded.node_id",
                (name, self.head),
            )

    def read(self, name: str) -> list[dict[str, Any]]:
        rows = self.conn.execute(
            "WITH RECURSIVE p(id, parent_id, payload, depth) AS ("
            " SELECT id, parent_id, payload, 0 FROM nodes"
            " WHERE id = (SELECT node_id FROM heads WHERE name = %s)"
            " UNION ALL SELECT n.id, n.parent_id, n.payload, p.depth + 1"
            " FROM nodes n JOIN p ON n.id = p.parent_id)"
            " SELECT payload FROM p ORDER BY depth DESC",
            (name,),
        ).fetchall()
        return [json.loads(r[0]) for r in rows]

    def fork(self, name: str, at: str) -> None:
        self.conn.execute("INSERT INTO heads SELECT %s, node_id FROM heads WHERE name = %s", (name, at))

    def close(self) -> None:
        self.conn.execute(f"DROP SCHEMA {self.schema} CASCADE")
        self.conn.close()


def timed(fn: Any, repeat: int, inner: int = 1) -> float:
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        runs.append((time.perf_counter() - start) / inner)
    return statistics.median(runs)


def writer(url: str, seconds: float, start: Any, out: Any) -> None:
    with Store(url) as store:
        session = store.create_session("writer")
        start.wait(60)
        n, deadline = 0, time.monotonic() + seconds
        while time.monotonic() < deadline:
            session.append(MESSAGE, branch="main")
            n += 1
        out.put(n)


def throughput(url: str, processes: int, seconds: float) -> float:
    start, out = CTX.Event(), CTX.Queue()
    procs = [CTX.Process(target=writer, args=(url, seconds, start, out)) for _ in range(processes)]
    for p in procs:
        p.start()
    time.sleep(1.5)  # interpreters up, stores open
    start.set()
    total = sum(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(30)
    return total / seconds


def fill_for_plans(url: str, analyze: bool) -> tuple[Store, str]:
    """A fresh store of 20,000 nodes, one session a chain of 2,100; (store, its id)."""
    store = Store(url, cache_bytes=0)
    with store.storage.pool.connection() as conn:  # type: ignore[attr-defined]
        conn.execute("ALTER TABLE nodes SET (autovacuum_enabled = false)")
    deep = store.create_session("deep")
    deep.append(MESSAGE)
    for _ in range(10):  # long-lived connections prepare their statements while it is tiny
        deep.messages("main")
        deep.tree()
    while len(deep.path("main")) < 2_100:
        deep.append_many([MESSAGE] * 300)
    wide = store.create_session("wide")
    for _ in range(60):
        wide.append_many([MESSAGE] * 300)
    if analyze:
        with store.storage.pool.connection() as conn:  # type: ignore[attr-defined]
            conn.execute("ANALYZE nodes")
    return store, deep.id


def plans(server: str, repeat: int) -> None:
    urls = [f"{server}?schema=bench_{uuid.uuid4().hex[:8]}" for _ in range(2)]
    (bare, bare_id), (analyzed, analyzed_id) = fill_for_plans(urls[0], False), fill_for_plans(urls[1], True)
    cells = {
        "path at depth 2,000 (cache off)": (
            lambda: bare.session(bare_id).messages("main~100"),
            lambda: analyzed.session(analyzed_id).messages("main~100"),
        ),
        "tree of the 2,100-node session": (
            lambda: bare.session(bare_id).tree(),
            lambda: analyzed.session(analyzed_id).tree(),
        ),
    }
    print(f"20,000 nodes, never analyzed vs analyzed; medians of {repeat}, interleaved")
    for name, (without, with_stats) in cells.items():
        a, b = [], []
        for _ in range(repeat):
            a.append(timed(without, 1))
            b.append(timed(with_stats, 1))
        x, y = statistics.median(a), statistics.median(b)
        print(f"{name:34} {x * 1000:8.1f} ms  {y * 1000:8.1f} ms  {x / y:5.2f}x")
    for store, url in ((bare, urls[0]), (analyzed, urls[1])):
        store.close()
        drop(server, url)


def prose(rng: Any, words: list[str], weights: list[float], size: int = 1000) -> str:
    out, length = [], 0
    while length < size:
        word = rng.choices(words, weights)[0]
        out.append(word)
        length += len(word) + 1
    return " ".join(out)[:size]


def storage_bytes(server: str) -> None:
    import random

    from sessiontree import db
    from sessiontree.storage import postgres_db

    rng = random.Random(15)
    letters = "etaoinshrdlucmfwypvbgkqjxz"
    words = sorted({"".join(rng.choices(letters, k=rng.randint(2, 10))) for _ in range(5_500)})[:5_000]
    rng.shuffle(words)
    weights = [1 / (rank + 1) for rank in range(len(words))]
    turns = 200
    every_step, every_pg_step = db.migrations, postgres_db.steps
    all_steps, all_pg_steps = db.migrations(), postgres_db.steps()

    def per_message(label: str, step: int | None, index: bool) -> None:
        url = f"{server}?schema=bench_{uuid.uuid4().hex[:8]}"
        if step is not None:  # a store as that schema step made it
            db.migrations = lambda: all_steps[:step]  # type: ignore[assignment]
            postgres_db.steps = lambda: [s for s in all_pg_steps if s.version <= step]  # type: ignore[assignment]
        try:
            store = Store(url)
            if not index:
                store.set_search_index(False)
            with psycopg.connect(server, autocommit=True) as conn:
                schema = url.partition("?schema=")[2]
                total = (
                    "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c"
                    " JOIN pg_namespace ns ON ns.oid = c.relnamespace"
                    " WHERE ns.nspname = %s AND c.relkind = 'r'"
                )
                empty = conn.execute(total, (schema,)).fetchone()[0]  # type: ignore[index]
                session = store.create_session("prose")
                for turn in range(turns):
                    messages = json.loads(json.dumps(chat_turn(turn)))
                    for m in messages:
                        if isinstance(m.get("content"), str):
                            m["content"] = prose(rng, words, weights)
                    args = json.loads(messages[1]["tool_calls"][0]["function"]["arguments"])
                    args["query"] = prose(rng, words, weights)
                    messages[1]["tool_calls"][0]["function"]["arguments"] = json.dumps(args)
                    session.append_many(messages)
                conn.execute(f"SET search_path TO {schema}")
                for table in ("nodes", "branches", "sessions", "runs"):
                    conn.execute(f"VACUUM {table}")
                full = conn.execute(total, (schema,)).fetchone()[0]  # type: ignore[index]
            store.close()
            print(f"{label:44} {(full - empty) / (turns * 4):8,.0f} bytes per message")
        finally:
            db.migrations, postgres_db.steps = every_step, every_pg_step  # type: ignore[assignment]
            drop(server, url)

    print(f"{turns} turns of 4 messages, prose-like text (~1 KB a message)")
    per_message("schema step 11 (two search indexes)", 11, True)
    per_message("now (one search index)", None, True)
    per_message("now, search index off", None, False)


def round_trips(server: str, repeat: int) -> None:
    from pg_proxy import DroppingProxy

    turn = [{"role": "user", "content": "x" * 1000}, {"role": "assistant", "content": "y" * 1000}] * 2
    print(f"round trips on the wire and ms per operation through a proxy; medians of {repeat} x 20")
    print(f"{'operation':34} {'round trips':>11} {'D = 0':>9} {'D = 1 ms':>9}")
    results: dict[str, list[Any]] = {}
    for delay in (0.0, 0.0005):
        proxy = DroppingProxy(server, delay=delay)
        schema = f"bench_{uuid.uuid4().hex[:8]}"
        url = proxy.url(schema) + "&pool_size=1"
        with Store(url) as store, Store(url, cache_bytes=0) as cold:
            session = store.create_session("trips")
            session.append_many(turn * 25)  # a conversation of 100 messages
            other = cold.session(session.id)
            counter = iter(range(10**6))
            ops = {
                "read, answered by the cache": lambda: session.messages("main"),  # noqa: B023
                "read, cache off (100 messages)": lambda: other.messages("main"),  # noqa: B023
                "append one message": lambda: session.append(MESSAGE),  # noqa: B023
                "append a turn (4 messages)": lambda: session.append_many(turn),  # noqa: B023
                "fork": lambda: session.fork(f"fork{next(counter)}", at="main"),  # noqa: B023
            }
            for name, op in ops.items():
                op()
                op()  # prepared, and the redaction count just looked at
                proxy.counted()
                op()
                trips = proxy.counted()
                results.setdefault(name, [trips]).append(timed(op, repeat, 20))
        proxy.stop()
        drop(server, f"{server}?schema={schema}")
    for name, (trips, at_0, at_1) in results.items():
        print(f"{name:34} {trips:>11} {at_0 * 1000:8.2f}  {at_1 * 1000:8.2f}")


def drop(server: str, url: str) -> None:
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {url.partition('?schema=')[2]} CASCADE")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--plans", action="store_true", help="plans without ANALYZE (see the docstring)")
    parser.add_argument("--storage", action="store_true", help="bytes per message (see the docstring)")
    parser.add_argument("--round-trips", action="store_true", help="round trips per operation")
    args = parser.parse_args()
    server, why = pg_cluster.server_url()
    if server is None:
        raise SystemExit(why)
    if args.plans:
        plans(server, args.repeat)
        return
    if args.storage:
        storage_bytes(server)
        return
    if args.round_trips:
        round_trips(server, args.repeat)
        return
    url = f"{server}?schema=bench_{uuid.uuid4().hex[:8]}"
    store, floor = Store(url), RawFloor(server)
    session = store.create_session("bench")
    print(f"PostgreSQL at {server}; medians of {args.repeat}; sessiontree ÷ raw psycopg floor")
    rows = []

    ours = timed(lambda: session.append(MESSAGE, branch="main"), args.repeat, 200)
    theirs = timed(lambda: floor.append("main", MESSAGE), args.repeat, 200)
    rows.append(("one append (1 KB)", ours, theirs))
    for depth in (1_000, 10_000):
        have = len(session.path("main"))
        session.append_many([MESSAGE] * (depth - have), branch="main")
        for _ in range(depth - len(floor.read("main"))):
            floor.append("main", MESSAGE)

        cold = Store(url, cache_bytes=0).session(session.id)  # no cache: every read walks the path

        ours = timed(lambda: cold.messages("main"), args.repeat)  # noqa: B023
        theirs = timed(lambda: floor.read("main"), args.repeat)  # noqa: B023
        rows.append((f"read the path at depth {depth:,}", ours, theirs))
    counter = iter(range(10**6))
    ours = timed(lambda: session.fork(f"fork{next(counter)}", at="main"), args.repeat, 50)
    theirs = timed(lambda: floor.fork(f"fork{next(counter)}", "main"), args.repeat, 50)
    rows.append(("fork", ours, theirs))
    for name, a, b in rows:
        print(f"{name:32} {a * 1000:9.3f} ms  {b * 1000:9.3f} ms  {a / b:5.2f}x")
    store.close()
    floor.close()

    print(f"\nappends per second, each writer its own session and pool ({args.seconds:g} s)")
    one = None
    for processes in (1, 4, 8):
        rate = throughput(url, processes, args.seconds)
        one = one or rate
        print(f"{processes} writer(s): {rate:8.0f}/s  {rate / one:4.2f}x one writer")
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {url.partition('?schema=')[2]} CASCADE")


if __name__ == "__main__":
    main()
