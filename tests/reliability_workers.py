"""Entry points for the processes the reliability tests (and benchmarks/concurrency.py) start.

Two ways in:
- ``multiprocessing`` (spawn) targets: ``append_worker``, ``cas_round_worker``,
  ``decide_worker``, ``resume_worker``. They take plain arguments and report through files.
- ``python tests/reliability_workers.py crash-writer DB LOG SEED``: the writer that the
  crash test kills with SIGKILL. It logs every acknowledged write, flushed and fsynced,
  after the call that made it returned.

Every acknowledgement is written only after the store call returned, so a line in a log
is a promise the store made; the tests check that the store kept it.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
import traceback
from pathlib import Path

from sessiontree import Approve, BranchMoved, Conflict, Pause, Store, aresume, decide, run, tool
from sessiontree.testing import reply, tool_call

# -- concurrent appends ------------------------------------------------------------------


def append_worker(
    db: str,
    session_id: str,
    index: int,
    seconds: float,
    out_dir: str,
    start,
    modes: tuple[str, ...] = ("shared", "own", "cas"),
) -> None:
    """Append for ``seconds`` after ``start`` (a multiprocessing Event) is set.

    Cycles through ``modes``: ``shared`` appends to the branch ``shared`` (the store
    serialises writers), ``own`` to the branch ``own-<index>``, ``cas`` to ``shared`` with
    ``expect_head`` set to the head this process read just before (a loser must get
    ``BranchMoved``). Each acknowledged node goes to ``acks-<index>.log`` as
    ``branch<TAB>node id``; totals and any unexpected error to ``result-<index>.json``.
    """
    out = Path(out_dir)
    result = {"index": index, "acks": 0, "moved": 0, "errors": [], "elapsed": 0.0}
    try:
        with open(out / f"acks-{index}.log", "w") as acks, Store(db) as store:
            session = store.session(session_id)
            start.wait(60)
            began = time.perf_counter()
            deadline = began + seconds
            i = 0
            while time.perf_counter() < deadline:
                mode = modes[i % len(modes)]
                payload = {"role": "user", "content": f"p{index} #{i} {mode}", "w": index, "i": i}
                i += 1
                try:
                    if mode == "cas":
                        head = session.branch("shared").head_id
                        node = session.append(payload, branch="shared", expect_head=head)
                        branch = "shared"
                    else:
                        branch = "shared" if mode == "shared" else f"own-{index}"
                        node = session.append(payload, branch=branch)
                except BranchMoved:
                    if mode != "cas":
                        raise
                    result["moved"] += 1
                    continue
                acks.write(f"{branch}\t{node.id}\n")
                result["acks"] += 1
            result["elapsed"] = time.perf_counter() - began
    except Exception as e:  # reported, so the test can show it
        result["errors"].append(f"{type(e).__name__}: {e}\n{traceback.format_exc()}")
    finally:
        (out / f"result-{index}.json").write_text(json.dumps(result))


def cas_round_worker(db: str, session_id: str, index: int, rounds: int, barrier, out_dir: str) -> None:
    """Each round: read the head of ``cas``, wait until every process has read it, then
    append with ``expect_head`` = that head. Exactly one process per round can win."""
    out = Path(out_dir)
    outcomes: list[str] = []
    try:
        with Store(db) as store:
            session = store.session(session_id)
            for r in range(rounds):
                barrier.wait(60)
                head = session.branch("cas").head_id
                barrier.wait(60)  # nobody writes until everybody has read
                try:
                    node = session.append(
                        {"role": "user", "content": f"round {r} by {index}"}, branch="cas", expect_head=head
                    )
                    outcomes.append(f"won {node.id}")
                except BranchMoved as e:
                    outcomes.append(f"moved {e.expected}")
                barrier.wait(60)  # the round is over for everybody
    except Exception as e:
        outcomes.append(f"error {type(e).__name__}: {e}")
    (out / f"cas-{index}.json").write_text(json.dumps(outcomes))


# -- pause races ---------------------------------------------------------------------


def _outcome(error: Exception) -> str:
    if isinstance(error, BranchMoved):
        return "BranchMoved"
    if isinstance(error, Conflict):
        return "Conflict"
    return f"error {type(error).__name__}: {error}"


def decide_worker(db: str, pause_ids: list[str], who: str, barrier, out_dir: str) -> None:
    """For each pause, all racers decide it at the same moment; record won / the error."""
    outcomes = []
    with Store(db) as store:
        for pause_id in pause_ids:
            barrier.wait(60)
            try:
                node = decide(store, pause_id, {"e": Approve()}, by=who)
                outcomes.append(f"won {node.id}")
            except Exception as e:
                outcomes.append(_outcome(e))
    Path(out_dir, f"decide-{who}.json").write_text(json.dumps(outcomes))


TOOL_LOG_ENV = "RELIABILITY_TOOL_LOG"


@tool(idempotent=False)
def transfer(amount: int, ctx_note: str = "") -> str:
    """Move money (must never run twice): records each execution in $RELIABILITY_TOOL_LOG."""
    fd = os.open(os.environ[TOOL_LOG_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{os.getpid()} {amount} {ctx_note}\n".encode())
    finally:
        os.close(fd)
    return f"transferred {amount}"


def resume_worker(db: str, pause_ids: list[str], who: str, barrier, out_dir: str, tool_log: str) -> None:
    """For each decided pause, all racers call ``resume`` at the same moment."""
    os.environ[TOOL_LOG_ENV] = tool_log
    outcomes = []
    with Store(db) as store:
        for pause_id in pause_ids:
            barrier.wait(60)
            try:
                steps = list(
                    _drain(aresume(store, pause_id, call=lambda m, t: reply("done"), tools=[transfer]))
                )
                outcomes.append(f"won {steps[-1].reason}")
            except Exception as e:
                outcomes.append(_outcome(e))
    Path(out_dir, f"resume-{who}.json").write_text(json.dumps(outcomes))


def branch_worker(db: str, pause_ids: list[str], who: str, barrier, out_dir: str, tool_log: str) -> None:
    """For each decided pause with two branches at its decision, racer r0 runs ``main`` and
    r1 runs ``alt`` at the same moment; an approval asked again is a pause."""
    os.environ[TOOL_LOG_ENV] = tool_log
    branch = "main" if who == "r0" else "alt"
    outcomes = []
    with Store(db) as store:
        for pause_id in pause_ids:
            session = store.session(store.node(pause_id).session_id)
            barrier.wait(60)
            try:
                steps = list(
                    run(
                        store,
                        session,
                        branch,
                        call=lambda m, t: reply("done"),
                        tools=[transfer],
                        approve=lambda call: Pause("asked again"),
                    )
                )
                outcomes.append(steps[-1].reason)
            except Exception as e:
                outcomes.append(_outcome(e))
    Path(out_dir, f"resume-{who}.json").write_text(json.dumps(outcomes))


def pause_worker(
    db: str, who: str, start, out_dir: str, tool_log: str, poll: float, until_idle: bool, waiting=None
) -> None:
    """A ``work`` loop: resume whatever is decided; record the pauses this worker carried on.
    ``waiting`` (an Event) is set when the loop first waits for a decision: it has
    looked, found nothing to carry on, and listens."""
    from sessiontree import Resuming, work

    os.environ[TOOL_LOG_ENV] = tool_log
    carried = []
    with Store(db) as store:
        if waiting is not None:
            listen = store.storage.wait_for_decisions

            def announce_then_listen(timeout: float) -> bool:
                if timeout > 0:  # the first call, with 0, only starts listening
                    waiting.set()
                return listen(timeout)

            store.storage.wait_for_decisions = announce_then_listen  # type: ignore[method-assign]
        start.wait(60)
        for step in work(
            store, poll=poll, until_idle=until_idle, call=lambda m, t: reply("done"), tools=[transfer]
        ):
            if isinstance(step, Resuming):
                carried.append(step.pause_id)
                Path(out_dir, f"work-{who}.json").write_text(json.dumps(carried))
    Path(out_dir, f"work-{who}.json").write_text(json.dumps(carried))


INSIDE_ENV = "RELIABILITY_INSIDE"


@tool(idempotent=False)
def stuck_transfer(amount: int) -> str:
    """Move money, then never return: records the execution in $RELIABILITY_TOOL_LOG, says
    it is inside the tool by writing its pid to $RELIABILITY_INSIDE, and waits to be killed."""
    transfer(amount, "stuck")
    Path(os.environ[INSIDE_ENV]).write_text(str(os.getpid()))
    threading.Event().wait()
    return "never"


def stuck_worker(db: str, tool_log: str, inside: str) -> None:
    """A ``work`` loop whose only tool hangs inside its call: the test kills it there."""
    from sessiontree import work

    os.environ[TOOL_LOG_ENV], os.environ[INSIDE_ENV] = tool_log, inside
    with Store(db) as store:
        for _ in work(store, poll=0.2, call=lambda m, t: reply("done"), tools=[stuck_transfer]):
            pass


def _drain(steps):
    import asyncio

    async def collect():
        return [s async for s in steps]

    return asyncio.run(collect())


# -- the writer that gets killed ---------------------------------------------------------


@tool
def lookup(key: str) -> str:
    """An idempotent tool: safe to run again after a crash."""
    return f"value of {key}"


def agent_model(messages, tools):
    """Asks for two lookups, then answers once they are in."""
    if messages[-1]["role"] == "tool":
        return reply("looked up")
    n = len(messages)
    return reply(
        None,
        tool_call("lookup", {"key": f"a{n}"}, id=f"c{n}a"),
        tool_call("lookup", {"key": f"b{n}"}, id=f"c{n}b"),
    )


class AckLog:
    """One JSON line per acknowledged write; flushed and fsynced before going on."""

    def __init__(self, path: str) -> None:
        self.f = open(path, "a")  # noqa: SIM115 - open for the life of the writer

    def ack(self, op: str, **fields) -> None:
        self.f.write(json.dumps({"op": op, **fields}) + "\n")
        self.f.flush()
        os.fsync(self.f.fileno())


def crash_writer(db: str, log_path: str, seed: int) -> None:
    """Write forever (until killed): appends, batches, forks, checkpoints, agent runs."""
    rng = random.Random(seed)
    log = AckLog(log_path)
    with Store(db) as store:
        sessions = store.sessions()
        session = store.session(sessions[0].id) if sessions else store.create_session("crash")
        print("ready", flush=True)
        n = 0
        while True:
            n += 1
            op = rng.choices(["append", "batch", "fork", "checkpoint", "agent"], [4, 4, 1, 1, 2])[0]
            tag = f"{seed}-{n}"
            if op == "append":
                node = session.append({"role": "user", "content": f"plain {tag}"}, branch="main")
                log.ack("append", ids=[node.id])
            elif op == "batch":
                size = rng.randint(2, 8)
                nodes = session.append_many(
                    [
                        {"role": "user", "content": f"batch {tag} {i}", "batch": tag, "n": size}
                        for i in range(size)
                    ],
                    branch=rng.choice(["main", "batches"]),
                )
                log.ack("batch", ids=[x.id for x in nodes], batch=tag)
            elif op == "fork":
                head = session.branch("main").head_id if _has(session, "main") else None
                if head:
                    branch = session.fork(f"fork-{tag}", at=head)
                    log.ack("fork", name=branch.name, at=head)
            elif op == "checkpoint":
                if _has(session, "main"):
                    cp = session.checkpoint(f"cp-{tag}", at="main")
                    log.ack("checkpoint", name=cp.name, at=cp.node_id)
            else:
                if _has(session, "agent"):  # finish whatever a kill cut off first
                    for step in run(store, session, "agent", call=agent_model, tools=[lookup]):
                        if step.node is not None:
                            log.ack("agent", ids=[step.node.id])
                node = session.append({"role": "user", "content": f"agent {tag}"}, branch="agent")
                log.ack("agent", ids=[node.id])
                for step in run(store, session, "agent", call=agent_model, tools=[lookup]):
                    if step.node is not None:
                        log.ack("agent", ids=[step.node.id])


def _has(session, name: str) -> bool:
    return any(b.name == name for b in session.branches())


if __name__ == "__main__":
    command = sys.argv[1]
    if command == "crash-writer":
        crash_writer(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        raise SystemExit(f"unknown command {command!r}")


# -- a bounded write-ahead log under writers and readers ----------------------------------


def wal_writer(
    db: str, session_id: str, index: int, seconds: float, out_dir: str, start, wal_limit: int
) -> None:
    """Append 1 KB messages to ``w<index>`` for ``seconds``; log each acknowledged node id."""
    with open(Path(out_dir) / f"wal-acks-{index}.log", "w") as acks, Store(db) as store:
        store.storage.wal_limit = wal_limit
        session = store.session(session_id)
        start.wait(60)
        deadline = time.perf_counter() + seconds
        i = 0
        while time.perf_counter() < deadline:
            node = session.append({"role": "user", "content": "x" * 1000, "i": i}, branch=f"w{index}")
            acks.write(node.id + "\n")
            i += 1


def wal_reader(db: str, session_id: str, seconds: float, start) -> None:
    """Read every branch inside one read transaction, over and over: readers that always
    hold some snapshot are what keeps a passive checkpoint from ever emptying the log."""
    with Store(db) as store:
        session = store.session(session_id)
        start.wait(60)
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            with store.storage.snapshot():
                for branch in session.branches():
                    session.messages(branch.name)


# -- opening a new file from many processes at once ------------------------------------------


def open_worker(paths: list[str], index: int, barrier, out_dir: str, widen: float) -> None:
    """For each path (a file nobody has opened yet): open it at the same moment as every
    other process, then write a session to it. With ``widen`` > 0, every look at a file's
    tables first waits up to that many seconds: the moment, after the schema version was
    read, in which another opener may commit a migration. Each outcome goes to
    ``open-<index>.json``: "ok" or the error."""
    if widen:
        from sessiontree import db

        rng = random.Random(index)
        list_tables = db.foreign_tables

        def slowly(conn):
            time.sleep(rng.uniform(0, widen))
            return list_tables(conn)

        db.foreign_tables = slowly
    outcomes = []
    for path in paths:
        barrier.wait(60)
        try:
            with Store(path) as store:
                store.create_session(f"opener {index}").append({"role": "user", "content": "hi"})
            outcomes.append("ok")
        except Exception as e:
            outcomes.append(f"{type(e).__name__}: {e}")
    Path(out_dir, f"open-{index}.json").write_text(json.dumps(outcomes))
