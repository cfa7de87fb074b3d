"""Schema migrations: applied once, shipped in the wheel, newer schemas refused."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sessiontree import SchemaTooNew, SessionTreeError, Store
from sessiontree.db import migrate, migrations, migrations_dir

ROOT = Path(__file__).resolve().parents[1]


def test_steps_are_numbered_and_found_from_the_source_tree():
    steps = migrations()
    assert [s.version for s in steps] == list(range(1, len(steps) + 1))
    assert (
        migrations_dir().samefile(ROOT / "migrations")
        or (migrations_dir() / "0001_initial.sql").read_bytes()
        == (ROOT / "migrations" / "0001_initial.sql").read_bytes()
    )


def test_opening_applies_every_step_once(tmp_path):
    path = tmp_path / "m.db"
    with Store(path) as store:
        assert store.schema_version == len(migrations())
        store.create_session("kept")
    with Store(path) as store:  # second open: nothing to apply, data intact
        assert migrate(store.conn) == []
        assert [s.title for s in store.sessions()] == ["kept"]


def test_connection_pragmas(store):
    conn = store.conn
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 1000
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL


def test_a_new_file_gets_8_kb_pages_and_an_existing_file_keeps_its_own(tmp_path):
    with Store(tmp_path / "new.db") as store:
        store.create_session().append({"role": "user", "content": "x" * 1000})
        assert store.conn.execute("PRAGMA page_size").fetchone()[0] == 8192
    old = tmp_path / "old.db"
    conn = sqlite3.connect(old)
    conn.execute("PRAGMA page_size = 4096")
    conn.execute("PRAGMA journal_mode = WAL")  # writes the header: the page size is fixed
    conn.close()
    with Store(old) as store:
        store.create_session().append({"role": "user", "content": "x"})
        assert store.conn.execute("PRAGMA page_size").fetchone()[0] == 4096
        assert store.verify().ok
    with Store(old) as store:  # reopening a file with tables changes nothing either
        assert store.conn.execute("PRAGMA page_size").fetchone()[0] == 4096


def test_a_newer_schema_is_refused_and_not_written(tmp_path):
    path = tmp_path / "future.db"
    with Store(path) as store:
        store.create_session("from the future")
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {len(migrations()) + 1}")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(SchemaTooNew, match="newer than this sessiontree knows"):
        Store(path)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_a_file_that_is_not_a_database_is_refused(tmp_path):
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(SessionTreeError, match="not a sessiontree database"):
        Store(path)


def test_readonly_store_reads_and_refuses_writes(tmp_path):
    path = tmp_path / "ro.db"
    with Store(path) as store:
        store.create_session("s").append({"role": "user", "content": "hi"})
    with Store(path, readonly=True) as store:
        session = store.sessions()[0]
        assert store.session(session.id).messages() == [{"role": "user", "content": "hi"}]
        with pytest.raises(SessionTreeError, match="read-only"):
            store.create_session("nope")
    with pytest.raises(SessionTreeError, match="no such database file"):
        Store(tmp_path / "missing.db", readonly=True)


def test_a_failed_step_leaves_the_previous_version(tmp_path, monkeypatch):
    from sessiontree import db

    good = migrations()
    broken = db.Migration(len(good) + 1, "broken", "CREATE TABLE extra (x);\nNOT SQL AT ALL;\n")
    path = tmp_path / "b.db"
    Store(path).close()
    monkeypatch.setattr(db, "migrations", lambda: [*good, broken])
    with pytest.raises(sqlite3.OperationalError):
        Store(path)
    monkeypatch.undo()
    with Store(path) as store:
        assert store.schema_version == len(good)
        assert not store.storage.db["extra"].exists()


def test_the_wheel_ships_the_migrations_the_typing_marker_and_the_view(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("sessiontree-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for step in migrations():
        assert f"sessiontree/migrations/{step.version:04d}_{step.name}.sql" in names
    # PEP 561: without it, type checkers ignore the package's annotations
    assert "sessiontree/py.typed" in names
    # the browser view inlines these at render time: without them `sessiontree html` fails
    static = ROOT / "src" / "sessiontree" / "view" / "static"
    for path in static.iterdir():
        assert f"sessiontree/view/static/{path.name}" in names
