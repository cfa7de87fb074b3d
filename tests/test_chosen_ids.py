"""Caller-chosen node ids and times on ``append`` / ``append_many``: a framework that mints
its own ids (pydantic-ai's UUIDv7 entries, LangGraph's UUIDv6 checkpoints) stores them as
the nodes' ids, on both the one-statement PostgreSQL path and the long one."""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from sessiontree import Store
from sessiontree.errors import Conflict, InvalidPayload
from sessiontree.formats import export_native
from sessiontree.ids import new_id

from conftest import raw

WHEN = "2025-03-04T05:06:07.089Z"


def msg(text: str) -> dict:
    return {"role": "user", "content": text}


def count_nodes(store: Store) -> int:
    return int(raw(store, "SELECT count(*) FROM nodes")[0][0])


def one_line(error: pytest.ExceptionInfo) -> str:
    text = str(error.value)
    assert "\n" not in text
    return text


@pytest.fixture
def paths(any_store, monkeypatch):
    """Which way each append went: 'one' (``append_at_head`` wrote it) or 'long'."""
    taken: list[str] = []
    storage = any_store.storage
    at_head, insert = storage.append_at_head, storage.insert_nodes

    def spy_at_head(*args, **kwargs):
        done = at_head(*args, **kwargs)
        if done is not None:
            taken.append("one")
        return done

    def spy_insert(*args, **kwargs):
        taken.append("long")
        return insert(*args, **kwargs)

    monkeypatch.setattr(storage, "append_at_head", spy_at_head)
    monkeypatch.setattr(storage, "insert_nodes", spy_insert)
    return taken


def test_given_ids_and_time_are_stored_on_both_paths(any_store, db_target, paths):
    s = any_store.create_session()
    root = s.append(msg("root"))  # the branch is new: the long way
    a, b = str(uuid.uuid4()), str(uuid.uuid1())  # any UUID, not only the store's v7
    chain = s.append_many([msg("a"), msg("b")], ids=[a, b], created_at=WHEN, run={"model": "m"})  # the head
    one_statement = any_store.storage.one_statement
    assert paths == ["long", "one" if one_statement else "long"]
    c = new_id()
    side = s.append(msg("c"), parent=root, branch=None, id=c, created_at=WHEN, run={"model": "m"})  # long
    assert paths[-1] == "long"

    assert [n.id for n in chain] == [a, b] and side.id == c
    assert [n.created_at for n in (*chain, side)] == [WHEN] * 3
    assert any_store.run(chain[0].run_id).created_at == any_store.run(side.run_id).created_at == WHEN
    assert chain[0].parent_id == root.id and chain[1].parent_id == a and side.parent_id == root.id
    # read back through a fresh store: nothing is served from this one's path cache
    with Store(db_target) as again:
        t = again.session(s.id)
        assert [n.id for n in t.path("main")] == [root.id, a, b]
        assert t.node(b).created_at == WHEN and t.node(c).created_at == WHEN
        assert t.branch("main").head_id == b and t.branch("main").updated_at == WHEN
    # the path cache of this store holds the same ids
    assert [n.id for n in s.path("main")] == [root.id, a, b]
    assert [n.id for n in s.path(c)] == [root.id, c]
    lines = [json.loads(line) for line in export_native(any_store, [s.id])]
    exported = {rec["id"]: rec["created_at"] for rec in lines if rec.get("type") == "node"}
    assert exported[a] == exported[b] == exported[c] == WHEN


@pytest.mark.parametrize("where", ["head", "parent"])
def test_a_taken_id_writes_nothing(any_store, paths, where):
    s = any_store.create_session()
    root = s.append(msg("root"))
    other = any_store.create_session().append(msg("elsewhere"))  # ids are unique in the store
    before, run_count = count_nodes(any_store), raw(any_store, "SELECT count(*) FROM runs")[0][0]
    fresh = new_id()
    where_to = {"parent": root, "branch": None} if where == "parent" else {}
    with pytest.raises(Conflict) as e:
        s.append_many(
            [msg("x"), msg("y")], ids=[fresh, other.id], run={"model": "m"}, created_at=WHEN, **where_to
        )
    assert one_line(e) == f"node id {other.id} is taken: a node of this store has it"
    assert count_nodes(any_store) == before
    assert raw(any_store, "SELECT count(*) FROM runs")[0][0] == run_count  # the run went too
    assert s.branch("main").head_id == root.id
    assert [n.id for n in s.path("main")] == [root.id]
    s.append(msg("x"), id=fresh)  # the id not taken is still free


def test_the_unique_index_is_mapped_when_the_check_is_raced(any_store, monkeypatch):
    """Another writer takes the id between the check and the insert: the unique index
    refuses it, and the error still names the id."""
    s = any_store.create_session()
    root = s.append(msg("root"))
    taken = any_store.create_session().append(msg("elsewhere")).id
    handle = any_store.storage.handle
    monkeypatch.setattr(any_store.storage, "handle", lambda i: None if i == taken else handle(i))
    before = count_nodes(any_store)
    with pytest.raises(Conflict) as e:
        s.append(msg("x"), parent=root, branch=None, id=taken)
    assert one_line(e) == f"node id {taken} is taken: a node of this store has it"
    assert count_nodes(any_store) == before


def test_an_id_twice_in_one_call_writes_nothing(any_store):
    s = any_store.create_session()
    s.append(msg("root"))
    before, twice = count_nodes(any_store), new_id()
    with pytest.raises(InvalidPayload) as e:
        s.append_many([msg("x"), msg("y")], ids=[twice, twice])
    assert one_line(e) == f"node id {twice} is given twice: each node needs its own"
    assert count_nodes(any_store) == before


@pytest.mark.parametrize(
    ("ids", "says"),
    [
        (["0192F4C1-8E3A-7B2C-9D4E-5F6A7B8C9D0E"], "node id '0192F4C1-8E3A-7B2C-9D4E-5F6A7B8C9D0E' is not"),
        (
            ["{0192f4c1-8e3a-7b2c-9d4e-5f6a7b8c9d0e}"],
            "node id '{0192f4c1-8e3a-7b2c-9d4e-5f6a7b8c9d0e}' is not",
        ),
        (["0192f4c18e3a7b2c9d4e5f6a7b8c9d0e"], "node id '0192f4c18e3a7b2c9d4e5f6a7b8c9d0e' is not"),
        (["main"], "node id 'main' is not"),
        (["0192f4c1-8e3a-7b2c-9d4e-5f6a7b8c9d0e\n"], "is not a lower-case UUID"),
        ([7], "node id '7' is not"),
        ([], "ids has 0 ids for 1 payloads"),
        ("0192f4c1-8e3a-7b2c-9d4e-5f6a7b8c9d0e", "ids must be a list of node ids, not the string"),
    ],
)
def test_a_bad_id_is_one_line_and_writes_nothing(any_store, ids, says):
    s = any_store.create_session()
    s.append(msg("root"))
    before = count_nodes(any_store)
    with pytest.raises(InvalidPayload) as e:
        s.append_many([msg("x")], ids=ids)
    assert says in one_line(e)
    assert count_nodes(any_store) == before


@pytest.mark.parametrize(
    "when",
    [
        "2025-03-04T05:06:07Z",  # no milliseconds
        "2025-03-04T05:06:07.089",  # no zone
        "2025-03-04T05:06:07.089+00:00",
        "2025-03-04 05:06:07.089Z",
        "2025-02-30T05:06:07.089Z",  # no such day
        "2025-03-04T25:06:07.089Z",
        "٢٠٢٥-03-04T05:06:07.089Z",  # digits, but not ASCII ones
        "yesterday\nat noon",
        1741064767.089,
    ],
)
def test_a_bad_time_is_one_line_and_writes_nothing(any_store, when):
    s = any_store.create_session()
    root = s.append(msg("root"))
    before = count_nodes(any_store)
    for where in ({}, {"parent": root, "branch": None}):
        with pytest.raises(InvalidPayload) as e:
            s.append(msg("x"), created_at=when, **where)
        assert "is not a UTC time like 2026-11-30T09:14:15.123Z" in one_line(e)
    assert count_nodes(any_store) == before


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.uuids(), min_size=1, max_size=5, unique=True), st.booleans())
def test_any_uuids_given_are_the_ones_read_back(any_store, uuids, under_parent):
    s = any_store.create_session()
    root = s.append(msg("root"))
    ids = [str(u) for u in uuids]
    assume(all(any_store.storage.handle(i) is None for i in ids))  # one store for every example
    where = {"parent": root, "branch": None} if under_parent else {}
    nodes = s.append_many([msg(str(i)) for i in range(len(ids))], ids=ids, **where)
    assert [n.id for n in nodes] == ids
    assert [n.id for n in s.path(ids[-1])] == [root.id, *ids]
    assert [any_store.node(i).id for i in ids] == ids
