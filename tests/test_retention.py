"""Retention: the trash, drop and strip policies with a preview, recorded redactions."""

from __future__ import annotations

import json
import sqlite3
import time

import pytest
from click.testing import CliRunner

from sessiontree import Conflict, Store, export_file
from sessiontree.cli import cli
from sessiontree.testing import tool_call

from conftest import assistant, user


def big_tool_session(store: Store, title: str = "tools", size: int = 5000):
    s = store.create_session(title)
    s.append(user("x" * size))  # a big user message: never stripped
    s.append(assistant(None, [tool_call("cat", {"path": "a.log"}, id="c1")]))
    s.append({"role": "tool", "tool_call_id": "c1", "content": "walrus " * (size // 7)})
    s.append(assistant("y" * size))
    return s


def settle() -> None:
    time.sleep(0.005)  # what was written in this very millisecond is not older than 0 s


def fts_ok(store: Store) -> None:
    store.conn.execute("INSERT INTO nodes_fts (nodes_fts, rank) VALUES ('integrity-check', 1)")


def test_a_trashed_session_is_hidden_kept_and_restorable(store, session):
    session.append(user("the narwhal plan"))
    session.delete()
    assert store.sessions(include_archived=True) == [] and store.search("narwhal") == []
    assert [(t.session_id, t.nodes) for t in store.trash()] == [(session.id, 1)]
    trashed_at = store.session(session.id).trashed_at
    assert trashed_at is not None
    session.delete()  # deleting again keeps its time in the trash
    assert store.trash()[0].trashed_at == trashed_at == session.trashed_at
    store.prune(dry_run=False, grace=0)  # its refs still hold its nodes
    store.restore_session(session.id[:13])
    assert [h.node.payload["content"] for h in store.search("narwhal")] == ["the narwhal plan"]
    with pytest.raises(Conflict, match="not in the trash"):
        store.restore_session(session.id)


def test_emptying_the_trash_honours_the_age_and_the_dry_run(store):
    old, new = store.create_session("old"), store.create_session("new")
    old.append(user("a"))
    new.append(user("b"))
    old.delete()
    new.delete()
    # pretend 'old' went to the trash 40 days ago (sessions rows are not immutable)
    store.conn.execute("UPDATE sessions SET trashed_at = '2000-01-01T00:00:00.000Z' WHERE id = ?", (old.id,))
    assert [e.session_id for e in store.empty_trash(older_than=30 * 86400, dry_run=True)] == [old.id]
    assert len(store.trash()) == 2
    assert [e.session_id for e in store.empty_trash(older_than=30 * 86400)] == [old.id]
    assert [t.session_id for t in store.trash()] == [new.id]
    assert store.conn.execute("SELECT count(*) FROM nodes").fetchone()[0] == 1
    fts_ok(store)


def test_drop_trashes_idle_sessions_but_not_checkpointed_or_paused_ones(store):
    idle, marked, paused = (store.create_session(t) for t in ("idle", "marked", "paused"))
    for s in (idle, marked, paused):
        s.append(user("hello"))
    marked.checkpoint("keep", at="main")
    paused.append({"reason": "approval", "calls": [{"id": "c1", "name": "rm"}]}, kind="pause")
    settle()
    assert store.retention(drop_older_than=86400).trashed == []  # nothing idle for a day
    preview = store.retention(drop_older_than=0)
    assert preview.dry_run and preview.trashed == [idle.id] and store.trash() == []
    report = store.retention(drop_older_than=0, dry_run=False)
    assert report.trashed == [idle.id] and [t.session_id for t in store.trash()] == [idle.id]
    assert {s.id for s in store.sessions()} == {marked.id, paused.id}


def test_strip_replaces_only_large_old_tool_results_and_records_it(store, tmp_path):
    s = big_tool_session(store)
    small = store.create_session("small")
    small.append({"role": "user", "content": "hi"})
    settle()
    before = [n.payload for n in s.path("main")]
    assert store.retention(strip_older_than=86400).stripped == []  # not old enough
    preview = store.retention(strip_older_than=0, strip_min_bytes=1000)
    assert [(x.node_id, x.bytes) for x in preview.stripped] == [(s.path("main")[2].id, 4998)]
    assert [n.payload for n in s.path("main")] == before  # a dry run writes nothing
    report = store.retention(strip_older_than=0, strip_min_bytes=1000, dry_run=False)
    assert report.bytes_stripped == 4998
    after = s.messages()
    assert after[0] == before[0] and after[1] == before[1] and after[3] == before[3]
    marker = after[2]["content"]
    assert (
        marker.startswith("[tool result stripped on ") and "4,998 bytes removed by retention policy" in marker
    )
    assert after[2]["tool_call_id"] == "c1"
    (record,) = store.redactions()
    assert (record["node"], record["field"], record["bytes"], record["marker"]) == (
        s.path("main")[2].id,
        "content",
        4998,
        marker,
    )
    # a second run finds nothing more; the search index follows; verify is happy
    assert store.retention(strip_older_than=0, strip_min_bytes=1000, dry_run=False).stripped == []
    assert store.search("walrus") == [] and store.search("stripped")[0].node.id == record["node"]
    fts_ok(store)
    assert store.verify().ok
    # the native export carries the marker
    out = tmp_path / "out.jsonl"
    export_file(store, out, session_ids=[s.id])
    assert marker in out.read_text()


def test_the_schema_allows_no_other_change_of_a_payload(store):
    s = big_tool_session(store)
    settle()
    store.retention(strip_older_than=0, strip_min_bytes=1000, dry_run=False)
    key = store.conn.execute("SELECT node FROM redactions").fetchone()[0]
    for sql in (
        "UPDATE nodes SET payload = json_set(payload, '$.content', 'something else') WHERE key = ?",
        "UPDATE nodes SET payload = json_set(payload, '$.tool_call_id', 'c9') WHERE key = ?",
        "UPDATE nodes SET payload = json_set(payload, '$.content', 'x') WHERE key = ? - 1",
    ):
        with pytest.raises(sqlite3.IntegrityError, match="nodes are immutable"):
            store.conn.execute(sql, (key,))
    assert s.verify().ok


def test_a_permanent_delete_removes_redactions_too(store):
    s = big_tool_session(store)
    settle()
    store.retention(strip_older_than=0, strip_min_bytes=1000, dry_run=False)
    s.delete(permanently=True)
    assert store.conn.execute("SELECT count(*) FROM redactions").fetchone()[0] == 0
    fts_ok(store)


def test_bad_policy_values_are_refused(store):
    with pytest.raises(Conflict, match="drop_older_than"):
        store.retention(drop_older_than=-1)
    with pytest.raises(Conflict, match="strip_min_bytes"):
        store.retention(strip_older_than=1, strip_min_bytes=0)


def test_cli_retention_trash_and_empty_trash(tmp_path):
    db = tmp_path / "r.db"
    with Store(db) as store:
        s = big_tool_session(store, size=14000)
        idle = store.create_session("idle")
        idle.append(user("bye"))
        tool_id = s.path("main")[2].id
    settle()
    runner = CliRunner()

    def invoke(*args: str) -> str:
        result = runner.invoke(cli, ["--db", str(db), *args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.output

    assert invoke("retention", "--strip-older-than", "0s", "--dry-run") == (
        f"would strip 14,000 bytes from tool result {tool_id}\n"
        "would move 0 session(s) to the trash; would strip 1 tool result(s), 14,000 bytes\n"
    )
    data = json.loads(invoke("retention", "--drop-older-than", "0s", "--dry-run", "--json"))
    assert data == {
        "dry_run": True,
        "trashed": sorted([s.id, idle.id]),
        "kept_in_flight": [],
        "stripped": [],
        "bytes_stripped": 0,
    }
    assert invoke("delete", idle.id).startswith(f"moved session {idle.id} (1 node(s)) to the trash")
    assert idle.id in invoke("trash")
    assert invoke("empty-trash", "--older-than", "30d") == "removed 0 session(s) from the trash\n"
    assert invoke("empty-trash") == (
        f"removed session {idle.id} (1 node(s)) idle\nremoved 1 session(s) from the trash\n"
    )
    bad = runner.invoke(cli, ["--db", str(db), "empty-trash", "--older-than", "soon"])
    assert bad.exit_code == 2 and "'soon' is not a duration" in bad.output


def test_a_saved_policy_is_previewed_and_run_later(store):
    with pytest.raises(Conflict, match="no retention policy is saved"):
        store.apply_retention_policy()
    with pytest.raises(Conflict, match="needs drop_older_than, strip_older_than or both"):
        store.save_retention_policy()
    assert store.save_retention_policy(strip_older_than=0, strip_min_bytes=1000) == {
        "strip_older_than": 0.0,
        "strip_min_bytes": 1000.0,
    }
    s = big_tool_session(store)
    settle()
    preview = store.apply_retention_policy()
    assert preview.dry_run and [x.bytes for x in preview.stripped] == [4998]
    assert store.redactions() == []
    assert store.apply_retention_policy(dry_run=False).bytes_stripped == 4998
    assert [r["node"] for r in store.redactions()] == [s.path("main")[2].id]
    store.save_retention_policy(drop_older_than=86400)  # replaces the saved policy
    assert store.retention_policy() == {"drop_older_than": 86400.0}


def test_cli_saves_a_policy_and_runs_it(tmp_path):
    db = tmp_path / "p.db"
    with Store(db) as store:
        big_tool_session(store, size=14000)
    settle()
    runner = CliRunner()

    def invoke(*args: str, code: int = 0) -> str:
        result = runner.invoke(cli, ["--db", str(db), *args])
        assert result.exit_code == code, result.output
        return result.output

    assert invoke("retention", code=1) == "Error: no retention policy is saved: give one, or save one first\n"
    assert invoke("retention", "--save", "--strip-older-than", "0s", "--drop-older-than", "90d") == (
        "saved retention policy: trash sessions idle 90 days; strip tool results of 10,000+ bytes older than 0 days\n"
    )
    assert invoke("retention", "--dry-run").endswith("would strip 1 tool result(s), 14,000 bytes\n")
    assert invoke("retention").endswith(
        "moved 0 session(s) to the trash; strip 1 tool result(s), 14,000 bytes\n"
    )


def test_a_session_in_the_trash_takes_no_new_nodes(store, session):
    session.append(user("a"))
    session.delete()
    for write in (
        lambda: session.append(user("b")),
        lambda: session.append_many([user("b"), user("c")]),
        lambda: session.edit("main", user("c"), branch="edited"),
    ):
        with pytest.raises(Conflict, match=f"session {session.id} is in the trash: restore it"):
            write()
    assert store.trash()[0].nodes == 1
    store.restore_session(session.id)
    assert session.append(user("b")).depth == 1
