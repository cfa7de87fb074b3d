"""End to end: the agent loop over HTTP against fakellm, with a pause, a decision in
another process, and the resume."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from sessiontree import Store, run
from sessiontree.providers import openai_compatible

from flows import approve_risky, get_weather, send_email

pytestmark = pytest.mark.slow  # starts a fakellm server and resumes in new processes

RESUME = textwrap.dedent("""\
    import asyncio, json, sys
    from flows import approve_risky, get_weather, send_email
    from sessiontree import Approve, Store, aresume, decide
    from sessiontree.providers import openai_compatible

    db, pause_id, url, stream, cid = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1", sys.argv[5]
    store = Store(db)
    pause = store.node(pause_id)
    decide(store, pause_id, {c["id"]: Approve() for c in pause.payload["calls"]}, by="ops")
    call = openai_compatible(url, "gpt-4o-mini", stream=stream, api_key="sk-fake",
                             headers={"X-Fakellm-Conversation-Id": cid})

    async def main():
        async for step in aresume(store, pause_id, call=call, tools=[get_weather, send_email],
                                 approve=approve_risky):
            print(json.dumps({"step": type(step).__name__, "reason": getattr(step, "reason", None)}))

    asyncio.run(main())
    """)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_pause_decide_resume_through_fakellm(agent_fakellm, tmp_path, stream):
    db = tmp_path / "e2e.db"
    # fakellm keeps state per conversation: one id per test, shared with the resuming process.
    cid = uuid.uuid4().hex
    call = openai_compatible(
        agent_fakellm.url + "/v1",
        "gpt-4o-mini",
        stream=stream,
        api_key="sk-fake",
        headers={"X-Fakellm-Conversation-Id": cid},
    )
    with Store(db) as store:
        session = store.create_session("e2e")
        session.append({"role": "user", "content": "What is the weather in Paris? Email bob."})
        steps = list(run(store, session, call=call, tools=[get_weather, send_email], approve=approve_risky))
        assert [type(s).__name__ for s in steps if type(s).__name__ != "Token"] == [
            "Assistant",
            "ToolStart",
            "ToolEnd",
            "Assistant",
            "Paused",
            "Final",
        ]
        pause_id = steps[-2].node.id
        record = store.run(steps[0].node.run_id)
        assert record.model and record.finish_reason == "tool_calls" and record.latency_ms > 0

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            RESUME,
            str(db),
            pause_id,
            agent_fakellm.url + "/v1",
            "1" if stream else "0",
            cid,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    steps = [json.loads(line) for line in result.stdout.splitlines()]
    tokens = [s for s in steps if s["step"] == "Token"]
    assert bool(tokens) == stream  # the final answer streamed as tokens
    steps = [s for s in steps if s["step"] != "Token"]
    assert [s["step"] for s in steps] == ["ToolStart", "ToolEnd", "Assistant", "Final"]
    assert steps[-1]["reason"] == "completed"

    with Store(db) as store:
        session = store.session(session.id)
        assert session.messages()[-1]["content"] == "Emailed bob: sunny in Paris."
        assert store.verify().ok and store.pending() == []
        raw = db.read_bytes() + (
            db.with_name(db.name + "-wal").read_bytes() if db.with_name(db.name + "-wal").exists() else b""
        )
        assert b"sk-fake" not in raw  # the key never reaches the database
