"""Replay, rerun and compare, on scripted models."""

from __future__ import annotations

import pytest

from sessiontree import Approve, Conflict, Pause, decide, run, tool
from sessiontree.experiments import Variant, compare, replay, rerun
from sessiontree.testing import ScriptedModel, reply, tool_call

from conftest import user
from flows import CALLED, approve_risky, get_weather, send_email

TOOLS = [get_weather, send_email]


@pytest.fixture
def store(every_store):
    """Replay, rerun and compare work alike on a SQLite file, SQLite ``:memory:`` and PostgreSQL."""
    return every_store


@pytest.fixture
def recorded(store, session):
    """A finished run with a tool call, a pause, a human decision and a final answer."""
    session.append(user("Weather in Paris? Email bob."))
    model = ScriptedModel(
        [
            reply(None, tool_call("get_weather", {"city": "Paris"}, id="w")),
            reply("Emailing.", tool_call("send_email", {"to": "bob", "body": "sunny"}, id="e")),
            reply("Sent."),
        ],
        model="gpt-x",
    )
    pause = list(run(store, session, call=model, tools=TOOLS, approve=approve_risky))[-1].node
    decide(store, pause.id, {"e": Approve()}, by="ops")
    list(run(store, session, call=model, tools=TOOLS))
    return session


def test_replay_with_recorded_tools_matches(store, recorded):
    report = replay(store, "main", session=recorded)
    assert report.matched and report.divergence is None
    assert report.compared == 5 and report.final == "completed"  # 3 replies, 2 tool results
    assert report.branch == "main-replay"
    assert recorded.messages("main-replay") == recorded.messages("main")
    assert recorded.branch("main-replay").metadata == {"replay_of": "main", "tools": "recorded"}
    again = replay(store, "main", session=recorded)
    assert again.branch == "main-replay-2" and again.matched


def test_replay_with_live_tools_reports_the_first_divergence(store, recorded):
    @tool
    def get_weather(city: str) -> str:
        """Changed behaviour."""
        return f"Rain in {city}"

    report = replay(
        store, "main", session=recorded, tools="live", implementations=[get_weather, send_email], into="live"
    )
    assert not report.matched
    assert report.divergence.index == 1
    assert report.divergence.expected == '["tool", "w", "Sunny in Paris, 21C"]'
    assert report.divergence.actual == '["tool", "w", "Rain in Paris"]'
    assert recorded.node(report.divergence.node_id).payload["content"] == "Rain in Paris"


def test_replay_replays_a_rejection(store, session):
    session.append(user("email"))
    model = ScriptedModel(
        [reply(None, tool_call("send_email", {"to": "b", "body": "x"}, id="e")), reply("Not sent.")]
    )
    pause = list(run(store, session, call=model, tools=TOOLS, approve=approve_risky))[-1].node
    from sessiontree import Reject

    decide(store, pause.id, {"e": Reject("no")})
    list(run(store, session, call=model, tools=TOOLS))
    report = replay(store, "main", session=session, tools="live", implementations=TOOLS)
    assert report.matched  # the recorded rejection was applied, send_email never ran live


def test_replaying_a_branch_left_at_a_pause_pauses_and_runs_nothing_live(store, session):
    session.append(user("email"))
    model = ScriptedModel([reply(None, tool_call("send_email", {"to": "b", "body": "x"}, id="e"))])
    assert list(run(store, session, call=model, tools=TOOLS, approve=approve_risky))[-1].reason == "paused"
    CALLED.clear()
    for tools in ("live", "recorded"):
        report = replay(store, "main", session=session, tools=tools, implementations=TOOLS)
        assert (report.matched, report.compared, report.final) == (True, 1, "paused")
        assert session.head(report.branch).payload["reason"] == "the recording paused here"
    assert CALLED == []  # the undecided call was never approved, so it never ran


def test_replay_tells_apart_calls_whose_ids_repeat_from_one_reply_to_the_next(store, session):
    session.append(user("Paris, then London"))
    model = ScriptedModel(
        [
            reply(None, tool_call("get_weather", {"city": "Paris"}, id="call_0")),
            reply(None, tool_call("get_weather", {"city": "London"}, id="call_0")),
            reply("Both sunny."),
        ]
    )
    list(run(store, session, call=model, tools=TOOLS))
    report = replay(store, "main", session=session)
    assert report.matched and report.compared == 5
    assert [m["content"] for m in session.messages(report.branch) if m["role"] == "tool"] == [
        "Sunny in Paris, 21C",
        "Sunny in London, 21C",
    ]


def test_replay_needs_a_model_call(store, session):
    session.append(user("only a question"))
    with pytest.raises(Conflict, match="no model call to replay"):
        replay(store, "main", session=session)


def test_rerun_variants_from_a_checkpoint_then_compare(store, recorded):
    recorded.checkpoint("asked", at=recorded.path("main")[0])

    def terse(messages, tools):
        return reply("Sunny.")

    calls = []

    def careful(messages, tools):
        calls.append(messages[0])
        if messages[-1]["role"] == "tool":
            return reply("It is sunny in Paris; I did not email anyone.")
        return reply(None, tool_call("get_weather", {"city": "Paris"}, id=f"w{len(calls)}"))

    progress = []
    results = rerun(
        store,
        "asked",
        [
            Variant("terse", ScriptedModel([terse] * 2, model="small"), params={"temperature": 0}),
            Variant("careful", careful, system="Never send email."),
        ],
        n=2,
        session=recorded,
        tools=TOOLS,
        concurrency=2,
        progress=lambda done, total, r: progress.append((done, total)),
    )
    assert sorted((r.branch, r.reason) for r in results) == [
        ("careful-1", "completed"),
        ("careful-2", "completed"),
        ("terse-1", "completed"),
        ("terse-2", "completed"),
    ]
    assert sorted(progress) == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert calls[0] == {"role": "system", "content": "Never send email."}
    assert recorded.branch("terse-1").metadata["variant"] == "terse"
    assert recorded.branch("careful-2").metadata["system"] == "Never send email."
    terse_run = store.run(recorded.head("terse-1").run_id)
    assert terse_run.params == {"temperature": 0} and terse_run.model == "small"
    assert recorded.messages("main")[-1]["content"] == "Sent."  # untouched

    comparison = compare(
        store,
        ["main", "terse-1", "careful-1"],
        session=recorded,
        prices={"gpt-x": {"input": 1.0, "output": 2.0}, "small": {"input": 0.5, "output": 0.5}},
    )
    assert comparison.ancestor.id == recorded.node("asked").id
    by_name = {b.branch: b for b in comparison.branches}
    assert by_name["terse-1"].final == "Sunny." and by_name["terse-1"].steps == 1
    assert by_name["careful-1"].tool_calls == 1 and by_name["careful-1"].steps == 2
    main = by_name["main"]
    assert (main.status, main.steps, main.tool_calls, main.pauses) == ("completed", 3, 2, 1)
    assert main.usage.calls == 3 and main.usage.by_model.keys() == {"gpt-x"}
    assert main.cost == pytest.approx((main.usage.input_tokens * 1 + main.usage.output_tokens * 2) / 1e6)
    assert by_name["careful-1"].cost is None  # the scripted function has no price: unknown, not 0


def test_rerun_refuses_taken_names_before_running_anything(store, recorded):
    recorded.fork("terse", at="main")
    model = ScriptedModel([])
    with pytest.raises(Conflict, match="'terse' already exists"):
        rerun(store, "main", [Variant("fresh", model), Variant("terse", model)], session=recorded)
    assert "fresh" not in {b.name for b in recorded.branches()}
    assert model.calls == []


def test_rerun_records_errors_and_pauses(store, recorded):
    results = rerun(
        store,
        recorded.path("main")[0].id,
        [
            Variant("broken", ScriptedModel([RuntimeError("boom")])),
            Variant("risky", ScriptedModel([reply(None, tool_call("send_email", {"to": "x", "body": "y"}))])),
        ],
        tools=TOOLS,
        approve=lambda call: Pause("check"),
    )
    by_variant = {r.variant: r for r in results}
    assert by_variant["broken"].reason == "error" and "boom" in by_variant["broken"].error
    assert by_variant["risky"].reason == "paused"
    summary = {b.branch: b for b in compare(store, ["broken", "risky"], session=recorded).branches}
    assert summary["broken"].status == "error" and summary["broken"].errors == ["boom"]
    assert summary["risky"].status == "paused" and summary["risky"].pauses == 1


def test_usage_rolls_up_per_branch_and_subtree(store, recorded):
    root = recorded.path("main")[0]
    rerun(store, root.id, [Variant("alt", ScriptedModel(["Short answer."], model="small"))])
    main, alt = recorded.usage("main"), recorded.usage("alt")
    assert (main.calls, alt.calls) == (3, 1)
    total = recorded.subtree_usage(root)
    assert total.calls == 4 and set(total.by_model) == {"gpt-x", "small"}
    assert total.input_tokens == main.input_tokens + alt.input_tokens
    assert recorded.usage("main", since="main").calls == 0
