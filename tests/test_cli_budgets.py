"""The budgets and parallel tools from the command line: `run --max-tokens-total`,
`--max-seconds`, `--max-cost --price`, `--max-repeats` and `--parallel-tools` end a run
with the budget's own reason (a `note` on the branch, exit 4, one line naming the flag);
the recipe records them, `resume`/`worker`/`rerun` keep them with no flags, and a flag
given replaces its item and says so."""

from __future__ import annotations

import json
import sys

import pytest
from click.testing import CliRunner, Result

from sessiontree import Store
from sessiontree import limits as limits_module
from sessiontree.cli import cli

TOOLS = '''\
import threading

from sessiontree import tool

# Passes only when all three calls of a batch wait on it at once; run one after another,
# the first gives up after the timeout and breaks it for the others.
together = threading.Barrier(3, timeout=3)


@tool
def look(name: str) -> str:
    """Look for a file."""
    return "not found"


@tool
def fetch(page: int) -> str:
    """Fetch a page (all three at once)."""
    together.wait()
    return f"page {page}"


@tool(idempotent=False)
def send(to: str) -> str:
    """Send a message (asks first)."""
    return f"sent to {to}"
'''


def call(name: str, arguments: dict, id: str | None = None) -> dict:
    found: dict = {"function": {"name": name, "arguments": arguments}}
    return {**found, "id": id} if id else found


LOOK = {"content": None, "tool_calls": [call("look", {"name": "a.txt"})]}
SEND = {"content": None, "tool_calls": [call("send", {"to": "bob"})]}
DONE = {"content": "Gave up."}


@pytest.fixture
def here(tmp_path, monkeypatch):
    """A directory with the tools file and scripts, as the current directory."""
    for name in ("SESSIONTREE_BASE_URL", "SESSIONTREE_MODEL", "SESSIONTREE_DB"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tools.py").write_text(TOOLS, "utf-8")
    script(tmp_path / "loop.jsonl", *[LOOK] * 5, DONE)
    script(tmp_path / "send.jsonl", SEND, LOOK, LOOK, DONE)
    pages = {"content": None, "tool_calls": [call("fetch", {"page": n}, f"p{n}") for n in (1, 2, 3)]}
    script(tmp_path / "pages.jsonl", pages, {"content": "Fetched."})
    return tmp_path


def script(path, *replies: dict) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in replies), "utf-8")


def invoke(db: str, *args: str, code: int = 0) -> Result:
    result = CliRunner().invoke(cli, ["--db", db, *args])
    assert result.exit_code == code, result.output
    return result


def run_loop(db: str, *flags: str, code: int = 4) -> Result:
    return invoke(
        db, "run", "--new", "Find a.txt", "--model", "script:loop.jsonl", "--tools", "tools.py",
        "--no-stream", *flags, code=code,
    )  # fmt: skip


def looked(n: int) -> str:
    return f'assistant -> look({{"name": "a.txt"}})\n  running look [call_{n}_1]\n  ok look: not found\n'


@pytest.mark.parametrize(
    "flags, reason, line, looks",
    [
        (
            ["--max-tokens-total", "10"],
            "token_budget",
            "stopped: token_budget (--max-tokens-total): this run used 12 tokens of its budget of 10",
            3,
        ),
        (
            ["--max-cost", "0.00001", "--price", "loop.jsonl=1,2"],
            "cost_budget",
            "stopped: cost_budget (--max-cost): this run cost $0.000012 of its budget of $1e-05",
            3,
        ),
        (
            ["--max-cost", "1", "--price", "other=1,2"],
            "cost_budget",
            "stopped: cost_budget (--max-cost): no price for model loop.jsonl, so the cost budget"
            " of $1 cannot be kept",
            1,
        ),
        (
            ["--max-seconds", "2.5"],  # the clock below moves 1 s at each look at it
            "time_budget",
            "stopped: time_budget (--max-seconds): this run took 3.0 s of its budget of 2.5 s",
            1,
        ),
    ],
)
def test_each_budget_stops_the_run_with_its_reason_a_note_and_exit_4(
    here, monkeypatch, flags, reason, line, looks
):
    ticks = iter(range(1000))
    monkeypatch.setattr(limits_module, "_clock", lambda: float(next(ticks)))
    db = str(here / "x.db")
    result = run_loop(db, *flags)
    assert result.stdout == "".join(looked(n) for n in range(1, looks + 1)) + line + "\n"
    with Store(db) as store:
        (info,) = store.sessions()
        s = store.session(info.id)
        note = s.path("main")[-1]
        assert note.kind == "note"
        assert note.payload["type"] == "limit"
        assert note.payload["limit"] == reason
        assert line.endswith(note.payload["message"])


def test_max_repeats_stops_a_model_stuck_in_a_loop_before_the_call_runs_again(here):
    db = str(here / "x.db")
    result = run_loop(db, "--max-repeats", "2")
    assert result.stdout == (
        looked(1)
        + looked(2)
        + 'assistant -> look({"name": "a.txt"})\n'
        + "stopped: repeated_calls (--max-repeats): the model asked for the same call(s) to look"
        " 3 times in a row (at most 2 allowed)\n"
    )
    as_json = run_loop(db, "--max-repeats", "2", "--json").stdout.splitlines()
    final = json.loads(as_json[-1])
    assert (final["step"], final["reason"]) == ("final", "repeated_calls")
    assert final["error"].startswith("the model asked for the same call(s) to look 3 times")


def test_the_recipe_records_the_budgets_and_parallel_tools(here):
    db = str(here / "x.db")
    run_loop(
        db, "--max-repeats", "2", "--max-cost", "5", "--price", "loop.jsonl=1,2", "--parallel-tools", "2"
    )
    with Store(db) as store:
        (info,) = store.sessions()
        s = store.session(info.id)
        starts = [n for n in s.path("main") if n.kind == "tool_start"]
        recipe = starts[-1].payload["recipe"]
    assert recipe["limits"] == {
        "tokens": None,
        "seconds": None,
        "cost": 5.0,
        "prices": {"loop.jsonl": {"input": 1.0, "output": 2.0}},
        "repeats": 2,
    }
    assert recipe["parallel_tools"] == 2


def paused(db: str, *flags: str) -> str:
    """A run of send.jsonl that pauses before `send`, approved; the pause's id."""
    result = invoke(
        db, "run", "--new", "Send bob the file.", "--model", "script:send.jsonl", "--tools", "tools.py",
        "--no-stream", *flags, code=3,
    )  # fmt: skip
    (line,) = [x for x in result.stdout.splitlines() if x.startswith("then resume: ")]
    pause = line.split()[-1]
    invoke(db, "approve", pause)
    return pause


def test_resume_with_no_flags_keeps_the_recorded_budget(db_target, here):
    pause = paused(db_target, "--max-tokens-total", "1")
    result = invoke(db_target, "resume", pause, code=4)
    assert result.stderr == ""
    assert result.stdout.splitlines()[-1] == (
        "stopped: token_budget (--max-tokens-total): this run used 7 tokens of its budget of 1"
    )
    with Store(db_target) as store:
        assert store.node(pause).session_id
        s = store.session(store.node(pause).session_id)
        assert [n.payload.get("limit") for n in s.path("main") if n.kind == "note"] == ["token_budget"]


def test_a_budget_flag_given_replaces_its_item_and_says_so(here):
    db = str(here / "x.db")
    pause = paused(db, "--max-tokens-total", "1", "--max-repeats", "5")
    result = invoke(db, "resume", pause, "--max-tokens-total", "1000", "--max-seconds", "600")
    assert result.stderr == (
        "using --max-tokens-total 1000 instead of the recorded 1\n"
        "using --max-seconds 600 instead of the recorded none\n"
    )
    assert result.stdout.splitlines()[-1] == "assistant: Gave up."
    with Store(db) as store:
        s = store.session(store.node(pause).session_id)
        (*_, start) = [n for n in s.path("main") if n.kind == "tool_start"]
    # the items not given are kept: the recorded --max-repeats 5
    assert start.payload["recipe"]["limits"] == {
        "tokens": 1000,
        "seconds": 600.0,
        "cost": None,
        "prices": None,
        "repeats": 5,
    }


def test_the_worker_keeps_each_pause_s_budget_and_a_flag_replaces_it(db_target, here):
    first = paused(db_target, "--max-tokens-total", "1")
    result = invoke(db_target, "worker", "--until-idle", code=0)
    assert "stopped: token_budget (--max-tokens-total): this run used 7 tokens of its budget of 1" in (
        result.stdout.splitlines()
    )
    second = paused(db_target, "--max-tokens-total", "1")
    result = invoke(db_target, "worker", "--until-idle", "--max-tokens-total", "1000")
    assert result.stderr == "using --max-tokens-total 1000 instead of the recorded 1\n"
    assert "assistant: Gave up." in result.stdout.splitlines()
    with Store(db_target) as store:
        notes = {
            pause: [n.payload["limit"] for n in store.session(store.node(pause).session_id).path("main")
                    if n.kind == "note"]
            for pause in (first, second)
        }  # fmt: skip
    assert notes == {first: ["token_budget"], second: []}


def test_rerun_keeps_the_recorded_budget_and_a_flag_replaces_it(here):
    db = str(here / "x.db")
    run_loop(db, "--max-repeats", "2")
    with Store(db) as store:
        (info,) = store.sessions()
        s = store.session(info.id)
        (asked,) = [n.id for n in s.path("main") if n.payload.get("role") == "user"]
    again = json.loads(invoke(db, "rerun", asked, "--json").stdout)
    assert [(r["branch"], r["reason"]) for r in again] == [("again", "repeated_calls")]
    wider = CliRunner().invoke(
        cli, ["--db", db, "rerun", asked, "--prefix", "wide-", "--max-repeats", "9", "--json"]
    )
    assert wider.exit_code == 0, wider.output
    assert wider.stderr.startswith("using --max-repeats 9 instead of the recorded 2\n")  # then progress
    assert [(r["branch"], r["reason"]) for r in json.loads(wider.stdout)] == [("wide-again", "completed")]


FETCHED = (
    'assistant -> fetch({"page": 1}), fetch({"page": 2}), fetch({"page": 3})\n'
    "  running fetch [p1]\n"
    "  running fetch [p2]\n"
    "  running fetch [p3]\n"
)


@pytest.mark.slow  # the tools sleep to show they overlap: 3 s
def test_the_calls_of_a_batch_run_at_once_unless_parallel_tools_is_1(here):
    db = str(here / "x.db")
    pages = ("run", "--new", "Fetch pages 1 to 3.", "--model", "script:pages.jsonl", "--tools", "tools.py")
    together = invoke(db, *pages, "--no-stream")
    assert together.stdout == (
        FETCHED + "  ok fetch: page 1\n  ok fetch: page 2\n  ok fetch: page 3\n" + "assistant: Fetched.\n"
    )
    # one after another, the first call waits at the barrier alone until it gives up
    in_turn = invoke(db, *pages, "--no-stream", "--parallel-tools", "1")
    results = [x for x in in_turn.stdout.splitlines() if x.startswith("  ok") or x.startswith("  failed")]
    assert [x.split(":")[0] for x in results] == ["  failed fetch"] * 3
