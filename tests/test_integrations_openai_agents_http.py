"""The Agents SDK's own Responses client over HTTP (llmock's /v1/responses) on a
SessiontreeSession: a tool needing approval pauses, another process approves it with the
CLI, the run resumes and the tool runs once."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess

import pytest

pytest.importorskip("agents")

from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402

from sessiontree import Store  # noqa: E402
from sessiontree.integrations.openai_agents import SessiontreeSession, resume  # noqa: E402

import servers  # noqa: E402

pytestmark = pytest.mark.slow  # starts llmock and a CLI process

set_tracing_disabled(True)


@pytest.fixture(scope="module")
def llmock(tmp_path_factory):
    with servers.llmock_static(tmp_path_factory.mktemp("llmock-agents")) as server:
        yield server


def test_responses_over_http_pause_approve_elsewhere_resume(llmock, db_target):
    servers.llmock_reset(llmock)
    sent: list[str] = []

    @function_tool(needs_approval=True)
    def send_email(to: str) -> str:
        """Send an email to someone."""
        sent.append(to)
        return f"sent to {to}"

    async def main() -> None:
        client = AsyncOpenAI(base_url=llmock.url + "/v1", api_key="sk-llmock", max_retries=0)
        try:
            model = OpenAIResponsesModel(model="gpt-4o-mini", openai_client=client)
            agent = Agent(name="mailer", instructions="Use the tools.", model=model, tools=[send_email])
            with Store(db_target) as store:
                session = SessiontreeSession("mail-42", store)
                result = await Runner.run(agent, "send an email to bob", session=session)
                assert result.interruptions and sent == []
                pause = await session.pause(result)
                assert [p.id for p in store.pending()] == [pause.id]

                # another process decides, through the CLI
                approved = subprocess.run(
                    [
                        servers.executable("sessiontree"),
                        "--db",
                        db_target,
                        "approve",
                        pause.id,
                        "--by",
                        "ann",
                    ],
                    capture_output=True,
                    text=True,
                    env={**os.environ},
                    timeout=60,
                )
                assert approved.returncode == 0, approved.stderr

                resumed = await resume(store, pause, agent)
                assert isinstance(resumed.final_output, str) and resumed.final_output
                assert len(sent) == 1  # the tool ran once

                items = await session.get_items()
                kinds = [i.get("type", "message" if i.get("role") else None) for i in items]
                assert kinds == ["message", "function_call", "function_call_output", "message"]
                assert items[2]["output"] == f"sent to {sent[0]}"
                tree = session.tree()
                assert [n.kind for n in tree.path("main")] == [
                    "message",
                    "message",
                    "pause",
                    "decision",
                    "note",
                    "message",
                    "message",
                ]
                assert tree.verify().ok
                assert json.loads(items[1]["arguments"]) == {"to": sent[0]}
        finally:
            await client.close()

    asyncio.run(main())
    requests = servers.llmock_requests(llmock)
    assert [r["path"] for r in requests] == ["/v1/responses", "/v1/responses"]
