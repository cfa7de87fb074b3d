"""``providers.openai_responses``: conversion, recorded streams (hostile server), llmock.

The recorded event sequences in ``fixtures/responses/`` stand for what llmock never
emits (reasoning items with encrypted content, cached and reasoning tokens, an ``error``
event, ``response.failed``, ``response.incomplete``); llmock's ``/v1/responses`` serves
the tool loop, the 429 and the truncated stream. llmock accepts malformed input, so
the converter's own checks are tested here directly.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from sessiontree import Approve, Store, decide, resume, run
from sessiontree.errors import ProviderError
from sessiontree.model import Completion, sendable
from sessiontree.providers import anthropic, openai_responses
from sessiontree.providers.anthropic_blocks import request_parts as anthropic_parts
from sessiontree.providers.responses_items import request_parts
from sessiontree.tools import tool

from hostile_server import HostileServer

pytestmark = pytest.mark.usefixtures("no_env_key")  # an API key in the environment is never used

try:
    from tests import servers
except ImportError:  # tests/ is not a package: pytest put it on sys.path
    import servers  # type: ignore[no-redef]

KEY = "sk-proj-a1b2c3/d4e5f6+g7h8i9/j0k1l2m3n4o5p6q7"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
REASONING = {
    "id": "rs_68a1b2c3d4e5f60718293a4b",
    "type": "reasoning",
    "summary": [{"type": "summary_text", "text": "The user wants the weather; call get_weather."}],
    "encrypted_content": "gAAAAABo9xKq3vR1c2lnbmVkLXJlYXNvbmluZy1vbmUtZm9yLXRlc3RzLW9ubHk=",
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


def calls(*pairs: tuple[str, str]) -> list[dict[str, Any]]:
    return [
        {"id": i, "type": "function", "function": {"name": "get_weather", "arguments": a}} for i, a in pairs
    ]


# -- conversion ------------------------------------------------------------------------


def test_history_is_converted_to_input_items():
    history = [
        {"role": "system", "content": "Be brief."},
        {"role": "developer", "content": "Use metric units."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Weather here and in Rome?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
            ],
        },
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": calls(("t1", "{}"), ("t2", "{city: Rome")),
        },
        {"role": "tool", "tool_call_id": "t1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "t2", "content": [{"type": "text", "text": "Error: not JSON"}]},
        {"role": "user", "content": "Thanks"},
    ]
    instructions, items, tools = request_parts(history, [WEATHER])
    assert instructions == "Be brief.\n\nUse metric units."
    assert items == [
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "Weather here and in Rome?"},
                {"type": "input_image", "image_url": "data:image/png;base64,iVBO", "detail": "auto"},
            ],
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Checking.", "annotations": []}],
        },
        {"type": "function_call", "call_id": "t1", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call", "call_id": "t2", "name": "get_weather", "arguments": "{city: Rome"},
        {"type": "function_call_output", "call_id": "t1", "output": "sunny"},
        {"type": "function_call_output", "call_id": "t2", "output": "Error: not JSON"},
        {"type": "message", "role": "user", "content": "Thanks"},
    ]
    assert tools == [
        {
            "type": "function",
            "name": "get_weather",
            "parameters": WEATHER["function"]["parameters"],
            "description": "Current weather for a city",
        }
    ]


@pytest.mark.parametrize(
    ("history", "why"),
    [
        (
            [{"role": "tool", "tool_call_id": "t9", "content": "x"}],
            "message 0 (tool) answers 't9', a tool call",
        ),
        (
            [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": None, "tool_calls": calls(("t1", "{}"))},
            ],
            "message 1 (assistant) has the tool call 't1' with no result after it",
        ),
        ([{"role": "critic", "content": "x"}], "message 0 has the role 'critic'"),
        (
            [{"role": "user", "content": [{"type": "video", "url": "x"}]}],
            "content part 0 of type 'video' has no Responses API equivalent",
        ),
    ],
    ids=["orphan-result", "unanswered-call", "unknown-role", "unknown-part"],
)
def test_a_history_that_cannot_be_sent_is_one_clear_error_and_no_request(history, why):
    sent: list[httpx.Request] = []
    transport = httpx.MockTransport(lambda r: sent.append(r) or httpx.Response(500))
    for stream in (False, True):
        call = openai_responses("gpt-5", base_url="http://llm.test/v1", stream=stream, transport=transport)
        _, error = fails(call, history)
        assert why in str(error) and "\n" not in str(error) and not error.retryable
    assert sent == []


def test_raw_items_reach_only_their_own_kind():
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": calls(("call_1", '{"city": "Paris"}')),
        "raw": {"responses": {"output": [REASONING], "status": "completed"}},
    }
    assert "raw" not in sendable([message])[0] and "raw" not in sendable([message], "anthropic")[0]
    history = [
        {"role": "user", "content": "q"},
        message,
        {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
    ]
    _, blocks, _ = anthropic_parts(sendable(history, "anthropic"), None)
    assert "encrypted" not in json.dumps(blocks) and blocks[1]["content"][0]["type"] == "tool_use"


def test_an_edited_call_is_sent_as_it_is_now_without_the_reasoning_paired_with_the_old_one():
    # The API pairs a reasoning item with the item that followed it by id (fc_1 here): a
    # reasoning item followed by a call without that id is refused ("reasoning was provided
    # without its required following item"), and the edited call may not carry fc_1, whose
    # arguments were others. So the turn is sent as the message now says, with no reasoning.
    kept = [
        REASONING,
        {
            "id": "fc_1",
            "type": "function_call",
            "status": "completed",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"city": "Paris"}',
        },
    ]
    edited = {
        "role": "assistant",
        "content": None,
        "tool_calls": calls(("call_1", '{"city": "Lyon"}')),
        "raw": {"responses": {"output": kept}},
    }
    unchanged = {**edited, "tool_calls": calls(("call_1", '{"city": "Paris"}'))}
    result = {"role": "tool", "tool_call_id": "call_1", "content": "ok"}
    _, items, _ = request_parts([{"role": "user", "content": "q"}, edited, result], None)
    assert items[1:3] == [
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"city": "Lyon"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "ok"},
    ]
    assert "reasoning" not in json.dumps(items) and "fc_1" not in json.dumps(items)
    _, items, _ = request_parts([{"role": "user", "content": "q"}, unchanged, result], None)
    assert items[1:3] == kept  # verbatim, item ids and status included


def test_a_stream_whose_final_response_has_no_output_uses_what_was_streamed():
    events = [
        {"type": "response.created", "response": {"id": "r", "status": "in_progress", "output": []}},
        {"type": "response.output_item.added", "output_index": 0, "item": {"type": "message", "content": []}},
        {"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": "Hi "},
        {"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": "there"},
        {
            "type": "response.output_item.added",
            "output_index": 1,
            "item": {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": ""},
        },
        {"type": "response.function_call_arguments.delta", "output_index": 1, "delta": '{"city":'},
        {"type": "response.function_call_arguments.delta", "output_index": 1, "delta": '"Oslo"}'},
        {
            "type": "response.completed",
            "response": {"id": "r", "status": "completed", "usage": {"input_tokens": 3}},
        },
    ]
    body = "".join(f"data: {json.dumps(e)}\n\n" for e in events)
    transport = httpx.MockTransport(lambda r: httpx.Response(200, text=body))
    call = openai_responses("gpt-5", base_url="http://llm.test/v1", stream=True, transport=transport)
    deltas, result = ask(call, [{"role": "user", "content": "hi"}])
    assert deltas == ["Hi ", "there"] and result.message["content"] == "Hi there"
    assert result.message["tool_calls"][0]["function"] == {
        "name": "get_weather",
        "arguments": '{"city":"Oslo"}',
    }
    assert result.finish_reason == "tool_calls" and result.usage == {"input_tokens": 3}


def test_the_key_is_never_in_an_error_a_reply_or_a_repr():
    def server(request: httpx.Request) -> httpx.Response:
        key = request.headers["authorization"].removeprefix("Bearer ")
        if json.loads(request.content)["input"][0]["content"] == "bad":
            return httpx.Response(401, json={"error": {"message": f"Incorrect API key provided: {key}"}})
        item = {"type": "function_call", "call_id": "c", "name": "echo", "arguments": json.dumps({"k": key})}
        return httpx.Response(200, json={"status": "completed", "output": [item], "usage": {}})

    call = openai_responses(
        "gpt-5", base_url="http://llm.test/v1", api_key=KEY, transport=httpx.MockTransport(server)
    )
    assert KEY not in repr(call)
    _, result = ask(call, [{"role": "user", "content": "hi"}])
    assert (
        KEY not in json.dumps(result.message)
        and "[redacted]" in result.message["tool_calls"][0]["function"]["arguments"]
    )
    _, error = fails(call, [{"role": "user", "content": "bad"}])
    assert error.status == 401 and KEY not in str(error) and "[redacted]" in str(error)


# -- recorded streams on the hostile server ----------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_reasoning_items_are_kept_and_sent_back_verbatim_in_the_tool_loop(hostile, any_store, stream):
    session = any_store.create_session("reason")
    session.append({"role": "user", "content": "weather in Paris?"})
    seen: list[str] = []

    @tool(idempotent=True)
    def get_weather(city: str) -> str:
        """Weather for a city."""
        seen.append(city)
        return "sunny"

    call = openai_responses(
        "gpt-5",
        base_url=hostile.url("responses-reasoning-tool"),
        stream=stream,
        encrypted_reasoning=True,
        store=False,
        reasoning={"effort": "low", "summary": "auto"},
    )
    hostile.bodies.clear()
    steps = list(run(any_store, session, call=call, tools=[get_weather]))
    assert steps[-1].reason == "completed" and seen == ["Paris"] and len(hostile.bodies) == 2
    first, result, last = [n for n in session.path("main") if n.kind == "message"][1:]
    kept = first.payload["raw"]["responses"]
    assert kept["output"][0] == REASONING and kept["status"] == "completed" and kept["id"] == "resp_01"
    assert first.payload["content"] == "Let me check."
    assert first.payload["tool_calls"] == [
        {
            "id": "call_Qx7Lh2pWm9",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        }
    ]
    assert result.payload["tool_call_id"] == "call_Qx7Lh2pWm9"
    assert last.payload["content"] == "Sunny in Paris."
    # Both requests asked for encrypted reasoning; the second sent the first turn's items back as returned.
    assert all(
        b["include"] == ["reasoning.encrypted_content"] and b["store"] is False for b in hostile.bodies
    )
    second = hostile.bodies[1]["input"]
    assert second[1:4] == kept["output"]
    assert second[4] == {"type": "function_call_output", "call_id": "call_Qx7Lh2pWm9", "output": "sunny"}
    # Usage: cached tokens taken out of input_tokens (as Anthropic counts), reasoning kept.
    record = any_store.run(first.run_id)
    assert record.provider == "openai-responses" and record.finish_reason == "tool_calls"
    assert record.usage["input_tokens"] == 176 and record.usage["cache_read_input_tokens"] == 1024
    assert record.usage["output_tokens_details"] == {"reasoning_tokens": 128}
    used = session.usage("main")
    assert (used.input_tokens, used.cache_read_input_tokens, used.output_tokens) == (
        176 + 120,
        1024 + 1280,
        190,
    )
    price = {"gpt-5-2025-08-07": {"input": 1.25, "output": 10.0, "cache_read": 0.125}}
    assert used.cost(price) == pytest.approx((296 * 1.25 + 190 * 10.0 + 2304 * 0.125) / 1e6)


@pytest.mark.parametrize(
    ("settings", "included"),
    [
        ({}, None),
        # the API keeps no response with store=False: reasoning is reusable only encrypted
        ({"store": False}, ["reasoning.encrypted_content"]),
        ({"store": False, "encrypted_reasoning": False}, None),  # asked not to
        (
            {"store": False, "include": ["message.output_text.logprobs"]},
            ["message.output_text.logprobs", "reasoning.encrypted_content"],
        ),
        ({"encrypted_reasoning": True}, ["reasoning.encrypted_content"]),
    ],
    ids=["default", "store-false", "opted-out", "include-kept", "asked"],
)
def test_store_false_asks_for_the_encrypted_reasoning_it_needs_back(hostile, settings, included):
    hostile.bodies.clear()
    call = openai_responses("gpt-5", base_url=hostile.url("responses-reasoning-tool"), **settings)
    ask(call, [{"role": "user", "content": "weather in Paris?"}], [WEATHER])
    (body,) = hostile.bodies
    assert body.get("include") == included


def test_a_mid_stream_error_event_is_a_provider_error(hostile, sleeps):
    call = openai_responses("gpt-5", base_url=hostile.url("responses-error-mid-stream"), stream=True)
    seen, error = fails(call, [{"role": "user", "content": "hi"}])
    assert seen == ["Partial"] and "The server had an error" in str(error) and sleeps == []  # text was out


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_a_failed_response_is_a_provider_error(hostile, stream, sleeps):
    call = openai_responses("gpt-5", base_url=hostile.url("responses-failed"), stream=stream)
    _, error = fails(call, [{"role": "user", "content": "hi"}])
    assert "Invalid prompt: flagged" in str(error) and not error.retryable and sleeps == []


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_an_incomplete_response_is_kept_with_finish_reason_length(hostile, stream):
    call = openai_responses("gpt-5", base_url=hostile.url("responses-incomplete"), stream=stream)
    _, result = ask(call, [{"role": "user", "content": "hi"}])
    assert result.message["content"] == "The answer is" and result.finish_reason == "length"
    assert result.message["raw"]["responses"]["status"] == "incomplete"


@pytest.mark.parametrize(("mode", "stream"), [("trickle", False), ("ping", True)])
def test_a_trickling_server_hits_the_deadline(hostile, mode, stream):
    call = openai_responses("gpt-5", base_url=hostile.url(mode), stream=stream, timeout=5, deadline=1.2)
    _, error = fails(call, [{"role": "user", "content": "hi"}])
    assert "deadline of 1.2s for the whole call exceeded" in str(error)


# -- llmock --------------------------------------------------------------------------------


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
    return openai_responses("gpt-5", base_url=server.url + "/v1", api_key="sk-llmock", **kwargs)


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
    assert [m["role"] for m in session.messages()] == ["system", "user", "assistant", "tool", "assistant"]
    call_id = session.messages()[2]["tool_calls"][0]["id"]
    first, second = (r["body"] for r in servers.llmock_requests(lm))
    assert first["instructions"] == second["instructions"] == "You are terse."
    assert [i.get("type") for i in second["input"]] == ["message", "function_call", "function_call_output"]
    assert second["input"][1]["call_id"] == second["input"][2]["call_id"] == call_id
    assert second["input"][2]["output"] == "mock-city: sunny"
    assert session.messages()[-1]["content"].startswith("Mock response")
    store.close()


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("status", [429, 529])
def test_llmock_429_and_529_are_retried_after_retry_after(lm, sleeps, status, stream):
    servers.llmock_script(lm, {"type": "fail", "status": status, "retry_after": 0.2, "times": 2})
    _, result = ask(lm_call(lm, stream=stream), [{"role": "user", "content": "Say hello"}])
    records = servers.llmock_requests(lm)
    assert result.message["content"] and [r["status"] for r in records] == [status, status, 200]
    assert sleeps == [0.2, 0.2]


@pytest.mark.slow
def test_llmock_truncated_stream_is_refused(lm):
    servers.llmock_script(lm, {"type": "stream_fault", "kind": "truncate", "after_chunks": 4})
    _, error = fails(lm_call(lm, stream=True), [{"role": "user", "content": "Say hello"}])
    assert "stream ended without response.completed" in str(error) and "truncated" in str(error)


@pytest.mark.slow
def test_llmock_malformed_chunk_is_refused(lm, sleeps):
    servers.llmock_script(lm, {"type": "stream_fault", "kind": "malformed", "after_chunks": 4})
    _, error = fails(lm_call(lm, stream=True, max_retries=0), [{"role": "user", "content": "Say hello"}])
    assert "malformed JSON in stream data line" in str(error)


def test_anthropic_is_never_sent_responses_items():
    # the other way round from test_raw_items_reach_only_their_own_kind: the adapter itself strips them
    sent: list[dict] = []

    def server(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(
            200,
            json={"type": "message", "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn"},
        )

    message = {"role": "assistant", "content": "hi", "raw": {"responses": {"output": [REASONING]}}}
    call = anthropic("m", base_url="http://llm.test", transport=httpx.MockTransport(server))
    ask(call, [{"role": "user", "content": "q"}, message, {"role": "user", "content": "more"}])
    assert (
        "encrypted_content" not in json.dumps(sent) and sent[0]["messages"][1]["content"][0]["text"] == "hi"
    )
