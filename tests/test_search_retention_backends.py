"""Search, trash, retention and compaction give the same answers on SQLite and PostgreSQL,
from the same test code (the ``any_store`` fixture). The SQLite-only details (FTS5 syntax,
the index's own integrity check) are in test_search.py and test_retention.py."""

from __future__ import annotations

import time

import pytest

from sessiontree import Conflict, Store

from conftest import assistant, raw, schema_refusals, user

CALL = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}


def fill(store: Store):
    a = store.create_session("weather")
    a.append_many([user("What is the weather in Paris?"), assistant("Sunny in Paris, 21C.")])
    a.checkpoint("answered", at="main")
    a.fork("other", at="main~1")
    a.append(assistant(None, [CALL]), branch="other")
    a.append(
        {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "Rain in Oslo"},
        branch="other",
    )
    b = store.create_session("cooking")
    b.append(user("A recipe with paris mushrooms, please"))
    b.append(
        {"role": "user", "content": "before\x00after and \ud800 odd"}
    )  # what PostgreSQL's parser refuses
    return a, b


def found(store: Store, query: str, **filters) -> list[str]:
    return sorted(hit.node.payload.get("content") or "" for hit in store.search(query, **filters))


def test_words_phrases_filters_and_where_a_hit_lives(any_store):
    a, b = fill(any_store)
    assert found(any_store, "paris") == [
        "A recipe with paris mushrooms, please",
        "Sunny in Paris, 21C.",
        "What is the weather in Paris?",
    ]
    assert found(any_store, '"sunny in paris"') == ["Sunny in Paris, 21C."]
    assert found(any_store, "paris mushrooms") == ["A recipe with paris mushrooms, please"]
    assert found(any_store, "paris OR oslo") == [
        "",  # the assistant message calling get_weather(city=Oslo): found by its arguments
        "A recipe with paris mushrooms, please",
        "Rain in Oslo",
        "Sunny in Paris, 21C.",
        "What is the weather in Paris?",
    ]
    assert found(any_store, "oslo", tools=False) == []
    assert found(any_store, "paris", session=b.id) == ["A recipe with paris mushrooms, please"]
    assert found(any_store, "paris", role="assistant") == ["Sunny in Paris, 21C."]
    assert found(any_store, "paris", branch="other") == ["What is the weather in Paris?"]
    assert found(any_store, "before") == ["before\x00after and \ud800 odd"]
    (hit,) = any_store.search('"sunny in paris"')
    assert (hit.session_id, hit.branches, hit.checkpoints) == (a.id, ["main"], ["answered"])
    assert hit.snippet.startswith("«Sunny") and "»" in hit.snippet  # marks: phrase (FTS5) or words
    (first,) = any_store.search("weather", tools=False)
    assert sorted(first.branches) == ["main", "other"]
    newest = any_store.search("paris", newest=True)
    assert newest[0].node.payload["content"] == "A recipe with paris mushrooms, please"


def test_trash_hides_restores_and_empties(any_store):
    a, b = fill(any_store)
    any_store.delete_session(b.id)  # moves it to the trash
    assert [s.id for s in any_store.sessions()] == [a.id]
    assert found(any_store, "mushrooms") == []
    assert [t.session_id for t in any_store.trash()] == [b.id]
    with pytest.raises(Conflict, match="in the trash"):
        any_store.session(b.id).append(user("still there?"))
    any_store.restore_session(b.id)
    assert found(any_store, "mushrooms") == ["A recipe with paris mushrooms, please"]
    any_store.delete_session(b.id)
    time.sleep(0.01)  # emptying takes what was trashed before now
    assert [t.session_id for t in any_store.empty_trash(dry_run=True)] == [b.id]
    any_store.empty_trash()
    assert any_store.trash() == [] and raw(any_store, "SELECT count(*) FROM nodes")[0][0] == 4


def test_stripping_a_large_tool_result_is_recorded_searchable_and_the_only_change_allowed(any_store):
    a, _ = fill(any_store)
    big = "x " * 8000 + "needle"
    a.append(assistant(None, [{**CALL, "id": "c2"}]), branch="other")
    node = a.append({"role": "tool", "tool_call_id": "c2", "content": big}, branch="other")
    time.sleep(0.01)
    preview = any_store.retention(strip_older_than=0.001, strip_min_bytes=10_000)
    assert preview.dry_run and [(s.node_id, s.bytes) for s in preview.stripped] == [(node.id, len(big))]
    assert found(any_store, "needle") == [big]
    report = any_store.retention(strip_older_than=0.001, strip_min_bytes=10_000, dry_run=False)
    assert [s.node_id for s in report.stripped] == [node.id]
    content = any_store.node(node.id).payload["content"]
    assert "stripped" in content and f"{len(big):,} bytes removed" in content
    assert found(any_store, "needle") == []
    (record,) = any_store.redactions()
    assert (record["node"], record["field"], record["bytes"]) == (node.id, "content", len(big))
    with pytest.raises(schema_refusals(), match="nodes are immutable"):
        raw(any_store, 'UPDATE nodes SET payload = \'{"role":"tool"}\' WHERE id = ?', (node.id,))
    assert any_store.verify().ok


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


def test_the_search_index_reports_rebuilds_and_checks_on_both_backends(any_store):
    fill(any_store)
    any_store.search("paris")  # SQLite indexes what is pending first
    state = any_store.search_index()
    assert (state.enabled, state.indexed, state.pending) == (True, 6, 0)
    assert state.bytes is not None and state.bytes > 0
    assert any_store.set_search_index(True, rebuild=True) == 6
    assert any_store.check_search_index() is None
    assert found(any_store, "paris") == [
        "A recipe with paris mushrooms, please",
        "Sunny in Paris, 21C.",
        "What is the weather in Paris?",
    ]


def test_the_index_turns_off_and_back_on_on_both_backends(any_store):
    """Off, a store indexes nothing (PostgreSQL: no search columns, no index) and search
    says how to turn it back on; on again, every node is found as before, written while
    it was off or not."""
    from sessiontree import SearchIndexOff

    a, _ = fill(any_store)
    before = found(any_store, "paris OR oslo")
    assert any_store.set_search_index(False) == 0
    assert not any_store.search_index().enabled
    with pytest.raises(SearchIndexOff, match="search index of .* is off; turn it on with"):
        any_store.search("paris")
    any_store.session(a.id).append(user("Snow in Paris"), branch="other")  # written while off
    if str(any_store.path).startswith("postgresql://"):
        columns = raw(
            any_store,
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND table_name = 'nodes'",
        )
        assert ("search_text",) not in columns and ("search_tools",) not in columns
    assert any_store.set_search_index(True) == any_store.search_index().indexed
    assert found(any_store, "paris OR oslo") == sorted([*before, "Snow in Paris"])
    assert found(any_store, "oslo", tools=False) == []


def test_a_redaction_by_another_store_reaches_this_stores_cached_reads(db_target):
    """Nodes are cached because they never change; a redaction is the one change they
    may undergo. Another store (another process) that strips a result counts it in the
    file, and this store's next read of the path sees the marker, not the cached text."""
    big = "x " * 8000
    with Store(db_target) as agent, Store(db_target) as janitor:
        s = agent.create_session("long-lived")
        s.append(user("list the files"))
        s.append(assistant(None, [CALL]))
        s.append({"role": "tool", "tool_call_id": "c1", "content": big})
        assert s.messages()[-1]["content"] == big  # read, and now cached
        time.sleep(0.01)
        report = janitor.retention(strip_older_than=0.001, strip_min_bytes=10_000, dry_run=False)
        assert len(report.stripped) == 1
        if db_target.startswith("postgresql://"):
            time.sleep(agent.storage.redaction_check_every)  # a server store looks once a second
        stripped = s.messages()[-1]["content"]
        assert "stripped" in stripped and stripped != big
        assert s.path("main")[-1].payload["content"] == stripped
        s.append(assistant("done"))  # the cache goes on growing from the fresh read
        assert [m["content"] for m in s.messages()][-2:] == [stripped, "done"]


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
        assert ("search_tools",) in columns and ("search_all",) not in columns
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
        with store.storage.pool.connection() as conn, conn.transaction():  # type: ignore[attr-defined]
            conn.execute("SET LOCAL enable_seqscan = off")  # a table this small is scanned
            plan = conn.execute(f"EXPLAIN SELECT 1 FROM nodes n WHERE {ALL_VECTOR} @@ 'oslo'::tsquery")
            assert "nodes_search_all" in " ".join(line for (line,) in plan.fetchall())
