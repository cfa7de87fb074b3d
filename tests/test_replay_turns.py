"""Replay of a branch with several user turns: the recorded user messages are fed back and
each turn is compared on its own (imported chats, continued sessions, live models)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from sessiontree import Conflict, Store, replay, run
from sessiontree.cli import cli
from sessiontree.formats import import_file
from sessiontree.testing import ScriptedModel, reply, tool_call

from conftest import user
from flows import approve_risky, get_weather, send_email

FIXTURES = Path(__file__).parent / "fixtures"
IMPORTS = sorted(
    p
    for p in [*(FIXTURES / "real").glob("*/*.json*"), *(FIXTURES / "conversations").glob("*.json*")]
    if p.name != "claude-code-log-edge_cases.jsonl"  # refused on purpose (test_formats_real)
)
OPENWEBUI = FIXTURES / "real" / "openwebui" / "openwebui-importer-claude_output.json"


def messages_after_first_reply(path) -> list:
    first = next(i for i, n in enumerate(path) if n.kind == "message" and n.payload["role"] == "assistant")
    return [n for n in path[first:] if n.kind == "message"]


def user_turns(messages) -> int:
    """Turns as the recording holds them: 1, plus one per user message after the agent's."""
    turns, agent_wrote = 1, True
    for m in messages:
        if m.payload["role"] in ("assistant", "tool"):
            agent_wrote = True
        elif agent_wrote:
            turns, agent_wrote = turns + 1, False
    return turns


def back_to_back(messages) -> set[int]:
    """Positions of assistant messages right after a reply without tool calls: the agent
    loop ends a run at such a reply, so no replay can write the second one."""
    return {
        i
        for i in range(1, len(messages))
        if messages[i].payload["role"] == "assistant"
        and messages[i - 1].payload["role"] == "assistant"
        and not messages[i - 1].payload.get("tool_calls")
    }


@pytest.mark.parametrize("path", IMPORTS, ids=lambda p: p.name)
def test_a_replay_of_an_import_feeds_its_user_turns_back(store, path):
    replayed = 0
    for s in import_file(store, path, skip_invalid=True, report=lambda line: None):
        recorded = s.path("main")
        replies = [
            i for i, n in enumerate(recorded) if n.kind == "message" and n.payload["role"] == "assistant"
        ]
        if not replies or replies[0] == 0:
            continue  # no model call after a first message: nothing to replay (replay says so)
        messages = messages_after_first_reply(recorded)
        report = replay(store, "main", session=s)
        replayed += 1
        assert report.compared == len(messages)
        assert [t.turn for t in report.turns] == list(range(1, user_turns(messages) + 1))
        assert sum(t.compared for t in report.turns) == report.compared
        assert all(t.final != "not replayed" for t in report.turns)
        if len(report.turns) > 1:
            assert report.turns[1].matched, "the first user turn fed back must replay as recorded"
        for t in report.turns:
            if not t.matched:  # only where no agent loop could have written the recording
                assert t.divergence.index in back_to_back(messages), t
                assert t.divergence.actual is None
        if not back_to_back(messages):
            assert report.matched, [t for t in report.turns if not t.matched]
    assert replayed or path.name == "claude-code-log-sidechain_integrated.jsonl"


@pytest.mark.slow  # every multi-turn fixture imported and replayed: 1.9 s
def test_the_imports_that_diverged_at_their_first_user_turn_now_match(store):
    """Before: 16 of 16 multi-turn imports diverged, 15 of them at the first user turn
    fed back (`actual: None`); now 14 match whole and 2 differ only at back-to-back replies."""
    multi, matched = 0, 0
    for path in IMPORTS:
        for s in import_file(store, path, skip_invalid=True, report=lambda line: None):
            try:
                report = replay(store, "main", session=s)
            except Conflict:
                continue  # no model call after a first message
            if len(report.turns) > 1:
                multi += 1
                matched += report.matched
    assert (multi, matched) == (16, 14)


def test_a_changed_reply_is_reported_at_its_turn(any_store):
    (s,) = import_file(any_store, OPENWEBUI)
    recorded = [n.payload["content"] for n in s.path("main") if n.payload.get("role") == "assistant"]
    assert len(recorded) == 5
    changed = [*recorded[:2], "Ecosystems are a myth.", *recorded[3:]]
    report = replay(any_store, "main", session=s, call=ScriptedModel(changed, model="new-model"))
    assert [t.matched for t in report.turns] == [True, True, False, True, True]
    assert [(t.first, t.compared) for t in report.turns] == [(0, 1), (1, 2), (3, 2), (5, 2), (7, 2)]
    d = report.divergence
    assert (d.turn, d.index) == (3, 4)
    assert d.expected == json.dumps(["assistant", recorded[2], []], ensure_ascii=False)
    assert d.actual == '["assistant", "Ecosystems are a myth.", []]'
    assert not report.matched and report.final == "completed"
    assert s.branch(report.branch).metadata == {
        "replay_of": "main",
        "tools": "recorded",
        "model": "new-model",
    }
    # The replay branch holds the recorded user turns and the new model's replies, in order.
    replayed = [m["content"] for m in s.messages(report.branch)]
    assert (
        replayed
        == [m["content"] for m in s.messages("main")][:5]
        + ["Ecosystems are a myth."]
        + [m["content"] for m in s.messages("main")][6:]
    )
    assert any_store.verify().ok


def test_a_turn_that_wants_more_replies_does_not_take_the_next_turns(store, session):
    session.append(user("Weather?"))
    model = ScriptedModel([reply(None, tool_call("get_weather", {"city": "Paris"}, id="w"))])
    list(run(store, session, call=model, tools=[get_weather]))  # ends in error: the script ran out
    session.append(user("Never mind. Hello?"))
    list(run(store, session, call=ScriptedModel(["Hello."]), tools=[get_weather]))
    report = replay(store, "main", session=session)
    assert [t.matched for t in report.turns] == [True, True]
    assert [t.final for t in report.turns] == ["error", "completed"]  # turn 1 stops as it did
    assert report.matched and session.messages(report.branch)[-1]["content"] == "Hello."


def test_a_pause_stops_the_replay_and_the_later_turns_are_not_replayed(store, session):
    session.append(user("Email bob."))
    model = ScriptedModel([reply(None, tool_call("send_email", {"to": "bob", "body": "hi"}, id="e"))])
    list(run(store, session, call=model, tools=[send_email], approve=approve_risky))  # paused
    session.append(user("Actually, tell me a joke."))
    session.append({"role": "assistant", "content": "A joke."})
    report = replay(store, "main", session=session, tools="live", implementations=[send_email])
    assert [t.final for t in report.turns] == ["paused", "not replayed"]
    assert report.turns[0].matched and not report.turns[1].matched
    assert (report.divergence.turn, report.divergence.actual) == (2, None)
    assert report.final == "paused"


def three_turns(db: Path) -> None:
    with Store(db) as store:
        chat = store.create_session("three questions")
        for question, answer in [("Hi?", "Hello."), ("Weather?", "Sunny."), ("Tomorrow?", "Rain.")]:
            chat.append(user(question))
            chat.append({"role": "assistant", "content": answer})


def test_cli_replay_reports_each_turn(tmp_path, monkeypatch):
    monkeypatch.delenv("SESSIONTREE_MODEL", raising=False)
    db = tmp_path / "x.db"
    three_turns(db)
    runner = CliRunner()
    result = runner.invoke(cli, ["--db", str(db), "replay", "main"])
    assert (result.exit_code, result.stdout) == (
        0,
        "replayed main into main-replay: all 5 message(s) of 3 turn(s) matched (completed)\n",
    )
    script = tmp_path / "sunny.jsonl"
    script.write_text('{"role": "assistant", "content": "Sunny."}\n')
    result = runner.invoke(cli, ["--db", str(db), "replay", "main", "--model", f"script:{script}"])
    assert result.exit_code == 1
    assert result.output == (
        "replayed main into main-replay-2: 2 of 3 turn(s) diverged, the first diverged at message 1 of 5\n"
        "  turn 1 (message 1): diverged at message 1 (completed)\n"
        '    expected: ["assistant", "Hello.", []]\n'
        '    actual:   ["assistant", "Sunny.", []]\n'
        "  turn 2 (messages 2-3): matched (completed)\n"
        "  turn 3 (messages 4-5): diverged at message 5 (completed)\n"
        '    expected: ["assistant", "Rain.", []]\n'
        '    actual:   ["assistant", "Sunny.", []]\n'
    )
    result = runner.invoke(cli, ["--db", str(db), "replay", "main", "--model", f"script:{script}", "--json"])
    data = json.loads(result.stdout)
    assert [(t["turn"], t["matched"], t["final"]) for t in data["turns"]] == [
        (1, False, "completed"),
        (2, True, "completed"),
        (3, False, "completed"),
    ]
    assert data["divergence"] == {
        "index": 0,
        "expected": '["assistant", "Hello.", []]',
        "actual": '["assistant", "Sunny.", []]',
        "node_id": data["turns"][0]["divergence"]["node_id"],
        "turn": 1,
    }
    with Store(db) as store:
        (info,) = store.sessions()
        run_ = store.run(store.session(info.id).head("main-replay-3").run_id)
        assert (run_.provider, run_.model) == ("script", str(script))


def test_cli_replay_never_takes_its_model_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SESSIONTREE_MODEL", "script:/nonexistent.jsonl")
    db = tmp_path / "x.db"
    three_turns(db)
    result = CliRunner().invoke(cli, ["--db", str(db), "replay", "main"])
    assert result.exit_code == 0 and "matched" in result.output
