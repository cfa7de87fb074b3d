"""An adapter for OpenAI's Responses API (``POST /v1/responses``), over httpx, no SDK.

Contract:

- ``call = openai_responses(model, ...)``; ``await call(messages, tools)`` takes
  the chat messages and OpenAI tool specs the loop uses (converted by
  ``responses_items.request_parts``) and returns a ``Completion`` whose
  ``message`` is an OpenAI-shaped assistant message (``content``,
  ``tool_calls`` with the model's argument text and ``call_id`` as the id) plus
  ``raw["responses"]``: the output items as the API returned them (``reasoning``
  items, ``encrypted_content`` included, built-in tool calls), the response's
  status and id. ``call.raw_kind == "responses"``: the loop hands this adapter
  its own ``raw`` entries and no other adapter ever sees them
  (``model.sendable``). The history is sent whole every time
  (``previous_response_id`` is never used), so a branch continues wherever it
  was forked.
- ``encrypted_reasoning=True`` asks for the reasoning items' encrypted content
  (``include: ["reasoning.encrypted_content"]``), which the API needs back to
  reuse them when it does not store responses (``store=False``); left at None,
  it is asked for exactly when ``store=False`` (else the reasoning items sent
  back name responses the API never kept, and it refuses them with 404).
- ``finish_reason``: ``stop`` for a completed response, ``tool_calls`` when it
  has function calls, ``length`` for ``incomplete`` with
  ``max_output_tokens``, ``content_filter`` for ``incomplete`` with
  ``content_filter``; any other incomplete reason is kept as it is.
- ``usage`` is the API's own, with two fields added so that costs and
  ``compare`` treat every provider alike: ``cache_read_input_tokens`` (the
  API's ``input_tokens_details.cached_tokens``) and ``input_tokens`` without
  them (as Anthropic counts it); ``output_tokens`` includes the reasoning
  tokens (``output_tokens_details.reasoning_tokens``), which are billed as output.
- A ``failed`` response, an ``error`` object, a ``response.failed`` or ``error``
  stream event is a ``ProviderError``; with ``stream=True`` the call is an async
  iterator of text deltas ending with one ``Completion``, and a stream that
  ends without ``response.completed`` (or ``response.incomplete``) is a
  ``ProviderError`` (truncated).
- HTTP, retries (429 with ``retry-after-ms``/``Retry-After``, every 5xx), the
  deadline, the size limits and redaction are ``http.Endpoint``'s, shared with
  the other adapters. The key is a bearer token, never in an error, a
  ``Completion`` or a repr.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ..model import Completion, sendable
from . import http
from .failures import Failures
from .http import (  # noqa: F401  (the HTTP settings' defaults, importable here as before)
    DEFAULT_DEADLINE,
    DEFAULT_MAX_LINE_BYTES,
    DEFAULT_MAX_RESPONSE_BYTES,
    HTTPAdapter,
)
from .reply import TypedEvents, error_text
from .responses_items import KIND, reply_message, request_parts
from .sse import Event

PROVIDER = "openai-responses"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
ENCRYPTED = "reasoning.encrypted_content"
INCOMPLETE_REASONS = {"max_output_tokens": "length", "content_filter": "content_filter"}
_RESERVED = frozenset({"input", "instructions", "tools", "model", "stream", "previous_response_id"})
# Error codes a stream may report that another attempt may not meet.
_RETRYABLE_ERRORS = frozenset({"server_error", "rate_limit_exceeded", "server_is_overloaded", "slow_down"})
_TERMINAL = frozenset({"response.completed", "response.incomplete"})


@http.takes_settings
def openai_responses(
    model: str,
    *,
    base_url: str = DEFAULT_BASE_URL,
    api_key: str | None = None,
    api_key_env: str | None = "OPENAI_API_KEY",
    stream: bool = False,
    encrypted_reasoning: bool | None = None,
    **params: Any,
) -> OpenAIResponses:
    """Build a model ``call`` for the Responses API at ``base_url`` (``/responses`` is added).

    ``params`` (reasoning, max_output_tokens, temperature, tool_choice, store,
    include, ...) are sent as they are; ``timeout`` ... ``transport`` are the HTTP
    settings (``http.Settings``). The key is ``api_key``, else the variable
    named ``api_key_env``, else none (no ``Authorization`` header, fine for local
    mock servers).
    """
    settings = http.Settings.take(params)
    http.refuse_reserved("openai_responses", _RESERVED, params)
    if encrypted_reasoning is None:  # needed back exactly when the API keeps nothing
        encrypted_reasoning = params.get("store") is False
    if encrypted_reasoning:
        include = params.get("include") or []
        if not isinstance(include, list):
            raise TypeError(f"include must be a list, not {type(include).__name__}")
        params["include"] = [*include, ENCRYPTED] if ENCRYPTED not in include else include
    base = base_url.rstrip("/")
    key = http.api_key(api_key, api_key_env)
    endpoint = http.endpoint(base + "/responses", PROVIDER, model, settings, stream=stream, key=key)
    return OpenAIResponses(endpoint, base, model, bool(stream), params)


class OpenAIResponses(HTTPAdapter):
    """The callable ``openai_responses`` returns. Holds no connection between calls."""

    raw_kind = KIND
    provider = PROVIDER  # recorded in a run's recipe
    reserved = _RESERVED

    def __call__(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> Awaitable[Completion] | AsyncIterator[str | Completion]:
        try:  # the loop's own messages carry our raw items; a caller's may carry others'
            instructions, items, specs = request_parts(sendable(messages, KIND), tools)
        except (ValueError, AttributeError, TypeError) as exc:
            error = self._error(f"the messages cannot be sent: {exc}")
            return http.failed(error, self.stream)
        body: dict[str, Any] = {"model": self.model, "input": items}
        if instructions:
            body["instructions"] = instructions
        if specs:
            body["tools"] = specs
        body.update(self.params)
        if self.stream:
            body["stream"] = True
            return self._streamed(body)
        return self._complete(body)

    # -- one call ------------------------------------------------------------------

    async def _complete(self, body: dict[str, Any]) -> Completion:
        raw, budget = await self._endpoint.read(body)
        data = self._endpoint.parse(raw)
        if not isinstance(data, dict):
            raise self._error("the reply is not a response object: ", detail=json.dumps(data), limit=200)
        self._check(data)
        output = data.get("output")
        if not isinstance(output, list) or not all(isinstance(i, dict) for i in output):
            raise self._error("the reply has no output items: ", detail=json.dumps(data), limit=200)
        return self._completion(data, output, budget.started, lambda: json.dumps(data))

    async def _streamed(self, body: dict[str, Any]) -> AsyncIterator[str | Completion]:
        stream = self._endpoint.fold(body, ResponseStream)
        async for text in stream:
            yield text
        state, budget = stream.state, stream.budget
        if not state.done:
            raise self._error(
                f"stream ended without response.completed after {len(state.text)} text chunks: truncated"
            )
        response = state.response
        output = response.get("output")
        if not isinstance(output, list) or not output or not all(isinstance(i, dict) for i in output):
            output = state.output()  # a server that leaves the final output out: what was streamed
        yield self._completion(response, output, budget.started, lambda: repr(state))

    def _check(self, response: dict[str, Any]) -> None:
        """Raise the ProviderError a failed response (or an error object) stands for."""
        error = response.get("error")
        if error or response.get("status") == "failed" or response.get("type") == "error":
            found = error if isinstance(error, dict) else response
            retryable = found.get("code") in _RETRYABLE_ERRORS
            raise self._error(
                "error in response: ", detail=error_text(error or response), retryable=retryable
            )

    def _completion(
        self, response: dict[str, Any], output: list[dict[str, Any]], started: float, raw: Callable[[], str]
    ) -> Completion:
        """The Completion of a response, credentials the server echoed replaced, or the
        ProviderError (``raw()`` attached) when it cannot be stored."""
        scrub = self._endpoint.redact
        status = response.get("status")
        message = scrub.credentials_in(reply_message(output, status, response.get("id")))
        if status == "incomplete":
            details = response.get("incomplete_details")
            reason = details.get("reason") if isinstance(details, dict) else None
            finish = INCOMPLETE_REASONS.get(reason, reason) if isinstance(reason, str) else "incomplete"
        else:
            finish = "tool_calls" if message.get("tool_calls") else "stop"
        usage = usage_of(response.get("usage"))
        return self._reply(
            message,
            model=response.get("model"),
            params=dict(self.params),
            finish=finish,
            usage=usage,
            started=started,
            raw=lambda: scrub(raw()),
        )


def usage_of(usage: Any) -> dict[str, Any]:
    """The API's usage, with ``cache_read_input_tokens`` taken out of ``input_tokens``."""
    if not isinstance(usage, dict):
        return {}
    out = dict(usage)
    details = usage.get("input_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    total = usage.get("input_tokens")
    if isinstance(cached, int) and isinstance(total, int) and 0 <= cached <= total:
        out["input_tokens"], out["cache_read_input_tokens"] = total - cached, cached
    return out


@dataclass
class ResponseStream(TypedEvents):
    """One streamed response folded from its events (``http.StreamFolder``)."""

    text: list[str] = field(default_factory=list)
    items: dict[int, dict[str, Any]] = field(default_factory=dict)  # by output_index
    response: dict[str, Any] = field(default_factory=dict)  # the last response object seen
    done: bool = False

    def refuse(self, kind: str, chunk: dict[str, Any], event: Event, error: Failures) -> None:
        if kind in ("error", "response.failed") or event.event == "error":
            found = chunk.get("response", chunk) if kind == "response.failed" else chunk
            problem = found.get("error") if isinstance(found, dict) and found.get("error") else found
            code = problem.get("code") if isinstance(problem, dict) else None
            raise error("error in stream: ", detail=error_text(problem), retryable=code in _RETRYABLE_ERRORS)

    def take(self, kind: str, chunk: dict[str, Any]) -> str | None:
        if kind in ("response.created", "response.in_progress") or kind in _TERMINAL:
            response = chunk["response"]
            if not isinstance(response, dict):
                raise TypeError("response is not an object")
            self.response = response
            self.done = kind in _TERMINAL
        elif kind in ("response.output_item.added", "response.output_item.done"):
            item = chunk["item"]
            if not isinstance(item, dict):
                raise TypeError("item is not an object")
            # .done carries the whole item: it replaces what the deltas built
            self.items[int(chunk["output_index"])] = dict(item)
        elif kind == "response.output_text.delta":
            delta = chunk["delta"]
            if not isinstance(delta, str):
                raise TypeError("delta is not text")
            self._part(chunk, "output_text", "text", delta)
            self.text.append(delta)
            return delta
        elif kind == "response.refusal.delta":
            self._part(chunk, "refusal", "refusal", str(chunk["delta"]))
        elif kind == "response.function_call_arguments.delta":
            item = self.items.setdefault(int(chunk["output_index"]), {"type": "function_call"})
            item["arguments"] = str(item.get("arguments") or "") + str(chunk["delta"])
        # reasoning summaries, content_part and *.done events, built-in tool progress and
        # event types added later: the output_item.done that follows carries them whole
        return None

    def _part(self, chunk: dict[str, Any], kind: str, key: str, delta: str) -> None:
        item = self.items.setdefault(
            int(chunk["output_index"]), {"type": "message", "role": "assistant", "content": []}
        )
        parts = item.setdefault("content", [])
        index = int(chunk.get("content_index") or 0)
        while len(parts) <= index:
            parts.append({"type": kind, key: ""})
        parts[index][key] = str(parts[index].get(key) or "") + delta

    def output(self) -> list[dict[str, Any]]:
        """The output items as streamed, in order."""
        return [self.items[i] for i in sorted(self.items)]
