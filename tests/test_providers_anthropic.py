"""``providers.anthropic``: conversion, recorded streams (hostile server), the mock servers.

The recorded event sequences in ``fixtures/anthropic/`` stand for what neither mock
emits (signed thinking, redacted thinking, cache usage, ``pause_turn``, an ``error``
event); llmock's ``/anthropic/v1/messages`` (422 on a malformed request) and fakellm's
``/v1/messages`` serve the tool loop, the faults and the truncated stream.
"""

from __future__ import annotations

import asyncio
import json
import textwrap
import time
import uuid
from typing import Any

import httpx
import pytest

from sessiontree import Approve, Final, Store, decide, resume, run
from sessiontree.errors import ProviderError
from sessiontree.model import Completion, sendable
from sessiontree.providers import anthropic, openai_compatible
from sessiontree.providers.anthropic_blocks import UNPARSED, request_parts
from sessiontree.tools import tool

from hostile_server import HostileServer

pytestmark = pytest.mark.usefixtures("no_env_key")  # an API key in the environment is never used

try:
    from tests import servers
except ImportError:  # tests/ is not a package: pytest put it on sys.path
    import servers  # type: ignore[no-redef]

KEY = "sk-ant-api03-a1b2c3/d4e5f6+g7h8i9/j0k1l2m3n4o5p6q7"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture(scope="module")
def hostile():
    server = HostileServer()
    yield server
    server.stop()


def ask(call: Any, messages: list[dict], tools: list[dict] | None = None) -> tuple[list[str], Completion]:
    async def go():
        if not call.stream:
            return [], await call(messages, tools)
        items = [item async for item in call(messages, tools)]
        assert isinstance(items[-1], Completion) and all(isinstance(i, str) for i in items[:-1])
        return items[:-1], items[-1]

    return asyncio.run(go())


def fails(
    call: Any, messages: list[dict], tools: list[dict] | None = None
) -> tuple[list[Any], ProviderError]:
    seen: list[Any] = []

    async def go():
        if not call.stream:
            seen.append(await call(messages, tools))
        else:
            async for item in call(messages, tools):
                seen.append(item)

    with pytest.raises(ProviderError) as info:
        asyncio.run(go())
    assert not any(isinstance(i, Completion) for i in seen)
    return seen, info.value


# -- conversion ------------------------------------------------------------------------


def test_history_is_converted_to_the_messages_shape():
    history = [
        {"role": "system", "content": "Be brief."},
        {"role": "developer", "content": "Use metric units."},
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "t1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                },
                {
                    "id": "t2",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": "{city: Rome"},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "t1", "content": "sunny"},
        {
            "role": "tool",
            "tool_call_id": "t2",
            "content": "Error: invalid arguments for get_weather: not JSON",
        },
        {"role": "user", "content": "Thanks"},
    ]
    system, messages, tools = request_parts(history, [WEATHER])
    assert system == [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use metric units."}]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[1]["content"] == [
        {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "t2", "name": "get_weather", "input": {UNPARSED: "{city: Rome"}},
    ]
    results = messages[2]["content"]
    assert [b["type"] for b in results] == ["tool_result", "tool_result", "text"]
    assert "is_error" not in results[0] and results[1]["is_error"] is True
    assert tools == [
        {
            "name": "get_weather",
            "input_schema": WEATHER["function"]["parameters"],
            "description": "Current weather for a city",
        }
    ]


def test_a_message_that_cannot_be_sent_is_one_clear_error():
    call = anthropic(
        "m", base_url="http://llm.test", transport=httpx.MockTransport(lambda r: httpx.Response(500))
    )
    _, error = fails(call, [{"role": "critic", "content": "x"}])
    assert "message 0 has the role 'critic'" in str(error) and not error.retryable


def test_raw_blocks_reach_only_their_own_kind():
    signed = {"type": "thinking", "thinking": "hmm", "signature": "sig"}
    message = {
        "role": "assistant",
        "content": "hi",
        "raw": {"anthropic": {"content": [signed, {"type": "text", "text": "hi"}]}},
    }
    assert sendable([message]) == [{"role": "assistant", "content": "hi"}]
    assert sendable([message], "anthropic")[0]["raw"] == message["raw"]
    assert sendable([message], "responses") == [{"role": "assistant", "content": "hi"}]
    sent: list[dict] = []

    def server(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(200, json={"choices": [{"message": {"role": "assistant", "content": "ok"}}]})

    other = openai_compatible("http://llm.test/v1", "m", transport=httpx.MockTransport(server))
    asyncio.run(other([{"role": "user", "content": "q"}, message]))
    assert "raw" not in sent[0]["messages"][1] and "sig" not in json.dumps(sent)


def test_an_edited_call_keeps_the_thinking_and_sends_the_call_as_it_is_now():
    signed = {"type": "thinking", "thinking": "hmm", "signature": "sig"}
    kept = [signed, {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris"}}]
    edited = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "t1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Lyon"}'},
            }
        ],
        "raw": {"anthropic": {"content": kept}},
    }
    _, messages, _ = request_parts([{"role": "user", "content": "q"}, edited], None)
    assert messages[1]["content"] == [
        signed,
        {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Lyon"}},
    ]


def test_merged_assistant_messages_keep_their_thinking_blocks_first():
    signed = {"type": "thinking", "thinking": "hmm", "signature": "sig"}
    said = {"role": "assistant", "content": "One moment."}  # another provider's, say
    thought = {"role": "assistant", "content": "Sunny.", "raw": {"anthropic": {"content": [signed, TEXT]}}}
    _, messages, _ = request_parts([{"role": "user", "content": "q"}, said, thought], None)
    assert messages[1]["content"] == [signed, {"type": "text", "text": "One moment."}, TEXT]


TEXT = {"type": "text", "text": "Sunny."}
THINK = {"type": "enabled", "budget_tokens": 1024}
FOREIGN_CALL = {  # a tool call another provider made: no thinking block before it
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    ],
}


@pytest.mark.parametrize(
    ("history", "sent"),
    [
        # a tool loop under way that another provider started: the API would refuse thinking
        ([FOREIGN_CALL, {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}], False),
        # and after a new question, the turn starts afresh: thinking is sent again
        (
            [
                FOREIGN_CALL,
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
                {"role": "assistant", "content": "Sunny."},
                {"role": "user", "content": "And tomorrow?"},
            ],
            True,
        ),
    ],
    ids=["foreign-loop", "new-turn"],
)
def test_thinking_is_left_out_only_where_the_api_would_refuse_it(hostile, history, sent):
    hostile.bodies.clear()
    call = anthropic(
        "m", base_url=hostile.url("anthropic-redacted-thinking"), stream=True, max_tokens=2048, thinking=THINK
    )
    _, result = ask(call, [{"role": "user", "content": "weather?"}, *history], [WEATHER])
    (body,) = hostile.bodies
    assert ("thinking" in body) is sent and ("thinking" in result.params) is sent
    assert result.params["max_tokens"] == 2048 and call.params["thinking"] == THINK  # the call keeps it


# -- recorded streams on the hostile server ----------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_signed_thinking_is_kept_and_sent_back_verbatim_in_the_tool_loop(hostile, tmp_path, stream):
    store = Store(tmp_path / "s.db")
    session = store.create_session("think")
    session.append({"role": "user", "content": "weather in Paris?"})
    calls: list[str] = []

    @tool(idempotent=True)
    def get_weather(city: str) -> str:
        """Weather for a city."""
        calls.append(city)
        return "sunny"

    call = anthropic(
        "claude-sonnet-4-5",
        base_url=hostile.url("anthropic-thinking-tool"),
        stream=stream,
        thinking={"type": "enabled", "budget_tokens": 1024},
    )
    hostile.bodies.clear()
    steps = list(run(store, session, call=call, tools=[get_weather], max_steps=3))
    assert calls[0] == "Paris" and len(hostile.bodies) == len(calls) >= 2
    first = session.path("main")[1]
    blocks = first.payload["raw"]["anthropic"]["content"]
    assert blocks[0] == {
        "type": "thinking",
        "thinking": "The user wants the weather; call get_weather.",
        "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds",
    }
    assert first.payload["content"] == "Let me check."
    assert first.payload["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris"}'
    run_record = store.run(first.run_id)
    assert run_record.usage == {
        "input_tokens": 12,
        "cache_creation_input_tokens": 2048,
        "cache_read_input_tokens": 4096,
        "output_tokens": 87,
    }
    assert run_record.finish_reason == "tool_calls" and run_record.provider == "anthropic"
    # The second request sent the thinking block back, signature and all, in the assistant turn.
    second = hostile.bodies[1]
    assert second["messages"][1]["content"][0] == blocks[0]
    assert second["messages"][2]["content"][0]["type"] == "tool_result"
    assert second["messages"][2]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert second["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert steps[-1].reason == "max_steps" or isinstance(steps[-1], Final)
    # The cache fields are priced: 12 in, 87 out, 2048 written, 4096 read at $3/$15 per million.
    cost = session.usage().cost({"claude-sonnet-4-5": {"input": 3.0, "output": 15.0}})
    assert cost == pytest.approx(len(calls) * (12 * 3 + 87 * 15 + 2048 * 3.75 + 4096 * 0.3) / 1e6)
    store.close()


def test_redacted_thinking_and_cache_reads_are_kept(hostile):
    deltas, result = ask(
        anthropic("m", base_url=hostile.url("anthropic-redacted-thinking"), stream=True),
        [{"role": "user", "content": "hi"}],
    )
    assert deltas == ["Sunny, 21C."] and result.message["content"] == "Sunny, 21C."
    kept = result.message["raw"]["anthropic"]
    assert kept["content"][0]["type"] == "redacted_thinking" and kept["content"][0]["data"].startswith("EmwK")
    assert kept["stop_reason"] == "end_turn" and result.finish_reason == "stop"
    assert result.usage["cache_read_input_tokens"] == 6144 and result.usage["output_tokens"] == 20


def test_pause_turn_is_continued_within_one_call(hostile):
    hostile.bodies.clear()
    deltas, result = ask(
        anthropic("m", base_url=hostile.url("anthropic-pause-turn"), stream=True),
        [{"role": "user", "content": "search the weather"}],
    )
    assert len(hostile.bodies) == 2
    continued = hostile.bodies[1]["messages"][-1]
    assert continued["role"] == "assistant" and continued["content"][0]["type"] == "server_tool_use"
    assert [b["type"] for b in result.message["raw"]["anthropic"]["content"]] == ["server_tool_use", "text"]
    assert result.message["content"] == "Paris: sunny." and result.finish_reason == "stop"
    assert result.usage == {"input_tokens": 100, "output_tokens": 20}


def test_pause_turn_past_the_limit_is_recorded_as_such(hostile):
    _, result = ask(
        anthropic("m", base_url=hostile.url("anthropic-pause-turn"), stream=True, max_pause_turns=0),
        [{"role": "user", "content": "search"}],
    )
    assert result.finish_reason == "pause_turn" and result.message["content"] is None


def test_a_mid_stream_error_event_is_a_provider_error(hostile, sleeps):
    seen, error = fails(
        anthropic("m", base_url=hostile.url("anthropic-error-mid-stream"), stream=True),
        [{"role": "user", "content": "hi"}],
    )
    assert seen == ["Partial"] and "Overloaded" in str(error) and sleeps == []  # text was out: no retry


def test_an_overloaded_error_event_before_any_text_is_retried(hostile, sleeps):
    # The API may answer 200 and then overloaded_error as the stream's first event: nothing
    # was shown yet, so the call is made again (here the server always says it, so it gives up).
    hostile.bodies.clear()
    _, error = fails(
        anthropic("m", base_url=hostile.url("anthropic-overloaded-at-start"), stream=True, max_retries=2),
        [{"role": "user", "content": "hi"}],
    )
    assert len(hostile.bodies) == 3 and len(sleeps) == 2
    assert "Overloaded" in str(error) and "gave up after 3 attempt(s)" in str(error) and error.retryable


def test_a_stream_that_stops_without_a_stop_reason_is_refused(hostile, sleeps):
    # message_stop came, but no message_delta with the stop reason: what the official SDK
    # returns as stop_reason=None is an error here, never a reply that looks finished.
    seen, error = fails(
        anthropic("m", base_url=hostile.url("anthropic-no-stop-reason"), stream=True),
        [{"role": "user", "content": "hi"}],
    )
    assert seen == ["Half an answ"] and "stream ended without a stop_reason" in str(error)
    assert "truncated" in str(error) and sleeps == []  # text was shown: no retry


@pytest.mark.parametrize(("mode", "stream"), [("trickle", False), ("ping", True)])
def test_a_trickling_server_hits_the_deadline(hostile, mode, stream):
    call = anthropic("m", base_url=hostile.url(mode), stream=stream, timeout=5, deadline=1.2)
    started = time.monotonic()
    _, error = fails(call, [{"role": "user", "content": "hi"}])
    assert time.monotonic() - started < 3 and "deadline of 1.2s for the whole call exceeded" in str(error)


def test_a_flood_stops_at_max_response_bytes(hostile):
    call = anthropic("m", base_url=hostile.url("endless"), stream=True, max_response_bytes=2**20, deadline=10)
    _, error = fails(call, [{"role": "user", "content": "hi"}])
    assert "larger than max_response_bytes (1048576 bytes)" in str(error)


def test_an_echoed_key_reaches_neither_the_error_nor_the_file_nor_a_log(hostile, tmp_path, caplog):
    caplog.set_level("DEBUG")  # every logger, httpx's and httpcore's included
    store = Store(tmp_path / "s.db")
    session = store.create_session("leak")
    session.append({"role": "user", "content": "hi"})
    call = anthropic("m", base_url=hostile.url("anthropic-echo"), api_key=KEY, max_retries=0)
    assert KEY not in repr(call)
    steps = list(run(store, session, call=call))
    assert (
        steps[-1].reason == "error" and "invalid x-api-key: [redacted]" in steps[-1].node.payload["message"]
    )
    store.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir()).decode("latin-1")
    assert [KEY[i : i + 8] for i in range(len(KEY) - 7) if KEY[i : i + 8] in raw] == []
    assert "HTTP Request: POST" in caplog.text and KEY[:12] not in caplog.text  # logged, never the key


def test_a_key_echoed_into_a_reply_is_never_stored():
    def server(request: httpx.Request) -> httpx.Response:
        key = request.headers["x-api-key"]
        return httpx.Response(
            200,
            json={
                "type": "message",
                "model": "m",
                "stop_reason": "tool_use",
                "usage": {},
                "content": [
                    {"type": "thinking", "thinking": f"key {key}", "signature": "s"},
                    {"type": "tool_use", "id": "t", "name": "echo", "input": {"k": key}},
                ],
            },
        )

    _, result = ask(
        anthropic("m", base_url="http://llm.test", api_key=KEY, transport=httpx.MockTransport(server)),
        [{"role": "user", "content": "hi"}],
    )
    assert KEY not in json.dumps(result.message) and "[redacted]" in json.dumps(result.message)


# -- llmock and fakellm ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def llmock(tmp_path_factory):
    server = servers.start_llmock(tmp_path_factory.mktemp("llmock"), "--response-style", "static")
    yield server
    server.stop()


@pytest.fixture
def lm(llmock):
    servers.llmock_reset(llmock)
    return llmock


def lm_call(server, **kwargs: Any):
    return anthropic(
        "claude-sonnet-4-5", base_url=server.url + "/anthropic", api_key="sk-ant-llmock", **kwargs
    )


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_llmock_tool_loop_with_a_pause_and_resume(lm, tmp_path, stream):
    store = Store(tmp_path / "s.db")
    session = store.create_session("loop")
    session.append({"role": "system", "content": "You are terse."})
    session.append({"role": "user", "content": "What is the weather in Paris?"})

    @tool(requires_approval=True)
    def get_weather(city: str) -> str:
        """Current weather for a city"""
        return f"{city}: sunny"

    call = lm_call(lm, stream=stream)
    steps = list(run(store, session, call=call, tools=[get_weather]))
    assert steps[-1].reason == "paused"
    pause = session.path("main")[-1]
    decide(store, pause.id, {c["id"]: Approve() for c in pause.payload["calls"]})
    steps = list(resume(store, pause.id, call=call, tools=[get_weather]))
    assert steps[-1].reason == "completed"
    roles = [m["role"] for m in session.messages()]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    records = servers.llmock_requests(lm)
    assert [r["status"] for r in records] == [200, 200]  # llmock refuses a malformed body with 422
    assert records[1]["body"]["system"][0]["text"] == "You are terse."
    store.close()


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("status", [429, 529])
def test_llmock_429_and_529_are_retried(lm, sleeps, status, stream):
    servers.llmock_script(lm, {"type": "fail", "status": status, "retry_after": 0.2, "times": 2})
    _, result = ask(lm_call(lm, stream=stream), [{"role": "user", "content": "Say hello"}])
    assert result.message["content"] and [r["status"] for r in servers.llmock_requests(lm)] == [
        status,
        status,
        200,
    ]
    assert sleeps == [0.2, 0.2]


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_llmock_a_retry_after_past_the_deadline_fails_at_once(lm, sleeps, stream):
    # llmock asks for 30 s: the call's deadline (2 s) cannot wait that long, so it says so
    # instead of sleeping, and makes no second request.
    servers.llmock_script(lm, {"type": "fail", "status": 529, "retry_after": 30, "times": 1})
    started = time.monotonic()
    _, error = fails(lm_call(lm, stream=stream, deadline=2), [{"role": "user", "content": "Say hello"}])
    assert time.monotonic() - started < 2 and sleeps == []
    assert "deadline of 2s for the whole call exceeded" in str(error) and "next wait would be 30.0s" in str(
        error
    )
    assert "HTTP 529" in str(error) and [r["status"] for r in servers.llmock_requests(lm)] == [529]


@pytest.mark.slow
def test_llmock_truncated_stream_is_refused(lm):
    servers.llmock_script(lm, {"type": "stream_fault", "kind": "truncate", "after_chunks": 3})
    _, error = fails(lm_call(lm, stream=True), [{"role": "user", "content": "Say hello"}])
    assert "stream ended without message_stop" in str(error) and "truncated" in str(error)


@pytest.mark.slow
def test_llmock_pause_turn_stop_reason_is_continued(lm):
    servers.llmock_script(lm, {"type": "reply", "text": "Searching", "finish_reason": "pause_turn"})
    _, result = ask(lm_call(lm), [{"role": "user", "content": "Say hello"}])
    records = servers.llmock_requests(lm)
    assert len(records) == 2 and records[1]["body"]["messages"][-1]["role"] == "assistant"
    assert result.message["content"].startswith("Searching") and result.finish_reason == "stop"


FAKELLM_RULES = textwrap.dedent("""\
    version: 1
    defaults: {fallback: deterministic_echo}
    rules:
      - name: weather_turn1
        when: {turn: 1, messages_contain: "weather in lyon"}
        respond:
          tool_calls: [{name: get_weather, arguments: {city: Lyon}}]
      - name: weather_turn2
        when: {turn: 2, tool_result_contains: "rainy"}
        respond: {content: "It is rainy in Lyon."}
    """)


@pytest.fixture(scope="module")
def fakellm(tmp_path_factory):
    root = tmp_path_factory.mktemp("fakellm")
    (root / "fakellm.yaml").write_text(FAKELLM_RULES)
    server = servers.start_fakellm(root / "fakellm.yaml", root / "logs")
    yield server
    server.stop()


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_fakellm_tool_loop_with_a_pause_and_resume(fakellm, tmp_path, stream):
    store = Store(tmp_path / "s.db")
    session = store.create_session("fake")
    session.append({"role": "user", "content": f"What is the weather in Lyon? ({uuid.uuid4().hex})"})
    ran: list[str] = []

    @tool(requires_approval=True)
    def get_weather(city: str) -> str:
        """Current weather for a city"""
        ran.append(city)
        return f"{city}: rainy"

    call = anthropic(
        "claude-sonnet-4-5",
        base_url=fakellm.url,
        stream=stream,
        headers={"X-Fakellm-Conversation-Id": uuid.uuid4().hex},
    )
    steps = list(run(store, session, call=call, tools=[get_weather]))
    assert steps[-1].reason == "paused" and ran == []
    pause = session.path("main")[-1]
    decide(store, pause.id, {c["id"]: Approve() for c in pause.payload["calls"]})
    steps = list(resume(store, pause.id, call=call, tools=[get_weather]))
    assert steps[-1].reason == "completed" and ran == ["Lyon"]
    assert [m["role"] for m in session.messages()] == ["user", "assistant", "tool", "assistant"]
    assert session.messages()[-1]["content"] == "It is rainy in Lyon."
    store.close()


def test_cache_tokens_are_summed_and_priced_on_both_backends(any_store):
    session = any_store.create_session("cost")
    session.append({"role": "user", "content": "hi"})
    cached = {
        "input_tokens": 10,
        "output_tokens": 5,
        "cache_creation_input_tokens": 1000,
        "cache_read_input_tokens": 2000,
    }
    for usage in (cached, {"prompt_tokens": 7, "completion_tokens": 3}):
        reply = {"role": "assistant", "content": "x"}
        session.append(reply, run=Completion(reply, model="claude", usage=usage))
    used = session.usage("main")
    assert (used.input_tokens, used.cache_creation_input_tokens, used.cache_read_input_tokens) == (
        17,
        1000,
        2000,
    )
    assert used.to_dict()["by_model"]["claude"]["cache_read_input_tokens"] == 2000
    per_million = 17 * 3 + 8 * 15 + 1000 * 3.75 + 2000 * 0.3
    assert used.cost({"claude": {"input": 3.0, "output": 15.0}}) == pytest.approx(per_million / 1e6)
    explicit = {"claude": {"input": 3.0, "output": 15.0, "cache_write": 6.0, "cache_read": 0.0}}
    assert used.cost(explicit) == pytest.approx((17 * 3 + 8 * 15 + 1000 * 6.0) / 1e6)


# -- stop reasons, caching settings and retries on llmock ------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize(
    ("stop_reason", "finish"),
    [
        ("end_turn", "stop"),
        ("max_tokens", "length"),
        ("stop_sequence", "stop"),
        ("refusal", "content_filter"),
    ],
)
def test_llmock_stop_reasons_are_mapped_and_the_original_kept(lm, stream, stop_reason, finish):
    servers.llmock_script(lm, {"type": "reply", "text": "Partly", "finish_reason": stop_reason})
    _, result = ask(lm_call(lm, stream=stream), [{"role": "user", "content": "Say hello"}])
    assert result.finish_reason == finish and result.message["content"] == "Partly"
    assert result.message["raw"]["anthropic"]["stop_reason"] == stop_reason


@pytest.mark.slow
@pytest.mark.parametrize(
    ("cache", "control"),
    [
        (True, {"type": "ephemeral"}),
        ({"type": "ephemeral", "ttl": "1h"}, {"type": "ephemeral", "ttl": "1h"}),
        (False, None),
    ],
    ids=["default", "ttl", "off"],
)
def test_llmock_cache_breakpoints_are_on_by_default_and_configurable(lm, cache, control):
    history = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is the weather in Paris?"},
    ]
    call = lm_call(lm) if cache is True else lm_call(lm, cache=cache)
    ask(call, history, [WEATHER])
    (record,) = servers.llmock_requests(lm)
    body = record["body"]
    assert record["status"] == 200  # llmock takes the breakpoints (it refuses a malformed body)
    marks = [body["system"][-1], body["tools"][-1], body["messages"][-1]["content"][-1]]
    assert [m.get("cache_control") for m in marks] == [control] * 3
    if control is None:
        assert "cache_control" not in json.dumps(body)
    else:  # one breakpoint on each of system, tools and the newest turn, and nowhere else
        assert json.dumps(body).count('"cache_control"') == 3
