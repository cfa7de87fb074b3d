"""The adapter against a hostile server (``tests/hostile_server.py``): it must lose nothing and crash nothing.

Each test is one attack of issue 13; docs/reliability.md lists them.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from sessiontree.errors import ProviderError
from sessiontree.model import Completion
from sessiontree.providers import openai_compatible

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
