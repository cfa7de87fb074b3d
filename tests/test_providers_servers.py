"""The adapter against real servers written by others: fakellm and llmock.

Each server runs as a subprocess on 127.0.0.1 (a free port), started once per
module and stopped after it. fakellm is scripted by a YAML rules file;
llmock by ``POST /_llmock/scenario`` before each call, and reset between tests.
"""

from __future__ import annotations

import asyncio
import json
import textwrap
import uuid
from typing import Any

import httpx
import pytest

from sessiontree.errors import ProviderError
from sessiontree.model import Completion
from sessiontree.providers import openai_compatible

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_env_key")]  # starts fakellm and llmock servers

try:
    from tests import servers
except ImportError:  # tests/ is not a package: pytest put it on sys.path
    import servers  # type: ignore[no-redef]

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current time in a time zone",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]},
    },
}

FAKELLM_RULES = textwrap.dedent("""\
    version: 1
    defaults: {fallback: deterministic_echo}
    rules:
      - name: weather_turn1
        when: {turn: 1, messages_contain: "weather in paris"}
        respond:
          tool_calls: [{name: get_weather, arguments: {city: Paris}}]
      - name: weather_turn2
        when: {turn: 2, tool_result_contains: "sunny"}
        respond: {content: "It is sunny in Paris."}
      - name: parallel
        when: {messages_contain: "paris and its time"}
        respond:
          tool_calls:
            - {name: get_weather, arguments: {city: Paris}}
            - {name: get_time, arguments: {tz: Europe/Paris}}
      - name: counting
        when: {messages_contain: "count to five"}
        respond: {content: "one two three four five, café ✓"}
      - name: forbidden
        when: {messages_contain: "forbidden topic"}
        respond: {status: 403, error: "This topic is not allowed (mock)"}
      - name: rate_limit
        when: {header.x-test-scenario: rate_limit}
        respond: {status: 429, error: "Rate limit exceeded (mock)"}
    """)


# -- fixtures --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fakellm(tmp_path_factory):
    root = tmp_path_factory.mktemp("fakellm")
    config = root / "fakellm.yaml"
    config.write_text(FAKELLM_RULES)
    server = servers.start_fakellm(config, root / "logs")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def llmock(tmp_path_factory):
    server = servers.start_llmock(tmp_path_factory.mktemp("llmock"), "--response-style", "static")
    yield server
    server.stop()


@pytest.fixture
def lm(llmock):
    """The llmock server with no queued behaviour and an empty journal."""
    servers.llmock_reset(llmock)
    return llmock


# -- helpers ---------------------------------------------------------------------------


def ask(call: Any, messages: list[dict], tools: list[dict] | None = None) -> tuple[list[str], Completion]:
    """One call, streamed or not: (text deltas, completion)."""

    async def go():
        if not call.stream:
            return [], await call(messages, tools)
        items = [item async for item in call(messages, tools)]
        assert isinstance(items[-1], Completion) and all(isinstance(i, str) for i in items[:-1])
        return items[:-1], items[-1]

    return asyncio.run(go())


def ask_fails(
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


def run_agent(
    call: Any, prompt: str, tools: list[dict], impl: dict[str, Any], max_turns: int = 5
) -> tuple[list[dict], list[tuple[str, dict]]]:
    """A minimal agent loop: call the model, run its tools, repeat until it answers."""
    messages: list[dict] = [{"role": "user", "content": prompt}]
    ran: list[tuple[str, dict]] = []
    for _ in range(max_turns):
        _, result = ask(call, messages, tools)
        messages.append(result.message)
        if not result.message.get("tool_calls"):
            return messages, ran
        assert result.finish_reason == "tool_calls"
        for tc in result.message["tool_calls"]:
            args = json.loads(tc["function"]["arguments"])
            ran.append((tc["function"]["name"], args))
            output = impl[tc["function"]["name"]](**args)
            messages.append({"role": "tool", "tool_call_id": tc["id"], "content": output})
    raise AssertionError(f"no final answer after {max_turns} turns: {messages}")


def fakellm_call(server, *, stream: bool = False, **kwargs: Any):
    # A fresh conversation id per call object: fakellm counts turns per conversation.
    headers = {"X-Fakellm-Conversation-Id": uuid.uuid4().hex, **kwargs.pop("headers", {})}
    return openai_compatible(
        server.url + "/v1", "gpt-4o-mini", stream=stream, headers=headers, api_key="sk-fake", **kwargs
    )


def fakellm_hits(server, rule: str) -> int:
    return httpx.get(server.url + "/_fakellm/stats").json()["by_rule"].get(rule, 0)


# -- fakellm: scripted multi-turn runs, parallel tool calls, streaming --------------------


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_fakellm_multi_turn_tool_run(fakellm, stream):
    call = fakellm_call(fakellm, stream=stream, temperature=0)
    messages, ran = run_agent(
        call, "What is the weather in Paris?", [WEATHER], {"get_weather": lambda city: f"{city}: sunny, 21C"}
    )
    assert ran == [("get_weather", {"city": "Paris"})]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[1]["content"] is None and messages[1]["tool_calls"][0]["id"]
    assert messages[-1] == {"role": "assistant", "content": "It is sunny in Paris."}


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_fakellm_parallel_tool_calls(fakellm, stream):
    call = fakellm_call(fakellm, stream=stream)
    deltas, result = ask(
        call, [{"role": "user", "content": "Tell me about Paris and its time"}], [WEATHER, TIME]
    )
    calls = result.message["tool_calls"]
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_time", {"tz": "Europe/Paris"}),
    ]
    assert len({c["id"] for c in calls}) == 2 and all(c["type"] == "function" for c in calls)
    assert result.finish_reason == "tool_calls" and deltas == []


def test_fakellm_streaming_text(fakellm):
    call = fakellm_call(fakellm, stream=True)
    deltas, result = ask(call, [{"role": "user", "content": "Please count to five"}])
    assert deltas == ["one", " two", " three", " four", " five,", " café", " ✓"]
    assert result.message == {"role": "assistant", "content": "one two three four five, café ✓"}
    assert result.finish_reason == "stop" and result.model == "gpt-4o-mini"
    assert result.usage == {}  # fakellm sends no usage chunk, even when asked


def test_fakellm_plain_completion_has_usage(fakellm):
    _, result = ask(fakellm_call(fakellm, seed=3), [{"role": "user", "content": "count to five"}])
    assert result.message["content"] == "one two three four five, café ✓"
    assert (
        result.usage["total_tokens"]
        == (result.usage["prompt_tokens"] + result.usage["completion_tokens"])
        > 0
    )
    assert result.params == {"seed": 3} and result.provider == "openai-compatible"


def test_fakellm_403_fails_at_once_with_its_message(fakellm, sleeps):
    before = fakellm_hits(fakellm, "forbidden")
    _, error = ask_fails(fakellm_call(fakellm), [{"role": "user", "content": "a forbidden topic"}])
    assert error.status == 403 and not error.retryable
    assert "This topic is not allowed (mock)" in str(error) and "sk-fake" not in str(error)
    assert fakellm_hits(fakellm, "forbidden") == before + 1 and sleeps == []


def test_fakellm_429_without_retry_after_backs_off_and_gives_up(fakellm, sleeps):
    before = fakellm_hits(fakellm, "rate_limit")
    call = fakellm_call(fakellm, max_retries=2, headers={"x-test-scenario": "rate_limit"})
    _, error = ask_fails(call, [{"role": "user", "content": "hello"}])
    assert error.status == 429 and error.retryable and "Rate limit exceeded (mock)" in str(error)
    assert fakellm_hits(fakellm, "rate_limit") == before + 3  # 1 attempt + 2 retries
    assert len(sleeps) == 2 and 0 <= sleeps[0] <= 0.5 and 0 <= sleeps[1] <= 1.0


# -- llmock: rate limits, broken streams, broken tool calls, disconnects --------------------


def llmock_call(server, *, stream: bool = False, **kwargs: Any):
    return openai_compatible(
        server.url + "/v1", "gpt-4o-mini", stream=stream, api_key="sk-llmock-secret", **kwargs
    )


HELLO = [{"role": "user", "content": "Say hello"}]


def test_llmock_429_retry_after_is_waited_for(lm, sleeps):
    sleeps.real = True
    servers.llmock_script(lm, {"type": "fail", "status": 429, "retry_after": 0.3, "times": 2})
    _, result = ask(llmock_call(lm), HELLO)
    assert result.message["content"] and result.finish_reason == "stop"
    assert sleeps == [0.3, 0.3]  # from retry-after-ms; Retry-After itself says "1"
    records = servers.llmock_requests(lm)
    assert [r["status"] for r in records] == [429, 429, 200]
    gaps = [b["started_at"] - a["ended_at"] for a, b in zip(records, records[1:], strict=False)]
    assert min(gaps) >= 0.3, gaps
    verdict = servers.llmock_verdict(lm)
    assert verdict["passed"] and verdict["findings"] == [], verdict


def test_llmock_429_on_stream_start_is_retried(lm, sleeps):
    servers.llmock_script(lm, {"type": "fail", "status": 429, "retry_after": 0.2})
    deltas, result = ask(llmock_call(lm, stream=True), HELLO)
    assert "".join(deltas) == result.message["content"] and deltas
    assert sleeps == [0.2] and [r["status"] for r in servers.llmock_requests(lm)] == [429, 200]


def test_llmock_400_is_not_retried(lm, sleeps):
    servers.llmock_script(lm, {"type": "fail", "status": 400, "message": "max_tokens is too large: 999999"})
    _, error = ask_fails(llmock_call(lm, max_tokens=999999), HELLO)
    assert error.status == 400 and "max_tokens is too large: 999999" in str(error)
    assert len(servers.llmock_requests(lm)) == 1 and sleeps == []
    assert servers.llmock_verdict(lm)["passed"]


def test_llmock_outage_attempts_are_bounded(lm, sleeps):
    sleeps.real = True
    servers.llmock_script(lm, {"type": "fail", "status": 503, "retry_after": 0.1, "times": None})
    _, error = ask_fails(llmock_call(lm, max_retries=2), HELLO)
    assert error.status == 503 and "gave up after 3 attempt(s)" in str(error)
    assert [r["status"] for r in servers.llmock_requests(lm)] == [503, 503, 503]
    verdict = servers.llmock_verdict(lm)
    assert not [f for f in verdict["findings"] if f["severity"] == "error"], verdict


def test_llmock_truncated_stream_raises(lm):
    servers.llmock_script(lm, {"type": "stream_fault", "kind": "truncate", "after_chunks": 3})
    seen, error = ask_fails(llmock_call(lm, stream=True), HELLO)
    assert "truncated" in str(error) and len(seen) == 2  # role chunk, then two words
    assert servers.llmock_requests(lm)[0]["fault"] == "stream:truncate@3"


def test_llmock_malformed_chunk_raises_naming_the_line(lm):
    servers.llmock_script(lm, {"type": "stream_fault", "kind": "malformed", "after_chunks": 2})
    seen, error = ask_fails(llmock_call(lm, stream=True), HELLO)
    assert "malformed JSON in stream data line" in str(error)
    assert '{"id":"chatcmpl-' in str(error) and len(seen) == 1


def test_llmock_disconnect_after_text_raises(lm, sleeps):
    servers.llmock_script(lm, {"type": "stream_fault", "kind": "disconnect", "after_chunks": 3})
    seen, error = ask_fails(llmock_call(lm, stream=True), HELLO)
    assert "stream interrupted after 2 text chunks" in str(error) and len(seen) == 2
    assert "sk-llmock-secret" not in str(error)
    assert len(servers.llmock_requests(lm)) == 1 and sleeps == []  # text was out: no retry


def test_llmock_disconnect_before_text_is_retried(lm, sleeps):
    servers.llmock_script(lm, {"type": "stream_fault", "kind": "disconnect", "after_chunks": 1})
    deltas, result = ask(llmock_call(lm, stream=True), HELLO)
    assert deltas and "".join(deltas) == result.message["content"]
    records = servers.llmock_requests(lm)
    assert len(records) == 2 and records[0]["fault"] == "stream:disconnect@1"
    assert len(sleeps) == 1


def test_llmock_stalled_stream_hits_the_read_timeout(lm):
    servers.llmock_script(
        lm, {"type": "stream_fault", "kind": "stall", "after_chunks": 2, "stall_seconds": 5}
    )
    seen, error = ask_fails(llmock_call(lm, stream=True, timeout=0.5), HELLO)
    assert "ReadTimeout" in str(error) and len(seen) == 1


def test_llmock_slow_response_times_out_then_retries(lm, sleeps):
    servers.llmock_script(lm, {"type": "delay", "seconds": 2})
    _, result = ask(llmock_call(lm, timeout=0.5), HELLO)
    assert result.message["content"] and len(sleeps) == 1


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_llmock_malformed_tool_arguments_pass_through_verbatim(lm, stream):
    servers.llmock_script(lm, {"type": "tool_fault", "kind": "malformed_arguments"})
    _, result = ask(
        llmock_call(lm, stream=stream), [{"role": "user", "content": "weather in Paris?"}], [WEATHER]
    )
    (tc,) = result.message["tool_calls"]
    assert tc["function"]["name"] == "get_weather" and result.finish_reason == "tool_calls"
    arguments = tc["function"]["arguments"]
    assert arguments.startswith("{")
    with pytest.raises(json.JSONDecodeError):
        json.loads(arguments)  # the adapter hands the model's string on; the loop decides


def test_llmock_scripted_parallel_tool_calls_stream_with_usage(lm):
    servers.llmock_script(
        lm,
        {
            "type": "reply",
            "tool_calls": [
                {"name": "get_weather", "arguments": {"city": "Paris, France"}},
                {"name": "get_time", "arguments": {"tz": "Europe/Paris"}},
            ],
        },
    )
    _, result = ask(llmock_call(lm, stream=True), [{"role": "user", "content": "both"}], [WEATHER, TIME])
    calls = result.message["tool_calls"]
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("get_weather", {"city": "Paris, France"}),
        ("get_time", {"tz": "Europe/Paris"}),
    ]
    # llmock honours stream_options.include_usage: a last chunk with empty choices.
    assert result.usage["total_tokens"] > 0 and result.finish_reason == "tool_calls"


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_llmock_auto_tool_agent_run(lm, stream):
    messages, ran = run_agent(
        llmock_call(lm, stream=stream),
        "What is the weather in Paris?",
        [WEATHER, TIME],
        {"get_weather": lambda city: "sunny", "get_time": lambda tz: "noon"},
    )
    assert [name for name, _ in ran] == ["get_weather"] and isinstance(ran[0][1]["city"], str)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[-1]["content"] and "tool_calls" not in messages[-1]
