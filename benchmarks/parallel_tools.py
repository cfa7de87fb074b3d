"""Benchmark the calls of one batch running at once (``parallel_tools``).

What it measures (medians of several repetitions; the rep count is printed): one run of
the agent loop whose scripted model asks, in one assistant message, for three calls of an
idempotent tool that sleeps 0.2 s (a slow lookup), then answers. The run's wall time with
``parallel_tools=1`` (one call after another: about 3 x 0.2 s) against the default
``parallel_tools=4`` (all three at once: about one call's 0.2 s), and their ratio; the
loop's own bookkeeping (one ``tool_start``, three results in call order) is in both.
Sync tools run in threads of their own, so a sleeping call holds no other back.

Usage: ``python benchmarks/parallel_tools.py [--quick] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from sessiontree import Store, run, tool
from sessiontree.testing import ScriptedModel, reply, tool_call

SLEEP = 0.2
CALLS = 3


@tool
def slow_lookup(n: int) -> str:
    """A slow, idempotent lookup."""
    time.sleep(SLEEP)
    return f"result {n}"


def run_seconds(store: Store, parallel_tools: int) -> float:
    """Wall time of one run with a batch of ``CALLS`` slow calls."""
    session = store.create_session()
    session.append({"role": "user", "content": "look up three things"})
    model = ScriptedModel(
        [reply(None, *(tool_call("slow_lookup", {"n": n}, id=f"c{n}") for n in range(CALLS))), reply("done")]
    )
    start = time.perf_counter()
    steps = list(run(store, session, call=model, tools=[slow_lookup], parallel_tools=parallel_tools))
    took = time.perf_counter() - start
    assert steps[-1].reason == "completed", steps[-1]
    results = [m["content"] for m in session.messages() if m["role"] == "tool"]
    assert results == [f"result {n}" for n in range(CALLS)]  # in call order either way
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    reps = 3 if args.quick else 7
    with tempfile.TemporaryDirectory() as tmp, Store(str(Path(tmp) / "bench.db")) as store:
        run_seconds(store, 4)  # warm up: imports, the first connection
        timings: dict[int, list[float]] = {1: [], 4: []}
        for _ in range(reps):
            for bound in timings:  # interleaved, so a busy moment hits both alike
                timings[bound].append(run_seconds(store, bound))
    serial, together = (statistics.median(timings[b]) for b in (1, 4))
    figures = {
        "quick": args.quick,
        "reps": reps,
        "calls": CALLS,
        "sleep_s": SLEEP,
        "parallel_1_s": round(serial, 4),
        "parallel_4_s": round(together, 4),
        "ratio": round(serial / together, 2),
    }
    if args.json:
        json.dump(figures, sys.stdout)
        print()
        return
    print(f"a batch of {CALLS} calls that each sleep {SLEEP} s, median of {reps} runs:")
    print(f"  parallel_tools=1  {serial:.3f} s")
    print(f"  parallel_tools=4  {together:.3f} s")
    print(f"  ratio             {serial / together:.2f}x")


if __name__ == "__main__":
    main()
