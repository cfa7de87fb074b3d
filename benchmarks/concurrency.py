"""Throughput of concurrent writer processes on one sessiontree file.

What it measures (each figure is the median of several repetitions; the count is printed):

1. baseline: one process appending (``Session.append``, one transaction per node) to its
   own branch for ``--seconds``: appends/s.
2. own branches: N processes, each appending to its own branch of one session.
3. one branch: N processes appending to the same branch (the store serialises them).
4. compare-and-set: N processes appending to the same branch with ``expect_head`` set to
   the head each just read; losers get ``BranchMoved`` and retry. Reported: successful
   appends/s and the share of attempts that lost.

For each N-process figure: total appends/s, per process, and the ratio to the baseline
measured in the same run (so machine noise hits both). After every repetition the file is
checked: every acknowledged append is on its branch's path, none twice, ``verify()`` clean.

Usage: ``python benchmarks/concurrency.py [--quick] [--json] [--processes N] [--seconds S]``.
``--quick`` runs 1-second windows and 3 repetitions.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from sessiontree import BranchMoved, Store

CTX = multiprocessing.get_context("spawn")


def writer(db: str, session_id: str, index: int, mode: str, seconds: float, start, queue) -> None:
    acked, lost, errors = [], 0, []
    with Store(db) as store:
        session = store.session(session_id)
        branch = f"own-{index}" if mode == "own" else "shared"
        start.wait(60)
        began = time.perf_counter()
        i = 0
        while time.perf_counter() - began < seconds:
            i += 1
            payload = {"role": "user", "content": f"writer {index} message {i}"}
            try:
                if mode == "cas":
                    head = session.branch(branch).head_id
                    node = session.append(payload, branch=branch, expect_head=head)
                else:
                    node = session.append(payload, branch=branch)
            except BranchMoved:
                lost += 1
                continue
            except Exception as e:  # "database is locked" would land here
                errors.append(f"{type(e).__name__}: {e}")
                break
            acked.append((branch, node.id))
        elapsed = time.perf_counter() - began
    queue.put({"index": index, "acked": acked, "lost": lost, "errors": errors, "elapsed": elapsed})


def one_run(workdir: Path, processes: int, mode: str, seconds: float) -> dict:
    db = workdir / f"bench-{mode}-{processes}-{time.monotonic_ns()}.db"
    with Store(db) as store:
        session = store.create_session("bench")
        root = session.append({"role": "system", "content": "root"}, branch="shared")
    start, queue = CTX.Event(), CTX.Queue()
    procs = [
        CTX.Process(target=writer, args=(str(db), session.id, i, mode, seconds, start, queue))
        for i in range(processes)
    ]
    for p in procs:
        p.start()
    time.sleep(0.2)  # let every process open the store before the clock starts
    start.set()
    results = [queue.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join(60)
    errors = [e for r in results for e in r["errors"]]
    if errors:
        raise SystemExit(f"writers failed: {errors[:3]}")
    acked = [a for r in results for a in r["acked"]]
    with Store(db) as store:  # the correctness check behind every figure
        s = store.session(session.id)
        assert store.verify().ok
        ids = [i for _, i in acked]
        assert len(ids) == len(set(ids)), "an append was acknowledged twice"
        for branch in {b for b, _ in acked}:
            on_path = [n.id for n in s.path(branch) if n.id != root.id]
            assert sorted(on_path) == sorted(i for b, i in acked if b == branch), "lost append"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    elapsed = max(r["elapsed"] for r in results)
    attempts = len(acked) + sum(r["lost"] for r in results)
    return {"per_s": len(acked) / elapsed, "lost_share": 1 - len(acked) / attempts if attempts else 0.0}


def measure(workdir: Path, processes: int, mode: str, seconds: float, reps: int) -> dict:
    runs = [one_run(workdir, processes, mode, seconds) for _ in range(reps)]
    return {
        "per_s": statistics.median(r["per_s"] for r in runs),
        "lost_share": statistics.median(r["lost_share"] for r in runs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 s windows, 3 repetitions")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=None)
    args = parser.parse_args()
    seconds = args.seconds or (1.0 if args.quick else 3.0)
    reps = 3 if args.quick else 5
    n = args.processes
    result: dict = {
        "quick": args.quick,
        "reps": reps,
        "seconds": seconds,
        "processes": n,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
    }
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        # Alternate baseline and N-process runs so noise hits both alike.
        baseline, figures = [], {"own": [], "shared": [], "cas": []}
        lost = []
        for _ in range(reps):
            baseline.append(one_run(workdir, 1, "own", seconds)["per_s"])
            for mode in figures:
                run = one_run(workdir, n, mode, seconds)
                figures[mode].append(run["per_s"])
                if mode == "cas":
                    lost.append(run["lost_share"])
    base = statistics.median(baseline)
    result["baseline_per_s"] = round(base, 1)
    for mode, values in figures.items():
        total = statistics.median(values)
        result[mode] = {
            "total_per_s": round(total, 1),
            "per_process_per_s": round(total / n, 1),
            "ratio_to_baseline": round(total / base, 3),
        }
    result["cas"]["lost_share"] = round(statistics.median(lost), 3)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"sessiontree concurrency benchmark: {n} processes, {seconds:g} s windows, "
        f"median of {reps}; {result['machine']['cpus']} CPUs, Python {result['machine']['python']}"
    )
    print(f"  baseline, 1 process:        {base:8.0f} appends/s")
    labels = {"own": "own branch each", "shared": "one shared branch", "cas": "shared, compare-and-set"}
    for mode, label in labels.items():
        r = result[mode]
        extra = f", {r['lost_share']:.0%} of attempts lost the race" if mode == "cas" else ""
        print(
            f"  {n} processes, {label + ':':25s} {r['total_per_s']:8.0f} appends/s total, "
            f"{r['per_process_per_s']:6.0f} per process, {r['ratio_to_baseline']:.2f}x baseline{extra}"
        )
    print("  every run checked: no acknowledged append lost or duplicated, verify() clean")


if __name__ == "__main__":
    sys.exit(main())
