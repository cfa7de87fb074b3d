"""``sessiontree sql``: read-only SQL on a store file, in every output format."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from sessiontree import Store
from sessiontree.cli import cli

from conftest import assistant, user


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "sql.db"
    with Store(path) as store:
        s = store.create_session("one")
        s.append(user('hi, "you"'))
        s.append(assistant("hello\nthere"))
    return str(path)


def sql(db, *args):
    return CliRunner().invoke(cli, ["--db", db, "sql", *args], catch_exceptions=False)


def test_a_query_prints_a_table_and_every_other_format(db):
    query = "SELECT json_extract(payload, '$.role') AS role, json_extract(payload, '$.content') AS content FROM nodes ORDER BY depth"
    assert sql(db, query).output == 'role       content\nuser       hi, "you"\nassistant  hello there\n'
    assert (
        sql(db, query, "--format", "csv").output
        == 'role,content\nuser,"hi, ""you"""\nassistant,"hello\nthere"\n'
    )
    assert sql(
        db, query, "--format", "tsv"
    ).output == 'role\tcontent\nuser\t"hi, ""you"""\nassistant,"hello\nthere"\n'.replace(
        "assistant,", "assistant\t"
    )
    rows = [{"role": "user", "content": 'hi, "you"'}, {"role": "assistant", "content": "hello\nthere"}]
    assert json.loads(sql(db, query, "--json").output) == rows
    assert json.loads(sql(db, query, "--format", "json").output) == rows
    assert [json.loads(line) for line in sql(db, query, "--format", "nl").output.splitlines()] == rows


def test_parameters_nulls_blobs_long_values_and_empty_results(db):
    out = sql(
        db, "SELECT :a AS a, NULL AS b, x'00ff' AS c, :long AS d", "-p", "a", "1", "-p", "long", "x" * 100
    )
    assert out.output.splitlines()[1] == "1  NULL  00ff  " + "x" * 59 + "…"
    assert json.loads(sql(db, "SELECT NULL AS b, x'00ff' AS c", "--json").output) == [
        {"b": None, "c": "00ff"}
    ]
    assert sql(db, "SELECT id FROM nodes WHERE 0").output == "id\n"
    assert sql(db, "SELECT id FROM nodes WHERE 0", "--format", "csv").output == "id\n"
    assert sql(db, "SELECT id FROM nodes WHERE 0", "--json").output == "[]\n"


@pytest.mark.parametrize(
    "query, message",
    [
        ("DELETE FROM nodes", "Error: SQL error: attempt to write a readonly database\n"),
        ("UPDATE branches SET head = NULL", "Error: SQL error: attempt to write a readonly database\n"),
        ("CREATE TABLE x (y)", "Error: SQL error: attempt to write a readonly database\n"),
        ("SELEC 1", 'Error: SQL error: near "SELEC": syntax error\n'),
        ("SELECT 1; DELETE FROM nodes", "Error: SQL error: You can only execute one statement at a time.\n"),
        ("SELECT :nope", "Error: SQL error: You did not supply a value for binding parameter :nope.\n"),
    ],
)
def test_nothing_a_query_does_changes_the_store_and_errors_are_one_line(db, query, message):
    before = sql(db, "SELECT count(*) AS n FROM nodes", "--json").output
    out = CliRunner().invoke(cli, ["--db", db, "sql", query])
    assert (out.exit_code, out.output) == (1, message)
    assert sql(db, "SELECT count(*) AS n FROM nodes", "--json").output == before
    with Store(db) as store:
        assert store.verify().ok


def test_a_postgresql_store_is_sent_to_psql(pg_url):
    Store(pg_url).close()
    out = CliRunner().invoke(cli, ["--db", pg_url, "sql", "SELECT 1"])
    assert out.exit_code == 1
    assert out.output == "Error: sql reads SQLite files; for a PostgreSQL store use psql on its schema\n"
