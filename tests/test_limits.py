"""The loop's budgets (tokens, time, cost, repeated calls) and parallel tool calls."""

from __future__ import annotations

import asyncio
import threading

import pytest

from sessiontree import Completion, run, tool
from sessiontree import limits as limits_module
from sessiontree.limits import Limits
from sessiontree.testing import ScriptedModel, reply, tool_call

from conftest import user


def used(tokens_in: int, tokens_out: int, text: str | None = None, *calls, model: str = "m") -> Completion:
    return Completion(
        reply(text, *calls), model=model, usage={"prompt_tokens": tokens_in, "completion_tokens": tokens_out}
    )


def run_all(store, session, model, tools=(), **options):
    return list(run(store, session, call=model, tools=tools, **options))


# -- parallel tools -----------------------------------------------------------------------


def test_three_calls_of_one_batch_run_at_once_and_their_results_land_in_call_order(any_store):
    s = any_store.create_session("parallel")
    s.append(user("three lookups"))
    all_in = threading.Barrier(3, timeout=10)  # passes only when all three run at the same time
    finished = []

    @tool
    def lookup(n: int) -> str:
        all_in.wait()
        finished.append(n)
        return f"result {n}"

    model = ScriptedModel(
        [reply(None, *(tool_call("lookup", {"n": n}, id=f"c{n}") for n in (1, 2, 3))), reply("done")]
    )
    steps = run_all(any_store, s, model, [lookup])
    assert steps[-1].reason == "completed"
    path = s.path("main")
    starts = [n for n in path if n.kind == "tool_start"]
    assert len(starts) == 1 and [c["id"] for c in starts[0].payload["calls"]] == ["c1", "c2", "c3"]
    results = [n.payload for n in path if n.kind == "message" and n.payload["role"] == "tool"]
    assert [(r["tool_call_id"], r["content"]) for r in results] == [
        ("c1", "result 1"),
        ("c2", "result 2"),
        ("c3", "result 3"),
    ]
    assert sorted(finished) == [1, 2, 3]


def test_a_later_call_that_finishes_first_still_lands_after_the_earlier_one(store):
    s = store.create_session("order")
    s.append(user("two"))
    second_done = asyncio.Event()

    @tool
    async def slow() -> str:
        await asyncio.wait_for(second_done.wait(), 10)  # only returns once fast has finished
        return "slow"

    @tool
    async def fast() -> str:
        second_done.set()
        return "fast"

    model = ScriptedModel(
        [reply(None, tool_call("slow", {}, id="a"), tool_call("fast", {}, id="b")), reply("ok")]
    )
    run_all(store, s, model, [slow, fast])
    results = [n.payload["tool_call_id"] for n in s.path("main") if n.payload.get("role") == "tool"]
    assert results == ["a", "b"]


def test_a_tool_marked_parallel_false_runs_alone_and_a_bound_of_one_runs_calls_in_turn(store):
    events: list[str] = []
    lock = threading.Lock()

    def traced(name):
        def body(n: int) -> str:
            with lock:
                events.append(f"start {name}{n}")
            with lock:
                events.append(f"end {name}{n}")
            return "ok"

        body.__name__ = name
        return body

    shared = tool(traced("shared"))
    exclusive = tool(traced("exclusive"), parallel=False)
    calls = [
        tool_call("shared", {"n": 1}, id="a"),
        tool_call("exclusive", {"n": 2}, id="b"),
        tool_call("shared", {"n": 3}, id="c"),
    ]
    s = store.create_session("alone")
    s.append(user("go"))
    run_all(store, s, ScriptedModel([reply(None, *calls), reply("ok")]), [shared, exclusive])
    b = events.index("start exclusive2")
    assert events[b + 1] == "end exclusive2"  # nothing ran while it did
    assert events.index("end shared1") < b < events.index("start shared3")

    events.clear()
    s2 = store.create_session("in turn")
    s2.append(user("go"))
    run_all(
        store, s2, ScriptedModel([reply(None, *calls), reply("ok")]), [shared, exclusive], parallel_tools=1
    )
    assert events == [f"{e} {n}" for n in ("shared1", "exclusive2", "shared3") for e in ("start", "end")]
    with pytest.raises(ValueError, match="parallel_tools"):
        run_all(store, s2, ScriptedModel([]), parallel_tools=0)


# -- budgets --------------------------------------------------------------------------------


def note_of(steps):
    final = steps[-1]
    assert final.node.kind == "note" and final.node.payload["type"] == "limit"
    assert final.node.payload["limit"] == final.reason and final.node.payload["message"] == final.error
    return final


def test_a_token_budget_stops_before_the_call_that_would_pass_it_and_a_bigger_one_carries_on(any_store):
    s = any_store.create_session("tokens")
    s.append(user("loop"))

    @tool
    def step(n: int) -> str:
        return f"step {n}"

    replies = [used(40, 20, None, tool_call("step", {"n": n}, id=f"c{n}")) for n in range(3)]
    model = ScriptedModel([*replies, used(1, 1, "done")])
    steps = run_all(any_store, s, model, [step], limits=Limits(tokens=100))
    final = note_of(steps)
    assert final.reason == "token_budget"
    assert final.error == "this run used 120 tokens of its budget of 100"
    assert len(model.calls) == 2  # 60, then 120: the third call was not made
    assert s.branch("main").head_id == final.node.id
    steps = run_all(any_store, s, model, [step], limits=Limits(tokens=1000))  # a run of its own budget
    assert steps[-1].reason == "completed" and len(model.calls) == 4
    assert [m["content"] for m in s.messages("main")][-1] == "done"


def test_a_cost_budget_prices_each_call_and_an_unpriced_model_stops_the_run(store):
    s = store.create_session("cost")
    s.append(user("spend"))

    @tool
    def step() -> str:
        return "ok"

    prices = {"m": {"input": 1_000_000, "output": 0}}  # a dollar a token in
    model = ScriptedModel([used(3, 0, None, tool_call("step", {}, id=f"c{n}")) for n in range(5)])
    final = note_of(run_all(store, s, model, [step], limits=Limits(cost=5, prices=prices)))
    assert (final.reason, final.error) == ("cost_budget", "this run cost $6.000000 of its budget of $5")

    s2 = store.create_session("unpriced")
    s2.append(user("spend"))
    other = ScriptedModel([used(1, 0, None, tool_call("step", {}, id="x"), model="other"), used(1, 0, "no")])
    final = note_of(run_all(store, s2, other, [step], limits=Limits(cost=5, prices=prices)))
    assert final.error == "no price for model other, so the cost budget of $5 cannot be kept"
    with pytest.raises(ValueError, match="needs prices"):
        Limits(cost=1)
    for bad in (0, -1, float("nan"), True, "10"):
        with pytest.raises(ValueError, match="above 0"):
            Limits(tokens=bad)


def test_a_time_budget_is_checked_before_each_model_call_and_tool_batch(store, monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(limits_module, "_clock", lambda: clock[0])
    s = store.create_session("time")
    s.append(user("slow"))

    @tool
    def slow() -> str:
        clock[0] += 30  # the tool took half a minute
        return "ok"

    model = ScriptedModel([reply(None, tool_call("slow", {}, id=f"c{n}")) for n in range(5)])
    final = note_of(run_all(store, s, model, [slow], limits=Limits(seconds=50)))
    assert (final.reason, final.error) == ("time_budget", "this run took 60.0 s of its budget of 50 s")
    assert len(model.calls) == 2 and sum(1 for n in s.path("main") if n.kind == "tool_start") == 2


def test_the_same_call_asked_for_again_and_again_stops_the_run_before_it_runs_once_more(any_store):
    s = any_store.create_session("stuck")
    s.append(user("find it"))
    ran = []

    @tool
    def search(q: str) -> str:
        ran.append(q)
        return "nothing"

    same = [reply(None, tool_call("search", {"q": "x"}, id=f"c{n}")) for n in range(9)]
    final = note_of(run_all(any_store, s, ScriptedModel(same), [search], limits=Limits(repeats=3)))
    assert final.reason == "repeated_calls"
    assert (
        final.error == "the model asked for the same call(s) to search 4 times in a row (at most 3 allowed)"
    )
    assert ran == ["x", "x", "x"]
    # different arguments are not a repeat
    s2 = any_store.create_session("moving on")
    s2.append(user("find it"))
    varied = [reply(None, tool_call("search", {"q": str(n)}, id=f"c{n}")) for n in range(5)] + [
        reply("found")
    ]
    steps = run_all(any_store, s2, ScriptedModel(varied), [search], limits=Limits(repeats=1))
    assert steps[-1].reason == "completed"
