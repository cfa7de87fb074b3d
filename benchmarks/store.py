"""Benchmark the sessiontree store against raw sqlite3 on the same file system, in one run.

What it measures (each figure is the median of several repetitions; the rep count is printed):

1. append: µs per node for ``Session.append`` (one transaction per node) against raw
   ``BEGIN IMMEDIATE; INSERT node; UPDATE head-pointer row; COMMIT``, and for
   ``Session.append_many`` of 1,000 nodes against a raw ``executemany`` of the same rows
   plus one head update in one transaction. The same two figures also against the minimal
   floor schema of ``benchmarks/floor.py`` (integer-keyed ``nodes`` plus a ``heads`` row:
   what a competent engineer would write for the job, not sessiontree's schema).
2. path: ms for ``Session.path`` at depth 100 / 1,000 / 10,000 / 100,000 against a raw
   recursive CTE (same columns, root-to-node order) with ``fetchall`` on the same file. The
   store is opened with ``cache_bytes=0``, so every read is a query, as on the raw side.
3. fork: µs per ``Session.fork`` at depth 10 and at the deepest depth (should be flat).
4. storage: marginal bytes per node (pages in use after a WAL checkpoint, minus those of
   the empty store, over the node count) for several content lengths; bytes per node minus
   the text length is the per-node overhead, which should stay roughly constant.

How: the raw baseline reuses the store's schema (each raw file is created by opening a
``Store`` on a fresh file), then talks to it through a plain ``sqlite3`` connection with the
same pragmas (WAL, synchronous=NORMAL, foreign_keys=ON). The floor has its own file with
WAL and synchronous=NORMAL. Store, raw and floor reps alternate so machine noise hits them
alike. Everything lives in a temporary directory that is removed.

Usage: ``python benchmarks/store.py [--quick] [--json]``. ``--quick`` stops the deep
chains at 10,000 and uses fewer nodes and reps, so a smoke run takes seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

from floor import Floor

from sessiontree import Store
from sessiontree.ids import new_id, now

COLUMNS = "key, id, session, parent, depth, kind, payload, created_at, run"
INSERT = f"INSERT INTO nodes ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
NEXT_KEY = "SELECT coalesce(max(key), 0) + 1 FROM nodes"
UPDATE_HEAD = "UPDATE branches SET head = ?, updated_at = ? WHERE session = ? AND name = 'main'"
RAW_PATH = """
WITH RECURSIVE p(key, parent, id, depth, kind, payload, created_at, run) AS (
    SELECT key, parent, id, depth, kind, payload, created_at, run FROM nodes WHERE id = ?
    UNION ALL
    SELECT n.key, n.parent, n.id, n.depth, n.kind, n.payload, n.created_at, n.run
    FROM p JOIN nodes n ON n.key = p.parent
)
SELECT p.id, p.depth, p.kind, p.payload, p.created_at, r.id FROM p LEFT JOIN runs r ON r.key = p.run
ORDER BY p.depth
"""


def message(i: int, size: int = 60) -> dict:
    text = f"message {i}: " + "lorem ipsum dolor sit amet " * (size // 27 + 1)
    return {"role": "user" if i % 2 else "assistant", "content": text[:size]}


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


class Raw:
    """A plain sqlite3 writer on a file whose schema (and first node) the store created."""

    def __init__(self, path: Path) -> None:
        with Store(path) as st:
            s = st.create_session()
            s.append(message(0))
        self.conn = sqlite3.connect(path, isolation_level=None)
        for pragma in ("journal_mode = WAL", "synchronous = NORMAL", "foreign_keys = ON"):
            self.conn.execute(f"PRAGMA {pragma}")
        self.session, self.head, self.depth = self.conn.execute(
            "SELECT session, key, depth FROM nodes"
        ).fetchone()
        self.depth += 1

    def _rows(self, payloads: list[dict]) -> list[tuple]:
        rows, ts = [], now()
        key = self.conn.execute(NEXT_KEY).fetchone()[0]
        for p in payloads:
            text = json.dumps(p, separators=(",", ":"))
            rows.append((key, new_id(), self.session, self.head, self.depth, "message", text, ts, None))
            self.head, self.depth, key = key, self.depth + 1, key + 1
        return rows

    def append(self, payload: dict) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        row = self._rows([payload])[0]
        self.conn.execute(INSERT, row)
        self.conn.execute(UPDATE_HEAD, (row[0], row[7], self.session))
        self.conn.execute("COMMIT")

    def append_many(self, payloads: list[dict]) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        rows = self._rows(payloads)
        self.conn.executemany(INSERT, rows)
        self.conn.execute(UPDATE_HEAD, (rows[-1][0], rows[-1][7], self.session))
        self.conn.execute("COMMIT")


def compare(store: list[float], raw: list[float], scale: float, against: str = "raw") -> dict:
    s, r = statistics.median(store) * scale, statistics.median(raw) * scale
    return {"store": round(s, 2), against: round(r, 2), "ratio": round(s / r, 2)}


def bench_append(tmp: Path, reps: int, n: int, batch: int) -> tuple[dict, dict]:
    st = Store(tmp / "append.db")
    s = st.create_session()
    s.append(message(0))
    raw = Raw(tmp / "append-raw.db")
    floor = Floor(tmp / "append-floor.db")
    floor.append(message(0))
    payloads = [message(i) for i in range(max(n, batch))]
    single, single_raw, single_floor, many, many_raw, many_floor = [], [], [], [], [], []
    for _ in range(reps):
        single.append(timed(lambda: [s.append(p) for p in payloads[:n]]) / n)
        single_raw.append(timed(lambda: [raw.append(p) for p in payloads[:n]]) / n)
        single_floor.append(timed(lambda: [floor.append(p) for p in payloads[:n]]) / n)
        many.append(timed(lambda: s.append_many(payloads[:batch])) / batch)
        many_raw.append(timed(lambda: raw.append_many(payloads[:batch])) / batch)
        many_floor.append(timed(lambda: floor.append_many(payloads[:batch])) / batch)
    st.close()
    raw.conn.close()
    floor.close()
    own = {"single": compare(single, single_raw, 1e6), "batched": compare(many, many_raw, 1e6)}
    minimal = {
        "single": compare(single, single_floor, 1e6, "floor"),
        "batched": compare(many, many_floor, 1e6, "floor"),
    }
    return own, minimal


def bench_path_and_fork(tmp: Path, reps: int, depths: list[int], forks: int) -> tuple[dict, dict]:
    st = Store(tmp / "path.db", cache_bytes=0)  # every read goes to SQLite, like the raw CTE
    s = st.create_session()
    ids: list[str] = []
    while len(ids) < depths[-1]:
        chunk = [message(len(ids) + i) for i in range(min(10_000, depths[-1] - len(ids)))]
        ids += [node.id for node in s.append_many(chunk)]
    raw = sqlite3.connect(tmp / "path.db", isolation_level=None)
    raw.execute("PRAGMA foreign_keys = ON")
    paths = {}
    for depth in depths:
        target = ids[depth - 1]
        assert len(s.path(target)) == len(raw.execute(RAW_PATH, (target,)).fetchall()) == depth
        store_t, raw_t = [], []
        for _ in range(reps):
            store_t.append(timed(lambda t=target: s.path(t)))
            raw_t.append(timed(lambda t=target: raw.execute(RAW_PATH, (t,)).fetchall()))
        paths[str(depth)] = compare(store_t, raw_t, 1e3)
    # Shallow and deep forks interleave one by one in a shuffled order, so the periodic
    # WAL auto-checkpoint (a commit far slower than the rest) lands on both alike.
    fork_t: dict[int, list[float]] = {10: [], depths[-1]: []}
    rng = random.Random(0)
    for rep in range(reps):
        total = dict.fromkeys(fork_t, 0.0)
        for i in range(forks):
            for depth in rng.sample(list(total), 2):
                name, at = f"fork-{depth}-{rep}-{i}", ids[depth - 1]
                total[depth] += timed(lambda n=name, a=at: s.fork(n, at=a))
        for depth, t in total.items():
            fork_t[depth].append(t / forks)
    fork = {str(d): round(statistics.median(t) * 1e6, 2) for d, t in fork_t.items()}
    fork["ratio"] = round(fork[str(depths[-1])] / fork["10"], 2)
    raw.close()
    st.close()
    return paths, fork


def used_bytes(conn: sqlite3.Connection) -> int:
    """Bytes of the file's pages in use: free pages (a migration that rebuilt tables leaves
    some) are reused by the first rows written, so the file size would undercount them."""
    pages, free, size = (
        conn.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_count", "freelist_count", "page_size")
    )
    return (pages - free) * size


def bench_storage(tmp: Path, reps: int, sizes: list[int], n: int) -> dict:
    result = {}
    for size in sizes:
        per_node = []
        for rep in range(reps):
            path = tmp / f"size-{size}-{rep}.db"
            with Store(path) as st:
                s = st.create_session()
                st.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                empty = used_bytes(st.conn)
                for start in range(0, n, 1000):
                    s.append_many([message(i, size) for i in range(start, min(n, start + 1000))])
                st.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                per_node.append((used_bytes(st.conn) - empty) / n)
        bpn = statistics.median(per_node)
        result[str(size)] = {"bytes_per_node": round(bpn, 1), "overhead": round(bpn - size, 1)}
    low, high = result[str(sizes[0])], result[str(sizes[-1])]
    slope = (high["bytes_per_node"] - low["bytes_per_node"]) / (sizes[-1] - sizes[0])
    return {"sizes": result, "slope": round(slope, 3)}


def machine() -> dict:
    return {
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
    }


def run(quick: bool) -> dict:
    reps = 5 if quick else 7
    depths = [100, 1_000, 10_000] if quick else [100, 1_000, 10_000, 100_000]
    with tempfile.TemporaryDirectory(prefix="sessiontree-bench-") as d:
        tmp = Path(d)
        append, floor_append = bench_append(tmp, reps, n=200 if quick else 1_000, batch=1_000)
        paths, fork = bench_path_and_fork(tmp, reps, depths, forks=50 if quick else 200)
        storage = bench_storage(tmp, 3, [100, 1_000, 10_000], n=200 if quick else 2_000)
    return {
        "quick": quick,
        "reps": reps,
        "storage_reps": 3,
        "machine": machine(),
        "append_us": append,
        "floor_append_us": floor_append,
        "path_ms": paths,
        "fork_us": fork,
        "storage": storage,
    }


def print_table(r: dict) -> None:
    m = r["machine"]
    print(
        f"sessiontree store vs raw sqlite3 — median of {r['reps']} reps "
        f"({m['nproc']} cpus, Python {m['python']}, SQLite {m['sqlite']})\n"
    )
    print(f"{'measure':<36}{'store':>12}{'raw':>12}{'store/raw':>11}")
    rows = [
        ("append, 1 txn per node (µs/node)", r["append_us"]["single"]),
        ("append_many of 1,000 (µs/node)", r["append_us"]["batched"]),
    ]
    rows += [(f"path at depth {int(d):,} (ms)", v) for d, v in r["path_ms"].items()]
    for label, v in rows:
        print(f"{label:<36}{v['store']:>12.2f}{v['raw']:>12.2f}{v['ratio']:>10.2f}x")
    print("\nagainst the minimal floor schema (benchmarks/floor.py: integer ids, nodes + heads)")
    print(f"{'measure':<36}{'store':>12}{'floor':>12}{'store/floor':>13}")
    for label, v in (
        ("append, 1 txn per node (µs/node)", r["floor_append_us"]["single"]),
        ("append_many of 1,000 (µs/node)", r["floor_append_us"]["batched"]),
    ):
        print(f"{label:<36}{v['store']:>12.2f}{v['floor']:>12.2f}{v['ratio']:>12.2f}x")
    print()
    for depth, us in r["fork_us"].items():
        if depth != "ratio":
            print(f"{'fork at depth ' + format(int(depth), ','):<36}{us:>12.2f} µs")
    print(f"{'fork deep / fork shallow':<36}{r['fork_us']['ratio']:>12.2f}x\n")
    print(f"storage (median of {r['storage_reps']} fresh files)")
    print(f"{'content chars':<36}{'bytes/node':>12}{'overhead':>12}")
    for size, v in r["storage"]["sizes"].items():
        print(f"{int(size):<36,}{v['bytes_per_node']:>12.1f}{v['overhead']:>12.1f}")
    print(f"{'extra bytes per extra char (slope)':<36}{r['storage']['slope']:>12.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="stop at depth 10,000; fewer nodes")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    result = run(args.quick)
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
    else:
        print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
