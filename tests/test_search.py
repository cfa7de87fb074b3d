"""Full-text search: what is found, filters, where a hit lives, the index kept in step."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessiontree import InvalidQuery, Store, db
from sessiontree.cli import cli

from conftest import assistant, user


def fts_ok(store: Store) -> None:
    """FTS5's own check that the index holds exactly what the view gives (raises if not)."""
    store.conn.execute("INSERT INTO nodes_fts (nodes_fts, rank) VALUES ('integrity-check', 1)")


def pending(store: Store) -> int:
    """Nodes above the search watermark: inserted, not indexed yet."""
    sql = "SELECT count(*) FROM nodes WHERE key > (SELECT indexed_through FROM search_state)"
    return store.conn.execute(sql).fetchone()[0]


def test_deleted_and_pruned_nodes_leave_the_index(store, garage):
    garage.delete_branch("kitchen")
    store.prune(dry_run=False, grace=0)
    assert store.search("kitchen") == []
    fts_ok(store)
    garage.delete()
    assert store.search("flux") == []
    fts_ok(store)


def test_a_payload_that_is_not_json_is_not_indexed_and_can_still_be_deleted(store, session):
    session.append(user("hello"))
    key = store.conn.execute("SELECT key FROM sessions WHERE id = ?", (session.id,)).fetchone()[0]
    store.conn.execute("DROP TRIGGER nodes_parent_in_session")
    store.conn.execute(
        "INSERT INTO nodes (id, session, parent, depth, kind, payload, created_at)"
        " VALUES ('broken', ?, NULL, 0, 'message', 'not json', 'now')",
        (key,),
    )
    assert [h.node.payload for h in store.search("hello")] == [user("hello")]
    store.conn.execute("DELETE FROM nodes WHERE id = 'broken'")
    fts_ok(store)


def test_the_migration_indexes_what_a_schema_3_store_already_holds(tmp_path, monkeypatch):
    path = tmp_path / "old.db"
    steps = db.migrations()
    monkeypatch.setattr(db, "migrations", lambda: steps[:3])
    with Store(path) as old:
        s = old.create_session("old")
        s.append_many([user("the zeppelin leaves at noon"), assistant("noted")])
        assert old.schema_version == 3
    monkeypatch.undo()
    with Store(path) as store:
        assert store.schema_version == len(steps)
        assert [h.node.payload["content"] for h in store.search("zeppelin")] == [
            "the zeppelin leaves at noon"
        ]
        fts_ok(store)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(st.sampled_from(["append", "fork", "drop", "prune", "search"]), st.text(max_size=30)),
        max_size=12,
    )
)
def test_the_index_stays_in_step_with_the_nodes(store, actions):
    s = store.create_session()
    s.append(user("start"))
    branches = ["main"]
    for i, (action, text) in enumerate(actions):
        if action == "append":
            s.append(user(text or "x"), branch=branches[-1])
        elif action == "fork":
            branches.append(f"b{i}")
            s.fork(branches[-1], at="main")
        elif action == "drop" and len(branches) > 1:
            s.delete_branch(branches.pop())
        elif action == "prune":
            store.prune(dry_run=False, grace=0)
        elif action == "search":  # indexes what is pending: later prunes delete indexed nodes
            store.search("start")
        fts_ok(store)  # holds with nodes pending: the content view leaves them out
    # every node is either indexed or pending, never both, never neither
    (count,) = store.conn.execute("SELECT count(*) FROM nodes").fetchone()
    (indexed,) = store.conn.execute("SELECT count(*) FROM nodes_fts_docsize").fetchone()
    assert count == indexed + pending(store)
    assert len(store.search("start", session=s.id)) == 1  # a search indexes what is pending first
    assert pending(store) == 0
    assert store.conn.execute("SELECT count(*) FROM nodes_fts_docsize").fetchone() == (count,)
    fts_ok(store)


def test_cli_search_prints_ids_that_show_and_log_accept(tmp_path, garage, store):
    dbfile = str(store.path)
    runner = CliRunner()
    result = runner.invoke(cli, ["--db", dbfile, "search", "flux", "--role", "user"], catch_exceptions=False)
    first = garage.path("main")[0]
    short = store.abbreviations([first.id, garage.id])
    assert result.output == (
        f"{short[first.id]}  session {short[garage.id]}  user  kitchen, main, [found]\n"
        "    Find the «flux» capacitor in the garage\n"
    )
    shown = runner.invoke(cli, ["--db", dbfile, "show", short[first.id], "--json"])
    assert json.loads(shown.output)["id"] == first.id
    logged = runner.invoke(cli, ["--db", dbfile, "log", short[first.id], "--json"])
    assert [n["id"] for n in json.loads(logged.output)] == [first.id]
    data = json.loads(runner.invoke(cli, ["--db", dbfile, "search", "gigawatts", "--json"]).output)
    assert [(d["role"], d["branches"], d["checkpoints"]) for d in data] == [("tool", ["main"], ["found"])]
    assert runner.invoke(cli, ["--db", dbfile, "search", "gigawatts", "--no-tools"]).output == "No matches.\n"


def test_cli_bad_query_is_one_line(store, garage):
    result = CliRunner().invoke(cli, ["--db", str(store.path), "search", "a-b"])
    assert result.exit_code == 1
    assert result.output.count("\n") == 1
    assert result.output.startswith("Error: search query 'a-b' is not valid full-text syntax")


def test_writers_index_in_batches_and_as_they_close(tmp_path):
    """An insert leaves its node above the watermark; a writer indexes what it wrote once
    it has written a batch, and when it closes, so other stores find what it wrote."""
    from sessiontree.storage.sqlite_search import SEARCH_BATCH

    path = tmp_path / "batches.db"
    with Store(path) as writer:
        s = writer.create_session()
        for i in range(SEARCH_BATCH - 1):
            s.append(user(f"zebra {i}"))
        assert pending(writer) == SEARCH_BATCH - 1  # nothing indexed yet
        with Store(path, readonly=True) as reader:  # indexes a copy in its own temp table
            assert len(reader.search("zebra", limit=100)) == SEARCH_BATCH - 1
        fts_ok(writer)  # the index agrees with its content view while nodes are pending
        s.append(user("zebra last"))
        assert pending(writer) == 0
        s.append(user("zebra after"))
    with Store(path, readonly=True) as reader:
        assert pending(reader) == 0  # indexed on close
        assert len(reader.search("zebra", limit=100)) == SEARCH_BATCH + 1


def test_nodes_a_schema_6_file_left_queued_are_found_after_the_upgrade(tmp_path, monkeypatch):
    """Step 7 replaces the queue with a watermark: what step 6 had queued is indexed by
    the upgrade, and a node deleted from the top of the key range frees its key for a new,
    unindexed node without the index ever holding it twice."""
    path = tmp_path / "six.db"
    steps = db.migrations()
    monkeypatch.setattr(db, "migrations", lambda: steps[:6])
    conn = db.connect(path)
    conn.execute("INSERT INTO sessions (id, created_at) VALUES ('s1', '2026-11-30T00:00:00.000Z')")
    for depth, text in enumerate(["walrus one", "walrus two", "walrus three"]):
        conn.execute(
            "INSERT INTO nodes (id, session, parent, depth, kind, payload, created_at)"
            " VALUES (?, 1, nullif(?, 0), ?, 'message', ?, '2026-11-30T00:00:00.000Z')",
            (f"n{depth}", depth, depth, json.dumps(user(text))),
        )
    assert conn.execute("SELECT count(*) FROM search_queue").fetchone() == (3,)
    conn.close()
    monkeypatch.undo()
    with Store(path) as store:
        assert store.schema_version == len(db.migrations()) and pending(store) == 0
        fts_ok(store)
        assert sorted(h.node.payload["content"] for h in store.search("walrus")) == [
            "walrus one",
            "walrus three",
            "walrus two",
        ]
        store.conn.execute("DELETE FROM nodes WHERE id = 'n2'")  # the top key, indexed
        assert store.conn.execute("SELECT indexed_through FROM search_state").fetchone() == (2,)
        fts_ok(store)
        key = store.conn.execute(
            "INSERT INTO nodes (id, session, parent, depth, kind, payload, created_at)"
            " VALUES ('n3', 1, 2, 2, 'message', ?, '2026-11-30T00:00:00.000Z')",
            (json.dumps(user("walrus four")),),
        ).lastrowid
        assert key == 3 and pending(store) == 1  # the freed key, given again, is not taken as indexed
        fts_ok(store)
        assert sorted(h.node.payload["content"] for h in store.search("walrus")) == [
            "walrus four",
            "walrus one",
            "walrus two",
        ]
        fts_ok(store)


def test_an_index_turned_off_costs_appends_nothing_and_search_says_so(tmp_path):
    from sessiontree import SearchIndexOff

    path = tmp_path / "off.db"
    with Store(path) as store:
        s = store.create_session()
        s.append(user("narwhal before"))
        assert store.search_index().to_dict() == {"enabled": True, "indexed": 0, "pending": 1, "bytes": 32768}
        assert store.set_search_index(False) == 0
        for i in range(SEARCH_BATCH_PLUS):
            s.append(user(f"narwhal {i}"))
        assert store.search_index().enabled is False
        assert store.conn.execute("SELECT count(*) FROM nodes_fts_docsize").fetchone() == (0,)
        fts_ok(store)  # the empty index agrees with its (empty) content view
        with pytest.raises(SearchIndexOff, match=r"the search index of .*off\.db is off; turn it on with"):
            store.search("narwhal")
        store.prune(dry_run=False, grace=0)  # deletes touch no index while it is off
        s.delete_branch("main")
        store.prune(dry_run=False, grace=0)
        s.append(user("narwhal after"))
        assert store.set_search_index(True) == 1  # every node there is, in one go
        assert [h.node.payload["content"] for h in store.search("narwhal")] == ["narwhal after"]
        assert store.search_index().pending == 0
        fts_ok(store)
    with Store(path) as store:  # the setting lives in the file
        assert store.search_index().enabled


SEARCH_BATCH_PLUS = 70  # more than a batch: a writer with the index off still never indexes


def test_check_finds_a_damaged_index_and_rebuild_repairs_it(store, garage):
    assert store.check_search_index() is None
    store.search("flux")  # indexed
    store.conn.execute(  # another program removes one node's words behind the index's back
        "INSERT INTO nodes_fts (nodes_fts, rowid, text, tools)"
        " SELECT 'delete', key, text, tools FROM node_text WHERE key = (SELECT min(key) FROM nodes)"
    )
    assert store.check_search_index().startswith("FTS5 integrity-check: ")
    assert len(store.search("flux")) == 1  # the first message's words are gone from the index
    assert store.set_search_index(True, rebuild=True) == 5
    assert store.check_search_index() is None
    assert len(store.search("flux")) == 2


def test_indexing_a_whole_store_reports_progress_chunk_by_chunk(tmp_path, monkeypatch):
    from sessiontree.storage import sqlite_search

    monkeypatch.setattr(sqlite_search, "INDEX_CHUNK", 40)
    with Store(tmp_path / "chunks.db") as store:
        store.set_search_index(False)
        s = store.create_session()
        s.append_many([user(f"heron {i}") for i in range(100)])
        reports: list[tuple[int, int]] = []
        assert store.set_search_index(True, progress=lambda done, total: reports.append((done, total))) == 100
        assert reports == [(40, 100), (80, 100), (100, 100)]
        assert store.search_index().pending == 0
        fts_ok(store)
        assert len(store.search("heron", limit=200)) == 100


def test_checking_needs_write_access(tmp_path, garage, store):
    from sessiontree import ReadOnly

    with Store(store.path, readonly=True) as reader, pytest.raises(ReadOnly, match="needs write access"):
        reader.check_search_index()


def test_cli_search_index_never_creates_a_store(tmp_path):
    missing = tmp_path / "missing.db"
    for action in ("status", "on", "off", "rebuild", "check"):
        result = CliRunner().invoke(cli, ["--db", str(missing), "search-index", action])
        assert result.exit_code == 1 and result.output.startswith(f"Error: no database at {missing}"), action
    assert not missing.exists()


def test_cli_search_index(store, garage):
    runner, db_args = CliRunner(), ["--db", str(store.path)]
    store.search("flux")  # everything indexed
    assert runner.invoke(cli, [*db_args, "search-index"]).output == (
        "search index on: 5 nodes indexed, 0 pending, 32768 bytes\n"
    )
    assert runner.invoke(cli, [*db_args, "search-index", "check"]).output == "search index ok\n"
    off = runner.invoke(cli, [*db_args, "search-index", "off"])
    turn_on = f"sessiontree --db {store.path} search-index on"  # the --db this command was given
    assert off.output == f"search index off (turn it on with `{turn_on}`)\n"
    refused = runner.invoke(cli, [*db_args, "search", "flux"])
    assert refused.exit_code == 1
    assert refused.output == (
        f"Error: the search index of {store.path} is off; turn it on with `{turn_on}`\n"
    )
    on = runner.invoke(cli, [*db_args, "search-index", "on", "--json"])
    assert json.loads(on.stdout) == {"enabled": True, "indexed": 5, "pending": 0, "bytes": 32768}
    assert on.stderr.startswith("indexing")  # the progress bar
    store.conn.execute(
        "INSERT INTO nodes_fts (nodes_fts, rowid, text, tools)"
        " SELECT 'delete', key, text, tools FROM node_text WHERE key = (SELECT min(key) FROM nodes)"
    )
    damaged = runner.invoke(cli, [*db_args, "search-index", "check"])
    assert damaged.exit_code == 1
    assert damaged.output.startswith(
        "Error: the search index disagrees with the nodes (FTS5 integrity-check: "
    )
    assert damaged.output.endswith(f"; repair it with `sessiontree --db {store.path} search-index rebuild`\n")
    as_json = runner.invoke(cli, [*db_args, "search-index", "check", "--json"])
    assert as_json.exit_code == 1 and json.loads(as_json.output)["ok"] is False
    rebuilt = runner.invoke(cli, [*db_args, "search-index", "rebuild"])
    assert rebuilt.stdout == "search index on: 5 nodes indexed, 0 pending, 32768 bytes\n"
    assert runner.invoke(cli, [*db_args, "search-index", "check"]).exit_code == 0


def test_turning_the_index_off_and_on_while_another_store_writes(tmp_path):
    """The switch lives in the file: a writer that has unindexed nodes when another store
    turns the index off indexes nothing when it closes, and turning it on indexes
    everything every store wrote."""
    path = tmp_path / "shared.db"
    with Store(path) as admin, Store(path) as writer:
        s = writer.create_session()
        for i in range(10):
            s.append(user(f"osprey {i}"))  # pending: below a batch
        assert admin.set_search_index(False) == 0
        for i in range(SEARCH_BATCH_PLUS):  # past a batch: the writer's flush finds it off
            s.append(user(f"osprey more {i}"))
        assert writer.search_index().to_dict()["enabled"] is False
        fts_ok(writer)
    with Store(path) as admin:  # the writer closed with the index off: nothing indexed
        assert admin.conn.execute("SELECT count(*) FROM nodes_fts_docsize").fetchone() == (0,)
        assert admin.set_search_index(True) == 10 + SEARCH_BATCH_PLUS
        assert len(admin.search("osprey", limit=200)) == 10 + SEARCH_BATCH_PLUS
        fts_ok(admin)


@pytest.mark.parametrize(
    ("query", "error"),
    [
        ("foo-bar", "search query 'foo-bar' is not valid full-text syntax"),
        ('"open', "search query '\"open' is not valid full-text syntax"),
        ("   ", "the search query is empty"),
    ],
)
def test_a_bad_query_is_one_clear_error(store, garage, query, error):
    with pytest.raises(InvalidQuery, match=error.replace("(", r"\(")):
        store.search(query)


def test_a_query_cannot_escape_the_text_column(store, garage):
    with pytest.raises(InvalidQuery, match="closes a parenthesis it never opened"):
        store.search("shelf) OR (gigawatts", tools=False)
    assert store.search('"shelf) OR (gigawatts"', tools=False) == []  # quoted: a phrase
