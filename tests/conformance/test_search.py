"""Search, trash, retention and compaction give the same answers on SQLite and PostgreSQL,
from the same test code (the ``store`` fixture). The SQLite-only details (FTS5 syntax,
the index's own integrity check) are in test_search.py and test_retention.py."""

from __future__ import annotations

import pytest

from conformance.sample import fill, found
from sessiontree import InvalidQuery, Store

from conftest import raw, server_transaction, user


def test_words_phrases_filters_and_where_a_hit_lives(store):
    a, b = fill(store)
    assert found(store, "paris") == [
        "A recipe with paris mushrooms, please",
        "Sunny in Paris, 21C.",
        "What is the weather in Paris?",
    ]
    assert found(store, '"sunny in paris"') == ["Sunny in Paris, 21C."]
    assert found(store, "paris mushrooms") == ["A recipe with paris mushrooms, please"]
    assert found(store, "paris OR oslo") == [
        "",  # the assistant message calling get_weather(city=Oslo): found by its arguments
        "A recipe with paris mushrooms, please",
        "Rain in Oslo",
        "Sunny in Paris, 21C.",
        "What is the weather in Paris?",
    ]
    assert found(store, "oslo", tools=False) == []
    assert found(store, "paris", session=b.id) == ["A recipe with paris mushrooms, please"]
    assert found(store, "paris", role="assistant") == ["Sunny in Paris, 21C."]
    assert found(store, "paris", branch="other") == ["What is the weather in Paris?"]
    assert found(store, "before") == ["before\x00after and \ud800 odd"]
    (hit,) = store.search('"sunny in paris"')
    assert (hit.session_id, hit.branches, hit.checkpoints) == (a.id, ["main"], ["answered"])
    assert hit.snippet.startswith("«Sunny") and "»" in hit.snippet  # marks: phrase (FTS5) or words
    (first,) = store.search("weather", tools=False)
    assert sorted(first.branches) == ["main", "other"]
    newest = store.search("paris", newest=True)
    assert newest[0].node.payload["content"] == "A recipe with paris mushrooms, please"


def test_the_same_data_gives_the_same_hits_on_both_backends(tmp_path, pg_url):
    results = []
    for target in (str(tmp_path / "s.db"), pg_url):
        with Store(target) as store:
            fill(store)
            results.append(
                [
                    [
                        (h.node.id[-12:] and h.node.payload.get("content"), h.branches, h.checkpoints)
                        for h in hits
                    ]
                    for hits in (
                        store.search("paris", newest=True),
                        store.search("weather OR rain", newest=True),
                        store.search('"in paris"', newest=True),
                    )
                ]
            )
    assert results[0] == results[1]


def test_the_search_index_reports_rebuilds_and_checks_on_both_backends(store):
    fill(store)
    store.search("paris")  # SQLite indexes what is pending first
    state = store.search_index()
    assert (state.enabled, state.indexed, state.pending) == (True, 6, 0)
    assert state.bytes is not None and state.bytes > 0
    assert store.set_search_index(True, rebuild=True) == 6
    assert store.check_search_index() is None
    assert found(store, "paris") == [
        "A recipe with paris mushrooms, please",
        "Sunny in Paris, 21C.",
        "What is the weather in Paris?",
    ]


def test_the_index_turns_off_and_back_on_on_both_backends(store):
    """Off, a store indexes nothing (PostgreSQL: no search columns, no index) and search
    says how to turn it back on; on again, every node is found as before, written while
    it was off or not."""
    from sessiontree import SearchIndexOff

    a, _ = fill(store)
    before = found(store, "paris OR oslo")
    assert store.set_search_index(False) == 0
    assert not store.search_index().enabled
    with pytest.raises(SearchIndexOff, match="search index of .* is off; turn it on with"):
        store.search("paris")
    store.session(a.id).append(user("Snow in Paris"), branch="other")  # written while off
    if str(store.path).startswith("postgresql://"):
        columns = raw(
            store,
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND table_name = 'nodes'",
        )
        assert not {("search_text",), ("search_tools",), ("search_vector",)} & set(columns)
    assert store.set_search_index(True) == store.search_index().indexed
    assert found(store, "paris OR oslo") == sorted([*before, "Snow in Paris"])
    assert found(store, "oslo", tools=False) == []


def test_a_step_8_server_store_is_searchable_after_step_9(pg_url, monkeypatch):
    """Step 9 replaces search_all (text and tools in one vector) with search_tools and an
    index on both vectors joined: rows written before the step are found as before, by
    their text and by their tool texts, and rows written after it too."""
    from sessiontree import db
    from sessiontree.storage import postgres_db
    from sessiontree.storage.postgres_find import ALL_VECTOR

    every_step, every_pg_step = db.migrations(), postgres_db.steps()
    monkeypatch.setattr(db, "migrations", lambda: every_step[:8])
    monkeypatch.setattr(postgres_db, "steps", lambda: [s for s in every_pg_step if s.version <= 8])
    with Store(pg_url) as old:
        a, _ = fill(old)
        assert old.schema_version == 8
    monkeypatch.undo()
    with Store(pg_url) as store:
        assert store.schema_version == len(every_step)
        columns = raw(
            store,
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND table_name = 'nodes'",
        )
        assert ("search_vector",) in columns  # step 13's one vector, in place of step 9's two
        assert not {("search_all",), ("search_text",), ("search_tools",)} & set(columns)
        assert found(store, "paris OR oslo") == [
            "",  # found by its call's arguments
            "A recipe with paris mushrooms, please",
            "Rain in Oslo",
            "Sunny in Paris, 21C.",
            "What is the weather in Paris?",
        ]
        assert found(store, "oslo", tools=False) == []
        assert found(store, '"sunny in paris"') == ["Sunny in Paris, 21C."]
        assert found(store, "get_weather rain") == ["Rain in Oslo"]  # the tool's name and output
        assert found(store, "paris -mushrooms", tools=False) == [
            "Sunny in Paris, 21C.",
            "What is the weather in Paris?",
        ]
        store.session(a.id).append(
            {"role": "tool", "tool_call_id": "c9", "name": "lookup", "content": "hail in Bergen"},
            branch="other",
        )
        assert found(store, "lookup bergen") == ["hail in Bergen"]
        assert found(store, "lookup", tools=False) == []
        # the query's expression is the index's: the planner can use it
        with server_transaction(store) as conn:
            conn.execute("SET LOCAL enable_seqscan = off")  # a table this small is scanned
            plan = conn.execute(f"EXPLAIN SELECT 1 FROM nodes n WHERE {ALL_VECTOR} @@ 'oslo'::tsquery")
            assert "nodes_search_all" in " ".join(line for (line,) in plan.fetchall())


def test_a_hit_names_its_node_session_snippet_and_the_refs_that_reach_it(store, garage):
    first = garage.path("main")[0]
    hits = store.search("flux", role="user")
    assert [h.node.id for h in hits] == [first.id]
    (hit,) = hits
    assert hit.session_id == garage.id and hit.node == first
    assert hit.snippet == "Find the «flux» capacitor in the garage"
    assert (hit.branches, hit.checkpoints) == (["kitchen", "main"], ["found"])
    assert hit.to_dict()["branches"] == ["kitchen", "main"]


def test_tool_arguments_and_results_are_searched_unless_left_out(store, garage):
    assert {h.node.role for h in store.search("gigawatts")} == {"tool"}
    assert {h.node.role for h in store.search("grep_files")} == {"assistant"}
    assert {h.node.role for h in store.search("capacitor")} == {"user", "assistant", "tool"}
    assert store.search("gigawatts", tools=False) == []
    assert [h.node.role for h in store.search("capacitor", tools=False)] == ["user"]


def test_filters_session_branch_role_kind_and_limit(store, garage):
    other = store.create_session("other")
    other.append(user("a flux of visitors"))
    assert len(store.search("flux")) == 3
    assert {h.session_id for h in store.search("flux", session=other.id[:13])} == {other.id}
    # on the kitchen branch: the first question and the kitchen turn, not main's later nodes
    assert store.search("gigawatts", branch="kitchen") == []
    assert [h.node.role for h in store.search("flux", branch="kitchen")] == ["user"]
    assert [h.node.payload["content"] for h in store.search("kitchen", branch="kitchen")] == [
        "Look in the kitchen instead"
    ]
    assert {h.node.kind for h in store.search("capacitor", kind="message")} == {"message"}
    assert store.search("capacitor", kind="note") == []
    assert len(store.search("flux", limit=1)) == 1


def test_newest_returns_the_most_recently_written_matches_first(store, garage):
    later = store.create_session("later")
    later.append(user("flux again, later"))
    newest = store.search("flux", newest=True)
    assert [h.node.id for h in newest] == sorted((h.node.id for h in newest), reverse=True)
    assert newest[0].session_id == later.id
    assert len(store.search("flux", newest=True, limit=2)) == 2


def test_a_lone_surrogate_does_not_break_a_snippet(store, session):
    session.append(user("broken \ud800 surrogate"))
    (hit,) = store.search("surrogate")
    assert hit.snippet.startswith("broken ") and hit.snippet.endswith("«surrogate»")


def test_markers_are_searchable(store, session):
    session.append(user("go"))
    session.append({"summary": "We agreed on the plutonium budget."}, kind="summary")
    session.append({"error": "ProviderError", "message": "upstream timeout"}, kind="error")
    assert [h.node.kind for h in store.search("plutonium")] == ["summary"]
    assert [h.node.kind for h in store.search("timeout")] == ["error"]


def test_bad_filters_are_refused(store, garage):
    with pytest.raises(InvalidQuery, match="no role 'robot'"):
        store.search("flux", role="robot")
    with pytest.raises(InvalidQuery, match="no node kind 'blob'"):
        store.search("flux", kind="blob")
    with pytest.raises(InvalidQuery, match="limit"):
        store.search("flux", limit=0)
