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
