"""The OpenAI Agents SDK adapter: its Session protocol on both backends, approvals as pauses.

The SDK's own runner tests run against it too (tests/peer_suites/agents_sdk.py); these tests pin
what the adapter adds: one node per model response, nothing lost by pop and clear, O(1)
forks, strict compare-and-set, threads sharing one session, and an approval decided in
another Store (another process's view) resumed once.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest

agents = pytest.importorskip("agents")

from agents import Agent, Runner, function_tool, set_tracing_disabled  # noqa: E402
from agents.items import ModelResponse  # noqa: E402
from agents.memory.session_settings import SessionSettings  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from agents.usage import Usage  # noqa: E402
from openai.types.responses import (  # noqa: E402
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from sessiontree import Approve, BranchMoved, Conflict, Edit, InvalidPayload, Reject, Store, decide  # noqa: E402
from sessiontree.integrations.openai_agents import (  # noqa: E402
    SessiontreeSession,
    resume,
    session_uuid,
)
from sessiontree.model import sendable  # noqa: E402

from conftest import together  # noqa: E402

set_tracing_disabled(True)

USER = {"role": "user", "content": "weather in Paris?"}
REASONING = {
    "type": "reasoning",
    "id": "rs_1",
    "summary": [{"type": "summary_text", "text": "two lookups"}],
    "encrypted_content": "gAAAA-opaque",
}
CALL_A = {
    "type": "function_call",
    "id": "fc_1",
    "call_id": "c1",
    "name": "weather",
    "arguments": '{"city":"Paris"}',
    "status": "completed",
}
CALL_B = {
    "type": "function_call",
    "id": "fc_2",
    "call_id": "c2",
    "name": "weather",
    "arguments": '{"city":"Lyon"}',
    "status": "completed",
}
OUT_A = {"type": "function_call_output", "call_id": "c1", "output": "sunny"}
OUT_B = {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "rain"}]}
ANSWER = {
    "type": "message",
    "id": "msg_1",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "Sunny in Paris, rain in Lyon.", "annotations": []}],
}
TURN = [USER, REASONING, CALL_A, CALL_B, OUT_A, OUT_B, ANSWER]


def run(coro):
    return asyncio.run(coro)


def test_a_turn_round_trips_and_one_response_is_one_node(any_store):
    session = SessiontreeSession("chat-1", any_store)
    run(session.add_items(TURN[:1]))
    run(session.add_items(TURN[1:]))
    assert run(session.get_items()) == TURN  # verbatim, encrypted reasoning included
    assert run(SessiontreeSession("chat-1", any_store).get_items()) == TURN  # read back from the store

    tree = session.tree()
    path = tree.path("main")
    assert [n.payload.get("role") for n in path] == ["user", "assistant", "tool", "tool", "assistant"]
    assistant = path[1].payload
    assert [c["id"] for c in assistant["tool_calls"]] == ["c1", "c2"]
    assert assistant["reasoning_content"] == "two lookups"
    assert tree.verify().ok
    # what sessiontree's own loop would send: chat shape, none of the SDK's items
    sent = sendable(tree.messages("main"))
    assert all("raw" not in m for m in sent)
    assert sent[3] == {"role": "tool", "tool_call_id": "c2", "content": "rain"}
    assert sent[4] == {"role": "assistant", "content": "Sunny in Paris, rain in Lyon."}


def test_limit_and_session_settings(any_store):
    session = SessiontreeSession("chat", any_store, session_settings=SessionSettings(limit=2))
    run(session.add_items(TURN))
    assert run(session.get_items()) == TURN[-2:]
    assert run(session.get_items(3)) == TURN[-3:]  # an explicit limit wins
    assert run(session.get_items(0)) == []


def test_foreign_ids_match_exactly_in_one_lookup(any_store):
    run(SessiontreeSession("test_2", any_store).add_items([USER]))
    first = SessiontreeSession("test", any_store)
    assert run(first.get_items()) == []  # not "test_2", which a prefix match would open
    run(first.add_items([ANSWER]))
    assert first.tree().id == session_uuid("test") and first.tree().title == "test"
    assert first.tree().metadata == {"openai_agents": {"session_id": "test"}}
    assert run(SessiontreeSession("test_2", any_store).get_items()) == [USER]


def test_pop_and_clear_move_pointers_and_lose_nothing(any_store):
    session = SessiontreeSession("chat", any_store)
    run(session.add_items(TURN))
    tree = session.tree()
    answer_node = tree.head("main")
    assert run(session.pop_item()) == ANSWER
    assert run(session.pop_item()) == OUT_B
    # a node holding several items: the branch moves to a sibling holding the others
    run(session.add_items([{"role": "user", "content": "again"}]))
    assert run(session.pop_item()) == {"role": "user", "content": "again"}
    assert run(session.get_items()) == TURN[:5]
    assert any_store.node(answer_node.id).payload["raw"]["openai_agents"] == [ANSWER]  # still there

    before = len(tree.tree())
    run(session.clear_session())
    assert run(session.get_items()) == []
    assert [c.name for c in tree.checkpoints()] == ["main-cleared-1"]
    assert tree.path("main-cleared-1")[-1].payload["raw"]["openai_agents"] == [OUT_A]
    assert len(tree.tree()) == before
    run(session.add_items([USER]))  # a new root
    assert run(session.get_items()) == [USER]
    run(session.clear_session())
    assert [c.name for c in tree.checkpoints()] == ["main-cleared-1", "main-cleared-2"]
    assert run(session.pop_item()) is None

    session.delete_session(permanently=True)
    assert any_store.sessions() == []


def test_pop_of_a_grouped_response_keeps_its_other_items(any_store):
    session = SessiontreeSession("chat", any_store)
    run(session.add_items(TURN[:4]))
    assert run(session.pop_item()) == CALL_B
    assert run(session.get_items()) == [USER, REASONING, CALL_A]
    head = session.tree().head("main")
    assert [c["id"] for c in head.payload["tool_calls"]] == ["c1"]


def test_fork_is_one_row_and_shares_the_history(any_store):
    session = SessiontreeSession("chat", any_store)
    run(session.add_items(TURN))
    nodes = len(session.tree().tree())
    other = session.fork("what-if", at=session.tree().path("main")[1])
    assert len(session.tree().tree()) == nodes  # nothing copied
    assert run(other.get_items()) == TURN[:4]
    run(other.add_items([OUT_A]))
    assert run(session.get_items()) == TURN  # main is untouched
    assert run(session.fork("copy").get_items()) == TURN


def test_strict_refuses_an_interleaved_run(any_store):
    mine = SessiontreeSession("chat", any_store, strict=True)
    theirs = SessiontreeSession("chat", Store(any_store.path), strict=True)
    try:
        run(mine.get_items())
        run(theirs.get_items())
        run(theirs.add_items([USER]))
        with pytest.raises(BranchMoved):
            run(mine.add_items([{"role": "user", "content": "mine"}]))
        with pytest.raises(BranchMoved):
            run(mine.pop_item())
        assert run(theirs.get_items()) == [USER]  # nothing of mine was written
        run(mine.get_items())  # seen now: the next write goes on
        run(mine.add_items([ANSWER]))
        assert run(theirs.get_items()) == [USER, ANSWER]
    finally:
        theirs.store.close()


def test_bad_items_are_refused_whole(any_store):
    session = SessiontreeSession("chat", any_store)
    with pytest.raises(InvalidPayload, match="item 1 is a str"):
        run(session.add_items([USER, "hello"]))  # type: ignore[list-item]
    with pytest.raises(InvalidPayload):
        run(session.add_items([USER, {"role": "user", "content": float("nan")}]))
    assert run(session.get_items()) == []


def test_threads_sharing_one_session_all_land(any_store):
    """The SDK's concurrent-access pattern: threads writing through one session object."""
    session = SessiontreeSession("chat", any_store)
    start = threading.Barrier(5)
    errors = []

    def write(number: int) -> None:
        try:
            start.wait()
            for i in range(10):
                run(session.add_items([{"role": "user", "content": f"{number}-{i}"}]))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    got = {i["content"] for i in run(SessiontreeSession("chat", Store(any_store.path)).get_items())}
    assert got == {f"{n}-{i}" for n in range(5) for i in range(10)}


def test_sessions_in_separate_stores_all_land(db_target):
    """Writers with a Store each (as processes would be): every write lands, none forks."""
    start = threading.Barrier(4)

    def write(number: int) -> None:
        with Store(db_target) as store:
            session = SessiontreeSession("chat", store)
            start.wait()
            for i in range(5):
                run(session.add_items([{"role": "user", "content": f"{number}-{i}"}]))

    with Store(db_target) as store:
        SessiontreeSession("chat", store).tree()  # created once, before the race
    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with Store(db_target) as store:
        items = run(SessiontreeSession("chat", store).get_items())
        assert len(items) == 20
        assert len(store.session(session_uuid("chat")).tree()) == 20  # one chain, no fork


# -- approvals --------------------------------------------------------------


class ScriptedModel(Model):
    """Answers with the next of ``turns``: a list of tool calls, or a text."""

    def __init__(self, turns: list[Any]) -> None:
        self.turns = list(turns)
        self.inputs: list[Any] = []

    async def get_response(
        self, system_instructions, input, model_settings, tools, output_schema, handoffs, tracing, **kwargs
    ):
        self.inputs.append(input)
        turn = self.turns.pop(0)
        if isinstance(turn, str):
            text = ResponseOutputText(type="output_text", text=turn, annotations=[])
            output = [
                ResponseOutputMessage(
                    id="msg_x", type="message", role="assistant", status="completed", content=[text]
                )
            ]
        else:
            output = [
                ResponseFunctionToolCall(
                    type="function_call", id=f"fc_{cid}", call_id=cid, name=name, arguments=json.dumps(args)
                )
                for cid, name, args in turn
            ]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError


def email_agent(sent: list[str], model: Model) -> Agent:
    @function_tool(needs_approval=True)
    def send_email(to: str) -> str:
        """Send an email."""
        sent.append(to)
        return f"sent to {to}"

    return Agent(name="mailer", model=model, tools=[send_email])


def paused_run(store: Store, sent: list[str]):
    model = ScriptedModel([[("call_1", "send_email", {"to": "bob"})], "Emailed bob."])
    agent = email_agent(sent, model)
    session = SessiontreeSession("mail", store)
    result = run(Runner.run(agent, "email bob", session=session))
    assert [i.name for i in result.interruptions] == ["send_email"] and sent == []
    pause = run(session.pause(result))
    return agent, session, pause


def test_an_approval_decided_elsewhere_resumes_once(any_store):
    sent: list[str] = []
    agent, session, pause = paused_run(any_store, sent)
    assert [p.id for p in any_store.pending()] == [pause.id]
    assert pause.payload["calls"] == [{"id": "call_1", "name": "send_email", "arguments": '{"to": "bob"}'}]

    with Store(any_store.path) as elsewhere:  # another process's view: decide there
        decide(elsewhere, pause.id, {"call_1": Approve()}, by="ann")
    assert any_store.pending() == []
    result = run(resume(any_store, pause, agent))
    assert result.final_output == "Emailed bob."
    assert sent == ["bob"]  # the tool ran once
    with pytest.raises(Conflict, match="already resumed"):
        run(resume(any_store, pause, agent))
    assert sent == ["bob"]

    items = run(session.get_items())
    assert [i.get("type", i.get("role")) for i in items] == [
        "user",
        "function_call",
        "function_call_output",
        "message",
    ]
    kinds = [n.kind for n in session.tree().path("main")]
    assert kinds == ["message", "message", "pause", "decision", "note", "message", "message"]
    assert session.tree().verify().ok


def test_a_rejection_reaches_the_model_and_the_tool_never_runs(any_store):
    sent: list[str] = []
    agent, session, pause = paused_run(any_store, sent)
    decide(any_store, pause, {"call_1": Reject("not bob")})
    result = run(resume(any_store, pause, agent))
    assert sent == [] and result.final_output == "Emailed bob."
    output = next(i for i in run(session.get_items()) if i.get("type") == "function_call_output")
    assert "not bob" in json.dumps(output)


def test_an_edit_is_refused_before_anything_is_written(any_store):
    sent: list[str] = []
    agent, session, pause = paused_run(any_store, sent)
    nodes = len(session.tree().tree())
    with pytest.raises(Exception, match="call_1"):  # decide checks the edit: only the original fits
        decide(any_store, pause, {"call_1": Edit({"to": "eve"})})
    assert len(session.tree().tree()) == nodes
    # a decision written some other way still never runs edited arguments
    session.tree().append(
        {"decisions": {"call_1": {"action": "edit", "arguments": {"to": "eve"}}}},
        kind="decision",
        parent=pause,
    )
    nodes = len(session.tree().tree())
    with pytest.raises(Conflict, match="edited arguments"):
        run(resume(any_store, pause, agent))
    assert len(session.tree().tree()) == nodes and sent == []


def test_resume_refuses_undecided_and_foreign_pauses(any_store):
    sent: list[str] = []
    agent, session, pause = paused_run(any_store, sent)
    with pytest.raises(Conflict, match="no decision yet"):
        run(resume(any_store, pause, agent))
    with pytest.raises(Conflict, match="not an Agents SDK pause"):
        run(resume(any_store, session.tree().path("main")[0], agent))
    with pytest.raises(Conflict, match="no interruptions"):
        run(session.pause(type("R", (), {"interruptions": []})()))
    assert sent == []


def test_two_resumes_at_once_run_the_tool_once(db_target):
    sent: list[str] = []
    with Store(db_target) as store:
        agent, session, pause = paused_run(store, sent)
        decide(store, pause, {"call_1": Approve()})
    start = threading.Barrier(2)
    outcomes: list[str] = []

    def attempt() -> None:
        with Store(db_target) as store:  # each its own connection, as two processes
            start.wait()
            try:
                run(resume(store, pause.id, agent))
                outcomes.append("ran")
            except Conflict as e:
                outcomes.append("refused" if "already resumed" in str(e) else str(e))
            except Exception as e:  # noqa: BLE001 - shown by the assertion
                outcomes.append(repr(e))

    threads = [threading.Thread(target=attempt) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["ran", "refused"] and sent == ["bob"], (outcomes, sent)


def test_sessiontrees_own_worker_leaves_an_agents_sdk_pause_usable(any_store):
    """The core worker runs sessiontree's loop, not the SDK's: it does not take the pause."""
    from sessiontree import resume as sessiontree_resume
    from sessiontree import work

    sent: list[str] = []
    agent, session, pause = paused_run(any_store, sent)
    decide(any_store, pause, {"call_1": Approve()})

    def no_model(messages, tools):
        raise AssertionError("the worker called a model")

    assert list(work(any_store, call=no_model, tools=[], until_idle=True)) == []  # not its to take
    with pytest.raises(Conflict, match="belongs to a run of openai_agents"):
        list(sessiontree_resume(any_store, pause, call=no_model))  # nor sessiontree's loop's
    assert run(resume(any_store, pause, agent)).final_output == "Emailed bob." and sent == ["bob"]


def test_a_trashed_session_is_not_written_to_until_restored(any_store):
    session = SessiontreeSession("chat", any_store)
    run(session.add_items([USER]))
    session.delete_session()  # the trash: restorable
    with pytest.raises(Conflict, match="in the trash"):
        run(SessiontreeSession("chat", any_store).add_items([ANSWER]))
    any_store.restore_session(session_uuid("chat"))
    assert run(SessiontreeSession("chat", any_store).get_items()) == [USER]


def test_concurrent_runs_share_one_store_from_several_threads(db_target):
    """The framework's own concurrency on one Store: runs gathered in one event loop (the
    session's calls go to worker threads) and runs in threads of their own, each with a
    tool call and an answer; every run's items land on its own session, and verify is clean."""

    def agent_for(n: int) -> Agent:
        @function_tool
        def weather(city: str) -> str:
            """The weather in a city."""
            return f"sunny in {city}"

        model = ScriptedModel([[(f"c{n}", "weather", {"city": f"city-{n}"})], f"answer {n}"])
        return Agent(name="weather", model=model, tools=[weather])

    async def gathered(store: Store, numbers: range) -> list[Any]:
        runs = [
            Runner.run(agent_for(n), f"weather {n}?", session=SessiontreeSession(f"s{n}", store))
            for n in numbers
        ]
        return await asyncio.gather(*runs)

    with Store(db_target) as store:
        together(lambda k: run(gathered(store, range(k * 4, k * 4 + 4))), [0, 1, 2])
        for n in range(12):
            items = run(SessiontreeSession(f"s{n}", store).get_items())
            assert [i.get("type", "message") for i in items] == [
                "message",
                "function_call",
                "function_call_output",
                "message",
            ]
            assert items[2]["output"] == f"sunny in city-{n}"
            assert items[-1]["content"][0]["text"] == f"answer {n}"
        assert store.verify().ok
