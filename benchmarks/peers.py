"""Side-by-side: sessiontree, a minimal raw-SQL floor and the peers, on one agent workload.

The workload (the same for every system): a conversation of 500 turns (``--quick``: 50).
Each turn first reads the branch as context -- the full message list, decoded to the
Python objects the library hands its users -- then appends the turn's 4 messages (user,
assistant with a tool call, tool result, assistant), each carrying about 1 KB of text, in
the message shape that system stores. No model is ever called and nothing leaves the
machine. Every system writes its own fresh file with WAL and ``synchronous=NORMAL``.

Systems, each used through its public API the way its own docs show:

- ``sessiontree``: ``Store(path)``; ``Session.messages("main")``, then
  ``Session.append_many`` of the 4 messages (one transaction per turn).
- ``floor``: ``benchmarks/floor.py``, the minimal schema a competent engineer would write
  (integer-keyed ``nodes`` plus a ``heads`` row; recursive CTE and ``json.loads``).
- ``langgraph``: langgraph-checkpoint-sqlite's ``SqliteSaver``; the state is a
  ``messages`` channel of langchain-core messages, read with ``get_tuple`` of the latest
  checkpoint and written with one ``put`` per turn.
- ``agents-sqlite`` / ``agents-advanced``: the OpenAI Agents SDK's ``SQLiteSession`` and
  ``AdvancedSQLiteSession`` (``await get_items()``, ``await add_items([...])``) with
  Responses-API items.
- ``llm``: simonw/llm's log store (``llm.logs.LogStore``): ``thread_messages`` (what
  ``llm -c`` reads) and ``append`` of ``llm.Message`` objects.

Reported per system: ms per turn (read + append + dropping the list read, so each system
pays for its own objects) at turns 10, 100, 250 and 500, each the median over the turns
within +-5 of that point across all reps; ms to read the whole branch
cold (a new connection and library object, as a new process would; the OS page cache is
warm; the objects already in the heap are frozen out of the garbage collector's reach, as
a new process would not have them); bytes per message (pages in use after a WAL
checkpoint minus those of the empty file, over the message count); ms per fork at the
middle turn where the system has a fork ("n/a" where not). Ratios are printed as
sessiontree / peer and as system / floor.

How: all systems run in one process, interleaved turn by turn in a rotating order, so
machine noise hits them alike; every rep starts from fresh files in a temporary directory
that is removed. A peer whose package is missing is skipped with a note (the ``bench``
extra installs them: ``pip install -e '.[bench]'``).

Usage: ``python benchmarks/peers.py [--quick] [--json] [--reps N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from floor import Floor

from sessiontree import Store

SIZE = 1000  # characters of text per message
LOREM = "lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor. "
WINDOW = 5
MEASURES = ("turn_ms", "cold_read_ms", "bytes_per_message", "fork_ms")


def text(what: str, turn: int) -> str:
    return (f"{what} of turn {turn}: " + LOREM * (SIZE // len(LOREM) + 1))[:SIZE]


def chat_turn(turn: int) -> list[dict[str, Any]]:
    """The turn as chat-completions messages (sessiontree's and the floor's shape)."""
    call = f"call_{turn:05d}"
    arguments = json.dumps({"query": text("query", turn)})
    return [
        {"role": "user", "content": text("question", turn)},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call, "type": "function", "function": {"name": "search", "arguments": arguments}}
            ],
        },
        {"role": "tool", "tool_call_id": call, "content": text("result", turn)},
        {"role": "assistant", "content": text("answer", turn)},
    ]


_loop: asyncio.AbstractEventLoop | None = None


def wait(coroutine):
    """Run one coroutine of the async peers on the one event loop this process keeps."""
    global _loop
    if _loop is None:
        _loop = asyncio.new_event_loop()
    return _loop.run_until_complete(coroutine)


class System:
    """One system under test on its own file. Subclasses fill in the five operations."""

    name = ""
    package = ""  # the distribution whose version is reported
    caveat = ""
    can_fork = True

    def __init__(self, path: Path) -> None:
        self.path = path

    def shape(self, turn: int) -> list[Any]:
        return chat_turn(turn)

    def read(self) -> list[Any]:
        raise NotImplementedError

    def write(self, messages: list[Any], context: list[Any]) -> None:
        raise NotImplementedError

    def mark(self) -> None:
        """Remember the current head: the point the forks start from."""
        raise NotImplementedError

    def fork(self, name: str) -> None:
        raise NotImplementedError

    def cold_read(self) -> int:
        """Open the file afresh, read the whole branch, close; return the message count."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class SessionTree(System):
    name, package = "sessiontree", "sessiontree"

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.store = Store(path)
        self.session = self.store.create_session("bench")
        self.last: str | None = None

    def read(self) -> list[Any]:
        return self.session.messages("main") if self.last else []  # no branch before the first append

    def write(self, messages: list[Any], context: list[Any]) -> None:
        self.last = self.session.append_many(messages)[-1].id

    def mark(self) -> None:
        self.anchor = self.last

    def fork(self, name: str) -> None:
        self.session.fork(name, at=self.anchor)

    def cold_read(self) -> int:
        with Store(self.path) as store:
            return len(store.session(self.session.id).messages("main"))

    def close(self) -> None:
        self.store.close()


class RawFloor(System):
    name, package = "floor", ""
    caveat = "no compare-and-set, validation, ids or timestamps: the least any tree store can do"

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.floor = Floor(path)

    def read(self) -> list[Any]:
        return self.floor.messages()

    def write(self, messages: list[Any], context: list[Any]) -> None:
        self.floor.append_many(messages)

    def mark(self) -> None:
        self.anchor = self.floor.head

    def fork(self, name: str) -> None:
        self.floor.fork(name, self.anchor)

    def cold_read(self) -> int:
        floor = Floor(self.path)
        try:
            return len(floor.messages())
        finally:
            floor.close()

    def close(self) -> None:
        self.floor.close()


class LangGraph(System):
    name, package = "langgraph", "langgraph-checkpoint-sqlite"
    caveat = (
        "one put per turn; a compiled graph writes one checkpoint per super-step (about 4 per "
        "turn here: input, model, tools, model), each a full copy of the message list, plus "
        "its pending-writes rows, so this is a lower bound; the beta "
        "DeltaChannel (needs the langgraph runtime) is not measured; reads return langchain "
        "message objects; fork = get_tuple + put of a copy (source='fork') in the same thread"
    )

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        from langgraph.checkpoint.sqlite import SqliteSaver

        self.conn = sqlite3.connect(path, check_same_thread=False)  # as its docs show
        self.conn.execute("PRAGMA synchronous = NORMAL")  # the saver turns WAL on itself
        self.saver = SqliteSaver(self.conn)
        self.config = {"configurable": {"thread_id": "bench", "checkpoint_ns": ""}}
        self.latest: Any = None
        self.step = 0

    def shape(self, turn: int) -> list[Any]:
        from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

        chat = chat_turn(turn)
        call = chat[1]["tool_calls"][0]
        return [
            HumanMessage(chat[0]["content"], id=f"u{turn}"),
            AIMessage(
                "",
                id=f"c{turn}",
                tool_calls=[
                    {"name": "search", "args": json.loads(call["function"]["arguments"]), "id": call["id"]}
                ],
            ),
            ToolMessage(chat[2]["content"], tool_call_id=call["id"], id=f"t{turn}"),
            AIMessage(chat[3]["content"], id=f"a{turn}"),
        ]

    def read(self) -> list[Any]:
        self.latest = self.saver.get_tuple(self.config)
        return self.latest.checkpoint["channel_values"]["messages"] if self.latest else []

    def _put(self, base: Any, values: dict[str, Any], source: str) -> dict[str, Any]:
        from langgraph.checkpoint.base import create_checkpoint, empty_checkpoint

        previous = base.checkpoint if base else empty_checkpoint()
        version = self.saver.get_next_version(previous["channel_versions"].get("messages"), None)
        self.step += 1
        checkpoint = create_checkpoint(previous, None, self.step)
        checkpoint["channel_values"] = values
        checkpoint["channel_versions"] = {**previous["channel_versions"], "messages": version}
        metadata_ = {"source": source, "step": self.step, "parents": {}}
        return self.saver.put(
            base.config if base else self.config, checkpoint, metadata_, {"messages": version}
        )

    def write(self, messages: list[Any], context: list[Any]) -> None:
        self.last = self._put(self.latest, {"messages": [*context, *messages]}, "loop")

    def mark(self) -> None:
        self.anchor = self.last

    def fork(self, name: str) -> None:
        base = self.saver.get_tuple(self.anchor)
        self._put(base, dict(base.checkpoint["channel_values"]), "fork")

    def cold_read(self) -> int:
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(self.path, check_same_thread=False)
        try:
            found = SqliteSaver(conn).get_tuple(self.config)
            return len(found.checkpoint["channel_values"]["messages"])
        finally:
            conn.close()

    def close(self) -> None:
        self.conn.close()


def responses_turn(turn: int) -> list[dict[str, Any]]:
    """The turn as Responses-API input items, the shape the Agents SDK stores."""
    chat = chat_turn(turn)
    call = chat[1]["tool_calls"][0]
    return [
        {"role": "user", "content": chat[0]["content"]},
        {
            "type": "function_call",
            "id": f"fc_{turn:05d}",
            "call_id": call["id"],
            "name": "search",
            "arguments": call["function"]["arguments"],
            "status": "completed",
        },
        {"type": "function_call_output", "call_id": call["id"], "output": chat[2]["content"]},
        {
            "type": "message",
            "id": f"msg_{turn:05d}",
            "role": "assistant",
            "status": "completed",
            "content": [
                {"type": "output_text", "text": chat[3]["content"], "annotations": [], "logprobs": []}
            ],
        },
    ]


def normal_sync(cls: type) -> type:
    """The session class with synchronous=NORMAL on each connection it opens (it sets WAL only)."""

    class NormalSync(cls):  # type: ignore[misc, valid-type]
        @staticmethod
        def _configure_connection(conn: sqlite3.Connection) -> None:
            cls._configure_connection(conn)
            conn.execute("PRAGMA synchronous = NORMAL")

    return NormalSync


class AgentsSQLite(System):
    name, package, can_fork = "agents-sqlite", "openai-agents", False
    caveat = "async API driven from one event loop; synchronous=NORMAL set through a subclass (default FULL)"

    def open(self, create: bool) -> Any:
        from agents.memory import SQLiteSession

        return normal_sync(SQLiteSession)("bench", self.path)

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.session = self.open(create=True)

    def shape(self, turn: int) -> list[Any]:
        return responses_turn(turn)

    def read(self) -> list[Any]:
        return wait(self.session.get_items())

    def write(self, messages: list[Any], context: list[Any]) -> None:
        wait(self.session.add_items(messages))

    def mark(self) -> None:
        self.anchor_turn = len(wait(self.session.get_items())) // 4 + 1

    def cold_read(self) -> int:
        session = self.open(create=False)
        try:
            return len(wait(session.get_items()))
        finally:
            session.close()

    def close(self) -> None:
        self.session.close()


class AgentsAdvanced(AgentsSQLite):
    name, can_fork = "agents-advanced", True
    caveat = AgentsSQLite.caveat + "; fork = create_branch_from_turn (copies the structure rows)"

    def open(self, create: bool) -> Any:
        from agents.extensions.memory import AdvancedSQLiteSession

        return normal_sync(AdvancedSQLiteSession)(session_id="bench", db_path=self.path, create_tables=create)

    def fork(self, name: str) -> None:
        wait(self.session.create_branch_from_turn(self.anchor_turn, name))

    def after_fork(self) -> None:
        wait(self.session.switch_to_branch("main"))


class LLM(System):
    name, package = "llm", "llm"
    caveat = (
        "LogStore.append writes the message and part rows Response.log_to_db writes, without the "
        "per-call 'turns' row (no model ran); each message commits on its own; llm's default "
        "journal is rollback, WAL set here"
    )

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        import sqlite_utils
        from llm.logs import LogStore

        self.db = sqlite_utils.Database(path)
        self.db.enable_wal()
        self.db.execute("PRAGMA synchronous = NORMAL")
        self.store = LogStore(self.db)
        self.thread = self.store.create_thread(name="bench")

    def shape(self, turn: int) -> list[Any]:
        from llm.parts import Message, TextPart, ToolCallPart, ToolResultPart

        chat = chat_turn(turn)
        call = chat[1]["tool_calls"][0]
        arguments = json.loads(call["function"]["arguments"])
        return [
            Message("user", [TextPart(chat[0]["content"])]),
            Message("assistant", [ToolCallPart(name="search", arguments=arguments, tool_call_id=call["id"])]),
            Message(
                "tool", [ToolResultPart(name="search", output=chat[2]["content"], tool_call_id=call["id"])]
            ),
            Message("assistant", [TextPart(chat[3]["content"])]),
        ]

    def read(self) -> list[Any]:
        return self.store.thread_messages(self.thread)

    def write(self, messages: list[Any], context: list[Any]) -> None:
        self.last = self.store.append(self.thread, messages)

    def mark(self) -> None:
        self.anchor = self.last

    def fork(self, name: str) -> None:
        self.store.fork(self.anchor, name=name)

    def cold_read(self) -> int:
        import sqlite_utils
        from llm.logs import LogStore

        db = sqlite_utils.Database(self.path)
        try:
            return len(LogStore(db).thread_messages(self.thread))
        finally:
            db.close()

    def close(self) -> None:
        self.db.close()


SYSTEMS: list[type[System]] = [SessionTree, RawFloor, LangGraph, AgentsSQLite, AgentsAdvanced, LLM]
IMPORTS = {"langgraph": "langgraph.checkpoint.sqlite", "agents-sqlite": "agents", "agents-advanced": "agents"}
IMPORTS["llm"] = "llm.logs"


def available() -> tuple[list[type[System]], dict[str, str]]:
    systems, skipped = [], {}
    for cls in SYSTEMS:
        module = IMPORTS.get(cls.name)
        try:
            if module:
                __import__(module)
        except ImportError as exc:
            skipped[cls.name] = f"{cls.package} is not installed ({exc}); pip install -e '.[bench]'"
        else:
            systems.append(cls)
    return systems, skipped


def used_bytes(path: Path) -> int:
    """Bytes of the database's pages in use, after folding the WAL into it (free pages, which
    a migration that rebuilt tables leaves, are reused by the first rows: not counted)."""
    conn = sqlite3.connect(path)
    try:
        busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        assert busy == 0, f"could not checkpoint {path}"
        pages, free, size = (
            conn.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_count", "freelist_count", "page_size")
        )
        return (pages - free) * size
    finally:
        conn.close()


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def one_turn(system: System, turn: int) -> tuple[float, float]:
    """Read the branch, append the turn's 4 messages: (s reading, s appending)."""
    messages = system.shape(turn)
    start = time.perf_counter()
    context = system.read()
    middle = time.perf_counter()
    system.write(messages, context)
    end = time.perf_counter()
    assert len(context) == 4 * (turn - 1), (system.name, len(context))
    # Each system pays for dropping its own context (thousands of freshly decoded
    # objects for a system that decodes on every read), timed here: left to the
    # next ``context = ...``, it would be charged to the next system's read.
    del context
    freed = time.perf_counter() - end
    return middle - start + freed, end - middle


def one_rep(classes: list[type[System]], tmp: Path, turns: int, forks: int, cold: int, samples: dict) -> None:
    systems = [cls(tmp / f"{cls.name}.db") for cls in classes]
    empty = {}
    for system in systems:
        system.read()  # lets a lazy peer create its tables before the empty size is taken
        empty[system.name] = used_bytes(system.path)
    fork_turn = turns // 2
    for turn in range(1, turns + 1):
        shift = turn % len(systems)
        for system in systems[shift:] + systems[:shift]:
            samples[system.name]["turns"].setdefault(turn, []).append(one_turn(system, turn))
            if turn == fork_turn - 1:
                system.mark()
    for system in systems:
        size = used_bytes(system.path) - empty[system.name]
        samples[system.name]["bytes_per_message"].append(size / (4 * turns))
    for i in range(cold):
        shift = i % len(systems)
        for system in systems[shift:] + systems[:shift]:
            count = 0

            def read(s=system) -> None:
                nonlocal count
                count = s.cold_read()

            # A new process's heap holds none of the other systems' objects: without this,
            # a read that allocates sets off collections that walk every system's state
            # (LangGraph's and llm's thousands of message objects) and is charged for them.
            gc.collect()
            gc.freeze()
            try:
                samples[system.name]["cold_read"].append(timed(read))
            finally:
                gc.unfreeze()
            assert count == 4 * turns, (system.name, count)
    forking = [s for s in systems if s.can_fork]
    for i in range(forks):
        shift = i % len(forking) if forking else 0
        for system in forking[shift:] + forking[:shift]:
            samples[system.name]["fork"].append(timed(lambda s=system, n=f"fork-{i}": s.fork(n)))
            if hasattr(system, "after_fork"):
                system.after_fork()
    for system in systems:
        system.close()


def version(cls: type[System]) -> str:
    if not cls.package:
        return f"SQLite {sqlite3.sqlite_version}"
    return metadata.version(cls.package)


def summarize(cls: type[System], s: dict, points: list[int]) -> dict[str, Any]:
    def window(point: int) -> list[tuple[float, float]]:
        return [t for turn in range(point - WINDOW, point + WINDOW + 1) for t in s["turns"].get(turn, [])]

    result: dict[str, Any] = {"version": version(cls), "caveat": cls.caveat}
    for key, part in (
        ("turn_ms", lambda r, w: r + w),
        ("read_ms", lambda r, w: r),
        ("write_ms", lambda r, w: w),
    ):
        result[key] = {str(p): round(statistics.median(part(*t) for t in window(p)) * 1e3, 3) for p in points}
    result["cold_read_ms"] = round(statistics.median(s["cold_read"]) * 1e3, 3)
    result["bytes_per_message"] = round(statistics.median(s["bytes_per_message"]), 1)
    result["fork_ms"] = round(statistics.median(s["fork"]) * 1e3, 4) if cls.can_fork else None
    return result


def flatten(system: dict) -> dict[str, float | None]:
    """One number per measure: 'turn_ms@10', ..., 'cold_read_ms', 'bytes_per_message', 'fork_ms'."""
    out: dict[str, float | None] = {f"turn_ms@{p}": v for p, v in system["turn_ms"].items()}
    for key in MEASURES[1:]:
        out[key] = system[key]
    return out


def ratios(systems: dict[str, dict], over_floor: bool) -> dict[str, dict[str, float | None]]:
    """Per system and measure: system / floor, or else sessiontree / system (None: no fork)."""
    sessiontree, floor = flatten(systems["sessiontree"]), flatten(systems["floor"])
    table = {}
    for name, figures in systems.items():
        row = {}
        for key, value in flatten(figures).items():
            top, bottom = (value, floor[key]) if over_floor else (sessiontree[key], value)
            row[key] = round(top / bottom, 3) if top and bottom else None
        table[name] = row
    return table


def machine() -> dict:
    return {
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
    }


def run(quick: bool, reps: int | None) -> dict[str, Any]:
    turns = 50 if quick else 500
    reps = reps or (1 if quick else 3)
    points = [10, 25, 50] if quick else [10, 100, 250, 500]
    forks, cold = (3, 3) if quick else (10, 5)
    classes, skipped = available()
    samples = {
        cls.name: {"turns": {}, "cold_read": [], "bytes_per_message": [], "fork": []} for cls in classes
    }
    for _ in range(reps):
        with tempfile.TemporaryDirectory(prefix="sessiontree-peers-") as d:
            one_rep(classes, Path(d), turns, forks, cold, samples)
    systems = {cls.name: summarize(cls, samples[cls.name], points) for cls in classes}
    return {
        "quick": quick,
        "reps": reps,
        "turns": turns,
        "messages": 4 * turns,
        "message_chars": SIZE,
        "window": WINDOW,
        "fork_at_turn": turns // 2,
        "machine": machine(),
        "systems": systems,
        "skipped": skipped,
        "sessiontree_over_peer": ratios(systems, over_floor=False),
        "over_floor": ratios(systems, over_floor=True),
    }


def label(key: str, r: dict) -> str:
    if key.startswith("turn_ms@"):
        return f"ms per turn at turn {key.split('@')[1]}"
    return {
        "cold_read_ms": f"cold read of {r['messages']:,} messages (ms)",
        "bytes_per_message": "bytes per message",
        "fork_ms": f"fork at turn {r['fork_at_turn']} (ms)",
    }[key]


def print_table(r: dict) -> None:
    m, names = r["machine"], list(r["systems"])
    print(
        f"{r['turns']} turns x 4 messages of ~{r['message_chars']} chars; medians of {r['reps']} reps "
        f"(turns: +-{r['window']} around each point) — {m['nproc']} cpus, Python {m['python']}, "
        f"SQLite {m['sqlite']}\n"
    )
    header = f"{'':<36}" + "".join(f"{n:>16}" for n in names)
    for title, table in (
        ("figures", {n: flatten(s) for n, s in r["systems"].items()}),
        ("sessiontree / system (below 1: sessiontree is faster or smaller)", r["sessiontree_over_peer"]),
        ("system / floor", r["over_floor"]),
    ):
        print(title)
        print(header)
        for key in flatten(r["systems"][names[0]]):
            cells = [table[n][key] for n in names]
            fmt = "{:>16.2f}" if title == "figures" else "{:>15.2f}x"
            print(
                f"{label(key, r):<36}"
                + "".join("{:>16}".format("n/a") if c is None else fmt.format(c) for c in cells)
            )
        print()
    print("versions: " + ", ".join(f"{n} {s['version']}" for n, s in r["systems"].items()))
    for name, system in r["systems"].items():
        if system["caveat"]:
            print(f"note, {name}: {system['caveat']}")
    for name, why in r["skipped"].items():
        print(f"skipped, {name}: {why}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="50 turns, 1 rep: a smoke run of seconds")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--reps", type=int, help="repetitions (default 3; --quick: 1)")
    args = parser.parse_args(argv)
    result = run(args.quick, args.reps)
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
    else:
        print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
