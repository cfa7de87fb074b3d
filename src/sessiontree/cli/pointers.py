"""Commands that change or remove named pointers: rename-branch, move-branch,
delete-branch, delete-checkpoint.

Nodes are never touched here: a removed pointer's nodes stay until ``prune``.
With ``--json`` each prints the result as one JSON object.
"""

from __future__ import annotations

import click

from ..names import shown
from . import complete
from .common import echo_result, open_store, pick_session, target
from .inspect import session_json


@click.command(name="rename-branch")
@click.argument("old", shell_complete=complete.branches)
@click.argument("new")
@session_json
def rename_branch(ctx: click.Context, old: str, new: str, session: str | None, as_json: bool) -> None:
    """Rename branch OLD to NEW (refused if NEW names a branch or checkpoint)."""
    store = open_store(ctx, write=True)
    branch = pick_session(store, session).rename(old, new)
    echo_result(as_json, branch.__dict__, f"renamed branch {old} to {branch.name} -> {branch.head_id}")


@click.command(name="move-branch")
@click.argument("name", shell_complete=complete.branches)
@click.argument("ref", shell_complete=complete.refs)
@click.option("--expect", help="Move only if the branch is still at this node (compare-and-set).")
@session_json
def move_branch(
    ctx: click.Context, name: str, ref: str, expect: str | None, session: str | None, as_json: bool
) -> None:
    """Point branch NAME at REF (a branch, checkpoint or node) instead."""
    store = open_store(ctx, write=True)
    s, to = target(store, ref, session)
    branch = s.move(name, to=to, expect_head=expect)
    echo_result(as_json, branch.__dict__, f"branch {branch.name} -> {branch.head_id}")


@click.command(name="delete-branch")
@click.argument("name", shell_complete=complete.branches)
@session_json
def delete_branch(ctx: click.Context, name: str, session: str | None, as_json: bool) -> None:
    """Delete branch NAME; its nodes stay until `sessiontree prune`."""
    _delete(ctx, "branch", name, session, as_json, " (prune removes nodes nothing reaches any more)")


@click.command(name="delete-checkpoint")
@click.argument("name", shell_complete=complete.checkpoints)
@session_json
def delete_checkpoint(ctx: click.Context, name: str, session: str | None, as_json: bool) -> None:
    """Delete checkpoint NAME; the node it marked stays."""
    _delete(ctx, "checkpoint", name, session, as_json)


def _delete(
    ctx: click.Context, kind: str, name: str, session: str | None, as_json: bool, note: str = ""
) -> None:
    """Delete the branch or checkpoint (``kind``) NAME; a pointer of the other kind by that
    name is refused, naming the command that deletes it."""
    store = open_store(ctx, write=True)
    s = pick_session(store, session)
    other = "checkpoint" if kind == "branch" else "branch"
    if name in {p.name for p in (s.checkpoints() if kind == "branch" else s.branches())}:
        raise click.ClickException(
            f"{shown(name)} is a {other}, not a {kind}; use `sessiontree delete-{other}`"
        )
    (s.delete_branch if kind == "branch" else s.delete_checkpoint)(name)
    echo_result(as_json, {"session": s.id, f"deleted_{kind}": name}, f"deleted {kind} {name}{note}")


COMMANDS = [rename_branch, move_branch, delete_branch, delete_checkpoint]
