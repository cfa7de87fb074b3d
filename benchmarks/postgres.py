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

    python benchmarks/postgres.py [--repeat 5] [--seconds 3]

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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    server, why = pg_cluster.server_url()
    if server is None:
        raise SystemExit(why)
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
