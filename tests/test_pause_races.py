"""Races on a pause, between processes started together behind a barrier, many times over:
two deciders (one decision per pause) and two resumers of one decided pause (one run,
and the unsafe tool runs exactly once). The loser always gets a clear error.
"""

from __future__ import annotations

import json
import multiprocessing
from collections import Counter
from pathlib import Path

import pytest

import reliability_workers as workers
from sessiontree import Approve, Pause, Store, decide, run
from sessiontree.testing import ScriptedModel, reply, tool_call

CTX = multiprocessing.get_context("spawn")
RACERS = 2
ROUNDS = 20


def make_pauses(store: Store, n: int) -> list[str]:
    """n sessions, each paused before one unsafe ``transfer`` call with id ``e``."""
    pauses = []
    for i in range(n):
        session = store.create_session(f"race {i}")
        session.append({"role": "user", "content": f"pay {i}"})
        model = ScriptedModel([reply(None, tool_call("transfer", {"amount": i}, id="e"))])
        steps = list(
            run(
                store,
                session,
                call=model,
                tools=[workers.transfer],
                approve=lambda call: Pause("money moves need a human"),
            )
        )
        assert steps[-1].reason == "paused"
        pauses.append(steps[-1].node.id)
    return pauses


def race(target, db: str, pause_ids: list[str], out: Path, *extra) -> list[list[str]]:
    barrier = CTX.Barrier(RACERS)
    procs = [
        CTX.Process(target=target, args=(str(db), pause_ids, f"r{i}", barrier, str(out), *extra))
        for i in range(RACERS)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * RACERS
    prefix = "decide" if target is workers.decide_worker else "resume"
    return [json.loads((out / f"{prefix}-r{i}.json").read_text()) for i in range(RACERS)]


@pytest.mark.slow
def test_two_processes_deciding_one_pause_many_times(tmp_path, db_target):
    db = db_target
    with Store(db) as store:
        pauses = make_pauses(store, ROUNDS)
    outcomes = race(workers.decide_worker, db, pauses, tmp_path)
    with Store(db) as store:
        for r, pause_id in enumerate(pauses):
            this_round = sorted(o[r] for o in outcomes)
            assert this_round[0] == "Conflict" and this_round[1].startswith("won "), this_round
            session = store.session(store.node(pause_id).session_id)
            decisions = [n for n in session.children(pause_id) if n.kind == "decision"]
            assert [d.id for d in decisions] == [this_round[1].split()[1]]
            # The branch moved to the winner's decision and nowhere else.
            assert session.head().id == decisions[0].id
        assert store.pending() == [] and store.verify().ok


@pytest.mark.slow
def test_two_processes_resuming_one_decided_pause_many_times(tmp_path, db_target):
    db, tool_log = db_target, tmp_path / "executions.log"
    tool_log.touch()
    with Store(db) as store:
        pauses = make_pauses(store, ROUNDS)
        for pause_id in pauses:
            decide(store, pause_id, {"e": Approve()}, by="ops")
    outcomes = race(workers.resume_worker, db, pauses, tmp_path, str(tool_log))
    for r in range(ROUNDS):
        this_round = sorted(o[r] for o in outcomes)
        # Exactly one resume ran; the other was refused with BranchMoved (it lost the
        # compare-and-set) or Conflict (the pause was already resumed when it looked).
        assert this_round[1] == "won completed", this_round
        assert this_round[0] in ("BranchMoved", "Conflict"), this_round
    executions = [line.split() for line in tool_log.read_text().splitlines()]
    amounts = Counter(int(amount) for _, amount, *_ in executions)
    assert amounts == Counter(range(ROUNDS))  # the unsafe tool ran exactly once per pause
    with Store(db) as store:
        for pause_id in pauses:
            session = store.session(store.node(pause_id).session_id)
            roles = [m["role"] for m in session.messages()]
            assert roles == ["user", "assistant", "tool", "assistant"]
            kinds = [n.kind for n in session.path("main")]
            assert kinds.count("tool_start") == 1
            assert len(session.tree()) == len(kinds)  # the loser left no stray node anywhere
        assert store.verify().ok
    print(f"\nresume races: {Counter(o for outs in outcomes for o in outs)}")


@pytest.mark.slow
def test_two_branches_at_one_decision_run_at_once_use_its_approval_once(tmp_path, db_target):
    """A fork at each pause, then one approval: both branches stand at the decision. Two
    processes run one branch each at the same moment: the unsafe tool runs once per
    pause, and the other branch pauses to ask again."""
    db, tool_log = db_target, tmp_path / "executions.log"
    tool_log.touch()
    with Store(db) as store:
        pauses = make_pauses(store, ROUNDS)
        for pause_id in pauses:
            store.session(store.node(pause_id).session_id).fork("alt", at=pause_id)
            decide(store, pause_id, {"e": Approve()}, by="ops")
    outcomes = race(workers.branch_worker, db, pauses, tmp_path, str(tool_log))
    for r in range(ROUNDS):
        assert sorted(o[r] for o in outcomes) == ["completed", "paused"]
    amounts = Counter(int(line.split()[1]) for line in tool_log.read_text().splitlines())
    assert amounts == Counter(range(ROUNDS))  # exactly once per pause
    with Store(db) as store:
        assert store.storage.resumable() == [] and store.verify().ok
    print(f"\nbranch races, runs completed by main and alt: {[o.count('completed') for o in outcomes]}")
