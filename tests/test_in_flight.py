"""Work in flight: what can still be carried on is listed, what cannot is refused with a
reason, and a worker neither spins on what it cannot resume, nor dies with its LISTEN
connection, nor leaves a run it was killed in stranded.

- a pause no branch stands at (the branch moved back, or on) is not pending, and deciding
  or resuming it says why;
- a trashed session's pauses are not pending; a drop policy leaves a session with work in
  flight alone and says so;
- a worker whose only resumable item raises ``Conflict`` waits its poll (counted looks,
  not timers);
- a worker killed inside an unsafe tool: the next worker writes the ``interrupted``
  pause, which ``pending`` and the inbox show and a human decides;
- a worker whose listener is terminated by the server listens again and is woken by the
  next decision.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

import reliability_workers as workers
from sessiontree import (
    Approve,
    Conflict,
    Pause,
    Recovering,
    Reject,
    Resuming,
    Store,
    decide,
    resume,
    run,
    work,
)
from sessiontree.cli import cli
from sessiontree.testing import ScriptedModel, reply, tool_call
from sessiontree.view.data import inbox, session_data
from sessiontree.worker import cut_off

from conftest import without_pgbouncer

CTX = multiprocessing.get_context("spawn")


def paused(store: Store, title: str = "pay", tool: str = "transfer"):
    """A session whose main branch stands at a pause before one unsafe call ``e``."""
    session = store.create_session(title)
    session.append({"role": "user", "content": "pay 5"})
    model = ScriptedModel([reply(None, tool_call(tool, {"amount": 5}, id="e"))])
    *_, final = run(
        store,
        session,
        call=model,
        tools=[workers.transfer, workers.stuck_transfer],
        approve=lambda c: Pause("money"),
    )
    assert final.reason == "paused"
    return session, final.node


class Looks:
    """Counts a worker's looks for decisions and its waits; stops it after ``waits`` waits,
    and fails it after ``limit`` looks with no wait between (a spin)."""

    class Stop(Exception):
        pass

    def __init__(self, store: Store, fake: list[tuple[str, str]] | None = None, waits: int = 3) -> None:
        self.looks = self.waits = self.since_wait = 0
        real = store.storage.resumable

        def resumable():
            self.looks += 1
            self.since_wait += 1
            assert self.since_wait < 50, f"{self.looks} looks and only {self.waits} waits: a spin"
            return fake if fake is not None else real()

        def wait_for_decisions(timeout):
            self.waits += 1
            self.since_wait = 0
            if self.waits > waits:
                raise Looks.Stop
            return True  # as if a signal came each time: the most looks a worker takes

        store.storage.resumable = resumable  # type: ignore[method-assign]
        store.storage.wait_for_decisions = wait_for_decisions  # type: ignore[method-assign]


# -- a pause no branch stands at ---------------------------------------------------------


@pytest.mark.parametrize("how", ["moved back", "moved on"])
def test_a_pause_no_branch_stands_at_is_not_pending_and_deciding_it_says_why(db_target, how):
    with Store(db_target) as store:
        session, pause = paused(store)
        if how == "moved back":
            session.move("main", to=pause.parent_id)
            why = "no branch has it on its path"
        else:  # a summary, or a message, written after the pause
            session.append({"role": "user", "content": "never mind"}, branch="main")
            why = "main moved on"
        assert store.pending() == [] and inbox(store) == []
        assert session.pending() == [] and session_data(store, session.id)["pending"] == []
        with pytest.raises(Conflict) as refused:
            decide(store, pause.id, {"e": Approve()})
        message = str(refused.value)
        assert message.startswith(f"pause {pause.id}: no branch stands at it any more (")
        assert why in message and message.endswith("; nothing was written") and "\n" not in message
        assert session.children(pause) == [c for c in session.children(pause) if c.kind != "decision"]
        # the CLI refuses it the same way, and it is not offered to a worker
        result = CliRunner().invoke(cli, ["--db", db_target, "approve", pause.id])
        assert result.exit_code != 0 and "no branch stands at it any more" in result.output
        assert list(work(store, until_idle=True, call=ScriptedModel([]), tools=[workers.transfer])) == []
        # a branch brought back to it makes it pending again
        session.fork("again", at=pause.id)
        assert [p.id for p in store.pending()] == [pause.id]
        assert [row["pause"] for row in inbox(store)] == [pause.id]


def test_a_decision_no_branch_stands_at_is_not_resumable_and_resuming_it_says_why(db_target):
    with Store(db_target) as store:
        session, pause = paused(store)
        decision = decide(store, pause.id, {"e": Approve()})
        session.move("main", to=pause.parent_id)
        assert store.storage.resumable() == []
        with pytest.raises(Conflict) as refused:
            list(resume(store, pause.id, call=ScriptedModel([]), tools=[workers.transfer]))
        assert str(refused.value) == (
            f"pause {pause.id}: no branch stands at its decision {decision.id} any more "
            "(no branch has it on its path: a branch moved back or was deleted); nothing was run"
        )
        result = CliRunner().invoke(
            cli, ["--db", db_target, "resume", pause.id, "--base-url", "http://127.0.0.1:9/v1", "-m", "m"]
        )
        assert result.exit_code != 0 and "no branch stands at its decision" in result.output
        assert "already resumed" not in result.output


# -- the trash, retention and workers ----------------------------------------------------


def test_a_trashed_sessions_pauses_are_not_pending_until_it_is_restored(db_target):
    with Store(db_target) as store:
        session, pause = paused(store)
        other, decided = paused(store, "decided")
        decide(store, decided.id, {"e": Approve()})
        session.delete()
        other.delete()
        assert store.pending() == [] and inbox(store) == [] and store.storage.resumable() == []
        store.restore_session(session.id)
        store.restore_session(other.id)
        assert [p.id for p in store.pending()] == [pause.id]
        assert store.storage.resumable() == [(decided.id, other.id)]


def test_a_drop_policy_leaves_sessions_with_work_in_flight_alone_and_says_so(db_target, frozen_clock):
    with Store(db_target) as store:
        waiting, _ = paused(store, "waits for a human")
        decided, pause = paused(store, "waits for a worker")
        decide(store, pause.id, {"e": Approve()})
        cut = store.create_session("cut off in a tool")
        cut.append({"role": "user", "content": "pay"})
        cut.append(reply(None, tool_call("transfer", {"amount": 1}, id="t")))
        cut.append({"calls": [{"id": "t", "name": "transfer", "arguments": "{}"}]}, kind="tool_start")
        idle = store.create_session("idle")
        idle.append({"role": "user", "content": "hello"})
        frozen_clock.advance(0.01)  # the store writes times to the millisecond: what follows is older
        in_flight = sorted([waiting.id, decided.id, cut.id])
        preview = store.retention(drop_older_than=0)
        assert preview.trashed == [idle.id] and preview.kept == in_flight
        assert preview.to_dict()["kept_in_flight"] == in_flight
        out = CliRunner().invoke(
            cli, ["--db", db_target, "retention", "--drop-older-than", "0s", "--dry-run"]
        )
        assert out.exit_code == 0, out.output
        for session_id in in_flight:
            assert f"keep session {session_id}: work in flight" in out.output
        report = store.retention(drop_older_than=0, dry_run=False)
        assert report.trashed == [idle.id] and report.kept == in_flight
        assert [t.session_id for t in store.trash()] == [idle.id]


def test_a_worker_waits_its_poll_when_what_it_finds_cannot_be_resumed(db_target):
    """Before: a Conflict counted as work done, so the worker looked again at once, for
    ever (some 6,000 looks a second at full CPU)."""
    with Store(db_target) as store:
        session, pause = paused(store)  # undecided: resuming it raises Conflict at once
        looks = Looks(store, fake=[(pause.id, session.id)])
        steps = list(work(store, until_idle=True, call=ScriptedModel([]), tools=[workers.transfer]))
        # a Conflict: looked again at once, without it; found nothing else: idle
        assert steps == [] and looks.looks == 2
        looks = Looks(store, fake=[(pause.id, session.id)], waits=3)
        with pytest.raises(Looks.Stop):
            list(work(store, poll=60, call=ScriptedModel([]), tools=[workers.transfer]))
        assert looks.looks == 6  # two looks per wait (the first wait starts the listening)


def test_a_worker_that_loses_a_race_looks_again_instead_of_trying_a_stale_list(db_target, monkeypatch):
    """Before: a worker tried every pause of its look, though a loss meant other workers
    were carrying them on; with 16 workers each tried all 64 of 64 pauses, and carried
    16 a second where one worker alone carried 103."""
    from sessiontree import worker

    with Store(db_target) as store:
        (s1, p1), (s2, p2), (s3, p3) = (paused(store, f"pay {i}") for i in range(3))
        for p in (p1, p2, p3):
            decide(store, p.id, {"e": Approve()})
        list(work(store, until_idle=True, call=ScriptedModel([reply("paid")]), tools=[workers.transfer]))
        # as another worker's look would have found them: p1 and p2 carried on since
        stale = iter([[(p1.id, s1.id), (p2.id, s2.id)], []])
        store.storage.resumable = lambda: next(stale, [])  # type: ignore[method-assign]
        tried, shuffled = [], []
        real_steps = worker._steps
        monkeypatch.setattr(
            worker, "_steps", lambda st, item, *a: (tried.append(item), real_steps(st, item, *a))[1]
        )
        monkeypatch.setattr(worker.random, "shuffle", lambda items: shuffled.append(list(items)))
        assert list(work(store, until_idle=True, call=ScriptedModel([]), tools=[workers.transfer])) == []
        assert tried == [Resuming(p1.id, s1.id)]  # lost p1: looked again, and p2 was gone
        assert shuffled == [[]]  # from the first loss on, what it finds comes in a random order


def test_a_worker_alone_takes_decided_pauses_oldest_first(db_target, monkeypatch):
    from sessiontree import worker

    with Store(db_target) as store:
        pauses = [paused(store, f"pay {i}")[1] for i in range(3)]
        for p in reversed(pauses):
            decide(store, p.id, {"e": Approve()})
        monkeypatch.setattr(worker.random, "shuffle", lambda items: pytest.fail("shuffled alone"))
        model = ScriptedModel([reply("paid")] * 3)
        steps = list(work(store, until_idle=True, call=model, tools=[workers.transfer]))
        assert [s.pause_id for s in steps if isinstance(s, Resuming)] == [p.id for p in pauses]


def test_a_decided_pause_of_a_trashed_session_does_not_hold_a_worker(db_target):
    with Store(db_target) as store:
        session, pause = paused(store)
        decide(store, pause.id, {"e": Approve()})
        session.delete()
        looks = Looks(store)
        assert list(work(store, until_idle=True, call=ScriptedModel([]), tools=[workers.transfer])) == []
        assert looks.looks == 1
        store.restore_session(session.id)
        steps = list(
            work(store, until_idle=True, call=ScriptedModel([reply("paid")]), tools=[workers.transfer])
        )
        assert steps[0] == Resuming(pause.id, session.id) and steps[-1].reason == "completed"


# -- a run cut off inside a tool -----------------------------------------------------------


def wait_for(condition, what: str, seconds: float = 60):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_worker_killed_inside_an_unsafe_tool_comes_back_as_an_interrupted_pause(tmp_path, db_target):
    tool_log, inside = tmp_path / "executions.log", tmp_path / "inside"
    tool_log.touch()
    with Store(db_target) as store:
        session, pause = paused(store, tool="stuck_transfer")
        decide(store, pause.id, {"e": Approve()}, by="ops")
        worker = CTX.Process(target=workers.stuck_worker, args=(db_target, str(tool_log), str(inside)))
        worker.start()
        try:
            wait_for(inside.exists, "the worker to be inside the tool")
            head = session.head()
            assert head.kind == "tool_start"
            assert cut_off(store) == []  # alive inside the tool: nobody takes its run over
            os.kill(worker.pid, signal.SIGKILL)
            worker.join(30)
        finally:
            worker.kill()
            worker.join(10)
        assert worker.exitcode == -signal.SIGKILL
        # Stranded at tool_start: no pause, nothing resumable, but a run cut off (once the
        # server has seen the connection close: it drops the lease then, not at the kill).
        assert session.head().id == head.id and store.pending() == [] and store.storage.resumable() == []
        found = wait_for(lambda: cut_off(store), "the killed worker's lease to be dropped")
        assert found == [Recovering(session.id, "main", head.id)]
        model = ScriptedModel([reply("I could not tell whether it was paid; a human checked.")])
        steps = list(work(store, until_idle=True, call=model, tools=[workers.stuck_transfer]))
        assert steps[0] == Recovering(session.id, "main", head.id)
        assert [type(s).__name__ for s in steps[1:]] == ["Paused", "Final"]
        interrupted = steps[1].node
        assert interrupted.payload["calls"][0]["reason"].startswith("interrupted")
        assert [p.id for p in store.pending()] == [interrupted.id]
        (row,) = inbox(store)
        assert row["pause"] == interrupted.id and row["reason"].startswith("interrupted")
        assert model.calls == [] and len(tool_log.read_text().splitlines()) == 1  # not run again
        # A human decides it; the next look of a worker carries it on, running nothing twice.
        decide(store, interrupted.id, {"e": Reject("checked the ledger: it was paid")}, by="ops")
        steps = list(work(store, until_idle=True, call=model, tools=[workers.stuck_transfer]))
        assert steps[0] == Resuming(interrupted.id, session.id) and steps[-1].reason == "completed"
        said = session.messages()[-2]["content"]
        assert said.startswith("Rejected: the call to stuck_transfer started earlier and was cut off")
        assert len(tool_log.read_text().splitlines()) == 1 and cut_off(store) == []
        assert store.verify().ok


def test_a_run_cut_off_inside_an_idempotent_tool_is_run_again_by_a_worker(db_target):
    with Store(db_target) as store:
        session = store.create_session("lookup")
        session.append({"role": "user", "content": "look a up"})
        session.append(reply(None, tool_call("lookup", {"key": "a"}, id="l")))
        tool_start = session.append(
            {"calls": [{"id": "l", "name": "lookup", "arguments": '{"key": "a"}'}]}, kind="tool_start"
        )
        steps = list(
            work(store, until_idle=True, call=ScriptedModel([reply("a is 1")]), tools=[workers.lookup])
        )
        assert steps[0] == Recovering(session.id, "main", tool_start.id)
        assert [type(s).__name__ for s in steps[1:]] == ["ToolStart", "ToolEnd", "Assistant", "Final"]
        assert store.pending() == [] and cut_off(store) == []


def test_a_run_cut_off_between_two_calls_of_a_batch_is_found_at_its_tool_result(db_target):
    with Store(db_target) as store:
        session = store.create_session("batch")
        session.append({"role": "user", "content": "look up, then pay"})
        session.append(
            reply(
                None, tool_call("lookup", {"key": "a"}, id="l"), tool_call("transfer", {"amount": 2}, id="t")
            )
        )
        calls = [
            {"id": "l", "name": "lookup", "arguments": "{}"},
            {"id": "t", "name": "transfer", "arguments": "{}"},
        ]
        session.append({"calls": calls}, kind="tool_start")
        answered = session.append({"role": "tool", "tool_call_id": "l", "content": "value of a"})
        assert cut_off(store) == [Recovering(session.id, "main", answered.id)]
        steps = list(
            work(store, until_idle=True, call=ScriptedModel([]), tools=[workers.lookup, workers.transfer])
        )
        assert [type(s).__name__ for s in steps] == ["Recovering", "Paused", "Final"]
        assert [c["id"] for c in steps[1].node.payload["calls"]] == ["t"]


def test_a_worker_waits_for_a_server_it_cannot_reach_and_looks_again(db_target):
    from sessiontree import Unavailable

    with Store(db_target) as store:
        session, pause = paused(store)
        decide(store, pause.id, {"e": Approve()})
        looks = Looks(store, waits=5)
        real = store.storage.resumable

        def away_once():
            if looks.looks == 0:
                looks.looks += 1
                raise Unavailable("cannot reach the server (a restart)")
            return real()

        store.storage.resumable = away_once  # type: ignore[method-assign]
        steps = work(store, poll=60, call=ScriptedModel([reply("paid")]), tools=[workers.transfer])
        assert next(steps) == Resuming(pause.id, session.id)
        assert looks.waits == 2  # the first look failed: it waited, then looked again
        steps.close()


def test_a_cut_off_call_to_a_tool_the_run_does_not_know_waits_for_a_human(store):
    session = store.create_session("unknown")
    session.append({"role": "user", "content": "pay"})
    session.append(reply(None, tool_call("wire", {"amount": 1}, id="w")))
    session.append({"calls": [{"id": "w", "name": "wire", "arguments": "{}"}]}, kind="tool_start")
    model = ScriptedModel([])
    steps = list(run(store, session, call=model, tools=[workers.lookup]))
    assert [type(s).__name__ for s in steps] == ["Paused", "Final"] and model.calls == []
    assert steps[0].node.payload["calls"][0]["reason"].startswith("interrupted")


def test_a_run_inside_a_tool_in_this_process_is_not_taken_for_cut_off(db_target):
    with Store(db_target) as store:
        session = store.create_session("busy")
        session.append({"role": "user", "content": "pay"})
        session.append(reply(None, tool_call("look", {"amount": 1}, id="t")))
        seen = []

        def look(amount: int) -> str:
            seen.append(cut_off(store))
            return "done"

        from sessiontree import tool

        steps = list(
            run(
                store,
                session,
                call=ScriptedModel([reply("ok")]),
                tools=[tool(look)],
                approve=lambda c: Approve(),
            )
        )
        assert steps[-1].reason == "completed"
        assert seen == [[]] and cut_off(store) == []


# -- a dropped LISTEN connection -------------------------------------------------------------


def _listeners(pg_url: str) -> list[int]:
    server, _, schema = pg_url.partition("?schema=")
    with psycopg.connect(server, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE query = %s", (f'LISTEN "sessiontree:{schema}"',)
        ).fetchall()
    return [r[0] for r in rows]


def _terminate(pg_url: str, pid: int) -> None:
    with psycopg.connect(pg_url.partition("?schema=")[0], autocommit=True) as conn:
        assert conn.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()[0]


@without_pgbouncer("there is no LISTEN (it lasts one transaction): workers poll")
def test_a_listener_the_server_terminates_is_opened_again(pg_url):
    with Store(pg_url) as store, Store(pg_url) as human:
        session, pause = paused(store)
        assert store.storage.wait_for_decisions(0) is False
        (first,) = _listeners(pg_url)
        _terminate(pg_url, first)
        wait_for(lambda: first not in _listeners(pg_url), "the listener to be gone")
        assert store.storage.wait_for_decisions(0.1) is False  # the drop is noticed, not raised
        assert store.storage.wait_for_decisions(0.1) is True  # listening again: look now
        (second,) = _listeners(pg_url)
        assert second != first
        decide(human, pause.id, {"e": Approve()})
        assert store.storage.wait_for_decisions(30) is True  # the signal comes on the new one


@pytest.mark.slow
@without_pgbouncer("there is no LISTEN (it lasts one transaction): workers poll")
def test_a_worker_whose_listener_is_terminated_still_wakes_for_the_next_decision(tmp_path, pg_url):
    tool_log = tmp_path / "executions.log"
    tool_log.touch()
    with Store(pg_url) as store:
        session, pause = paused(store)
    start = CTX.Event()
    worker = CTX.Process(
        target=workers.pause_worker, args=(pg_url, "w", start, str(tmp_path), str(tool_log), 300.0, False)
    )
    worker.start()
    start.set()
    try:
        (first,) = wait_for(lambda: _listeners(pg_url), "the worker to listen")
        _terminate(pg_url, first)
        (second,) = wait_for(
            lambda: [p for p in _listeners(pg_url) if p != first], "the worker to listen again"
        )
        assert worker.is_alive() and second != first
        with Store(pg_url) as human:
            decide(human, pause.id, {"e": Approve()}, by="ops")
        wait_for(tool_log.read_text, "the worker to carry the decision on", seconds=30)  # poll: 300 s
        assert tool_log.read_text().split()[1] == "5"
        assert json.loads(Path(tmp_path, "work-w.json").read_text()) == [pause.id]
    finally:
        worker.kill()
        worker.join(10)
