"""Chat messages to OpenAI Responses input items and back. Pure functions, no I/O.

Contract:

- ``request_parts(messages, tools)`` is ``(instructions, input, tools)`` for a
  ``/v1/responses`` request: every ``system``/``developer`` message's text goes,
  in order, to ``instructions`` (joined by a blank line); a user message becomes
  a ``message`` item (``input_text``/``input_image`` parts); an assistant
  message becomes an assistant ``message`` item for its text and one
  ``function_call`` item per tool call (``call_id`` the call's id, ``arguments``
  the stored text); a ``tool`` message becomes a ``function_call_output`` item.
  The API itself checks little of this on some servers, so the pairing is
  checked here: every ``function_call_output`` answers a ``function_call`` sent
  before it, every call is answered once, and call ids are non-empty text.
  Anything that cannot be sent raises ``ValueError`` naming the message.
- An assistant message with ``raw["responses"]["output"]`` (the output items
  the API returned, kept by ``reply_message``) is sent as those items verbatim,
  ``reasoning`` items with their ``encrypted_content`` included, when its text
  and calls are still those of the items; when the message was changed since
  (an edited call), only items built from the message as it is now: the API
  pairs a reasoning item by id with the item that followed it, and refuses one
  whose follower is missing, which the rebuilt items (no ids) would leave it.
- ``reply_message(output, status)`` is the OpenAI-shaped assistant message
  for a response's output items (text of its ``output_text`` and ``refusal``
  parts, ``tool_calls`` from its ``function_call`` items), with the items kept
  under ``raw["responses"]``.
"""

from __future__ import annotations

import json
from typing import Any

from .anthropic_blocks import text_of
from .reply import assistant_message, function_call, sent_back

KIND = "responses"
_NATIVE_PARTS = ("input_text", "input_image", "input_file", "input_audio")


def _user_parts(content: Any, where: str) -> str | list[dict[str, Any]]:
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        return json.dumps(content, ensure_ascii=False)
    parts: list[dict[str, Any]] = []
    for n, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if isinstance(part, str):
            parts.append({"type": "input_text", "text": part})
        elif kind == "text":
            parts.append({"type": "input_text", "text": str(part.get("text") or "")})
        elif kind == "image_url":
            url = part.get("image_url")
            detail = url.get("detail") if isinstance(url, dict) else None
            url = url.get("url") if isinstance(url, dict) else url
            parts.append({"type": "input_image", "image_url": str(url), "detail": detail or "auto"})
        elif kind in _NATIVE_PARTS:
            parts.append(part)
        else:
            raise ValueError(f"{where}: content part {n} of type {kind!r} has no Responses API equivalent")
    return parts


def _arguments(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value if value is not None else {})


def _built(message: dict[str, Any]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if text := text_of(message.get("content")):
        items.append({"type": "message", "role": "assistant", "content": [_output_text(text)]})
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        items.append(
            {
                "type": "function_call",
                "call_id": call.get("id"),
                "name": function.get("name"),
                "arguments": _arguments(function.get("arguments")),
            }
        )
    return items


def _output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": []}


def _gist(items: list[dict[str, Any]]) -> tuple[str, list[tuple[Any, Any, Any]]]:
    """What a turn says, whatever its item boundaries: its text and its calls."""
    text = "".join(_item_text(i) for i in items if i.get("type") == "message")
    calls = [
        (i.get("call_id"), i.get("name"), i.get("arguments"))
        for i in items
        if i.get("type") == "function_call"
    ]
    return text, calls


def _item_text(item: dict[str, Any]) -> str:
    parts = item.get("content")
    if isinstance(parts, str):
        return parts
    texts = []
    for part in parts if isinstance(parts, list) else []:
        if isinstance(part, dict) and part.get("type") == "output_text":
            texts.append(str(part.get("text") or ""))
        elif isinstance(part, dict) and part.get("type") == "refusal":
            texts.append(str(part.get("refusal") or ""))
    return "".join(texts)


def _assistant_items(message: dict[str, Any]) -> list[dict[str, Any]]:
    # Verbatim when unchanged: encrypted reasoning, item ids, built-in tool calls. Edited:
    # no reasoning (it would lack the follower it is paired with), unlike Anthropic's thinking.
    return sent_back(message, KIND, "output", _built(message), _gist, lambda i: False)


def request_parts(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
) -> tuple[str | None, list[dict[str, Any]], list[dict[str, Any]]]:
    """(instructions, input items, tools) of a Responses request (see the module docstring)."""
    instructions: list[str] = []
    items: list[dict[str, Any]] = []
    unanswered: dict[str, int] = {}  # call id -> the message that made the call
    answered: set[str] = set()
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        where = f"message {i} ({role})"
        if role in ("system", "developer"):
            if text := text_of(message.get("content")):
                instructions.append(text)
        elif role == "user":
            items.append(
                {"type": "message", "role": "user", "content": _user_parts(message.get("content"), where)}
            )
        elif role == "assistant":
            for item in _assistant_items(message):
                if item.get("type") == "function_call":
                    call_id = item.get("call_id")
                    if not isinstance(call_id, str) or not call_id:
                        raise ValueError(f"{where} has a tool call without an id")
                    if call_id in unanswered or call_id in answered:
                        raise ValueError(f"{where} repeats the tool call id {call_id[:100]!r}")
                    unanswered[call_id] = i
                items.append(item)
        elif role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or call_id not in unanswered:
                raise ValueError(f"{where} answers {str(call_id)[:100]!r}, a tool call not made before it")
            del unanswered[call_id]
            answered.add(call_id)
            output = text_of(message.get("content"))
            items.append({"type": "function_call_output", "call_id": call_id, "output": output})
        else:
            raise ValueError(f"message {i} has the role {role!r}, which the Responses API has no place for")
    if unanswered:
        call_id, i = next(iter(unanswered.items()))
        raise ValueError(
            f"message {i} (assistant) has the tool call {call_id[:100]!r} with no result after it"
        )
    return "\n\n".join(instructions) or None, items, [_tool(t) for t in tools or []]


def _tool(spec: dict[str, Any]) -> dict[str, Any]:
    if spec.get("type") != "function" or "function" not in spec:
        return spec  # already a Responses tool (or a built-in one such as web_search)
    function = spec["function"]
    tool: dict[str, Any] = {
        "type": "function",
        "name": function.get("name"),
        "parameters": function.get("parameters") or {"type": "object", "properties": {}},
    }
    if function.get("description"):
        tool["description"] = function["description"]
    if "strict" in function:
        tool["strict"] = function["strict"]
    return tool


def reply_message(output: list[dict[str, Any]], status: Any, response_id: Any = None) -> dict[str, Any]:
    """The assistant message for a response's output items."""
    text = "".join(_item_text(i) for i in output if i.get("type") == "message")
    calls = [
        function_call(item.get("call_id"), item.get("name"), _arguments(item.get("arguments")))
        for item in output
        if item.get("type") == "function_call"
    ]
    kept: dict[str, Any] = {"output": output, "status": status}
    if response_id is not None:
        kept["id"] = response_id
    return assistant_message(text, calls, KIND, kept)
