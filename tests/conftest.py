"""Shared fixtures: stores live in real files under pytest's tmp_path."""

from __future__ import annotations

import textwrap

import pytest

from sessiontree import Store

# fakellm rules for an agent run: weather, then an email, then a final answer.
AGENT_RULES = textwrap.dedent("""\
    version: 1
    defaults: {fallback: deterministic_echo}
    rules:
      - name: done
        when: {tool_result_contains: "sent to"}
        respond: {content: "Emailed bob: sunny in Paris."}
      - name: email
        when: {tool_result_contains: "Sunny in Paris"}
        respond:
          tool_calls: [{name: send_email, arguments: {to: bob@example.com, body: "Sunny, 21C"}}]
      - name: weather
        when: {messages_contain: "weather in paris"}
        respond:
          tool_calls: [{name: get_weather, arguments: {city: Paris}}]
    """)


@pytest.fixture(scope="session")
def agent_fakellm(tmp_path_factory):
    """A real fakellm server on 127.0.0.1 scripted with AGENT_RULES, for the whole run."""
    import servers

    root = tmp_path_factory.mktemp("fakellm-agent")
    (root / "rules.yaml").write_text(AGENT_RULES)
    server = servers.start_fakellm(root / "rules.yaml", root / "logs")
    yield server
    server.stop()


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "store.db") as s:
        yield s


@pytest.fixture
def session(store):
    return store.create_session("test")


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def assistant(text: str | None = None, tool_calls: list | None = None) -> dict:
    message: dict = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return message
