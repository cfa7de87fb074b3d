"""The agent loop: tools, approval pauses, resume from another process, limits, failures."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import sessiontree
from sessiontree import (
    Approve,
    Assistant,
    BranchMoved,
    Conflict,
    Edit,
    Final,
    Pause,
    Paused,
    Reject,
    Token,
    ToolContext,
    ToolEnd,
    ToolStart,
    aresume,
    arun,
    decide,
    resume,
    tool,
)
from sessiontree.testing import ScriptedModel, ScriptExhausted, reply, tool_call

from conftest import user
from flows import CALLED, approve_risky, get_weather, send_email

TESTS = Path(__file__).parent
TOOLS = [get_weather, send_email]


@pytest.fixture
def store(every_store):
    """The loop runs alike on a SQLite file, SQLite ``:memory:`` and PostgreSQL."""
    return every_store


ITS_FILE = pytest.mark.parametrize("every_store", ["sqlite"], indirect=True)
"""For a test that reopens the store's file in this or another process."""


@pytest.fixture(autouse=True)
def _clear_calls():
    CALLED.clear()


def run(store, session, model, branch="main", **kwargs):
    kwargs.setdefault("tools", TOOLS)
    return list(sessiontree.run(store, session, branch, call=model, **kwargs))


def kinds(steps):
    return [type(s).__name__ for s in steps]


def flow_process(*args, env=None):
    result = subprocess.run(
        [sys.executable, str(TESTS / "flows.py"), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(TESTS), **(env or {})},
        timeout=60,
    )
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    return result.returncode, lines, result.stderr


@ITS_FILE
def test_canonical_flow_pause_then_decide_and_resume_in_a_new_process(store, session, tmp_path):
    session.append(user("Weather in Paris? Then email it to bob."))
    model = ScriptedModel(
        [
            reply(None, tool_call("get_weather", {"city": "Paris"}, id="w1")),
            reply(None, tool_call("send_email", {"to": "bob@example.com", "body": "Sunny"}, id="e1")),
        ]
    )
    steps = run(store, session, model, approve=approve_risky)
    assert kinds(steps) == ["Assistant", "ToolStart", "ToolEnd", "Assistant", "Paused", "Final"]
    assert steps[2].node.payload == {"role": "tool", "tool_call_id": "w1", "content": "Sunny in Paris, 21C"}
    assert steps[-1].reason == "paused"
    pause_id = steps[-2].node.id  # all we keep
    assert steps[-2].calls == [
        {
            "id": "e1",
            "name": "send_email",
            "reason": "emails need a human",
            "arguments": '{"to": "bob@example.com", "body": "Sunny"}',
        }
    ]
    assert [n.id for n in store.pending()] == [pause_id]
    assert CALLED == [("get_weather", {"city": "Paris"})]
    store.close()

    code, lines, err = flow_process("resume", str(tmp_path / "store.db"), pause_id)
    assert code == 0, err
    assert [line.get("step") for line in lines[:-1]] == ["ToolStart", "ToolEnd", "Assistant", "Final"]
    assert lines[-2]["reason"] == "completed"
    assert lines[-1]["called"] == [["send_email", {"to": "bob@example.com", "body": "Sunny"}]]

    from sessiontree import Store

    with Store(tmp_path / "store.db") as again:
        s = again.session(session.id)
        assert s.messages()[-1] == {"role": "assistant", "content": "Done: the email is sent."}
        assert [m["role"] for m in s.messages()] == [
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant",
        ]
        assert again.pending() == [] and again.verify().ok


def test_three_parallel_calls_with_a_pause_on_the_second(store, session):
    session.append(user("go"))
    calls = [tool_call("get_weather", {"city": c}, id=f"c{i}") for i, c in enumerate("ABC")]
    model = ScriptedModel([reply(None, *calls), reply("all done")])
    steps = run(
        store, session, model, approve=lambda call: Pause("check B") if call.id == "c1" else Approve()
    )
    assert kinds(steps) == ["Assistant", "ToolStart", "ToolStart", "ToolEnd", "ToolEnd", "Paused", "Final"]
    assert [s.call.id for s in steps if isinstance(s, ToolEnd)] == ["c0", "c2"]
    pause = steps[-2].node
    assert [c["id"] for c in pause.payload["calls"]] == ["c1"]
    # Paused again on a plain re-run: nothing runs until a human decides.
    assert kinds(run(store, session, model)) == ["Paused", "Final"]
    decide(store, pause.id, {"c1": Approve()})
    steps = run(store, session, model, approve=lambda call: Pause("never asked again"))
    assert kinds(steps) == ["ToolStart", "ToolEnd", "Assistant", "Final"]
    tool_messages = [m for m in session.messages() if m["role"] == "tool"]
    assert sorted(m["tool_call_id"] for m in tool_messages) == ["c0", "c1", "c2"]
    assert session.verify().ok


def test_a_pause_lists_every_call_that_needs_a_human(store, session):
    session.append(user("go"))
    calls = [tool_call("send_email", {"to": f"{i}@x", "body": "b"}, id=f"e{i}") for i in range(3)]
    steps = run(store, session, ScriptedModel([reply(None, *calls)]), approve=approve_risky)
    assert [c["id"] for c in steps[-2].node.payload["calls"]] == ["e0", "e1", "e2"]
    assert CALLED == []


def test_rejection_reaches_the_model_as_a_tool_message(store, session):
    session.append(user("email bob"))
    model = ScriptedModel(
        [
            reply(None, tool_call("send_email", {"to": "bob", "body": "hi"}, id="e")),
            reply("OK, I will not send it."),
        ]
    )
    pause = run(store, session, model, approve=approve_risky)[-1].node
    decide(store, pause.id, {"e": Reject("bob is on holiday")}, by="alice")
    steps = run(store, session, model)
    assert kinds(steps) == ["ToolEnd", "Assistant", "Final"]
    sent = model.calls[-1]["messages"][-1]
    assert sent == {
        "role": "tool",
        "tool_call_id": "e",
        "content": "Rejected: the call to send_email was not run. bob is on holiday",
    }
    assert CALLED == []
    decision = session.children(pause)[0]
    assert decision.payload["by"] == "alice"


def test_edited_arguments_are_what_runs(store, session):
    session.append(user("email"))
    model = ScriptedModel(
        [reply(None, tool_call("send_email", {"to": "bob", "body": "hi"}, id="e")), reply("sent")]
    )
    pause = run(store, session, model, approve=approve_risky)[-1].node
    decide(store, pause.id, {"e": Edit({"to": "alice", "body": "hello"})})
    run(store, session, model)
    assert CALLED == [("send_email", {"to": "alice", "body": "hello"})]


def test_decide_errors_and_one_decision_per_pause(store, session):
    session.append(user("email"))
    model = ScriptedModel([reply(None, tool_call("send_email", {"to": "b", "body": "x"}, id="e"))])
    pause = run(store, session, model, approve=approve_risky)[-1].node
    with pytest.raises(Conflict, match="has no call\\(s\\) nope; its calls are e"):
        decide(store, pause.id, {"nope": Approve()})
    with pytest.raises(Conflict, match="not a pause"):
        decide(store, session.path("main")[0].id, {"e": Approve()})
    with pytest.raises(Conflict, match="no decision yet"):
        aresume(store, pause.id, call=model)
    decide(store, pause.id, {"e": Approve()})
    with pytest.raises(Conflict, match=f"pause {pause.id} already has a decision"):
        decide(store, pause.id, {"e": Reject("late")})


@ITS_FILE
def test_two_processes_deciding_one_pause_exactly_one_wins(store, session, tmp_path):
    session.append(user("email"))
    model = ScriptedModel([reply(None, tool_call("send_email", {"to": "b", "body": "x"}, id="e"))])
    pause = run(store, session, model, approve=approve_risky)[-1].node
    script = (
        "import sys; from sessiontree import Store, decide, Approve, Conflict\n"
        "store = Store(sys.argv[1])\n"
        "try:\n    decide(store, sys.argv[2], {'e': Approve()}, by=sys.argv[3]); print('won')\n"
        "except Conflict as e:\n    print('lost:', e)\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(tmp_path / "store.db"), pause.id, f"p{i}"],
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outputs = sorted(p.communicate(timeout=60)[0].strip() for p in procs)
    assert outputs[1] == "won" and outputs[0].startswith("lost: pause")
    assert len([n for n in session.children(pause) if n.kind == "decision"]) == 1


def test_resuming_twice_the_second_gets_a_clear_error(store, session):
    session.append(user("email"))
    model = ScriptedModel(
        [reply(None, tool_call("send_email", {"to": "b", "body": "x"}, id="e")), reply("done")]
    )
    pause = run(store, session, model, approve=approve_risky)[-1].node
    decide(store, pause.id, {"e": Approve()})
    late = aresume(store, pause.id, call=model, tools=TOOLS)  # found the branch at the decision
    steps = asyncio.run(_collect(aresume(store, pause.id, call=model, tools=TOOLS)))
    assert steps[-1].reason == "completed"
    with pytest.raises(BranchMoved, match="moved"):
        asyncio.run(_collect(late))
    with pytest.raises(Conflict, match="already resumed"):
        aresume(store, pause.id, call=model)
    assert CALLED == [("send_email", {"to": "b", "body": "x"})]


def test_one_approval_runs_its_call_once_however_many_branches_reach_the_decision(store, session):
    session.append(user("email"))
    call = tool_call("send_email", {"to": "b", "body": "x"}, id="e")
    model = ScriptedModel([reply(None, call), reply("sent"), reply("sent again")])
    pause = run(store, session, model, approve=approve_risky)[-1].node
    session.fork("alt", at=pause.id)
    decision = decide(store, pause.id, {"e": Approve()})
    assert session.branches_at(decision) == ["alt", "main"]
    assert [s.reason for s in resume(store, pause.id, call=model, tools=TOOLS) if isinstance(s, Final)] == [
        "completed"
    ]
    assert session.head("main").payload["content"] == "sent"  # the branch that paused, not the fork
    with pytest.raises(Conflict, match=f"pause {pause.id} was already resumed"):
        aresume(store, pause.id, call=model)
    # the other branch is still at the decision; running it asks again instead of sending twice
    (other,) = session.branches_at(decision)
    steps = run(store, session, model, branch=other, approve=approve_risky)
    assert kinds(steps) == ["Paused", "Final"]
    assert steps[0].node.payload["reason"] == (
        f"emails need a human (decision {decision.id} approved it once, "
        "and another branch has acted on that decision)"
    )
    assert CALLED == [("send_email", {"to": "b", "body": "x"})]
    decide(store, steps[0].node.id, {"e": Approve()})  # a second approval sends a second email
    assert kinds(run(store, session, model, branch=other)) == ["ToolStart", "ToolEnd", "Assistant", "Final"]
    assert len(CALLED) == 2 and store.verify().ok


def test_a_rejection_holds_on_every_branch_at_the_decision(store, session):
    session.append(user("email"))
    call = tool_call("send_email", {"to": "b", "body": "x"}, id="e")
    model = ScriptedModel([reply(None, call), reply("not sent"), reply("not sent either")])
    pause = run(store, session, model, approve=approve_risky)[-1].node
    session.fork("alt", at=pause.id)
    decide(store, pause.id, {"e": Reject("no")})
    for branch in ("main", "alt"):
        assert kinds(run(store, session, model, branch=branch)) == ["ToolEnd", "Assistant", "Final"]
    assert CALLED == []


def test_a_branch_that_acts_on_a_decision_first_wins_a_race_for_it(store, session):
    """Two branches at one decision: main looks, finds it unused, and before main writes
    anything alt acts on it (here from main's approver, asked about the second call).
    main's first write then sees alt's node and asks about the approved call again."""
    session.append(user("email and weather"))
    calls = [
        tool_call("send_email", {"to": "b", "body": "x"}, id="e"),
        tool_call("get_weather", {"city": "Paris"}, id="w"),
    ]
    model = ScriptedModel([reply(None, *calls)])
    pause = run(store, session, model, approve=lambda c: Pause("human") if c.id == "e" else Pause("later"))[
        -1
    ].node
    session.fork("alt", at=pause.id)
    decision = decide(store, pause.id, {"e": Approve()})

    def approve(call):
        if call.id == "w" and not session.children(decision):
            session.append({"error": "stand-in for alt's run"}, kind="error", branch="alt")
        return approve_risky(call)

    steps = run(store, session, model, approve=approve)
    assert kinds(steps) == ["ToolStart", "ToolEnd", "Paused", "Final"]
    assert steps[1].call.id == "w" and steps[2].node.payload["calls"][0]["id"] == "e"
    assert CALLED == [("get_weather", {"city": "Paris"})]
    assert len(session.children(decision)) == 2 and store.verify().ok


async def _collect(steps):
    return [s async for s in steps]


@ITS_FILE
def test_an_unsafe_tool_cut_off_mid_call_is_never_rerun_silently(store, session, tmp_path):
    session.append(user("email"))
    session.append(reply(None, tool_call("send_email", {"to": "bob", "body": "x"}, id="e")))
    store.close()
    log = tmp_path / "sent.log"
    code, _, _ = flow_process(
        "run", str(tmp_path / "store.db"), session.id, env={"DIE_IN_TOOL": "1", "SENT_LOG": str(log)}
    )
    assert code == 9 and len(log.read_text().splitlines()) == 1

    from sessiontree import Store

    with Store(tmp_path / "store.db") as again:
        model = ScriptedModel([reply("done")])
        steps = run(again, session.id, model)
        assert kinds(steps) == ["Paused", "Final"]
        assert steps[0].node.payload["calls"][0]["reason"].startswith("interrupted")
        assert CALLED == [] and model.calls == []
        decide(again, steps[0].node.id, {"e": Reject("check the outbox")})
        assert kinds(run(again, session.id, model)) == ["ToolEnd", "Assistant", "Final"]
        assert len(log.read_text().splitlines()) == 1
        assert model.calls[-1]["messages"][-1]["content"] == (
            "Rejected: the call to send_email started earlier and was cut off before any result, "
            "so it may or may not have happened; it was not run again. check the outbox"
        )
        assert again.verify().ok


def test_an_idempotent_tool_cut_off_is_run_again(store, session):
    session.append(user("weather"))
    session.append(reply(None, tool_call("get_weather", {"city": "Oslo"}, id="w")))
    session.append({"calls": [{"id": "w", "name": "get_weather", "arguments": "{}"}]}, kind="tool_start")
    steps = run(store, session, ScriptedModel([reply("rainy")]))
    assert kinds(steps) == ["ToolStart", "ToolEnd", "Assistant", "Final"]
    assert CALLED == [("get_weather", {"city": "Oslo"})]


def test_bad_tool_calls_become_precise_tool_errors(store, session):
    @tool
    def boom(x: int) -> int:
        """Fails."""
        raise ValueError(f"cannot handle {x}")

    session.append(user("try things"))
    calls = [
        tool_call("nope", {}, id="a"),
        tool_call("get_weather", "{not json", id="b"),
        tool_call("get_weather", {"town": "x"}, id="c"),
        tool_call("boom", {"x": 2}, id="d"),
        tool_call("get_weather", {"city": 3}, id="e"),
    ]
    steps = run(store, session, ScriptedModel([reply(None, *calls), reply("ok")]), tools=[get_weather, boom])
    ends = {s.call.id: s for s in steps if isinstance(s, ToolEnd)}
    assert not any(e.ok for e in ends.values())
    text = {k: e.node.payload["content"] for k, e in ends.items()}
    assert text["a"] == "Error: there is no tool named 'nope'. Available tools: boom, get_weather."
    assert text["b"].startswith("Error: invalid arguments for get_weather: arguments are not valid JSON")
    assert text["c"] == (
        "Error: invalid arguments for get_weather: arguments: unexpected argument(s) town; expected city;"
        " arguments: missing required argument(s) city"
    )
    assert text["d"] == "Error: boom raised ValueError: cannot handle 2"
    assert text["e"] == "Error: invalid arguments for get_weather: arguments.city: expected a string, got 3"
    assert steps[-1].reason == "completed"


def test_max_steps(store, session):
    session.append(user("loop forever"))
    model = ScriptedModel(
        [reply(None, tool_call("get_weather", {"city": "X"}, id=f"w{i}")) for i in range(10)]
    )
    steps = run(store, session, model, max_steps=3)
    assert steps[-1].reason == "max_steps" and len(model.calls) == 3


def test_model_error_writes_an_error_node_and_a_rerun_retries(store, session):
    session.append(user("hi"))
    model = ScriptedModel([RuntimeError("upstream 500"), reply("hello")])
    steps = run(store, session, model)
    assert kinds(steps) == ["Final"] and steps[0].reason == "error"
    assert steps[0].node.kind == "error" and steps[0].node.payload["message"] == "upstream 500"
    assert run(store, session, model)[-1].reason == "completed"
    assert [m["role"] for m in session.messages()] == ["user", "assistant"]


def test_bad_model_output_is_an_error_not_a_crash(store, session):
    session.append(user("hi"))
    steps = run(store, session, ScriptedModel([{"role": "user", "content": "confused"}]))
    assert steps[-1].reason == "error" and "not an assistant message" in steps[-1].error
    steps = run(store, session, ScriptedModel([]))
    assert steps[-1].reason == "error" and "ScriptExhausted" in steps[-1].error


def test_cancel_records_an_error_node_and_is_not_swallowed(store, session):
    started = asyncio.Event()

    async def slow_model(messages, tools):
        started.set()
        await asyncio.sleep(3600)

    session.append(user("hi"))

    async def main():
        steps = []

        async def consume():
            async for step in arun(store, session, call=slow_model):
                steps.append(step)

        task = asyncio.create_task(consume())
        await started.wait()
        task.cancel()
        outcome = (await asyncio.gather(task, return_exceptions=True))[0]
        return steps, outcome, task.cancelled()

    steps, outcome, cancelled = asyncio.run(main())
    assert isinstance(outcome, asyncio.CancelledError) and cancelled  # the cancel went on up
    assert steps == []
    assert session.head().kind == "error" and session.head().payload["error"] == "cancelled"
    assert session.verify().ok


def test_streaming_turns_deltas_into_tokens(store, session):
    session.append(user("hi"))
    steps = run(store, session, ScriptedModel([reply("hello there friend")], stream=True))
    assert [s.text for s in steps if isinstance(s, Token)] == ["hello ", "there ", "friend"]
    assert isinstance(steps[-2], Assistant) and steps[-2].message["content"] == "hello there friend"


def test_async_model_async_tool_and_context(store, session):
    seen = []

    @tool
    async def where(ctx: ToolContext, note: str = "") -> dict:
        """Report the context."""
        seen.append((ctx.session.id, ctx.branch, ctx.call_id, note))
        return {"ok": True}

    async def model(messages, tools):
        assert [t["function"]["name"] for t in tools] == ["where"]
        if messages[-1]["role"] == "tool":
            return reply("done")
        return reply(None, tool_call("where", {}, id="x"))

    session.append(user("hi"))
    steps = run(store, session, model, tools=[where])
    assert seen == [(session.id, "main", "x", "")]
    assert [s for s in steps if isinstance(s, ToolEnd)][0].node.payload["content"] == '{"ok": true}'


def test_provenance_of_each_model_call_is_recorded(store, session):
    session.append(user("one two three"))
    steps = run(store, session, ScriptedModel([reply("four five")], model="m-7"))
    assistant = steps[0].node
    run_row = store.run(assistant.run_id)
    assert (run_row.model, run_row.provider, run_row.finish_reason) == ("m-7", "scripted", "stop")
    assert run_row.usage == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


def test_works_from_any_head(store, session):
    session.append(user("weather?"))
    asked = session.append(reply(None, tool_call("get_weather", {"city": "Rome"}, id="w")))
    answered = session.append({"role": "tool", "tool_call_id": "w", "content": "hot"})
    # a fork at an assistant node with tool calls: the run resolves the calls
    session.fork("from-calls", at=asked)
    steps = run(store, session, ScriptedModel([reply("it is sunny")]), branch="from-calls")
    assert kinds(steps) == ["ToolStart", "ToolEnd", "Assistant", "Final"]
    # a head that is a tool message: call the model
    session.fork("from-tool", at=answered)
    model = ScriptedModel([reply("it is hot")])
    assert kinds(run(store, session, model, branch="from-tool")) == ["Assistant", "Final"]
    assert model.calls[0]["messages"][-1]["content"] == "hot"
    # an edited user turn
    session.edit(session.path("main")[0], user("weather in Oslo?"), branch="edited")
    model = ScriptedModel([reply("cold")])
    run(store, session, model, branch="edited")
    assert model.calls[0]["messages"] == [user("weather in Oslo?")]
    # a finished branch stays finished without calling the model
    assert kinds(run(store, session, ScriptedModel([]), branch="edited")) == ["Final"]


def test_an_empty_or_missing_branch_is_a_clear_error(store, session):
    with pytest.raises(Exception, match="no branch 'main'"):
        run(store, session, ScriptedModel([]))


def test_scripted_model_records_and_runs_out(session):
    model = ScriptedModel(["a"])
    model([user("x")], [])
    assert model.calls == [{"messages": [user("x")], "tools": []}]
    with pytest.raises(ScriptExhausted, match="no scripted reply left for call 2"):
        model([user("y")], [])


def test_final_is_always_last_and_unique(store, session):
    session.append(user("hi"))
    steps = run(store, session, ScriptedModel([reply("x")]))
    assert [isinstance(s, Final) for s in steps] == [False, True]
    assert not any(isinstance(s, (Paused, ToolStart)) for s in steps)


def test_a_failing_approver_ends_the_run_with_an_error_and_runs_nothing(store, session):
    def approve(call):
        raise RuntimeError("policy service down")

    session.append(user("email"))
    model = ScriptedModel([reply(None, tool_call("send_email", {"to": "b", "body": "x"}, id="e"))])
    steps = run(store, session, model, approve=approve)
    assert steps[-1].reason == "error" and steps[-1].error == "RuntimeError: policy service down"
    assert steps[-1].node.payload["during"] == "approval"
    assert CALLED == []
    # fixed approver: it carries on
    steps = run(store, session, ScriptedModel([reply("ok")]), approve=lambda call: Approve())
    assert kinds(steps) == ["ToolStart", "ToolEnd", "Assistant", "Final"]


def test_a_reply_that_cannot_be_stored_is_an_error_node(store, session):
    from sessiontree import Completion

    session.append(user("hi"))
    bad = Completion(reply("ok"), usage={"prompt_tokens": float("nan")})
    steps = run(store, session, ScriptedModel([bad]))
    assert kinds(steps) == ["Final"] and steps[0].reason == "error"
    assert steps[0].node.payload["during"] == "model reply"
    assert "run usage is not valid JSON" in steps[0].error
    assert session.verify().ok


def test_a_tool_result_that_is_not_json_is_a_tool_error_not_a_failed_run(store, session):
    @tool
    def loops() -> dict:
        """Returns a circular structure."""
        value: dict = {}
        value["self"] = value
        return value

    session.append(user("go"))
    model = ScriptedModel([reply(None, tool_call("loops", {}, id="c")), reply("handled")])
    steps = run(store, session, model, tools=[loops])
    assert kinds(steps) == ["Assistant", "ToolStart", "ToolEnd", "Assistant", "Final"]
    assert steps[2].ok is False and "cannot be sent as JSON" in steps[2].node.payload["content"]
    assert steps[-1].reason == "completed"


@pytest.mark.parametrize("given", [[], [get_weather]], ids=["no-tools", "other-tools"])
def test_a_resume_without_the_approved_tool_refuses_and_the_decision_stays_usable(any_store, given):
    session = any_store.create_session()
    session.append(user("Email bob."))
    model = ScriptedModel(
        [reply(None, tool_call("send_email", {"to": "bob", "body": "hi"}, id="e1")), "Done: sent."]
    )
    steps = list(run(any_store, session, model, tools=[send_email]))
    pause_id = steps[-2].node.id
    decide(any_store, pause_id, {"e1": Approve()}, by="alice")
    before = [n.id for n in session.tree()]
    CALLED.clear()
    with pytest.raises(sessiontree.ToolMissing) as refused:
        resume(any_store, pause_id, call=model, tools=given)
    assert str(refused.value) == (
        f"pause {pause_id}: the decided call e1 needs the tool 'send_email', which this run was not"
        " given; nothing was run and the decision stays usable (give the tool: tools=..., or --tools"
        " on the command line)"
    )
    assert [n.id for n in session.tree()] == before and CALLED == []
    assert [p for p, _ in any_store.storage.resumable()] == [pause_id]
    steps = list(resume(any_store, pause_id, call=model, tools=[send_email]))
    assert steps[-1].reason == "completed"
    assert CALLED == [("send_email", {"to": "bob", "body": "hi"})]
    assert any_store.verify().ok


def test_a_rejected_call_needs_no_tool_to_resume(any_store):
    session = any_store.create_session()
    session.append(user("Email bob."))
    model = ScriptedModel([reply(None, tool_call("send_email", {"to": "bob", "body": "hi"}, id="e1")), "OK."])
    pause_id = list(run(any_store, session, model, tools=[send_email]))[-2].node.id
    decide(any_store, pause_id, {"e1": Reject("no")}, by="alice")
    assert list(resume(any_store, pause_id, call=model))[-1].reason == "completed"
