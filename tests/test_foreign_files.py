"""Files that are not ours are never written to: another program's SQLite file, one
that claims a schema version without sessiontree's tables, and a file that is not
SQLite at all are refused by Store() and by every CLI command, byte for byte untouched."""

from __future__ import annotations

import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from sessiontree import NotOurs, SessionTreeError, Store
from sessiontree.cli import cli

READS = [
    ["sessions"],
    ["verify"],
    ["stats"],
    ["prune"],
    ["export"],
    ["tree"],
    ["pending"],
    ["migrate", "--list"],
]
WRITES = [["migrate"], ["demo"], ["append", "hi"], ["import", "{tmp}/x.json"]]


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(params=["app-tables", "sessions-table", "claims-a-version", "not-sqlite"])
def foreign(request, tmp_path):
    path = tmp_path / "theirs.db"
    if request.param == "not-sqlite":
        path.write_text("hello, I am a text file\n" * 200)
        return path
    conn = sqlite3.connect(path)
    if request.param == "sessions-table":
        conn.execute("CREATE TABLE sessions (token TEXT, user TEXT)")
        conn.execute("INSERT INTO sessions VALUES ('abc', 'bob')")
    else:
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
        conn.execute("INSERT INTO invoices (total) VALUES (9.5)")
    if request.param == "claims-a-version":
        conn.execute("PRAGMA user_version = 2")
    conn.commit()
    conn.close()
    return path


def test_store_refuses_a_foreign_file_and_writes_nothing(foreign):
    before = digest(foreign)
    for readonly in (False, True):
        with pytest.raises(SessionTreeError, match="not a sessiontree database"):
            Store(foreign, readonly=readonly)
    assert digest(foreign) == before
    assert not foreign.with_name(foreign.name + "-wal").exists()


def test_a_foreign_sqlite_file_is_not_ours(tmp_path):
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE sessions (token TEXT)")
    with pytest.raises(NotOurs, match=r"it already holds other tables \(sessions\); nothing was written"):
        Store(path)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"  # not switched to WAL


@pytest.mark.parametrize("args", READS + WRITES, ids=lambda a: " ".join(a))
def test_every_command_refuses_a_foreign_file_in_one_line(foreign, args, tmp_path):
    (tmp_path / "x.json").write_text('[{"role": "user", "content": "hi"}]')
    before = digest(foreign)
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    result = CliRunner().invoke(cli, ["--db", str(foreign), *args], catch_exceptions=False)
    assert result.exit_code == 1, result.output
    assert "not a sessiontree database" in result.output
    assert result.output.startswith("Error: ") and result.output.count("\n") == 1
    assert digest(foreign) == before


def test_a_new_or_empty_file_still_becomes_a_store(tmp_path):
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    with Store(empty) as store:
        assert store.schema_version >= 3
    with Store(tmp_path / "new.db") as store:
        assert store.sessions() == []


def test_backups_are_atomic_and_refuse_symlinks_and_missing_directories(store, session, tmp_path):
    session.append({"role": "user", "content": "keep me"})
    elsewhere = tmp_path / "elsewhere.db"
    (tmp_path / "link.db").symlink_to(elsewhere)  # a dangling link
    with pytest.raises(SessionTreeError, match="is a symbolic link"):
        store.backup(tmp_path / "link.db")
    assert not elsewhere.exists()
    with pytest.raises(SessionTreeError, match="no directory"):
        store.backup(tmp_path / "missing" / "b.db")
    size = store.backup(tmp_path / "b.db")
    assert size > 0 and sorted(p.name for p in tmp_path.iterdir() if "partial" in p.name) == []
    with Store(tmp_path / "b.db") as copy:
        assert copy.session(session.id).messages() == [{"role": "user", "content": "keep me"}]


@pytest.mark.slow
def test_a_killed_backup_leaves_no_file_that_opens_as_a_store(tmp_path):
    """Before: 14 of 14 kills left a partial file that Store() opened as an empty store."""
    db = tmp_path / "big.db"
    with Store(db) as store:
        s = store.create_session()
        for _ in range(20):
            s.append_many([{"role": "user", "content": "x" * 4000} for _ in range(500)])
    script = (
        "import sys; from sessiontree import Store; s = Store(sys.argv[1]); print('go', flush=True);"
        " s.backup(sys.argv[2])"
    )
    outcomes = []
    for i in range(6):
        target = tmp_path / f"copy-{i}.db"
        with subprocess.Popen(
            [sys.executable, "-c", script, str(db), str(target)], stdout=subprocess.PIPE
        ) as proc:
            assert proc.stdout is not None and proc.stdout.readline() == b"go\n"  # the copy starts now
            time.sleep(0.01 * i)
            os.kill(proc.pid, signal.SIGKILL)
        if target.exists():  # it finished before the kill: then it is whole
            with Store(target, readonly=True) as copy:
                assert copy.verify().nodes == 10_000
            outcomes.append("whole")
        else:
            outcomes.append("absent")
    assert "absent" in outcomes  # at least one kill landed mid-copy


@pytest.mark.slow  # waits out a busy timeout: 1.9 s
def test_a_writer_blocked_too_long_gets_a_clear_error_in_time(tmp_path, monkeypatch):
    from sessiontree import Busy, db

    path = tmp_path / "locked.db"
    with Store(path) as store:
        session = store.create_session()
    monkeypatch.setattr(db, "BUSY_TIMEOUT_MS", 300)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process's long write transaction
    try:
        with Store(path) as store:
            started = time.monotonic()
            with pytest.raises(Busy, match=r"more than 1.8 s .* nothing was written"):
                store.session(session.id).append({"role": "user", "content": "x"})
            assert time.monotonic() - started < 4  # the documented wait (6 busy timeouts), not more
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    result = CliRunner().invoke(cli, ["--db", str(path), "sessions"])
    assert result.exit_code == 0


def test_a_run_of_another_session_is_refused_at_write_time(store):
    from sessiontree import Completion, NotFound

    a, b = store.create_session("a"), store.create_session("b")
    run_id = a.record_run(Completion({"role": "assistant", "content": "x"}, model="m"))
    with pytest.raises(NotFound, match=f"no run '{run_id}' in session {b.id}"):
        b.append({"role": "assistant", "content": "x"}, run=run_id)
    assert a.delete() == 0 and store.verify().ok


def test_a_full_disk_is_one_clear_error_and_loses_nothing(tmp_path):
    from sessiontree import DiskFull

    path = tmp_path / "full.db"
    with Store(path) as store:
        session = store.create_session()
        kept = session.append_many([{"role": "user", "content": f"m{i}"} for i in range(20)])
        pages = store.conn.execute("PRAGMA page_count").fetchone()[0]
        store.conn.execute(f"PRAGMA max_page_count = {pages + 3}")  # what SQLite says on a full disk
        with pytest.raises(DiskFull, match="disk is full .* nothing was written"):
            for _ in range(50):
                session.append_many([{"role": "user", "content": "x" * 3000} for _ in range(5)])
        assert [n.id for n in session.path("main")][:20] == [n.id for n in kept]
        assert store.verify().ok
        head = session.head()
        store.conn.execute("PRAGMA max_page_count = 1073741823")
        assert session.append({"role": "user", "content": "room again"}).parent_id == head.id
    result = CliRunner().invoke(cli, ["--db", str(path), "verify"])
    assert result.exit_code == 0
