"""Unit tests of the OpenAI-compatible adapter and its SSE parser, over httpx.MockTransport."""

from __future__ import annotations

import asyncio
import email.utils
import json
import time
from typing import Any

import httpx
import pytest

from sessiontree.errors import ProviderError
from sessiontree.model import Completion
from sessiontree.providers import openai_compatible
from sessiontree.providers.sse import Event, iter_events

pytestmark = pytest.mark.usefixtures("no_env_key")  # an API key in the environment is never used

BASE = "http://llm.test/v1"
MESSAGES = [{"role": "user", "content": "hi"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


# -- helpers -------------------------------------------------------------------


class Server:
    """A scripted MockTransport: answers with ``replies`` in order, records requests."""

    def __init__(self, *replies: Any) -> None:
        self.replies = list(replies)
        self.requests: list[httpx.Request] = []
        self.transport = httpx.MockTransport(self._handle)

    def _handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        reply = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        if isinstance(reply, Exception):
            raise reply
        return reply

    def body(self, n: int = -1) -> dict[str, Any]:
        return json.loads(self.requests[n].content)


def ok(message: dict[str, Any], finish: str = "stop", **extra: Any) -> httpx.Response:
    return httpx.Response(
        200,
        json={
            "id": "x",
            "model": "served-model",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
            **extra,
        },
    )


def sse(*items: Any, done: bool = True, sep: str = "\n") -> bytes:
    """An SSE body: dicts become ``data:`` events, strings are sent verbatim."""
    out = []
    for item in items:
        out.append(item if isinstance(item, str) else f"data: {json.dumps(item)}{sep}{sep}")
    if done:
        out.append(f"data: [DONE]{sep}{sep}")
    return "".join(out).encode()


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> dict:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {"id": "c", "model": "served-model", "choices": choices, **extra}


def streamed(body: bytes | httpx.AsyncByteStream, status: int = 200) -> httpx.Response:
    kwargs = {"content": body} if isinstance(body, bytes) else {"stream": body}
    return httpx.Response(status, headers={"content-type": "text/event-stream"}, **kwargs)


def collect(call: Any, messages=MESSAGES, tools=None) -> tuple[list[str], Completion]:
    async def go():
        items = [item async for item in call(messages, tools)]
        return items

    items = asyncio.run(go())
    assert isinstance(items[-1], Completion)
    assert all(isinstance(i, str) for i in items[:-1])
    return items[:-1], items[-1]


def stream_error(call: Any, messages=MESSAGES) -> tuple[list[Any], ProviderError]:
    seen: list[Any] = []

    async def go():
        async for item in call(messages):
            seen.append(item)

    with pytest.raises(ProviderError) as info:
        asyncio.run(go())
    assert not any(isinstance(i, Completion) for i in seen)  # never a partial message
    return seen, info.value


# -- request shape ---------------------------------------------------------------


def test_request_body_headers_and_completion():
    server = Server(ok({"role": "assistant", "content": "hello"}))
    call = openai_compatible(
        BASE + "/",
        "m1",
        api_key="sk-test-123",
        transport=server.transport,
        temperature=0.2,
        seed=7,
        tool_choice="auto",
    )
    result = asyncio.run(call(MESSAGES, TOOLS))
    request = server.requests[0]
    assert request.method == "POST" and str(request.url) == BASE + "/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-test-123"
    assert server.body() == {
        "model": "m1",
        "messages": MESSAGES,
        "tools": TOOLS,
        "tool_choice": "auto",
        "temperature": 0.2,
        "seed": 7,
    }
    assert result.message == {"role": "assistant", "content": "hello"}
    assert result.model == "served-model" and result.provider == "openai-compatible"
    assert result.params == {"temperature": 0.2, "seed": 7, "tool_choice": "auto"}
    assert result.usage == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    assert result.finish_reason == "stop" and result.latency_ms >= 0
    assert (call.model, call.base_url, call.stream) == ("m1", BASE, False)


def test_tools_only_sent_when_non_empty_and_no_key_means_no_authorization():
    server = Server(ok({"role": "assistant", "content": "x"}))
    call = openai_compatible(BASE, "m", transport=server.transport)
    asyncio.run(call(MESSAGES, []))
    asyncio.run(call(MESSAGES))
    for request in server.requests:
        assert "tools" not in json.loads(request.content)
        assert "authorization" not in request.headers


def test_stream_request_asks_for_usage():
    server = Server(streamed(sse(chunk({"content": "a"}, "stop"))))
    call = openai_compatible(BASE, "m", stream=True, transport=server.transport)
    collect(call)
    body = server.body()
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert call.stream is True


def test_timeout_is_passed_to_httpx():
    server = Server(ok({"role": "assistant", "content": "x"}))
    asyncio.run(openai_compatible(BASE, "m", timeout=7.5, transport=server.transport)(MESSAGES))
    assert server.requests[0].extensions["timeout"] == {
        "connect": 7.5,
        "read": 7.5,
        "write": 7.5,
        "pool": 7.5,
    }


def test_reserved_params_are_refused():
    with pytest.raises(TypeError, match="messages"):
        openai_compatible(BASE, "m", messages=[])


def test_tool_calls_are_normalised():
    server = Server(
        ok(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
                    {"id": "call_b", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                ],
            },
            finish="tool_calls",
        )
    )
    result = asyncio.run(openai_compatible(BASE, "m", transport=server.transport)(MESSAGES))
    first, second = result.message["tool_calls"]
    assert first["type"] == "function" and first["id"].startswith("call_")
    assert first["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert second == {"id": "call_b", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    assert result.finish_reason == "tool_calls"


def test_error_object_in_a_200_response_raises():
    server = Server(httpx.Response(200, json={"error": {"message": "model overloaded"}}))
    with pytest.raises(ProviderError, match="model overloaded"):
        asyncio.run(openai_compatible(BASE, "m", transport=server.transport)(MESSAGES))


# -- the key -------------------------------------------------------------------------


def test_key_from_env_and_never_shown(monkeypatch):
    monkeypatch.setenv("MY_LLM_KEY", "sk-from-env-999")
    server = Server(
        httpx.Response(
            401,
            json={
                "error": {
                    "message": "Incorrect API key provided: sk-from-env-999. Header was "
                    "Authorization: Bearer sk-from-env-999"
                }
            },
        )
    )
    call = openai_compatible(BASE, "m", api_key_env="MY_LLM_KEY", transport=server.transport, temperature=0)
    assert "sk-from-env-999" not in repr(call)
    with pytest.raises(ProviderError) as info:
        asyncio.run(call(MESSAGES))
    assert server.requests[0].headers["authorization"] == "Bearer sk-from-env-999"
    error = info.value
    assert "sk-from-env-999" not in str(error) and "[redacted]" in str(error)
    assert "Incorrect API key provided" in str(error)
    assert error.status == 401 and error.retryable is False
    assert error.__cause__ is None and error.__context__ is None  # no httpx object attached
    assert len(server.requests) == 1


def test_authorization_header_passed_in_headers_is_redacted():
    server = Server(httpx.Response(403, text="denied for Authorization: Basic dXNlcjpwYXNz"))
    call = openai_compatible(
        BASE, "m", headers={"Authorization": "Basic dXNlcjpwYXNz"}, transport=server.transport
    )
    with pytest.raises(ProviderError) as info:
        asyncio.run(call(MESSAGES))
    assert "dXNlcjpwYXNz" not in str(info.value) and info.value.status == 403


def test_short_key_is_redacted_too():
    server = Server(httpx.Response(401, text="key 'k9' is not valid"))
    with pytest.raises(ProviderError) as info:
        asyncio.run(openai_compatible(BASE, "m", api_key="k9", transport=server.transport)(MESSAGES))
    assert "k9" not in str(info.value) and "[redacted]" in str(info.value)


def test_explicit_key_beats_env_and_stays_out_of_params(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    server = Server(ok({"role": "assistant", "content": "x"}))
    result = asyncio.run(openai_compatible(BASE, "m", api_key="sk-arg", transport=server.transport)(MESSAGES))
    assert server.requests[0].headers["authorization"] == "Bearer sk-arg"
    assert "sk-arg" not in json.dumps(result.params) and "sk-arg" not in repr(result)


# -- the SSE parser ----------------------------------------------------------------


def test_sse_parser_edge_cases():
    raw = [
        b"\xef\xbb\xbf: a comment\n",  # BOM, then a comment
        b"\n\n",  # keep-alive blank lines: no event
        b"event: delta\r\ndata: line one\r\ndata:line two\r\n\r\n",  # CRLF, no space
        b"data: lone cr\r\r",  # lone CR line endings
        b"data: split crlf\r",
        b"\n\r\n",  # CRLF split across chunks counts once
        b"id: 7\nretry: 10\ndata\n\n",  # field without colon: empty data line
        'data: {"t": "a\u2028b"}\n\n'.encode(),  # U+2028 is not a line break in SSE
        b"data: caf\xc3",
        b"\xa9\n\n",  # a UTF-8 character split across chunks
        b"data: [DONE]",  # no trailing newline: still delivered
    ]
    events = list(iter_events(raw))
    assert events == [
        Event("line one\nline two", "delta"),
        Event("lone cr"),
        Event("split crlf"),
        Event(""),
        Event('{"t": "a\u2028b"}'),
        Event("caf\u00e9"),
        Event("[DONE]"),
    ]


def test_stream_with_comments_keepalives_crlf_and_events():
    body = (
        b": OPENROUTER PROCESSING\r\n\r\n"
        + sse(chunk({"role": "assistant", "content": ""}), sep="\r\n", done=False)
        + b"event: message\r\n"
        + sse(chunk({"content": "Hel"}), sep="\r\n", done=False)
        + b"data:\r\n\r\n"  # empty data: a keep-alive
        + b": ping\n\n"
        + b'data: {"id": "c", "choices": [{"index": 0,\ndata: "delta": {"content": "lo"},'
        b' "finish_reason": "stop"}]}\n\n'  # one JSON object over two data lines
         + sse(done=True)
    )
    server = Server(streamed(body))
    deltas, result = collect(openai_compatible(BASE, "m", stream=True, transport=server.transport))
    assert deltas == ["Hel", "lo"]
    assert result.message == {"role": "assistant", "content": "Hello"}
    assert result.finish_reason == "stop" and result.model == "served-model"


def test_repeated_function_name_is_taken_once_and_arguments_concatenated():
    body = sse(
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": ""},
                    }
                ]
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"name": "get_weather", "arguments": '{"city"'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"name": "get_weather", "arguments": ': "Paris"}'}}]}),
        chunk({}, "tool_calls"),
    )
    server = Server(streamed(body))
    deltas, result = collect(openai_compatible(BASE, "m", stream=True, transport=server.transport))
    assert deltas == []
    assert result.message == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    }
    assert result.finish_reason == "tool_calls"


def test_parallel_tool_calls_are_assembled_by_index():
    def part(index, **fields):
        return chunk({"tool_calls": [{"index": index, **fields}]})

    body = sse(
        chunk({"role": "assistant", "content": "Checking. "}),
        part(0, id="call_a", type="function", function={"name": "get_", "arguments": ""}),
        part(1, id="call_b", type="function", function={"name": "get_time", "arguments": "{"}),
        part(0, function={"name": "weather", "arguments": '{"city":'}),
        part(1, function={"arguments": '"tz": "UTC"}'}),
        part(0, function={"arguments": ' "Oslo"}'}),
        chunk({}, "tool_calls"),
    )
    server = Server(streamed(body))
    deltas, result = collect(openai_compatible(BASE, "m", stream=True, transport=server.transport))
    assert deltas == ["Checking. "]
    calls = result.message["tool_calls"]
    assert [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("call_a", "get_weather", {"city": "Oslo"}),
        ("call_b", "get_time", {"tz": "UTC"}),
    ]


def test_usage_chunk_with_empty_choices_is_captured():
    body = sse(
        chunk({"content": "ok"}),
        chunk({}, "length"),
        chunk(None, usage={"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10}),
    )
    server = Server(streamed(body))
    _, result = collect(openai_compatible(BASE, "m", stream=True, transport=server.transport, max_tokens=1))
    assert result.usage == {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10}
    assert result.finish_reason == "length" and result.params == {"max_tokens": 1}


def test_finish_reason_without_done_is_complete():
    server = Server(streamed(sse(chunk({"content": "x"}, "stop"), done=False)))
    _, result = collect(openai_compatible(BASE, "m", stream=True, transport=server.transport))
    assert result.message["content"] == "x"


@pytest.mark.parametrize(
    "error_event",
    [
        {"error": {"message": "upstream exploded", "type": "server_error"}},
        'event: error\ndata: {"message": "upstream exploded"}\n\n',
    ],
)
def test_error_object_in_stream_raises(error_event):
    server = Server(streamed(sse(chunk({"content": "par"}), error_event)))
    seen, error = stream_error(openai_compatible(BASE, "m", stream=True, transport=server.transport))
    assert seen == ["par"] and "upstream exploded" in str(error)


def test_truncated_stream_raises():
    server = Server(streamed(sse(chunk({"content": "The answer is"}), done=False)))
    seen, error = stream_error(openai_compatible(BASE, "m", stream=True, transport=server.transport))
    assert seen == ["The answer is"] and "truncated" in str(error)


def test_malformed_json_in_stream_names_the_line():
    server = Server(streamed(sse(chunk({"content": "a"}), 'data: {"choices": [{"del\n\n')))
    _, error = stream_error(openai_compatible(BASE, "m", stream=True, transport=server.transport))
    assert "malformed JSON" in str(error) and '{"choices": [{"del' in str(error)


def test_json_nested_absurdly_deep_is_a_provider_error_not_a_recursion_error():
    deep = "[" * 200_000
    server = Server(httpx.Response(200, content=deep.encode()))
    prefix = "openai-compatible (m): "
    with pytest.raises(
        ProviderError, match=r"^openai-compatible \(m\): response is nested too deeply: '\[\[\["
    ) as info:
        asyncio.run(openai_compatible(BASE, "m", transport=server.transport)(MESSAGES))
    assert len(str(info.value)) < 300
    server = Server(streamed(sse(chunk({"content": "a"}), f"data: {deep}\n\n")))
    _, error = stream_error(openai_compatible(BASE, "m", stream=True, transport=server.transport))
    assert str(error).startswith(f"{prefix}JSON nested too deeply in stream data line: '[[[")


def test_a_key_the_server_echoes_in_a_reply_is_not_kept():
    key = "sk-live-echo/42"
    said = f"Your key is {key}; as JSON {json.dumps(key)}. Authorization: is a header name."
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": json.dumps({"k": key})}}
    server = Server(ok({"role": "assistant", "content": said, "tool_calls": [call]}))
    completion = asyncio.run(openai_compatible(BASE, "m", api_key=key, transport=server.transport)(MESSAGES))
    assert completion.message["content"] == (
        'Your key is [redacted]; as JSON "[redacted]". Authorization: is a header name.'
    )
    assert completion.message["tool_calls"][0]["function"]["arguments"] == '{"k": "[redacted]"}'
    server = Server(
        streamed(sse(chunk({"content": f"key {key} "}), chunk({"content": "end"}, finish="stop")))
    )
    deltas, completion = collect(
        openai_compatible(BASE, "m", api_key=key, stream=True, transport=server.transport)
    )
    assert deltas == ["key [redacted] ", "end"] and completion.message["content"] == "key [redacted] end"


class DroppingStream(httpx.AsyncByteStream):
    """Sends ``parts`` then fails like a dropped connection (or hangs, if ``hang``)."""

    def __init__(self, parts: list[bytes], hang: bool = False) -> None:
        self.parts, self.hang, self.closed = parts, hang, False

    async def __aiter__(self):
        for part in self.parts:
            yield part
        if self.hang:
            await asyncio.Event().wait()
        raise httpx.RemoteProtocolError("peer closed connection without sending complete body")

    async def aclose(self) -> None:
        self.closed = True


def test_dropped_stream_raises_and_is_not_retried(sleeps):
    stream = DroppingStream([sse(chunk({"content": "half"}), done=False)])
    server = Server(streamed(stream))
    seen, error = stream_error(openai_compatible(BASE, "m", stream=True, transport=server.transport))
    assert seen == ["half"] and "interrupted" in str(error) and "RemoteProtocolError" in str(error)
    assert len(server.requests) == 1 and sleeps == [] and stream.closed


def test_stream_dropped_before_any_text_is_retried(sleeps):
    dropped = DroppingStream([sse(chunk({"role": "assistant", "content": ""}), done=False)])
    server = Server(streamed(dropped), streamed(sse(chunk({"content": "whole"}, "stop"))))
    deltas, result = collect(openai_compatible(BASE, "m", stream=True, transport=server.transport))
    assert deltas == ["whole"] and result.message["content"] == "whole"
    assert len(server.requests) == 2 and len(sleeps) == 1 and dropped.closed


def test_cancellation_closes_the_connection():
    stream = DroppingStream([sse(chunk({"content": "tok"}), done=False)], hang=True)
    server = Server(streamed(stream))
    call = openai_compatible(BASE, "m", stream=True, transport=server.transport)

    async def go():
        got_first = asyncio.Event()

        async def consume():
            async for _ in call(MESSAGES):
                got_first.set()

        task = asyncio.create_task(consume())
        await asyncio.wait_for(got_first.wait(), 5)
        assert not stream.closed
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert stream.closed


# -- retries -------------------------------------------------------------------------


def test_429_retry_after_seconds_is_honoured(sleeps):
    limited = {"error": {"message": "slow down"}}
    server = Server(
        httpx.Response(429, headers={"Retry-After": "2"}, json=limited),
        httpx.Response(429, headers={"Retry-After": "3.5"}, json=limited),
        ok({"role": "assistant", "content": "finally"}),
    )
    result = asyncio.run(openai_compatible(BASE, "m", transport=server.transport)(MESSAGES))
    assert result.message["content"] == "finally"
    assert sleeps == [2.0, 3.5] and len(server.requests) == 3


def test_429_retry_after_http_date_is_honoured(sleeps):
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    server = Server(
        httpx.Response(429, headers={"Retry-After": when}), ok({"role": "assistant", "content": "ok"})
    )
    asyncio.run(openai_compatible(BASE, "m", transport=server.transport)(MESSAGES))
    assert len(sleeps) == 1 and 28.0 <= sleeps[0] <= 30.0


def test_retry_after_ms_wins_over_retry_after(sleeps):
    server = Server(
        httpx.Response(503, headers={"Retry-After": "1", "retry-after-ms": "250"}),
        ok({"role": "assistant", "content": "ok"}),
    )
    asyncio.run(openai_compatible(BASE, "m", transport=server.transport)(MESSAGES))
    assert sleeps == [0.25]


def test_400_is_not_retried_and_carries_the_server_message(sleeps):
    server = Server(
        httpx.Response(
            400,
            json={
                "error": {
                    "message": "'messages' must contain at least one message",
                    "type": "invalid_request",
                }
            },
        )
    )
    with pytest.raises(ProviderError) as info:
        asyncio.run(openai_compatible(BASE, "m", transport=server.transport)(MESSAGES))
    assert info.value.status == 400 and info.value.retryable is False
    assert "'messages' must contain at least one message" in str(info.value)
    assert len(server.requests) == 1 and sleeps == []


def test_attempts_are_bounded_and_backoff_is_jittered(sleeps):
    server = Server(httpx.Response(503, text="overloaded"))
    call = openai_compatible(BASE, "m", max_retries=3, transport=server.transport)
    with pytest.raises(ProviderError) as info:
        asyncio.run(call(MESSAGES))
    assert len(server.requests) == 4 and len(sleeps) == 3
    for n, delay in enumerate(sleeps):
        assert 0 <= delay <= 0.5 * 2**n
    assert info.value.status == 503 and info.value.retryable is True
    assert "overloaded" in str(info.value) and "gave up after 4 attempt(s)" in str(info.value)


def test_retry_after_beyond_the_time_budget_gives_up_at_once(sleeps):
    server = Server(httpx.Response(429, headers={"Retry-After": "100"}))
    call = openai_compatible(BASE, "m", max_retry_time=10, transport=server.transport)
    with pytest.raises(ProviderError, match="HTTP 429"):
        asyncio.run(call(MESSAGES))
    assert len(server.requests) == 1 and sleeps == []


def test_connect_errors_and_timeouts_are_retried(sleeps):
    server = Server(
        httpx.ConnectError("refused"), httpx.ReadTimeout("slow"), ok({"role": "assistant", "content": "up"})
    )
    result = asyncio.run(openai_compatible(BASE, "m", transport=server.transport)(MESSAGES))
    assert result.message["content"] == "up" and len(sleeps) == 2 and len(server.requests) == 3


def test_stream_start_is_retried(sleeps):
    server = Server(
        httpx.Response(502, text="bad gateway"),
        httpx.Response(408),
        streamed(sse(chunk({"content": "ok"}, "stop"))),
    )
    deltas, result = collect(openai_compatible(BASE, "m", stream=True, transport=server.transport))
    assert deltas == ["ok"] and len(server.requests) == 3 and len(sleeps) == 2


def test_no_retry_when_max_retries_is_zero(sleeps):
    server = Server(httpx.Response(500, json={"error": "boom"}))
    with pytest.raises(ProviderError, match="boom"):
        asyncio.run(openai_compatible(BASE, "m", max_retries=0, transport=server.transport)(MESSAGES))
    assert len(server.requests) == 1 and sleeps == []


def test_unreadable_retry_after_falls_back_to_backoff_and_past_dates_mean_now(sleeps):
    past = email.utils.formatdate(time.time() - 60, usegmt=True)
    server = Server(
        httpx.Response(429, headers={"Retry-After": "soon-ish"}),
        httpx.Response(429, headers={"Retry-After": past}),
        ok({"role": "assistant", "content": "ok"}),
    )
    asyncio.run(openai_compatible(BASE, "m", transport=server.transport)(MESSAGES))
    assert len(sleeps) == 2 and 0 <= sleeps[0] <= 0.5 and sleeps[1] == 0.0
