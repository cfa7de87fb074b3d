"""Round trips on the wire per operation of a server store, counted by a proxy.

A round trip costs what the network costs (1 ms within a region, more across), so a
turn's cost there is mostly their count. Measured before this work (the same proxy):
a read the cache answered took 3 (BEGIN, the ref lookup, COMMIT), a cold read 4, an
append 7, a fork 6, a checkpoint 6.

Behind PgBouncer in transaction mode (``pgbouncer=true``) nothing outlives a transaction,
so each operation is its own: BEGIN with the settings, the one statement, COMMIT, three
round trips (docs/postgres.md).
"""

from __future__ import annotations

import uuid

import pytest

from pg_proxy import DroppingProxy
from sessiontree import Store

from conftest import PGBOUNCER, assistant, drop_schema, postgres_server, user

ONE = 3 if PGBOUNCER else 1
"""The round trips of one statement: behind PgBouncer, BEGIN and COMMIT around it."""


@pytest.fixture
def counted():
    """(a store through a counting proxy, its URL, the proxy)."""
    server = postgres_server()
    proxy = DroppingProxy(server)
    schema = f"t_{uuid.uuid4().hex[:16]}"
    url = proxy.url(schema) + "&pool_size=1"
    with Store(url) as store:
        yield store, url, proxy
    proxy.stop()
    drop_schema(f"{server}?schema={schema}")


def test_a_read_costs_one_round_trip_cached_or_not(counted):
    store, url, proxy = counted
    s = store.create_session("reads")
    s.append_many([user("hello"), assistant("hi")])
    s.messages()  # the redaction count was just looked at: not due for a second
    proxy.counted()
    assert [m["content"] for m in s.messages()] == ["hello", "hi"]
    assert proxy.counted() == ONE
    assert [n.payload["content"] for n in s.path("main")] == ["hello", "hi"]
    assert proxy.counted() == ONE
    with Store(url, cache_bytes=0) as cold:
        other = cold.session(s.id)
        proxy.counted()
        assert [m["content"] for m in other.messages()] == ["hello", "hi"]  # the redaction count too
        assert proxy.counted() == ONE
        assert [n.payload["content"] for n in other.path("main")] == ["hello", "hi"]
        assert proxy.counted() == ONE


def test_an_append_costs_one_round_trip_with_a_run_and_compare_and_set(counted):
    store, _, proxy = counted
    s = store.create_session("writes")
    head = s.append(user("hello"))
    proxy.counted()
    (answer,) = s.append_many(
        [assistant("hi")], run={"model": "m", "usage": {"prompt_tokens": 3}}, expect_head=head
    )
    assert proxy.counted() == ONE
    chain = s.append_many([user("a"), user("b"), user("c"), user("d")])
    assert proxy.counted() == ONE
    assert [m["content"] for m in s.messages()] == ["hello", "hi", "a", "b", "c", "d"]
    assert s.node(answer.id).run_id == answer.run_id and store.run(answer.run_id).usage == {
        "prompt_tokens": 3
    }
    assert chain[0].parent_id == answer.id and chain[-1].depth == 5
    assert store.verify().ok


def test_a_fork_and_a_checkpoint_cost_one_round_trip_each(counted):
    store, _, proxy = counted
    s = store.create_session("forks")
    first, second = s.append_many([user("hello"), assistant("hi")])
    s.checkpoint("greeted", at="main")
    proxy.counted()
    assert s.fork("again", at=first.id).head_id == first.id
    assert proxy.counted() == ONE
    assert s.fork("from-main", at="main", metadata={"why": "try"}).metadata == {"why": "try"}
    assert s.fork("from-checkpoint", at="greeted").head_id == second.id
    assert proxy.counted() == 2 * ONE
    assert s.checkpoint("hello-said", at=first.id).node_id == first.id
    assert proxy.counted() == ONE
    assert {c.name: c.node_id for c in s.checkpoints()} == {"greeted": second.id, "hello-said": first.id}
    assert {b.name: b.head_id for b in s.branches()}["again"] == first.id


def test_a_decision_costs_two_round_trips_the_pause_read_and_the_write(counted):
    """20 before (25 with a second branch at the pause): the pause's read, which the
    decision is checked against, and one statement that writes it and moves every branch.
    What it refuses goes the long way; with pool_size=1 the message of a refused insert
    waited out the pool's 30 s for a second connection, and said the server was away."""
    from sessiontree import Approve, Conflict, decide
    from test_in_flight import paused

    store, _, proxy = counted
    session, pause = paused(store)
    session.fork("alt", at=pause.id)
    proxy.counted()
    decision = decide(store, pause.id, {"e": Approve()}, by="ann")
    assert proxy.counted() == 2 * ONE
    assert {b.name: b.head_id for b in session.branches()} == {"main": decision.id, "alt": decision.id}
    assert store.node(decision.id).payload == decision.payload and decision.payload["by"] == "ann"
    assert decision.parent_id == pause.id and decision.depth == pause.depth + 1
    with pytest.raises(Conflict, match=f"pause {pause.id} already has a decision"):
        decide(store, pause.id, {"e": Approve()})
    other, stranded = paused(store, "moved on")
    other.move("main", to="main~1")  # no branch stands at the pause any more
    with pytest.raises(Conflict, match="no branch stands at it any more"):
        decide(store, stranded.id, {"e": Approve()})
    trashed, waiting = paused(store, "trashed")
    store.delete_session(trashed.id)
    with pytest.raises(Conflict, match="in the trash"):
        decide(store, waiting.id, {"e": Approve()})
    assert store.verify().ok
