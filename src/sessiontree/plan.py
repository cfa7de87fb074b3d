"""Read a branch's path and say what the agent loop must do next.

Contract: ``next_action(path)`` is a pure function of the root-to-head nodes.
The tree is the whole resume state, so a run that stopped anywhere (a pause, a
crash mid-tool, a cancel, a model error) is picked up by reading the path
again:

====================================  ======================================
the path ends with                    the action
====================================  ======================================
nothing                               ``empty``
an assistant message, no tool calls   ``final``
an unresolved ``pause``               ``paused``
an assistant message whose calls are  ``tools``: the unanswered calls, the
not all answered (after any markers)  human decisions in force, and which
                                      calls started but never finished
anything else (user/system/tool       ``model``
message, or an error marker after
one)
====================================  ======================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from . import calls as tool_calls
from .decisions import Decision, from_entry
from .kinds import DecisionPayload, ToolStartPayload
from .model import Node
from .steps import ToolCall


@dataclass
class Action:
    kind: Literal["empty", "final", "paused", "tools", "model"]
    assistant: Node | None = None
    calls: list[ToolCall] = field(default_factory=list)  # unanswered, in the model's order
    decided: dict[str, Decision] = field(default_factory=dict)
    interrupted: set[str] = field(default_factory=set)  # started, never answered, no human since
    cut_off: set[str] = field(default_factory=set)  # started, never answered (may have run)


def next_action(path: list[Node]) -> Action:
    if not path:
        return Action("empty")
    # The last message that is not a tool result: the tail after it only answers it.
    start = len(path) - 1
    while start >= 0 and (path[start].kind != "message" or path[start].role == "tool"):
        start -= 1
    assistant = path[start] if start >= 0 and path[start].role == "assistant" else None
    if assistant is None:
        return Action("model")
    calls = [ToolCall.from_message(c) for c in assistant.payload.get("tool_calls") or []]
    if not calls:
        return Action("final", assistant)

    answered: set[str] = set()
    started: set[str] = set()
    ever_started: set[str] = set()
    decided: dict[str, Decision] = {}
    for step in tool_calls.follow(path[start:]):
        node = step.node
        if step.answers is not None:
            answered.add(step.answers)
        elif node.kind == "tool_start":
            for call_id in ToolStartPayload.ids_in(node):
                started.add(call_id)
                ever_started.add(call_id)
                decided.pop(call_id, None)  # a decision is used up by running it
        elif node.kind == "decision":
            for call_id, entry in DecisionPayload.from_node(node).decisions.items():
                decided[call_id] = from_entry(entry)
                started.discard(call_id)  # a human has looked at it since
    unanswered = [c for c in calls if c.id not in answered]
    if not unanswered:
        return Action("model", assistant)
    if path[-1].kind == "pause":
        return Action("paused", assistant, unanswered)
    return Action(
        "tools",
        assistant,
        unanswered,
        decided,
        {c.id for c in unanswered if c.id in started},
        {c.id for c in unanswered if c.id in ever_started},
    )
