"""migrate on a read-only file system: the steps are listed, applying them is refused
in one line, and a file already up to date is fine."""

from __future__ import annotations

import re
import shlex
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from click.testing import CliRunner

from sessiontree import Store
from sessiontree import db as sqlite_db
from sessiontree.cli import cli

from conftest import tmpfs


@pytest.fixture
def read_only_mount(tmp_path) -> Iterator[Path]:
    """A tmpfs holding a store of schema version 5 (in WAL mode), remounted read-only."""
    with tmpfs(tmp_path / "mount") as where:
        conn = sqlite3.connect(where / "old.db", isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        for step in sqlite_db.migrations()[:5]:
            for statement in sqlite_db.split_statements(step.sql):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {step.version}")
        conn.close()
        with Store(where / "new.db") as store:
            store.create_session("current")
        subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)
        yield where


def test_migrate_on_a_read_only_file_system_says_so(read_only_mount):
    def run(name: str, *args: str):
        return CliRunner().invoke(cli, ["--db", str(read_only_mount / name), "migrate", *args])

    old = read_only_mount / "old.db"
    listed = run("old.db", "--list")
    assert listed.exit_code == 0, listed.output
    assert (
        listed.output.splitlines()[-1]
        == f"{len(sqlite_db.migrations()) - 5} pending step(s); schema version 5"
    )
    refused = run("old.db")
    assert refused.exit_code == 1
    assert (
        refused.output
        == f"Error: cannot migrate {old}: its file system is mounted read-only; nothing was written\n"
    )
    current = run("new.db")
    assert current.exit_code == 0, current.output
    assert current.output.endswith(f"0 pending step(s); schema version {len(sqlite_db.migrations())}\n")


def test_a_fresh_postgres_schema_read_only_says_to_run_migrate(pg_url):
    """Newcomer friction 7: the first command of docs/postgres.md on a new server."""
    from sessiontree.storage.postgres_db import parse_url

    shown, schema = parse_url(pg_url).shown, parse_url(pg_url).schema
    runner = CliRunner()
    refused = runner.invoke(cli, ["--db", pg_url, "sessions"])
    assert refused.exit_code == 1
    prefix = f"Error: {shown}: no sessiontree store in schema {schema} yet; create it with `"
    assert refused.output.startswith(prefix) and refused.output.endswith(" migrate`\n"), refused.output
    hint = refused.output[len(prefix) : -2]  # the command's --db (a password never shown)
    assert shlex.split(hint)[:2] == ["sessiontree", "--db"] and ":***@" not in hint, hint
    env = {"PGPASSWORD": password} if (password := urlsplit(pg_url).password) else {}
    migrated = runner.invoke(cli, shlex.split(hint)[1:], env=env)  # pasted as printed
    assert migrated.exit_code == 0, migrated.output
    listed = runner.invoke(cli, ["--db", pg_url, "sessions"])
    assert listed.exit_code == 0, listed.output


def test_an_old_postgres_schema_read_only_still_names_its_migrations(pg_url):
    import psycopg

    from sessiontree.storage.postgres_db import parse_url

    target = parse_url(pg_url)
    with Store(pg_url) as store:
        version = store.schema_version
    with psycopg.connect(target.conninfo, autocommit=True) as conn:  # one step behind
        conn.execute(f'UPDATE "{target.schema}".schema_version SET version = %s', (version - 1,))
    refused = CliRunner().invoke(cli, ["--db", pg_url, "sessions"])
    assert refused.exit_code == 1
    hidden = re.sub(r"(://[^:/@]*):[^/@]*@", r"\1@", pg_url)  # the hint's --db, no password
    assert refused.output == (
        f"Error: {target.shown} needs 1 schema migration(s); open it once read-write"
        f" (or run `sessiontree --db {shlex.quote(hidden)} migrate`) before reading it read-only\n"
    )
