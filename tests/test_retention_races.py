"""Retention against writers of the same sessions, on both backends.

Emptying the trash and a retention policy first list what they will act on, then act.
On PostgreSQL other transactions write meanwhile; each test here lets another store
write in exactly that moment (the listing is wrapped so that another thread acts right
after it returns), then checks the janitor acted on the store as it was then, not as it
was listed. On SQLite the janitor's transaction holds the only write lock from the
start, so the other writer waits and comes after it; the same checks hold.

Before the fix, on PostgreSQL: a session restored (and appended to) in that moment was
emptied from the trash for good; a session that got a checkpoint, a pause or a write in
it went to the trash; a restore that lost to the emptying said nothing; a strip of a
session deleted meanwhile failed with ``IndexError``, of a node stripped meanwhile with a
raw ``UniqueViolation``; an append into a session emptied from the trash meanwhile failed
with a raw ``IntegrityConstraintViolation`` (on SQLite, a raw ``IntegrityError``).
"""

from __future__ import annotations

import json
import multiprocessing
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from sessiontree import Conflict, NotFound, Store
from sessiontree.testing import tool_call

from conftest import announce_lock_wait, assistant, until_done_or_blocked, user

IDLE = 0.2
"""The drop policy's age in these tests: a session idle for longer may go to the trash."""


@contextmanager
def meanwhile(part: object, method: str, act: Callable[[], Any], by: Store) -> Iterator[dict]:
    """While the block runs: right after the first call of ``part.<method>`` (``part``: a
    storage part, such as ``store.storage.trash``) returns, ``act`` runs in another thread,
    writing through the store ``by``; the caller goes on once it has finished, or once it
    waits for a lock the caller holds (on SQLite the write lock; see
    ``until_done_or_blocked``). The dict gets ``result`` or ``error``."""
    original = getattr(part, method)
    outcome: dict[str, Any] = {}
    reached = threading.Event()

    def run() -> None:
        if not postgres(by):
            announce_lock_wait(by, reached)
        try:
            outcome["result"] = act()
        except Exception as e:
            outcome["error"] = e
        finally:
            if not postgres(by):
                by.conn.set_trace_callback(None)

    thread = threading.Thread(target=run)

    def first_then_act(*args: Any, **kwargs: Any) -> Any:
        value = original(*args, **kwargs)
        if thread.ident is None:  # the first call: not started yet
            thread.start()
            until_done_or_blocked(thread, by, reached)
        return value

    setattr(part, method, first_then_act)  # an instance attribute hides the method
    try:
        yield outcome
    finally:
        delattr(part, method)
        if thread.ident is not None:
            thread.join(60)
    assert thread.ident is not None and not thread.is_alive(), f"{method} was never called"


def postgres(store: Store) -> bool:
    return store.storage.url.startswith("postgresql://")


def exists(store: Store, session_id: str) -> bool:
    try:
        store.session(session_id)
    except NotFound:
        return False
    return True


def test_a_session_restored_while_the_trash_is_emptied_is_kept(db_target, frozen_clock):
    with Store(db_target) as janitor, Store(db_target) as other:
        victim = janitor.create_session("victim")
        victim.append(user("precious"))
        victim.delete()
        frozen_clock.advance(0.005)  # what went to the trash in this very millisecond is not older than 0 s

        def restore_and_append() -> str:
            other.restore_session(victim.id)
            return other.session(victim.id).append(user("after the restore")).id

        with meanwhile(janitor.storage.trash, "trashed", restore_and_append, by=other) as outcome:
            emptied = [e.session_id for e in janitor.empty_trash()]
        if postgres(janitor):  # restored before the janitor looked again: kept
            assert emptied == [] and "result" in outcome
        else:  # the restore waited for the janitor's write lock, then found it gone
            assert emptied == [victim.id] and isinstance(outcome.get("error"), NotFound)
        # Either way: an acknowledged restore and append are kept, or neither was acknowledged.
        assert exists(janitor, victim.id) == ("result" in outcome)
        if "result" in outcome:
            assert outcome["result"] in {n.id for n in janitor.session(victim.id).tree()}
            assert janitor.trash() == []
        assert janitor.verify().ok


def test_a_restore_that_loses_to_the_emptying_says_so(db_target, frozen_clock):
    """The restore starts while the janitor, holding the session, is deleting it."""
    with Store(db_target) as janitor, Store(db_target) as other:
        victim = janitor.create_session("victim")
        victim.append(user("precious"))
        victim.delete()
        frozen_clock.advance(0.005)  # what went to the trash in this very millisecond is not older than 0 s
        outcome: dict[str, Any] = {}
        reached = threading.Event()

        def restore() -> None:
            if not postgres(other):
                announce_lock_wait(other, reached)
            try:
                outcome["result"] = other.restore_session(victim.id)
            except Exception as e:
                outcome["error"] = e
            finally:
                if not postgres(other):
                    other.conn.set_trace_callback(None)

        thread = threading.Thread(target=restore)
        delete_session = janitor.storage.delete_session

        def delete_then_linger(key: int) -> int:
            removed = delete_session(key)
            thread.start()
            # the restore reaches the session's lock (SQLite: the write lock), or is done
            until_done_or_blocked(thread, other, reached)
            return removed

        janitor.storage.delete_session = delete_then_linger  # type: ignore[method-assign]
        assert [e.session_id for e in janitor.empty_trash()] == [victim.id]
        thread.join(60)
        assert isinstance(outcome.get("error"), NotFound), outcome  # not a silent success
        assert not exists(janitor, victim.id)


@pytest.mark.parametrize("how", ["checkpoint", "pause", "write"])
def test_what_protects_a_session_from_a_drop_protects_it_when_it_arrives_meanwhile(
    db_target, how, frozen_clock
):
    with Store(db_target) as janitor, Store(db_target) as other:
        s = janitor.create_session("busy")
        s.append(user("hello"))
        frozen_clock.advance(IDLE + 0.05)  # idle for longer than the policy's age

        def protect() -> None:
            mine = other.session(s.id)
            if how == "checkpoint":
                mine.checkpoint("keep", at="main")
            elif how == "pause":
                mine.append({"reason": "approval", "calls": [{"id": "c1", "name": "rm"}]}, kind="pause")
            else:
                mine.append(user("still here"))

        with meanwhile(janitor.storage.trash, "droppable_sessions", protect, by=other) as outcome:
            report = janitor.retention(drop_older_than=IDLE, dry_run=False)
        in_trash = [t.session_id for t in janitor.trash()]
        if postgres(janitor):  # protected before the janitor looked again: left alone
            assert outcome == {"result": None}
            assert report.trashed == [] and in_trash == []
        else:  # the protection waited for the janitor's write lock: the trash came first
            assert report.trashed == [s.id] and in_trash == [s.id]
            if how != "checkpoint":  # a trashed session takes no new node
                assert isinstance(outcome.get("error"), Conflict)
        assert janitor.verify().ok


def big_tool_result(store: Store) -> tuple[str, str]:
    """(session id, node id) of a session holding one tool result of 5,000 bytes."""
    s = store.create_session("tools")
    s.append(assistant(None, [tool_call("cat", {"path": "a.log"}, id="c1")]))
    node = s.append({"role": "tool", "tool_call_id": "c1", "content": "w" * 5000})
    return s.id, node.id


@pytest.mark.parametrize("how", ["deleted", "stripped"])
def test_a_strip_leaves_alone_what_changed_since_it_looked(db_target, how, frozen_clock):
    with Store(db_target) as janitor, Store(db_target) as other:
        session_id, node_id = big_tool_result(janitor)
        frozen_clock.advance(0.05)

        def change() -> Any:
            if how == "deleted":
                return other.delete_session(session_id, permanently=True)
            return other.retention(strip_older_than=0, strip_min_bytes=1000, dry_run=False)

        with meanwhile(janitor.storage.trash, "strippable_results", change, by=other) as outcome:
            report = janitor.retention(strip_older_than=0, strip_min_bytes=1000, dry_run=False)
        assert "error" not in outcome, outcome
        if postgres(janitor):  # the other store went first; the janitor left its node alone
            assert report.stripped == []
        else:  # the janitor went first; the other store found nothing left to do
            assert [x.node_id for x in report.stripped] == [node_id]
            assert how == "deleted" or outcome["result"].stripped == []
        if how == "stripped":
            assert len(janitor.storage.redactions()) == 1
            assert janitor.node(node_id).payload["content"].startswith("[tool result stripped on ")
        else:
            assert not exists(janitor, session_id)
        assert janitor.verify().ok


def test_a_write_to_a_session_deleted_meanwhile_is_not_found(db_target):
    with Store(db_target) as mine, Store(db_target) as other:
        s = mine.create_session("doomed")
        s.append(user("hi"))
        other.delete_session(s.id, permanently=True)
        for write in (
            lambda: s.append(user("late")),
            lambda: s.append(assistant("late"), run={"model": "m"}),
            lambda: s.append_many([user("a"), user("b")], branch="other"),
            lambda: s.record_run({"model": "m"}),
        ):
            with pytest.raises(NotFound, match="the session no longer exists .*nothing was written"):
                write()
        assert mine.verify().ok


# -- the natural race, many times over, between processes ---------------------------------

CTX = multiprocessing.get_context("spawn")
ROUNDS = 150
PERIOD = 0.03


def race_worker(role: str, db: str, session_ids: list[str], start, out_dir: str) -> None:
    """One of three processes racing over the trash, one session per round of PERIOD s:
    ``trasher`` trashes it just before the round, ``janitor`` empties the trash, and
    ``restorer`` restores it and appends, logging what was acknowledged."""
    outcomes: list[Any] = []
    rng = random.Random(7)
    with Store(db) as store:
        start.wait(60)
        t0 = time.monotonic() + 0.2
        for i, session_id in enumerate(session_ids):
            at = (
                t0
                + i * PERIOD
                + {"trasher": -0.01, "janitor": 0, "restorer": rng.uniform(-0.004, 0.004)}[role]
            )
            time.sleep(max(0.0, at - time.monotonic()))
            try:
                if role == "trasher":
                    store.delete_session(session_id)
                elif role == "janitor":
                    outcomes.extend(e.session_id for e in store.empty_trash())
                else:
                    store.restore_session(session_id)
                    outcomes.append([session_id, store.session(session_id).append(user("after")).id])
            except (NotFound, Conflict) as e:  # lost the race, and said so
                outcomes.append(type(e).__name__)
            except Exception as e:
                outcomes.append(f"error {type(e).__module__}.{type(e).__name__}: {e}")
    Path(out_dir, f"{role}.json").write_text(json.dumps(outcomes))


@pytest.mark.slow
def test_restores_racing_the_emptying_of_the_trash_lose_nothing(tmp_path, db_target):
    with Store(db_target) as store:
        ids = []
        for i in range(ROUNDS):
            s = store.create_session(f"v{i}")
            s.append(user("precious"))
            ids.append(s.id)
    start = CTX.Barrier(3)
    roles = ("trasher", "janitor", "restorer")
    procs = [CTX.Process(target=race_worker, args=(r, db_target, ids, start, str(tmp_path))) for r in roles]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    trasher, janitor, restorer = (json.loads((tmp_path / f"{r}.json").read_text()) for r in roles)
    errors = [o for o in trasher + janitor + restorer if isinstance(o, str) and o.startswith("error")]
    assert errors == []
    acknowledged = [o for o in restorer if isinstance(o, list)]
    with Store(db_target) as store:
        lost = [sid for sid, _ in acknowledged if not exists(store, sid)]
        assert lost == [], f"{len(lost)} of {len(acknowledged)} restored sessions were emptied after all"
        for sid, node_id in acknowledged:
            assert node_id in {n.id for n in store.session(sid).tree()}
        assert not set(janitor) & {sid for sid, _ in acknowledged}
        assert store.verify().ok
    print(f"\n{len(acknowledged)} restored and kept, {len(janitor)} emptied")
