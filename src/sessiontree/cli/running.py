"""Commands that run the agent loop: run, resume and the offline demo."""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import json
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import click

from ..loop import aresume, arun
from ..steps import Approve, Assistant, Final, Pause, Paused, Token, ToolCall, ToolEnd, ToolStart
from ..tools import Tool, as_tools
from . import complete
from .common import open_store, pick_session
from .refs import require_branch
from .render import calls_text, one_line


def load_tools(specs: tuple[str, ...]) -> list[Tool]:
    """Tools from ``module``, ``module:attribute`` or ``path/to/file.py`` specs."""
    found: list[Tool] = []
    for spec in specs:
        target, _, attribute = spec.partition(":")
        try:
            if target.endswith(".py"):
                module_spec = importlib.util.spec_from_file_location(Path(target).stem, target)
                if module_spec is None or module_spec.loader is None:
                    raise ImportError(f"cannot load {target}")
                module = importlib.util.module_from_spec(module_spec)
                module_spec.loader.exec_module(module)
            else:
                module = importlib.import_module(target)
        except (ImportError, OSError, SyntaxError) as e:
            raise click.BadParameter(f"cannot import {target}: {e}", param_hint="--tools") from None
        values = [getattr(module, attribute)] if attribute else list(vars(module).values())
        for value in values:
            items = value if isinstance(value, list | tuple) else [value]
            found += [item for item in items if isinstance(item, Tool)]
    return list(as_tools(found).values())


APPROVE_POLICIES = ("default", "all", "none")


def approver(policy: str) -> Callable[[ToolCall], Any] | None:
    """``--approve``: None leaves the library's rule (tools marked requires_approval
    pause); ``all`` pauses every call; ``none`` runs every call."""
    if policy == "all":
        return lambda call: Pause(f"--approve all: {call.name} needs a human")
    if policy == "none":
        return lambda call: Approve()
    return None


def print_steps(
    steps: AsyncIterator[Any], as_json: bool = False, about: Callable[[Final], dict[str, Any]] | None = None
) -> Final | None:
    """Print steps as they come (as text, or one JSON object per line); return the Final step.

    ``about(final)`` adds fields to the JSON line of the Final step.
    """
    final = None
    streamed = False

    async def consume() -> None:
        nonlocal final, streamed
        async for step in steps:
            if as_json:
                data = step_dict(step)
                if isinstance(step, Final) and about is not None:
                    data.update(about(step))
                click.echo(json.dumps(data, ensure_ascii=False, default=str))
            else:
                echo_step(step, streamed)
            final = step if isinstance(step, Final) else final
            streamed = isinstance(step, Token)  # tokens are always followed by their Assistant

    asyncio.run(consume())
    return final


def step_dict(step: Any) -> dict[str, Any]:
    """A step as a JSON object: ``step`` names its type, ``node`` the node it wrote."""
    if isinstance(step, Token):
        return {"step": "token", "text": step.text}
    if isinstance(step, Assistant):
        return {
            "step": "assistant",
            "node": step.node.id,
            "content": step.message.get("content"),
            "tool_calls": [ToolCall.from_message(c).to_dict() for c in step.message.get("tool_calls") or []],
        }
    if isinstance(step, ToolStart):
        return {"step": "tool_start", "node": step.node.id, "call": step.call.to_dict()}
    if isinstance(step, ToolEnd):
        return {
            "step": "tool_end",
            "node": step.node.id,
            "call": step.call.to_dict(),
            "ok": step.ok,
            "content": step.node.payload.get("content"),
        }
    if isinstance(step, Paused):
        return {
            "step": "paused",
            "node": step.node.id,
            "reason": step.node.payload.get("reason"),
            "calls": step.calls,
        }
    if isinstance(step, Final):
        return {
            "step": "final",
            "node": step.node.id if step.node else None,
            "reason": step.reason,
            "error": step.error,
        }
    raise TypeError(f"unknown step {step!r}")


def echo_step(step: Any, streamed: bool = False) -> None:
    if isinstance(step, Token):
        click.echo(step.text, nl=False)
    elif isinstance(step, Assistant):
        message = step.message
        if streamed:
            click.echo()
        elif message.get("content"):
            click.echo(f"assistant: {message['content']}")
        if message.get("tool_calls"):
            click.echo(f"assistant -> {calls_text(message['tool_calls'])}")
    elif isinstance(step, ToolStart):
        click.echo(f"  running {step.call.name} [{step.call.id}]")
    elif isinstance(step, ToolEnd):
        click.echo(
            f"  {'ok' if step.ok else 'failed'} {step.call.name}: "
            f"{one_line(step.node.payload.get('content'), 60)}"
        )
    elif isinstance(step, Paused):
        click.echo(f"paused: {step.node.payload.get('reason')}")
        for call in step.calls:
            click.echo(f"  call {call['id']}: {call['name']}({call['arguments']})")
        click.echo(
            f"decide with: sessiontree approve {step.node.id}   "
            f"(or: sessiontree reject {step.node.id} --reason ...)"
        )
        click.echo(f"then resume: sessiontree resume {step.node.id}")
    elif isinstance(step, Final):
        if step.reason == "error":
            click.echo(f"error: {step.error}", err=True)
        elif step.reason not in ("completed", "paused"):
            click.echo(f"stopped: {step.reason}")


def options(*decorators: Callable) -> Callable[[Callable], Callable]:
    """Apply option decorators in the order they are listed (= the order of --help)."""

    def apply(function: Callable) -> Callable:
        for decorator in reversed(decorators):
            function = decorator(function)
        return function

    return apply


base_url_option = click.option(
    "--base-url",
    envvar="SESSIONTREE_BASE_URL",
    help="OpenAI-compatible endpoint, e.g. http://localhost:11434/v1 (env SESSIONTREE_BASE_URL).",
)
model_option = click.option(
    "-m", "--model", envvar="SESSIONTREE_MODEL", help="Model name (env SESSIONTREE_MODEL)."
)
api_key_option = click.option(
    "--api-key-env",
    default="OPENAI_API_KEY",
    show_default=True,
    help="Environment variable holding the API key.",
)
no_stream_option = click.option(
    "--no-stream", is_flag=True, help="Wait for whole replies instead of streaming."
)
tools_option = click.option(
    "--tools",
    "tool_specs",
    multiple=True,
    help="Tools to offer: module, module:attribute or file.py (repeatable).",
)
approve_option = click.option(
    "--approve",
    "policy",
    type=click.Choice(APPROVE_POLICIES),
    default="default",
    show_default=True,
    help="Which tool calls pause for a human: default: calls to tools marked requires_approval "
    "(by default the non-idempotent ones); all: every call; none: no call.",
)
max_steps_option = click.option("--max-steps", default=20, show_default=True, help="Model calls per run.")
params_option = click.option(
    "-o",
    "--option",
    "params",
    multiple=True,
    type=(str, str),
    help="Extra request parameter, e.g. -o temperature 0.2 (repeatable).",
)
json_steps_option = click.option(
    "--json", "as_json", is_flag=True, help="Print each step as a JSON object, one per line."
)

# run and resume; rerun takes the same minus --model and --no-stream (variants name
# their models; reruns never stream).
model_options = options(
    base_url_option,
    model_option,
    api_key_option,
    no_stream_option,
    tools_option,
    approve_option,
    max_steps_option,
    params_option,
)
rerun_options = options(
    base_url_option, api_key_option, tools_option, approve_option, max_steps_option, params_option
)


def make_call(
    base_url: str | None,
    model: str | None,
    api_key_env: str,
    stream: bool,
    params: tuple[tuple[str, str], ...],
) -> Any:
    from ..providers import openai_compatible

    if not base_url and not model:
        raise click.UsageError("give --base-url and --model (or SESSIONTREE_BASE_URL and SESSIONTREE_MODEL)")
    if not base_url:
        raise click.UsageError("give --base-url (or SESSIONTREE_BASE_URL)")
    if not model:
        raise click.UsageError("give --model (or SESSIONTREE_MODEL)")
    extra = {}
    for key, value in params:
        try:
            extra[key] = json.loads(value)
        except ValueError:
            extra[key] = value
    return openai_compatible(base_url, model, api_key=os.environ.get(api_key_env), stream=stream, **extra)


@click.command()
@click.argument("prompt", required=False)
@click.option(
    "-s",
    "--session",
    help="Continue this session (default: the latest; a new one in an empty store).",
    shell_complete=complete.sessions,
)
@click.option("--new", is_flag=True, help="Start a new session; PROMPT is its first message.")
@click.option(
    "-b",
    "--branch",
    default="main",
    show_default=True,
    help="Branch to advance (in a continued session it must exist: fork it first).",
    shell_complete=complete.refs,
)
@click.option("--system", help="System prompt (only for a new session).")
@model_options
@json_steps_option
@click.pass_context
def run(
    ctx: click.Context,
    prompt: str | None,
    session: str | None,
    new: bool,
    branch: str,
    system: str | None,
    base_url: str | None,
    model: str | None,
    api_key_env: str,
    no_stream: bool,
    tool_specs: tuple[str, ...],
    policy: str,
    max_steps: int,
    params: tuple[tuple[str, str], ...],
    as_json: bool,
) -> None:
    """Add PROMPT (if given) to a branch and run the agent loop on an OpenAI-compatible model.

    Continues -s SESSION, else the most recently active session; --new (or an
    empty store) starts a new session.
    """
    if new and session:
        raise click.ClickException("give -s SESSION or --new, not both")
    call = make_call(base_url, model, api_key_env, not no_stream, params)
    tools = load_tools(tool_specs)
    store = open_store(ctx, write=True)
    new = new or (not session and not store.sessions())
    if new:
        if not prompt:
            raise click.ClickException("give a PROMPT to start a new session")
        s = store.create_session(one_line(prompt, 60))
        if system:
            s.append({"role": "system", "content": system}, branch=branch)
    else:
        if system:
            raise click.ClickException("--system only applies to a new session (add --new)")
        s = pick_session(store, session)
        require_branch(s, branch)
    if prompt:
        s.append({"role": "user", "content": prompt}, branch=branch)
    click.echo(f"session {s.id} branch {branch}", err=True)
    final = print_steps(
        arun(store, s, branch, call=call, tools=tools, approve=approver(policy), max_steps=max_steps),
        as_json,
        lambda final: {"session": s.id, "branch": branch},
    )
    if final is not None and final.reason == "error":
        ctx.exit(1)


@click.command()
@click.argument("pause", shell_complete=complete.resumable)
@model_options
@json_steps_option
@click.pass_context
def resume(
    ctx: click.Context,
    pause: str,
    base_url: str | None,
    model: str | None,
    api_key_env: str,
    no_stream: bool,
    tool_specs: tuple[str, ...],
    policy: str,
    max_steps: int,
    params: tuple[tuple[str, str], ...],
    as_json: bool,
) -> None:
    """Continue the branch of a decided PAUSE."""
    call = make_call(base_url, model, api_key_env, not no_stream, params)
    tools = load_tools(tool_specs)
    store = open_store(ctx, write=True)
    node = store.node(pause)

    def about(final: Final) -> dict[str, Any]:
        heads = [
            b.name
            for b in store.session(node.session_id).branches()
            if final.node and b.head_id == final.node.id
        ]
        return {"session": node.session_id, "branch": heads[0] if heads else None}

    final = print_steps(
        aresume(store, node.id, call=call, tools=tools, approve=approver(policy), max_steps=max_steps),
        as_json,
        about,
    )
    if final is not None and final.reason == "error":
        ctx.exit(1)


@click.command()
@click.pass_context
def demo(ctx: click.Context) -> None:
    """An offline tour: pause before a risky tool, approve, resume, fork a checkpoint, rerun."""
    from .demo import run_demo

    run_demo(open_store(ctx, write=True))


COMMANDS = [run, resume, demo]
