"""Tool calls and their answers along a chain of nodes: the one reading of "a tool call is
answered once, before the conversation moves on".

Contract:
- An assistant message with ``tool_calls`` opens its calls. A ``tool`` message answers
  the open call its ``tool_call_id`` names; one naming no open call (never made, made on
  another chain, or answered already) is a stray. Any other message moves the
  conversation on: the calls still open then are left unanswered, and it opens its own
  calls, if it makes any. Nodes of other kinds (pauses, decisions, ``tool_start``,
  notes, ...) pass the open calls on unchanged.
- ``advance(state, node)`` is that rule for one node: given the calls open before it
  (``Open``, or None), a ``Step`` saying what the node did and what is open after it.
  ``follow(nodes)`` is the generator over a path (root first) built on it. The readers:
  ``plan.next_action`` (what is unanswered at the head), ``maintenance.tool_call_problems``
  (``verify``: strays and calls left unanswered) and ``formats.common.OpenCalls`` (an
  import answers what a source left open, and turns strays into notes), which keeps one
  state per chain of a streamed tree.
- ``Open`` and ``Step`` are named tuples: the plan builds a few on every step of a run.
- Pure functions; nothing here reads a store. A node is anything with ``id``, ``kind``
  and ``payload`` (a stored ``Node`` or an import's ``ImportedNode``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Literal, NamedTuple, Protocol


class _Node(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def payload(self) -> Any: ...


class Open(NamedTuple):
    """The calls of one assistant message (``caller``), those still unanswered
    (``missing``, in the message's order) and those answered so far."""

    caller: str
    missing: tuple[Any, ...]
    answered: tuple[Any, ...] = ()


class Step(NamedTuple):
    """What one node did to the open calls. ``answers``: the open call a tool message
    answers; ``stray``: a tool message that answers no open call (``"twice"`` when it
    names one answered already); ``left``: the calls a message that moves the
    conversation on left unanswered; ``open``: the calls open after the node."""

    node: Any
    open: Open | None
    answers: Any = None
    stray: Literal["orphan", "twice"] | None = None
    left: tuple[Any, ...] = ()


def call_ids(node: _Node) -> list[Any]:
    """The ids of the tool calls an assistant message makes (none for any other node)."""
    payload = node.payload
    if node.kind != "message" or payload.get("role") != "assistant":
        return []
    return [c.get("id") for c in payload.get("tool_calls") or [] if isinstance(c, dict)]


def advance(state: Open | None, node: _Node) -> Step:
    """The rule of the module docstring for one node."""
    if node.kind != "message":
        return Step(node, state)
    payload = node.payload
    if payload.get("role") == "tool":
        call_id = payload.get("tool_call_id")
        if state is not None and call_id in state.missing:
            missing = tuple(c for c in state.missing if c != call_id)
            return Step(node, Open(state.caller, missing, (*state.answered, call_id)), answers=call_id)
        twice = state is not None and call_id in state.answered
        return Step(node, state, stray="twice" if twice else "orphan")
    made = call_ids(node)
    return Step(
        node,
        Open(node.id, tuple(made)) if made else None,
        left=state.missing if state is not None else (),
    )


def follow(nodes: Iterable[_Node], state: Open | None = None) -> Iterator[Step]:
    """Each node's ``Step``, in order, from the calls open before the first (``state``)."""
    for node in nodes:
        step = advance(state, node)
        state = step.open
        yield step
