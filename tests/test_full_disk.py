"""A disk that is really full: a small tmpfs, filled to the last block.

tests/test_foreign_files.py lets SQLite's page limit stand in for the disk; here the
file system itself says "no space left", which is what SQLite meets when it cannot
even make the ``-shm`` beside the file it opens. Mounting needs root (and the
capability to mount): elsewhere these tests are skipped, saying why.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from sessiontree import DiskFull, Store
from sessiontree.cli import cli
from sessiontree.formats import export_native

from conftest import tmpfs


@pytest.fixture
def small_disk(tmp_path) -> Iterator[Path]:
    with tmpfs(tmp_path / "disk") as where:
        yield where


def fill(disk: Path) -> Path:
    """Take every free block; the file that holds them (delete it to make room)."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as e:
        assert e.errno == 28  # ENOSPC
    finally:
        os.close(fd)
    return filler


def make_store(disk: Path) -> tuple[Path, list[str]]:
    db = disk / "s.db"
    with Store(db) as store:
        s = store.create_session("full")
        for i in range(40):
            s.append({"role": "user", "content": f"m{i} " + "y" * 2000})
        return db, list(export_native(store))


def cli_run(db: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--db", str(db), *args])
    return result.exit_code, result.output


def test_a_full_disk_reads_and_refuses_writes_in_one_line(small_disk):
    """Before: every command, reads too, said "not a sessiontree database: disk I/O
    error" (SQLite could not make the -shm), and so did Store()."""
    db, acknowledged = make_store(small_disk)
    filler = fill(small_disk)
    opening = f"Error: cannot open {db}: the disk is full; nothing was written\n"
    for args in (["fork", "alt", "--at", "main"], ["append", "more"], ["prune", "--vacuum", "--yes"]):
        assert cli_run(db, *args) == (1, opening), args
    assert cli_run(db, "backup", str(small_disk / "b.db")) == (
        1,
        "Error: the disk is full (or the database reached its size limit); nothing was written\n",
    )
    out = small_disk / "out.jsonl"
    assert cli_run(db, "export", "-o", str(out)) == (
        1,
        f"Error: cannot write {out}: the disk is full; nothing was written\n",
    )
    code, text = cli_run(db, "verify")
    assert (code, text) == (0, "ok: 1 session(s), 40 node(s), 0 problem(s)\n")
    assert cli_run(db, "log", "main")[0] == 0
    with pytest.raises(DiskFull, match="the disk is full; nothing was written"):
        Store(db)
    with Store(db, readonly=True) as reader:
        assert list(export_native(reader)) == acknowledged
    assert sorted(p.name for p in small_disk.iterdir() if not p.name.startswith("s.db")) == ["filler"]

    filler.unlink()  # room again: nothing was lost, and writing carries on
    with Store(db) as store:
        assert list(export_native(store)) == acknowledged
        store.session(store.sessions()[0].id).append({"role": "user", "content": "room again"})
        assert store.verify().ok


def test_a_disk_that_fills_under_an_open_store_loses_nothing(small_disk):
    """The store was open (its -shm made) when the disk filled: each write is DiskFull,
    rolled back whole; a vacuum and a backup are DiskFull too; what was acknowledged stays."""
    db, acknowledged = make_store(small_disk)
    with Store(db) as store:
        session = store.session(store.sessions()[0].id)
        filler = fill(small_disk)
        with pytest.raises(DiskFull):
            for _ in range(200):  # the log takes what little room the filler left
                session.append_many([{"role": "user", "content": "z" * 20_000} for _ in range(5)])
        with pytest.raises(DiskFull):
            store.backup(small_disk / "b.db")
        assert not (small_disk / "b.db").exists()
        filler.unlink()
        assert store.verify().ok
        lines = list(export_native(store))
    assert lines[: len(acknowledged) - 1] == acknowledged[:-1]  # all but the branch line, which moved on


def test_prune_vacuum_on_a_full_disk_is_disk_full_and_loses_nothing(small_disk):
    """Before: a raw OperationalError ("internal error" in the CLI) when the log held pages
    past the end of the file: folding it in, before the copy, needs the file to grow."""
    db, _ = make_store(small_disk)

    def grow_then_prune(store: Store) -> None:
        session = store.session(store.sessions()[0].id)
        session.fork("gone", at="main")
        for _ in range(60):  # new pages, only in the log
            session.append({"role": "user", "content": "z" * 3000}, branch="gone")
        session.delete_branch("gone")
        assert len(store.prune(dry_run=False, grace=0).node_ids) == 60

    with Store(db) as store:
        grow_then_prune(store)
        kept = list(export_native(store))
        filler = fill(small_disk)
        with pytest.raises(DiskFull, match="the disk is full"):
            store.prune(dry_run=False, vacuum=True, grace=0)
        assert store.verify().ok and list(export_native(store)) == kept
        filler.unlink()
        grow_then_prune(store)
        kept = list(export_native(store))
        filler = fill(small_disk)
    assert cli_run(db, "prune", "--vacuum", "--yes", "--grace", "0") == (
        1,
        "Error: the disk is full (or the database reached its size limit); nothing was written\n",
    )
    filler.unlink()
    with Store(db) as store:
        assert store.verify().ok and list(export_native(store)) == kept
        assert store.prune(dry_run=False, vacuum=True, grace=0).bytes_freed > 0  # room again
