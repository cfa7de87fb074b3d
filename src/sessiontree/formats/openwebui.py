"""Open WebUI chat exports: ``history.messages`` linked by ``parentId``, ``history.currentId``.

Contract: ``parse_openwebui(data)`` takes the parsed JSON: a chat object
(``{"history": ...}``), an exported record wrapping one (``{"chat": {...}}``,
as "Export chat" writes them), or a list of either; it yields one ``ImportedSession``
per chat, as it is read.
- Every entry of ``history.messages`` becomes a ``message`` node with its
  ``role`` and ``content`` exactly as stored (text is not unescaped: doubled
  quotes stay doubled). ``parentId`` is the tree; ``childrenIds`` is only
  checked to be a list. The legacy flat ``messages`` list is ignored.
- ``main`` is the path to ``history.currentId`` (else the newest leaf); every
  other leaf gets a branch ``leaf-<first 8 chars of its id>``.
- An assistant's ``output[]`` items become tool-call and tool nodes before
  the answer (reasoning as ``reasoning_content``); see ``_output``.
- An assistant's ``model`` and ``usage`` become a run; files, images,
  annotations and ratings are dropped.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..bulk import ImportedNode, ImportedSession
from ..errors import FormatError
from ..ids import now
from ..model import ROLES
from .common import (
    block_text,
    chat_message,
    iso,
    keep_or_derive,
    make_run,
    optional,
    parse_each,
    stable_id,
    tool_call,
    tree_branches,
    tree_entry,
)
from .jsonstream import JsonItems


def parse_openwebui(data: Any, skipped: list[str] | None = None) -> Iterator[ImportedSession]:
    """One session per entry, parsed as it is taken (see ``common.parse_each``); with
    ``skipped``, an entry that fails is left out and its error appended there instead
    of failing the whole file."""
    chats = data if isinstance(data, list | JsonItems) else [data]

    def one(i: int, chat: Any) -> ImportedSession:
        where = f"chat {i}" if isinstance(data, list | JsonItems) else "chat"
        outer = chat if isinstance(chat, dict) else {}
        nested = outer.get("chat")
        inner = nested if isinstance(nested, dict) else outer
        history = inner.get("history")
        if not isinstance(history, dict) or not isinstance(history.get("messages"), dict):
            raise FormatError(f"{where}: expected an object with a 'history.messages' object")
        return _chat(outer, inner, history, where)

    return parse_each(chats, one, skipped)


def _chat(
    outer: dict[str, Any], inner: dict[str, Any], history: dict[str, Any], where: str
) -> ImportedSession:
    messages: dict[str, Any] = history["messages"]
    found = outer.get("id") or inner.get("id")
    anonymous = not isinstance(found, str) or not found
    raw_id = str(found)
    if anonymous:
        # No id of its own (a bare chat object, often made by a converter that
        # numbers messages from 1): name it by its title, time and messages.
        stamp = str(inner.get("timestamp") or outer.get("created_at"))
        raw_id = stable_id("openwebui", str(inner.get("title")), stamp, *sorted(messages))
    sid = keep_or_derive(raw_id, "openwebui")
    created = iso(outer.get("created_at")) or iso(inner.get("timestamp")) or now()
    title = outer.get("title") or inner.get("title")
    session = ImportedSession(
        sid,
        title if isinstance(title, str) else None,
        {
            "source": "openwebui",
            "original_id": raw_id,
            "models": inner.get("models"),
            "tags": inner.get("tags"),
        },
        created,
        source=where,
    )
    # Message ids are kept when they are UUIDs, except in a chat without an id:
    # converters reuse the same ones in every chat, so they are derived there.
    ids = {
        key: stable_id("openwebui", raw_id, key) if anonymous else keep_or_derive(key, "openwebui", raw_id)
        for key in messages
    }
    scope = ("openwebui", raw_id)
    for key, msg in messages.items():
        label = f"{where}, message {key!r}"
        parent = tree_entry(msg, "parentId", messages, "history.messages", label)
        optional(msg, "childrenIds", list, label)
        role = optional(msg, "role", str, label)
        if role not in ROLES:
            raise FormatError(f"{label}: unknown role {role!r}")
        content = msg.get("content")
        if not isinstance(content, str):
            content = block_text(content)
        at = iso(msg.get("timestamp")) or created
        run = None
        if role == "assistant":
            run = make_run(ids[key], at, model=msg.get("model"), provider="openwebui", usage=msg.get("usage"))
            if run:
                session.runs.append(run)
        payload = chat_message(role, content)
        parent_id = ids[parent] if parent else None
        output = msg.get("output")
        if role == "assistant" and isinstance(output, list) and output:
            steps, payload = _output(output, content, (*scope, key), parent_id, at, label)
            session.nodes.extend(steps)
            parent_id = steps[-1].id if steps else parent_id
        session.nodes.append(
            ImportedNode(ids[key], parent_id, "message", payload, at, run.id if run else None, source=label)
        )
    current = history.get("currentId")
    head = ids.get(current) if isinstance(current, str) else None
    if isinstance(current, str) and head is None:
        session.notes.append(f"{where}: currentId {current!r} is not a message; main is the newest leaf")
    session.branches = tree_branches(session.nodes, head, ids)
    return session


def _output(
    items: list[Any], rendered: str, scope: tuple[str, ...], parent: str | None, at: str, label: str
) -> tuple[list[ImportedNode], dict[str, Any]]:
    """An assistant's ``output[]`` (Responses-style items): the tool-call and tool
    nodes that come before its answer, and the answer's payload. Reasoning goes to
    ``reasoning_content`` of the next assistant message; the answer's text is its
    ``message`` items (the rendered ``content`` is kept as ``rendered_content``)."""
    steps: list[ImportedNode] = []
    reasoning: list[str] = []
    answer: list[str] = []
    calls: dict[str, Any] | None = None  # the assistant node collecting consecutive calls
    for i, item in enumerate(items):
        kind = item.get("type") if isinstance(item, dict) else None
        where = f"{label}, output {i + 1}"
        if kind == "reasoning":
            reasoning.append(block_text(item.get("content"), placeholder=False))
        elif kind == "function_call":
            call = tool_call(
                str(item.get("call_id") or item.get("id")), str(item.get("name")), item.get("arguments") or {}
            )
            if calls is None:
                calls = chat_message("assistant", None, tool_calls=[], reasoning_content=_joined(reasoning))
                reasoning = []
                steps.append(_step(scope, i, steps, parent, calls, at, where))
            calls["tool_calls"].append(call)
        elif kind == "function_call_output":
            out = item.get("output")
            text = out if isinstance(out, str) else block_text(out, placeholder=False)
            tool = chat_message("tool", text, tool_call_id=str(item.get("call_id")))
            steps.append(_step(scope, i, steps, parent, tool, at, where))
            calls = None
        elif kind == "message":
            answer.append(block_text(item.get("content"), placeholder=False))
            calls = None
    content = "\n\n".join(t for t in answer if t) if answer else rendered
    payload = chat_message("assistant", content, reasoning_content=_joined(reasoning))
    if content != rendered:
        payload["rendered_content"] = rendered
    return steps, payload


def _step(
    scope: tuple[str, ...],
    i: int,
    steps: list[ImportedNode],
    parent: str | None,
    payload: dict[str, Any],
    at: str,
    where: str,
) -> ImportedNode:
    previous = steps[-1].id if steps else parent
    return ImportedNode(stable_id(*scope, "output", str(i)), previous, "message", payload, at, source=where)


def _joined(texts: list[str]) -> str | None:
    return "\n\n".join(t for t in texts if t) or None
