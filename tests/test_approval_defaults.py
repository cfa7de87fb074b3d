"""Safe by default: with no approver, tools that require approval pause; and the
sync twins behave the same inside and outside a running event loop."""

from __future__ import annotations

import asyncio

import pytest

from sessiontree import (
    Approve,
    Final,
    Paused,
    Reject,
    Store,
    Variant,
    aresume,
    arun,
    decide,
    replay,
    rerun,
    resume,
    run,
    tool,
)
from sessiontree.testing import ScriptedModel, reply, tool_call

from conftest import user

SENT: list[str] = []


@tool
def lookup(city: str) -> str:
    """Look something up."""
    return f"{city}: sunny"


@tool(idempotent=False)
def send_email(to: str) -> str:
    """Send an email."""
    SENT.append(to)
    return "sent"


@tool(requires_approval=True)
def delete_file(path: str) -> str:
    """Delete a file (safe to retry, not safe to do unasked)."""
    return f"deleted {path}"


@tool(idempotent=False, requires_approval=False)
def log_event(text: str) -> str:
    """Append to an audit log: not idempotent, but fine without a human."""
    return "logged"


TOOLS = [lookup, send_email, delete_file, log_event]


@pytest.fixture(autouse=True)
def _clear():
    SENT.clear()


def one_call(name: str, **arguments: str) -> ScriptedModel:
    return ScriptedModel([reply(None, tool_call(name, arguments, id="c1")), reply("done")])


@pytest.mark.parametrize(
    ("name", "arguments", "pauses"),
    [
        ("lookup", {"city": "Paris"}, False),
        ("send_email", {"to": "bob"}, True),
        ("delete_file", {"path": "/tmp/x"}, True),
        ("log_event", {"text": "hi"}, False),
    ],
)
def test_with_no_approver_only_tools_that_require_approval_pause(store, session, name, arguments, pauses):
    session.append(user("go"))
    steps = list(run(store, session, call=one_call(name, **arguments), tools=TOOLS))
    assert steps[-1].reason == ("paused" if pauses else "completed")
    if pauses:
        assert steps[-2].node.payload["reason"] == f"{name} requires approval"
        assert SENT == []


def test_the_flags_default_from_idempotence():
    assert (lookup.idempotent, lookup.requires_approval) == (True, False)
    assert (send_email.idempotent, send_email.requires_approval) == (False, True)
    assert (delete_file.idempotent, delete_file.requires_approval) == (True, True)
    assert (log_event.idempotent, log_event.requires_approval) == (False, False)


def test_the_same_email_is_not_sent_twenty_times(store, session):
    """The walk-through that sent the same email 20 times: now it waits for a human once."""
    session.append(user("email bob"))
    model = ScriptedModel(
        [reply(None, tool_call("send_email", {"to": "bob"}, id=f"c{i}")) for i in range(20)]
    )
    steps = list(run(store, session, call=model, tools=TOOLS))
    assert steps[-1].reason == "paused" and SENT == []
    assert len(model.calls) == 1


def test_an_approver_replaces_the_rule(store, session):
    session.append(user("go"))
    steps = list(
        run(store, session, call=one_call("send_email", to="bob"), tools=TOOLS, approve=lambda c: Approve())
    )
    assert steps[-1].reason == "completed" and SENT == ["bob"]
    session.append(user("again"))
    steps = list(
        run(store, session, call=one_call("lookup", city="Oslo"), tools=TOOLS, approve=lambda c: Reject("no"))
    )
    assert steps[-1].reason == "completed"
    assert session.messages()[-2]["content"].startswith("Rejected: the call to lookup was not run.")


def test_resume_has_a_sync_twin(store, session):
    session.append(user("email bob"))
    pause = list(run(store, session, call=one_call("send_email", to="bob"), tools=TOOLS))[-1].node
    decide(store, pause, {"c1": Approve()})  # a Node is a ref too
    steps = list(resume(store, pause, call=ScriptedModel([reply("sent it")]), tools=TOOLS))
    assert isinstance(steps[-1], Final) and steps[-1].reason == "completed" and SENT == ["bob"]


def test_sync_twins_work_inside_a_running_event_loop(tmp_path):
    """As in Jupyter: a loop is running in this thread when the sync function is called."""

    async def notebook_cell() -> list[str]:
        with Store(tmp_path / "nb.db") as store:
            session = store.create_session()
            session.append(user("email bob"))
            steps = list(run(store, session, call=one_call("send_email", to="bob"), tools=TOOLS))
            assert isinstance(steps[-2], Paused)
            decide(store, steps[-2].node.id, {"c1": Approve()})
            steps = list(resume(store, steps[-2].node.id, call=ScriptedModel([reply("ok")]), tools=TOOLS))
            session.checkpoint("asked", at=session.path("main")[0])
            results = rerun(store, "asked", [Variant("b", ScriptedModel(["fine"]))], session=session)
            report = replay(store, "main", session=session)
            return [steps[-1].reason, results[0].reason, str(report.matched)]

    assert asyncio.run(notebook_cell()) == ["completed", "completed", "True"]
    assert SENT == ["bob"]


def test_leaving_a_sync_run_early_closes_it(store, session):
    session.append(user("go"))
    model = ScriptedModel([reply(None, tool_call("lookup", {"city": "A"}, id="c1")), reply("done")])
    first = next(iter(run(store, session, call=model, tools=TOOLS)))  # then abandon the run
    assert type(first).__name__ == "Assistant"
    # The branch is consistent and the next run carries on from where it stopped.
    steps = list(run(store, session, call=ScriptedModel([reply("done")]), tools=TOOLS))
    assert [type(s).__name__ for s in steps] == ["ToolStart", "ToolEnd", "Assistant", "Final"]


def test_async_forms_are_the_same_steps(store, session):
    session.append(user("email bob"))

    async def main() -> list[str]:
        kinds = [
            type(s).__name__
            async for s in arun(store, session, call=one_call("send_email", to="bob"), tools=TOOLS)
        ]
        pause = store.pending()[0]
        decide(store, pause.id, {"c1": Approve()})
        kinds += [
            type(s).__name__ async for s in aresume(store, pause.id, call=ScriptedModel(["ok"]), tools=TOOLS)
        ]
        return kinds

    assert asyncio.run(main()) == [
        "Assistant",
        "Paused",
        "Final",
        "ToolStart",
        "ToolEnd",
        "Assistant",
        "Final",
    ]
