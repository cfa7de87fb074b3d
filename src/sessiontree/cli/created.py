"""Database files a command creates, removed again when the command fails.

Contract: a command that is about to create a database file (or make a store of an
empty one) notes it with ``remember_new_database``; ``remove_new_databases``, called
by the command group when the command fails, removes each such file (with its
``-wal``, ``-shm``, ``-journal`` and the directories made for it; an empty file is put
back as it was) unless a session made it in: a failed ``run`` keeps the prompt it
stored. ``is_blank`` says whether an existing file holds no database yet.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import click

from ..storage import sqlite_db as _db


def is_blank(path: Path) -> bool:
    """Whether an existing file holds no database yet: empty, or SQLite with no table
    and no schema version (read without writing; anything unreadable is not blank)."""
    try:
        size = path.stat().st_size
        if size == 0 and not _has_bytes(Path(f"{path}-wal")):
            return True
        if size > 65_536:  # more than SQLite's largest page: something is in it
            return False
        conn = sqlite3.connect(f"file:{path.resolve()}?mode=ro", uri=True)
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            return bool(version == 0 and tables == 0)
        finally:
            conn.close()
    except (OSError, sqlite3.Error):
        return False


def _has_bytes(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except OSError:
        return False


_NEW_DATABASES = "sessiontree.new_databases"


def make_parents(path: Path) -> list[Path]:
    """Make the missing directories above a new database file; the ones made, deepest first."""
    missing = []
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        missing.append(parent)
        parent = parent.parent
    path.parent.mkdir(parents=True, exist_ok=True)
    return missing


def remember_new_database(
    ctx: click.Context, path: Path, made: Sequence[Path] = (), *, blank: bytes | None = None
) -> None:
    """Note a database file this command is about to create (and the directories made for
    it), or a blank one (its bytes) it is about to make a store of: ``SessionTreeGroup``
    removes (or puts back) them if the command fails with no session in it."""
    ctx.meta.setdefault(_NEW_DATABASES, []).append((path, list(made), blank))


def remove_new_databases(ctx: click.Context) -> None:
    """Undo what ``remember_new_database`` noted, unless a session made it in (a failed
    run keeps the prompt it stored): the command's stores are closed by now."""
    for path, made, blank in ctx.meta.pop(_NEW_DATABASES, []):
        if _holds_sessions(path):
            continue
        for leftover in (path, *_db.companions(path)):
            if leftover == path and blank is not None:
                with contextlib.suppress(OSError):
                    path.write_bytes(blank)
                continue
            with contextlib.suppress(OSError):
                leftover.unlink(missing_ok=True)
        for directory in made:  # deepest first; one holding anything else stays
            try:
                directory.rmdir()
            except OSError:
                break


def _holds_sessions(path: Path) -> bool:
    if not path.exists():
        return False
    try:
        conn = sqlite3.connect(f"file:{path.resolve()}?mode=ro", uri=True)
        try:
            return conn.execute("SELECT EXISTS (SELECT 1 FROM sessions)").fetchone()[0] == 1
        finally:
            conn.close()
    except sqlite3.Error:  # no sessions table: the schema never got there
        return False
