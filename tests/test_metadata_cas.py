"""Session and branch metadata, updated with compare-and-set, on both backends.

``set_metadata(new, expect=old)`` and ``set_branch_metadata(name, new, expect=old)`` write
in one transaction and refuse a writer whose ``old`` is stale (``MetadataChanged``): of
writers that read the same metadata, exactly one wins, and a retry loop loses no update.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from sessiontree import Conflict, InvalidPayload, MetadataChanged, NotFound, Store

from conftest import user

WRITERS = 4
ROUNDS = 5


def test_session_metadata_is_replaced_and_a_stale_writer_refused(every_store):
    s = every_store.create_session(metadata={"owner": "ana"})
    assert s.set_metadata({"owner": "ana", "usage": 1}, expect={"owner": "ana"}) == {
        "owner": "ana",
        "usage": 1,
    }
    assert every_store.session(s.id).metadata == {"owner": "ana", "usage": 1}
    with pytest.raises(MetadataChanged, match=f"session {s.id} metadata changed: expected") as e:
        s.set_metadata({"owner": "bob"}, expect={"owner": "ana"})
    assert isinstance(e.value, Conflict) and e.value.actual == {"owner": "ana", "usage": 1}
    assert every_store.session(s.id).metadata == {"owner": "ana", "usage": 1}  # nothing written
    assert s.set_metadata({}) == {}  # no expect: unconditional
    with pytest.raises(InvalidPayload, match="session metadata"):
        s.set_metadata({"bad": float("nan")})
    assert every_store.session(s.id).metadata == {}
    assert [i.metadata for i in every_store.sessions() if i.id == s.id] == [{}]


def test_branch_metadata_is_replaced_and_a_stale_writer_refused(every_store):
    s = every_store.create_session()
    node = s.append(user("hi"))
    s.fork("try", at=node, metadata={"model": "a"})
    b = s.set_branch_metadata("try", {"model": "b"}, expect={"model": "a"})
    assert (b.name, b.head_id, b.metadata) == ("try", node.id, {"model": "b"})
    with pytest.raises(MetadataChanged, match="branch 'try' metadata changed"):
        s.set_branch_metadata("try", {"model": "c"}, expect={"model": "a"})
    assert s.branch("try").metadata == {"model": "b"}
    assert s.branch("main").metadata == {}  # only that branch
    s.checkpoint("cp", at=node)
    with pytest.raises(Conflict, match="'cp' is a checkpoint, not a branch"):
        s.set_branch_metadata("cp", {})
    with pytest.raises(NotFound, match="no branch 'nope'"):
        s.set_branch_metadata("nope", {})


def race(write: Any, read: Any) -> None:
    """``WRITERS`` threads, ``ROUNDS`` rounds: in each, all read the metadata, then all
    write their own count with ``expect`` what they read. Exactly one wins a round; the
    others are refused, and the winner's write is what the next round reads."""
    start, done = threading.Barrier(WRITERS), threading.Barrier(WRITERS)
    wins: list[list[int]] = [[] for _ in range(ROUNDS)]
    errors: list[BaseException] = []

    def writer(me: int) -> None:
        try:
            for r in range(ROUNDS):
                start.wait(30)
                seen = read()
                start.wait(30)  # everyone read the same
                try:
                    write({**seen, "round": r + 1, "by": me, f"w{me}": r}, seen)
                    wins[r].append(me)
                except MetadataChanged:
                    pass
                done.wait(30)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
            start.abort()
            done.abort()

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert [len(w) for w in wins] == [1] * ROUNDS, wins
    final = read()
    assert final["round"] == ROUNDS and final["by"] == wins[-1][0]
    # Nothing lost: each round's winner's key is still there (each write kept what it read).
    for r, (winner,) in enumerate(wins):
        assert final[f"w{winner}"] >= r


def test_writers_of_session_metadata_on_one_shared_store_win_one_per_round(db_target):
    with Store(db_target) as store:
        s = store.create_session(metadata={"round": 0})
        race(
            lambda new, seen: store.session(s.id).set_metadata(new, expect=seen),
            lambda: store.session(s.id).metadata,
        )


def test_writers_of_branch_metadata_on_their_own_stores_win_one_per_round(db_target):
    with Store(db_target) as first:
        s = first.create_session()
        s.append(user("hi"))
        stores = [Store(db_target) for _ in range(WRITERS + 1)]  # and one for the last read
        local = threading.local()
        try:
            handed = iter(stores)
            lock = threading.Lock()

            def mine() -> Store:
                if not hasattr(local, "store"):
                    with lock:
                        local.store = next(handed)
                return local.store

            race(
                lambda new, seen: mine().session(s.id).set_branch_metadata("main", new, expect=seen),
                lambda: mine().session(s.id).branch("main").metadata,
            )
        finally:
            for store in stores:
                store.close()


def test_a_retry_loop_on_stale_metadata_loses_no_update(db_target):
    """Counters: every thread adds 1, ``ROUNDS`` times, retrying when refused."""
    with Store(db_target) as store:
        s = store.create_session(metadata={"count": 0})

        def add() -> None:
            for _ in range(ROUNDS):
                while True:
                    seen = store.session(s.id).metadata
                    try:
                        store.session(s.id).set_metadata({"count": seen["count"] + 1}, expect=seen)
                        break
                    except MetadataChanged:
                        continue

        threads = [threading.Thread(target=add) for _ in range(WRITERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert store.session(s.id).metadata == {"count": WRITERS * ROUNDS}
