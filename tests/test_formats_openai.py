"""OpenAI messages lists: round trips through a store, files, and refused input."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessiontree import Conflict, Store
from sessiontree.formats import (
    FormatError,
    detect_format,
    export_file,
    export_openai,
    import_file,
    import_openai,
)

from conftest import assistant, user

texts = st.text(max_size=30)
tool_calls = st.lists(
    st.fixed_dictionaries(
        {
            "id": st.text(min_size=1, max_size=8),
            "type": st.just("function"),
            "function": st.fixed_dictionaries({"name": st.text(min_size=1, max_size=8), "arguments": texts}),
        }
    ),
    min_size=1,
    max_size=3,
    unique_by=lambda call: call["id"],  # two calls with one id are refused (and never sent by a model)
)
plain = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "developer"]), "content": texts}),
    st.fixed_dictionaries({"role": st.just("assistant"), "content": st.none() | texts}),
    st.fixed_dictionaries(
        {
            "role": st.just("user"),
            "content": st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": texts}), max_size=2),
        }
    ),
)


@st.composite
def turn_with_calls(draw, last: bool) -> list[dict]:
    """An assistant message with calls, then a tool message answering each (any order);
    the last turn of a list may leave some unanswered (the source ends there)."""
    calls = draw(tool_calls)
    answered = draw(st.permutations(calls))
    if last:
        answered = answered[: draw(st.integers(0, len(answered)))]
    tools = [
        draw(
            st.fixed_dictionaries(
                {"role": st.just("tool"), "content": texts, "tool_call_id": st.just(c["id"])},
                optional={"name": texts},
            )
        )
        for c in answered
    ]
    content = draw(st.none() | texts)
    return [{"role": "assistant", "content": content, "tool_calls": calls}, *tools]


@st.composite
def message_lists(draw) -> list[dict]:
    """Lists the API accepts (and ``verify`` passes): never empty, every tool message
    answering a call before it, and calls answered before the conversation moves on."""
    out: list[dict] = []
    for i in range(n := draw(st.integers(1, 8))):
        out += draw(turn_with_calls(last=i == n - 1)) if draw(st.booleans()) else [draw(plain)]
    return out


messages = message_lists()


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(messages=messages, wrapped=st.booleans())
def test_messages_round_trip(messages, wrapped):
    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "s.db") as store:
        session = import_openai(store, {"messages": messages} if wrapped else messages, title="t")
        assert export_openai(session) == messages
        assert len(session.tree()) == len(messages)
        assert session.title == "t"


def test_import_is_linear_main_and_export_skips_markers(store, session):
    session.append(user("q"))
    session.append({"why": "x"}, kind="note")
    session.append(assistant("a"))
    out = export_openai(session, "main")
    assert out == [user("q"), assistant("a")]
    out[0]["content"] = "mutated"  # a copy: the node's payload is untouched
    assert session.messages()[0] == user("q")
    copy = import_openai(store, out)
    assert [n.depth for n in copy.tree()] == [0, 1]
    assert copy.head().id == copy.branch("main").head_id
    assert copy.id != session.id  # no ids in the input: a new session every time


def test_openai_file_round_trip(store, tmp_path):
    s = import_openai(store, [user("q"), assistant("a\u2028b")], title="t")
    path = export_file(store, tmp_path / "chat.json", "openai", session_ids=[s.id])
    assert json.loads(path.read_text()) == [user("q"), assistant("a\u2028b")]
    assert detect_format(path) == "openai"
    [again] = import_file(store, path)
    assert export_openai(again) == export_openai(s)


def test_refused_messages_write_nothing(store):
    for bad, match in [
        ([user("ok"), {"content": "no role"}], "message 2: .*needs 'role'"),
        ([user("ok"), {"role": "user", "content": float("nan")}], "message 2"),
        ({"msgs": []}, "'messages' list"),
        (5, "got int"),
    ]:
        with pytest.raises(FormatError, match=match):
            import_openai(store, bad)
    assert store.sessions() == []


def test_a_list_the_api_would_refuse_is_refused_by_position(store):
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    asked = {"role": "assistant", "content": None, "tool_calls": [call]}
    answer = {"role": "tool", "tool_call_id": "c1", "content": "done"}
    for bad, match in [
        ([], "^no messages: the list is empty$"),
        (
            [user("q"), answer],
            "^message 2: a tool message must answer a call of the assistant message before it; "
            "tool_call_id 'c1' answers none$",
        ),
        ([user("q"), asked, answer, answer], "^message 4: .*tool_call_id 'c1' answers none$"),
        (
            [user("q"), asked, user("moved on")],
            "^message 3: the tool call\\(s\\) 'c1' before it have no tool message",
        ),
        ([{"role": "user", "content": 5}], "needs 'content' to be text, a list of parts or null, not int"),
    ]:
        with pytest.raises(FormatError, match=match):
            import_openai(store, bad)
    assert store.sessions() == []
    assert len(import_openai(store, [user("q"), asked]).tree()) == 2  # a list may end with calls open


def test_export_never_overwrites_the_store_it_reads(store, tmp_path):
    import_openai(store, [user("q")])
    for fmt in ("native", "openai"):
        with pytest.raises(Conflict, match="is this store's own database file"):
            export_file(store, tmp_path / "store.db", fmt, session_ids=[store.sessions()[0].id])
    assert store.verify().ok and len(store.sessions()) == 1


def test_export_file_refuses_unknown_format_and_many_sessions(store, tmp_path):
    s = import_openai(store, [user("q")])
    with pytest.raises(FormatError, match="cannot export to 'chatgpt'"):
        export_file(store, tmp_path / "x", "chatgpt")
    with pytest.raises(FormatError, match="one branch of one session"):
        export_file(store, tmp_path / "x", "openai", session_ids=[s.id, s.id])
    assert list(tmp_path.iterdir()) == [tmp_path / "store.db", *sorted(tmp_path.glob("store.db-*"))]
