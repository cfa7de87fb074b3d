"""Benchmark the agent loop's own cost per step, against the store writes it makes.

What it measures (medians of several repetitions; the rep count is printed):

1. A tool cycle: the model asks for a tool call, the loop runs it, and the model is
   called again. Each cycle writes three nodes (the assistant message with the call, a
   ``tool_start`` marker, the tool message). The model is scripted and answers at once and
   the tool returns at once, so what is left is the loop's own overhead: planning from
   the path, building the messages, checking arguments, the three compare-and-set appends.
   Baseline, in the same run: ``Session.append`` of the same three nodes, one transaction
   each (the least any loop that commits every node as it happens can do).
2. The same cycle on a branch that is 100 deep and one that is 10,000 deep (``--quick``:
   2,000): the loop reads the path once per run (the first cycle pays for it) and then
   extends it in memory, so every later cycle should cost the same at any depth. Later
   cycles are timed between consecutive tool answers; the figure is their median.

Usage: ``python benchmarks/loop.py [--quick] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from sessiontree import Store, ToolEnd, run, tool
from sessiontree.testing import reply, tool_call


@tool
def noop(n: int) -> str:
    """Does nothing."""
    return "ok"


def seeded(store: Store, depth: int):
    session = store.create_session()
    session.append_many(
        [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(depth - 1)]
        + [{"role": "user", "content": "go"}]
    )
    return session


def loop_cycle_us(store: Store, depth: int, cycles: int) -> tuple[float, float]:
    """(µs from start to the first tool answer, median µs per later cycle)."""
    session = seeded(store, depth)
    script = iter(
        [*(reply(None, tool_call("noop", {"n": i}, id=f"c{i}")) for i in range(cycles)), reply("done")]
    )

    def model(messages, tools):  # instant, and O(1): no copying of the growing context
        return next(script)

    start = time.perf_counter()
    answered = []  # when each cycle's tool message was committed
    for step in run(store, session, call=model, tools=[noop], max_steps=cycles + 1):
        if isinstance(step, ToolEnd):
            answered.append(time.perf_counter())
    assert len(answered) == cycles and step.reason == "completed", step
    gaps = [b - a for a, b in zip(answered, answered[1:], strict=False)]
    return (answered[0] - start) * 1e6, statistics.median(gaps) * 1e6


def store_cycle_us(store: Store, depth: int, cycles: int) -> float:
    session = seeded(store, depth)
    start = time.perf_counter()
    for i in range(cycles):
        session.append(reply(None, tool_call("noop", {"n": i}, id=f"c{i}")))
        session.append({"calls": [{"id": f"c{i}", "name": "noop", "arguments": "{}"}]}, kind="tool_start")
        session.append({"role": "tool", "tool_call_id": f"c{i}", "content": "ok"})
    return (time.perf_counter() - start) / cycles * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    reps, cycles = (3, 50) if args.quick else (7, 200)
    depths = (100, 2_000) if args.quick else (100, 10_000)
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for depth in depths:
            first, loop, raw = [], [], []
            for rep in range(reps):  # alternate, so noise hits both alike
                with Store(Path(tmp) / f"loop-{depth}-{rep}.db") as store:
                    start_us, cycle_us = loop_cycle_us(store, depth, cycles)
                    first.append(start_us)
                    loop.append(cycle_us)
                with Store(Path(tmp) / f"raw-{depth}-{rep}.db") as store:
                    raw.append(store_cycle_us(store, depth, cycles))
            figures[f"loop_first_cycle_us_depth_{depth}"] = statistics.median(first)
            figures[f"loop_cycle_us_depth_{depth}"] = statistics.median(loop)
            figures[f"store_cycle_us_depth_{depth}"] = statistics.median(raw)
    shallow, deep = depths
    figures["loop_over_store_shallow"] = (
        figures[f"loop_cycle_us_depth_{shallow}"] / figures[f"store_cycle_us_depth_{shallow}"]
    )
    figures["loop_over_store_deep"] = (
        figures[f"loop_cycle_us_depth_{deep}"] / figures[f"store_cycle_us_depth_{deep}"]
    )
    figures["loop_deep_over_shallow"] = (
        figures[f"loop_cycle_us_depth_{deep}"] / figures[f"loop_cycle_us_depth_{shallow}"]
    )
    figures["reps"], figures["cycles"] = reps, cycles
    if args.json:
        json.dump(figures, sys.stdout, indent=2)
        print()
        return
    print(f"agent loop, one tool cycle (3 nodes) — median of {reps} reps of {cycles} cycles")
    print(
        f"{'depth':>8}  {'first cycle µs':>14}  {'loop µs/cycle':>14}  {'store µs/cycle':>15}"
        f"  {'loop/store':>10}"
    )
    for depth in depths:
        first = figures[f"loop_first_cycle_us_depth_{depth}"]
        lo, st = figures[f"loop_cycle_us_depth_{depth}"], figures[f"store_cycle_us_depth_{depth}"]
        print(f"{depth:>8,}  {first:>14.0f}  {lo:>14.1f}  {st:>15.1f}  {lo / st:>9.2f}x")
    print(f"loop cycle, deep / shallow: {figures['loop_deep_over_shallow']:.2f}x")


if __name__ == "__main__":
    main()
