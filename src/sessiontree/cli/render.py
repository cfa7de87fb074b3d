"""Text renderings for the terminal: one-line node summaries, the tree graph,
branch transcripts and tables.

Contract: pure functions from nodes and refs to lines of text; nothing here
reads the database or prints. Colour (ANSI styles) is added only when asked.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import click

from ..kinds import (
    DecisionPayload,
    ErrorPayload,
    MarkerCall,
    PausePayload,
    ScorePayload,
    SummaryPayload,
    ToolStartPayload,
)
from ..model import Branch, Checkpoint, Node, Run, usage_tokens

WIDTH = 72


# Characters a terminal would act on or hide rather than show: C0 and C1 controls (escape
# sequences, OSC 52 clipboard writes), bidi overrides, zero-width and separator characters.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]")


def safe(text: Any) -> str:
    """Text with every character a terminal would act on shown as an escape (``\\x1b``)."""
    return _UNSAFE.sub(lambda m: repr(m.group())[1:-1], str(text))


def json_safe(text: str) -> str:
    """JSON text with the same characters written as ``\\uXXXX`` escapes: the same JSON,
    safe on a terminal."""
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def one_line(text: Any, width: int | None = WIDTH) -> str:
    """``safe`` text on one line (whitespace runs, newlines too, become one space), cut
    to ``width`` characters unless ``width`` is None."""
    text = " ".join(safe(text).split())
    return text if width is None or len(text) <= width else text[: width - 1] + "…"


def call_line(call: dict[str, Any], *, reason: bool = True) -> str:
    """A call of a pause as the CLI lists it; what the model or server wrote is made safe."""
    id_, name = one_line(call["id"], None), one_line(call["name"], None)
    arguments = safe(call["arguments"]).replace("\n", "\\n")  # exact, spaces and all
    line = f"  call {id_}: {name}({arguments})"
    if reason and call.get("reason"):
        line += f"  - {one_line(call['reason'], None)}"
    return line


def calls_text(calls: Iterable[dict[str, Any]]) -> str:
    parts = []
    for call in calls:
        function = call.get("function", call)
        parts.append(f"{function.get('name')}({function.get('arguments') or ''})")
    return ", ".join(parts)


def _names(calls: Iterable[MarkerCall]) -> str:
    return ", ".join("?" if c.name is None else c.name for c in calls)


def summary(node: Node) -> str:
    """What a node says, in one line."""
    p = node.payload
    if node.kind == "message":
        role = p.get("role")
        content = p.get("content")
        if isinstance(content, list):  # content parts
            content = " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
        if role == "assistant" and p.get("tool_calls"):
            text = (content + " " if content else "") + "-> " + calls_text(p["tool_calls"])
        elif role == "tool":
            text = f"[{p.get('tool_call_id')}] {content}"
        else:
            text = content or ""
        return f"{role}: {one_line(text)}"
    if node.kind == "pause":
        pause = PausePayload.from_node(node)
        reason = "" if pause.reason is None else pause.reason
        return f"pause: {_names(pause.calls)} ({one_line(reason, 40)})"
    if node.kind == "decision":
        decision = DecisionPayload.from_node(node)
        actions = ", ".join(f"{k} {v.action}" for k, v in decision.decisions.items())
        return f"decision: {actions}" + (f" by {decision.by}" if decision.by else "")
    if node.kind == "tool_start":
        return "tool_start: " + _names(ToolStartPayload.from_node(node).calls)
    if node.kind == "error":
        error = ErrorPayload.from_node(node)
        return f"error: {one_line(error.message or (error.error if error.error is not None else ''))}"
    if node.kind == "score":
        score = ScorePayload.from_node(node)
        note = f" ({one_line(score.note, 60)})" if score.note else ""
        return f"score: {score.scorer}={score.value:g}{note}"
    summarised = SummaryPayload.from_node(node) if node.kind == "summary" else None
    if summarised is not None and isinstance(summarised.summary, str):
        span = summarised.covers
        count = f" (stands for {span.get('nodes')} nodes)" if isinstance(span, dict) else ""
        return f"summary{count}: {one_line(summarised.summary)}"
    return f"{node.kind}: {one_line(json.dumps(p, ensure_ascii=False))}"


COLOURS = {
    "user": "green",
    "assistant": "cyan",
    "tool": "yellow",
    "system": "magenta",
    "developer": "magenta",
    "pause": "red",
    "error": "red",
    "decision": "blue",
}
"""The colour of each role and marker kind when the terminal shows colour."""


def paint(text: str, what: str | None, colour: bool, *, bold: bool = False) -> str:
    """``text`` in ``what``'s colour (a role or kind in ``COLOURS``) when ``colour``."""
    if not colour or (what not in COLOURS and not bold):
        return text
    return click.style(text, fg=COLOURS.get(what or ""), bold=bold)


def _painted_summary(node: Node, colour: bool) -> str:
    """``summary(node)`` with its leading role or kind painted."""
    text = summary(node)
    head, sep, rest = text.partition(":")
    return paint(head, node.role or node.kind, colour) + sep + rest


def run_line(run: Run) -> str:
    """A model call in words: ``gpt-4o via openai, 3 in → 191 out, 812 ms, finish stop``;
    what the run did not record says so ("tokens unknown", "latency unknown")."""
    tokens_in, tokens_out = usage_tokens(run.usage)
    if tokens_in is None and tokens_out is None:
        tokens = "tokens unknown"
    else:
        tokens = f"{_count(tokens_in)} in → {_count(tokens_out)} out"
    latency = "latency unknown" if run.latency_ms is None else f"{run.latency_ms:,.0f} ms"
    finish = f", finish {safe(run.finish_reason)}" if run.finish_reason else ""
    return f"{safe(run.model or '?')} via {safe(run.provider or '?')}, {tokens}, {latency}{finish}"


def _count(tokens: int | None) -> str:
    return "?" if tokens is None else f"{tokens:,}"


def markers(
    node_id: str,
    heads: dict[str, list[str]],
    checkpoints: dict[str, list[str]],
    pending: set[str],
    colour: bool = False,
) -> str:
    marks = [paint(f"({', '.join(heads[node_id])})", None, colour, bold=True)] if node_id in heads else []
    marks += [paint(f"[{name}]", None, colour, bold=True) for name in checkpoints.get(node_id, [])]
    if node_id in pending:
        marks.append(paint("<- waiting for a human", "pause", colour, bold=True))
    return (" " + " ".join(marks)) if marks else ""


def tree_lines(
    nodes: list[Node],
    branches: list[Branch],
    checkpoints: list[Checkpoint],
    pending: set[str],
    short: dict[str, str],
    colour: bool = False,
) -> list[str]:
    """A graph like ``git log --graph``, root first: a fork opens a lane to the
    right for each side branch, drawn before the line that leads to ``main``; roots
    apart by a blank line. ``colour``: roles, kinds and refs painted for a terminal."""
    children: dict[str | None, list[Node]] = defaultdict(list)
    for node in nodes:
        children[node.parent_id].append(node)
    by_id = {n.id: n for n in nodes}
    heads: dict[str, list[str]] = defaultdict(list)
    for b in branches:
        if b.head_id:
            heads[b.head_id].append(b.name)
    cps: dict[str, list[str]] = defaultdict(list)
    for c in checkpoints:
        cps[c.node_id].append(c.name)
    on_main = set()
    main = next((b for b in branches if b.name == "main" and b.head_id in by_id), None)
    current = main.head_id if main else None
    while current is not None:
        on_main.add(current)
        current = by_id[current].parent_id

    def ordered(kids: list[Node]) -> list[Node]:
        # the child leading to main last, so main's line runs straight down the left
        return sorted(kids, key=lambda n: (n.id in on_main, n.id))

    lines: list[str] = []

    def draw(root: Node) -> None:
        # Iterative, so a session of thousands of forks cannot exhaust the call stack: each
        # side branch is drawn whole (after its fork line) before the line that continues.
        work: list[tuple[Node | None, str]] = [(root, "")]  # (None, lane): a fork line
        while work:
            node, lane = work.pop()
            if node is None:
                lines.append(f"{lane}|\\")
                continue
            said, marks = _painted_summary(node, colour), markers(node.id, heads, cps, pending, colour)
            lines.append(f"{lane}* {short[node.id]} {said}{marks}")
            kids = ordered(children.get(node.id, []))
            if kids:
                work.append((kids[-1], lane))
                for side in reversed(kids[:-1]):
                    work.append((side, lane + "| "))
                    work.append((None, lane))

    roots = ordered(children.get(None, []))
    for i, root in enumerate(roots):
        if i:
            lines.append("")
        draw(root)
    return lines


def transcript(path: list[Node], short: dict[str, str], colour: bool = False) -> list[str]:
    """A branch as a readable conversation, markers included (``colour``: roles and
    markers painted for a terminal)."""
    lines: list[str] = []
    for node in path:
        p = node.payload
        if node.kind == "message":
            role = p.get("role")
            header = f" {short[node.id]}"
            if role == "tool":
                header += f" (answers {p.get('tool_call_id')})"
            lines.append(paint(safe(role), role, colour, bold=True) + safe(header))
            content = p.get("content")
            if isinstance(content, list):
                content = "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
            if content:
                lines.extend("  " + safe(line) for line in str(content).splitlines())
            for call in p.get("tool_calls") or []:
                lines.append(safe(f"  -> {calls_text([call])} [{call.get('id')}]"))
        else:
            lines.append(f"-- {_painted_summary(node, colour)} ({short[node.id]}) --")
        lines.append("")
    return lines[:-1] if lines else lines


def table(rows: list[list[Any]], headers: list[str]) -> list[str]:
    """Left-aligned columns separated by two spaces."""
    rows = [[safe(cell) for cell in row] for row in rows]
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*headers).rstrip(), *(fmt.format(*map(str, r)).rstrip() for r in rows)]
