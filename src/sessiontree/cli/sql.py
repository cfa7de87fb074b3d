"""``sessiontree sql``: read-only SQL on a store file, as a table, CSV, TSV, JSON or JSON lines.

Contract: one statement, run on a read-only connection of its own (see
``SQLiteUpkeep.sql``), so nothing it does can change the store; named parameters come
from ``-p NAME VALUE``. Rows stream: a large result is printed as it is read (the table
format alone reads every row first, to size its columns). PostgreSQL stores are refused
with a pointer to ``psql``; the schema is described in docs/storage.md.
"""

from __future__ import annotations

import csv
import json
import sys
from typing import Any

import click

from .common import echo_json, open_store
from .render import json_safe, one_line, table

FORMATS = ["table", "csv", "tsv", "json", "nl"]
CELL = 60  # characters of a value in the table format; the other formats keep it whole


@click.command()
@click.argument("query")
@click.option(
    "-p",
    "--param",
    "params",
    nargs=2,
    multiple=True,
    metavar="NAME VALUE",
    help="A value for :NAME (repeatable).",
)
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="The same as --format json.")
@click.pass_context
def sql(ctx: click.Context, query: str, params: tuple[tuple[str, str], ...], fmt: str, as_json: bool) -> None:
    """Run one read-only SQL QUERY on the store file and print the rows.

    For example: sessiontree sql "SELECT kind, count(*) AS n FROM nodes GROUP BY kind".
    Nothing a query does can change the store (the connection is read-only).
    """
    store = open_store(ctx)
    read = store.storage.upkeep.sql
    if read is None:
        raise click.ClickException(store.storage.upkeep.no_sql)
    columns, rows = read(query, dict(params))
    fmt = "json" if as_json else fmt
    if fmt == "table":
        cells = [[_cell(v) for v in row] for row in rows]
        for line in table(cells, columns) if columns else []:
            click.echo(line)
    elif fmt in ("csv", "tsv"):
        out = csv.writer(sys.stdout, delimiter="," if fmt == "csv" else "\t", lineterminator="\n")
        out.writerow(columns)
        for row in rows:
            out.writerow([_text(v) for v in row])
    elif fmt == "json":
        echo_json([dict(zip(columns, map(_plain, row), strict=True)) for row in rows])
    else:
        for row in rows:
            record = dict(zip(columns, map(_plain, row), strict=True))
            click.echo(json_safe(json.dumps(record, ensure_ascii=False)))


def _plain(value: Any) -> Any:
    """A value JSON can hold: a BLOB as its hex, everything else as SQLite gave it."""
    return value.hex() if isinstance(value, bytes) else value


def _text(value: Any) -> str:
    return "" if value is None else str(_plain(value))


def _cell(value: Any) -> str:
    return "NULL" if value is None else one_line(_plain(value), CELL)


COMMANDS = [sql]
