"""SessiontreeSaver under real LangGraph graphs, on both backends: a messages graph read back
as a chat (messages, search, verify), interrupts decided with the CLI in another process and
resumed with Command(resume=...), a stale worker refused before it writes (langgraph#8796)
or forked with cas=False, one Store shared by the sync loop's worker threads, nothing
LangGraph needs collectable by prune, and no pickle ever loaded."""

from __future__ import annotations

import base64
import json
import operator
import pickle
import subprocess
import sys
import threading
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph.graph")

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage  # noqa: E402
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.graph.message import add_messages  # noqa: E402
from langgraph.types import Command, interrupt  # noqa: E402

from sessiontree import BranchMoved, Conflict, Store  # noqa: E402
from sessiontree.integrations.langgraph import (  # noqa: E402
    SessiontreeSaver,
    checkpoint_node_id,
    resume,
    thread_session_id,
)
from sessiontree.model import RAW  # noqa: E402


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    log: Annotated[list[str], operator.add]


def one_node(saver, name, node):
    """START -> ``name`` -> END, compiled with ``saver``."""
    builder = StateGraph(Chat)
    builder.add_node(name, node)
    builder.add_edge(START, name)
    builder.add_edge(name, END)
    return builder.compile(checkpointer=saver)


def chat_graph(saver):
    def model(state: Chat) -> dict[str, Any]:
        said = state["messages"][-1].content
        return {"messages": [AIMessage(f"echo {said} ({len(state['messages'])})")], "log": ["model"]}

    return one_node(saver, "model", model)


def asking_graph(saver, gate=None):
    """START -> ask (interrupts, then waits at ``gate`` if given) -> END."""

    def ask(state: Chat) -> dict[str, Any]:
        answer = interrupt({"question": "send the report?"})
        if gate is not None:
            gate()
        return {"messages": [AIMessage(f"answer: {json.dumps(answer, sort_keys=True)}")], "log": ["ask"]}

    return one_node(saver, "ask", ask)


def config(thread: str) -> dict:
    return {"configurable": {"thread_id": thread}}


def lg(node) -> dict:
    return node.payload.get(RAW, {}).get("langgraph", {})


def test_a_messages_graph_reads_back_as_a_chat(db_target):
    with Store(db_target) as store:
        graph = chat_graph(SessiontreeSaver(store))
        for text in ["hello", "what is a tree", "thanks"]:
            state = graph.invoke({"messages": [HumanMessage(text)]}, config("chat-1"))
        assert [m.content for m in state["messages"]] == [
            "hello",
            "echo hello (1)",
            "what is a tree",
            "echo what is a tree (3)",
            "thanks",
            "echo thanks (5)",
        ]
        assert state["log"] == ["model"] * 3

        session = store.session(thread_session_id("chat-1"))
        assert session.title == "chat-1"
        chat = [(m["role"], m["content"]) for m in session.messages("main")]
        assert chat == [
            ("user" if i % 2 == 0 else "assistant", m.content) for i, m in enumerate(state["messages"])
        ]
        # every message is stored once: as a message node, never again inside a checkpoint
        assert sum(n.kind == "message" for n in session.tree()) == 6
        for node in session.tree():
            entry = lg(node).get("channels", {}).get("messages")
            if entry is not None:
                assert "blob" not in entry and "items" not in entry
        hits = store.search("tree")
        assert [h.node.payload["content"] for h in hits] == ["what is a tree", "echo what is a tree (3)"]
        assert store.verify().ok

        # a fresh saver (another process) reads the same state, and carries on from it
        other = chat_graph(SessiontreeSaver(store))
        assert other.get_state(config("chat-1")).values["messages"] == state["messages"]
        history = list(other.get_state_history(config("chat-1")))
        assert len(history) == 9  # input, loop before the model, loop after it: per turn
        first_turn = history[-3].values["messages"]
        assert [m.content for m in first_turn] == ["hello", "echo hello (1)"]
        again = other.invoke({"messages": [HumanMessage("more")]}, config("chat-1"))
        assert [m.content for m in again["messages"][-2:]] == ["more", "echo more (7)"]


def test_async_graph_on_the_saver(db_target):
    import asyncio

    async def main():
        with Store(db_target) as store:
            graph = chat_graph(SessiontreeSaver(store))
            await graph.ainvoke({"messages": [HumanMessage("hi")]}, config("a"))
            state = await graph.ainvoke({"messages": [HumanMessage("again")]}, config("a"))
            assert [m.content for m in state["messages"]] == ["hi", "echo hi (1)", "again", "echo again (3)"]
            assert len([s async for s in graph.aget_state_history(config("a"))]) == 6
            return [m["content"] for m in store.session(thread_session_id("a")).messages()]

    assert asyncio.run(main()) == ["hi", "echo hi (1)", "again", "echo again (3)"]


def test_an_interrupt_is_a_pause_decided_by_the_cli_and_resumed(db_target):
    with Store(db_target) as store:
        graph = asking_graph(SessiontreeSaver(store))
        out = graph.invoke({"messages": [HumanMessage("write the report")]}, config("hitl"))
        (waiting,) = out["__interrupt__"]
        (pause,) = store.pending()
        assert pause.payload["calls"] == [
            {"id": waiting.id, "name": "interrupt", "arguments": json.dumps({"question": "send the report?"})}
        ]

        # another process sees the pause and decides it, through the CLI
        cli = [sys.executable, "-m", "sessiontree", "--db", db_target]
        listed = subprocess.run([*cli, "pending"], capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0, listed.stderr
        assert pause.id[:8] in listed.stdout
        edited = json.dumps({"send": True, "to": "ann"})
        decided = subprocess.run(
            [*cli, "edit-call", pause.id, waiting.id, edited], capture_output=True, text=True, timeout=60
        )
        assert decided.returncode == 0, decided.stderr
        assert store.pending() == []

        state = resume(store, pause.id, graph)
        assert (
            state["messages"][-1].content
            == 'answer: {"action": "edit", "arguments": {"send": true, "to": "ann"}}'
        )
        assert state["log"] == ["ask"]
        with pytest.raises(Conflict, match="already resumed"):
            resume(store, pause.id, graph)
        session = store.session(thread_session_id("hitl"))
        path = session.path("main")
        at = [n.id for n in path].index(pause.id)
        assert [n.kind for n in path[at : at + 3]] == ["pause", "decision", "note"]  # decided, claimed
        assert store.verify().ok
        assert graph.get_state(config("hitl")).next == ()


class Gate:
    """Worker A's node waits here (inside its model call, say) until B has finished."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self) -> None:
        self.entered.set()
        assert self.release.wait(60)


def interrupted(db_target: str, thread: str) -> None:
    with Store(db_target) as store:
        asking_graph(SessiontreeSaver(store)).invoke({"messages": [HumanMessage("go")]}, config(thread))


def race(db_target: str, thread: str, cas: bool) -> tuple[BaseException | None, dict, list]:
    """Workers A and B (each its own Store, as two processes) resume one interrupted
    checkpoint; A's node is held until B has finished. (A's error, B's state, A's nodes
    written after B finished.)"""
    interrupted(db_target, thread)
    gate, failure = Gate(), []
    with Store(db_target) as store_a, Store(db_target) as store_b:
        graph_a = asking_graph(SessiontreeSaver(store_a, cas=cas), gate)
        graph_b = asking_graph(SessiontreeSaver(store_b, cas=cas))

        def worker_a() -> None:
            try:
                graph_a.invoke(Command(resume="from A"), config(thread))
            except BaseException as e:  # noqa: BLE001 - the test looks at it
                failure.append(e)

        a = threading.Thread(target=worker_a)
        a.start()
        assert gate.entered.wait(60)
        state_b = graph_b.invoke(Command(resume="from B"), config(thread))
        session = store_b.session(thread_session_id(thread))
        before = {n.id for n in session.tree()}
        gate.release.set()
        a.join(60)
        after = [n for n in session.tree() if n.id not in before]
    return (failure[0] if failure else None), state_b, after


def test_a_stale_worker_is_refused_before_it_writes(db_target):
    error, state_b, written_by_a = race(db_target, "race-cas", cas=True)
    assert isinstance(error, BranchMoved)
    assert written_by_a == []
    assert state_b["messages"][-1].content == 'answer: "from B"'
    with Store(db_target) as store:
        graph = asking_graph(SessiontreeSaver(store))
        assert graph.get_state(config("race-cas")).values["messages"][-1].content == 'answer: "from B"'
        assert store.verify().ok


def test_without_cas_a_stale_worker_forks_and_both_stay(db_target):
    error, state_b, written_by_a = race(db_target, "race-fork", cas=False)
    assert error is None
    assert written_by_a  # A's writes and checkpoint, beside B's
    with Store(db_target) as store:
        saver = SessiontreeSaver(store, cas=False)
        graph = asking_graph(saver)
        # the newest checkpoint is LangGraph's latest: A's, written last
        assert graph.get_state(config("race-fork")).values["messages"][-1].content == 'answer: "from A"'
        answers = {
            t.checkpoint["channel_values"]["messages"][-1].content
            for t in saver.list(config("race-fork"))
            if t.metadata.get("source") == "loop" and t.checkpoint["channel_values"].get("log")
        }
        assert answers == {'answer: "from A"', 'answer: "from B"'}
        # nothing LangGraph can still ask for is garbage to prune
        session = store.session(thread_session_id("race-fork"))
        assert store.prune(dry_run=True, grace=0).node_ids == []
        assert len(session.leaves()) == 2
        assert store.verify().ok


class Fan(TypedDict):
    picked: Annotated[list[str], operator.add]


def fan_graph(saver):
    """START -> three branches at once (the sync loop runs them on worker threads) -> join."""
    builder = StateGraph(Fan)
    for name in "abc":
        builder.add_node(name, lambda state, name=name: {"picked": [name]})
        builder.add_edge(START, name)
        builder.add_edge(name, "join")
    builder.add_node("join", lambda state: {"picked": ["join"]})
    builder.add_edge("join", END)
    return builder.compile(checkpointer=saver)


def test_one_store_shared_by_the_sync_loops_threads(db_target):
    with Store(db_target) as store:
        graph = fan_graph(SessiontreeSaver(store))
        barrier = threading.Barrier(4)
        results, errors = {}, []

        def run(thread: str) -> None:
            try:
                barrier.wait(30)
                for _ in range(3):
                    results[thread] = graph.invoke({"picked": []}, config(thread))
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=run, args=(f"fan-{i}",)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert errors == []
        for thread, state in results.items():
            assert sorted(state["picked"]) == sorted(["a", "b", "c", "join"] * 3), thread
            history = list(graph.get_state_history(config(thread)))
            assert len(history) == 12  # per run: input, its writes applied, the fan-out, the join
        assert store.verify().ok


def test_pickles_are_never_written_or_loaded(db_target, monkeypatch):
    with Store(db_target) as store:
        with pytest.raises(Conflict, match="never stores pickles"):
            SessiontreeSaver(store, serde=JsonPlusSerializer(pickle_fallback=True))
        saver = SessiontreeSaver(store)
        chat_graph(saver).invoke({"messages": [HumanMessage("hi")]}, config("p"))
        session = store.session(thread_session_id("p"))
        head = next(n for n in reversed(session.path("main")) if lg(n).get("type") == "checkpoint")
        # another program writes a checkpoint whose value is a pickle
        forged = json.loads(head.payload_json)
        raw = forged[RAW]["langgraph"]
        raw["id"], raw["parent"] = "1f1f0000-0000-6000-8000-000000000001", raw["id"]
        raw["channels"] = {
            "log": {"v": 99, "blob": ["pickle", base64.b64encode(pickle.dumps(["x"])).decode()]}
        }
        checkpoint = saver._load(raw["checkpoint"])
        checkpoint["channel_versions"] = {"log": 99}
        raw["checkpoint"] = saver._dump(checkpoint)
        session.append(forged, kind="note", id=checkpoint_node_id(session.id, "", raw["id"]))

        def refuse(*args, **kwargs):
            raise AssertionError("pickle.loads was called")

        monkeypatch.setattr(pickle, "loads", refuse)
        with pytest.raises(Conflict, match="never unpickles"):
            saver.get_tuple({"configurable": {"thread_id": "p", "checkpoint_id": raw["id"]}})


def test_time_travel_forks_without_cas_and_is_refused_with_it(db_target):
    with Store(db_target) as store:
        graph = chat_graph(SessiontreeSaver(store))
        for text in ["one", "two"]:
            graph.invoke({"messages": [HumanMessage(text)]}, config("tt"))
        first = [s for s in graph.get_state_history(config("tt")) if len(s.values.get("messages", [])) == 2][
            0
        ]
        with pytest.raises(BranchMoved):  # an older checkpoint moved on: a stale writer, to cas
            graph.update_state(first.config, {"messages": [HumanMessage("instead")]})

        forking = chat_graph(SessiontreeSaver(store, cas=False))
        with pytest.raises(BranchMoved):
            graph.invoke({"messages": [HumanMessage("instead")]}, first.config)
        state = forking.invoke({"messages": [HumanMessage("instead")]}, first.config)
        assert [m.content for m in state["messages"]] == [
            "one",
            "echo one (1)",
            "instead",
            "echo instead (3)",
        ]
        # the newest is LangGraph's latest; the old line stays, and prune keeps every node
        assert forking.get_state(config("tt")).values["messages"][-1].content == "echo instead (3)"
        assert store.prune(dry_run=True, grace=0).node_ids == []
        session = store.session(thread_session_id("tt"))
        ends = sorted(m[-1]["content"] for m in (session.messages(leaf) for leaf in session.leaves()))
        assert ends == ["echo instead (3)", "echo two (3)"]
        assert store.verify().ok


def test_a_list_that_only_grew_stores_what_it_appended(db_target):
    from langgraph.checkpoint.base import empty_checkpoint

    with Store(db_target) as store:
        saver = SessiontreeSaver(store)
        parent, stored = None, []
        for step, value in enumerate([[1, 2], [1, 2, 3], [1, 2, 3], [9], [9, 10]]):
            checkpoint = empty_checkpoint()
            checkpoint["channel_values"] = {"items": value, "count": step}
            checkpoint["channel_versions"] = {"items": step + 1, "count": step + 1}
            conf = {"configurable": {"thread_id": "lists", "checkpoint_ns": ""}}
            if parent is not None:
                conf["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
            parent = saver.put(conf, checkpoint, {"source": "loop", "step": step}, {"items": step + 1})
            stored.append((parent, value))
        entries = [
            lg(n)["channels"]["items"]
            for n in store.session(thread_session_id("lists")).path("main")
            if lg(n).get("type") == "checkpoint"
        ]
        assert [sorted(set(e) & {"base", "items", "blob"}) for e in entries] == [
            ["base", "items"],  # grew from nothing
            ["base", "items"],  # [3] appended
            ["base", "items"],  # nothing appended (the same list at a new version)
            ["blob"],  # not a prefix: whole
            ["base", "items"],  # [10] appended
        ]
        assert [len(e["items"]) if "items" in e else None for e in entries] == [2, 1, 0, None, 1]
        for saver_ in (saver, SessiontreeSaver(store)):  # remembered, and read off the path
            for config_, value in stored:
                got = saver_.get_tuple(config_).checkpoint["channel_values"]
                assert got["items"] == value


def test_a_put_retried_after_it_committed_writes_nothing_more(db_target):
    with Store(db_target) as store:
        graph = chat_graph(SessiontreeSaver(store))
        graph.invoke({"messages": [HumanMessage("once")]}, config("again"))
        latest = SessiontreeSaver(store).get_tuple(config("again"))
        session = store.session(thread_session_id("again"))
        before = len(session.tree())
        parent = {"configurable": {**latest.config["configurable"], **latest.parent_config["configurable"]}}
        saver = SessiontreeSaver(store)
        again = saver.put(parent, latest.checkpoint, latest.metadata, {})
        assert again == latest.config and len(session.tree()) == before
        assert saver.get_tuple(config("again")).checkpoint == latest.checkpoint
