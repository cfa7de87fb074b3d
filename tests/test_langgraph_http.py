"""A LangGraph graph whose model node calls llmock's chat completions over HTTP (the
official ``openai`` client), checkpointed by SessiontreeSaver: the thread reads back as the
chat that went over the wire, and the second request carried the whole history."""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph.graph")
pytest.importorskip("openai")

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.graph.message import add_messages  # noqa: E402
from openai import OpenAI  # noqa: E402

from sessiontree import Store  # noqa: E402
from sessiontree.integrations.langgraph import SessiontreeSaver, thread_session_id  # noqa: E402

import servers  # noqa: E402

pytestmark = pytest.mark.slow  # starts llmock


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


ROLES = {"human": "user", "ai": "assistant"}


@pytest.fixture(scope="module")
def llmock(tmp_path_factory):
    server = servers.start_llmock(tmp_path_factory.mktemp("llmock-langgraph"), "--response-style", "static")
    yield server
    server.stop()


def test_a_graph_over_http_on_a_sessiontree_store(llmock, db_target):
    servers.llmock_reset(llmock)
    client = OpenAI(base_url=llmock.url + "/v1", api_key="sk-llmock", max_retries=0)

    def model(state: Chat) -> dict[str, Any]:
        sent = [{"role": ROLES[m.type], "content": m.content} for m in state["messages"]]
        reply = client.chat.completions.create(model="gpt-4o-mini", messages=sent)
        return {"messages": [AIMessage(reply.choices[0].message.content or "")]}

    builder = StateGraph(Chat)
    builder.add_node("model", model)
    builder.add_edge(START, "model")
    builder.add_edge("model", END)
    try:
        with Store(db_target) as store:
            graph = builder.compile(checkpointer=SessiontreeSaver(store))
            config = {"configurable": {"thread_id": "over-http"}}
            graph.invoke({"messages": [HumanMessage("Name a tree.")]}, config)
            state = graph.invoke({"messages": [HumanMessage("Another one.")]}, config)
            answers = [m.content for m in state["messages"] if m.type == "ai"]
            assert len(answers) == 2 and all(answers)
            chat = store.session(thread_session_id("over-http")).messages()
            assert [(m["role"], m["content"]) for m in chat] == [
                ("user", "Name a tree."),
                ("assistant", answers[0]),
                ("user", "Another one."),
                ("assistant", answers[1]),
            ]
            assert store.verify().ok
    finally:
        client.close()
    requests = servers.llmock_requests(llmock)
    assert [r["path"] for r in requests] == ["/v1/chat/completions"] * 2
    last = requests[-1].get("body") or requests[-1].get("json") or {}
    assert [m["content"] for m in last["messages"]] == ["Name a tree.", answers[0], "Another one."]
