"""An adapter for Anthropic's Messages API (``POST /v1/messages``), over httpx, no SDK.

Contract:

- ``call = anthropic(model, ...)``; ``await call(messages, tools)`` takes the
  chat messages and OpenAI tool specs the loop uses (converted by
  ``anthropic_blocks.request_parts``) and returns a ``Completion`` whose
  ``message`` is an OpenAI-shaped assistant message (``content``, ``tool_calls``
  with JSON-text arguments) plus ``raw["anthropic"]``: the content blocks as
  the API returned them (signed thinking included), the stop reason and stop
  sequence. ``call.raw_kind == "anthropic"``: the loop hands this adapter its
  own ``raw`` entries and no other adapter ever sees them (``model.sendable``).
- ``finish_reason`` maps the stop reason onto the chat-completions words:
  ``end_turn``/``stop_sequence`` -> ``stop``, ``max_tokens`` -> ``length``,
  ``tool_use`` -> ``tool_calls``, ``refusal`` -> ``content_filter``; any other
  (``pause_turn`` after ``max_pause_turns`` continuations) is kept as it is.
- ``thinking`` is sent as given, except for a history whose assistant turn under way
  does not start with a thinking block (another provider wrote it, say), which the
  API refuses with thinking on: that call is made without it, and its recorded
  ``params`` say so.
  A ``pause_turn`` reply is continued by the adapter itself (the paused content
  sent back as the assistant turn, within the same deadline), and the parts are
  returned as one message with their usage added up.
- ``usage`` is the API's own (``input_tokens``, ``output_tokens``,
  ``cache_creation_input_tokens``, ``cache_read_input_tokens``, ...).
- ``cache`` (default on): ``cache_control`` breakpoints on the system prompt,
  the last tool and the newest turn; ``True`` is ``{"type": "ephemeral"}``, a
  dict is used as the ``cache_control`` value, ``False`` sends none.
- With ``stream=True`` the call is an async iterator of text deltas ending with
  one ``Completion``; every event type is folded (``MessageStream``), and a
  stream without ``message_stop``, or without a ``stop_reason`` before it, is a
  ``ProviderError`` (truncated), as is an ``error`` event.
- HTTP, retries (429 with ``retry-after-ms``/``Retry-After``, 529 overloaded,
  every 5xx), the deadline, the size limits and redaction are ``http.Endpoint``'s,
  shared with ``openai_compatible``. The key goes in ``x-api-key`` and never in
  an error, a ``Completion`` or a repr.
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..model import Completion, sendable
from . import http
from .anthropic_blocks import KIND, request_parts, thinking_refused, tool_input, with_cache
from .anthropic_blocks import reply_message as _reply_message
from .failures import Failures
from .http import (  # noqa: F401  (the HTTP settings' defaults, importable here as before)
    DEFAULT_DEADLINE,
    DEFAULT_MAX_LINE_BYTES,
    DEFAULT_MAX_RESPONSE_BYTES,
    Endpoint,
    HTTPAdapter,
)
from .reply import TypedEvents, error_text
from .retry import Budget
from .sse import Event

Parts = tuple[list[Any], list[Any], list[Any]]  # system, messages, tools of a request
PROVIDER = "anthropic"
API_VERSION = "2023-06-01"
DEFAULT_BASE_URL = "https://api.anthropic.com"
DEFAULT_MAX_TOKENS = 4096
STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
EPHEMERAL = {"type": "ephemeral"}
_RESERVED = frozenset({"messages", "tools", "model", "stream", "system", "max_tokens"})
# Errors a stream may report that another attempt may not meet.
_RETRYABLE_ERRORS = frozenset({"overloaded_error", "api_error", "rate_limit_error", "timeout_error"})


@http.takes_settings
def anthropic(
    model: str,
    *,
    base_url: str = DEFAULT_BASE_URL,
    api_key: str | None = None,
    api_key_env: str | None = "ANTHROPIC_API_KEY",
    max_tokens: int = DEFAULT_MAX_TOKENS,
    cache: bool | Mapping[str, Any] = True,
    stream: bool = False,
    max_pause_turns: int = 3,
    **params: Any,
) -> Anthropic:
    """Build a model ``call`` for the Messages API at ``base_url`` (``/v1/messages`` is added).

    ``params`` (temperature, thinking, tool_choice, stop_sequences, ...) are sent
    as they are; ``timeout`` ... ``transport`` are the HTTP settings (``http.Settings``).
    The key is ``api_key``, else the variable named ``api_key_env``,
    else none (no ``x-api-key`` header, fine for local mock servers).
    """
    settings = http.Settings.take(params)
    http.refuse_reserved("anthropic", _RESERVED, params)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens must be a positive integer, not {max_tokens!r}")
    key = http.api_key(api_key, api_key_env)
    control = None if cache is False or cache is None else EPHEMERAL if cache is True else dict(cache)
    base = base_url.rstrip("/")
    endpoint = http.endpoint(
        base + ("/messages" if base.endswith("/v1") else "/v1/messages"),
        PROVIDER,
        model,
        settings,
        stream=stream,
        key=key,
        auth=("x-api-key", ""),
        fixed={"anthropic-version": API_VERSION},
    )
    return Anthropic(endpoint, base, model, max_tokens, control, bool(stream), max_pause_turns, params)


class Anthropic(HTTPAdapter):
    """The callable ``anthropic`` returns. Holds no connection between calls."""

    raw_kind = KIND
    provider = PROVIDER  # recorded in a run's recipe
    reserved = _RESERVED - {"max_tokens"}  # with_params sets max_tokens (the field of its own)

    def __init__(
        self,
        endpoint: Endpoint,
        base_url: str,
        model: str,
        max_tokens: int,
        cache: dict[str, Any] | None,
        stream: bool,
        max_pause_turns: int,
        params: dict[str, Any],
    ) -> None:
        super().__init__(endpoint, base_url, model, stream, params)
        self.max_tokens, self.cache, self.max_pause_turns = max_tokens, cache, max_pause_turns

    def with_params(self, **params: Any) -> Anthropic:
        """The same endpoint and model with these request parameters added or replaced."""
        max_tokens = params.pop("max_tokens", self.max_tokens)
        other = super().with_params(**params)
        other.max_tokens = max_tokens
        return other

    def __call__(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> Awaitable[Completion] | AsyncIterator[str | Completion]:
        try:  # the loop's own messages carry our raw blocks; a caller's may carry others'
            parts = request_parts(sendable(messages, KIND), tools)
        except (ValueError, AttributeError, TypeError) as exc:
            error = self._error(f"the messages cannot be sent: {exc}")
            return http.failed(error, self.stream)
        return self._streamed(parts) if self.stream else self._complete(parts)

    def _sent_params(self, parts: Parts) -> dict[str, Any]:
        """The request parameters this call sends: ``thinking`` left out when the API would
        refuse it for this history (``anthropic_blocks.thinking_refused``)."""
        thinking = self.params.get("thinking")
        if isinstance(thinking, dict) and thinking.get("type") != "disabled" and thinking_refused(parts[1]):
            return {k: v for k, v in self.params.items() if k != "thinking"}
        return self.params

    def _body(self, parts: Parts, extra: list[Any], params: dict[str, Any]) -> dict[str, Any]:
        system, messages, tools = parts[0], [*parts[1], *extra], parts[2]
        if self.cache is not None:
            system, messages, tools = with_cache(system, messages, tools, self.cache)
        body: dict[str, Any] = {"model": self.model, "max_tokens": self.max_tokens, "messages": messages}
        if system:
            body["system"] = system
        if tools:
            body["tools"] = tools
        body.update(params)
        if self.stream:
            body["stream"] = True
        return body

    # -- one call ------------------------------------------------------------------

    async def _complete(self, parts: Parts) -> Completion:
        budget = self._endpoint.budget()
        reply, params = _Reply(), self._sent_params(parts)
        for turn in range(self.max_pause_turns + 1):
            raw, _ = await self._endpoint.read(self._body(parts, reply.continuation(), params), budget)
            data = self._endpoint.parse(raw)
            if not isinstance(data, dict) or data.get("type") == "error" or data.get("error"):
                raise self._error("error in response: ", detail=error_text(data))
            content = data.get("content")
            if not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
                raise self._error("the reply has no content blocks: ", detail=json.dumps(data), limit=200)
            reply.add(content, {}, data.get("usage"), data.get("model"))
            reply.stop(data.get("stop_reason"), data.get("stop_sequence"))
            if reply.stop_reason != "pause_turn" or turn == self.max_pause_turns:
                break
        return self._completion(reply, budget, params, lambda: json.dumps(data))

    async def _streamed(self, parts: Parts) -> AsyncIterator[str | Completion]:
        budget = self._endpoint.budget()
        reply, params = _Reply(), self._sent_params(parts)
        for turn in range(self.max_pause_turns + 1):
            body = self._body(parts, reply.continuation(), params)
            stream = self._endpoint.fold(body, MessageStream, budget)
            async for text in stream:
                yield text
            state = stream.state
            if not state.done:
                raise self._error(
                    f"stream ended without message_stop after {len(state.text)} text chunks: truncated"
                )
            if not isinstance(state.stop_reason, str):  # message_stop, but no message_delta said why
                raise self._error(
                    f"stream ended without a stop_reason after {len(state.text)} text chunks: truncated"
                )
            blocks, arguments = state.content()
            reply.add(blocks, arguments, state.usage, state.model)
            reply.stop(state.stop_reason, state.stop_sequence)
            if reply.stop_reason != "pause_turn" or turn == self.max_pause_turns:
                break
        yield self._completion(reply, budget, params, lambda: repr(state))

    def _completion(
        self, reply: _Reply, budget: Budget, params: dict[str, Any], raw: Callable[[], str]
    ) -> Completion:
        """The Completion of a reply, credentials the server echoed replaced, or the
        ProviderError (``raw()`` attached) when it cannot be stored."""
        scrub = self._endpoint.redact
        message = scrub.credentials_in(
            _reply_message(reply.blocks, reply.stop_reason, reply.stop_sequence, reply.arguments)
        )
        finish = reply.stop_reason
        return self._reply(
            message,
            model=reply.model,
            params={"max_tokens": self.max_tokens, **params},  # what was sent
            finish=STOP_REASONS.get(finish, finish) if isinstance(finish, str) else finish,
            usage=reply.usage,
            started=budget.started,
            raw=lambda: scrub(raw()),
        )


@dataclass
class _Reply:
    """One assistant turn, from one response or several (``pause_turn`` continued)."""

    blocks: list[dict[str, Any]] = field(default_factory=list)
    arguments: dict[int, str] = field(default_factory=dict)  # streamed tool input text, by block
    usage: dict[str, Any] = field(default_factory=dict)
    model: Any = None
    stop_reason: Any = None
    stop_sequence: Any = None

    def continuation(self) -> list[dict[str, Any]]:
        """The assistant message a continued turn sends back: what was said so far."""
        return [{"role": "assistant", "content": copy.deepcopy(self.blocks)}] if self.blocks else []

    def add(self, blocks: list[dict[str, Any]], arguments: dict[int, str], usage: Any, model: Any) -> None:
        offset = len(self.blocks)
        self.blocks.extend(blocks)
        self.arguments.update({offset + i: text for i, text in arguments.items()})
        for name, value in (usage if isinstance(usage, dict) else {}).items():
            if isinstance(value, int) and isinstance(self.usage.get(name, 0), int):
                self.usage[name] = self.usage.get(name, 0) + value
            else:
                self.usage[name] = value
        self.model = model or self.model

    def stop(self, reason: Any, sequence: Any) -> None:
        self.stop_reason, self.stop_sequence = reason, sequence


@dataclass
class MessageStream(TypedEvents):
    """One streamed message folded from its events (``http.StreamFolder``)."""

    text: list[str] = field(default_factory=list)
    blocks: dict[int, dict[str, Any]] = field(default_factory=dict)
    partial: dict[int, list[str]] = field(default_factory=dict)  # input_json_delta fragments
    usage: dict[str, Any] = field(default_factory=dict)
    model: Any = None
    stop_reason: Any = None
    stop_sequence: Any = None
    done: bool = False

    def refuse(self, kind: str, chunk: dict[str, Any], event: Event, error: Failures) -> None:
        if kind == "error" or event.event == "error":
            found = chunk.get("error")
            retryable = isinstance(found, dict) and found.get("type") in _RETRYABLE_ERRORS
            raise error("error in stream: ", detail=error_text(chunk), retryable=retryable)

    def take(self, kind: str, chunk: dict[str, Any]) -> str | None:
        if kind == "message_start":
            message = chunk["message"]
            self.model = message.get("model") or self.model
            self.usage.update(message.get("usage") or {})
        elif kind == "content_block_start":
            block = dict(chunk["content_block"])
            self.blocks[int(chunk["index"])] = block
            if block.get("type") == "tool_use":
                self.partial[int(chunk["index"])] = []
            if block.get("type") == "text" and block.get("text"):
                self.text.append(block["text"])
                return str(block["text"])
        elif kind == "content_block_delta":
            return self._delta(self.blocks[int(chunk["index"])], int(chunk["index"]), chunk["delta"])
        elif kind == "content_block_stop":
            index = int(chunk["index"])
            if index in self.partial:
                self.blocks[index]["input"] = tool_input("".join(self.partial[index]))
        elif kind == "message_delta":
            delta = chunk.get("delta") or {}
            self.stop_reason = delta.get("stop_reason") or self.stop_reason
            self.stop_sequence = delta.get("stop_sequence") or self.stop_sequence
            self.usage.update(chunk.get("usage") or {})
        elif kind == "message_stop":
            self.done = True
        # "ping", and event types added to the API later, carry nothing to keep
        return None

    def _delta(self, block: dict[str, Any], index: int, delta: dict[str, Any]) -> str | None:
        kind = delta["type"]
        if kind == "text_delta":
            text = delta["text"]
            if not isinstance(text, str):
                raise TypeError("text is not a string")
            block["text"] = block.get("text", "") + text
            self.text.append(text)
            return text
        if kind == "input_json_delta":
            self.partial.setdefault(index, []).append(str(delta["partial_json"]))
        elif kind == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + str(delta["thinking"])
        elif kind == "signature_delta":
            block["signature"] = block.get("signature", "") + str(delta["signature"])
        elif kind == "citations_delta":
            block.setdefault("citations", []).append(delta["citation"])
        return None

    def content(self) -> tuple[list[dict[str, Any]], dict[int, str]]:
        """The blocks in index order, and each tool_use's input text as streamed."""
        order = sorted(self.blocks)
        arguments = {n: "".join(self.partial[i]) for n, i in enumerate(order) if i in self.partial}
        for i in order:  # a block whose stop never came still gets its input
            if i in self.partial and "input" not in self.blocks[i]:
                self.blocks[i]["input"] = tool_input("".join(self.partial[i]))
        return [self.blocks[i] for i in order], {n: t for n, t in arguments.items() if t}
