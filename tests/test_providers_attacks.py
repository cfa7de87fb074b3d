"""The adapter against a hostile server (``tests/hostile_server.py``): it must lose nothing and crash nothing.

Each test is one attack of issue 13; docs/reliability.md lists them.
"""

from __future__ import annotations

import asyncio
import json
import time
import tracemalloc
from typing import Any

import httpx
import pytest

from sessiontree import Final, Store, run
from sessiontree.errors import ProviderError
from sessiontree.model import Completion
from sessiontree.providers import openai as openai_mod
from sessiontree.providers import openai_compatible
from sessiontree.providers.sse import iter_events

from hostile_server import HostileServer

pytestmark = pytest.mark.usefixtures("no_env_key")  # an API key in the environment is never used

MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def hostile():
    server = HostileServer()
    yield server
    server.stop()


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


def test_the_deadline_covers_retry_waits():
    transport = httpx.MockTransport(lambda request: httpx.Response(503, headers={"retry-after": "0.4"}))
    call = openai_compatible("http://llm.test/v1", "m", transport=transport, deadline=1.0, max_retries=50)
    started = time.monotonic()
    error = fails(call)
    assert 0.7 < time.monotonic() - started < 1.5
    assert "deadline of 1s for the whole call exceeded after 3 attempt(s)" in str(error)
    assert "HTTP 503" in str(error)


# -- 2. size limits ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "limit", [2**20, pytest.param(None, marks=pytest.mark.slow)], ids=["1MiB", "default"]
)  # the default reads 32 MiB: about a second alone, more on a busy machine
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


# -- 3. the API key never leaks -----------------------------------------------------------

KEY = "sk-proj-a1b2c3/d4e5f6+g7h8i9/j0k1l2m3n4o5p6q7r8s9"


def key_fragments(text: str) -> list[str]:
    """Every 8-character piece of KEY found in ``text``."""
    return [KEY[i : i + 8] for i in range(len(KEY) - 7) if KEY[i : i + 8] in text]


@pytest.mark.parametrize("mode", ["echo-long", "echo-escaped"])
def test_an_echoed_key_is_redacted_whole(hostile, mode):
    error = fails(openai_compatible(hostile.url(mode), "m", api_key=KEY, max_retries=0))
    assert error.status == 401 and "[redacted]" in str(error)
    assert key_fragments(str(error)) == [] and key_fragments(str(error).replace("\\/", "/")) == []


def test_an_echoed_key_reaches_neither_the_error_node_nor_the_file(hostile, tmp_path):
    store = Store(tmp_path / "s.db")
    session = store.create_session("leak")
    session.append({"role": "user", "content": "hi"})
    call = openai_compatible(hostile.url("echo-long"), "m", api_key=KEY, max_retries=0)
    steps = list(run(store, session, call=call))
    assert steps[-1].reason == "error" and steps[-1].node.kind == "error"
    assert "Incorrect API key provided" in steps[-1].node.payload["message"]
    store.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert [f for f in key_fragments(raw.decode("latin-1"))] == []


@pytest.mark.parametrize("bad", ["\r", "\n", "\x00", "\t"])
def test_a_key_with_a_control_character_is_refused_up_front(bad):
    with pytest.raises(ValueError) as info:
        openai_compatible("http://llm.test/v1", "m", api_key=KEY + bad)
    assert f"U+{ord(bad):04X}" in str(info.value) and "API key" in str(info.value)
    assert key_fragments(str(info.value)) == []
    with pytest.raises(ValueError, match="the X-Api-Key header contains a control character"):
        openai_compatible("http://llm.test/v1", "m", headers={"X-Api-Key": KEY + bad})


def test_a_header_value_never_reaches_an_error():
    def refuse(request):
        raise httpx.LocalProtocolError(f"Illegal header value b'Bearer {KEY}\\r'")

    call = openai_compatible("http://llm.test/v1", "m", api_key=KEY, transport=httpx.MockTransport(refuse))
    error = fails(call)
    assert "LocalProtocolError" in str(error) and key_fragments(str(error)) == []
    assert "Bearer" not in str(error)


# -- 4. every transport failure is a ProviderError ----------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_a_bad_gzip_body_is_a_retried_provider_error(hostile, sleeps, stream):
    error = fails(openai_compatible(hostile.url("badgzip"), "m", stream=stream, max_retries=2))
    assert "the body is not valid gzip" in str(error) and "gave up after 3 attempt(s)" in str(error)
    assert error.retryable and len(sleeps) == 2


@pytest.mark.parametrize(
    ("exc", "retried"),
    [
        (httpx.DecodingError("bad gzip"), True),
        (httpx.ProxyError("proxy hiccup"), True),
        (httpx.ReadError("reset"), True),
        (httpx.UnsupportedProtocol("no such scheme"), False),
        (httpx.TooManyRedirects("loop"), False),
        (httpx.LocalProtocolError("bad header"), False),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else str(v),
)
def test_every_httpx_failure_is_a_provider_error(sleeps, exc, retried):
    def fail(request):
        raise exc

    call = openai_compatible("http://llm.test/v1", "m", transport=httpx.MockTransport(fail), max_retries=1)
    error = fails(call)
    assert type(exc).__name__ in str(error) and error.__cause__ is None and error.__context__ is None
    assert len(sleeps) == (1 if retried else 0)


def test_a_malformed_base_url_is_a_provider_error():
    error = fails(openai_compatible("http://[::1/v1", "m", max_retries=0))
    assert "InvalidURL" in str(error) or "UnsupportedProtocol" in str(error)


# -- 5. odd replies never crash the loop or poison a branch -------------------------------


def echo(text: str = "") -> str:
    """Echo."""
    return text


def good_call(messages, tools):
    return {"role": "assistant", "content": "fine"}


def assert_error_then_branch_still_runs(store, session, steps, needle: str) -> None:
    final = steps[-1]
    assert isinstance(final, Final) and final.reason == "error", steps
    node = final.node
    assert node.kind == "error" and needle in node.payload["raw"] and len(node.payload["raw"]) <= 2000
    assert store.verify().ok
    again = list(run(store, session, call=good_call, tools=[echo]))
    assert again[-1].reason == "completed" and store.verify().ok


@pytest.mark.parametrize(
    ("mode", "needle"),
    [
        ("model-object", '"name": "x"'),
        ("finish-object", '"a": 1'),
        ("id-list", '["a", "b"]'),
        ("duplicate-ids", "call_1"),
        ("content-object", '"text": "hi"'),
        ("calls-object", '"tool_calls": {"id": "x"}'),
    ],
)
def test_an_odd_reply_from_the_server_becomes_an_error_node(hostile, tmp_path, mode, needle):
    store = Store(tmp_path / "s.db")
    session = store.create_session("odd")
    session.append({"role": "user", "content": "hi"})
    call = openai_compatible(hostile.url(f"reply-{mode}"), "m", max_retries=0)
    steps = list(run(store, session, call=call, tools=[echo]))
    assert (
        "ProviderError" in steps[-1].error
        and "cannot be stored" in steps[-1].error
        or "shape" in steps[-1].error
    )
    assert_error_then_branch_still_runs(store, session, steps, needle)


CALL = {"type": "function", "function": {"name": "echo", "arguments": "{}"}}


@pytest.mark.parametrize(
    ("reply", "needle"),
    [
        (Completion({"role": "assistant", "content": "hi"}, model={"name": "x"}), '"name": "x"'),
        (Completion({"role": "assistant", "content": "hi"}, finish_reason=["stop"]), '["stop"]'),
        (Completion({"role": "assistant", "content": "hi"}, usage=[1]), "[1]"),
        ({"role": "assistant", "content": None, "tool_calls": [{**CALL, "id": ["a"]}]}, '["a"]'),
        (
            {"role": "assistant", "content": None, "tool_calls": [{**CALL, "id": "d"}, {**CALL, "id": "d"}]},
            '"d"',
        ),
        ({"role": "assistant", "content": 7}, "7"),
        ({"role": "assistant", "content": None, "tool_calls": "echo"}, '"echo"'),
    ],
    ids=["model", "finish_reason", "usage", "id-list", "duplicate-ids", "content", "calls-string"],
)
def test_an_odd_reply_from_any_call_becomes_an_error_node(tmp_path, reply, needle):
    store = Store(tmp_path / "s.db")
    session = store.create_session("odd")
    session.append({"role": "user", "content": "hi"})
    steps = list(run(store, session, call=lambda messages, tools: reply, tools=[echo]))
    assert "ModelOutputError" in steps[-1].error and "cannot be stored" in steps[-1].error
    assert_error_then_branch_still_runs(store, session, steps, needle)


@pytest.mark.parametrize(
    "delta",
    [
        {"content": {"text": "hi"}},
        {"tool_calls": [{"index": [0], "id": "a", "function": {"name": "echo", "arguments": "{}"}}]},
        {"tool_calls": [{"index": 0, "id": ["a"], "function": {"name": "echo", "arguments": "{}"}}]},
        {"tool_calls": "echo"},
    ],
    ids=["content-object", "index-list", "id-list", "calls-string"],
)
def test_an_odd_stream_is_a_provider_error(delta):
    chunk = {"model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": "stop"}]}
    body = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()
    transport = httpx.MockTransport(
        lambda request: httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})
    )
    error = fails(openai_compatible("http://llm.test/v1", "m", stream=True, transport=transport))
    assert "unexpected shape" in str(error) or "cannot be stored" in str(error)
