"""Benchmark full-text search against a LIKE scan, and what the index costs, in one run.

What it measures (medians; the rep count is printed):

1. search: ms for ``Store.search(query, limit=20)`` (best first) and with
   ``newest=True`` (most recently written first) over a store of 100,000 messages
   (1,000 sessions of 100: user and assistant turns, one in five assistant turns a tool
   call answered by a tool result) against the baseline of Open WebUI's chat search, a
   ``LIKE '%word%'`` scan of the stored JSON, run as ``SELECT id FROM nodes WHERE payload
   LIKE ? ORDER BY id DESC LIMIT 20`` on the same file through a plain connection. Four
   queries: a rare word (10 nodes), a word of 1% of the nodes, a word of 20% of the nodes
   and a two-word phrase. Search ranks every match (bm25) and names each hit's branches
   and checkpoints; the scan returns the first 20 rows it meets, so for a common word it
   stops early, and it also finds words inside JSON keys and ids.
2. append: µs per ``Session.append`` (one transaction per message) and per message of
   ``Session.append_many`` of 100, on a store with the search index against the same
   store with the index turned off (``set_search_index(False)``).
3. storage: bytes of the 100,000-message file with the index against a copy with the
   index turned off and vacuumed.

Usage: ``python benchmarks/search.py [--quick] [--json]``. ``--quick`` uses 10,000
messages and fewer reps, so a smoke run takes seconds.
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
from typing import Any

from sessiontree import Store

WORDS = [f"w{i:04d}" for i in range(5000)]  # the common vocabulary
PLANTED = {"rare": 10, "onepct": 0.01, "fifth": 0.20}  # word -> nodes (count or share)


def conversation(rng: random.Random, n: int, plant: dict[str, float]) -> list[dict[str, Any]]:
    """``n`` messages: user / assistant turns, some tool calls with results."""

    def text(k: int) -> str:
        words = rng.choices(WORDS, k=k)
        for word, share in plant.items():
            if rng.random() < share:
                words[rng.randrange(k)] = word
        return " ".join(words)

    out: list[dict[str, Any]] = []
    call = 0
    while len(out) < n:
        out.append({"role": "user", "content": text(20)})
        if rng.random() < 0.2 and len(out) + 2 <= n:
            call += 1
            args = json.dumps({"query": text(4)})
            out.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": f"c{call}",
                            "type": "function",
                            "function": {"name": "lookup", "arguments": args},
                        }
                    ],
                }
            )
            out.append({"role": "tool", "tool_call_id": f"c{call}", "content": text(60)})
        else:
            out.append({"role": "assistant", "content": text(40)})
    return out[:n]


def build(path: Path, messages: int, seed: int = 7) -> Store:
    rng = random.Random(seed)
    store = Store(path)
    sessions, per = messages // 100, 100
    rare_left = int(PLANTED["rare"])
    for i in range(sessions):
        plant = {"onepct": PLANTED["onepct"], "fifth": PLANTED["fifth"]}
        s = store.create_session(f"s{i}")
        batch = conversation(rng, per, plant)
        if rare_left and i % (sessions // int(PLANTED["rare"])) == 0:  # one rare word in some sessions
            batch[0] = {"role": "user", "content": "the zyzzyva " + batch[0]["content"]}
            rare_left -= 1
        s.append_many(batch)
        s.checkpoint("start", at=s.path("main")[0])
    return store


def timed(fn: Any, reps: int) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def search_figures(store: Store, path: Path, reps: int) -> dict[str, Any]:
    raw = sqlite3.connect(path)
    queries = {"rare": "zyzzyva", "1%": "onepct", "20%": "fifth", "phrase": '"fifth onepct"'}
    like = {"rare": "zyzzyva", "1%": "onepct", "20%": "fifth", "phrase": "fifth onepct"}
    scan = "SELECT id FROM nodes WHERE payload LIKE ? ORDER BY id DESC LIMIT 20"
    figures = {}
    for name, query in queries.items():
        pattern = f"%{like[name]}%"
        hits = len(store.search(query, limit=20))
        scanned = len(raw.execute(scan, (pattern,)).fetchall())
        s_times, n_times, l_times = [], [], []
        for _ in range(reps):  # alternate, so noise hits all alike
            s_times.append(timed(lambda q=query: store.search(q, limit=20), 1))
            n_times.append(timed(lambda q=query: store.search(q, limit=20, newest=True), 1))
            l_times.append(timed(lambda p=pattern: raw.execute(scan, (p,)).fetchall(), 1))
        s_ms, l_ms = statistics.median(s_times) * 1e3, statistics.median(l_times) * 1e3
        n_ms = statistics.median(n_times) * 1e3
        figures[name] = {
            "search_ms": round(s_ms, 3),
            "newest_ms": round(n_ms, 3),
            "like_ms": round(l_ms, 3),
            "ratio": round(s_ms / l_ms, 3),
            "newest_ratio": round(n_ms / l_ms, 3),
            "hits": hits,
            "like_rows": scanned,
        }
    raw.close()
    return figures


def append_figures(directory: Path, reps: int, singles: int) -> dict[str, Any]:
    """µs per append with the search index on and off, alternating."""
    rng = random.Random(3)
    stores = {}
    for name in ("indexed", "plain"):
        store = Store(directory / f"append-{name}.db", cache_bytes=0)
        if name == "plain":
            store.set_search_index(False)
        stores[name] = (store, store.create_session(name))
    single: dict[str, list[float]] = {"indexed": [], "plain": []}
    batched: dict[str, list[float]] = {"indexed": [], "plain": []}
    for _ in range(reps):
        payloads = conversation(rng, singles, {"onepct": 0.01})
        chain = conversation(rng, 100, {"onepct": 0.01})
        for name, (_store, session) in stores.items():
            start = time.perf_counter()
            for p in payloads:
                session.append(p)
            single[name].append((time.perf_counter() - start) / singles)
            start = time.perf_counter()
            session.append_many(chain)
            batched[name].append((time.perf_counter() - start) / len(chain))
    for store, _ in stores.values():
        store.close()

    def figure(times: dict[str, list[float]]) -> dict[str, float]:
        i, p = statistics.median(times["indexed"]) * 1e6, statistics.median(times["plain"]) * 1e6
        return {"indexed": round(i, 2), "plain": round(p, 2), "ratio": round(i / p, 3)}

    return {"single": figure(single), "batched": figure(batched)}


def storage_figures(store: Store, directory: Path) -> dict[str, Any]:
    indexed = directory / "with-index.db"
    plain = directory / "without-index.db"
    store.backup(str(indexed))
    store.backup(str(plain))
    with Store(plain) as copy:
        copy.set_search_index(False)
        copy.prune(dry_run=False, vacuum=True)  # nothing to prune: only the vacuum
    with_index, without = os.path.getsize(indexed), os.path.getsize(plain)
    return {
        "with_index_bytes": with_index,
        "without_index_bytes": without,
        "ratio": round(with_index / without, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10,000 messages, fewer reps")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    messages = 10_000 if args.quick else 100_000
    reps = 5 if args.quick else 15
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        started = time.perf_counter()
        store = build(directory / "search.db", messages)
        build_s = time.perf_counter() - started
        result = {
            "quick": args.quick,
            "messages": messages,
            "reps": reps,
            "build_s": round(build_s, 1),
            "search": search_figures(store, directory / "search.db", reps),
            "storage": storage_figures(store, directory),
            "append_us": append_figures(directory, reps, 50 if args.quick else 200),
            "python": sys.version.split()[0],
            "sqlite": sqlite3.sqlite_version,
            "machine": platform.machine(),
        }
        store.close()
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{messages:,} messages ({build_s:.1f} s to build), medians of {reps} reps")
    print("search (limit 20)   best ms  newest ms  LIKE scan ms  best ratio  newest ratio  hits / LIKE rows")
    for name, f in result["search"].items():
        print(
            f"  {name:<16} {f['search_ms']:>9.2f} {f['newest_ms']:>10.2f} {f['like_ms']:>13.2f}"
            f" {f['ratio']:>11.3f} {f['newest_ratio']:>13.3f}   {f['hits']} / {f['like_rows']}"
        )
    st = result["storage"]
    print(
        f"file: {st['with_index_bytes']:,} bytes with the index, {st['without_index_bytes']:,}"
        f" without ({st['ratio']}x)"
    )
    for name, f in result["append_us"].items():
        print(
            f"append {name:<8} {f['indexed']:>8.1f} µs indexed, {f['plain']:>8.1f} µs without ({f['ratio']}x)"
        )


if __name__ == "__main__":
    main()
