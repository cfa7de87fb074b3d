"""`--tools` files and modules, `run`'s exit codes, `log` into a closed pipe and `sessions` by
last activity: the newcomer's frictions with the command line (issue 25, item 6)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from sessiontree import Store
from sessiontree.cli import cli

TOOLS_WITH_LIST = '''\
from sessiontree import tool


@tool
def get_weather(city: str) -> str:
    """Weather for a city."""
    return f"Sunny in {city}"


TOOLS = [get_weather]
'''
PLAIN_TOOLS = '''\
def plain(city: str) -> str:
    """Weather for a city."""
    return f"Rain in {city}"
'''


def invoke(db: str, *args: str, code: int = 0, input: str | None = None) -> str:
    result = CliRunner().invoke(cli, ["--db", db, *args], input=input)
    assert result.exit_code == code, result.output
    return result.output


def script(path: Path, *replies: dict) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in replies), "utf-8")
    return f"script:{path}"


def calls(name: str) -> dict:
    return {
        "content": None,
        "tool_calls": [{"id": "c1", "function": {"name": name, "arguments": {"city": "Paris"}}}],
    }


def stdout_of(db: str, *args: str, code: int = 0) -> str:
    result = CliRunner().invoke(cli, ["--db", db, *args])
    assert result.exit_code == code, result.output
    return result.stdout


# -- (2, 13) tools files -------------------------------------------------------------


def test_a_tool_listed_in_tools_is_one_tool(db_target, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tools_with_list.py").write_text(TOOLS_WITH_LIST)
    model = script(tmp_path / "s.jsonl", calls("get_weather"), {"content": "done"})
    out = stdout_of(db_target, "run", "--new", "hi", "--model", model, "--tools", "tools_with_list.py")
    assert out == (
        'assistant -> get_weather({"city": "Paris"})\n'
        "  running get_weather [c1]\n"
        "  ok get_weather: Sunny in Paris\n"
        "done\n"
    )


def test_the_demo_tools_module_loads(db_target, tmp_path):
    model = script(tmp_path / "s.jsonl", {"content": "done"})
    assert (
        stdout_of(db_target, "run", "--new", "hi", "--model", model, "--tools", "sessiontree.cli.demo")
        == "done\n"
    )


def test_a_tools_file_of_plain_functions_is_refused_and_writes_nothing(db_target, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plain_tools.py").write_text(PLAIN_TOOLS)
    Store(db_target).close()
    model = script(tmp_path / "s.jsonl", {"content": "done"})
    out = invoke(db_target, "run", "--new", "hi", "--model", model, "--tools", "plain_tools.py", code=2)
    assert out.splitlines()[-1] == (
        "Error: Invalid value for --tools: plain_tools.py has no tools: mark its functions with @tool"
        " (from sessiontree import tool), or name one as plain_tools.py:FUNCTION"
    )
    with Store(db_target) as store:
        assert store.sessions() == []


def test_module_attr_finds_a_module_in_the_current_directory_and_wraps_a_function(
    db_target, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plain_tools_cwd.py").write_text(PLAIN_TOOLS)
    model = script(tmp_path / "s.jsonl", calls("plain"), {"content": "done"})
    out = stdout_of(db_target, "run", "--new", "hi", "--model", model, "--tools", "plain_tools_cwd:plain")
    assert (
        out
        == 'assistant -> plain({"city": "Paris"})\n  running plain [c1]\n  ok plain: Rain in Paris\ndone\n'
    )


def test_two_different_tools_of_one_name_are_a_one_line_error(db_target, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a_tools.py").write_text(TOOLS_WITH_LIST)
    (tmp_path / "b_tools.py").write_text(TOOLS_WITH_LIST)
    model = script(tmp_path / "s.jsonl", {"content": "done"})
    out = invoke(
        db_target,
        "run",
        "--new",
        "hi",
        "--model",
        model,
        "--tools",
        "a_tools.py",
        "--tools",
        "b_tools.py",
        code=2,
    )
    assert out.splitlines()[-1] == "Error: Invalid value for --tools: two tools are named 'get_weather'"


# -- (21) exit codes -----------------------------------------------------------------

RISKY = '''\
from sessiontree import tool


@tool
def get_weather(city: str) -> str:
    """Weather for a city."""
    return f"Sunny in {city}"


@tool(idempotent=False)
def send_email(to: str) -> str:
    """Send an email."""
    return f"sent to {to}"
'''


def test_run_exits_3_when_paused_4_at_max_steps_and_resume_0_when_completed(db_target, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "risky.py").write_text(RISKY)
    email = {
        "content": None,
        "tool_calls": [{"id": "e1", "function": {"name": "send_email", "arguments": {"to": "bob"}}}],
    }
    model = script(tmp_path / "s.jsonl", email, {"content": "sent"})
    out = stdout_of(db_target, "run", "--new", "mail bob", "--model", model, "--tools", "risky.py", code=3)
    assert "paused: send_email requires approval" in out
    (pause,) = [p["id"] for p in json.loads(invoke(db_target, "pending", "--json"))]
    invoke(db_target, "approve", pause)
    assert stdout_of(db_target, "resume", pause, "--model", model, "--tools", "risky.py") == (
        "  running send_email [e1]\n  ok send_email: sent to bob\nsent\n"
    )
    looping = script(tmp_path / "loop.jsonl", *[calls("get_weather")] * 3)
    out = stdout_of(
        db_target,
        "run",
        "--new",
        "loop",
        "--model",
        looping,
        "--tools",
        "risky.py",
        "--max-steps",
        "2",
        code=4,
    )
    assert out.endswith("stopped: max_steps\n")


# -- (17) a reader that goes away --------------------------------------------------


def test_log_into_a_closed_pipe_is_silent(tmp_path):
    db = tmp_path / "pipe.db"
    with Store(db) as store:
        s = store.create_session("long")
        for i in range(50):
            s.append({"role": "user", "content": "\n".join(f"line {i}.{j}" for j in range(200))})
    env = {**os.environ, "SESSIONTREE_DB": str(db)}
    sessiontree = str(Path(sys.executable).parent / "sessiontree")
    proc = subprocess.Popen([sessiontree, "log"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline().startswith(b"user ")
    proc.stdout.close()  # as `head` does once it has its lines
    with proc.stderr:
        assert proc.stderr.read() == b""
    assert proc.wait(timeout=60) == 0


# -- (5) one "latest session" --------------------------------------------------------


def test_sessions_lists_by_last_activity_and_implicit_writes_name_their_session(db_target, frozen_clock):
    with Store(db_target) as store:
        old = store.create_session("old")
        old.append({"role": "user", "content": "first"})
        new = store.create_session("new")
        new.append({"role": "user", "content": "second"})
        frozen_clock.advance(0.005)  # node times have millisecond resolution: let the clock tick
        old.append({"role": "user", "content": "old is active again"})
    listed = json.loads(invoke(db_target, "sessions", "--json"))
    assert [s["title"] for s in listed] == ["old", "new"]  # by activity, not creation
    assert json.loads(invoke(db_target, "tree", "--json"))["session"] == old.id
    result = CliRunner().invoke(cli, ["--db", db_target, "append", "note to self"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("branch main -> ")
    assert result.stderr == f"in session {old.id} (the most recently active; -s SESSION picks another)\n"
    named = CliRunner().invoke(cli, ["--db", db_target, "append", "-s", new.id, "to new"])
    assert named.exit_code == 0 and named.stderr == ""
