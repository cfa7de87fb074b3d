"""A branch written by one provider and continued by another: every request valid, nothing
stored changed.

Each history is recorded by the loop (Anthropic's signed thinking and Responses'
encrypted reasoning from the hostile server's recorded streams, chat completions from
llmock), then continued on forks by the other adapters against llmock. llmock checks
little (its ``/anthropic/v1/messages`` refuses only a malformed top level, with 422), so
every request it received is also checked here against the rules of its API.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from sessiontree import Store, Variant, run
from sessiontree.providers import anthropic, openai_compatible, openai_responses
from sessiontree.providers.anthropic_blocks import request_parts as anthropic_parts
from sessiontree.tools import tool

from hostile_server import HostileServer

try:
    from tests import servers
except ImportError:  # tests/ is not a package: pytest put it on sys.path
    import servers  # type: ignore[no-redef]

TOOL_ID = re.compile(r"^[a-zA-Z0-9_-]+$")  # what the Messages API takes as a tool_use id


@tool(idempotent=True)
def get_weather(city: str) -> str:
    """Current weather for a city"""
    return f"{city}: sunny"


# -- each API's rules, as its real server applies them -----------------------------------


def anthropic_problems(body: dict[str, Any]) -> list[str]:
    problems = []
    messages = body.get("messages") or []
    if not isinstance(body.get("max_tokens"), int):
        problems.append("no max_tokens")
    if not messages or messages[0]["role"] != "user":
        problems.append("the first message is not the user's")
    calls: set[str] = set()
    uses_tools = False
    for n, message in enumerate(messages):
        if message["role"] not in ("user", "assistant"):
            problems.append(f"message {n} has the role {message['role']}")
        if n and message["role"] == messages[n - 1]["role"]:
            problems.append(f"messages {n - 1} and {n} have one role")
        blocks = message["content"] if isinstance(message["content"], list) else []
        results = [b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"]
        if sorted(results) != sorted(calls):
            problems.append(f"message {n} answers {results}, not the calls {sorted(calls)} before it")
        if results and blocks[: len(results)] != [b for b in blocks if b.get("type") == "tool_result"]:
            problems.append(f"message {n} has text before its tool results")
        calls = set()
        for block in blocks:
            if block.get("type") == "tool_use":
                uses_tools = True
                if not TOOL_ID.match(block.get("id") or ""):
                    problems.append(f"message {n} has the tool_use id {block.get('id')!r}")
                if not isinstance(block.get("input"), dict):
                    problems.append(f"message {n} has a tool_use whose input is not an object")
                calls.add(block["id"])
            if block.get("type") == "thinking" and not block.get("signature"):
                problems.append(f"message {n} has an unsigned thinking block")
    if calls:
        problems.append(f"the calls {sorted(calls)} have no results")
    if uses_tools and not body.get("tools"):
        problems.append("tool blocks without tools")
    for n, message in enumerate(messages):
        kinds = [b.get("type") for b in message["content"]] if isinstance(message["content"], list) else []
        if {"thinking", "redacted_thinking"} & set(kinds) and kinds[0] not in THINKING:
            problems.append(f"message {n} has thinking blocks, but not first")
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") != "disabled":
        # With thinking on, the assistant turn under way (after the last user message that
        # answers no tool call) must start with a thinking block, signed.
        starts = [n for n, m in enumerate(messages) if m["role"] == "user" and not tool_results(m)]
        turn = [m for m in messages[(starts[-1] if starts else -1) + 1 :] if m["role"] == "assistant"]
        if turn and (
            not isinstance(turn[0]["content"], list) or turn[0]["content"][0].get("type") not in THINKING
        ):
            problems.append(
                "thinking is on, but the assistant turn under way does not start with a thinking block"
            )
    return problems


THINKING = ("thinking", "redacted_thinking")


def tool_results(message: dict[str, Any]) -> list[Any]:
    content = message["content"]
    return [b for b in content if b.get("type") == "tool_result"] if isinstance(content, list) else []


def chat_problems(body: dict[str, Any]) -> list[str]:
    problems, calls = [], set()
    for n, message in enumerate(body.get("messages") or []):
        role = message.get("role")
        if role not in ("system", "developer", "user", "assistant", "tool"):
            problems.append(f"message {n} has the role {role}")
        if role == "tool":
            if message.get("tool_call_id") not in calls:
                problems.append(f"message {n} answers {message.get('tool_call_id')!r}, not a pending call")
            calls.discard(message.get("tool_call_id"))
            continue
        if calls:
            problems.append(f"message {n} comes before the results of {sorted(calls)}")
        calls = set()
        for call in message.get("tool_calls") or []:
            if not isinstance(call["function"]["arguments"], str):
                problems.append(f"message {n} has arguments that are not text")
            calls.add(call["id"])
        if role == "assistant" and message.get("content") is None and not message.get("tool_calls"):
            problems.append(f"message {n} says nothing")
    return problems


def responses_problems(body: dict[str, Any]) -> list[str]:
    problems, calls = [], set()
    for n, item in enumerate(body.get("input") or []):
        kind = item.get("type", "message")
        if kind == "function_call":
            calls.add(item["call_id"])
            if not isinstance(item.get("arguments"), str):
                problems.append(f"item {n} has arguments that are not text")
        elif kind == "function_call_output":
            if item["call_id"] not in calls:
                problems.append(f"item {n} answers {item['call_id']!r}, a call not made")
            calls.discard(item["call_id"])
        elif kind == "message":
            if item.get("role") not in ("user", "assistant", "system", "developer"):
                problems.append(f"item {n} has the role {item.get('role')}")
        elif kind == "reasoning":
            if not item.get("encrypted_content") and not item.get("id"):
                problems.append(f"item {n} is a reasoning item with neither id nor content")
        else:
            problems.append(f"item {n} is of type {kind}")
    if calls:
        problems.append(f"the calls {sorted(calls)} have no output")
    return problems


RULES = {
    "/anthropic/v1/messages": anthropic_problems,
    "/v1/chat/completions": chat_problems,
    "/v1/responses": responses_problems,
}


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hostile():
    server = HostileServer()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def llmock(tmp_path_factory):
    server = servers.start_llmock(tmp_path_factory.mktemp("llmock"), "--response-style", "static")
    yield server
    server.stop()


def calls_for(llmock: Any) -> dict[str, Any]:
    return {
        # thinking on, as a user of Claude would have it: the API then wants the turn under
        # way to start with a thinking block, which another provider's turn lacks
        "anthropic": anthropic(
            "claude-sonnet-4-5",
            base_url=llmock.url + "/anthropic",
            max_tokens=2048,
            thinking={"type": "enabled", "budget_tokens": 1024},
        ),
        "chat": openai_compatible(llmock.url + "/v1", "gpt-4o-mini", stream=True),
        "responses": openai_responses("gpt-5", base_url=llmock.url + "/v1", stream=True),
    }


def stored(store: Store, session: Any) -> dict[str, str]:
    return {n.id: n.payload_json for name in [b.name for b in session.branches()] for n in session.path(name)}


def continue_everywhere(store: Store, session: Any, llmock: Any, writer: str) -> None:
    """Fork the head once per other provider, continue there, then a turn more with the
    writer's kind; check every request, and that nothing stored changed."""
    before = stored(store, session)
    head = session.path("main")[-1].id
    for name, call in calls_for(llmock).items():
        if name == writer:
            continue
        servers.llmock_reset(llmock)
        session.fork(name, at=head)
        steps = list(run(store, session, name, call=call, tools=[get_weather], max_steps=2))
        assert steps[-1].reason == "completed", (name, steps[-1])
        session.append({"role": "user", "content": "And tomorrow?"}, branch=name)
        steps = list(
            run(store, session, name, call=calls_for(llmock)[writer], tools=[get_weather], max_steps=3)
        )
        assert steps[-1].reason == "completed", (name, steps[-1])
        records = servers.llmock_requests(llmock)
        assert len(records) >= 2 and all(r["status"] == 200 for r in records), [
            (r["path"], r["status"]) for r in records
        ]
        for record in records:
            path, sent = record["path"], json.dumps(record["body"])
            assert RULES[path](record["body"]) == [], (name, path, record["body"])
            others = [kind for kind in OWN_WORDS if PATHS[kind] != path]
            assert [w for kind in others for w in OWN_WORDS[kind] if w in sent] == [], (name, path, sent)
            assert '"raw"' not in sent
    after = stored(store, session)
    assert {k: after[k] for k in before} == before  # nothing stored changed


PATHS = {"anthropic": "/anthropic/v1/messages", "chat": "/v1/chat/completions", "responses": "/v1/responses"}
# What only one API's requests may carry: its own record of the history.
OWN_WORDS = {"anthropic": ('"thinking"', "signature"), "responses": ("encrypted_content", "rs_68a1")}


# -- the histories -------------------------------------------------------------------------


@pytest.mark.slow
def test_an_anthropic_history_with_signed_thinking_continues_with_chat_and_responses(
    hostile, llmock, tmp_path
):
    store = Store(tmp_path / "s.db")
    session = store.create_session("claude")
    session.append({"role": "system", "content": "Be brief."})
    session.append({"role": "user", "content": "What is the weather in Paris?"})
    claude = anthropic("claude-sonnet-4-5", base_url=hostile.url("anthropic-thinking-tool"), stream=True)
    list(run(store, session, call=claude, tools=[get_weather], max_steps=1))
    written = [n for n in session.path("main") if n.kind == "message"]
    assert written[2].payload["raw"]["anthropic"]["content"][0]["type"] == "thinking"
    assert written[-1].payload["role"] == "tool"
    continue_everywhere(store, session, llmock, writer="anthropic")
    store.close()


@pytest.mark.slow
def test_a_responses_history_with_encrypted_reasoning_continues_with_anthropic_and_chat(
    hostile, llmock, tmp_path
):
    store = Store(tmp_path / "s.db")
    session = store.create_session("gpt")
    session.append({"role": "developer", "content": "Be brief."})
    session.append({"role": "user", "content": "What is the weather in Paris?"})
    gpt = openai_responses(
        "gpt-5", base_url=hostile.url("responses-reasoning-tool"), encrypted_reasoning=True
    )
    list(run(store, session, call=gpt, tools=[get_weather], max_steps=1))
    written = [n for n in session.path("main") if n.kind == "message"]
    assert written[2].payload["raw"]["responses"]["output"][0]["encrypted_content"].startswith("gAAAA")
    continue_everywhere(store, session, llmock, writer="responses")
    store.close()


@pytest.mark.slow
def test_a_chat_completions_history_continues_with_anthropic_and_responses(llmock, tmp_path):
    store = Store(tmp_path / "s.db")
    session = store.create_session("chat")
    session.append({"role": "system", "content": "Be brief."})
    session.append({"role": "user", "content": "What is the weather in Paris?"})
    list(run(store, session, call=calls_for(llmock)["chat"], tools=[get_weather], max_steps=1))
    assert [n.payload["role"] for n in session.path("main") if n.kind == "message"][-1] == "tool"
    continue_everywhere(store, session, llmock, writer="chat")
    store.close()


def test_a_call_id_the_messages_api_refuses_is_sent_in_a_form_it_takes():
    # Kimi and some vLLM parsers name calls "functions.get_weather:0"; Anthropic wants [a-zA-Z0-9_-]+
    history = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": i, "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
                for i in ("functions.get_weather:0", "functions.get_weather:1")
            ],
        },
        {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "a"},
        {"role": "tool", "tool_call_id": "functions.get_weather:1", "content": "b"},
    ]
    system, messages, tools = anthropic_parts(history, [])
    body = {"max_tokens": 1, "messages": messages, "tools": [{"name": "get_weather"}]}
    assert anthropic_problems(body) == []
    ids = [b["id"] for b in messages[1]["content"]]
    assert len(set(ids)) == 2 and [b["tool_use_id"] for b in messages[2]["content"]] == ids


def test_a_variant_with_its_own_system_prompt_still_gets_its_own_raw_blocks(hostile, tmp_path):
    store = Store(tmp_path / "s.db")
    session = store.create_session("variant")
    session.append({"role": "system", "content": "Be brief."})
    session.append({"role": "user", "content": "What is the weather in Paris?"})
    claude = anthropic("claude-sonnet-4-5", base_url=hostile.url("anthropic-thinking-tool"), stream=True)
    call = Variant("terse", claude, system="Answer in one word.").model_call()
    hostile.bodies.clear()
    list(run(store, session, call=call, tools=[get_weather], max_steps=2))
    first, second = hostile.bodies
    assert first["system"][0]["text"] == second["system"][0]["text"] == "Answer in one word."
    assert second["messages"][1]["content"][0]["type"] == "thinking"  # signed, sent back
    assert second["messages"][1]["content"][0]["signature"].startswith("EqQB")
    store.close()
