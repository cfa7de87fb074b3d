"""The reply of an OpenAI-compatible endpoint: a streamed message assembled, tool calls
put in the canonical shape, the server's words found in an error body.

Contract: ``StreamState.feed(event, error)`` folds one SSE event into the message
being assembled and returns its text delta; ``tool_call(raw, position)`` returns
``{"id", "type": "function", "function": {"name", "arguments"}}`` with string
arguments and an id (generated when missing); ``error_text(body)`` is the
message of an error body, whatever its shape. Pure functions, no I/O.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..ids import new_call_id
from .sse import Event


@dataclass
class StreamState:
    """The message assembled from one stream's chunks."""

    text: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    usage: dict[str, Any] | None = None
    finish: str | None = None
    model: str | None = None
    done: bool = False

    def feed(self, event: Event, error: Any) -> str | None:
        """Take one SSE event; return its text delta, if any."""
        data = event.data.strip()
        if not data:
            return None  # "data:" with nothing: a keep-alive
        if data == "[DONE]":
            self.done = True
            return None
        chunk = data_object(data, error)
        if chunk.get("error") or event.event == "error":
            raise error("error in stream: ", detail=error_text(chunk))
        try:
            return self._take(chunk)
        except (AttributeError, TypeError, ValueError, KeyError):  # a list where an object was due, ...
            raise error(
                "a stream chunk has an unexpected shape: ", detail=data, limit=200, quote=True
            ) from None

    def _take(self, chunk: dict[str, Any]) -> str | None:
        self.model = chunk.get("model") or self.model
        self.usage = chunk.get("usage") or self.usage  # the last chunk, its choices empty
        delta_text = None
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue  # n > 1 is not supported: keep the first choice
            delta = choice.get("delta") or {}
            if content := delta.get("content"):
                if not isinstance(content, str):
                    raise TypeError("content is not text")
                delta_text = content
                self.text.append(delta_text)
            for part in delta.get("tool_calls") or []:
                merge_tool_call(self.calls, part)
            self.finish = choice.get("finish_reason") or self.finish
        return delta_text


class TypedEvents:
    """What a stream folder of typed events (Anthropic's Messages, OpenAI's Responses: each
    event a JSON object naming its ``type``) shares: ``feed`` parses an event, lets
    ``refuse`` raise for an error event, and hands the rest to ``take``, which returns the
    text delta, if any; an event of an unexpected shape is a ProviderError quoting it."""

    def feed(self, event: Event, error: Any) -> str | None:
        data = event.data.strip()
        if not data:
            return None
        chunk = data_object(data, error)
        kind = chunk.get("type") or event.event
        self.refuse(kind, chunk, event, error)
        try:
            return self.take(kind, chunk)
        except (AttributeError, TypeError, ValueError, KeyError):  # a list where an object was due, ...
            raise error(
                f"a {kind} event has an unexpected shape: ", detail=data, limit=200, quote=True
            ) from None

    def refuse(self, kind: str, chunk: dict[str, Any], event: Event, error: Any) -> None:
        """Raise the ProviderError an error event stands for (``error``: a ``Failures``)."""
        raise NotImplementedError

    def take(self, kind: str, chunk: dict[str, Any]) -> str | None:
        raise NotImplementedError


def sent_back(
    message: dict[str, Any],
    kind: str,
    key: str,
    built: list[dict[str, Any]],
    gist: Callable[[list[dict[str, Any]]], Any],
    reasoning: Callable[[dict[str, Any]], bool],
) -> list[dict[str, Any]]:
    """The parts an assistant ``message`` is sent back to its own API as: the ones it
    recorded (``raw[kind][key]``) verbatim when they say what the message says (same
    ``gist``: its text and calls), else ``built`` from the message, after the recorded
    ``reasoning`` parts (a caller edited the message: its words win, the reasoning stays)."""
    raw = message.get("raw")
    kept = raw.get(kind) if isinstance(raw, dict) else None
    parts = kept.get(key) if isinstance(kept, dict) else None
    if not isinstance(parts, list) or not all(isinstance(p, dict) for p in parts):
        return built
    if gist(parts) == gist(built):
        return [dict(p) for p in parts]
    return [dict(p) for p in parts if reasoning(p)] + built


def data_object(data: str, error: Any) -> dict[str, Any]:
    """A stream's data line as the JSON object every streaming API sends, or ``error``
    (a ``Failures``) saying what it is instead."""
    try:
        chunk = json.loads(data)
    except (ValueError, RecursionError) as exc:
        problem = "JSON nested too deeply" if isinstance(exc, RecursionError) else "malformed JSON"
        raise error(f"{problem} in stream data line: ", detail=data, limit=200, quote=True) from None
    if not isinstance(chunk, dict):
        raise error("stream data line is not a JSON object: ", detail=data, limit=200, quote=True)
    return chunk


def merge_tool_call(calls: dict[int, dict[str, Any]], part: dict[str, Any]) -> None:
    """Fold one streamed tool-call fragment into ``calls``, keyed by its index."""
    index = part.get("index")
    if index is None:  # a server that omits index sends each call whole
        index = len(calls) if part.get("id") or not calls else max(calls)
    slot = calls.setdefault(index, {"id": None, "function": {"name": "", "arguments": ""}})
    if part.get("id"):
        slot["id"] = part["id"]
    function = part.get("function") or {}
    name = function.get("name")
    # llama.cpp repeats the full name in every chunk: take it once, don't concatenate.
    if name and name != slot["function"]["name"]:
        slot["function"]["name"] += name
    if function.get("arguments"):
        slot["function"]["arguments"] += function["arguments"]


def tool_call(raw: dict[str, Any], position: int) -> dict[str, Any]:
    """A tool call in the canonical OpenAI shape."""
    function = raw.get("function") or {}
    arguments = function.get("arguments")
    if not isinstance(arguments, str):  # some servers send an object; the contract is a string
        arguments = json.dumps(arguments if arguments is not None else {})
    # An agent loop matches tool results to calls by id, so never leave it empty.
    call_id = raw.get("id") or new_call_id()
    return function_call(call_id, function.get("name") or "", arguments)


def function_call(call_id: Any, name: Any, arguments: str) -> dict[str, Any]:
    """A tool call as an assistant message holds it (OpenAI's shape, which every adapter returns)."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def assistant_message(
    text: str, calls: list[dict[str, Any]], kind: str, kept: dict[str, Any]
) -> dict[str, Any]:
    """The assistant message an adapter returns: its ``text`` (None when empty), its tool
    ``calls`` when there are any, and what the API itself said, ``kept`` under
    ``raw[kind]`` (sent back only to that API: ``model.sendable``)."""
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = calls
    message["raw"] = {kind: kept}
    return message


def error_text(body: Any) -> str:
    """The server's own words from an error body (its text or parsed JSON), whatever its shape."""
    if isinstance(body, str):
        with contextlib.suppress(ValueError, RecursionError):
            body = json.loads(body)
    error = (body.get("error") or body) if isinstance(body, dict) else body
    if isinstance(error, dict):
        error = error.get("message") or error.get("detail") or error.get("msg") or json.dumps(error)
    return str(error).strip()
