"""Upgrading a file written by the first schema version (tests/fixtures/schema_v1.db, built
by tests/fixtures/make_schema_v1.py): in place, all data intact; the CLI lists and applies
the pending steps; a newer schema is refused without a byte written.
(tests/test_migrations.py covers the refusal through ``Store``; this file extends it.)
"""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from sessiontree import Approve, Conflict, SchemaTooNew, SessionTreeError, Store, decide
from sessiontree.cli import cli
from sessiontree.db import migrations
from sessiontree.formats import export_file

from conftest import public_rows

FIXTURES = Path(__file__).parent / "fixtures"
V1 = FIXTURES / "schema_v1.db"

# The columns the first version had, read the same way before and after the upgrade.
V1_TABLES = {
    "sessions": "id, title, metadata, created_at, archived_at",
    "runs": "id, session_id, model, provider, params, usage, latency_ms, finish_reason, created_at",
    "nodes": "id, session_id, parent_id, depth, kind, payload, created_at, run_id",
    "branches": "session_id, name, head_id, metadata, created_at, updated_at",
    "checkpoints": "session_id, name, node_id, created_at",
}


def rows(path: Path) -> dict[str, list[tuple]]:
    """Every table's rows as public ids, whatever the schema version."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        if conn.execute("PRAGMA user_version").fetchone()[0] >= 3:
            return public_rows(conn)
        return {
            t: sorted(conn.execute(f"SELECT {c} FROM {t}").fetchall(), key=repr) for t, c in V1_TABLES.items()
        }
    finally:
        conn.close()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def v1(tmp_path):
    copy = tmp_path / "v1.db"
    shutil.copyfile(V1, copy)
    return copy


def fixture_module():
    spec = importlib.util.spec_from_file_location("make_schema_v1", FIXTURES / "make_schema_v1.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_fixture_is_schema_version_1_and_what_the_script_builds(tmp_path):
    conn = sqlite3.connect(f"file:{V1}?mode=ro", uri=True)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    conn.close()
    assert V1.stat().st_size < 64 * 1024
    rebuilt = fixture_module().build(tmp_path / "again.db")
    assert rows(rebuilt) == rows(V1)  # the committed file is reproducible from the script


def test_opening_upgrades_in_place_with_all_data_intact(v1):
    before = rows(v1)
    assert len(migrations()) >= 2  # there is something to upgrade
    with Store(v1) as store:
        assert store.schema_version == len(migrations())
        assert store.verify().ok
    assert rows(v1) == before  # same ids, payloads, refs, runs, timestamps
    made = fixture_module()
    with Store(v1) as store:
        s = store.session(made.SESSION)
        assert s.title == "weather and email" and s.metadata == {"project": "demo", "tags": ["v1"]}
        assert [n.id for n in s.path("main")] == [made.nid(n) for n in (1, 2, 3, 4, 5, 6, 7, 8)]
        assert s.head("experiment").payload == {"role": "assistant", "content": "Paris: sunny, 21C."}
        assert [(c.name, c.node_id) for c in s.checkpoints()] == [("weather-known", made.nid(5))]
        assert s.node(made.nid(2)).payload["content"].endswith("ünïcødé ✓")
        run = store.run(s.node(made.nid(3)).run_id)
        assert run.usage == {"prompt_tokens": 42, "completion_tokens": 12, "total_tokens": 54}
        assert (run.model, run.latency_ms, run.finish_reason) == ("gpt-4o-mini", 812.5, "tool_calls")
        assert store.pending() == []  # the pause was decided before the upgrade
        # The upgraded file is a normal store: the loop's next write works and verifies.
        s.append({"role": "tool", "tool_call_id": "call_e", "content": "sent"}, branch="main")
        assert store.verify().ok
    if len(migrations()) >= 2 and migrations()[1].name == "run_tokens":
        conn = sqlite3.connect(v1)
        tokens = conn.execute("SELECT id, input_tokens, output_tokens FROM runs ORDER BY id").fetchall()
        conn.close()
        assert [t[1:] for t in tokens] == [(42, 12), (71, 30), (65, 18), (None, None)]


def test_readonly_open_of_an_old_file_is_refused_and_writes_nothing(v1):
    before = digest(v1)
    with pytest.raises(SessionTreeError, match=r"needs \d+ schema migration\(s\); open it once read-write"):
        Store(v1, readonly=True)
    assert digest(v1) == before


def test_cli_migrate_list_then_migrate(v1):
    runner = CliRunner()
    pending = migrations()[1:]
    before = digest(v1)
    result = runner.invoke(cli, ["--db", str(v1), "migrate", "--list"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        *[f"{m.version:04d}_{m.name}" for m in pending],
        f"{len(pending)} pending step(s); schema version 1",
    ]
    assert digest(v1) == before  # listing applies nothing
    result = runner.invoke(cli, ["--db", str(v1), "migrate"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [f"applied {m.version:04d}_{m.name}" for m in pending]
    result = runner.invoke(cli, ["--db", str(v1), "migrate", "--list"])
    assert result.output == f"0 pending step(s); schema version {len(migrations())}\n"
    with Store(v1, readonly=True) as store:  # now current: read-only inspection works
        assert store.verify().ok and store.schema_version == len(migrations())


def test_inspection_commands_upgrade_an_old_file_once_then_read(v1):
    """The CLI's read-only commands open an old file read-write once (to migrate it)."""
    result = CliRunner().invoke(cli, ["--db", str(v1), "log", "experiment"])
    assert result.exit_code == 0, result.output
    assert "Paris: sunny, 21C." in result.output
    conn = sqlite3.connect(v1)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == len(migrations())
    conn.close()


@pytest.mark.parametrize("args", [["sessions"], ["migrate", "--list"], ["migrate"], ["verify"]])
def test_a_newer_schema_is_refused_by_the_cli_and_not_modified(v1, args):
    conn = sqlite3.connect(v1)
    conn.execute(f"PRAGMA user_version = {len(migrations()) + 1}")
    conn.close()
    before = digest(v1)
    result = CliRunner().invoke(cli, ["--db", str(v1), *args])
    assert result.exit_code == 1
    assert result.output.startswith("Error: database schema version ")
    assert "newer than this sessiontree knows" in result.output
    assert result.output.count("\n") == 1 and "Traceback" not in result.output
    assert digest(v1) == before
    with pytest.raises(SchemaTooNew):
        Store(v1, readonly=True)
    assert digest(v1) == before


V2 = FIXTURES / "schema_v2.db"


@pytest.fixture
def v2(tmp_path):
    copy = tmp_path / "v2.db"
    shutil.copyfile(V2, copy)
    return copy


def test_a_schema_2_store_with_real_data_upgrades_losslessly(v2, tmp_path):
    """tests/fixtures/schema_v2.db (see make_schema_v2.py): every node, ref, run and pause
    survives the rebuild to integer keys, byte for byte in the native export."""
    before = rows(v2)
    with sqlite3.connect(f"file:{v2}?mode=ro", uri=True) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 2
    with Store(v2) as store:
        assert store.schema_version == len(migrations())
        report = store.verify()
        assert report.ok, report.problems
        assert [p.payload["calls"][0]["name"] for p in store.pending()] == ["wire_money"]
        export_file(store, tmp_path / "after.jsonl", "native")
    assert rows(v2) == before
    assert (tmp_path / "after.jsonl").read_text("utf-8") == (FIXTURES / "schema_v2.expected.jsonl").read_text(
        "utf-8"
    )
    with Store(v2) as store:  # and it is a normal store afterwards
        session = store.session(store.pending()[0].session_id)
        decide(store, store.pending()[0].id, {"pay": Approve()})
        assert session.head("main").kind == "decision"
        again = store.create_session("after the upgrade")
        again.append({"role": "user", "content": "hi"})
        assert store.verify().ok


def test_the_upgrade_keeps_the_schema_invariants(v2):
    with Store(v2) as store:
        session = store.session(store.pending()[0].session_id)
        head = session.head("main")
        for sql, params in [
            ("UPDATE nodes SET payload = '{}' WHERE id = ?", (head.id,)),
            ("UPDATE checkpoints SET created_at = 'x'", ()),
        ]:
            with pytest.raises(sqlite3.IntegrityError):
                store.conn.execute(sql, params)
        other = store.create_session("other")
        with pytest.raises(sqlite3.IntegrityError, match="same session"):
            store.conn.execute(
                "INSERT INTO nodes (id, session, parent, depth, kind, payload, created_at)"
                " SELECT 'x', (SELECT key FROM sessions WHERE id = ?), key, depth + 1, 'message', '{}', 'now'"
                " FROM nodes WHERE id = ?",
                (other.id, head.id),
            )
        decide(store, store.pending()[0].id, {"pay": Approve()})
        with pytest.raises(Conflict, match="already has a decision"):
            session.append({"decisions": {}}, kind="decision", parent=head, branch=None)
