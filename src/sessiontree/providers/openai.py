"""An adapter for any OpenAI-compatible ``/chat/completions`` endpoint, over httpx.

Contract:

- ``call = openai_compatible(base_url, model, ...)``; ``await call(messages, tools)``
  returns a ``Completion`` whose ``message`` is an OpenAI assistant message
  (``role``, ``content`` str or None, ``tool_calls`` when there are any, each
  with ``id``, ``type: "function"`` and ``function: {name, arguments}``, the
  arguments being the model's raw string, valid JSON or not).
- With ``stream=True``, ``call(messages, tools)`` is an async iterator of ``str``
  text deltas whose last item is exactly one ``Completion``.
- Failures raise ``ProviderError``: HTTP errors (with ``status`` and the server's
  message), malformed JSON, an ``error`` object in a stream, and a stream that
  ends without a finish reason or ``[DONE]`` or whose connection drops. A
  partial message is never returned.
- Connect errors, timeouts, dropped connections, bad encodings, 408, 409, 429
  and 5xx are retried with exponential backoff and full jitter, or after
  ``Retry-After`` when the server sends one, up to ``max_retries`` retries and
  ``max_retry_time`` seconds in all. A stream is retried only while no text has
  reached the caller. Every httpx failure is a ``ProviderError``.
- ``deadline`` bounds the whole call, retries and waits included; ``timeout``
  is per read. ``max_response_bytes`` bounds a body or stream after
  decompression, ``max_line_bytes`` one SSE line.
- A reply that cannot be stored as an assistant message (``model.completion_problem``)
  is a ``ProviderError`` carrying the reply as ``raw``, redacted and cut short.
- The API key is sent as a bearer token and never appears in reprs, errors or
  ``Completion.params``; a key with a control character is refused up front.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from ..model import Completion, sendable
from . import http
from .http import (  # noqa: F401  (the HTTP settings' defaults, importable here as before)
    DEFAULT_DEADLINE,
    DEFAULT_MAX_LINE_BYTES,
    DEFAULT_MAX_RESPONSE_BYTES,
    HTTPAdapter,
)
from .reply import StreamState, error_text, tool_call

PROVIDER = "openai-compatible"
_RESERVED = frozenset({"messages", "tools", "model", "stream", "stream_options"})


@http.takes_settings
def openai_compatible(
    base_url: str,
    model: str,
    *,
    api_key: str | None = None,
    api_key_env: str | None = "OPENAI_API_KEY",
    stream: bool = False,
    **params: Any,
) -> OpenAICompatible:
    """Build a model ``call`` for an OpenAI-compatible endpoint.

    ``params`` (temperature, seed, max_tokens, tool_choice, ...) are sent as
    they are; ``timeout`` ... ``transport`` are the HTTP settings (``http.Settings``).
    The key is ``api_key``, else the variable named ``api_key_env``,
    else none (no ``Authorization`` header, fine for local servers).
    """
    settings = http.Settings.take(params)
    http.refuse_reserved("openai_compatible", _RESERVED, params)
    base = base_url.rstrip("/")
    key = http.api_key(api_key, api_key_env)
    endpoint = http.endpoint(base + "/chat/completions", PROVIDER, model, settings, stream=stream, key=key)
    return OpenAICompatible(endpoint, base, model, bool(stream), params)


class OpenAICompatible(HTTPAdapter):
    """The callable ``openai_compatible`` returns. Holds no connection between calls."""

    provider = PROVIDER  # recorded in a run's recipe
    reserved = _RESERVED

    def __call__(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> Awaitable[Completion] | AsyncIterator[str | Completion]:
        # A message's "raw" (another API's own record of it) is kept, never sent.
        body: dict[str, Any] = {"model": self.model, "messages": sendable(messages), **self.params}
        if tools:
            body["tools"] = tools
        if self.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
            return self._streamed(body)
        return self._complete(body)

    # -- one call ------------------------------------------------------------

    async def _complete(self, body: dict[str, Any]) -> Completion:
        raw, budget = await self._endpoint.read(body)
        data = self._endpoint.parse(raw)
        if isinstance(data, dict) and data.get("error"):
            raise self._error("error in response: ", detail=error_text(data))
        choices = data.get("choices") if isinstance(data, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise self._error("response has no choices: ", detail=json.dumps(data), limit=200)
        try:
            raw_message = choices[0].get("message") or {}
            tool_calls = [tool_call(tc, i) for i, tc in enumerate(raw_message.get("tool_calls") or [])]
            content, finish = raw_message.get("content"), choices[0].get("finish_reason")
        except (AttributeError, TypeError):  # a list or a string where an object was due
            raise self._error("the reply has an unexpected shape", raw=json.dumps(data)) from None
        return self._completion(
            content,
            tool_calls,
            data.get("model"),
            data.get("usage"),
            finish,
            budget.started,
            lambda: json.dumps(data),
        )

    async def _streamed(self, body: dict[str, Any]) -> AsyncIterator[str | Completion]:
        stream = self._endpoint.fold(body, StreamState)
        async for text in stream:
            yield text
        state, budget = stream.state, stream.budget
        if state.finish is None and not state.done:
            raise self._error("stream ended without a finish_reason or [DONE]: truncated")
        try:
            tool_calls = [tool_call(state.calls[i], n) for n, i in enumerate(sorted(state.calls))]
        except TypeError:  # indexes that do not sort: a number and a string, ...
            raise self._error("the stream's tool calls have unexpected indexes", raw=repr(state)) from None
        yield self._completion(
            "".join(state.text) or None,
            tool_calls,
            state.model,
            state.usage,
            state.finish,
            budget.started,
            lambda: repr(state),
        )

    def _completion(
        self,
        content: Any,
        tool_calls: list[dict[str, Any]],
        model: Any,
        usage: Any,
        finish: Any,
        started: float,
        raw: Callable[[], str],
    ) -> Completion:
        """The Completion of a reply, or a ProviderError (``raw()`` attached) when it cannot be
        stored. A credential the server echoed in the text or the call arguments is replaced."""
        scrub = self._redact.credentials
        if isinstance(content, str):
            content = scrub(content)
        elif isinstance(content, list):  # parts: {"type": "text", "text": ...}, ...
            content = [
                {**part, "text": scrub(part["text"])}
                if isinstance(part, dict) and isinstance(part.get("text"), str)
                else part
                for part in content
            ]
        for call in tool_calls:  # canonical by now (``reply.tool_call``): arguments are text
            call["function"]["arguments"] = scrub(call["function"]["arguments"])
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if tool_calls:
            message["tool_calls"] = tool_calls
        usage = dict(usage) if isinstance(usage, dict) else {}
        return self._reply(
            message,
            model=model,
            params=dict(self.params),
            finish=finish,
            usage=usage,
            started=started,
            raw=raw,
        )
