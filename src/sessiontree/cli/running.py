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
from .common import open_store
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


def approver(policy: str, tools: list[Tool]) -> Callable[[ToolCall], Any]:
    unsafe = {t.name for t in tools if not t.idempotent}

    def approve(call: ToolCall) -> Any:
        if policy == "all" or (policy == "unsafe" and call.name in unsafe):
            return Pause(f"--approve {policy}: {call.name} needs a human")
        return Approve()

    return approve


def print_steps(steps: AsyncIterator[Any] | Any) -> Final | None:
    """Print steps as they come; return the Final step."""
    final = None
    streamed = False

    async def consume() -> None:
        nonlocal final, streamed
        async for step in steps:
            final = echo_step(step, streamed) or final
            streamed = isinstance(step, Token)  # tokens are always followed by their Assistant

    asyncio.run(consume())
    return final


def echo_step(step: Any, streamed: bool = False) -> Final | None:
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
        return step
    return None


def model_options(function: Callable) -> Callable:
    """The options that choose a model endpoint, shared by run and resume."""
    options = [
        click.option(
            "--base-url",
            envvar="SESSIONTREE_BASE_URL",
            help="OpenAI-compatible endpoint, e.g. http://localhost:11434/v1 (env SESSIONTREE_BASE_URL).",
        ),
        click.option("-m", "--model", envvar="SESSIONTREE_MODEL", help="Model name (env SESSIONTREE_MODEL)."),
        click.option(
            "--api-key-env",
            default="OPENAI_API_KEY",
            show_default=True,
            help="Environment variable holding the API key.",
        ),
        click.option("--no-stream", is_flag=True, help="Wait for whole replies instead of streaming."),
        click.option(
            "--tools",
            "tool_specs",
            multiple=True,
            help="Tools to offer: module, module:attribute or file.py (repeatable).",
        ),
        click.option(
            "--approve",
            "policy",
            type=click.Choice(["all", "unsafe", "none"]),
            default="unsafe",
            show_default=True,
            help="Which tool calls pause for a human: all, non-idempotent ones, or none.",
        ),
        click.option("--max-steps", default=20, show_default=True, help="Model calls per run."),
        click.option(
            "-o",
            "--option",
            "params",
            multiple=True,
            type=(str, str),
            help="Extra request parameter, e.g. -o temperature 0.2 (repeatable).",
        ),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def make_call(
    base_url: str | None,
    model: str | None,
    api_key_env: str,
    no_stream: bool,
    params: tuple[tuple[str, str], ...],
) -> Any:
    from ..providers import openai_compatible

    if not base_url or not model:
        raise click.UsageError("give --base-url and --model (or SESSIONTREE_BASE_URL and SESSIONTREE_MODEL)")
    extra = {}
    for key, value in params:
        try:
            extra[key] = json.loads(value)
        except ValueError:
            extra[key] = value
    return openai_compatible(
        base_url, model, api_key=os.environ.get(api_key_env), stream=not no_stream, **extra
    )


@click.command()
@click.argument("prompt", required=False)
@click.option("-s", "--session", help="Continue this session (default: start a new one).")
@click.option("-b", "--branch", default="main", show_default=True)
@click.option("--system", help="System prompt for a new session.")
@model_options
@click.pass_context
def run(
    ctx: click.Context,
    prompt: str | None,
    session: str | None,
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
) -> None:
    """Send PROMPT on a branch to an OpenAI-compatible model and run the agent loop."""
    call = make_call(base_url, model, api_key_env, no_stream, params)
    tools = load_tools(tool_specs)
    store = open_store(ctx, write=True)
    if session:
        s = store.session(session)
    else:
        if not prompt:
            raise click.UsageError("give a PROMPT to start a new session")
        s = store.create_session(one_line(prompt, 60))
        if system:
            s.append({"role": "system", "content": system}, branch=branch)
    if prompt:
        s.append({"role": "user", "content": prompt}, branch=branch)
    click.echo(f"session {s.id} branch {branch}", err=True)
    final = print_steps(
        arun(store, s, branch, call=call, tools=tools, approve=approver(policy, tools), max_steps=max_steps)
    )
    if final is not None and final.reason == "error":
        ctx.exit(1)


@click.command()
@click.argument("pause")
@model_options
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
) -> None:
    """Continue the branch of a decided PAUSE."""
    call = make_call(base_url, model, api_key_env, no_stream, params)
    tools = load_tools(tool_specs)
    store = open_store(ctx, write=True)
    final = print_steps(
        aresume(
            store,
            store.node(pause).id,
            call=call,
            tools=tools,
            approve=approver(policy, tools),
            max_steps=max_steps,
        )
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
