"""Datasets for fine-tuning: ``messages`` JSONL and ShareGPT JSONL, a line per leaf or per branch.

Contract: ``export_dataset(store, format, session_ids=None, per="leaf", branch=None)``
yields lines (each ending in a newline), one JSON object per conversation:
- ``per="leaf"``: one line per leaf of each session's tree (every fork once);
  ``per="branch"``: one per named branch with nodes; ``branch`` given: that ref
  alone, one line per session. Sessions default to all (archived ones too), each
  read on its own (the store is never read whole).
- A line's conversation is what a model is sent on that path (``Session.messages``:
  a compaction summary stands for what it covers; markers and never-sent ``raw``
  fields are left out), with ``session``, ``head`` (the node id) and ``branch``
  (its name, or null) beside it.
- ``messages``: ``{"messages": [...]}`` in OpenAI's chat shape, each message only
  ``role``, ``content`` (text; null for an assistant message that only calls
  tools), ``tool_calls`` (``{id, type: "function", function: {name, arguments}}``,
  arguments a JSON string), ``tool_call_id`` and ``name`` where they apply.
- ``sharegpt``: ``{"conversations": [{"from", "value"}], "system": "..."}`` with
  ``from`` one of ``human``, ``gpt``, ``function_call`` (value: the JSON of
  ``{"name", "arguments"}``, a list of them for parallel calls) and ``observation``
  (a tool result); system and developer messages are joined into ``system``.
- Every line has the same keys with the same JSON types, so a columnar loader
  (Hugging Face ``datasets``' JSON builder) reads the file as one table.
A path with no message is written as no line.

``export_preference(store, session_ids=None)`` yields one line per chosen/rejected pair
of scored branches that share a prompt (``scoring.preference_pairs``):
``{"prompt", "chosen", "rejected"}`` as lists of messages in the ``messages`` shape
(the conversational preference layout fine-tuning libraries read), with ``scorer``,
``chosen_score``, ``rejected_score``, ``chosen_branch``, ``rejected_branch`` and
``session`` beside them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from .. import bulk
from ..errors import FormatError
from ..model import sendable
from ..scoring import preference_pairs
from .outgoing import arguments, line, text

if TYPE_CHECKING:
    from ..session import Session
    from ..store import Store

FORMATS = ("messages", "sharegpt")
PER = ("leaf", "branch")


def export_dataset(
    store: Store,
    format: str,
    session_ids: Iterable[str] | None = None,
    per: str = "leaf",
    branch: str | None = None,
) -> Iterator[str]:
    if format not in FORMATS:
        raise FormatError(f"unknown dataset format {format!r}; expected one of {', '.join(FORMATS)}")
    if per not in PER:
        raise FormatError(f"--per should be one of {', '.join(PER)}, not {per!r}")
    ids = (
        bulk.session_ids(store) if session_ids is None else [store.resolve_session_id(i) for i in session_ids]
    )
    if branch is not None:  # checked before the first line: a missing ref is one error, not a half file
        for i in ids:
            store.session(i).resolve(branch)
    return _lines(store, ids, format, per, branch)


def export_preference(store: Store, session_ids: Iterable[str] | None = None) -> Iterator[str]:
    ids = (
        bulk.session_ids(store) if session_ids is None else [store.resolve_session_id(i) for i in session_ids]
    )
    return _pairs(store, ids)


def _pairs(store: Store, ids: list[str]) -> Iterator[str]:
    def shaped(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [_openai(m) for m in sendable(messages) if isinstance(m, dict)]

    for session_id in ids:
        session = store.session(session_id)
        for pair in preference_pairs(session):
            yield line(
                {
                    "prompt": shaped(pair.prompt),
                    "chosen": shaped(pair.chosen),
                    "rejected": shaped(pair.rejected),
                    "scorer": pair.scorer,
                    "chosen_score": float(pair.chosen_score),
                    "rejected_score": float(pair.rejected_score),
                    "chosen_branch": pair.chosen_branch,
                    "rejected_branch": pair.rejected_branch,
                    "session": session.id,
                }
            )


def _lines(store: Store, ids: list[str], format: str, per: str, branch: str | None) -> Iterator[str]:
    shape = _messages if format == "messages" else _sharegpt
    for session_id in ids:
        session = store.session(session_id)
        for head, name in _heads(session, per, branch):
            sent = [_openai(m) for m in sendable(session.messages(head)) if isinstance(m, dict)]
            if sent:
                yield line({**shape(sent), "session": session.id, "head": head, "branch": name})


def _heads(session: Session, per: str, branch: str | None) -> Iterator[tuple[str, str | None]]:
    """(node id, branch name or None) of each path to write."""
    branches = session.branches()
    if branch is not None:
        yield session.resolve(branch), next((b.name for b in branches if b.name == branch), None)
        return
    if per == "branch":
        for b in branches:
            if b.head_id is not None:
                yield b.head_id, b.name
        return
    named: dict[str, str] = {}
    for b in branches:
        if b.head_id is not None:
            named.setdefault(b.head_id, b.name)  # main comes first
    for leaf in session.leaves():
        yield leaf.id, named.get(leaf.id)


def _openai(m: dict[str, Any]) -> dict[str, Any]:
    """A message with only the fields a fine-tuning set holds, each of one JSON type."""
    role = str(m.get("role"))
    calls = [c for c in m.get("tool_calls") or [] if isinstance(c, dict)] if role == "assistant" else []
    content = m.get("content")
    out: dict[str, Any] = {"role": role, "content": None if content is None and calls else text(content)}
    if calls:
        out["tool_calls"] = [
            {
                "id": str(c.get("id")),
                "type": "function",
                "function": {
                    "name": str((c.get("function") or {}).get("name")),
                    "arguments": _arguments_text(c),
                },
            }
            for c in calls
        ]
    if role == "tool":
        out["tool_call_id"] = str(m.get("tool_call_id"))
        if isinstance(m.get("name"), str):
            out["name"] = m["name"]
    return out


def _arguments_text(call: dict[str, Any]) -> str:
    raw = (call.get("function") or {}).get("arguments")
    return raw if isinstance(raw, str) else json.dumps(raw if raw is not None else {}, ensure_ascii=False)


def _messages(sent: list[dict[str, Any]]) -> dict[str, Any]:
    return {"messages": sent}


def _sharegpt(sent: list[dict[str, Any]]) -> dict[str, Any]:
    system: list[str] = []
    turns: list[dict[str, str]] = []
    for m in sent:
        role = m["role"]
        if role in ("system", "developer"):
            system.append(m["content"] or "")
        elif role == "user":
            turns.append({"from": "human", "value": m["content"] or ""})
        elif role == "tool":
            turns.append({"from": "observation", "value": m["content"] or ""})
        elif role == "assistant":
            if m["content"]:
                turns.append({"from": "gpt", "value": m["content"]})
            calls = [
                {"name": c["function"]["name"], "arguments": arguments(c)} for c in m.get("tool_calls", [])
            ]
            if calls:
                value = calls[0] if len(calls) == 1 else calls
                turns.append({"from": "function_call", "value": json.dumps(value, ensure_ascii=False)})
            elif not m["content"]:
                turns.append({"from": "gpt", "value": ""})
    return {"conversations": turns, "system": "\n\n".join(system)}
