"""Benchmark the sessiontree store against raw sqlite3 on the same file system, in one run.

What it measures (each figure is the median of several repetitions; the rep count is printed):

1. append: µs per node for ``Session.append`` (one transaction per node) against raw
   ``BEGIN IMMEDIATE; INSERT node; UPDATE head-pointer row; COMMIT``, and for
   ``Session.append_many`` of 1,000 nodes against a raw ``executemany`` of the same rows
   plus one head update in one transaction. The same two figures also against the minimal
   floor schema of ``benchmarks/floor.py`` (integer-keyed ``nodes`` plus a ``heads`` row:
   what a competent engineer would write for the job, not sessiontree's schema), with the
   steps in between: the floor on the store's 8 KB pages, raw SQL on the store's schema,
   and the store with its search index off and on. For each step also the pages one
   append writes to the write-ahead log (a commit writes every page it changed).
2. path: ms for ``Session.path`` at depth 100 / 1,000 / 10,000 / 100,000 against a raw
   recursive CTE (same columns, root-to-node order) with ``fetchall`` on the same file. The
   store is opened with ``cache_bytes=0``, so every read is a query, as on the raw side.
3. fork: µs per ``Session.fork`` at depth 10 and at the deepest depth (should be flat).
   Then a cold read: a new ``Store`` and ``Session.messages("main")`` of a 2,000-message
   branch (the peers benchmark's turns: ``benchmarks/peers.py``) against a new ``Floor``
   and its ``messages()`` on the same messages, reads interleaved, each started with the
   heap frozen out of the garbage collector's reach (as in a new process).
4. storage: marginal bytes per node (pages in use after a WAL checkpoint, minus those of
   the empty store, over the node count) for several content lengths, with the search
   index on and off; bytes per node minus the text length, and minus the stored payload
   (the message as JSON), is the per-node overhead, which should stay roughly constant.
   Then the same for 2,000 messages of mixed lengths (log-uniform, 20 to 20,000
   characters) on the store and on the floor at 4 and 8 KB pages: fixed sizes can flatter,
   since a row that does not fit the gap left on the last page starts a new one.

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
import gc
import json
import math
import os
import platform
import random
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

from floor import Floor
from peers import chat_turn

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
    """A plain sqlite3 writer on a file whose schema (and first node) the store created.

    With ``page_size`` or ``id_index=False`` the file is a copy of such a file on other
    pages, or with the ``id`` column's unique index left out: what the schema would cost
    at best, with the fourth page of each commit gone and SQLite's default pages.
    """

    def __init__(self, path: Path, page_size: int | None = None, id_index: bool = True) -> None:
        if page_size is None and id_index:
            with Store(path) as st:
                s = st.create_session()
                s.append(message(0))
        else:
            made = path.with_name(f"{path.stem}-made.db")
            Raw(made).conn.close()
            copy_schema(made, path, page_size or 8192, id_index)
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


def copy_schema(source: Path, target: Path, page_size: int, id_index: bool) -> None:
    """Copy the store file ``source`` (schema and rows) to a new file on ``page_size`` pages,
    without the unique index on ``nodes.id`` unless ``id_index``."""
    with sqlite3.connect(source) as conn:
        # SQLite's own tables and FTS5's shadow tables come with the statements that make them
        objects = conn.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL"
            " AND name NOT LIKE 'sqlite_%' AND name NOT LIKE 'nodes_fts_%' ORDER BY rowid"
        ).fetchall()
    conn = sqlite3.connect(target, isolation_level=None)
    conn.execute(f"PRAGMA page_size = {page_size:d}")
    conn.execute("PRAGMA journal_mode = WAL")
    for _, name, sql in objects:
        if name == "nodes" and not id_index:
            sql = re.sub(r"(\bid\s+TEXT NOT NULL) UNIQUE", r"\1", sql)
            assert "UNIQUE" not in sql, "the nodes table changed: update copy_schema"
        conn.execute(sql)
    conn.execute("ATTACH ? AS source", (str(source),))
    for kind, name, sql in objects:
        if kind == "table" and "VIRTUAL" not in sql:
            conn.execute(f"INSERT INTO main.{name} SELECT * FROM source.{name}")
    conn.execute("DETACH source")
    conn.close()


def compare(store: list[float], raw: list[float], scale: float, against: str = "raw") -> dict:
    s, r = statistics.median(store) * scale, statistics.median(raw) * scale
    return {"store": round(s, 2), against: round(r, 2), "ratio": round(s / r, 2)}


def bench_append(tmp: Path, reps: int, n: int, batch: int) -> tuple[dict, dict]:
    """One append and a batch, for the store (search index on, the default, and off), raw
    SQL on the store's schema, and the floor schema at SQLite's default 4 KB pages and at
    the store's 8 KB: the steps between the floor and the store, measured alike."""
    st = Store(tmp / "append.db")
    off = Store(tmp / "append-off.db")
    off.set_search_index(False)
    raw = Raw(tmp / "append-raw.db")
    raw4k = Raw(tmp / "append-raw-4k.db", page_size=4096)
    raw4k_no_id = Raw(tmp / "append-raw-4k-no-id.db", page_size=4096, id_index=False)
    floor = Floor(tmp / "append-floor.db")
    floor8k = Floor(tmp / "append-floor-8k.db", page_size=8192)
    single_fns, many_fns = {}, {}
    for name, store in (("store", st), ("store_index_off", off)):
        s = store.create_session()
        s.append(message(0))
        single_fns[name], many_fns[name] = s.append, s.append_many
    floor.append(message(0))  # Raw's first node is the store's, which made its file
    floor8k.append(message(0))
    others = {"raw": raw, "raw_4k": raw4k, "raw_4k_no_id": raw4k_no_id, "floor": floor, "floor_8k": floor8k}
    for name, other in others.items():
        single_fns[name], many_fns[name] = other.append, other.append_many
    payloads = [message(i) for i in range(max(n, batch))]
    single: dict[str, list[float]] = {name: [] for name in single_fns}
    many: dict[str, list[float]] = {name: [] for name in single_fns}
    for _ in range(reps):
        for name, append in single_fns.items():
            single[name].append(timed(lambda a=append: [a(p) for p in payloads[:n]]) / n)
        for name, append_many in many_fns.items():
            many[name].append(timed(lambda a=append_many: a(payloads[:batch])) / batch)
    connections = {"store": st.storage.conn, "store_index_off": off.storage.conn}
    connections |= {name: other.conn for name, other in others.items()}
    # 500 appends stay under the store's own log bound (``WAL_LIMIT``), which would empty it
    frames = {name: wal_pages(connections[name], single_fns[name], payloads[:500]) for name in single_fns}
    for store in (st, off):
        store.close()
    for other in others.values():
        other.conn.close()
    own = {
        "single": compare(single["store"], single["raw"], 1e6),
        "batched": compare(many["store"], many["raw"], 1e6),
    }

    def steps(times: dict[str, list[float]]) -> dict:
        medians = {name: statistics.median(t) * 1e6 for name, t in times.items()}
        figure = {name: round(m, 2) for name, m in medians.items()}
        for name in ("store", "store_index_off", "raw", "raw_4k", "raw_4k_no_id", "floor_8k"):
            figure[f"{name}_ratio"] = round(medians[name] / medians["floor"], 2)
        return figure

    return own, {"single": steps(single), "batched": steps(many), "wal_pages": frames}


def bench_cold_read(tmp: Path, reps: int, turns: int) -> dict:
    """ms for a cold read of a whole branch: a new store (or floor) and its message list."""
    with Store(tmp / "cold.db") as st:
        session = st.create_session()
        for turn in range(turns):
            session.append_many(chat_turn(turn))
    floor = Floor(tmp / "cold-floor.db")
    for turn in range(turns):
        floor.append_many(chat_turn(turn))
    floor.close()

    def store_read() -> int:
        with Store(tmp / "cold.db") as store:
            return len(store.session(session.id).messages("main"))

    def floor_read() -> int:
        other = Floor(tmp / "cold-floor.db")
        try:
            return len(other.messages())
        finally:
            other.close()

    times: dict[str, list[float]] = {"store": [], "floor": []}
    for _ in range(reps):
        for name, read in (("store", store_read), ("floor", floor_read)):
            gc.collect()
            gc.freeze()
            times[name].append(timed(read))
            gc.unfreeze()
    figure = compare(times["store"], times["floor"], 1e3, against="floor")
    return {"messages": 4 * turns, **figure}


def wal_pages(conn: sqlite3.Connection, append, payloads: list[dict]) -> float:
    """Pages written to the write-ahead log per one-node append (one frame per page a commit
    changes): what a commit costs in I/O. The log is emptied first and not checkpointed
    meanwhile; the store's periodic search-index batches count, spread over the appends."""
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    path = conn.execute("PRAGMA database_list").fetchone()[2]
    for p in payloads:
        append(p)
    return round(os.path.getsize(path + "-wal") / (page_size + 24) / len(payloads), 2)


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


def stored(path: Path, index: bool, messages: list[dict], batch: int) -> tuple[int, int]:
    """Write ``messages`` (``append_many`` of ``batch`` at a time) into a fresh store with
    its search index on or off: the bytes its pages gained, and the payloads' bytes (after
    a checkpoint, every node indexed)."""
    with Store(path) as st:
        st.set_search_index(index)
        s = st.create_session()
        st.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        empty = used_bytes(st.conn)
        for start in range(0, len(messages), batch):
            s.append_many(messages[start : start + batch])
    with Store(path) as st:  # closing indexed what was pending (index on)
        assert st.search_index().pending == 0
        st.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        payload = st.conn.execute("SELECT sum(length(CAST(payload AS BLOB))) FROM nodes").fetchone()[0]
        return used_bytes(st.conn) - empty, payload


def bench_storage(tmp: Path, reps: int, sizes: list[int], n: int) -> dict:
    """Marginal bytes per node, with the search index on (the default) and off; the
    overhead over the message's text and over the stored payload (its JSON)."""
    result: dict = {}
    for index in (True, False):
        figures = {}
        for size in sizes:
            per_node = []
            messages = [message(i, size) for i in range(n)]
            for rep in range(reps):
                added, payload = stored(tmp / f"size-{size}-{rep}-{index}.db", index, messages, 1000)
                per_node.append(added / n)
            payload /= n
            bpn = statistics.median(per_node)
            figures[str(size)] = {
                "bytes_per_node": round(bpn, 1),
                "overhead": round(bpn - size, 1),
                "over_payload": round(bpn - payload, 1),
            }
        low, high = figures[str(sizes[0])], figures[str(sizes[-1])]
        slope = (high["bytes_per_node"] - low["bytes_per_node"]) / (sizes[-1] - sizes[0])
        result["index_on" if index else "index_off"] = {"sizes": figures, "slope": round(slope, 3)}
    return result


def mixed_sizes(n: int) -> list[int]:
    """Message lengths spread as real ones are: log-uniform from 20 to 20,000 characters
    (seeded, so every run and every system stores the same messages)."""
    rng = random.Random(7)
    return [int(math.exp(rng.uniform(math.log(20), math.log(20_000)))) for _ in range(n)]


def bench_mixed_storage(tmp: Path, n: int) -> dict:
    """Bytes a node over its stored payload for messages of mixed lengths, for the store
    (index on and off) and the floor on 4 and 8 KB pages. Rows appended at the end of a
    B-tree leave the gap a row did not fit in, so the fixed sizes above can flatter."""
    messages = [message(i, size) for i, size in enumerate(mixed_sizes(n))]
    chunks = [messages[i : i + 500] for i in range(0, n, 500)]
    result = {}
    for index in (True, False):
        added, payload = stored(tmp / f"mixed-{index}.db", index, messages, 500)
        result["store" if index else "store_index_off"] = round((added - payload) / n, 1)
    for name, page_size in (("floor", None), ("floor_8k", 8192)):
        floor = Floor(tmp / f"mixed-{name}.db", page_size=page_size)
        floor.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        empty = used_bytes(floor.conn)
        for chunk in chunks:
            floor.append_many(chunk)
        floor.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        payload = floor.conn.execute("SELECT sum(length(CAST(payload AS BLOB))) FROM nodes").fetchone()[0]
        result[name] = round((used_bytes(floor.conn) - empty - payload) / n, 1)
        floor.close()
    result["average_payload"] = round(payload / n, 1)
    return result


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
        cold = bench_cold_read(tmp, 10 if quick else 40, turns=100 if quick else 500)
        storage = bench_storage(tmp, 3, [100, 1_000, 10_000], n=200 if quick else 2_000)
        mixed = bench_mixed_storage(tmp, n=500 if quick else 2_000)
    return {
        "quick": quick,
        "reps": reps,
        "storage_reps": 3,
        "machine": machine(),
        "append_us": append,
        "floor_append_us": floor_append,
        "path_ms": paths,
        "fork_us": fork,
        "cold_read_ms": cold,
        "storage": storage,
        "mixed_storage": mixed,
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
    print("\nfrom the minimal floor schema to the store (benchmarks/floor.py: integer ids, nodes + heads)")
    print(f"{'µs per node, ratio to the floor':<36}{'one append':>18}{'append_many':>18}{'log pages':>11}")
    steps = [
        ("floor, 4 KB pages (SQLite default)", "floor"),
        ("floor, 8 KB pages (the store's)", "floor_8k"),
        ("raw SQL on the store's schema", "raw"),
        ("  the same on 4 KB pages", "raw_4k"),
        ("  ... and without the id index", "raw_4k_no_id"),
        ("store, search index off", "store_index_off"),
        ("store, search index on (default)", "store"),
    ]
    single, batched = r["floor_append_us"]["single"], r["floor_append_us"]["batched"]
    for label, key in steps:
        cells = [
            f"{f[key]:>9.2f} {1.0 if key == 'floor' else f[key + '_ratio']:>6.2f}x" for f in (single, batched)
        ]
        print(f"{label:<36}{cells[0]:>18}{cells[1]:>18}{r['floor_append_us']['wal_pages'][key]:>11.2f}")
    print()
    for depth, us in r["fork_us"].items():
        if depth != "ratio":
            print(f"{'fork at depth ' + format(int(depth), ','):<36}{us:>12.2f} µs")
    print(f"{'fork deep / fork shallow':<36}{r['fork_us']['ratio']:>12.2f}x")
    cold = r["cold_read_ms"]
    print(f"\n{'cold read (ms)':<36}{'store':>12}{'floor':>12}{'store/floor':>13}")
    label = f"a branch of {cold['messages']:,} messages"
    print(f"{label:<36}{cold['store']:>12.2f}{cold['floor']:>12.2f}{cold['ratio']:>12.2f}x")
    for index, label in (("index_on", "search index on (default)"), ("index_off", "search index off")):
        figures = r["storage"][index]
        print(f"\nstorage, {label} (median of {r['storage_reps']} fresh files)")
        print(f"{'content chars':<24}{'bytes/node':>12}{'over text':>12}{'over payload':>14}")
        for size, v in figures["sizes"].items():
            print(
                f"{int(size):<24,}{v['bytes_per_node']:>12.1f}{v['overhead']:>12.1f}{v['over_payload']:>14.1f}"
            )
        print(f"{'extra bytes per extra char (slope)':<36}{figures['slope']:>12.3f}")
    mixed = r["mixed_storage"]
    average = f"average {mixed['average_payload']:,.0f} B"
    print(f"\nbytes a node over the payload, mixed lengths (20 to 20,000 chars, {average})")
    for label, key in (
        ("store, search index on", "store"),
        ("store, search index off", "store_index_off"),
        ("floor, 4 KB pages", "floor"),
        ("floor, 8 KB pages", "floor_8k"),
    ):
        print(f"{label:<36}{mixed[key]:>12.1f}")


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
