"""The projection a model is sent, and compaction: a summary standing for a span of its path.

Contract (pure functions of a root-to-node path; no I/O):
- A ``summary`` node whose payload has ``covers: {"first": id, "last": id, "nodes": n}``
  stands for the contiguous span of its own path from ``first`` to ``last``
  (both inclusive, both before the summary). ``project(path)`` is the list of
  ``message`` payloads on the path, except that each covered span is replaced
  by one message carrying the summary's text (role ``user`` unless the payload
  names another), at the place of the span's first node. When spans nest, the
  later summary wins. A summary without ``covers``, or whose span is not on its
  path, is a marker like any other (``verify`` reports the second kind).
- Nothing is removed or changed: ``path``, ``log``, ``tree``, exports and replay
  still see every original node; only the projection changes.
- ``plan(path, keep_last)`` chooses what a new summary covers: every projected
  message after the leading system/developer messages except the last
  ``keep_last``; the kept part never starts with a tool result, and the covered
  part never ends with a call whose answer is still to come (a call cut off
  mid-tool, or paused for a human): either would send the model a tool result
  whose call was summarised away. An earlier summary inside the span is covered
  whole, so the new summary stands for it too. ``None`` when there is nothing to cover.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .kinds import ROLES, SummaryPayload
from .model import Node, Problem

SUMMARY_ROLE = "user"
"""The role of the message a summary becomes in the projection, unless it names one."""


def covers(node: Node) -> tuple[str, str] | None:
    """(first id, last id) of the span a summary node stands for, or None."""
    return SummaryPayload.from_node(node).span if node.kind == "summary" else None


def summary_message(node: Node) -> dict[str, Any]:
    """The message a summary node is sent as."""
    record = SummaryPayload.from_node(node)
    role, text = record.role, record.summary
    return {
        "role": role if role in ROLES and role != "tool" else SUMMARY_ROLE,
        "content": text if isinstance(text, str) else json.dumps(text, ensure_ascii=False),
    }


def _owners(path: Sequence[Node]) -> list[int | None]:
    """For each position, the index of the summary whose span holds it (latest wins)."""
    owner: list[int | None] = [None] * len(path)
    index: dict[str, int] = {}
    for i, node in enumerate(path):
        index[node.id] = i
        span = covers(node)
        if span is None:
            continue
        first, last = index.get(span[0]), index.get(span[1])
        if first is not None and last is not None and first <= last < i:
            owner[first : last + 1] = [i] * (last - first + 1)
    return owner


@dataclass(frozen=True)
class _Item:
    """One projected message and the path positions it stands for."""

    message: dict[str, Any]
    first: int
    last: int
    summary: bool


def _items(path: Sequence[Node]) -> list[_Item]:
    owner = _owners(path)
    items: list[_Item] = []
    done: set[int] = set()
    for i, node in enumerate(path):
        o = owner[i]
        if o is None:
            if node.kind == "message":
                items.append(_Item(node.payload, i, i, False))
        elif o not in done:
            done.add(o)
            last = max(j for j in range(i, o) if owner[j] == o)
            items.append(_Item(summary_message(path[o]), i, last, True))
    return items


def project(path: Sequence[Node]) -> list[dict[str, Any]]:
    """The messages a model is sent for this path (see the module docstring)."""
    if not any(n.kind == "summary" for n in path):  # the common case: one pass, no lookups
        return [n.payload for n in path if n.kind == "message"]
    return [item.message for item in _items(path)]


@dataclass(frozen=True)
class Plan:
    """What a new summary would cover: the messages to summarise and the span's ends."""

    messages: list[dict[str, Any]]
    first_id: str
    last_id: str
    nodes: int

    def payload(self, summary: str, **extra: Any) -> dict[str, Any]:
        """The summary node's payload."""
        record = SummaryPayload(summary, extra=extra).spanning(self.first_id, self.last_id, self.nodes)
        return record.to_payload()


def plan(path: Sequence[Node], keep_last: int) -> Plan | None:
    """What to cover to keep the last ``keep_last`` projected messages (see the module
    docstring); None when there is nothing to cover."""
    if keep_last < 0:
        raise ValueError(f"keep_last must be >= 0, not {keep_last}")
    items = _items(path)
    lead = 0
    while (
        lead < len(items)
        and not items[lead].summary
        and items[lead].message.get("role")
        in (
            "system",
            "developer",
        )
    ):
        lead += 1
    candidates = items[lead:]
    covered = candidates[: _clean_cut(candidates, max(len(candidates) - keep_last, 0))]
    if not any(not item.summary for item in covered):
        return None
    first, last = covered[0].first, covered[-1].last
    return Plan([i.message for i in covered], path[first].id, path[last].id, last - first + 1)


def _is_tool(item: _Item) -> bool:
    return not item.summary and item.message.get("role") == "tool"


def _clean_cut(items: Sequence[_Item], cut: int) -> int:
    """The latest position at or before ``cut`` where the kept part may start: never at a
    tool result, nor right after a call whose answers are not all in yet (a call cut off
    mid-tool, or paused for a human: its answer comes later, after the summary). Either
    way the model would be sent a result whose call was summarised away, and chat APIs
    refuse that (HTTP 400)."""
    while 0 < cut < len(items) and _is_tool(items[cut]):
        cut -= 1  # keep a tool result with the call it answers
    answered = set()
    start = cut - 1
    while start >= 0 and _is_tool(items[start]):
        answered.add(items[start].message.get("tool_call_id"))
        start -= 1
    if start < 0 or items[start].summary or items[start].message.get("role") != "assistant":
        return cut
    calls = items[start].message.get("tool_calls") or []
    waiting = {c.get("id") for c in calls if isinstance(c, dict)} - answered
    return start if waiting else cut  # keep that call with the answers still to come


def span_problems(session_id: str, branch: str, path: Sequence[Node]) -> list[Problem]:
    """Summaries on a branch's path whose span is not a contiguous span of that path
    before them."""
    problems = []
    index: dict[str, int] = {}
    for i, node in enumerate(path):
        index[node.id] = i
        record = SummaryPayload.from_node(node) if node.kind == "summary" else None
        if record is None or "covers" not in record.order:
            continue
        span = record.span
        first = index.get(span[0]) if span else None
        last = index.get(span[1]) if span else None
        if span is None or first is None or last is None or first > last or last >= i:
            problems.append(
                Problem(
                    session_id,
                    "summary",
                    f"on branch {branch!r}, summary {node.id} covers "
                    f"{json.dumps(record.covers)[:120]}, which is not a span of its "
                    "path before it",
                    node.id,
                )
            )
    return problems


def estimate_tokens(messages: Sequence[dict[str, Any]]) -> int:
    """A rough token count: a quarter of the characters of the messages' JSON text."""
    return sum(len(json.dumps(m, ensure_ascii=False)) for m in messages) // 4
