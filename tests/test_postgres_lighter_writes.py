"""PostgreSQL schema step 13: one stored search vector, one insert trigger, fixed plans.

Step 12 stored two vectors a node (``search_text``, ``search_tools``), each computed by
parsing the payload two or three times, and checked each insert with two triggers. Step
13 stores one, ``search_vector`` (the text's words weighted A, the tools' D), and checks
with one trigger; what a search finds and how it ranks it must not change.
"""

from __future__ import annotations

import json

import pytest

from sessiontree import Conflict, Store
from sessiontree.model import encode_payload
from test_postgres_search_index import TEXT_VECTOR, TOOLS_VECTOR

from conftest import assistant, raw, server_transaction, user

CALL = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"city": "Oslo"}'}}

# (kind, payload) of every shape the vector reads, and text PostgreSQL's parser refuses.
PAYLOADS = [
    ("message", user("Rain in Paris, said O'Brien")),
    ("message", assistant("paris again, and paris", [CALL])),
    ("message", assistant(None, [CALL])),
    ("message", {"role": "tool", "tool_call_id": "c1", "name": "lookup", "content": "oslo: rain"}),
    ("message", {"role": "tool", "tool_call_id": "c1", "content": "no name here"}),
    ("message", {"role": "user", "content": "before\u0000after and \ud800 odd"}),
    ("message", {"role": "user", "content": [{"type": "text", "text": "parts of paris"}]}),
    ("message", {"role": "user"}),
    ("pause", {"reason": "approve the wire transfer", "calls": [CALL]}),
    ("tool_start", {"reason": "starting", "calls": [CALL]}),
    ("summary", {"summary": "they talked of paris", "covers": {"nodes": 3}}),
    ("error", {"message": "the model timed out", "type": "timeout"}),
    ("decision", {"action": "approve", "by": "ann"}),
]


def test_the_one_vector_is_the_two_old_vectors_joined_for_every_kind(pg_url):
    with Store(pg_url) as store:
        for kind, payload in PAYLOADS:
            text = encode_payload(payload, kind)
            ((same, words),) = raw(
                store,
                "SELECT sessiontree_node_vectors(?, ?)"
                " = setweight(sessiontree_node_vector(?, ?, false), 'A') || sessiontree_node_vector(?, ?, true),"
                " length(sessiontree_node_vectors(?, ?))",
                (kind, text) * 4,
            )
            assert same, (kind, payload)
            assert words > 0 or payload == {"role": "user"}, (kind, payload)


def step_12_store(pg_url: str, monkeypatch: pytest.MonkeyPatch, search: bool = True) -> None:
    from sessiontree import db
    from sessiontree.storage import postgres_db

    every_step, every_pg_step = db.migrations(), postgres_db.steps()
    monkeypatch.setattr(db, "migrations", lambda: every_step[:12])
    monkeypatch.setattr(postgres_db, "steps", lambda: [s for s in every_pg_step if s.version <= 12])
    with Store(pg_url) as old:
        assert old.schema_version == 12
        s = old.create_session("before")
        s.append_many([user("What is the weather in Paris? Paris, paris"), assistant("Sunny in Paris")])
        s.append(assistant("looking up paris weather for Oslo", [CALL]))
        s.append(
            {"role": "tool", "tool_call_id": "c1", "name": "lookup", "content": "rain in Oslo, not paris"}
        )
        s.append(user("and oslo? lookup it"))
        if not search:
            old.set_search_index(False)
    monkeypatch.undo()


def node_columns(store: Store) -> set[str]:
    rows = raw(
        store,
        "SELECT column_name FROM information_schema.columns"
        " WHERE table_schema = current_schema() AND table_name = 'nodes'",
    )
    return {c for (c,) in rows}


QUERIES = ["paris", "oslo", "lookup", "paris oslo", '"in paris"', "paris -oslo", "paris OR rain"]


def test_a_step_12_store_finds_and_ranks_the_same_after_step_13(pg_url, monkeypatch):
    step_12_store(pg_url, monkeypatch)
    with Store(pg_url) as store:
        assert store.schema_version == 13
        columns = node_columns(store)
        assert "search_vector" in columns and not {"search_text", "search_tools"} & columns
        for query in QUERIES:  # the ranks steps 4 to 12 gave, from the vectors they stored
            for with_tools in (False, True):
                vector = f"{TEXT_VECTOR} || {TOOLS_VECTOR}" if with_tools else TEXT_VECTOR
                expected = raw(
                    store,
                    f"SELECT id FROM nodes, websearch_to_tsquery('simple', ?) q"
                    f" WHERE ({vector}) @@ q ORDER BY ts_rank({vector}, q) DESC, id",
                    (query,),
                )
                hits = [h.node.id for h in store.search(query, tools=with_tools)]
                assert hits == [i for (i,) in expected], (query, with_tools)
                assert hits or query == '"in paris"' and not with_tools


def test_a_step_12_store_with_search_off_stays_off_and_turns_on_whole(pg_url, monkeypatch):
    from sessiontree import SearchIndexOff

    step_12_store(pg_url, monkeypatch, search=False)
    with Store(pg_url) as store:
        assert store.schema_version == 13
        assert not {"search_vector", "search_text", "search_tools"} & node_columns(store)
        assert not store.search_index().enabled
        with pytest.raises(SearchIndexOff):
            store.search("paris")
        assert store.set_search_index(True) == 5
        assert len(store.search("oslo")) == 3 and len(store.search("oslo", tools=False)) == 2


def test_the_index_merges_its_pending_list_a_turn_at_a_time_on_and_off_again(pg_url):
    with Store(pg_url) as store:
        store.create_session().append(user("Rain in Paris"))
        options = "SELECT reloptions FROM pg_class WHERE oid = to_regclass('nodes_search_all')"
        assert raw(store, options) == [(["gin_pending_list_limit=64"],)]
        store.set_search_index(False)
        assert raw(store, options) == []
        assert store.set_search_index(True) == 1
        assert raw(store, options) == [(["gin_pending_list_limit=64"],)]
        assert [h.node.payload["content"] for h in store.search("paris")] == ["Rain in Paris"]


def test_one_before_insert_trigger_keeps_every_check(pg_url):
    with Store(pg_url) as store:
        ((triggers,),) = raw(
            store,
            "SELECT array_agg(tgname::text ORDER BY tgname) FROM pg_trigger"
            " WHERE tgrelid = to_regclass('nodes') AND NOT tgisinternal"
            " AND tgtype & 2 = 2 AND tgtype & 4 = 4",  # BEFORE, INSERT
        )
        assert triggers == ["nodes_in_session"]
        a, b = store.create_session("a"), store.create_session("b")
        first = a.append(user("hello"))
        b.append(user("there"))
        with server_transaction(store) as conn, pytest.raises(Exception, match="same session, one level up"):
            conn.execute(
                "INSERT INTO nodes (key, id, session, parent, depth, kind, payload, created_at)"
                " SELECT sessiontree_reserve_node_keys(1), 'x', s.key, n.key, 1, 'message', '{}', 't'"
                " FROM sessions s, nodes n WHERE s.id = %s AND n.id = %s",
                (b.id, first.id),
            )
        with server_transaction(store) as conn, pytest.raises(Exception, match="an existing session"):
            conn.execute(
                "INSERT INTO nodes (key, id, session, depth, kind, payload, created_at)"
                " VALUES (sessiontree_reserve_node_keys(1), 'y', -7, 0, 'message', '{}', 't')"
            )
        store.delete_session(b.id)  # to the trash
        with pytest.raises(Conflict, match=f"session {b.id} is in the trash"):
            b.append(user("more"))
        with pytest.raises(Conflict, match=f"session {b.id} is in the trash"):
            b.append_many([user("one"), user("two")])
        assert [m["content"] for m in a.messages()] == ["hello"]


def test_the_write_functions_keep_their_plans_and_are_never_compiled(pg_url):
    writes = ["sessiontree_append", "sessiontree_fork", "sessiontree_decide", "sessiontree_ref_walk"]
    walks = ["sessiontree_path", "sessiontree_tree"]
    with Store(pg_url) as store:
        rows = dict(
            raw(
                store,
                "SELECT proname::text, proconfig FROM pg_proc"
                " WHERE pronamespace = to_regnamespace(current_schema()) AND proname = ANY(?)",
                (writes + walks,),
            )
        )
        for name in writes:
            assert {"plan_cache_mode=force_generic_plan", "jit=off"} <= set(rows[name]), name
        for name in walks:
            assert "jit=off" in rows[name], name


def test_a_chain_goes_in_with_its_parents_and_depths_in_order(pg_url):
    with Store(pg_url) as store:
        s = store.create_session()
        s.append(user("root"))
        chain = s.append_many([user(f"m{i}") for i in range(7)])
        rows = raw(
            store,
            "SELECT n.id, p.id, n.depth FROM nodes n LEFT JOIN nodes p ON p.key = n.parent"
            " WHERE n.id = ANY(?) ORDER BY n.depth",
            ([n.id for n in chain],),
        )
        parents = [s.path("main")[0].id, *[n.id for n in chain[:-1]]]
        assert rows == [
            (n.id, parent, i + 1) for i, (n, parent) in enumerate(zip(chain, parents, strict=True))
        ]
        assert json.loads(raw(store, "SELECT payload FROM nodes WHERE id = ?", (chain[3].id,))[0][0]) == user(
            "m3"
        )
