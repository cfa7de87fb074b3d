"""A LangGraph messages graph on ``SessiontreeSaver`` against LangGraph's own SQLite savers.

The workload: one compiled ``StateGraph`` whose state is a ``messages`` channel
(``add_messages``) and whose one node, ``model``, answers the last message (no model is
called: the answer is made up, about 1 KB of text like the question). One step is one
``invoke``: a user message in, the answer out (LangGraph writes three checkpoints and two
sets of writes for it). 300 steps (``--quick``: 30) on one thread.

Systems, each on its own fresh SQLite file (WAL, ``synchronous=NORMAL``), the same graph
compiled with each, interleaved step by step in a rotating order in one process:
- ``sessiontree``: ``SessiontreeSaver(Store(path))`` with ``graph.invoke``;
- ``sqlite``: langgraph-checkpoint-sqlite's ``SqliteSaver`` with ``graph.invoke``;
- ``sessiontree-async``: ``SessiontreeSaver(Store(path))`` with ``await graph.ainvoke``;
- ``async-sqlite``: its ``AsyncSqliteSaver`` (aiosqlite) with ``await graph.ainvoke``.

Reported per system: ms per step (the median over all steps, and over the last 30), and
bytes on disk after the last step (the pages in use after folding the WAL in, as
``peers.py`` counts them); the bars of issue 28: bytes <= 0.1x ``SqliteSaver``'s, time per
step <= ``AsyncSqliteSaver``'s. Usage: ``python benchmarks/langgraph_graph.py [--quick]
[--json] [--steps N]`` (needs the ``langgraph`` extra).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from peers import used_bytes  # this folder is on the path when run as a script

from sessiontree import Store
from sessiontree.integrations.langgraph import SessiontreeSaver

SIZE = 1000
LOREM = "lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor. "
CONFIG = {"configurable": {"thread_id": "bench"}}


def text(what: str, step: int) -> str:
    return (f"{what} of step {step}: " + LOREM * (SIZE // len(LOREM) + 1))[:SIZE]


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def build(saver: Any) -> Any:
    def model(state: State) -> dict[str, Any]:
        return {"messages": [AIMessage(text("answer", len(state["messages"])))]}

    builder = StateGraph(State)
    builder.add_node("model", model)
    builder.add_edge(START, "model")
    builder.add_edge("model", END)
    return builder.compile(checkpointer=saver)


class System:
    name = ""
    asynchronous = False

    def __init__(self, path: Path) -> None:
        self.path = path
        self.times: list[float] = []

    async def open(self) -> None: ...

    async def step(self, n: int) -> None:
        message = {"messages": [HumanMessage(text("question", n))]}
        start = time.perf_counter()
        if self.asynchronous:
            await self.graph.ainvoke(message, CONFIG)
        else:
            self.graph.invoke(message, CONFIG)
        self.times.append(time.perf_counter() - start)

    async def close(self) -> None: ...


class Sessiontree(System):
    name = "sessiontree"

    async def open(self) -> None:
        self.store = Store(self.path)
        self.graph = build(SessiontreeSaver(self.store))

    async def close(self) -> None:
        self.store.close()


class SessiontreeAsync(Sessiontree):
    name, asynchronous = "sessiontree-async", True


class Sqlite(System):
    name = "sqlite"

    async def open(self) -> None:
        from langgraph.checkpoint.sqlite import SqliteSaver

        self.conn = sqlite3.connect(self.path, check_same_thread=False)  # as its docs show
        self.conn.execute("PRAGMA synchronous = NORMAL")  # the saver turns WAL on itself
        self.graph = build(SqliteSaver(self.conn))

    async def close(self) -> None:
        self.conn.close()


class AsyncSqlite(System):
    name, asynchronous = "async-sqlite", True

    async def open(self) -> None:
        import aiosqlite
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        self.conn = await aiosqlite.connect(self.path)
        await self.conn.execute("PRAGMA synchronous = NORMAL")
        self.graph = build(AsyncSqliteSaver(self.conn))

    async def close(self) -> None:
        await self.conn.close()


SYSTEMS = (Sessiontree, Sqlite, SessiontreeAsync, AsyncSqlite)


async def run(steps: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="sessiontree-langgraph-") as d:
        systems = [cls(Path(d) / f"{cls.name}.db") for cls in SYSTEMS]
        for system in systems:
            await system.open()
        for n in range(steps):
            for system in systems[n % len(systems) :] + systems[: n % len(systems)]:
                await system.step(n)
        for system in systems:
            await system.close()
        figures = {
            s.name: {
                "ms_per_step": statistics.median(s.times) * 1000,
                "ms_per_step_last_30": statistics.median(s.times[-30:]) * 1000,
                "bytes": used_bytes(s.path),
            }
            for s in systems
        }
    ours, theirs = figures["sessiontree"], figures["sqlite"]
    bars = {
        "bytes vs SqliteSaver": ours["bytes"] / theirs["bytes"],
        "ms per step vs AsyncSqliteSaver (sync saver)": ours["ms_per_step"]
        / figures["async-sqlite"]["ms_per_step"],
        "ms per step vs AsyncSqliteSaver (async saver)": figures["sessiontree-async"]["ms_per_step"]
        / figures["async-sqlite"]["ms_per_step"],
    }
    return {"steps": steps, "systems": figures, "ratios": bars}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="30 steps")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = asyncio.run(run(30 if args.quick else args.steps))
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{result['steps']} steps of a messages graph (one invoke each)")
    print(f"{'system':<20}{'ms/step':>10}{'last 30':>10}{'bytes':>14}")
    for name, f in result["systems"].items():
        print(f"{name:<20}{f['ms_per_step']:>10.2f}{f['ms_per_step_last_30']:>10.2f}{f['bytes']:>14,}")
    for what, ratio in result["ratios"].items():
        print(f"sessiontree / {what}: {ratio:.3f}x")


if __name__ == "__main__":
    main()
