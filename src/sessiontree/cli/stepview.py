"""How the agent loop's steps reach the terminal: readable lines, or one JSON
object per line (``--json``) for scripts.

Contract: ``print_steps`` consumes an async iterator of steps as they come and
returns the ``Final`` step; nothing here touches the store.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import click

from .. import deadlines
from ..kinds import PausePayload, SummaryPayload
from ..steps import (
    Assistant,
    Compacted,
    Final,
    Paused,
    Recovering,
    Resuming,
    Token,
    ToolCall,
    ToolEnd,
    ToolStart,
)
from .common import command, resume_command
from .render import call_line, calls_text, json_safe, one_line, safe

EXIT_CODES: dict[str, int] = {
    "completed": 0,
    "error": 1,
    "paused": 3,
    "max_steps": 4,
    **dict.fromkeys(["token_budget", "time_budget", "cost_budget", "repeated_calls"], 4),
}
"""How a run ended, as ``run``'s and ``resume``'s exit code, so a script can tell a run that
waits for a human (3) or gave up at ``--max-steps`` or another budget (4) from one that
finished (0) or failed (1). 2 stays click's "bad usage"."""


BUDGET_FLAGS: dict[str, str] = {
    "token_budget": "--max-tokens-total",
    "time_budget": "--max-seconds",
    "cost_budget": "--max-cost",
    "repeated_calls": "--max-repeats",
}
"""The flag that sets each budget a run can stop at (sessiontree.limits), named when it does."""


def exit_code(final: Final | None) -> int:
    """The exit code for a run that ended with ``final`` (no Final step: nothing ran, 0)."""
    return 0 if final is None else EXIT_CODES[final.reason]


def print_steps(
    steps: AsyncIterator[Any],
    as_json: bool = False,
    about: Callable[[Final], dict[str, Any]] | None = None,
    *,
    hints: bool = True,
) -> Final | None:
    """Print steps as they come (as text, or one JSON object per line); return the Final step.

    ``about(final)`` adds fields to the JSON line of the Final step; ``hints=False`` leaves
    out the commands to decide and resume a pause (for a caller that does both itself).
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
                click.echo(json_safe(json.dumps(data, ensure_ascii=False, default=str)))
            else:
                echo_step(step, streamed, hints)
            final = step if isinstance(step, Final) else final
            streamed = isinstance(step, Token)  # tokens are always followed by their Assistant

    asyncio.run(consume())
    return final


def _wrote(kind: str, step: Any, **fields: Any) -> dict[str, Any]:
    """The JSON object of a step that wrote a node (a Final may have none): its type, the
    node's id, then ``fields``."""
    return {"step": kind, "node": step.node.id if step.node else None, **fields}


def step_dict(step: Any) -> dict[str, Any]:
    """A step as a JSON object: ``step`` names its type, ``node`` the node it wrote."""
    if isinstance(step, Token):
        return {"step": "token", "text": step.text}
    if isinstance(step, Resuming):
        return {"step": "resuming", "pause": step.pause_id, "session": step.session_id}
    if isinstance(step, Recovering):
        return {"step": "recovering", "session": step.session_id, "branch": step.branch, "head": step.head_id}
    if isinstance(step, Assistant):
        calls = [ToolCall.from_message(c).to_dict() for c in step.message.get("tool_calls") or []]
        return _wrote("assistant", step, content=step.message.get("content"), tool_calls=calls)
    if isinstance(step, ToolStart):
        return _wrote("tool_start", step, call=step.call.to_dict())
    if isinstance(step, ToolEnd):
        content = step.node.payload.get("content")
        return _wrote("tool_end", step, call=step.call.to_dict(), ok=step.ok, content=content)
    if isinstance(step, Paused):
        reason = PausePayload.from_node(step.node).reason
        return _wrote("paused", step, reason=reason, calls=step.calls, **deadlines.about(step.node))
    if isinstance(step, Compacted):
        covers = SummaryPayload.from_node(step.node).covers
        return _wrote("compacted", step, covers=covers, summary=step.summary)
    if isinstance(step, Final):
        return _wrote("final", step, reason=step.reason, error=step.error)
    raise TypeError(f"unknown step {step!r}")


def echo_step(step: Any, streamed: bool = False, hints: bool = True) -> None:
    """A step for a person at a terminal. Whatever the model or the server wrote goes
    through ``safe`` (escape sequences, say, are shown rather than obeyed), and what must
    stay on one line through ``one_line``."""
    if isinstance(step, Resuming):
        click.echo(f"resuming pause {step.pause_id} (session {step.session_id})")
    elif isinstance(step, Recovering):
        click.echo(
            f"recovering branch {one_line(step.branch, None)} of session {step.session_id}:"
            f" a run was cut off inside a tool at {step.head_id}"
        )
    elif isinstance(step, Token):
        click.echo(safe(step.text), nl=False)
    elif isinstance(step, Assistant):
        message = step.message
        if streamed:
            click.echo()
        elif message.get("content"):
            click.echo(f"assistant: {safe(message['content'])}")
        if message.get("tool_calls"):
            click.echo(f"assistant -> {one_line(calls_text(message['tool_calls']), None)}")
    elif isinstance(step, ToolStart):
        click.echo(f"  running {one_line(step.call.name, None)} [{one_line(step.call.id, None)}]")
    elif isinstance(step, ToolEnd):
        outcome, content = "ok" if step.ok else "failed", one_line(step.node.payload.get("content"), 60)
        click.echo(f"  {outcome} {one_line(step.call.name, None)}: {content}")
    elif isinstance(step, Paused):
        click.echo(f"paused: {one_line(PausePayload.from_node(step.node).reason, None)}")
        for call in step.calls:
            click.echo(call_line(call, reason=False))
        state = deadlines.about(step.node)
        if state["state"] == "expired":  # a run stopped at an old pause: nobody can decide it
            click.echo(f"expired at {state['expires_at']}: it can no longer be decided")
            return
        if not hints:
            return
        ctx = click.get_current_context(silent=True)  # for --db, so the lines work pasted
        click.echo(
            f"decide with: {command(ctx, 'approve', step.node.id)}   "
            f"(or: {command(ctx, 'reject', step.node.id)} --reason ...)"
            + (f"  before {state['expires_at']}" if state["expires_at"] else "")
        )
        click.echo(f"then resume: {resume_command(ctx, step.node)}")
    elif isinstance(step, Compacted):
        covered = (SummaryPayload.from_node(step.node).covers or {}).get("nodes")
        click.echo(f"compacted: a summary now stands for {covered} earlier nodes")
    elif isinstance(step, Final):
        if step.reason == "error":
            click.echo(f"error: {one_line(step.error, None)}", err=True)
        elif step.reason in BUDGET_FLAGS and step.error:
            # one line naming the budget, its flag, and what the run spent (the note's message)
            click.echo(f"stopped: {step.reason} ({BUDGET_FLAGS[step.reason]}): {one_line(step.error, None)}")
        elif step.reason not in ("completed", "paused"):
            click.echo(f"stopped: {step.reason}")
