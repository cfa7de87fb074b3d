"""Retention: the trash, drop and strip policies with a preview, recorded redactions."""

from __future__ import annotations

import json
import sqlite3

import pytest
from click.testing import CliRunner

from sessiontree import Store, export_file
from sessiontree.cli import cli

from conftest import big_tool_session, user


def fts_ok(store: Store) -> None:
    store.conn.execute("INSERT INTO nodes_fts (nodes_fts, rank) VALUES ('integrity-check', 1)")


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


def test_strip_replaces_only_large_old_tool_results_and_records_it(store, tmp_path, frozen_clock):
    s = big_tool_session(store)
    small = store.create_session("small")
    small.append({"role": "user", "content": "hi"})
    frozen_clock.advance(1)
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


def test_the_schema_allows_no_other_change_of_a_payload(store, frozen_clock):
    s = big_tool_session(store)
    frozen_clock.advance(1)
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


def test_a_permanent_delete_removes_redactions_too(store, frozen_clock):
    s = big_tool_session(store)
    frozen_clock.advance(1)
    store.retention(strip_older_than=0, strip_min_bytes=1000, dry_run=False)
    s.delete(permanently=True)
    assert store.conn.execute("SELECT count(*) FROM redactions").fetchone()[0] == 0
    fts_ok(store)


def test_cli_retention_trash_and_empty_trash(tmp_path, frozen_clock):
    db = tmp_path / "r.db"
    with Store(db) as store:
        s = big_tool_session(store, size=14000)
        idle = store.create_session("idle")
        idle.append(user("bye"))
        tool_id = s.path("main")[2].id
    frozen_clock.advance(1)
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
    frozen_clock.advance(0.001)  # emptying takes what was trashed before now
    assert invoke("empty-trash") == (
        f"removed session {idle.id} (1 node(s)) idle\nremoved 1 session(s) from the trash\n"
    )
    bad = runner.invoke(cli, ["--db", str(db), "empty-trash", "--older-than", "soon"])
    assert bad.exit_code == 2 and "'soon' is not a duration" in bad.output


def test_cli_saves_a_policy_and_runs_it(tmp_path, frozen_clock):
    db = tmp_path / "p.db"
    with Store(db) as store:
        big_tool_session(store, size=14000)
    frozen_clock.advance(1)
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
