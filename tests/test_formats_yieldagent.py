"""yieldagent's resumeState: imported as a pause that approve and resume carry on; a pause out.

The shape is issue 30's description (``{messages, pendingCall}``, messages in OpenAI's
chat shape, ``pendingCall`` ``{id, name, arguments}``): yieldagent's source was not
available to check it against.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from sessiontree import Store
from sessiontree.cli import cli
from sessiontree.formats import FormatError, detect_format, export_file, import_file
from sessiontree.model import sendable

FLOWS = str(Path(__file__).parent / "flows.py")
CALL = {"id": "call_e", "name": "send_email", "arguments": {"to": "bob@example.com", "body": "Sunny"}}
MADE = {
    "id": "call_e",
    "type": "function",
    "function": {"name": "send_email", "arguments": '{"to": "bob@example.com", "body": "Sunny"}'},
}
STATE = {
    "messages": [
        {"role": "system", "content": "You send emails."},
        {"role": "user", "content": "Tell Bob it is sunny."},
        {"role": "assistant", "content": "Emailing Bob.", "tool_calls": [MADE]},
    ],
    "pendingCall": CALL,
}


def invoke(db: str, *args: str, code: int = 0) -> str:
    result = CliRunner().invoke(cli, ["--db", db, *args])
    assert result.exit_code == code, result.output
    return result.output


def test_a_resume_state_is_paused_approved_elsewhere_and_resumed_once(db_target, tmp_path, monkeypatch):
    """Before: sessiontree could not read a yieldagent state at all."""
    sent = tmp_path / "sent.log"
    monkeypatch.setenv("SENT_LOG", str(sent))
    state = tmp_path / "state.json"
    state.write_text(json.dumps(STATE))
    assert detect_format(state) == "yieldagent"
    assert "(yieldagent)" in invoke(db_target, "import", str(state))
    with Store(db_target) as store:
        (pause,) = store.pending()
        assert pause.payload["calls"][0]["arguments"] == MADE["function"]["arguments"]
        assert store.verify().ok
    invoke(db_target, "approve", pause.id, "--by", "alice")  # another process: its own store
    script = tmp_path / "replies.jsonl"
    replies = [STATE["messages"][-1], {"role": "assistant", "content": "Emailed Bob."}]  # per user turn
    script.write_text("".join(json.dumps(r) + "\n" for r in replies))
    out = invoke(db_target, "resume", pause.id, "--tools", FLOWS, "--model", f"script:{script}")
    assert "ok send_email: sent to bob@example.com" in out and "Emailed Bob." in out
    ran = [json.loads(x)["to"] for x in sent.read_text().splitlines()]
    assert ran == ["bob@example.com"]  # the tool ran once
    again = invoke(db_target, "resume", pause.id, "--tools", FLOWS, "--model", f"script:{script}", code=1)
    assert "already resumed" in again
    assert len(sent.read_text().splitlines()) == 1
    with Store(db_target) as store:
        session = store.session(pause.session_id)
        assert [m["role"] for m in session.messages("main")] == [
            "system",
            "user",
            "assistant",
            "tool",
            "assistant",
        ]


def test_import_then_export_gives_the_state_back(any_store, tmp_path):
    state = tmp_path / "state.json"
    state.write_text(json.dumps(STATE))
    (s,) = import_file(any_store, state)
    out = export_file(any_store, tmp_path / "out.json", "yieldagent", session_ids=[s.id])
    assert json.loads(out.read_text()) == STATE


def test_a_pending_call_no_message_made_gets_its_message_and_leaves_it_out_again(store, tmp_path):
    bare = {
        "messages": STATE["messages"][:2],
        "pendingCall": {**CALL, "arguments": json.dumps(CALL["arguments"])},
    }
    state = tmp_path / "state.json"
    state.write_text(json.dumps(bare))
    (s,) = import_file(store, state)
    (pause,) = store.pending()
    made = store.node(pause.payload["assistant_id"])
    assert made.payload["tool_calls"][0]["function"]["name"] == "send_email"
    assert sendable(s.messages("main"))[-1] == {  # what a model is sent: the raw mark left out
        "role": "assistant",
        "content": None,
        "tool_calls": made.payload["tool_calls"],
    }
    out = export_file(store, tmp_path / "out.json", "yieldagent", session_ids=[s.id])
    assert json.loads(out.read_text()) == {"messages": bare["messages"], "pendingCall": CALL}


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ({"messages": [], "pendingCall": {"name": "x"}}, "'pendingCall' needs an 'id' string"),
        (
            {"messages": [], "pendingCall": {**CALL, "arguments": "{nope"}},
            "'pendingCall' 'arguments' should be an object or JSON text",
        ),
        (
            {"messages": [*STATE["messages"], {"role": "user", "content": "and?"}], "pendingCall": CALL},
            "message 4: the conversation moves on past the pending call 'call_e'",
        ),
        (
            {
                "messages": [*STATE["messages"], {"role": "tool", "tool_call_id": "call_e", "content": "x"}],
                "pendingCall": CALL,
            },
            "message 4: answers the pending call 'call_e'",
        ),
    ],
)
def test_a_bad_state_is_one_line_and_nothing_is_written(store, tmp_path, state, message):
    path = tmp_path / "state.json"
    path.write_text(json.dumps(state))
    with pytest.raises(FormatError) as raised:
        import_file(store, path, "yieldagent")
    assert str(raised.value).startswith(f"state.json: {message}")
    assert "\n" not in str(raised.value)
    assert store.sessions() == []


def test_only_an_undecided_pause_for_one_call_exports(store, tmp_path):
    s = store.create_session()
    s.append({"role": "user", "content": "hi"})
    with pytest.raises(
        FormatError, match="'main' is at a message node .* waiting at a pause no one has decided"
    ):
        export_file(store, tmp_path / "out.json", "yieldagent", session_ids=[s.id])
    assert not (tmp_path / "out.json").exists()
