"""Compaction: a summary stands for a span of its path in the projection only."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessiontree import (
    Approve,
    Compacted,
    Completion,
    Conflict,
    InvalidPayload,
    Store,
    decide,
    import_file,
    resume,
    run,
    tool,
)
from sessiontree.compaction import plan, project
from sessiontree.testing import ScriptedModel, reply, tool_call

from conftest import assistant, user

REAL = Path(__file__).parent / "fixtures" / "real"


def contents(messages):
    return [m.get("content") for m in messages]


@pytest.fixture
def store(every_store):
    """Summaries project alike on a SQLite file, SQLite ``:memory:`` and PostgreSQL."""
    return every_store


@pytest.fixture
def chat(session):
    session.append({"role": "system", "content": "be brief"})
    for i in range(4):
        session.append(user(f"q{i}"))
        session.append(assistant(f"a{i}"))
    return session


def test_the_summary_replaces_its_span_in_the_projection_only(store, chat):
    seen = []
    before = chat.path("main")
    node = chat.compact(summarize=lambda ms: seen.append(contents(ms)) or "S1", keep_last=3)
    assert seen == [["q0", "a0", "q1", "a1", "q2"]]
    assert node.kind == "summary" and node.payload["covers"] == {
        "first": before[1].id,
        "last": before[5].id,
        "nodes": 5,
    }
    assert contents(chat.messages()) == ["be brief", "S1", "a2", "q3", "a3"]
    assert chat.messages()[1] == {"role": "user", "content": "S1"}
    # every original is still on the path, the tree and the log
    assert chat.path("main") == [*before, node]
    assert len(chat.tree()) == len(before) + 1
    assert store.verify().ok


@pytest.mark.parametrize("every_store", ["sqlite", "postgres"], indirect=True)  # reopened: not :memory:
def test_a_cold_store_and_a_cache_free_store_project_the_same(tmp_path, store, chat):
    chat.compact(summarize=lambda ms: "S", keep_last=2)
    warm = chat.messages()
    with Store(store.path, cache_bytes=0) as cold:
        assert cold.session(chat.id).messages() == warm
    assert contents(warm) == ["be brief", "S", "q3", "a3"]


def test_a_second_compaction_covers_the_first_summary(chat):
    chat.compact(summarize=lambda ms: "S1", keep_last=3)
    chat.append(user("q4"))
    chat.append(assistant("a4"))
    seen = []
    chat.compact(summarize=lambda ms: seen.append(contents(ms)) or "S2", keep_last=2)
    assert seen == [["S1", "a2", "q3", "a3"]]
    assert contents(chat.messages()) == ["be brief", "S2", "q4", "a4"]


def test_a_tool_result_is_kept_with_its_call(session):
    session.append(user("weather?"))
    session.append(assistant(None, [tool_call("weather", {}, id="c1")]))
    session.append({"role": "tool", "tool_call_id": "c1", "content": "sunny"})
    session.append(assistant("It is sunny."))
    seen = []
    session.compact(summarize=lambda ms: seen.append(contents(ms)) or "S", keep_last=2)
    assert seen == [["weather?"]]  # keeping 2 would start at the tool result
    assert [m["role"] for m in session.messages()] == ["user", "assistant", "tool", "assistant"]


def test_nothing_to_cover_writes_nothing(session):
    session.append(user("hi"))
    assert session.compact(summarize=lambda ms: "S", keep_last=4) is None
    assert len(session.path("main")) == 1
    with pytest.raises(ValueError, match="keep_last"):
        session.compact(summarize=lambda ms: "S", keep_last=-1)


def test_the_summary_text_comes_from_text_a_message_or_a_completion(store, chat):
    done = Completion({"role": "assistant", "content": "S"}, model="small", usage={"prompt_tokens": 9})
    node = chat.compact(summarize=lambda ms: done, keep_last=2)
    assert node.payload["summary"] == "S" and store.run(node.run_id).model == "small"
    with pytest.raises(InvalidPayload, match="not a summary text"):
        chat.compact(summarize=lambda ms: {"content": ""}, keep_last=0)
    assert chat.head().id == node.id  # nothing was written


def test_verify_reports_a_summary_whose_span_is_not_on_its_path(store, chat):
    other = chat.fork("other", at="main~3")
    chat.append(user("more"), branch="other")
    stray = chat.path("main")[-1].id  # not on 'other'
    first = chat.path("other")[1].id
    chat.append(
        {"summary": "S", "covers": {"first": first, "last": stray, "nodes": 2}},
        kind="summary",
        branch="other",
    )
    report = store.verify()
    assert [p.check for p in report.problems] == ["summary"]
    assert "not a span of its path before it" in report.problems[0].detail
    # a span that is not on the path is ignored by the projection
    assert "S" not in contents(chat.messages(other.name))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.sampled_from(["turn", "tools", "cutoff", "answer", "compact"]), max_size=14),
    st.integers(0, 4),
)
def test_compaction_keeps_the_tail_and_every_original(store, steps, keep):
    s = store.create_session()
    s.append(user("start"))
    open_calls: list[str] = []  # the unanswered calls of a batch cut off mid-tool
    for i, step in enumerate([*steps, "answer"]):
        if open_calls and step != "compact":  # answered late, but before anything else
            for call_id in open_calls:
                s.append({"role": "tool", "tool_call_id": call_id, "content": "late"})
            open_calls = []
        if step == "cutoff":
            calls = [tool_call("t", {}, id=f"c{i}a"), tool_call("t", {}, id=f"c{i}b")]
            s.append_many(
                [assistant(None, calls), {"role": "tool", "tool_call_id": f"c{i}a", "content": "r"}]
            )
            open_calls.append(f"c{i}b")
        elif step == "answer":
            pass
        elif step == "turn":
            s.append_many([assistant(f"a{i}"), user(f"u{i}")])
        elif step == "tools":
            s.append_many(
                [
                    assistant(None, [tool_call("t", {}, id=f"c{i}")]),
                    {"role": "tool", "tool_call_id": f"c{i}", "content": f"r{i}"},
                ]
            )
        else:
            before = s.messages()
            path = s.path("main")
            node = s.compact(summarize=lambda ms, i=i: f"S{i}", keep_last=keep)
            after = s.messages()
            if node is None:
                assert after == before and plan(path, keep) is None
                continue
            assert s.path("main")[:-1] == path  # nothing removed or changed
            assert after[0]["content"] == f"S{i}"
            tail = after[1:]
            assert tail == before[len(before) - len(tail) :] and len(tail) >= keep
            assert not tail or tail[0]["role"] != "tool"
    assert store.verify().ok
    assert s.messages() == project(s.path("main"))
    called: set[str] = set()  # every tool result the model is sent follows its call
    for message in s.messages():
        called.update(c["id"] for c in message.get("tool_calls") or [])
        assert message["role"] != "tool" or message["tool_call_id"] in called


def test_the_loop_compacts_before_a_call_that_would_pass_the_budget(store, session):
    @tool
    def weather(city: str) -> str:
        """Weather."""
        return "sunny " * 20

    session.append(user("weather in Paris?"))
    model = ScriptedModel(
        [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [tool_call("weather", {"city": "Paris"}, id="c1")],
            },
            "SUMMARY: asked for Paris weather; it is sunny.",  # the compaction call
            "It is sunny.",
        ]
    )
    steps = list(
        run(
            store,
            session,
            call=model,
            tools=[weather],
            context_budget=25,
            keep_last=0,
            count_tokens=lambda ms: 10 * len(ms),
        )
    )
    assert steps[-1].reason == "completed"
    kinds = [n.kind for n in session.path("main")]
    assert kinds == ["message", "message", "tool_start", "message", "summary", "message"]
    # every node the run wrote is named by a step, the summary by Compacted
    names = [type(s).__name__ for s in steps]
    assert names == ["Assistant", "ToolStart", "ToolEnd", "Compacted", "Assistant", "Final"]
    (compacted,) = [s for s in steps if isinstance(s, Compacted)]
    assert compacted.node == session.path("main")[-2]
    assert compacted.summary == "SUMMARY: asked for Paris weather; it is sunny."
    assert compacted.node.payload["covers"]["nodes"] == 4
    summary_call, answer_call = model.calls[1], model.calls[2]
    assert summary_call["tools"] == [] and "Summarise" in summary_call["messages"][-1]["content"]
    assert contents(answer_call["messages"]) == ["SUMMARY: asked for Paris weather; it is sunny."]
    assert store.verify().ok


def test_the_loop_estimates_tokens_from_recorded_usage(store, session):
    session.append(user("one two three"))
    seen = []
    model = ScriptedModel(
        [
            Completion(
                {"role": "assistant", "content": "ok"}, usage={"prompt_tokens": 5, "completion_tokens": 1}
            ),
            Completion(
                {"role": "assistant", "content": "done"}, usage={"prompt_tokens": 500, "completion_tokens": 1}
            ),
        ]
    )
    list(run(store, session, call=model, context_budget=100, summarize=lambda ms: seen.append(ms) or "S"))
    assert seen == []  # 6 tokens recorded, plus nothing new
    session.append(user("again"))
    list(run(store, session, call=model, context_budget=100, summarize=lambda ms: seen.append(ms) or "S"))
    assert seen == []  # 6 + "again" estimated
    session.append(user("and again"))
    list(
        run(
            store,
            session,
            call=ScriptedModel(["fine"]),
            context_budget=100,
            keep_last=1,
            summarize=lambda ms: seen.append(ms) or "S",
        )
    )
    assert len(seen) == 1  # the last call recorded 501 tokens: over the budget


def test_cached_prompt_tokens_count_toward_the_budget(store, session):
    # Anthropic's input_tokens leaves the cached part of the prompt out: 3 in, 1,000 read
    # from the cache is a 1,004-token context, over a budget of 100.
    session.append(user("one two three"))
    reply = Completion(
        {"role": "assistant", "content": "ok"},
        usage={"input_tokens": 3, "output_tokens": 1, "cache_read_input_tokens": 1000},
    )
    list(run(store, session, call=ScriptedModel([reply]), context_budget=100))
    session.append(user("again"))
    seen = []
    summarize = lambda ms: seen.append(ms) or "S"  # noqa: E731
    list(
        run(
            store, session, call=ScriptedModel(["fine"]), context_budget=100, keep_last=1, summarize=summarize
        )
    )
    assert len(seen) == 1


def test_a_failing_summary_ends_the_run_with_an_error(store, session):
    session.append(user("hi"))
    session.append(assistant("hello"))
    session.append(user("bye"))

    def broken(messages):
        raise RuntimeError("summariser down")

    steps = list(run(store, session, call=ScriptedModel([]), context_budget=0, keep_last=1, summarize=broken))
    assert steps[-1].reason == "error" and "summariser down" in steps[-1].error
    assert not [s for s in steps if isinstance(s, Compacted)]  # nothing was compacted
    assert session.head().payload["during"] == "compaction"


def test_imported_claude_code_compaction_is_sent_as_the_model_saw_it(store):
    import_file(store, REAL / "claude-code" / "claude-code-log-dag_compact_after_rewind.jsonl")
    (info,) = store.sessions()
    s = store.session(info.id)
    (summary,) = [n for n in s.path("main") if n.kind == "summary"]
    assert summary.payload["covers"]["last"] == summary.parent_id
    messages = s.messages()
    assert messages[0]["content"] == summary.payload["summary"]
    assert store.verify().ok


def test_imported_pi_compaction_covers_up_to_the_first_kept_entry(store, tmp_path):
    lines = [
        '{"type":"session","version":3,"id":"p1","timestamp":"2026-01-01T00:00:00Z","cwd":"/"}',
        '{"type":"message","id":"e1","parentId":null,"timestamp":"2026-01-01T00:00:01Z","message":{"role":"user","content":"first"}}',
        '{"type":"message","id":"e2","parentId":"e1","timestamp":"2026-01-01T00:00:02Z","message":{"role":"assistant","content":[{"type":"text","text":"one"}]}}',
        '{"type":"message","id":"e3","parentId":"e2","timestamp":"2026-01-01T00:00:03Z","message":{"role":"user","content":"kept"}}',
        '{"type":"message","id":"e4","parentId":"e3","timestamp":"2026-01-01T00:00:04Z","message":{"role":"assistant","content":[{"type":"text","text":"two"}]}}',
        '{"type":"compaction","id":"e5","parentId":"e4","timestamp":"2026-01-01T00:00:05Z","summary":"PI SUMMARY","firstKeptEntryId":"e3","tokensBefore":10}',
        '{"type":"message","id":"e6","parentId":"e5","timestamp":"2026-01-01T00:00:06Z","message":{"role":"user","content":"after"}}',
    ]
    path = tmp_path / "pi.jsonl"
    path.write_text("\n".join(lines) + "\n")
    import_file(store, path, format="pi")
    s = store.session(store.sessions()[0].id)
    assert contents(s.messages()) == ["PI SUMMARY", "kept", "two", "after"]
    assert len(s.path("main")) == 6 and store.verify().ok


# -- a call cut off mid-tool ----------------------------------------------------------

LOOKUP = tool_call("lookup", {"q": "x"}, id="c1")
FETCH = tool_call("fetch", {"url": "y"}, id="c2")
CALLS = reply(None, LOOKUP, FETCH)


def cut_off_mid_tool(session):
    """What a process killed between two tools of one batch leaves: the batch's tool_start,
    the first result, no second."""
    session.append(user("go"))
    session.append(CALLS)
    session.append(
        {
            "calls": [
                {"id": c["id"], "name": c["function"]["name"], "arguments": "{}"} for c in (LOOKUP, FETCH)
            ]
        },
        kind="tool_start",
    )
    session.append({"role": "tool", "tool_call_id": "c1", "content": "L"})


def tools(*, idempotent: bool):
    @tool(idempotent=True)
    def lookup(q: str) -> str:
        """Look up."""
        return "L"

    @tool(idempotent=idempotent)
    def fetch(url: str) -> str:
        """Fetch."""
        return "F"

    return [lookup, fetch]


@pytest.mark.parametrize("keep", [0, 1])
def test_a_compaction_mid_tool_keeps_the_cut_off_call_with_its_answers(store, session, keep):
    """Before: keep_last=0 summarised the call away while its second answer was still to
    come, and the model was sent [summary, tool result for c2]: servers answer 400."""
    cut_off_mid_tool(session)
    seen = []
    session.compact(summarize=lambda ms: seen.append(contents(ms)) or "S", keep_last=keep)
    assert seen == [["go"]]  # the call and its first result stay out of the summary
    model = ScriptedModel(["done"])
    steps = list(run(store, session, call=model, tools=tools(idempotent=True)))  # c2 runs again
    assert [type(s).__name__ for s in steps] == ["ToolStart", "ToolEnd", "Assistant", "Final"]
    (sent,) = [c["messages"] for c in model.calls]
    assert sent == [
        {"role": "user", "content": "S"},
        CALLS,
        {"role": "tool", "tool_call_id": "c1", "content": "L"},
        {"role": "tool", "tool_call_id": "c2", "content": "F"},
    ]
    assert store.verify().ok


def test_a_compaction_before_the_interrupted_pause_sends_every_answer_with_its_call(store, session):
    """An unsafe tool cut off pauses (interrupted); a compaction before the pause, at it or
    at its decision: the model is still sent the call before its answers."""
    cut_off_mid_tool(session)
    session.compact(summarize=lambda ms: "S", keep_last=0)
    steps = list(run(store, session, call=ScriptedModel([]), tools=tools(idempotent=False)))
    pause = steps[-1].node
    assert pause.kind == "pause" and pause.payload["calls"][0]["reason"].startswith("interrupted")
    with pytest.raises(Conflict, match=f"branch 'main' waits at pause {pause.id}: decide and resume it"):
        session.compact(summarize=lambda ms: "S2", keep_last=0)
    decision = decide(store, pause, {"c2": Approve()})
    with pytest.raises(Conflict, match=f"waits at decision {decision.id}: resume it before compacting"):
        session.compact(summarize=lambda ms: "S2", keep_last=0)
    model = ScriptedModel(["done"])
    assert [type(s).__name__ for s in resume(store, pause, call=model, tools=tools(idempotent=False))] == [
        "ToolStart",
        "ToolEnd",
        "Assistant",
        "Final",
    ]
    assert model.calls[0]["messages"] == [
        {"role": "user", "content": "S"},
        CALLS,
        {"role": "tool", "tool_call_id": "c1", "content": "L"},
        {"role": "tool", "tool_call_id": "c2", "content": "F"},
    ]
    assert store.verify().ok


def test_the_loop_compacts_around_a_cut_off_call_it_resumed(store, session):
    """The loop's own compaction (context_budget) after the cut-off call was answered:
    the kept part starts at the call, and the summary call is sent what it covers."""
    cut_off_mid_tool(session)
    model = ScriptedModel(["SUMMARY", "done"])
    steps = list(
        run(
            store,
            session,
            call=model,
            tools=tools(idempotent=True),
            context_budget=1,
            keep_last=1,
            count_tokens=lambda ms: len(ms),
        )
    )
    assert [type(s).__name__ for s in steps] == ["ToolStart", "ToolEnd", "Compacted", "Assistant", "Final"]
    summary_call, answer_call = model.calls
    assert contents(summary_call["messages"])[:1] == ["go"] and len(summary_call["messages"]) == 2
    assert answer_call["messages"] == [
        {"role": "user", "content": "SUMMARY"},
        CALLS,
        {"role": "tool", "tool_call_id": "c1", "content": "L"},
        {"role": "tool", "tool_call_id": "c2", "content": "F"},
    ]
