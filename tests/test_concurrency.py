"""Concurrent writer processes on one file: no acknowledged append lost or duplicated,
every branch a chain of exactly its acknowledged appends, compare-and-set losers told so.

Processes, not threads: each has its own connection and its own GIL, as in production.
Timing is never asserted; the throughput seen is printed (``pytest -s``) for the record.
"""

from __future__ import annotations

import json
import multiprocessing
from collections import defaultdict
from pathlib import Path

import pytest

import reliability_workers as workers
from sessiontree import Store

pytestmark = pytest.mark.slow  # writer processes racing for seconds

PROCESSES = 4
SECONDS = 2.0
CTX = multiprocessing.get_context("spawn")


def read_acks(out: Path, index: int) -> list[tuple[str, str]]:
    lines = (out / f"acks-{index}.log").read_text().splitlines()
    return [tuple(line.split("\t")) for line in lines]


def test_concurrent_appends_same_and_different_branches(tmp_path, db_target):
    db = db_target
    with Store(db) as store:
        session = store.create_session("concurrency")
        root = session.append({"role": "system", "content": "shared root"}, branch="shared")
    start = CTX.Event()
    procs = [
        CTX.Process(
            target=workers.append_worker, args=(str(db), session.id, i, SECONDS, str(tmp_path), start)
        )
        for i in range(PROCESSES)
    ]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * PROCESSES

    results = [json.loads((tmp_path / f"result-{i}.json").read_text()) for i in range(PROCESSES)]
    # No "database is locked" (or anything else) escaped to a writer.
    assert [r["errors"] for r in results] == [[]] * PROCESSES
    acks = {i: read_acks(tmp_path, i) for i in range(PROCESSES)}
    assert all(len(acks[i]) == results[i]["acks"] > 0 for i in range(PROCESSES))
    all_ids = [node_id for i in acks for _, node_id in acks[i]]
    assert len(all_ids) == len(set(all_ids))  # nobody was told the same id twice

    with Store(db) as store:
        s = store.session(session.id)
        assert store.verify().ok
        by_branch: dict[str, list[str]] = defaultdict(list)
        for i in acks:
            for branch, node_id in acks[i]:
                by_branch[branch].append(node_id)
        # Every node in the file is the root or an acknowledged append: nothing extra,
        # nothing lost, nothing twice.
        stored = [n.id for n in s.tree()]
        assert sorted(stored) == sorted([root.id, *all_ids])
        # The shared branch is one chain holding exactly the acknowledged shared appends,
        # each process's in the order it made them.
        shared = s.path("shared")
        assert [n.depth for n in shared] == list(range(len(shared)))
        assert shared[0].id == root.id
        assert sorted(n.id for n in shared[1:]) == sorted(by_branch["shared"])
        for i in acks:
            mine = [node_id for branch, node_id in acks[i] if branch == "shared"]
            assert [n.id for n in shared if n.payload.get("w") == i] == mine
            order = [n.payload["i"] for n in shared if n.payload.get("w") == i]
            assert order == sorted(order)
        # Each own branch is exactly that process's own appends, in order, from a root.
        for i in acks:
            own = s.path(f"own-{i}")
            assert [n.id for n in own] == [n for b, n in acks[i] if b == f"own-{i}"]
            assert own[0].parent_id is None
    total = sum(len(a) for a in acks.values())
    elapsed = max(r["elapsed"] for r in results)
    moved = sum(r["moved"] for r in results)
    print(
        f"\n{PROCESSES} processes, {elapsed:.1f}s: {total} appends, {total / elapsed:.0f}/s total, "
        f"{total / elapsed / PROCESSES:.0f}/s per process; {moved} compare-and-set losers"
    )


def test_compare_and_set_rounds_exactly_one_winner_the_rest_branch_moved(tmp_path, db_target):
    """All processes read the same head, then all append with expect_head = that head:
    in every round exactly one wins and every other gets BranchMoved and writes nothing."""
    db = db_target
    rounds = 25
    with Store(db) as store:
        session = store.create_session("cas")
        first = session.append({"role": "system", "content": "start"}, branch="cas")
    barrier = CTX.Barrier(PROCESSES)
    procs = [
        CTX.Process(
            target=workers.cas_round_worker, args=(str(db), session.id, i, rounds, barrier, str(tmp_path))
        )
        for i in range(PROCESSES)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * PROCESSES
    outcomes = [json.loads((tmp_path / f"cas-{i}.json").read_text()) for i in range(PROCESSES)]
    assert all(len(o) == rounds for o in outcomes), outcomes
    winners = []
    for r in range(rounds):
        this_round = [o[r] for o in outcomes]
        won = [x for x in this_round if x.startswith("won ")]
        assert len(won) == 1, this_round
        assert sum(x.startswith("moved ") for x in this_round) == PROCESSES - 1, this_round
        winners.append(won[0].split()[1])
    with Store(db) as store:
        path = store.session(session.id).path("cas")
        assert [n.id for n in path] == [first.id, *winners]  # the losers wrote nothing
        assert store.verify().ok
