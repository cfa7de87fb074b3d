"""The adapter against a hostile server (``tests/hostile_server.py``): it must lose nothing and crash nothing.

Each test is one attack of issue 13; docs/reliability.md lists them.
"""

from __future__ import annotations

import asyncio
import time
import tracemalloc
from typing import Any

import pytest

from sessiontree.errors import ProviderError
from sessiontree.model import Completion
from sessiontree.providers import openai as openai_mod
from sessiontree.providers import openai_compatible
from sessiontree.providers.sse import iter_events

from hostile_server import HostileServer

MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def hostile():
    server = HostileServer()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def no_env_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def fails(call: Any) -> ProviderError:
    """Run one call, streamed or not; it must raise ProviderError and return no Completion."""
    seen: list[Any] = []

    async def go():
        if not call.stream:
            seen.append(await call(MESSAGES))
        else:
            async for item in call(MESSAGES):
                seen.append(item)

    with pytest.raises(ProviderError) as info:
        asyncio.run(go())
    assert not any(isinstance(i, Completion) for i in seen)
    return info.value


# -- 1. a deadline for the whole call ---------------------------------------------------


@pytest.mark.parametrize(("mode", "stream"), [("trickle", False), ("ping", True)])
def test_a_trickling_server_hits_the_deadline(hostile, mode, stream):
    call = openai_compatible(hostile.url(mode), "m", stream=stream, timeout=5, deadline=1.2)
    started = time.monotonic()
    error = fails(call)
    assert time.monotonic() - started < 3
    assert "deadline of 1.2s for the whole call exceeded" in str(error)
    assert not error.retryable


def test_the_deadline_covers_retry_waits(monkeypatch):
    import httpx

    transport = httpx.MockTransport(lambda request: httpx.Response(503, headers={"retry-after": "0.4"}))
    call = openai_compatible("http://llm.test/v1", "m", transport=transport, deadline=1.0, max_retries=50)
    started = time.monotonic()
    error = fails(call)
    assert 0.7 < time.monotonic() - started < 1.5
    assert "deadline of 1s for the whole call exceeded after 3 attempt(s)" in str(error)
    assert "HTTP 503" in str(error)


# -- 2. size limits ----------------------------------------------------------------------


@pytest.mark.parametrize("limit", [2**20, None], ids=["1MiB", "default"])
def test_an_endless_stream_stops_at_max_response_bytes(hostile, limit):
    kwargs = {} if limit is None else {"max_response_bytes": limit}
    call = openai_compatible(hostile.url("endless"), "m", stream=True, deadline=10, **kwargs)
    error = fails(call)
    expected = limit or openai_mod.DEFAULT_MAX_RESPONSE_BYTES
    assert f"the response is larger than max_response_bytes ({expected} bytes)" in str(error)
    assert not error.retryable


def test_a_gzip_bomb_is_never_inflated_past_the_limit(hostile):
    tracemalloc.start()
    try:
        error = fails(openai_compatible(hostile.url("bomb"), "m", max_response_bytes=2**20))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "max_response_bytes (1048576 bytes)" in str(error)
    assert peak < 8 * 2**20  # the bomb inflates to 64 MB


def test_an_endless_line_stops_at_max_line_bytes(hostile):
    call = openai_compatible(hostile.url("longline"), "m", stream=True, max_line_bytes=2**20, deadline=10)
    error = fails(call)
    assert "an SSE line is longer than max_line_bytes (1048576 bytes)" in str(error)


def test_lines_are_split_in_linear_time():
    started = time.monotonic()
    events = list(iter_events([b"data: "] + [b"a" * 4096] * 4096 + [b"\n\n"]))
    assert time.monotonic() - started < 1.5  # 16 MB; it took 30 s when each chunk rescanned the tail
    assert len(events) == 1 and len(events[0].data) == 4096 * 4096
    with pytest.raises(ProviderError, match="max_line_bytes"):
        list(iter_events([b"data: "] + [b"a" * 4096] * 100, max_line_bytes=10_000))
