"""A real pydantic-ai ``Agent`` with its own OpenAI chat-completions model class, over HTTP
against llmock (a model server nobody here wrote), on SessiontreeConversationStore: a tool
that requires approval defers, the approval is decided on the store (``decide``, as the
inbox does), and the next run continues from the decision; the tool runs once."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("pydantic_ai")
pytest.importorskip("openai")

from openai import AsyncOpenAI  # noqa: E402
from pydantic_ai import Agent, DeferredToolRequests  # noqa: E402
from pydantic_ai.conversation import Conversation  # noqa: E402
from pydantic_ai.models.openai import OpenAIChatModel  # noqa: E402
from pydantic_ai.providers.openai import OpenAIProvider  # noqa: E402

from sessiontree import Approve, Store, decide  # noqa: E402
from sessiontree.integrations.pydantic_ai import SessiontreeConversationStore, deferred_tool_results  # noqa: E402

import servers  # noqa: E402

pytestmark = pytest.mark.slow  # starts llmock


@pytest.fixture(scope="module")
def llmock(tmp_path_factory):
    with servers.llmock_static(tmp_path_factory.mktemp("llmock-pydantic-ai")) as server:
        yield server


def mail_agent(client: AsyncOpenAI, sent: list[str]) -> Agent:
    """An agent on pydantic-ai's own chat-completions model class, whose one tool (which
    requires approval) records who it emailed in ``sent``."""
    model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(openai_client=client))
    agent = Agent(model, output_type=[str, DeferredToolRequests], instructions="Use the tools.")

    @agent.tool_plain(requires_approval=True)
    def send_email(to: str) -> str:
        """Send an email to someone."""
        sent.append(to)
        return f"sent to {to}"

    return agent


def test_chat_completions_over_http_defer_decide_continue(llmock, db_target):
    sent: list[str] = []
    servers.llmock_reset(llmock)

    async def main() -> None:
        client = AsyncOpenAI(base_url=llmock.url + "/v1", api_key="sk-llmock", max_retries=0)
        try:
            agent = mail_agent(client, sent)
            with Store(db_target) as st:
                store = SessiontreeConversationStore(st)
                result = await agent.run(
                    "send an email to bob", conversation=Conversation(conversation_id="m1")
                )
                assert isinstance(result.output, DeferredToolRequests) and sent == []
                (call,) = result.output.approvals
                await store.save(result)
                (pause,) = st.pending()

                decide(st, pause.id, {call.tool_call_id: Approve()}, by="ann")
                decided = deferred_tool_results(st, "m1")
                assert decided is not None and decided.approvals == {call.tool_call_id: True}
                resumed = await agent.run(conversation=await store.load("m1"), deferred_tool_results=decided)
                await store.save(resumed)
                assert isinstance(resumed.output, str) and resumed.output
                assert sent == [call.args_as_dict()["to"]]  # the tool ran once

                session = st.session("m1")
                kinds = [n.kind for n in session.path()]
                assert kinds[:2] == ["message", "message"] and "pause" in kinds and "decision" in kinds
                assert st.pending() == []
                assert session.verify().ok
                roles = [m["role"] for m in session.messages()]
                assert roles.count("tool") == 1 and roles[-1] == "assistant"
        finally:
            await client.close()

    asyncio.run(main())
    paths = [r["path"] for r in servers.llmock_requests(llmock)]
    assert paths == ["/v1/chat/completions", "/v1/chat/completions"]
