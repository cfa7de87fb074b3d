"""Pins: nodes a framework needs that are on no branch's path, kept from ``prune``.

A pin is the checkpoint ``pin-<node id>`` (``Session.pin``), so it is kept, listed,
exported and imported like every checkpoint; these tests check exactly that, on both
backends, and that a pin racing a prune never leaves a pin of a removed node: either the
pin comes first and the node stays, or the prune does and the pin says the node is gone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from sessiontree import Conflict, NotFound, Store
from sessiontree.formats import export_native, import_native

from conftest import assistant, user


def off_path(store: Store) -> tuple[Any, str, str]:
    """A session whose ``main`` went on past a node that is then on no branch: (session,
    the off-path leaf's id, its parent's id)."""
    s = store.create_session()
    root = s.append(user("hi"))
    side = s.append(assistant("an answer a framework keeps"), parent=root, branch=None)  # off main
    s.append(assistant("main's answer"))
    return s, side.id, root.id


def test_a_pinned_node_and_its_ancestors_survive_prune(any_store):
    s, side, _ = off_path(any_store)
    assert any_store.prune(dry_run=True, grace=0).node_ids == [side]
    pin = s.pin(side)
    assert (pin.name, pin.node_id) == (f"pin-{side}", side)
    assert s.prune(dry_run=False, grace=0).node_ids == []
    assert s.node(side).id == side
    assert [p.node_id for p in s.pins()] == [side]
    assert s.verify().ok
    s.unpin(side)
    assert s.pins() == []
    assert s.prune(dry_run=False, grace=0).node_ids == [side]


def test_pin_is_idempotent_takes_any_ref_and_says_what_is_wrong(any_store):
    s, side, _ = off_path(any_store)
    first = s.pin(side[:-2])  # any ref: a prefix here
    assert s.pin(s.node(side)) == first
    assert len(s.checkpoints()) == 1
    s.pin("main")  # a branch's head: pinned as the node it is now
    assert len(s.pins()) == 2
    with pytest.raises(NotFound, match="no node, branch or checkpoint"):
        s.pin("nope")
    s.unpin(side)
    with pytest.raises(NotFound, match=f"node {side} is not pinned"):
        s.unpin(side)
    s.checkpoint(f"pin-{side}", at="main")  # someone took the name for another node
    with pytest.raises(Conflict, match="is taken by a checkpoint that is not a pin"):
        s.pin(side)
    assert [p.node_id for p in s.pins()] == [s.resolve("main")]  # that one is not a pin


def test_pins_keep_the_session_from_the_drop_policy_and_travel_with_native_export(any_store, tmp_path):
    s, side, _ = off_path(any_store)
    s.pin(side)
    other = any_store.create_session()
    other.append(user("idle, nothing pinned"))
    time.sleep(0.01)  # both idle for longer than the policy's 0 s
    dropped = any_store.retention(drop_older_than=0, dry_run=True).trashed
    assert other.id in dropped and s.id not in dropped
    with Store(str(tmp_path / "copy.db")) as copy:
        import_native(copy, list(export_native(any_store, [s.id])))
        assert [p.node_id for p in copy.session(s.id).pins()] == [side]
        assert copy.prune(dry_run=True, grace=0).node_ids == []


def interleave(part: Any, method: str, act: Callable[[], Any]) -> dict[str, Any]:
    """Run ``act`` in another thread right after the first call of ``part.<method>`` (a
    store's storage or one of its parts)
    returns; the caller goes on after 0.5 s (when ``act`` waits for the caller's lock) or
    once it finished. The dict gets ``result`` or ``error`` once joined."""
    original = getattr(part, method)
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = act()
        except Exception as e:  # noqa: BLE001 - the test judges it
            outcome["error"] = e

    thread = threading.Thread(target=run)

    def then_act(*args: Any, **kwargs: Any) -> Any:
        value = original(*args, **kwargs)
        if thread.ident is None:
            thread.start()
            thread.join(0.5)
        return value

    setattr(part, method, then_act)
    outcome["thread"] = thread
    return outcome


def test_prune_racing_a_pin_either_keeps_the_node_or_the_pin_says_it_is_gone(db_target):
    with Store(db_target) as pruner, Store(db_target) as pinner:
        # The pin arrives while the prune has listed what it removes.
        s, side, _ = off_path(pruner)
        outcome = interleave(pruner.storage.upkeep, "unreachable", lambda: pinner.session(s.id).pin(side))
        try:
            gone = pruner.prune(dry_run=False, grace=0).node_ids
        finally:
            del pruner.storage.upkeep.unreachable
        outcome["thread"].join(30)
        # Both backends: the prune's transaction runs first; the pin then finds no node.
        assert gone == [side]
        assert isinstance(outcome.get("error"), NotFound), outcome
        assert pinner.session(s.id).pins() == []
        # The prune arrives while the pin has taken the session: it waits, and keeps the node.
        s, side, _ = off_path(pinner)
        outcome = interleave(pinner.storage, "lock_sessions", lambda: pruner.prune(dry_run=False, grace=0))
        try:
            pin = pinner.session(s.id).pin(side)
        finally:
            del pinner.storage.lock_sessions
        outcome["thread"].join(30)
        assert "error" not in outcome, outcome
        assert side not in outcome["result"].node_ids
        assert pruner.session(s.id).node(side).id == side
        assert [p.node_id for p in pruner.session(s.id).pins()] == [pin.node_id]
        assert pruner.verify().ok


def pin_against_prune(a: Store, b: Store) -> None:
    """One round: ``b`` pins an off-path node while ``a`` prunes, started together."""
    s, side, _ = off_path(a)
    start = threading.Barrier(2)
    outcome: dict[str, Any] = {}

    def pin() -> None:
        start.wait()
        try:
            outcome["pin"] = b.session(s.id).pin(side)
        except NotFound as e:
            outcome["pin"] = e

    def prune() -> None:
        start.wait()
        outcome["prune"] = a.prune(dry_run=False, grace=0).node_ids

    threads = [threading.Thread(target=pin), threading.Thread(target=prune)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    if isinstance(outcome["pin"], NotFound):
        assert side in outcome["prune"]
        assert b.session(s.id).pins() == []
    else:
        assert side not in outcome["prune"]
        assert a.session(s.id).node(side).id == side


def test_many_pins_racing_prunes_lose_nothing_they_kept(db_target):
    """Threads on two stores: one pins off-path nodes while the other prunes; every pin
    that succeeded keeps its node, every one that failed says the node is gone."""
    with Store(db_target) as a, Store(db_target) as b:
        for _ in range(5):
            pin_against_prune(a, b)
        assert a.verify().ok
