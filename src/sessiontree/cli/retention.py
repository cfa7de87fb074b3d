"""Retention commands: trash, restore, empty-trash, retention."""

from __future__ import annotations

import re

import click

from .. import retention as _retention
from ..names import shown
from .common import echo_json, echo_result, listed, open_store
from .inspect import session_argument
from .params import MAX_COUNT, check_seconds
from .render import safe, table

json_option = click.option("--json", "as_json", is_flag=True, help="Output JSON.")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}


class Age(click.ParamType):
    """A duration such as 30d, 12h, 90m, 2w or 3600s (a bare number is days), up to 100 years."""

    name = "age"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, float):  # already converted
            return value
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", str(value))
        if not match:
            self.fail(f"{shown(str(value))} is not a duration like 30d, 12h, 90m, 2w or 3600s", param, ctx)
        seconds = float(match[1]) * _UNITS[match[2] or "d"]
        problem = check_seconds(seconds)
        if problem:
            self.fail(f"{shown(str(value))} is {problem}", param, ctx)
        return seconds


AGE = Age()


@click.command(name="trash")
@json_option
@click.pass_context
def trash(ctx: click.Context, as_json: bool) -> None:
    """List the sessions in the trash, longest there first."""
    store = open_store(ctx)
    entries = store.trash()
    if listed(entries, as_json, "The trash is empty."):
        return
    for line in table(
        [[e.session_id, e.nodes, e.trashed_at, e.title or ""] for e in entries],
        ["ID", "NODES", "TRASHED", "TITLE"],
    ):
        click.echo(line)


@click.command()
@session_argument(required=True)
@json_option
@click.pass_context
def restore(ctx: click.Context, session: str, as_json: bool) -> None:
    """Take SESSION out of the trash."""
    store = open_store(ctx, write=True)
    session_id = store.resolve_session_id(session)
    store.restore_session(session_id)
    echo_result(as_json, {"session": session_id, "restored": True}, f"restored session {session_id}")


@click.command(name="empty-trash")
@click.option(
    "--older-than", type=AGE, default="0s", show_default=True, help="Only sessions trashed this long ago."
)
@click.option("--dry-run", is_flag=True, help="Show what would be removed; write nothing.")
@json_option
@click.pass_context
def empty_trash(ctx: click.Context, older_than: float, dry_run: bool, as_json: bool) -> None:
    """Remove for good the sessions in the trash (those trashed --older-than ago)."""
    store = open_store(ctx, write=not dry_run)
    gone = store.empty_trash(older_than=older_than, dry_run=dry_run)
    verb = "would remove" if dry_run else "removed"
    echo_result(
        as_json,
        {"dry_run": dry_run, "sessions": [e.__dict__ for e in gone]},
        "\n".join(
            [
                f"{verb} session {e.session_id} ({e.nodes} node(s)) {safe(e.title or '')}".rstrip()
                for e in gone
            ]
            + [f"{verb} {len(gone)} session(s) from the trash"]
        ),
    )


@click.command()
@click.option(
    "--drop-older-than",
    type=AGE,
    help="Trash sessions idle this long, unless checkpointed or with work in flight.",
)
@click.option("--strip-older-than", type=AGE, help="Strip large tool results older than this.")
@click.option(
    "--strip-min-bytes",
    type=click.IntRange(min=1, max=MAX_COUNT),
    default=_retention.DEFAULT_MIN_BYTES,
    show_default=True,
    help="Only tool results at least this large are stripped.",
)
@click.option("--dry-run", is_flag=True, help="Show what would be trashed and stripped; write nothing.")
@click.option("--save", is_flag=True, help="Save the policy given in the store instead of running it.")
@json_option
@click.pass_context
def retention(
    ctx: click.Context,
    drop_older_than: float | None,
    strip_older_than: float | None,
    strip_min_bytes: int,
    dry_run: bool,
    save: bool,
    as_json: bool,
) -> None:
    """Apply retention policies: trash idle sessions, strip large old tool results.

    Sessions a checkpoint marks, or with work in flight (a branch at a pause waiting
    for a human, at a decision waiting for a worker, or at a tool call a run was cut
    off in), are never trashed, and the report names them; user, assistant and
    system messages are never stripped. A stripped tool result keeps a marker saying
    what was removed, its size, when and why. With --save the policy is stored
    instead; without a policy of its own the
    command runs the saved one.
    """
    given = drop_older_than is not None or strip_older_than is not None
    policy = _retention.RetentionPolicy(drop_older_than, strip_older_than, strip_min_bytes)
    if save:
        if dry_run:
            raise click.UsageError("--save stores the policy and --dry-run writes nothing: give one of them")
        if not given:
            raise click.UsageError("--save needs --drop-older-than, --strip-older-than or both")
        store = open_store(ctx, write=True)
        saved = store.save_retention_policy(policy=policy)
        echo_result(as_json, saved, "saved retention policy: " + describe(saved))
        return
    store = open_store(ctx, write=not dry_run)
    if given:
        report = store.retention(policy=policy, dry_run=dry_run)
    else:
        check_saved(store.retention_policy())
        report = store.apply_retention_policy(dry_run=dry_run)
    if as_json:
        echo_json(report.to_dict())
        return
    would = "would " if dry_run else ""
    for session_id in report.trashed:
        click.echo(f"{would}trash session {session_id}")
    for session_id in report.kept:
        click.echo(
            f"keep session {session_id}: work in flight (a branch at a pause, a decision or a tool call)"
        )
    for s in report.stripped:
        click.echo(f"{would}strip {s.bytes:,} bytes from tool result {s.node_id}")
    click.echo(
        f"{'would move' if dry_run else 'moved'} {len(report.trashed)} session(s) to the trash;"
        f" {would}strip {len(report.stripped)} tool result(s), {report.bytes_stripped:,} bytes"
    )


def check_saved(policy: dict[str, float]) -> None:
    """Refuse a saved policy with an age no option accepts (saved before ages were bounded)."""
    for setting in ("drop_older_than", "strip_older_than"):
        seconds = policy.get(setting)
        problem = None if seconds is None else check_seconds(seconds)
        if problem:
            option = "--" + setting.replace("_", "-")
            raise click.ClickException(
                f"the saved retention policy's {option} ({seconds:g} s) is {problem}:"
                f" save a new one with `sessiontree retention --save {option} AGE`"
            )
    if policy.get("strip_min_bytes", 1) > MAX_COUNT:
        raise click.ClickException(
            f"the saved retention policy's --strip-min-bytes ({policy['strip_min_bytes']:g}) is more than"
            f" {MAX_COUNT:,}: save a new one with `sessiontree retention --save`"
        )


def describe(policy: dict[str, float]) -> str:
    """A saved policy in words."""
    parts = []
    if "drop_older_than" in policy:
        parts.append(f"trash sessions idle {_age(policy['drop_older_than'])}")
    if "strip_older_than" in policy:
        parts.append(
            f"strip tool results of {int(policy.get('strip_min_bytes', 0)):,}+ bytes"
            f" older than {_age(policy['strip_older_than'])}"
        )
    return "; ".join(parts)


def _age(seconds: float) -> str:
    return f"{seconds / 86_400:g} days" if seconds % 86_400 == 0 else f"{seconds:g} s"


COMMANDS = [trash, restore, empty_trash, retention]
