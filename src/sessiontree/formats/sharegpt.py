"""ShareGPT conversations in: JSONL (one conversation a line) or a JSON array of them.

Contract: ``parse_sharegpt(records)`` reads ``{"conversations": [{"from", "value"}],
"system"?: text}`` records (what ``finetune`` writes, and the ShareGPT files
fine-tuning tools read) into sessions:
- ``from``: ``human``/``user`` -> a user message; ``gpt``/``assistant`` -> an
  assistant message; ``function_call`` -> tool calls (the JSON of ``{"name",
  "arguments"}`` or a list of them; right after a ``gpt`` turn, that message's
  calls); ``observation``/``tool`` -> a tool message answering the next call still
  open; ``system`` turns and the ``system`` field -> system messages first. ShareGPT
  holds no call ids: a call's id is ``call_<turn>_<n>``.
- Records carrying the same ``session`` (as sessiontree's dataset export writes,
  a line per leaf) become one session: conversations that begin alike share those
  nodes, so the lines of one tree make the tree again. Every other record is a
  session of its own. Ids are derived from the content, so a second import of the
  file changes nothing; ``main`` is the conversation of the record whose ``branch``
  is ``main`` (else the last of the session), every other leaf a ``leaf-`` branch.
- A record that is not an object, a turn without a string ``from`` and ``value``, an
  unknown ``from`` or a ``function_call`` value that is not JSON raises
  ``FormatError`` naming the record (its line) and the turn.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from ..bulk import ImportedNode, ImportedSession
from ..errors import FormatError
from ..ids import now
from .common import jsonl_records, leaf_branches, stable_id, tool_call

USER, ASSISTANT, CALL, TOOL = (
    ("human", "user"),
    ("gpt", "assistant"),
    ("function_call",),
    ("observation", "tool"),
)


def is_record(record: Any) -> bool:
    """Whether a line (or array element) is a ShareGPT conversation."""
    turns = record.get("conversations") if isinstance(record, dict) else None
    return isinstance(turns, list) and all(isinstance(t, dict) and "from" in t for t in turns[:3])


def parse_sharegpt(records: Iterable[tuple[str, Any]]) -> list[ImportedSession]:
    """Sessions of ``(where, record)`` pairs (``where``: ``line 3``, ``conversation 3``)."""
    sessions: dict[str, ImportedSession] = {}
    heads: dict[str, list[tuple[str | None, str]]] = {}  # session key -> (branch, head node)
    seen: set[str] = set()
    created = now()
    for where, record in records:
        if not is_record(record):
            raise FormatError(f"{where}: expected an object with a 'conversations' list of turns")
        messages = _messages(record, where)
        if not messages:
            continue
        group = record.get("session") if isinstance(record.get("session"), str) else _digest(record)
        session = sessions.get(group)
        if session is None:
            session = ImportedSession(stable_id("sharegpt", group), None, {"source": "sharegpt"}, created)
            sessions[group] = session
            heads[group] = []
        parent: str | None = None
        prefix = group
        for message in messages:
            prefix = _digest([prefix, message])
            node_id = stable_id("sharegpt", prefix)
            if node_id not in seen:
                seen.add(node_id)
                session.nodes.append(ImportedNode(node_id, parent, "message", message, created, source=where))
            parent = node_id
        assert parent is not None
        branch = record.get("branch") if isinstance(record.get("branch"), str) else None
        heads[group].append((branch, parent))
    for group, session in sessions.items():
        ends = heads[group]
        main = next((head for name, head in ends if name == "main"), ends[-1][1])
        session.branches = leaf_branches(session.nodes, main)
    return list(sessions.values())


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _messages(record: dict[str, Any], where: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    system = record.get("system")
    if isinstance(system, str) and system:
        out.append({"role": "system", "content": system})
    open_calls: list[str] = []
    for number, turn in enumerate(record["conversations"], 1):
        at = f"{where}, turn {number}"
        source, value = turn.get("from"), turn.get("value")
        if not isinstance(source, str) or not isinstance(value, str):
            raise FormatError(f"{at}: a turn needs 'from' and 'value' strings")
        if source in USER:
            out.append({"role": "user", "content": value})
        elif source in ASSISTANT:
            out.append({"role": "assistant", "content": value})
        elif source == "system":
            out.append({"role": "system", "content": value})
        elif source in CALL:
            calls = _calls(value, number, at)
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant" and "tool_calls" not in last:
                last["tool_calls"] = calls  # the text of the message that made the calls
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": calls})
            open_calls = [c["id"] for c in calls]
        elif source in TOOL:
            answered = open_calls.pop(0) if open_calls else None
            out.append({"role": "tool", "tool_call_id": answered, "content": value})
        else:
            raise FormatError(
                f"{at}: unknown 'from' {source!r} (expected human, gpt, function_call, observation or system)"
            )
    return out


def _calls(value: str, number: int, at: str) -> list[dict[str, Any]]:
    try:
        decoded = json.loads(value)
    except ValueError:
        raise FormatError(
            f"{at}: a function_call value should be the JSON of {{'name', 'arguments'}}"
        ) from None
    items = decoded if isinstance(decoded, list) else [decoded]
    calls = []
    for n, item in enumerate(items, 1):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise FormatError(f"{at}: a function_call needs a 'name' string")
        calls.append(tool_call(f"call_{number}_{n}", item["name"], item.get("arguments") or {}))
    return calls


def parse_sharegpt_lines(lines: Iterable[str]) -> list[ImportedSession]:
    """The sessions of a ShareGPT JSONL file."""
    return parse_sharegpt((f"line {number}", record) for number, record in jsonl_records(lines))


def parse_sharegpt_array(data: Any) -> list[ImportedSession]:
    """The sessions of a JSON array of ShareGPT records."""
    if not isinstance(data, Iterable) or isinstance(data, dict | str):
        raise FormatError("expected a JSON array of ShareGPT conversations")
    return parse_sharegpt((f"conversation {number}", record) for number, record in enumerate(data, 1))
