"""The copy command: move sessions between a SQLite file and a PostgreSQL server."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..storage import is_postgres_url
from ..store import Store
from ..transfer import copy_sessions
from .common import echo_json
from .created import is_blank, remember_new_database


def _open(ctx: click.Context, target: str, *, write: bool) -> Store:
    """SOURCE read-only (never created), or DESTINATION, created if need be: removed again
    (``remember_new_database``) when the copy fails."""
    if is_postgres_url(target):
        return Store(target, readonly=not write)
    path = Path(target)
    if not write:
        if not path.is_file():
            raise click.ClickException(f"no database at {target}")
        if is_blank(path):
            raise click.ClickException(f"no database at {target}: the file is empty")
        return Store(target, readonly=True)
    if not path.exists():
        remember_new_database(ctx, path)
    elif is_blank(path):
        remember_new_database(ctx, path, blank=path.read_bytes())
    return Store(target)


@click.command()
@click.argument("source")
@click.argument("destination")
@click.option("-s", "--session", "sessions", multiple=True, help="Only this session (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print the sessions copied as JSON.")
@click.pass_context
def copy(ctx: click.Context, source: str, destination: str, sessions: tuple[str, ...], as_json: bool) -> None:
    """Copy every session (or some) from SOURCE to DESTINATION, each a SQLite file or a
    postgresql:// URL. Lossless and idempotent: a session already there gains only what it
    lacks, so running it again copies nothing new."""
    with (
        _open(ctx, source, write=False) as src,
        _open(ctx, destination, write=True) as dst,
        click.progressbar(length=1, label="copying sessions", file=sys.stderr) as bar,
    ):

        def progress(done: int, total: int) -> None:
            bar.length = max(total, 1)
            bar.update(done - bar.pos)

        copied = copy_sessions(src, dst, sessions or None, progress)
    if as_json:
        echo_json({"source": src.path, "destination": dst.path, "sessions": copied})
        return
    click.echo(f"copied {len(copied)} session(s) from {src.path} to {dst.path}")


COMMANDS = [copy]
