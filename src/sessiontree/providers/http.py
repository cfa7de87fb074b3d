"""The HTTP side every model adapter shares: one POST, retried, bounded, never leaking a key.

Contract: ``Settings`` are the keyword settings every adapter takes (``timeout``,
``max_retries``, ``max_retry_time``, ``deadline``, ``max_response_bytes``,
``max_line_bytes``, ``headers``, ``transport``), declared once: ``takes_settings``
adds them to an adapter factory's signature (``help``, ``inspect``) and
``Settings.take`` pops them from its keywords. ``endpoint(url, provider, model,
settings, ...)`` builds the ``Endpoint`` with the headers every adapter sends (checked: a
header or key with a control character is refused up front); ``HTTPAdapter`` is
the callable's shared part (endpoint, model, params, ``with_params``, repr).

``Endpoint(url, headers, label, settings)`` holds what one adapter sends to
one URL. ``await endpoint.read(body)`` POSTs ``body`` and returns the whole
decoded response (bytes) and the call's ``Budget``; ``endpoint.events(body,
new_state, budget)`` POSTs it and yields the text deltas a ``StreamFolder``
returns for each SSE event, then the folder itself. Both give the same
guarantees, written once here:

- connect errors, timeouts, dropped connections, bad encodings, 408, 409, 429
  and every 5xx (529 "overloaded" among them) are retried with exponential
  backoff and full jitter, or after ``retry-after-ms`` / ``Retry-After``, up to
  ``max_retries`` retries and ``max_retry_time`` seconds; a stream is retried
  only while no text has reached the caller;
- ``deadline`` bounds the whole call (several POSTs may share one ``Budget``),
  ``timeout`` one read; ``max_response_bytes`` a body or stream after
  decompression (``body.decoded``), ``max_line_bytes`` one SSE line;
- every failure is a ``ProviderError`` built by ``Failures``: credentials in
  the headers never appear in it, nor in a text delta shown.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import inspect
import json
import os
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, Self, TypeVar

import httpx

from ..errors import ProviderError
from ..model import Completion, completion_problem
from ..redact import Redactor, check_header
from .body import ACCEPT_ENCODING, decoded
from .failures import Failures
from .reply import error_text
from .retry import Budget, retry_after
from .sse import Event, aiter_events

RETRYABLE_STATUS = frozenset({408, 409, 429})  # and every 5xx
_BACKOFF_BASE, _BACKOFF_CAP = 0.5, 8.0
DEFAULT_DEADLINE = 600.0  # seconds for a whole call, retries included
DEFAULT_MAX_RESPONSE_BYTES = 32 * 2**20  # one response body or stream, decoded
DEFAULT_MAX_LINE_BYTES = 4 * 2**20  # one SSE line
_ERROR_BODY_BYTES = 64 * 1024  # what is read of an error response; the rest is dropped

# Module-level hooks so tests can make retries instant and deterministic.
_sleep = asyncio.sleep
_random = random.Random()


class StreamFolder(Protocol):
    """What ``Endpoint.events`` folds a stream into (one per attempt)."""

    text: list[str]  # the text deltas returned so far: once there are any, no retry
    done: bool  # the stream said it is complete: stop reading

    def feed(self, event: Event, error: Failures) -> str | None: ...


S = TypeVar("S", bound=StreamFolder)
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Settings:
    """The HTTP settings of an adapter (see the module docstring): ``timeout`` per read,
    ``deadline`` for a whole call, retries, size limits, extra ``headers``, and a
    ``transport`` (a test's, say) that the caller closes."""

    timeout: float | httpx.Timeout = 60.0
    max_retries: int = 4
    max_retry_time: float = 60.0
    deadline: float = DEFAULT_DEADLINE
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    headers: Mapping[str, str] | None = None
    transport: httpx.AsyncBaseTransport | None = None

    @classmethod
    def take(cls, keywords: dict[str, Any]) -> Settings:
        """The settings among an adapter factory's ``keywords``, removed from them (what is
        left are request parameters)."""
        return cls(**{f.name: keywords.pop(f.name) for f in dataclasses.fields(cls) if f.name in keywords})


def takes_settings(factory: F) -> F:
    """``factory``, an adapter factory ending in ``**params``, shown with the ``Settings``
    keywords before them, as if it declared each (it takes them with ``Settings.take``)."""
    signature = inspect.signature(factory)
    *named, rest = signature.parameters.values()
    settings = [
        inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=f.type)
        for f in dataclasses.fields(Settings)
    ]
    factory.__signature__ = signature.replace(parameters=[*named, *settings, rest])  # type: ignore[attr-defined]
    return factory


def api_key(given: str | None, env: str | None) -> str | None:
    """The key an adapter sends: ``given``, else the variable named ``env``, else none."""
    if given is None and env:
        return os.environ.get(env) or None
    return given


def refuse_reserved(name: str, reserved: frozenset[str], params: Mapping[str, Any]) -> None:
    """A ``TypeError`` when a factory's request parameters name a field it sets itself."""
    clash = reserved & params.keys()
    if clash:
        raise TypeError(f"{name}() sets {sorted(clash)} itself; do not pass them")


BEARER = ("Authorization", "Bearer ")  # how the OpenAI APIs take a key


def endpoint(
    url: str,
    provider: str,
    model: str,
    settings: Settings,
    *,
    stream: bool,
    key: str | None,
    auth: tuple[str, str] = BEARER,
    fixed: Mapping[str, str] | None = None,
) -> Endpoint:
    """The ``Endpoint`` of ``provider``'s adapter for ``model``: what it accepts (an event
    stream or JSON), its ``fixed`` headers, the caller's ``settings.headers``, and ``key``
    (no key, no header) as ``auth`` says, ``(header, prefix)``, replacing any given one."""
    sent = httpx.Headers(
        {
            "Accept": "text/event-stream" if stream else "application/json",
            "Accept-Encoding": ACCEPT_ENCODING,  # what body.Inflater decodes
            **(fixed or {}),
        }
    )
    for name, value in (settings.headers or {}).items():
        check_header(f"the {name} header", value)
    sent.update(settings.headers or {})
    if key:
        check_header("the API key", key)
        header, prefix = auth
        sent[header] = prefix + key
    return Endpoint(url, sent, f"{provider} ({model}): ", settings)


class HTTPAdapter:
    """What each adapter's callable shares: its endpoint, model, stream flag and request
    parameters, ``with_params`` and the repr (never a key). Holds no connection between
    calls; a subclass names its ``provider`` and the request fields it sets itself."""

    provider = ""  # recorded in a run's recipe
    reserved: frozenset[str] = frozenset()  # request fields with_params may not set

    def __init__(self, endpoint: Endpoint, base_url: str, model: str, stream: bool, params: dict[str, Any]):
        self._endpoint, self._error, self._redact = endpoint, endpoint.error, endpoint.redact
        self.base_url, self.url, self.model, self.stream = base_url, endpoint.url, model, stream
        self.params = dict(params)

    @property
    def deadline(self) -> float:
        return self._endpoint.deadline

    def with_params(self, **params: Any) -> Self:
        """The same endpoint and model with these request parameters added or replaced."""
        clash = self.reserved & params.keys()
        if clash:
            raise TypeError(f"with_params() cannot set {sorted(clash)}")
        other = copy.copy(self)
        other.params = {**self.params, **params}
        return other

    def _reply(
        self,
        message: dict[str, Any],
        *,
        model: Any,
        params: dict[str, Any],
        finish: Any,
        usage: dict[str, Any],
        started: float,
        raw: Callable[[], str],
    ) -> Completion:
        """The Completion of a reply (timed from ``started``), or the ProviderError (``raw()``
        attached) when it cannot be stored (``model.completion_problem``)."""
        completion = Completion(
            message,
            model=model or self.model,
            provider=self.provider,
            params=params,
            finish_reason=finish,
            usage=usage,
            latency_ms=round((time.monotonic() - started) * 1000, 3),
        )
        if (problem := completion_problem(completion)) is not None:
            raise self._error(f"the reply cannot be stored: {problem}", raw=raw())
        return completion

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(base_url={self.base_url!r}, model={self.model!r}, stream={self.stream})"
        )


def failed(error: Exception, stream: bool) -> Any:
    """A call that raises ``error`` when awaited, or when iterated for a streaming one."""
    return _raise_streamed(error) if stream else _raise_now(error)


async def _raise_now(error: Exception) -> Completion:
    raise error


async def _raise_streamed(error: Exception) -> AsyncIterator[str | Completion]:
    raise error
    yield ""  # pragma: no cover - makes this an async generator


class Folding(Generic[S]):
    """One streamed call (``Endpoint.fold``): iterating it yields the text deltas; after,
    ``state`` is the folder of the attempt that got through."""

    def __init__(self, events: AsyncIterator[str | S], state: S, budget: Budget) -> None:
        self._events, self.state, self.budget = events, state, budget

    async def __aiter__(self) -> AsyncIterator[str]:
        async for item in self._events:
            if isinstance(item, str):
                yield item
            else:
                self.state = item


class Endpoint:
    def __init__(self, url: str, headers: httpx.Headers, label: str, settings: Settings) -> None:
        self.url, self.headers = url, headers
        self.max_retries, self.max_retry_time = settings.max_retries, settings.max_retry_time
        self.deadline = float(settings.deadline)
        self.max_response_bytes, self.max_line_bytes = settings.max_response_bytes, settings.max_line_bytes
        timeout = settings.timeout
        self.timeout = timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout)
        self.transport = settings.transport
        # Every credential, scrubbed from every error message and every reply kept.
        self.redact = Redactor(headers)
        self.error = Failures(label, self.redact)

    def budget(self) -> Budget:
        return Budget(time.monotonic(), self.deadline)

    # -- whole bodies and streams --------------------------------------------------

    async def read(self, body: dict[str, Any], budget: Budget | None = None) -> tuple[bytes, Budget]:
        """POST ``body``; the whole decoded 2xx body, retried as the module docstring says."""
        budget = budget or self.budget()
        async with self.client() as client:
            while True:
                response = await self.send(client, body, budget, stream=True)
                try:
                    return b"".join([chunk async for chunk in self.body(response, budget)]), budget
                except httpx.HTTPError as exc:  # the connection dropped or stalled mid-body
                    failure = self.error.transport(exc, "reading the response")
                except ProviderError as exc:  # a limit, the deadline, a body that does not decode
                    if not exc.retryable:
                        raise self.error(str(exc), status=exc.status) from None
                    failure = self.error(f"reading the response: {exc}", retryable=True)
                finally:
                    await response.aclose()
                await self.pause(failure, None, budget)

    def parse(self, raw: bytes) -> Any:
        """A body as JSON, or the ProviderError that quotes it."""
        try:
            return json.loads(raw)
        except (ValueError, RecursionError) as exc:
            text = raw[:4096].decode(errors="replace")
            problem = "nested too deeply" if isinstance(exc, RecursionError) else "not JSON"
            raise self.error(f"response is {problem}: ", detail=text, limit=200, quote=True) from None

    def fold(
        self, body: dict[str, Any], new_state: Callable[[], S], budget: Budget | None = None
    ) -> Folding[S]:
        """``events`` as an adapter reads them: iterate for the text deltas, then read
        ``.state``, the folder of the attempt that got through (``.budget``: the call's)."""
        budget = budget or self.budget()
        return Folding(self.events(body, new_state, budget), new_state(), budget)

    async def events(
        self, body: dict[str, Any], new_state: Callable[[], S], budget: Budget
    ) -> AsyncIterator[str | S]:
        """POST ``body`` and fold its stream: each text delta (credentials scrubbed), then the
        folder of the attempt that got through. Whether that stream was complete is the caller's call."""
        # The client and response are context managers so that cancelling the
        # task, or closing this generator early, closes the connection.
        async with self.client() as client:
            while True:
                response = await self.send(client, body, budget, stream=True)
                state = new_state()
                try:
                    async for event in aiter_events(self.body(response, budget), self.max_line_bytes):
                        if (delta := state.feed(event, self.error)) is not None:
                            # shown as it comes; a key split across two deltas is caught
                            # only in the message kept
                            yield self.redact.credentials(delta)
                        if state.done:
                            break
                    break
                except httpx.HTTPError as exc:  # the connection dropped or stalled
                    failure = self.error.transport(
                        exc, f"stream interrupted after {len(state.text)} text chunks", bool(state.text)
                    )
                except ProviderError as exc:  # a limit, the deadline, a body that does not decode
                    if not exc.retryable:
                        raise self.error(str(exc), status=exc.status) from None
                    failure = self.error(
                        f"stream interrupted after {len(state.text)} text chunks: {exc}",
                        retryable=not state.text,
                    )
                finally:
                    await response.aclose()
                # Only when nothing reached the caller yet: a restart is then invisible.
                await self.pause(failure, None, budget)
        yield state

    # -- HTTP and retries ----------------------------------------------------------

    @contextlib.asynccontextmanager
    async def client(self) -> AsyncIterator[httpx.AsyncClient]:
        # A client per call: an AsyncClient is bound to the event loop that
        # first used it, and callers may run each call under asyncio.run().
        client = httpx.AsyncClient(timeout=self.timeout, transport=self.transport)
        try:
            yield client
        finally:
            if self.transport is None:  # a transport passed in is the caller's to close
                await client.aclose()

    async def send(
        self, client: httpx.AsyncClient, body: dict[str, Any], budget: Budget, *, stream: bool = False
    ) -> httpx.Response:
        """POST until a 2xx arrives, retrying what is worth retrying.

        Returns the open response; with ``stream=True`` its body is not read yet
        and the caller must close it.
        """
        try:
            request = client.build_request("POST", self.url, json=body, headers=self.headers)
        except (httpx.InvalidURL, httpx.HTTPError) as exc:
            raise self.error(f"cannot POST {self.url}: {type(exc).__name__}: {exc}") from None
        while True:
            wait: float | None = None
            try:
                response = await self.within(budget, client.send(request, stream=stream))
            except httpx.HTTPError as exc:
                failure = self.error.transport(exc, f"POST {self.url}")
            else:
                if response.is_success:
                    return response
                try:
                    text = await self.error_body(response, budget)
                finally:
                    await response.aclose()
                status = response.status_code
                retryable = status in RETRYABLE_STATUS or status >= 500
                failure = self.error(
                    f"HTTP {status} from POST {self.url}: ",
                    detail=error_text(text),
                    status=status,
                    retryable=retryable,
                )
                wait = retry_after(response.headers)
            await self.pause(failure, wait, budget)

    async def body(
        self, response: httpx.Response, budget: Budget, limit: int | None = None
    ) -> AsyncIterator[bytes]:
        """The decoded body, chunk by chunk, each read within what is left of the deadline.

        More than ``limit`` bytes (default ``max_response_bytes``) raise, unless
        ``limit`` was given: then the body is cut there.
        """
        cap = self.max_response_bytes if limit is None else limit
        try:
            async for chunk in decoded(
                response, lambda step: self.within(budget, step), cap, limit is not None
            ):
                yield chunk
        except ProviderError as e:
            raise self.error(str(e), retryable=e.retryable) from None

    async def error_body(self, response: httpx.Response, budget: Budget) -> str:
        """The first bytes of an error response, as text; a body that cannot be read is "(unreadable)"."""
        try:
            data = b"".join([c async for c in self.body(response, budget, _ERROR_BODY_BYTES)])
        except (ProviderError, httpx.HTTPError):
            return "(unreadable body)"
        return data.decode(response.encoding or "utf-8", errors="replace")

    async def within(self, budget: Budget, awaitable: Awaitable[Any]) -> Any:
        """Await ``awaitable``, or raise the deadline's ProviderError when the call's time is up."""
        try:
            async with asyncio.timeout(max(0.0, budget.remaining())):
                return await awaitable
        except TimeoutError:
            raise self.deadline_error(budget, "") from None

    def deadline_error(self, budget: Budget, why: str) -> ProviderError:
        """The call's deadline is up (``attempts`` counts the failed ones, so a running one is +1)."""
        attempts = max(budget.attempts, 1) if why else budget.attempts + 1
        return self.error(
            f"deadline of {self.deadline:g}s for the whole call exceeded after {attempts} attempt(s){why}"
        )

    async def pause(self, failure: ProviderError, wait: float | None, budget: Budget) -> None:
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
            raise self.deadline_error(budget, f"; next wait would be {wait:.1f}s after: {failure}")
        await _sleep(wait)
