"""A store this process cannot write (a read-only file or directory) is read, never half-used.

Permissions do not bind root, and the tests run as root here. So, as root, each check
runs in a forked child that has dropped to the uid and gid of ``nobody`` (the files are
made by root, so nobody can read them and cannot write them), and reports back
through a pipe. Run as any other user, the checks run in-process after a real chmod.
The forked child only uses modules the parent has already imported: the same checks
run once in the parent first, on a writable copy.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import sqlite3
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sessiontree import ReadOnly, SessionTreeError, Store
from sessiontree.cli import cli

from conftest import tmpfs

ROOT = os.geteuid() == 0
READS = [["sessions"], ["log", "main"], ["verify"], ["stats"], ["export"], ["tree"]]
WRITES = [["append", "hello"], ["fork", "alt", "--at", "main"], ["checkpoint", "cp"], ["prune", "--yes"]]


def nobody() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("running as root and there is no user 'nobody' to drop to")


def unprivileged(check: Callable[[], Any]) -> Any:
    """``check()`` run without root's power over permissions; its JSON-able result."""
    if not ROOT:
        return check()
    user = nobody()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to nobody, run, report, leave without pytest's cleanup
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)
            out = {"result": check()}
        except BaseException as e:  # noqa: BLE001 - reported to the parent, which fails the test
            out = {"crash": f"{type(e).__name__}: {e}"}
        with os.fdopen(write_end, "w") as f:
            f.write(json.dumps(out))
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as f:
        data = f.read()
    os.waitpid(pid, 0)
    out = json.loads(data)
    assert "crash" not in out, out["crash"]
    return out["result"]


@pytest.fixture
def place() -> Iterator[Path]:
    """A directory nobody can reach (tmp_path's parents are private to root)."""
    where = Path(tempfile.mkdtemp(prefix="sessiontree-ro-", dir="/tmp"))
    where.chmod(0o755)
    yield where
    where.chmod(0o755)
    shutil.rmtree(where)


def make_store(directory: Path) -> Path:
    db = directory / "s.db"
    with Store(db) as store:
        s = store.create_session("kept")
        s.append({"role": "user", "content": "hi"})
        s.append({"role": "assistant", "content": "hello"})
    assert sorted(os.listdir(directory)) == ["s.db"]  # a clean close leaves no -wal
    return db


def lock_down(db: Path, what: str) -> None:
    """Make the file or its directory read-only for the user the checks run as."""
    if ROOT:
        # Root made both; nobody cannot write them. For "directory", nobody owns the
        # file (so only the directory is in the way); for "file", nobody owns the directory.
        user = nobody()
        if what == "directory":
            os.chown(db, user.pw_uid, user.pw_gid)
        else:
            os.chown(db.parent, user.pw_uid, user.pw_gid)
    if what == "directory":
        db.parent.chmod(0o555)
    else:
        db.chmod(0o444)


def cli_lines(db: Path, args: list[str]) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--db", str(db), *args])
    return result.exit_code, result.output


def checks(db: Path) -> dict[str, Any]:
    """What reading and writing the store does, through the API and the CLI."""
    out: dict[str, Any] = {"reads": {}, "writes": {}}
    with Store(db) as store:
        out["readonly"] = store.readonly
        (info,) = store.sessions()
        session = store.session(info.id)
        out["messages"] = [m["content"] for m in session.messages("main")]
        out["verify_ok"] = store.verify().ok
        try:
            session.append({"role": "user", "content": "more"})
            out["append"] = "written"
        except ReadOnly as e:
            out["append"] = f"ReadOnly: {e}"
    for args in READS:
        out["reads"][" ".join(args)] = cli_lines(db, args)
    for args in WRITES:
        out["writes"][" ".join(args)] = cli_lines(db, args)
    out["files"] = sorted(os.listdir(db.parent))
    return out


@pytest.mark.parametrize("what", ["directory", "file"])
def test_a_read_only_store_reads_and_refuses_writes_in_one_line(place, tmp_path, what):
    """Before: every command, reads too, failed with "not a sessiontree database:
    attempt to write a readonly database" (directory), and the API's writes raised a
    raw sqlite3.OperationalError (file)."""
    warm = checks(make_store(tmp_path))  # as root on a writable copy: imports every module
    assert warm["readonly"] is False and warm["append"] == "written"

    db = make_store(place)
    before = db.read_bytes()
    lock_down(db, what)
    out = unprivileged(lambda: checks(db))

    reason = "its directory is read-only" if what == "directory" else "the file is read-only"
    refused = f"{db} cannot be written ({reason}); nothing was written"
    assert out["readonly"] is True
    assert out["messages"] == ["hi", "hello"] and out["verify_ok"] is True
    assert out["append"] == f"ReadOnly: {refused}"
    for args, (code, text) in out["reads"].items():
        assert code == 0, (args, text)
        assert "Error" not in text and "Traceback" not in text, (args, text)
    assert "hello" in out["reads"]["log main"][1]
    for args, (code, text) in out["writes"].items():
        assert (code, text) == (1, f"Error: {refused}\n"), args
    assert db.read_bytes() == before
    if what == "directory":
        assert out["files"] == ["s.db"]


def test_a_read_only_directory_with_a_live_log_reads_what_was_committed(place, tmp_path):
    """A writer that can write keeps -wal and -shm open beside the file: a reader that
    cannot write reads through them, and sees the last commit."""
    cli_lines(make_store(tmp_path), ["sessions", "--json"])
    db = make_store(place)
    holder = sqlite3.connect(db, isolation_level=None)  # another process, still open
    holder.execute("UPDATE sessions SET title = 'changed'")
    try:
        assert (place / "s.db-wal").exists() and (place / "s.db-shm").exists()
        lock_down(db, "directory")
        code, text = unprivileged(lambda: cli_lines(db, ["sessions", "--json"]))
    finally:
        holder.close()
    assert code == 0, text
    assert [s["title"] for s in json.loads(text)] == ["changed"]


def test_a_log_without_its_index_in_a_read_only_directory_is_refused_clearly(place, tmp_path):
    """A copy of the file and its -wal (no -shm) where nothing can be created: SQLite
    cannot read the log, and reading the file alone would show stale data, so the read
    is refused with one line saying what to do. Before: "not a sessiontree database"."""
    cli_lines(make_store(tmp_path), ["sessions"])
    (tmp_path / "source").mkdir()
    source = make_store(tmp_path / "source")
    holder = sqlite3.connect(source, isolation_level=None)
    holder.execute("UPDATE sessions SET title = 'changed'")
    try:
        db = place / "s.db"
        for suffix in ("", "-wal"):
            shutil.copyfile(f"{source}{suffix}", f"{db}{suffix}")
    finally:
        holder.close()
    lock_down(db, "directory")
    code, text = unprivileged(lambda: cli_lines(db, ["sessions"]))
    assert code == 1
    assert text == (
        f"Error: cannot read {db}: its directory is read-only and it has a write-ahead log"
        " (s.db-wal) that SQLite can only read by creating s.db-shm beside it; open it once"
        " where it can be written (or copy both files to such a place)\n"
    )


def create_in(directory: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"cli": cli_lines(directory / "new.db", ["append", "hi"])}
    try:
        Store(directory / "other.db")
        out["api"] = "created"
    except ReadOnly as e:
        out["api"] = f"ReadOnly: {e}"
    out["files"] = sorted(os.listdir(directory))
    return out


def test_a_new_store_in_a_read_only_directory_is_one_clear_error(place, tmp_path):
    """Before: a raw sqlite3.OperationalError "unable to open database file" from the
    API, and an "internal error" line from the CLI."""
    warm = create_in(tmp_path)
    assert warm["api"] == "created"
    place.chmod(0o555)  # nobody could not write it anyway (root owns it); another user cannot now
    out = unprivileged(lambda: create_in(place))
    assert tuple(out["cli"]) == (
        1,
        f"Error: cannot create {place / 'new.db'}: its directory is read-only; nothing was written\n",
    )
    assert (
        out["api"]
        == f"ReadOnly: cannot create {place / 'other.db'}: its directory is read-only; nothing was written"
    )
    assert out["files"] == []


def test_a_new_store_in_a_missing_directory_is_one_clear_error(tmp_path):
    with pytest.raises(SessionTreeError, match=r"^cannot create .*x\.db: no such directory"):
        Store(tmp_path / "missing" / "x.db")


@pytest.fixture
def read_only_mount(tmp_path) -> Iterator[Path]:
    """A tmpfs holding a store, remounted read-only."""
    with tmpfs(tmp_path / "mount") as where:
        with Store(where / "s.db") as store:
            s = store.create_session("mounted")
            s.append({"role": "user", "content": "hello from a read-only mount"})
        subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)
        yield where / "s.db"


def test_a_read_only_mount_is_read_and_refuses_writes_in_one_line(read_only_mount):
    """Root can write a read-only file, but not a read-only file system: the store sees
    the mount, opens read-only by itself, reads everything and refuses every write."""
    before = read_only_mount.read_bytes()
    with Store(read_only_mount) as store:
        (info,) = store.sessions()
        assert store.session(info.id).messages() == [
            {"role": "user", "content": "hello from a read-only mount"}
        ]
        assert [h.node.payload["content"] for h in store.search("mount")] == ["hello from a read-only mount"]
        with pytest.raises(ReadOnly, match="its file system is mounted read-only"):
            store.session(info.id).append({"role": "user", "content": "more"})
    runner = CliRunner()
    for args in READS:
        result = runner.invoke(cli, ["--db", str(read_only_mount), *args])
        assert result.exit_code == 0, (args, result.output)
    for args in WRITES:
        result = runner.invoke(cli, ["--db", str(read_only_mount), *args])
        assert result.exit_code == 1, (args, result.output)
        assert result.output.count("\n") == 1 and "mounted read-only" in result.output, (args, result.output)
    assert read_only_mount.read_bytes() == before
