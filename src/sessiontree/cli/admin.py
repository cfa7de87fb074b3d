"""Maintenance commands: prune, verify, stats, backup, migrate, import, export, archive, delete."""

from __future__ import annotations

import itertools
import sys

import click

from ..formats import EXPORT_FORMATS
from ..storage import sqlite_db as _db
from . import complete
from .common import command, db_path, db_url, echo_json, echo_result, open_store, pick_session
from .imports import import_
from .inspect import json_option, only_session, only_session_json, session_argument
from .params import SECONDS
from .render import json_safe


@click.command()
@click.option("--yes", is_flag=True, help="Really delete (default: a dry run that only reports).")
@click.option("--vacuum", is_flag=True, help="Compact the file afterwards (with --yes).")
@only_session("Only this session.")
@click.option(
    "--grace",
    type=SECONDS,
    default=600,
    show_default=True,
    help="Keep nodes younger than this many seconds (another process may be about to use them).",
)
@json_option
@click.pass_context
def prune(
    ctx: click.Context, yes: bool, vacuum: bool, session: str | None, grace: float, as_json: bool
) -> None:
    """Remove nodes nothing keeps: no branch, checkpoint, unresolved pause or pending decision
    reaches them, and they are older than the grace period."""
    store = open_store(ctx, write=yes)
    report = store.prune(dry_run=not yes, vacuum=vacuum, session_id=session, grace=grace)
    if as_json:
        echo_json(report.__dict__)
        return
    verb = "removed" if yes else "would remove"
    click.echo(f"{verb} {len(report.node_ids)} node(s) and {len(report.run_ids)} run(s)")
    if report.bytes_freed is not None:
        click.echo(f"vacuum freed {report.bytes_freed} bytes")
    if not yes and report.node_ids:
        click.echo("run again with --yes to delete them")


@click.command()
@only_session_json("Only this session.")
def verify(ctx: click.Context, session: str | None, as_json: bool) -> None:
    """Check the store's integrity; exit 1 when a problem is found."""
    store = open_store(ctx)
    report = store.verify(session)
    if as_json:
        echo_json(
            {
                "ok": report.ok,
                "sessions": report.sessions,
                "nodes": report.nodes,
                "problems": [p.__dict__ for p in report.problems],
            }
        )
    else:
        for p in report.problems:
            click.echo(f"{p.check}: {p.detail}" + (f" (session {p.session_id})" if p.session_id else ""))
        click.echo(
            f"{'ok' if report.ok else 'FAILED'}: {report.sessions} session(s), "
            f"{report.nodes} node(s), {len(report.problems)} problem(s)"
        )
    if not report.ok:
        ctx.exit(1)


@click.command()
@json_option
@click.pass_context
def stats(ctx: click.Context, as_json: bool) -> None:
    """Counts, sizes and token usage per model."""
    data = open_store(ctx).stats()
    if as_json:
        echo_json(data)
        return
    click.echo(f"{data['file']}: {data['bytes']} bytes, schema version {data['schema_version']}")
    click.echo(
        f"sessions {data['sessions']}, branches {data['branches']}, "
        f"checkpoints {data['checkpoints']}, pending pauses {data['pending']}"
    )
    click.echo(
        "nodes "
        + (", ".join(f"{k} {v}" for k, v in data["nodes"].items()) or "0")
        + f" ({data['payload_bytes']} bytes of payload)"
    )
    for m in data["models"]:
        click.echo(
            f"model {m['model']}: {m['runs']} call(s), {m['input_tokens']} tokens in, "
            f"{m['output_tokens']} out"
        )


@click.command()
@click.argument("destination", type=click.Path(dir_okay=False))
@click.pass_context
def backup(ctx: click.Context, destination: str) -> None:
    """Write a consistent, compacted copy of the database (VACUUM INTO)."""
    store = open_store(ctx)
    size = store.backup(destination)
    click.echo(f"backed up {store.path} to {destination} ({size} bytes)")


@click.command()
@click.option("--list", "list_only", is_flag=True, help="Only list the pending steps.")
@click.pass_context
def migrate(ctx: click.Context, list_only: bool) -> None:
    """Apply pending schema migrations (opening a store also does this)."""
    url = db_url(ctx)
    if url is not None:
        from ..storage.postgres_db import pending_steps

        version, steps = pending_steps(url)
        if list_only:
            for step in steps:
                click.echo(f"{step.version:04d}_{step.name}")
            click.echo(f"{len(steps)} pending step(s); schema version {version}")
            return
        store = open_store(ctx, write=True)  # a server store migrates as it opens, under a lock
        for step in steps:
            click.echo(f"applied {step.version:04d}_{step.name}")
        if not steps:
            click.echo(f"0 pending step(s); schema version {store.schema_version}")
        return
    path, _ = db_path(ctx)
    if not path.exists():
        raise click.ClickException(f"no database at {path}")
    version, steps = _db.pending_steps(path)  # read only: a read-only file up to date is fine
    if list_only or not steps:
        for step in steps:
            click.echo(f"{step.version:04d}_{step.name}")
        click.echo(f"{len(steps)} pending step(s); schema version {version}")
        return
    applied, version = _db.migrate_file(path)
    for step in applied:
        click.echo(f"applied {step.version:04d}_{step.name}")
    if not applied:
        click.echo(f"0 pending step(s); schema version {version}")


@click.command()
@session_argument(many=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="File (default: stdout).")
@click.option(
    "--format",
    "fmt",
    default="native",
    show_default=True,
    type=click.Choice(EXPORT_FORMATS),
)
@click.option(
    "-b",
    "--branch",
    help="Branch or node whose path to write: openai, yoagent-messages, yieldagent (default: main);"
    " pi, claude-code, messages, sharegpt (default: the whole tree).",
    shell_complete=complete.branches,
)
@click.option(
    "--per",
    type=click.Choice(["leaf", "branch"]),
    default="leaf",
    show_default=True,
    help="messages, sharegpt: one line per leaf of the tree, or per named branch.",
)
@click.pass_context
def export(
    ctx: click.Context, sessions: tuple[str, ...], output: str | None, fmt: str, branch: str | None, per: str
) -> None:
    """Export sessions (all by default) as native JSONL or a fine-tuning dataset (messages,
    sharegpt, preference: chosen/rejected pairs of scored branches), or one session for
    another agent (pi, claude-code, yoagent, yieldagent, openai).

    pi and claude-code write the whole tree, forks included, unless -b picks one path.
    """
    from ..formats import BRANCH_FORMATS, ONE_SESSION, export_file, export_lines

    if fmt in ONE_SESSION and len(sessions) > 1:
        what = (
            "one branch of one session"
            if fmt in ("openai", "yoagent-messages", "yieldagent")
            else "one session"
        )
        raise click.UsageError(f"--format {fmt} exports {what}: give one SESSION, not {len(sessions)}")
    if branch is not None and fmt not in BRANCH_FORMATS:
        raise click.UsageError(
            f"-b/--branch only applies with --format {', '.join(BRANCH_FORMATS)}"
            f" ({fmt} exports whole sessions)"
        )
    if ctx.get_parameter_source("per") is not click.core.ParameterSource.DEFAULT and fmt not in (
        "messages",
        "sharegpt",
    ):
        raise click.UsageError("--per only applies with --format messages or sharegpt")
    store = open_store(ctx)
    ids = [store.resolve_session_id(s) for s in sessions] or None
    if fmt in ONE_SESSION and not ids:
        ids = [pick_session(store, None).id]
    if output:
        export_file(store, output, fmt, session_ids=ids, branch=branch, per=per)
        click.echo(f"exported to {output}", err=True)
        return
    pieces = iter(export_lines(store, fmt, session_ids=ids, branch=branch, per=per))
    first = next(pieces, "")  # what the export refuses, it refuses here: before any output
    # On a terminal, characters it would act on are written as \u escapes (the same JSON);
    # into a pipe or a file, the bytes are exactly the format's (yoagent's, byte for byte).
    shown = json_safe if sys.stdout.isatty() else str
    for piece in itertools.chain([first], pieces):
        click.echo(shown(piece), nl=False)


@click.command()
@session_argument(required=True)
@click.option("--undo", is_flag=True, help="Un-archive instead.")
@json_option
@click.pass_context
def archive(ctx: click.Context, session: str, undo: bool, as_json: bool) -> None:
    """Hide a session from `sessions` (its tree is kept)."""
    store = open_store(ctx, write=True)
    store.archive_session(session, archived=not undo)
    s = store.session(session)
    echo_result(
        as_json,
        {"session": s.id, "title": s.title, "archived_at": s.archived_at},
        f"{'un-archived' if undo else 'archived'} session {s.id}",
    )


@click.command()
@session_argument(required=True)
@click.option(
    "--permanently",
    is_flag=True,
    help="Remove it for good at once instead of moving it to the trash (needs --yes).",
)
@click.option(
    "--yes",
    is_flag=True,
    help="Really delete permanently (without it the command refuses and says what it would remove).",
)
@json_option
@click.pass_context
def delete(ctx: click.Context, session: str, permanently: bool, yes: bool, as_json: bool) -> None:
    """Move SESSION to the trash (`restore` brings it back; `empty-trash` removes it for good).

    With --permanently --yes, remove it with all its nodes, branches, checkpoints and
    runs at once.
    """
    store = open_store(ctx, write=yes or not permanently)
    session_id = store.resolve_session_id(session)
    if not permanently:
        trashed_at = store.session(session_id).trashed_at
        nodes = store.delete_session(session_id)
        if trashed_at is not None:
            echo_result(
                as_json,
                {
                    "session": session_id,
                    "trashed": True,
                    "nodes": nodes,
                    "already": True,
                    "trashed_at": trashed_at,
                },
                f"session {session_id} is already in the trash (since {trashed_at});"
                f" `{command(ctx, 'restore', session_id)}` brings it back",
            )
            return
        echo_result(
            as_json,
            {"session": session_id, "trashed": True, "nodes": nodes},
            f"moved session {session_id} ({nodes} node(s)) to the trash;"
            f" `{command(ctx, 'restore', session_id)}` brings it back",
        )
        return
    if not yes:
        nodes = store.session(session_id).verify().nodes
        raise click.ClickException(
            f"session {session_id} has {nodes} node(s); add --yes to delete it for good "
            "(or leave out --permanently to move it to the trash)"
        )
    removed = store.delete_session(session_id, permanently=True)
    echo_result(
        as_json,
        {"session": session_id, "nodes_removed": removed},
        f"deleted session {session_id} and its {removed} node(s)",
    )


COMMANDS = [prune, verify, stats, backup, migrate, import_, export, archive, delete]
