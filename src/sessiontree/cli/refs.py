"""Commands that add refs or nodes by hand: fork, checkpoint, edit, append, approve, reject.

With ``--json`` each prints what it created as one JSON object.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

import click

from ..decisions import edit_arguments
from ..errors import NotFound, ToolArgumentError
from ..kinds import PausePayload
from ..loop import decide
from ..model import Node
from ..plan import next_action
from ..session import Session
from ..steps import Approve, Decision, Edit, Reject
from . import complete
from .common import (
    command,
    echo_json,
    echo_result,
    open_store,
    open_target,
    pick_session,
    resume_command,
)
from .inspect import json_option, session_json
from .render import one_line


@click.command()
@click.argument("name")
@click.option(
    "--at", "at", required=True, help="Branch, checkpoint or node to fork from.", shell_complete=complete.refs
)
@session_json
def fork(ctx: click.Context, name: str, at: str, session: str | None, as_json: bool) -> None:
    """Start branch NAME at a node, branch or checkpoint (nothing is copied)."""
    store, s, ref = open_target(ctx, at, session)
    branch = s.fork(name, at=ref)
    echo_result(as_json, branch.__dict__, f"branch {branch.name} -> {branch.head_id}")


@click.command()
@click.argument("name")
@click.option(
    "--at",
    "at",
    default="main",
    show_default=True,
    help="What the checkpoint marks (REF~N: the Nth message above REF, REF~N!: the Nth node).",
    shell_complete=complete.refs,
)
@session_json
def checkpoint(ctx: click.Context, name: str, at: str, session: str | None, as_json: bool) -> None:
    """Mark a node with checkpoint NAME; checkpoints never move."""
    store, s, ref = open_target(ctx, at, session)
    cp = s.checkpoint(name, at=ref)
    echo_result(as_json, cp.__dict__, f"checkpoint {cp.name} -> {cp.node_id}")
    marked = s.node(cp.node_id)
    if marked.kind != "message":  # a rerun from a tool_start runs its tool again (newcomer row 11)
        short = store.abbreviations([marked.id])[marked.id]
        click.echo(
            f"warning: checkpoint {cp.name} marks a {marked.kind} node, not a message;"
            f" --at {short}~1 would mark the message before it",
            err=True,
        )


@click.command()
@click.argument("node", shell_complete=complete.refs)
@click.option("-b", "--branch", required=True, help="New branch for the edited turn.")
@click.option("--text", help="The new message text (default: open $EDITOR).")
@session_json
def edit(
    ctx: click.Context, node: str, branch: str, text: str | None, session: str | None, as_json: bool
) -> None:
    """Write an edited copy of a message as its sibling, on a new branch."""
    if text is not None and not text.strip():
        raise click.UsageError("--text is empty: give the new text of the message")
    store, s, ref = open_target(ctx, node, session)
    original = s.node(ref)
    if original.kind != "message":
        raise click.ClickException(
            f"node {original.id} is a {original.kind} node; only messages can be edited"
        )
    if original.payload.get("role") != "tool" and original.parent_id is not None:
        before = unsettled(s.path(original.parent_id))
        if before is not None:
            kind, what, _ = before
            raise click.ClickException(
                f"node {original.id} follows "
                + (f"{what}, which nobody has decided" if kind == "paused" else f"unanswered {what}")
                + ": an edited copy there would leave the model's tool calls unanswered"
            )
    if text is None:
        text = click.edit(str(original.payload.get("content") or ""))
        if text is None:
            raise click.ClickException("the editor was closed without saving; nothing changed")
        text = text.rstrip("\n")
        if not text.strip():
            raise click.ClickException("the edited text is empty; nothing changed")
    new = s.edit(original, {**original.payload, "content": text}, branch=branch)
    echo_result(
        as_json, {"node": new.to_dict(), "branch": s.branch(branch).__dict__}, f"branch {branch} -> {new.id}"
    )


@click.command()
@click.argument("text")
@click.option(
    "--role",
    type=click.Choice(["user", "system", "assistant"]),
    default="user",
    show_default=True,
    help="Who says TEXT.",
)
@click.option(
    "-b",
    "--branch",
    default="main",
    show_default=True,
    help="Branch to extend.",
    shell_complete=complete.branches,
)
@session_json
def append(ctx: click.Context, text: str, role: str, branch: str, session: str | None, as_json: bool) -> None:
    """Append a message with TEXT (- reads it from stdin) to a branch.

    The branch must exist, unless the session has no branch at all yet.
    """
    if text == "-":
        text = sys.stdin.read().rstrip("\n")
        if not text.strip():
            raise click.UsageError("TEXT is empty: stdin held no text")
    elif not text.strip():
        raise click.UsageError("TEXT is empty: give the text of the message")
    store = open_store(ctx, write=True)
    s = pick_session(store, session)
    require_branch(s, branch)
    require_settled(s, branch)
    node = s.append({"role": role, "content": text}, branch=branch)
    echo_result(
        as_json,
        {"node": node.to_dict(), "branch": s.branch(branch).__dict__},
        f"branch {branch} -> {node.id}",
    )


def require_branch(session: Session, name: str) -> None:
    """Refuse (NotFound) a branch the session does not have, unless it has none yet:
    appending to a new branch would start a second root, which a typo must not do."""
    existing = session.branches()
    if existing and name not in {b.name for b in existing}:
        session.branch(name)  # raises NotFound with the library's message


def require_settled(session: Session, name: str) -> None:
    """Refuse (one line) a message for a branch that waits for a human's decision or for
    tool results: it would leave the model's tool calls unanswered (``verify`` flags it)."""
    try:
        path = session.path(name)
    except NotFound:  # a new branch, or one with no node yet: nothing waits
        return
    found = unsettled(path, name)
    if found is None:
        return
    kind, what, how = found
    if kind == "paused":
        raise click.ClickException(f"branch {name} is waiting at {what}: {how}")
    raise click.ClickException(f"branch {name} has unanswered {what}: {how}")


def unsettled(path: list[Node], branch: str = "BRANCH") -> tuple[str, str, str] | None:
    """Why no message may follow a path (of ``branch``) yet, as ``plan.next_action``
    reads it: (its action, what waits, what to do), or None when one may."""
    action = next_action(path)
    if action.kind == "paused":
        return "paused", f"pause {path[-1].id}", f"approve or reject it first ({_hint('pending')})"
    if action.kind != "tools":
        return None
    assert action.assistant is not None  # calls to answer come from an assistant message
    what = f"tool calls ({', '.join(c.id for c in action.calls)})"
    after = [n for n in path if n.depth > action.assistant.depth]
    pause = next((n for n in reversed(after) if n.kind == "pause"), None)
    if pause is not None and path[-1].kind == "decision":
        return (
            "tools",
            what,
            f"resume it first ({resume_command(click.get_current_context(silent=True), pause)})",
        )
    return "tools", what, f"let the agent answer them first ({_hint('run', '-b', branch)})"


def _hint(*words: str) -> str:
    """A command to paste, with this command's --db (see ``common.command``)."""
    return command(click.get_current_context(silent=True), *words)


def _decide(
    ctx: click.Context,
    pause: str,
    calls: tuple[str, ...],
    make: Callable[[], Decision],
    by: str | None,
    as_json: bool,
) -> None:
    store = open_store(ctx, write=True)
    node = store.node(pause)
    ids = list(calls) or (PausePayload.from_node(node).call_ids if node.kind == "pause" else [])
    decision = decide(store, node.id, {i: make() for i in ids}, by=by)
    if as_json:
        echo_json(decision.to_dict())
        return
    click.echo(f"decision {decision.id} on pause {node.id}: {one_line(', '.join(ids), None)}")
    click.echo(f"resume with: {resume_command(ctx, node)}")


def decision_options(function: Callable) -> Callable:
    function = click.option(
        "--by",
        default=CLI_DECIDER,
        show_default=True,
        help="Who decided, recorded in the decision (the web inbox records 'web' or the decider's name).",
    )(function)
    return json_option(function)


CLI_DECIDER = "cli"
"""The ``by`` of a decision made on the command line without ``--by``: the channel, as the
web inbox records "web" (a name is given with ``--by`` or, in the inbox, a decider token)."""

pause_argument = click.argument("pause", shell_complete=complete.pending)


@click.command()
@pause_argument
@click.argument("calls", nargs=-1)
@decision_options
@click.pass_context
def approve(ctx: click.Context, pause: str, calls: tuple[str, ...], by: str | None, as_json: bool) -> None:
    """Approve CALLS of PAUSE (all of them when none are named)."""
    _decide(ctx, pause, calls, Approve, by, as_json)


@click.command()
@pause_argument
@click.argument("calls", nargs=-1)
@click.option("--reason", default="", help="Told to the model in the tool message.")
@decision_options
@click.pass_context
def reject(
    ctx: click.Context, pause: str, calls: tuple[str, ...], reason: str, by: str | None, as_json: bool
) -> None:
    """Reject CALLS of PAUSE (all of them when none are named)."""
    _decide(ctx, pause, calls, lambda: Reject(reason), by, as_json)


@click.command(name="edit-call")
@pause_argument
@click.argument("call")
@click.argument("arguments")
@decision_options
@click.pass_context
def edit_call(
    ctx: click.Context, pause: str, call: str, arguments: str, by: str | None, as_json: bool
) -> None:
    """Approve CALL of PAUSE with new JSON ARGUMENTS.

    ARGUMENTS must fit the tool's schema, as recorded on the pause: otherwise
    nothing is written and the pause still takes a decision."""
    try:
        parsed = json.loads(arguments)
    except json.JSONDecodeError as e:
        raise click.BadParameter(f"not JSON: {e}", param_hint="ARGUMENTS") from None
    try:
        edited = Edit(edit_arguments(parsed))  # the rule the web inbox applies too
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="ARGUMENTS") from None
    try:
        _decide(ctx, pause, (call,), lambda: edited, by, as_json)
    except ToolArgumentError as e:  # bad ARGUMENTS, like the two refusals above
        raise click.BadParameter(str(e), param_hint="ARGUMENTS") from None


COMMANDS = [fork, checkpoint, edit, append, approve, reject, edit_call]
