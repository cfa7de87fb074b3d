"""Tools and scripts shared by the agent-loop tests and the processes they start."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from sessiontree import Approve, Pause, Store, ToolCall, aresume, decide, run, tool
from sessiontree.testing import ScriptedModel, reply

CALLED: list[tuple[str, dict]] = []  # (tool, arguments), in this process


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    CALLED.append(("get_weather", {"city": city}))
    return f"Sunny in {city}, 21C"


@tool(idempotent=False)
def send_email(to: str, body: str) -> str:
    """Send an email (not safe to repeat)."""
    CALLED.append(("send_email", {"to": to, "body": body}))
    log = os.environ.get("SENT_LOG")
    if log:
        with open(log, "a") as f:
            f.write(json.dumps({"to": to, "body": body}) + "\n")
    if os.environ.get("DIE_IN_TOOL"):
        os._exit(9)  # the process dies mid-call: no result is ever recorded
    return f"sent to {to}"


def approve_risky(call: ToolCall):
    return Pause("emails need a human") if call.name == "send_email" else Approve()


def main() -> None:
    """Run one step of a test flow in this (fresh) process and print its steps as JSON lines.

    ``flows.py resume DB PAUSE_ID``: approve every call of the pause, then resume it.
    ``flows.py run DB SESSION_ID``: run the session's main branch approving everything.
    """
    mode, db, ref = sys.argv[1:4]
    model = ScriptedModel([reply("Done: the email is sent.")])
    tools = [get_weather, send_email]
    with Store(Path(db)) as store:
        if mode == "resume":
            pause = store.node(ref)
            decide(store, ref, {c["id"]: Approve() for c in pause.payload["calls"]}, by="ops")
            steps = asyncio.run(_collect(aresume(store, ref, call=model, tools=tools, approve=approve_risky)))
        else:
            steps = list(run(store, ref, call=model, tools=tools, approve=lambda call: Approve()))
        for step in steps:
            print(
                json.dumps(
                    {
                        "step": type(step).__name__,
                        "node": getattr(step.node, "id", None),
                        "reason": getattr(step, "reason", None),
                    }
                )
            )
    print(json.dumps({"called": CALLED}))


async def _collect(steps):
    return [s async for s in steps]


if __name__ == "__main__":
    main()
