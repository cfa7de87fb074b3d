"""`--model script:PATH`: every command that calls a model, offline, across processes."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from sessiontree import InvalidScript, ScriptExhausted, Store
from sessiontree.cli import cli
from sessiontree.providers.script import assistants_since_last_user, script_model

from conftest import public_rows_of
from test_cli import normalise

FLOWS = str(Path(__file__).parent / "flows.py")
SCRIPT = [
    {
        "content": None,
        "tool_calls": [{"id": "call_w", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
    },
    {
        "role": "assistant",
        "content": "Sunny. Emailing Bob.",
        "tool_calls": [
            {
                "id": "call_e",
                "type": "function",
                "function": {"name": "send_email", "arguments": '{"to": "bob@example.com", "body": "Sunny"}'},
            }
        ],
    },
    {"role": "assistant", "content": "Emailed Bob: sunny in Paris."},
]
RUN_OUTPUT = """\
session <id> branch main
assistant -> get_weather({"city": "Paris"})
  running get_weather [call_w]
  ok get_weather: Sunny in Paris, 21C
Sunny. Emailing Bob.
assistant -> send_email({"to": "bob@example.com", "body": "Sunny"})
paused: send_email requires approval
  call call_e: send_email({"to": "bob@example.com", "body": "Sunny"})
decide with: sessiontree --db <db> approve <id>  (or: sessiontree --db <db> reject <id> --reason ...)
then resume: sessiontree --db <db> resume <id>"""
RESUME_OUTPUT = """\
  running send_email [call_e]
  ok send_email: sent to bob@example.com
Emailed Bob: sunny in Paris.
"""


def write_script(path: Path, lines: list[dict]) -> str:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), "utf-8")
    return f"script:{path}"


def offline_env(monkeypatch: pytest.MonkeyPatch, sent: Path) -> None:
    """No model server anywhere: a script model must not need one."""
    for name in ("SESSIONTREE_BASE_URL", "SESSIONTREE_MODEL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SENT_LOG", str(sent))


def invoke(db: str, *args: str, code: int = 0, stdout: bool = False) -> str:
    result = CliRunner().invoke(cli, ["--db", db, *args])
    assert result.exit_code == code, result.output
    return result.stdout if stdout else result.output


def test_run_pause_approve_resume_on_a_script_model(db_target, tmp_path, monkeypatch):
    sent = tmp_path / "sent.log"
    offline_env(monkeypatch, sent)
    model = write_script(tmp_path / "replies.jsonl", SCRIPT)
    out = invoke(
        db_target, "run", "--new", "Weather in Paris? Email bob.", "--model", model, "--tools", FLOWS, code=3
    )
    assert normalise(out.replace(shlex.quote(db_target), "<db>")) == RUN_OUTPUT
    pause = re.search(r" approve (\S+)", out)[1]
    assert not sent.exists()
    assert invoke(db_target, "approve", pause, "--by", "alice").startswith("decision ")
    assert invoke(db_target, "resume", pause, "--model", model, "--tools", FLOWS) == RESUME_OUTPUT
    assert sent.read_text().splitlines() == ['{"to": "bob@example.com", "body": "Sunny"}']  # once
    with Store(db_target) as store:
        assert store.verify().ok
        (info,) = store.sessions()
        path = store.session(info.id).path("main")
        runs = [store.run(n.run_id) for n in path if n.run_id]
        # What the run records: the provider and the path as given, nothing else about the file.
        assert {(r.provider, r.model) for r in runs} == {("script", str(tmp_path / "replies.jsonl"))}
        assert [r.finish_reason for r in runs] == ["tool_calls", "tool_calls", "stop"]
    # The same pause cannot be resumed twice: the script does not hand out its last reply again.
    again = invoke(db_target, "resume", pause, "--model", model, "--tools", FLOWS, code=1)
    assert "was already resumed" in again
    assert len(sent.read_text().splitlines()) == 1


@pytest.mark.slow  # three processes
def test_run_and_resume_in_separate_processes_share_one_script(tmp_path):
    sent, db = tmp_path / "sent.log", str(tmp_path / "journey.db")
    model = write_script(tmp_path / "replies.jsonl", SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SESSIONTREE_", "OPENAI_"))}
    env.update(SENT_LOG=str(sent), SESSIONTREE_DB=db)
    sessiontree = str(Path(sys.executable).parent / "sessiontree")

    def shell(*args: str, code: int = 0) -> str:
        result = subprocess.run(
            [sessiontree, *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60
        )
        assert result.returncode == code, result.stdout + result.stderr
        return result.stdout

    out = shell("run", "--new", "Weather in Paris? Email bob.", "--model", model, "--tools", FLOWS, code=3)
    # The session line goes to stderr; SESSIONTREE_DB chose the database, so no --db.
    assert normalise(out) == RUN_OUTPUT.split("\n", 1)[1].replace("--db <db> ", "")
    pause = re.search(r" approve (\S+)", out)[1]
    shell("approve", pause, "--by", "alice")
    assert shell("resume", pause, "--model", model, "--tools", FLOWS) == RESUME_OUTPUT
    assert len(sent.read_text().splitlines()) == 1
    assert shell("verify").startswith("ok")


def test_worker_rerun_and_compaction_run_on_a_script_model(tmp_path, monkeypatch):
    sent = tmp_path / "sent.log"
    offline_env(monkeypatch, sent)
    db = str(tmp_path / "x.db")
    model = write_script(tmp_path / "replies.jsonl", SCRIPT)
    out = invoke(
        db, "run", "--new", "Weather? Email bob.", "--model", model, "--tools", FLOWS, "--no-stream", code=3
    )
    pause = re.search(r" approve (\S+)", out)[1]
    invoke(db, "approve", pause)
    out = invoke(db, "worker", "--until-idle", "--model", model, "--tools", FLOWS, "--no-stream")
    assert out.splitlines()[-1] == "assistant: Emailed Bob: sunny in Paris."
    assert len(sent.read_text().splitlines()) == 1

    # rerun from the weather's result: each variant picks up at reply 2 of the script.
    with Store(db) as store:
        (info,) = store.sessions()
        weather = next(n for n in store.session(info.id).path("main") if n.payload.get("role") == "tool")
    other = write_script(tmp_path / "other.jsonl", [SCRIPT[0], {"content": "Just sunny."}])
    out = invoke(
        db,
        "rerun",
        weather.id,
        "--variant",
        f"same={model}",
        "--variant",
        f"other={other}:temperature=0.2,system=Be brief.",
        "--tools",
        FLOWS,
        stdout=True,
    )
    assert normalise(out).splitlines() == [
        "BRANCH  VARIANT  RESULT  ERROR",
        "same  same  paused",
        "other  other  completed",
    ]
    with Store(db) as store:
        s = store.session(info.id)
        assert s.messages("other")[-1]["content"] == "Just sunny."
        run = store.run(s.head("other").run_id)
        assert (run.provider, run.model, run.params) == (
            "script",
            str(tmp_path / "other.jsonl"),
            {"temperature": 0.2},
        )
        assert s.branch("other").metadata["model"] == str(tmp_path / "other.jsonl")

    # A compaction's summary request takes no reply: the turn still gets its reply 1.
    short = write_script(tmp_path / "short.jsonl", [{"content": "Noted."}])
    for prompt in ("one two three four five", "six seven eight nine ten", "eleven twelve"):
        out = invoke(
            db, "run", prompt, "-b", "other", "--model", short, "--context-budget", "5", "--keep-last", "1"
        )
    assert "compacted: a summary now stands for" in out
    with Store(db) as store:
        s = store.session(info.id)
        assert s.messages("other")[-1]["content"] == "Noted."
        assert any("scripted summary of" in str(n.payload.get("summary")) for n in s.path("other"))
        assert store.verify().ok


def test_a_script_that_runs_out_says_which_file_and_reply(tmp_path, monkeypatch):
    offline_env(monkeypatch, tmp_path / "sent.log")
    db = str(tmp_path / "x.db")
    model = write_script(tmp_path / "one.jsonl", SCRIPT[:1])
    result = CliRunner().invoke(
        cli, ["--db", db, "run", "--new", "Weather?", "--model", model, "--tools", FLOWS]
    )
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1] == (
        f"error: ScriptExhausted: {tmp_path / 'one.jsonl'} has no reply 2 for user turn 1 (1 assistant "
        "message(s) since that user message); the script has 1"
    )


BAD_LINES = [
    ("not json", "not valid JSON (Expecting value: line 1 column 1 (char 0))"),
    ('["a list"]', "expected an assistant message object, not a JSON list"),
    ('{"role": "user", "content": "hi"}', "the role is 'user'; a script holds the model's replies only"),
    ('{"content": 7}', "its content is a int, not text"),
    (
        '{"content": null, "tool_calls": [{"function": {}}]}',
        "its message has a tool call without a function name",
    ),
]


@pytest.mark.parametrize(("line", "problem"), BAD_LINES, ids=[b[1][:20] for b in BAD_LINES])
def test_a_malformed_line_is_refused_before_anything_is_written(db_target, tmp_path, line, problem):
    script = tmp_path / "bad.jsonl"
    script.write_text('{"content": "fine"}\n\n' + line + "\n", "utf-8")
    with Store(db_target) as store:
        store.create_session("untouched").append({"role": "user", "content": "hi"})
    before = [s.id for s in Store(db_target).sessions()]
    result = CliRunner().invoke(
        cli, ["--db", db_target, "run", "--new", "hello", "--model", f"script:{script}"]
    )
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert lines[-1].startswith(f"Error: {script} line 3: ")
    assert problem in lines[-1] and len(lines) == 1
    with Store(db_target) as store:
        assert [s.id for s in store.sessions()] == before


def test_a_missing_empty_or_binary_script_is_one_line(tmp_path):
    db = tmp_path / "x.db"
    (tmp_path / "empty.jsonl").write_text("\n\n")
    (tmp_path / "binary.jsonl").write_bytes(b"\x89PNG")
    cases = {
        "script:": "Error: Invalid value for --model: script: needs a file: script:replies.jsonl",
        f"script:{tmp_path / 'nope.jsonl'}": f"Error: {tmp_path / 'nope.jsonl'}: the script file does not exist",
        f"script:{tmp_path}": f"Error: {tmp_path}: is a directory, not a script file",
        f"script:{tmp_path / 'empty.jsonl'}": (
            f"Error: {tmp_path / 'empty.jsonl'}: the script has no reply; write one assistant message per line"
        ),
        f"script:{tmp_path / 'binary.jsonl'}": (
            f"Error: {tmp_path / 'binary.jsonl'}: not UTF-8 text (byte 0x89 at offset 0)"
        ),
    }
    for model, error in cases.items():
        result = CliRunner().invoke(cli, ["--db", str(db), "run", "--new", "hi", "--model", model])
        assert result.exit_code in (1, 2)
        assert result.output.splitlines()[-1] == error
        assert not db.exists()  # refused before the database was even created


def test_the_reply_is_chosen_from_the_conversation_not_the_process(tmp_path):
    model = script_model(write_script(tmp_path / "s.jsonl", SCRIPT).removeprefix("script:"))
    user = {"role": "user", "content": "hi"}
    a1 = {"role": "assistant", "content": None, "tool_calls": SCRIPT[0]["tool_calls"]}
    tool = {"role": "tool", "tool_call_id": "call_w", "content": "Sunny"}
    assert assistants_since_last_user([]) == 0
    assert assistants_since_last_user([{"role": "system", "content": "s"}, user]) == 0
    assert assistants_since_last_user([user, a1, tool]) == 1
    assert assistants_since_last_user([user, a1, tool, a1, tool, user]) == 0
    # The same messages get the same reply, however often and in whatever order they are sent.
    assert model([user, a1, tool], []).message["content"] == "Sunny. Emailing Bob."
    assert model([user], []).message["tool_calls"][0]["id"] == "call_w"
    assert model([user, a1, tool], []).message["content"] == "Sunny. Emailing Bob."
    assert model([user, a1, tool, a1, tool, {"role": "assistant", "content": "x"}, user], []).message[
        "tool_calls"
    ][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    with pytest.raises(ScriptExhausted, match="has no reply 4 for user turn 1 "):
        model([user, a1, tool, a1, tool, a1], [])
    streamed = list(script_model(tmp_path / "s.jsonl", stream=True)([user, a1, tool, a1, tool], []))
    assert streamed[:-1] == ["Emailed ", "Bob: ", "sunny ", "in ", "Paris."]
    assert streamed[-1].message["content"] == "Emailed Bob: sunny in Paris."
    with pytest.raises(InvalidScript):
        script_model(tmp_path / "missing.jsonl")


def test_resume_given_tools_without_the_approved_one_refuses_and_keeps_the_decision(
    db_target, tmp_path, monkeypatch
):
    # `resume P --tools T` where T lacks the approved call's tool used to run the call with
    # no tool, fail, and use the human's approval up. (Pasted with no flags, `resume P` now
    # takes the recorded tools: tests/test_recipe.py.)
    weather_only = tmp_path / "weather_only.py"
    weather_only.write_text("from flows import get_weather\n", "utf-8")
    sent = tmp_path / "sent.log"
    offline_env(monkeypatch, sent)
    model = write_script(tmp_path / "replies.jsonl", SCRIPT)
    out = invoke(
        db_target, "run", "--new", "Weather in Paris? Email bob.", "--model", model, "--tools", FLOWS, code=3
    )
    pause = re.search(r" approve (\S+)", out)[1]
    invoke(db_target, "approve", pause, "--by", "alice")
    with Store(db_target) as store:
        before = public_rows_of(store)
    refused = invoke(db_target, "resume", pause, "--tools", str(weather_only), code=1)
    call_id = re.search(r"decided call (\S+) needs", refused)[1]
    assert refused == (
        f"using --tools {weather_only} instead of the recorded {FLOWS}\n"
        f"Error: pause {pause}: the decided call {call_id} needs the tool 'send_email', which this run"
        " was not given; nothing was run and the decision stays usable (give the tool: tools=..., or"
        " --tools on the command line)\n"
    )
    with Store(db_target) as store:
        assert public_rows_of(store) == before
    assert invoke(db_target, "resume", pause, "--model", model, "--tools", FLOWS) == RESUME_OUTPUT
    assert sent.read_text().splitlines() == ['{"to": "bob@example.com", "body": "Sunny"}']
