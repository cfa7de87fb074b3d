"""A run records its recipe; `resume P`, `worker`, `rerun` and `serve --work` continue
from it with no flags, and refuse, before writing anything, a tool that is gone or changed."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from sessiontree import Approve, Recipe, Store, ToolChanged, aresume, decide, resume, run, tool
from sessiontree import recipe as recipes
from sessiontree.cli import cli
from sessiontree.recipe import schema_hash
from sessiontree.testing import ScriptedModel, reply, tool_call

from conftest import public_rows_of

TOOLS = '''\
import os
from sessiontree import tool


@tool(idempotent=False)
def send_email(to: str{extra}) -> str:
    """Send an email (not safe to repeat)."""
    with open(os.environ["COUNTER"], "a") as f:
        f.write(to + "\\n")
    return f"sent to {{to}}"
'''
EMAIL = {
    "content": None,
    "tool_calls": [{"id": "call_e", "function": {"name": "send_email", "arguments": {"to": "bob"}}}],
}
DONE = {"content": "Emailed Bob."}


@pytest.fixture
def journey(tmp_path, monkeypatch):
    """A tools file, a script and a counter file the tool appends to; nothing from the
    environment that could stand in for the recipe."""
    for name in ("SESSIONTREE_BASE_URL", "SESSIONTREE_MODEL", "SESSIONTREE_DB"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-recipe-secret-4711")
    monkeypatch.setenv("COUNTER", str(tmp_path / "counter.txt"))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # a rewritten tools file is read again
    tools = tmp_path / "mytools.py"
    tools.write_text(TOOLS.format(extra=""), "utf-8")
    script = tmp_path / "replies.jsonl"
    script.write_text(json.dumps(EMAIL) + "\n" + json.dumps(DONE) + "\n", "utf-8")
    return tmp_path


def cli_run(db: str, *args: str, code: int = 0) -> Result:
    result = CliRunner().invoke(cli, ["--db", db, *args])
    assert result.exit_code == code, result.output
    return result


def pasted(line: str) -> list[str]:
    """A hint line's command as a shell would split it, without the program's name."""
    words = shlex.split(line.split(": ", 1)[1])
    assert words[0] == "sessiontree"
    return words[1:]


def sent(tmp_path: Path) -> list[str]:
    counter = tmp_path / "counter.txt"
    return counter.read_text().splitlines() if counter.exists() else []


def paused_run(db: str, tmp_path: Path, *extra: str) -> tuple[str, str]:
    """`run` that pauses before send_email; (the pause id, the "then resume:" line)."""
    result = CliRunner().invoke(
        cli,
        [
            "--db",
            db,
            "run",
            "--new",
            "Email bob.",
            "--model",
            "script:replies.jsonl",
            "--tools",
            "mytools.py",
            *extra,
        ],
    )
    assert result.exit_code == 3, result.output  # paused
    (line,) = [x for x in result.output.splitlines() if x.startswith("then resume: ")]
    return pasted(line)[-1], line


# -- the journey ------------------------------------------------------------------------


def test_run_approve_and_resume_as_printed_with_no_flags(db_target, journey, monkeypatch):
    monkeypatch.chdir(journey)  # `run` names its files relative to here; the recipe makes them absolute
    pause, then = paused_run(db_target, journey)
    assert pasted(then) == ["--db", db_target, "resume", pause]
    approved = cli_run(db_target, "approve", pause, "--by", "alice").output.splitlines()
    assert approved[-1] == then.replace("then resume: ", "resume with: ")
    monkeypatch.chdir("/")  # another directory: nothing relative is left in the recipe
    result = CliRunner().invoke(cli, pasted(approved[-1]))
    assert result.exit_code == 0, result.output
    assert result.output == "  running send_email [call_e]\n  ok send_email: sent to bob\nEmailed Bob.\n"
    assert sent(journey) == ["bob"]  # exactly once
    assert cli_run(db_target, "verify").output.startswith("ok")


def test_a_tools_module_of_the_current_directory_is_found_from_anywhere(db_target, journey, monkeypatch):
    """`--tools mytools` (a module found here, which imports one beside it): the recipe
    records its file, so `resume P` as printed works from another directory too (a worker
    and `serve --work` load recorded tools the same way, recorded_tools)."""
    for name in ("mytools", "helpers"):  # as in a fresh process (another test's may be imported)
        monkeypatch.delitem(sys.modules, name, raising=False)
    (journey / "helpers.py").write_text("GREETING = 'sent to'\n", "utf-8")
    source = (journey / "mytools.py").read_text("utf-8")
    (journey / "mytools.py").write_text("import helpers\n" + source, "utf-8")
    monkeypatch.chdir(journey)
    args = ["run", "--new", "Email bob.", "--model", "script:replies.jsonl", "--tools", "mytools"]
    out = cli_run(db_target, *args, code=3).output
    (then,) = [x for x in out.splitlines() if x.startswith("then resume: ")]
    pause = pasted(then)[-1]
    with Store(db_target) as store:
        assert recipes.of(store.node(pause)).tools == (str(journey / "mytools.py"),)
    cli_run(db_target, "approve", pause)
    monkeypatch.chdir("/")
    result = CliRunner().invoke(cli, pasted(then))
    assert result.exit_code == 0, result.output
    assert sent(journey) == ["bob"]


@pytest.mark.slow  # three processes
def test_the_journey_in_separate_processes(journey):
    db = str(journey / "journey.db")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SESSIONTREE_", "OPENAI_"))}
    env.update(COUNTER=str(journey / "counter.txt"), OPENAI_API_KEY="sk-x", PYTHONDONTWRITEBYTECODE="1")
    sessiontree = str(Path(sys.executable).parent / "sessiontree")

    def shell(argv: list[str], cwd: Path | str, code: int = 0) -> str:
        done = subprocess.run(
            [sessiontree, *argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == code, done.stdout + done.stderr
        return done.stdout

    out = shell(
        [
            "--db",
            "journey.db",
            "run",
            "--new",
            "Email bob.",
            "--model",
            "script:replies.jsonl",
            "--tools",
            "mytools.py",
        ],
        journey,
        code=3,
    )
    then = next(x for x in out.splitlines() if x.startswith("then resume: "))
    pause = pasted(then)[-1]
    shell(["--db", db, "approve", pause], "/")
    assert shell(pasted(then), "/").endswith("Emailed Bob.\n")
    assert sent(journey) == ["bob"]
    assert shell(["--db", db, "verify"], "/").startswith("ok")


def test_the_recipe_is_on_pauses_and_tool_starts_and_holds_no_key(db_target, journey, monkeypatch):
    monkeypatch.chdir(journey)
    pause, _ = paused_run(db_target, journey, "-o", "temperature", "0.2", "--max-steps", "7")
    with Store(db_target) as store:
        node = store.node(pause)
        payloads = [n.payload for n in store.session(node.session_id).path(node.id)]
    assert node.payload["recipe"] == {
        "provider": "script",
        "base_url": None,
        "model": f"script:{journey / 'replies.jsonl'}",
        "params": {"temperature": 0.2},
        "stream": True,
        "api_key_env": "OPENAI_API_KEY",
        "approve": "default",
        "max_steps": 7,
        "context_budget": None,
        "keep_last": 4,
        "pause_expires": None,
        "limits": None,
        "parallel_tools": 4,
        "system": None,
        "tools": [str(journey / "mytools.py")],
        "schema_hashes": {"send_email": node.payload["recipe"]["schema_hashes"]["send_email"]},
        "left_out": [],
    }
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", node.payload["recipe"]["schema_hashes"]["send_email"])
    assert not [p for p in payloads if "role" in p and "recipe" in p]  # models are sent messages as they are
    cli_run(db_target, "approve", pause)
    cli_run(db_target, "resume", pause)
    with Store(db_target) as store:
        path = store.session(node.session_id).path("main")
        (start,) = [n for n in path if n.kind == "tool_start"]
        assert start.payload["recipe"]["tools"] == [str(journey / "mytools.py")]
        rows = json.dumps(public_rows_of(store), default=str)
    assert "sk-recipe-secret-4711" not in rows and "OPENAI_API_KEY" in rows  # the variable's name only
    if not db_target.startswith("postgresql"):
        stored = b"".join(p.read_bytes() for p in journey.glob("store.db*"))
        assert b"sk-recipe-secret-4711" not in stored


def test_a_recipe_never_keeps_a_credential_parameter():
    recipe = Recipe(model="m", params={"api_key": "sk-1", "max_tokens": 5, "extra_headers": {"a": "b"}})
    assert recipe.params == {"max_tokens": 5}
    assert recipe.left_out == ("api_key", "extra_headers")
    assert Recipe.from_dict(recipe.to_dict()) == recipe
    assert Recipe.from_dict({**recipe.to_dict(), "from_the_future": 1}) == recipe


# -- refusals before anything is written ----------------------------------------------


def test_a_changed_tool_schema_refuses_and_the_decision_survives(db_target, journey, monkeypatch):
    monkeypatch.chdir(journey)
    pause, then = paused_run(db_target, journey)
    cli_run(db_target, "approve", pause)
    (journey / "mytools.py").write_text(TOOLS.format(extra=", cc: str = ''"), "utf-8")
    with Store(db_target) as store:
        before = public_rows_of(store)
    refused = CliRunner().invoke(cli, pasted(then))
    assert refused.exit_code == 1
    assert refused.output == (
        f"Error: pause {pause}: the tool 'send_email' of the decided call call_e has changed since the"
        " pause (its JSON schema is not the one recorded); nothing was run and the decision stays"
        " usable (give the tool as it was, or accept it as it is now: accept_changed_tools=True, or"
        " --accept-changed-tools on the command line)\n"
    )
    with Store(db_target) as store:
        assert public_rows_of(store) == before
    assert sent(journey) == []
    (journey / "mytools.py").write_text(TOOLS.format(extra=""), "utf-8")  # the tool as it was
    assert CliRunner().invoke(cli, pasted(then)).exit_code == 0
    assert sent(journey) == ["bob"]


def test_accept_changed_tools_runs_the_tool_as_it_is_now(journey, monkeypatch):
    monkeypatch.chdir(journey)
    db = str(journey / "x.db")
    pause, then = paused_run(db, journey)
    cli_run(db, "approve", pause)
    (journey / "mytools.py").write_text(TOOLS.format(extra=", cc: str = ''"), "utf-8")
    assert CliRunner().invoke(cli, [*pasted(then), "--accept-changed-tools"]).exit_code == 0
    assert sent(journey) == ["bob"]


def test_a_tool_gone_refuses_and_the_decision_survives(db_target, journey, monkeypatch):
    monkeypatch.chdir(journey)
    pause, then = paused_run(db_target, journey)
    cli_run(db_target, "approve", pause)
    with Store(db_target) as store:
        before = public_rows_of(store)
    tools = journey / "mytools.py"
    tools.rename(journey / "elsewhere.py")  # the file is gone
    gone = CliRunner().invoke(cli, pasted(then))
    assert gone.exit_code == 1
    assert gone.output.startswith(f"Error: the recorded tools cannot be loaded: cannot import {tools}: ")
    assert gone.output.endswith(" (restore them, or give --tools)\n") and gone.output.count("\n") == 1
    tools.write_text("from sessiontree import tool\n\n\n@tool\ndef other() -> str:\n    return ''\n", "utf-8")
    missing = CliRunner().invoke(cli, pasted(then))  # the file is back, without the tool
    assert missing.exit_code == 1
    assert missing.output.startswith(
        f"Error: pause {pause}: the decided call call_e needs the tool 'send_email'"
    )
    assert missing.output.count("\n") == 1
    with Store(db_target) as store:
        assert public_rows_of(store) == before  # nothing written by either
    (journey / "elsewhere.py").rename(tools)
    assert CliRunner().invoke(cli, pasted(then)).exit_code == 0
    assert sent(journey) == ["bob"]


def test_a_worker_reports_tools_gone_for_that_pause_in_one_line(journey, monkeypatch):
    db = str(journey / "w.db")
    monkeypatch.chdir(journey)
    pause, then = paused_run(db, journey)
    cli_run(db, "approve", pause)
    tools = journey / "mytools.py"
    tools.rename(journey / "elsewhere.py")
    worked = cli_run(db, "worker", "--until-idle")
    assert worked.stderr.endswith(
        f"error: ToolsUnavailable: the recorded tools cannot be loaded: cannot import {tools}:"
        f" [Errno 2] No such file or directory: '{tools}' (restore them, or give --tools)\n"
    )
    (journey / "elsewhere.py").rename(tools)
    assert CliRunner().invoke(cli, pasted(then)).exit_code == 0  # the decision is still there
    assert sent(journey) == ["bob"]


def test_the_library_refuses_a_changed_tool_unless_accepted(any_store):
    @tool(idempotent=False)
    def refund(order: str) -> str:
        return "refunded " + order

    @tool(idempotent=False, name="refund")
    def refund_v2(order: str, amount: int) -> str:
        return f"refunded {amount} on {order}"

    s = any_store.create_session("lib")
    s.append({"role": "user", "content": "refund 9"})
    model = ScriptedModel([reply(None, tool_call("refund", {"order": "9"}, id="r1"))])
    (*_, final) = run(any_store, s, call=model, tools=[refund])
    assert final.reason == "paused"
    assert final.node.payload["recipe"]["schema_hashes"] == {"refund": schema_hash(refund)}
    assert final.node.payload["recipe"]["approve"] == "default"
    decide(any_store, final.node.id, {"r1": Approve()})
    nodes = len(s.tree())
    with pytest.raises(ToolChanged, match="the tool 'refund' of the decided call r1 has changed"):
        aresume(any_store, final.node.id, call=ScriptedModel(["ok"]), tools=[refund_v2])
    assert len(s.tree()) == nodes
    steps = list(
        resume(
            any_store, final.node.id, call=ScriptedModel(["ok"]), tools=[refund_v2], accept_changed_tools=True
        )
    )
    assert steps[-1].reason == "completed"


# -- flags replace one item, and say so -------------------------------------------------


def test_a_flag_given_replaces_its_item_and_says_so(journey, monkeypatch):
    monkeypatch.chdir(journey)
    db = str(journey / "x.db")
    pause, then = paused_run(db, journey)
    cli_run(db, "approve", pause)
    result = CliRunner().invoke(cli, [*pasted(then), "--max-steps", "5", "--approve", "default"])
    assert result.exit_code == 0, result.output
    # --approve default is what was recorded: nothing to say about it
    assert result.stderr == "using --max-steps 5 instead of the recorded 20\n"
    with Store(db) as store:
        s = store.session(store.node(pause).session_id)
        (start,) = [n for n in s.path("main") if n.kind == "tool_start"]
        assert start.payload["recipe"]["max_steps"] == 5


# -- worker, rerun ---------------------------------------------------------------------


def test_the_worker_continues_each_pause_with_its_own_recipe(db_target, journey, monkeypatch):
    monkeypatch.chdir(journey)
    first, _ = paused_run(db_target, journey)
    other = journey / "other"
    other.mkdir()
    (other / "mytools.py").write_text(TOOLS.format(extra="").replace("send_email", "send_fax"), "utf-8")
    (other / "replies.jsonl").write_text(
        json.dumps(EMAIL).replace("send_email", "send_fax") + "\n" + json.dumps(DONE) + "\n", "utf-8"
    )
    monkeypatch.chdir(other)
    second, _ = paused_run(db_target, other)
    changed = journey / "changed"
    changed.mkdir()
    (changed / "mytools.py").write_text(TOOLS.format(extra=""), "utf-8")
    (changed / "replies.jsonl").write_text((journey / "replies.jsonl").read_text(), "utf-8")
    monkeypatch.chdir(changed)
    third, _ = paused_run(db_target, changed)
    (changed / "mytools.py").write_text(TOOLS.format(extra=", cc: str = ''"), "utf-8")
    for pause in (first, second, third):
        cli_run(db_target, "approve", pause)
    monkeypatch.chdir("/")
    result = cli_run(db_target, "worker", "--until-idle")  # no flags at all
    assert sent(journey) == ["bob", "bob"]  # send_email from the first tools, send_fax from the other
    assert f"error: ToolChanged: pause {third}: the tool 'send_email'" in result.output  # reported, left
    with Store(db_target) as store:
        assert store.session(store.node(third).session_id).head("main").kind == "decision"  # still usable
        assert store.verify().ok


def test_rerun_from_a_point_runs_the_recorded_model_and_tools_again(journey, monkeypatch):
    monkeypatch.chdir(journey)
    db = str(journey / "x.db")
    pause, _ = paused_run(db, journey)
    with Store(db) as store:
        s = store.session(store.node(pause).session_id)
        (question,) = [n for n in s.path("main") if n.payload.get("role") == "user"]
    monkeypatch.chdir("/")
    out = cli_run(db, "rerun", question.id).stdout
    assert out.split("\n")[1].split() == ["again", "again", "paused"]
    with Store(db) as store:
        again = store.session(s.id).head("again")
        assert again.kind == "pause"
        assert again.payload["recipe"]["model"] == f"script:{journey / 'replies.jsonl'}"
        assert again.payload["recipe"]["tools"] == [str(journey / "mytools.py")]


# -- the inbox, and serve --work ----------------------------------------------------------


def test_the_inbox_says_what_happens_after_a_click(journey, monkeypatch, app_client):
    pytest.importorskip("starlette", reason="the web extra is not installed")
    from sessiontree.view.server import create_app

    monkeypatch.chdir(journey)
    db = str(journey / "x.db")
    first, _ = paused_run(db, journey)
    second, _ = paused_run(db, journey)
    idle = app_client(create_app(db, allow_decide=True, token="t"))
    said = idle.post(
        f"/api/pauses/{first}/decision",
        json={"decisions": {"call_e": {"action": "approve"}}},
        headers={"X-Sessiontree-Token": "t"},
    ).json()["next"]
    assert said == (
        f"approved; nothing runs until it is continued: sessiontree resume {first}"
        " (or keep a worker running: sessiontree worker)"
    )
    working = app_client(create_app(db, allow_decide=True, token="t", work=True))
    answer = working.post(
        f"/api/pauses/{second}/decision",
        json={"decisions": {"call_e": {"action": "reject", "reason": "no"}}},
        headers={"X-Sessiontree-Token": "t"},
    )
    assert answer.json()["next"] == "rejected; continuing"


def wait_for(condition, seconds: float = 30.0) -> None:
    """Until ``condition()`` holds: what a worker thread does is seen in the store."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the worker did not get there in time"
        time.sleep(0.05)


def test_serve_work_carries_an_inbox_decision_on(db_target, journey, monkeypatch, app_client):
    pytest.importorskip("starlette", reason="the web extra is not installed")
    from sessiontree.cli.view import start_worker
    from sessiontree.view.server import create_app

    monkeypatch.chdir(journey)
    pause, _ = paused_run(db_target, journey)
    monkeypatch.chdir("/")
    worker = start_worker(db_target, poll=0.1)
    try:
        c = app_client(create_app(db_target, allow_decide=True, token="t", work=True))
        answer = c.post(
            f"/api/pauses/{pause}/decision",
            json={"decisions": {"call_e": {"action": "approve"}}},
            headers={"X-Sessiontree-Token": "t"},
        )
        assert answer.json()["next"] == "approved; continuing"

        def finished() -> bool:
            with Store(db_target) as store:
                return (
                    store.session(store.node(pause).session_id).head("main").payload.get("content")
                    == "Emailed Bob."
                )

        wait_for(finished)
    finally:
        assert worker.stop(10)  # stopped cleanly: between pauses, within its wait slice
    assert sent(journey) == ["bob"]
    with Store(db_target) as store:
        assert store.verify().ok


@pytest.mark.slow  # a real server process
def test_serve_work_in_its_own_process(journey):
    import httpx

    db = journey / "x.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SESSIONTREE_", "OPENAI_"))}
    env.update(COUNTER=str(journey / "counter.txt"), PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1")
    sessiontree = str(Path(sys.executable).parent / "sessiontree")
    made = subprocess.run(
        [
            sessiontree,
            "--db",
            str(db),
            "run",
            "--new",
            "Email bob.",
            "--model",
            "script:replies.jsonl",
            "--tools",
            "mytools.py",
        ],
        env=env,
        cwd=journey,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 3, made.stderr
    pause = re.search(r" approve (\S+)", made.stdout)[1]
    with subprocess.Popen(
        [sessiontree, "--db", str(db), "serve", "--port", "0", "--allow-decide", "--work"],
        env=env,
        cwd="/",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as server:
        try:
            url = re.search(r"on (http://\S+/)", server.stdout.readline())[1]
            token = re.search(r"token (\S+):", server.stdout.readline())[1]
            assert server.stdout.readline() == "carrying decided pauses on (--work)\n"
            deadline = time.monotonic() + 20
            while True:  # it printed its address a moment before it listens
                try:
                    answer = httpx.post(
                        f"{url}api/pauses/{pause}/decision",
                        headers={"X-Sessiontree-Token": token},
                        json={"decisions": {"call_e": {"action": "approve"}}},
                        timeout=10,
                    )
                    break
                except httpx.ConnectError:
                    assert time.monotonic() < deadline
                    time.sleep(0.1)
            assert answer.json()["next"] == "approved; continuing"
            assert server.stdout.readline().startswith(f"resuming pause {pause}")
            assert server.stdout.readline() == "  running send_email [call_e]\n"
            assert server.stdout.readline() == "  ok send_email: sent to bob\n"
            assert server.stdout.readline() == "Emailed Bob.\n"
        finally:
            server.send_signal(signal.SIGINT)
            code = server.wait(30)
            rest = server.stderr.read()
    assert code == 128 + signal.SIGINT, rest  # a requested stop, as the worker's
    assert rest.endswith("serve stopped (SIGINT)\n")
    assert sent(journey) == ["bob"]
    with Store(db) as store:
        assert store.verify().ok


def test_a_call_object_tells_its_recipe_and_what_json_cannot_hold_is_left_out(any_store):
    class Odd:
        provider, base_url, model, stream = "openai-compatible", "http://127.0.0.1:1/v1", "m", False
        params = {"temperature": 0.5, "client": object()}

        def __call__(self, messages, tools):
            return reply(None, tool_call("refund", {"order": "1"}, id="r1"))

    @tool(idempotent=False)
    def refund(order: str) -> str:
        return order

    s = any_store.create_session("odd")
    s.append({"role": "user", "content": "refund 1"})
    (*_, final) = run(any_store, s, call=Odd(), tools=[refund])
    recipe = Recipe.from_dict(final.node.payload["recipe"])
    assert (recipe.provider, recipe.base_url, recipe.model, recipe.stream) == (
        "openai-compatible",
        "http://127.0.0.1:1/v1",
        "m",
        False,
    )
    assert recipe.params == {"temperature": 0.5} and recipe.left_out == ("client",)
    assert recipe.tools == ()  # defined in a test function: no importable name
    assert recipe.missing() == ("tools",)


def test_serve_without_work_names_the_commands_with_its_db(journey, monkeypatch, app_client):
    uvicorn = pytest.importorskip("uvicorn", reason="the web extra is not installed")
    monkeypatch.chdir(journey)
    db = str(journey / "x.db")
    pause, then = paused_run(db, journey)
    apps = []

    def run(server, sockets):  # the app serve built, and its socket closed
        apps.append(server.config.app)
        for sock in sockets:
            sock.close()

    monkeypatch.setattr(uvicorn.Server, "run", run)
    result = CliRunner().invoke(cli, ["--db", db, "serve", "--port", "0", "--allow-decide"])
    assert result.exit_code == 0, result.output
    token = re.search(r"token (\S+):", result.output)[1]
    answer = app_client(apps[0]).post(
        f"/api/pauses/{pause}/decision",
        json={"decisions": {"call_e": {"action": "approve"}}},
        headers={"X-Sessiontree-Token": token},
    )
    resume = then.removeprefix("then resume: ")
    assert answer.json()["next"] == (
        f"approved; nothing runs until it is continued: {resume}"
        f" (or keep a worker running: sessiontree --db {db} worker)"
    )
    assert CliRunner().invoke(cli, shlex.split(resume)[1:]).exit_code == 0  # as the page says
    assert sent(journey) == ["bob"]


def test_the_runs_limits_and_parallel_tools_are_recorded_and_continued(journey, monkeypatch):
    from sessiontree.cli.running import run_options
    from sessiontree.limits import Limits

    @tool(idempotent=False)
    def refund(order: str) -> str:
        return order

    with Store(journey / "x.db") as store:
        s = store.create_session("limits")
        s.append({"role": "user", "content": "refund 1"})
        model = ScriptedModel([reply(None, tool_call("refund", {"order": "1"}, id="r1"))])
        (*_, final) = run(store, s, call=model, tools=[refund], limits=Limits(tokens=5000), parallel_tools=2)
    recipe = Recipe.from_dict(final.node.payload["recipe"])
    assert recipe.limits == {"tokens": 5000, "seconds": None, "cost": None, "prices": None, "repeats": None}
    assert recipe.parallel_tools == 2
    options = run_options(
        recipe.replace(model=f"script:{journey / 'replies.jsonl'}", provider="script"), recorded=True
    )
    assert options["limits"] == Limits(tokens=5000) and options["parallel_tools"] == 2


def test_a_provider_spelling_is_recorded_and_builds_the_same_adapter_again(monkeypatch):
    from sessiontree.cli.running import make_call, recipe_from_flags, run_options
    from sessiontree.recipe import from_call

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-recipe-secret")
    flags = {"base_url": None, "model": "anthropic/claude-x", "api_key_env": "OPENAI_API_KEY", "params": ()}
    call = make_call(None, "anthropic/claude-x", "OPENAI_API_KEY", True, ())
    recipe = recipe_from_flags(flags, call)
    # --api-key-env left at its default: the variable read is the provider's usual one
    assert (recipe.provider, recipe.model, recipe.api_key_env) == (
        "anthropic",
        "anthropic/claude-x",
        "ANTHROPIC_API_KEY",
    )
    again = run_options(recipe, recorded=True)["call"]
    assert (type(again), again.model, again.base_url) == (type(call), "claude-x", call.base_url)
    assert from_call(call).model == "anthropic/claude-x"  # the library's derived recipe spells it so too
    assert "sk-ant-recipe-secret" not in json.dumps(recipe.to_dict())


def test_an_mcp_tools_hints_are_part_of_its_hash_and_its_server_is_one_reference():
    from sessiontree.recipe import _reference, schema_hash
    from sessiontree.tools import Tool

    def make(hints):
        t = Tool.from_schema("git_commit", "Commit.", {"type": "object", "properties": {}}, lambda **kw: "ok")
        t.source, t.annotations = "mcp:mcp-server-git --repository /r", hints  # type: ignore[attr-defined]
        return t

    safe, unsafe = make({"readOnlyHint": True}), make({"readOnlyHint": False, "destructiveHint": True})
    assert schema_hash(safe) != schema_hash(unsafe)  # a server whose hints changed is asked about again
    assert _reference(safe) == _reference(unsafe) == "mcp:mcp-server-git --repository /r"
