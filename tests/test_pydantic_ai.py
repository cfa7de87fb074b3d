"""sessiontree as pydantic-ai's ConversationStore: the same script, run against pydantic-ai's
own InMemoryConversationStore and against SessiontreeConversationStore on both backends,
observes the same things; real Agent runs with FunctionModel, and an approval decided by
`sessiontree approve` in another process."""

import asyncio
import json
import subprocess
import sys

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults  # noqa: E402
from pydantic_ai.conversation import Conversation  # noqa: E402
from pydantic_ai.conversation_store import ConversationConflict, InMemoryConversationStore  # noqa: E402
from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelResponse, TextPart, ToolCallPart  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402

from sessiontree import Store  # noqa: E402
from sessiontree.integrations.pydantic_ai import SessiontreeConversationStore, deferred_tool_results  # noqa: E402

from conftest import together  # noqa: E402


def reply(messages, info: AgentInfo) -> ModelResponse:
    """A model that asks for send_email when told to, else answers with what it was sent."""
    last = messages[-1].parts[-1]
    prompt = getattr(last, "content", "")
    if isinstance(prompt, str) and prompt.startswith("email"):
        return ModelResponse(parts=[ToolCallPart("send_email", {"to": "bob"}, tool_call_id="e1")])
    if last.part_kind == "tool-return":
        return ModelResponse(parts=[TextPart(f"tool said {last.content}")])
    return ModelResponse(parts=[TextPart(f"echo {prompt} after {len(messages)}")])


def make_agent() -> Agent:
    agent = Agent(FunctionModel(reply), output_type=[str, DeferredToolRequests])

    @agent.tool_plain(requires_approval=True)
    def send_email(to: str) -> str:
        return f"sent to {to}"

    return agent


def shown(messages) -> list:
    """A history as pydantic-ai dumps it, without the timestamps that differ between runs."""

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in ("timestamp", "run_id")}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return strip(json.loads(ModelMessagesTypeAdapter.dump_json(messages)))


async def script(store) -> list:
    """save, load, stale revision, branch, fork, deferred approval, list, delete."""
    agent, seen = make_agent(), []
    result = await agent.run("hi", conversation=Conversation(conversation_id="c1"))
    await store.save(result)
    loaded = await store.load("c1")
    result = await agent.run("again", conversation=loaded)
    await store.save(result)
    seen.append(("two turns", shown((await store.load("c1")).messages)))
    try:
        await store.save(loaded)  # loaded before the second save: stale
        seen.append(("stale", "saved"))
    except ConversationConflict:
        seen.append(("stale", "conflict"))
    current = await store.load("c1")
    branched = await store.branch("c1", at=2, expected_revision=current.revision)
    result = await agent.run("other", conversation=branched)
    await store.save(result)
    seen.append(("branch", shown((await store.load("c1")).messages)))
    seen.append(("branches left", len((await store.read_record("c1")).branches)))
    fork = await store.fork("c1", at=2, new_conversation_id="f1")
    result = await agent.run("forked", conversation=fork)
    await store.save(result)
    seen.append(("fork", shown((await store.load("f1")).messages)))
    seen.append(("original", shown((await store.load("c1")).messages)))
    result = await agent.run("email bob", conversation=await store.load("c1"))
    seen.append(("deferred output", type(result.output).__name__))
    await store.save(result)
    paused = await store.load("c1")
    seen.append(("deferred loaded", [c.tool_name for c in paused.deferred_tool_requests.approvals]))
    result = await agent.run(
        conversation=paused, deferred_tool_results=DeferredToolResults(approvals={"e1": True})
    )
    await store.save(result)
    seen.append(("answered", result.output))
    seen.append(("list", sorted(r.conversation_id for r in await store.list_conversations())))
    await store.delete("f1")
    seen.append(("after delete", sorted(r.conversation_id for r in await store.list_conversations())))
    seen.append(("deleted loads", await store.load("f1")))
    return seen


def test_identical_observations_to_pydantic_ais_own_store(any_store):
    ours = asyncio.run(script(SessiontreeConversationStore(any_store)))
    theirs = asyncio.run(script(InMemoryConversationStore()))
    assert [name for name, _ in ours] == [name for name, _ in theirs]
    for (name, a), (_, b) in zip(ours, theirs, strict=True):
        assert a == b, name
    report = any_store.verify()
    assert report.ok, report.problems


def test_a_request_of_two_tool_returns_is_two_tool_messages_verify_accepts(any_store):
    def two_calls(messages, info):
        if messages[-1].parts[-1].part_kind == "tool-return":
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(
            parts=[
                ToolCallPart("add", {"a": 1}, tool_call_id="t1"),
                ToolCallPart("add", {"a": 2}, tool_call_id="t2"),
            ]
        )

    agent = Agent(FunctionModel(two_calls))

    @agent.tool_plain
    def add(a: int) -> int:
        return a + 1

    store = SessiontreeConversationStore(any_store)

    async def go():
        await store.save(await agent.run("go", conversation=Conversation(conversation_id="c1")))
        return await store.load("c1")

    loaded = asyncio.run(go())
    assert len(loaded.messages) == 4  # request, response, one request of two returns, response
    chat = any_store.session("c1").messages()
    assert [m["role"] for m in chat] == ["user", "assistant", "tool", "tool", "assistant"]
    assert [m.get("tool_call_id") for m in chat[2:4]] == ["t1", "t2"]
    assert any_store.verify().ok


def test_entries_keep_their_ids_and_revision_is_the_head(any_store):
    store = SessiontreeConversationStore(any_store)

    async def go():
        result = await make_agent().run("hi", conversation=Conversation(conversation_id="c1"))
        return await store.save(result), await store.load("c1")

    entries, loaded = asyncio.run(go())
    session = any_store.session("c1")
    assert session.head().id == loaded.revision
    assert [n.id for n in session.path() if n.kind == "message"][-len(entries) :] == [e.id for e in entries]
    message = session.node(entries[-1].id).payload
    assert message["role"] == "assistant" and "pydantic_ai" in message["raw"]


def test_a_deferred_approval_decided_by_the_cli_in_another_process(db_target):
    async def pause():
        with Store(db_target) as st:
            store = SessiontreeConversationStore(st)
            result = await make_agent().run("email bob", conversation=Conversation(conversation_id="c1"))
            assert isinstance(result.output, DeferredToolRequests)
            await store.save(result)
            return [p.id for p in st.pending()]

    pending = asyncio.run(pause())
    assert len(pending) == 1
    done = subprocess.run(
        [sys.executable, "-m", "sessiontree", "--db", db_target, "approve", pending[0]],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr

    async def resume():
        with Store(db_target) as st:
            store = SessiontreeConversationStore(st)
            decided = deferred_tool_results(st, "c1")
            assert decided is not None and decided.approvals == {"e1": True}
            result = await make_agent().run(
                conversation=await store.load("c1"), deferred_tool_results=decided
            )
            await store.save(result)
            kinds = [n.kind for n in st.session("c1").path()]
            return result.output, kinds, st.pending()

    output, kinds, still = asyncio.run(resume())
    assert output == "tool said sent to bob"
    assert "pause" in kinds and "decision" in kinds  # the approval stays on the path
    assert still == []


def test_edit_and_reject_turn_into_tool_approved_and_tool_denied(any_store):
    from pydantic_ai import ToolApproved, ToolDenied

    store = SessiontreeConversationStore(any_store)

    async def pause():
        result = await make_agent().run("email bob", conversation=Conversation(conversation_id="c1"))
        await store.save(result)

    asyncio.run(pause())
    assert deferred_tool_results(any_store, "c1") is None  # undecided
    (paused,) = any_store.pending()
    session = any_store.session("c1")
    edit = {"e1": {"action": "edit", "arguments": {"to": "carol"}}}
    session.append({"decisions": edit}, kind="decision", branch="main", parent=paused.id)
    assert deferred_tool_results(any_store, "c1").approvals == {
        "e1": ToolApproved(override_args={"to": "carol"})
    }

    async def answer():
        conversation = await store.load("c1")
        result = await make_agent().run(
            conversation=conversation, deferred_tool_results=deferred_tool_results(any_store, "c1")
        )
        await store.save(result)
        return result.output

    assert asyncio.run(answer()) == "tool said sent to carol"
    # a second pause, rejected this time
    asyncio.run(
        store.save(asyncio.run(make_agent().run("email bob", conversation=asyncio.run(store.load("c1")))))
    )
    (paused,) = any_store.pending()
    session.append(
        {"decisions": {"e1": {"action": "reject", "reason": "no"}}}, kind="decision", parent=paused.id
    )
    assert deferred_tool_results(any_store, "c1").approvals == {"e1": ToolDenied("no")}


def test_a_conversation_id_that_names_a_session_of_its_own_is_refused(any_store):
    theirs = any_store.create_session(id="c1")
    theirs.append({"role": "user", "content": "not pydantic-ai's"})
    store = SessiontreeConversationStore(any_store)

    async def go():
        result = await make_agent().run("hi", conversation=Conversation(conversation_id="c1"))
        await store.save(result)

    with pytest.raises(ConversationConflict):
        asyncio.run(go())
    assert [n.payload["content"] for n in theirs.path()] == ["not pydantic-ai's"]


def test_concurrent_runs_share_one_store_from_several_threads(db_target):
    """pydantic-ai's own concurrency on one Store: runs gathered in an event loop (the store's
    calls go to worker threads) on one ConversationStore, and in threads with a
    ConversationStore each; every conversation is saved whole, the approvals are pauses."""
    with Store(db_target) as st:

        async def runs(store: SessiontreeConversationStore, names: list[str]) -> None:
            async def one(name: str) -> None:
                prompt = f"email {name}" if name.endswith("0") else f"hello {name}"
                result = await make_agent().run(prompt, conversation=Conversation(conversation_id=name))
                await store.save(result)
                again = (
                    await make_agent().run("more", conversation=await store.load(name))
                    if not name.endswith("0")
                    else None
                )
                if again is not None:
                    await store.save(again)

            await asyncio.gather(*(one(n) for n in names))

        together(
            lambda k: asyncio.run(runs(SessiontreeConversationStore(st), [f"t{k}-{i}" for i in range(4)])),
            [0, 1, 2],
        )
        store = SessiontreeConversationStore(st)
        for k in range(3):
            for i in range(4):
                loaded = asyncio.run(store.load(f"t{k}-{i}"))
                # a request and a response per run: one run when it paused, two otherwise
                assert len(loaded.messages) == (2 if i == 0 else 4), (k, i, loaded.messages)
        assert sorted(p.session_id for p in st.pending()) == [f"t{k}-0" for k in range(3)]
        assert st.verify().ok


def test_the_branches_a_conversation_left_survive_prune_and_can_be_branched_back_to(any_store):
    """A record's ``branches`` are tips on no branch's path: pinned, so ``prune`` keeps them
    and pydantic-ai's ``branch(from_entry=tip)`` still works; deleting the conversation
    gives them up (before: prune removed the left tip, and branching back failed)."""

    async def main() -> None:
        store, agent = SessiontreeConversationStore(any_store), make_agent()
        await store.save(await agent.run("hi", conversation=Conversation(conversation_id="c1")))
        await store.save(await agent.run("again", conversation=await store.load("c1")))
        current = await store.load("c1")
        branched = await store.branch("c1", at=2, expected_revision=current.revision)
        await store.save(await agent.run("other", conversation=branched))
        (tip,) = (await store.read_record("c1")).branches
        pruned = any_store.prune(dry_run=False, grace=0).node_ids  # superseded records only
        assert tip not in pruned
        assert [n.kind for n in any_store.session("c1").path(tip)] == ["message"] * 4  # hi, echo, again, echo
        record = await store.read_record("c1")
        back = await store.branch("c1", from_entry=tip, expected_revision=record.revision)
        assert shown(back.messages)[-1]["parts"][0]["content"].startswith("echo again")
        await store.save(await agent.run("and on", conversation=back))
        # Now the "other" turn is the branch left; the "again" tip is on the path again.
        (left,) = (await store.read_record("c1")).branches
        assert left != tip and [p.node_id for p in any_store.session("c1").pins()] == [left]
        await store.delete("c1")
        assert any_store.session("c1").pins() == []
        assert tip in any_store.prune(dry_run=False, grace=0).node_ids  # given up with the conversation

    asyncio.run(main())
