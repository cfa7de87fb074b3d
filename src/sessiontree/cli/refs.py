"""Commands that add refs or nodes by hand: fork, checkpoint, edit, approve, reject."""

from __future__ import annotations

import json

import click

from ..loop import decide
from ..steps import Approve, Edit, Reject
from .common import open_store, target
from .inspect import session_option


@click.command()
@click.argument("name")
@click.option("--at", "at", required=True, help="Branch, checkpoint or node to fork from.")
@session_option
@click.pass_context
def fork(ctx: click.Context, name: str, at: str, session: str | None) -> None:
    """Start branch NAME at a node, branch or checkpoint (nothing is copied)."""
    store = open_store(ctx, write=True)
    s, ref = target(store, at, session)
    branch = s.fork(name, at=ref)
    click.echo(f"branch {branch.name} -> {branch.head_id}")


@click.command()
@click.argument("name")
@click.option("--at", "at", default="main", show_default=True, help="What the checkpoint marks.")
@session_option
@click.pass_context
def checkpoint(ctx: click.Context, name: str, at: str, session: str | None) -> None:
    """Mark a node with checkpoint NAME; checkpoints never move."""
    store = open_store(ctx, write=True)
    s, ref = target(store, at, session)
    cp = s.checkpoint(name, at=ref)
    click.echo(f"checkpoint {cp.name} -> {cp.node_id}")


@click.command()
@click.argument("node")
@click.option("-b", "--branch", required=True, help="New branch for the edited turn.")
@click.option("--text", help="The new message text (default: open $EDITOR).")
@session_option
@click.pass_context
def edit(ctx: click.Context, node: str, branch: str, text: str | None, session: str | None) -> None:
    """Write an edited copy of a message as its sibling, on a new branch."""
    store = open_store(ctx, write=True)
    s, ref = target(store, node, session)
    original = s.node(ref)
    if original.kind != "message":
        raise click.ClickException(
            f"node {original.id} is a {original.kind} node; only messages can be edited"
        )
    if text is None:
        text = click.edit(str(original.payload.get("content") or ""))
        if text is None:
            raise click.ClickException("the editor was closed without saving; nothing changed")
        text = text.rstrip("\n")
    new = s.edit(original, {**original.payload, "content": text}, branch=branch)
    click.echo(f"branch {branch} -> {new.id}")


def _decide(ctx: click.Context, pause: str, calls: tuple[str, ...], make, by: str | None) -> None:
    store = open_store(ctx, write=True)
    node = store.node(pause)
    ids = list(calls) or [c["id"] for c in node.payload.get("calls", [])]
    decision = decide(store, node.id, {i: make() for i in ids}, by=by)
    click.echo(f"decision {decision.id} on pause {node.id}: {', '.join(ids)}")
    click.echo(f"resume with: sessiontree resume {node.id}")


by_option = click.option("--by", help="Who decided (recorded in the decision).")


@click.command()
@click.argument("pause")
@click.argument("calls", nargs=-1)
@by_option
@click.pass_context
def approve(ctx: click.Context, pause: str, calls: tuple[str, ...], by: str | None) -> None:
    """Approve CALLS of PAUSE (all of them when none are named)."""
    _decide(ctx, pause, calls, Approve, by)


@click.command()
@click.argument("pause")
@click.argument("calls", nargs=-1)
@click.option("--reason", default="", help="Told to the model in the tool message.")
@by_option
@click.pass_context
def reject(ctx: click.Context, pause: str, calls: tuple[str, ...], reason: str, by: str | None) -> None:
    """Reject CALLS of PAUSE (all of them when none are named)."""
    _decide(ctx, pause, calls, lambda: Reject(reason), by)


@click.command(name="edit-call")
@click.argument("pause")
@click.argument("call")
@click.argument("arguments")
@by_option
@click.pass_context
def edit_call(ctx: click.Context, pause: str, call: str, arguments: str, by: str | None) -> None:
    """Approve CALL of PAUSE with new JSON ARGUMENTS."""
    try:
        parsed = json.loads(arguments)
    except json.JSONDecodeError as e:
        raise click.BadParameter(f"not JSON: {e}", param_hint="ARGUMENTS") from None
    if not isinstance(parsed, dict):
        raise click.BadParameter("must be a JSON object", param_hint="ARGUMENTS")
    _decide(ctx, pause, (call,), lambda: Edit(parsed), by)


COMMANDS = [fork, checkpoint, edit, approve, reject, edit_call]
