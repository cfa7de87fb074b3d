"""The import command: files, patterns, directories, compressed files and stdin.

Contract: every argument is expanded first (``formats.inputs.expand``), so a missing
file or a pattern matching nothing is refused before a database is made for it. Then
each file is imported in its own transaction, all of it or nothing: the first file that
fails stops the command with one line naming it and saying what became of the others
(the files before it stay imported, the ones after it are not read). A file whose every
session and node the store already held says "already imported, nothing new". The
database this command created is removed when nothing made it in (``created``).
"""

from __future__ import annotations

import sys
from typing import Any

import click

from ..errors import SessionTreeError
from ..formats import detect_format, import_file
from ..formats.errors import InvalidEntry
from ..formats.inputs import Input, expand, local
from ..storage.rows import Counts
from ..store import Store
from .common import echo_json, open_store
from .inspect import json_option

SKIP_HINT = " (use --skip-invalid to leave it out)"


@click.command(name="import")
@click.argument("files", nargs=-1, required=True)  # checked by inputs.expand: one line, not a usage error
@click.option(
    "--format",
    "fmt",
    default="auto",
    show_default=True,
    type=click.Choice(
        [
            "auto",
            "native",
            "openai",
            "chatgpt",
            "librechat",
            "openwebui",
            "claude-code",
            "pi",
            "yoagent",
            "yoagent-messages",
            "yieldagent",
            "sharegpt",
        ]
    ),
)
@click.option(
    "--skip-invalid",
    is_flag=True,
    help="Leave out a conversation that cannot be read (ChatGPT, LibreChat, Open WebUI lists) and say so.",
)
@json_option
@click.pass_context
def import_(ctx: click.Context, files: tuple[str, ...], fmt: str, skip_invalid: bool, as_json: bool) -> None:
    """Import sessions from FILES, each file all or nothing.

    A FILE is a path; a quoted pattern ('logs/*.jsonl', ** for any depth); a directory
    (every .json, .jsonl, .gz and .zip file under it, sorted, such as
    ~/.claude/projects); or - for standard input. A .gz file is decompressed first, and
    a ChatGPT export .zip is read from its conversations.json. Files are written as they
    are read: a record (native, pi) or a conversation (the others) at a time.
    Each file is its own transaction: when one fails, the files before it stay imported
    and the ones after it are not read. A database this command created is removed
    again when nothing was imported. --json lists every file with its sessions.
    """
    items = expand(files)  # before a database is made for them
    importer = _Importer(ctx, fmt, skip_invalid, shown=len(items))
    results = []
    for number, item in enumerate(items, 1):
        try:
            results.append(importer.one(item, number))
        except SessionTreeError as e:
            if len(items) == 1:
                raise
            raise type(e)(f"{e}{_the_others(number, len(items))}") from None
        if not as_json:
            for line in _said(results[-1], single=len(items) == 1):
                click.echo(line)
    if as_json:
        echo_json(results)
    elif len(items) > 1:
        fresh = sum(1 for r in results if r["new"])
        click.echo(f"{len(items)} files: {fresh} imported, {len(items) - fresh} already imported")


class _Importer:
    """Imports one file after another into the store, opened when the first file's
    format is known (a file refused then makes no database; one refused later leaves
    the database only when an earlier file made it in, see ``created``)."""

    def __init__(self, ctx: click.Context, fmt: str, skip_invalid: bool, shown: int) -> None:
        self.ctx, self.fmt, self.skip_invalid, self.total = ctx, fmt, skip_invalid, shown
        self.store: Store | None = None
        self.counts: Counts | None = None  # after the last file

    def one(self, item: Input, number: int) -> dict[str, Any]:
        """Import ``item``; what the command reports of it."""
        with local(item) as (path, name):
            fmt = detect_format(path, name=name) if self.fmt == "auto" else self.fmt
            store = self._open()
            before = self.counts or store.storage.upkeep.counts(None)
            label = f"importing {name}" if self.total == 1 else f"importing [{number}/{self.total}] {name}"
            with click.progressbar(length=1, label=label, file=sys.stderr) as bar:

                def progress(done: int, total: int) -> None:
                    bar.length = max(total, done, 1)  # a streamed import's total is known at its end
                    bar.update(done - bar.pos)

                try:
                    imported = import_file(
                        store, path, fmt, progress, skip_invalid=self.skip_invalid, report=_warn, name=name
                    )
                except InvalidEntry as e:
                    raise InvalidEntry(f"{e}{SKIP_HINT}") from None
        self.counts = store.storage.upkeep.counts(None)
        return {
            "file": item.name,
            "format": fmt,
            "new": self.counts != before,
            "sessions": [{"id": s.id, "title": s.title} for s in imported],
        }

    def _open(self) -> Store:
        if self.store is None:
            self.store = open_store(self.ctx, write=True)
        return self.store


def _warn(line: str) -> None:
    click.echo(line, err=True)


def _said(result: dict[str, Any], *, single: bool) -> list[str]:
    """The lines a file's import prints: each session when it is the only file, else one."""
    file, fmt, sessions = result["file"], result["format"], result["sessions"]
    if not result["new"]:
        return [f"{file}: already imported, nothing new ({len(sessions)} session(s), {fmt})"]
    if single or len(sessions) == 1:
        prefix = "" if single else f"{file}: "
        return [
            f"{prefix}imported session {s['id']} ({fmt})" + (f": {s['title']}" if s["title"] else "")
            for s in sessions
        ]
    return [f"{file}: imported {len(sessions)} sessions ({fmt})"]


def _the_others(number: int, total: int) -> str:
    """What a failure of file ``number`` of ``total`` leaves of the others."""
    before, after = number - 1, total - number
    kept = f"the {before} file(s) before it stay imported" if before else "no file before it"
    rest = f"the {after} after it were not read" if after else "no file after it"
    return f" (nothing of it was written; {kept}, {rest})"


__all__ = ["import_"]
