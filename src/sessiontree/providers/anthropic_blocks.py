"""Chat messages to Anthropic Messages content blocks and back. Pure functions, no I/O.

Contract:

- ``request_parts(messages, tools)`` is ``(system, messages, tools)`` for a
  Messages request: every ``system``/``developer`` message's text goes, in
  order, to the top-level ``system`` blocks; user text and image parts become
  ``text``/``image`` blocks; an assistant message becomes ``text`` and
  ``tool_use`` blocks (``input`` the parsed arguments; arguments that are not a
  JSON object are sent as ``{"_unparsed_arguments": <the text>}``, so the model
  sees what it wrote and the tool result that refused it); consecutive ``tool``
  messages become one user message of ``tool_result`` blocks; messages of one
  role in a row are merged into one. A call id the API would refuse (it takes
  ``[a-zA-Z0-9_-]+`` only; other servers write ``functions.get_weather:0``) is sent
  as ``wire_id(id)``, in the call and in its result alike. A message that cannot be sent (an unknown
  role, a content part of an unknown type) raises ``ValueError`` naming it.
- An assistant message with ``raw["anthropic"]["content"]`` (the blocks the API
  returned, kept by ``reply_message``) is sent as those blocks verbatim, signed
  ``thinking`` and ``redacted_thinking`` included, when their text and tool
  calls are still those of the message; when the message was changed since (an
  edited call), its thinking blocks are sent verbatim, then blocks built from
  the message as it is now.
- Two assistant messages in a row are merged with their thinking blocks first (the API
  refuses an assistant message with thinking blocks that does not start with one).
- ``thinking_refused(messages)``: whether the API would refuse ``thinking`` for these
  messages. With thinking on it wants the assistant turn under way (the assistant
  messages after the last user message that answers no tool call) to start with a
  thinking block, and a turn another provider, a script, or this adapter without
  thinking wrote has none; the adapter then sends that request without ``thinking``
  (the API's own advice), rather than a request it refuses with 400.
- ``with_cache(system, messages, tools, control)`` puts ``cache_control`` on the
  last system block, the last tool and the last block of the newest message
  (thinking blocks excepted), on copies.
- ``reply_message(blocks, stop_reason, stop_sequence, arguments)`` is the
  OpenAI-shaped assistant message for a reply, with the blocks kept under
  ``raw["anthropic"]``.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from .reply import assistant_message, function_call, sent_back

KIND = "anthropic"
UNPARSED = "_unparsed_arguments"
THINKING = ("thinking", "redacted_thinking")
_NATIVE_PARTS = ("image", "document", "text", "search_result")
_ERROR_PREFIXES = ("Error:", "Rejected:")  # what the agent loop writes for a call that failed
_TOOL_ID = re.compile(r"[a-zA-Z0-9_-]+")  # the only tool_use ids the API takes


def wire_id(call_id: Any) -> str:
    """A tool call's id as the API takes it: as it is when it can be (Anthropic's own, OpenAI's
    ``call_...``), else a form made only of the characters allowed, the same for a call and its
    result, distinct for distinct ids (other servers write ``functions.get_weather:0``)."""
    text = str(call_id or "")
    if _TOOL_ID.fullmatch(text):
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{re.sub(r'[^a-zA-Z0-9_-]', '_', text)[:48]}_{digest}"


def tool_input(arguments: Any) -> dict[str, Any]:
    """A tool call's arguments as the object ``tool_use.input`` must be."""
    if isinstance(arguments, dict):
        return arguments
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        value = None
    return value if isinstance(value, dict) else {UNPARSED: text}


def text_of(content: Any) -> str:
    """The text of a message's content: a string, or the texts of its parts joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return json.dumps(content, ensure_ascii=False)


def _user_blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if content is None or content == "":
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        return [{"type": "text", "text": json.dumps(content, ensure_ascii=False)}]
    blocks = []
    for n, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if isinstance(part, str):
            part, kind = {"type": "text", "text": part}, "text"
        if kind == "text":
            if part.get("text"):
                blocks.append({"type": "text", "text": part["text"]})
        elif kind == "image_url":
            url = part.get("image_url")
            url = url.get("url") if isinstance(url, dict) else url
            blocks.append({"type": "image", "source": _image_source(str(url), where)})
        elif kind in _NATIVE_PARTS:
            blocks.append(part)
        else:
            raise ValueError(f"{where}: content part {n} of type {kind!r} has no Messages API equivalent")
    return blocks


def _image_source(url: str, where: str) -> dict[str, Any]:
    if url.startswith("data:"):
        head, sep, data = url[5:].partition(",")
        media, _, encoding = head.partition(";")
        if not sep or encoding != "base64":
            raise ValueError(f"{where}: an image data URL must be base64")
        return {"type": "base64", "media_type": media, "data": data}
    return {"type": "url", "url": url}


def _tool_result(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    flag = message.get("is_error")
    text = text_of(content)
    is_error = flag if isinstance(flag, bool) else text.startswith(_ERROR_PREFIXES)
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": wire_id(message.get("tool_call_id"))}
    if isinstance(content, list):
        block["content"] = _user_blocks(content, "a tool result")
    elif text:
        block["content"] = text
    if is_error:
        block["is_error"] = True
    return block


def _built(message: dict[str, Any]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if text := text_of(message.get("content")):
        blocks.append({"type": "text", "text": text})
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        blocks.append(
            {
                "type": "tool_use",
                "id": wire_id(call.get("id")),
                "name": function.get("name"),
                "input": tool_input(function.get("arguments")),
            }
        )
    return blocks


def _gist(blocks: list[dict[str, Any]]) -> tuple[str, list[tuple[Any, Any, Any]]]:
    """What a message says, whatever its block boundaries: its text and its calls."""
    text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
    calls = [(b.get("id"), b.get("name"), b.get("input")) for b in blocks if b.get("type") == "tool_use"]
    return text, calls


def _assistant_blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    # Verbatim when unchanged: signatures and server-tool blocks too.
    return sent_back(message, KIND, "content", _built(message), _gist, lambda b: b.get("type") in THINKING)


def request_parts(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(system blocks, messages, tools) of a Messages request (see the module docstring)."""
    system: list[dict[str, Any]] = []
    out: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if out and out[-1]["role"] == role:
            merged = [*out[-1]["content"], *blocks]
            # thinking first, or the API refuses the message (each block stays as it was)
            out[-1]["content"] = [b for b in merged if _thinks(b)] + [b for b in merged if not _thinks(b)]
        else:
            out.append({"role": role, "content": list(blocks)})

    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        where = f"message {i} ({role})"
        if role in ("system", "developer"):
            if text := text_of(message.get("content")):
                system.append({"type": "text", "text": text})
        elif role == "user":
            add("user", _user_blocks(message.get("content"), where))
        elif role == "tool":
            add("user", [_tool_result(message)])
        elif role == "assistant":
            add("assistant", _assistant_blocks(message))
        else:
            raise ValueError(f"message {i} has the role {role!r}, which the Messages API has no place for")
    return system, out, [_tool(t) for t in tools or []]


def _thinks(block: dict[str, Any]) -> bool:
    return block.get("type") in THINKING


def thinking_refused(messages: list[dict[str, Any]]) -> bool:
    """Whether the API would refuse ``thinking`` for these messages (see the module docstring)."""
    start = -1
    for n, message in enumerate(messages):
        if message["role"] == "user" and not any(b.get("type") == "tool_result" for b in message["content"]):
            start = n
    turn = [m for m in messages[start + 1 :] if m["role"] == "assistant"]
    return bool(turn) and not (turn[0]["content"] and _thinks(turn[0]["content"][0]))


def _tool(spec: dict[str, Any]) -> dict[str, Any]:
    if spec.get("type") != "function" or "function" not in spec:
        return spec  # already an Anthropic tool (or a server tool such as web search)
    function = spec["function"]
    tool = {
        "name": function.get("name"),
        "input_schema": function.get("parameters") or {"type": "object", "properties": {}},
    }
    if function.get("description"):
        tool["description"] = function["description"]
    return tool


def with_cache(
    system: list[dict[str, Any]],
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    control: dict[str, Any],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Copies with ``cache_control`` breakpoints on system, tools and the newest turn."""
    system, tools = list(system), list(tools)
    if system:
        system[-1] = {**system[-1], "cache_control": control}
    if tools:
        tools[-1] = {**tools[-1], "cache_control": control}
    if messages:
        last = messages[-1]
        content = list(last["content"])
        for j in range(len(content) - 1, -1, -1):
            if content[j].get("type") not in THINKING:
                content[j] = {**content[j], "cache_control": control}
                break
        messages = [*messages[:-1], {**last, "content": content}]
    return system, messages, tools


def reply_message(
    blocks: list[dict[str, Any]],
    stop_reason: str | None,
    stop_sequence: str | None,
    arguments: dict[int, str] | None = None,
) -> dict[str, Any]:
    """The assistant message for a reply's content blocks (``arguments``: a streamed
    tool_use's JSON text by block position, kept as the model wrote it)."""
    text = "".join(b["text"] for b in blocks if b.get("type") == "text" and isinstance(b.get("text"), str))
    calls = []
    for n, block in enumerate(blocks):
        if block.get("type") != "tool_use":
            continue
        given = (arguments or {}).get(n)
        sent = given if given else json.dumps(block.get("input") or {})
        calls.append(function_call(block.get("id"), block.get("name"), sent))
    kept: dict[str, Any] = {"content": blocks, "stop_reason": stop_reason}
    if stop_sequence is not None:
        kept["stop_sequence"] = stop_sequence
    return assistant_message(text, calls, KIND, kept)
