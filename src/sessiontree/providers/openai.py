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

import asyncio
import contextlib
import copy
import json
import os
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import httpx

from ..errors import ProviderError
from ..model import Completion, completion_problem
from ..redact import Redactor, check_header
from .body import ACCEPT_ENCODING, decoded
from .failures import Failures
from .reply import StreamState, error_text, tool_call
from .retry import Budget, retry_after
from .sse import aiter_events

PROVIDER = "openai-compatible"
RETRYABLE_STATUS = frozenset({408, 409, 429})  # and every 5xx
_RESERVED = frozenset({"messages", "tools", "model", "stream", "stream_options"})
_BACKOFF_BASE, _BACKOFF_CAP = 0.5, 8.0
DEFAULT_DEADLINE = 600.0  # seconds for a whole call, retries included
DEFAULT_MAX_RESPONSE_BYTES = 32 * 2**20  # one response body or stream, decoded
DEFAULT_MAX_LINE_BYTES = 4 * 2**20  # one SSE line
_ERROR_BODY_BYTES = 64 * 1024  # what is read of an error response; the rest is dropped

# Module-level hooks so tests can make retries instant and deterministic.
_sleep = asyncio.sleep
_random = random.Random()


def openai_compatible(
    base_url: str,
    model: str,
    *,
    api_key: str | None = None,
    api_key_env: str | None = "OPENAI_API_KEY",
    stream: bool = False,
    timeout: float | httpx.Timeout = 60.0,
    max_retries: int = 4,
    max_retry_time: float = 60.0,
    deadline: float = DEFAULT_DEADLINE,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    headers: Mapping[str, str] | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    **params: Any,
) -> OpenAICompatible:
    """Build a model ``call`` for an OpenAI-compatible endpoint.

    ``params`` (temperature, seed, max_tokens, tool_choice, ...) are sent as
    they are. The key is ``api_key``, else the variable named ``api_key_env``,
    else none (no ``Authorization`` header, fine for local servers).
    """
    clash = _RESERVED & params.keys()
    if clash:
        raise TypeError(f"openai_compatible() sets {sorted(clash)} itself; do not pass them")
    if api_key is None and api_key_env:
        api_key = os.environ.get(api_key_env) or None
    return OpenAICompatible(
        base_url,
        model,
        api_key=api_key,
        stream=stream,
        timeout=timeout,
        max_retries=max_retries,
        max_retry_time=max_retry_time,
        deadline=deadline,
        max_response_bytes=max_response_bytes,
        max_line_bytes=max_line_bytes,
        headers=headers,
        transport=transport,
        params=params,
    )


class OpenAICompatible:
    """The callable ``openai_compatible`` returns. Holds no connection between calls."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None,
        stream: bool,
        timeout: float | httpx.Timeout,
        max_retries: int,
        max_retry_time: float,
        deadline: float,
        max_response_bytes: int,
        max_line_bytes: int,
        headers: Mapping[str, str] | None,
        transport: httpx.AsyncBaseTransport | None,
        params: dict[str, Any],
    ) -> None:
        self.base_url, self.model, self.stream = base_url.rstrip("/"), model, bool(stream)
        self.url = self.base_url + "/chat/completions"
        self.params = dict(params)
        self.max_retries, self.max_retry_time = max_retries, max_retry_time
        self.deadline = float(deadline)
        self.max_response_bytes, self.max_line_bytes = max_response_bytes, max_line_bytes
        self._timeout = timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout)
        self._transport = transport
        self._headers = httpx.Headers(
            {
                "Accept": "text/event-stream" if stream else "application/json",
                "Accept-Encoding": ACCEPT_ENCODING,  # what body.Inflater decodes
            }
        )
        for name, value in (headers or {}).items():
            check_header(f"the {name} header", value)
        self._headers.update(headers or {})
        if api_key:
            check_header("the API key", api_key)
            self._headers["Authorization"] = f"Bearer {api_key}"  # replaces any given one
        # Every credential, scrubbed from every error message and every reply kept.
        self._redact = Redactor(self._headers)
        self._error = Failures(f"{PROVIDER} ({self.model}): ", self._redact)

    def with_params(self, **params: Any) -> OpenAICompatible:
        """The same endpoint and model with these request parameters added or replaced."""
        clash = _RESERVED & params.keys()
        if clash:
            raise TypeError(f"with_params() cannot set {sorted(clash)}")
        other = copy.copy(self)
        other.params = {**self.params, **params}
        return other

    def __repr__(self) -> str:
        return f"OpenAICompatible(base_url={self.base_url!r}, model={self.model!r}, stream={self.stream})"

    def __call__(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> Awaitable[Completion] | AsyncIterator[str | Completion]:
        body: dict[str, Any] = {"model": self.model, "messages": messages, **self.params}
        if tools:
            body["tools"] = tools
        if self.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
            return self._streamed(body)
        return self._complete(body)

    # -- one call ------------------------------------------------------------

    async def _complete(self, body: dict[str, Any]) -> Completion:
        budget = Budget(time.monotonic(), self.deadline)
        async with self._client() as client:
            while True:
                response = await self._send(client, body, budget, stream=True)
                try:
                    raw = b"".join([chunk async for chunk in self._body(response, budget)])
                    break
                except httpx.HTTPError as exc:  # the connection dropped or stalled mid-body
                    failure = self._error.transport(exc, "reading the response")
                except ProviderError as exc:  # a limit, the deadline, a body that does not decode
                    if not exc.retryable:
                        raise self._error(str(exc), status=exc.status) from None
                    failure = self._error(f"reading the response: {exc}", retryable=True)
                finally:
                    await response.aclose()
                await self._pause(failure, None, budget)
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            text = raw[:4096].decode(errors="replace")
            problem = "nested too deeply" if isinstance(exc, RecursionError) else "not JSON"
            raise self._error(f"response is {problem}: ", detail=text, limit=200, quote=True) from None
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
        budget = Budget(time.monotonic(), self.deadline)
        # The client and response are context managers so that cancelling the
        # task, or closing this generator early, closes the connection.
        async with self._client() as client:
            while True:
                response = await self._send(client, body, budget, stream=True)
                state = StreamState()
                try:
                    async for event in aiter_events(self._body(response, budget), self.max_line_bytes):
                        if (delta := state.feed(event, self._error)) is not None:
                            # shown as it comes; a key split across two deltas is caught
                            # only in the message kept (``_completion``)
                            yield self._redact.credentials(delta)
                        if state.done:
                            break
                    break
                except httpx.HTTPError as exc:  # the connection dropped or stalled
                    failure = self._error.transport(
                        exc, f"stream interrupted after {len(state.text)} text chunks", bool(state.text)
                    )
                except ProviderError as exc:  # a limit, the deadline, a body that does not decode
                    if not exc.retryable:
                        raise self._error(str(exc), status=exc.status) from None
                    failure = self._error(
                        f"stream interrupted after {len(state.text)} text chunks: {exc}",
                        retryable=not state.text,
                    )
                finally:
                    await response.aclose()
                # Only when nothing reached the caller yet: a restart is then invisible.
                await self._pause(failure, None, budget)
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

    # -- HTTP and retries ----------------------------------------------------

    @contextlib.asynccontextmanager
    async def _client(self) -> AsyncIterator[httpx.AsyncClient]:
        # A client per call: an AsyncClient is bound to the event loop that
        # first used it, and callers may run each call under asyncio.run().
        client = httpx.AsyncClient(timeout=self._timeout, transport=self._transport)
        try:
            yield client
        finally:
            if self._transport is None:  # a transport passed in is the caller's to close
                await client.aclose()

    async def _send(
        self, client: httpx.AsyncClient, body: dict[str, Any], budget: Budget, *, stream: bool = False
    ) -> httpx.Response:
        """POST until a 2xx arrives, retrying what is worth retrying.

        Returns the open response; with ``stream=True`` its body is not read yet
        and the caller must close it.
        """
        try:
            request = client.build_request("POST", self.url, json=body, headers=self._headers)
        except (httpx.InvalidURL, httpx.HTTPError) as exc:
            raise self._error(f"cannot POST {self.url}: {type(exc).__name__}: {exc}") from None
        while True:
            wait: float | None = None
            try:
                response = await self._within(budget, client.send(request, stream=stream))
            except httpx.HTTPError as exc:
                failure = self._error.transport(exc, f"POST {self.url}")
            else:
                if response.is_success:
                    return response
                try:
                    text = await self._error_body(response, budget)
                finally:
                    await response.aclose()
                status = response.status_code
                retryable = status in RETRYABLE_STATUS or status >= 500
                failure = self._error(
                    f"HTTP {status} from POST {self.url}: ",
                    detail=error_text(text),
                    status=status,
                    retryable=retryable,
                )
                wait = retry_after(response.headers)
            await self._pause(failure, wait, budget)

    async def _body(
        self, response: httpx.Response, budget: Budget, limit: int | None = None
    ) -> AsyncIterator[bytes]:
        """The decoded body, chunk by chunk, each read within what is left of the deadline.

        More than ``limit`` bytes (default ``max_response_bytes``) raise, unless
        ``limit`` was given: then the body is cut there.
        """
        cap = self.max_response_bytes if limit is None else limit
        try:
            async for chunk in decoded(
                response, lambda step: self._within(budget, step), cap, limit is not None
            ):
                yield chunk
        except ProviderError as e:
            raise self._error(str(e), retryable=e.retryable) from None

    async def _error_body(self, response: httpx.Response, budget: Budget) -> str:
        """The first bytes of an error response, as text; a body that cannot be read is "(unreadable)"."""
        try:
            data = b"".join([c async for c in self._body(response, budget, _ERROR_BODY_BYTES)])
        except (ProviderError, httpx.HTTPError):
            return "(unreadable body)"
        return data.decode(response.encoding or "utf-8", errors="replace")

    async def _within(self, budget: Budget, awaitable: Awaitable[Any]) -> Any:
        """Await ``awaitable``, or raise the deadline's ProviderError when the call's time is up."""
        try:
            async with asyncio.timeout(max(0.0, budget.remaining())):
                return await awaitable
        except TimeoutError:
            raise self._deadline_error(budget, "") from None

    def _deadline_error(self, budget: Budget, why: str) -> ProviderError:
        """The call's deadline is up (``attempts`` counts the failed ones, so a running one is +1)."""
        attempts = max(budget.attempts, 1) if why else budget.attempts + 1
        return self._error(
            f"deadline of {self.deadline:g}s for the whole call exceeded after {attempts} attempt(s){why}"
        )

    async def _pause(self, failure: ProviderError, wait: float | None, budget: Budget) -> None:
        """Sleep before the next attempt, or raise ``failure`` when it must not be retried."""
        budget.attempts += 1
        if not failure.retryable:
            raise failure
        if wait is None:  # full jitter: anywhere in [0, base * 2^n], capped
            wait = _random.uniform(0, min(_BACKOFF_CAP, _BACKOFF_BASE * 2 ** (budget.attempts - 1)))
        elapsed = time.monotonic() - budget.started
        if budget.attempts > self.max_retries or elapsed + wait > self.max_retry_time:
            raise ProviderError(
                f"{failure} (gave up after {budget.attempts} attempt(s) in "
                f"{elapsed:.1f}s; next wait would be {wait:.1f}s)",
                status=failure.status,
                retryable=True,
            )
        if wait >= budget.remaining():
            raise self._deadline_error(budget, f"; next wait would be {wait:.1f}s after: {failure}")
        await _sleep(wait)

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
        completion = Completion(
            message,
            model=model or self.model,
            provider=PROVIDER,
            params=dict(self.params),
            finish_reason=finish,
            usage=dict(usage) if isinstance(usage, dict) else {},
            latency_ms=round((time.monotonic() - started) * 1000, 3),
        )
        if (problem := completion_problem(completion)) is not None:
            raise self._error(f"the reply cannot be stored: {problem}", raw=raw())
        return completion
