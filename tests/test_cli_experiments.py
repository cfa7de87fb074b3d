"""`sessiontree replay`, `rerun` and `compare`."""

from __future__ import annotations

import json
import re
import textwrap
import uuid

import pytest
from click.testing import CliRunner

from sessiontree import Store
from sessiontree.cli import cli

from test_cli import normalise


@pytest.fixture
def demo_db(tmp_path):
    db = tmp_path / "x.db"
    assert CliRunner().invoke(cli, ["--db", str(db), "demo"]).exit_code == 0
    return db


def invoke(db, *args, code=0):
    result = CliRunner().invoke(cli, ["--db", str(db), *args])
    assert result.exit_code == code, result.output
    return result


def test_replay_matches_then_diverges_with_live_tools(demo_db, tmp_path):
    assert invoke(demo_db, "replay", "main").stdout == (
        "replayed main into main-replay: all 5 message(s) matched (completed)\n"
    )
    tools = tmp_path / "changed_tools.py"
    tools.write_text(
        textwrap.dedent('''\
        from sessiontree import tool

        @tool
        def get_weather(city: str) -> str:
            """Changed."""
            return f"Snow in {city}"

        @tool(idempotent=False)
        def send_email(to: str, subject: str, body: str) -> str:
            """Send."""
            return "sent"
        ''')
    )
    result = invoke(
        demo_db, "replay", "main", "--tool-results", "live", "--tools", str(tools), "--into", "snowy", code=1
    )
    assert result.stdout == (
        "replayed main into snowy: diverged at message 2 of 5\n"
        '  expected: ["tool", "call_weather", "Sunny in Paris, 21C, light wind"]\n'
        '  actual:   ["tool", "call_weather", "Snow in Paris"]\n'
    )
    data = json.loads(invoke(demo_db, "replay", "main", "--json").stdout)
    assert data["matched"] and data["branch"] == "main-replay-2"
    bad = invoke(demo_db, "replay", "main", "--tools", str(tools), code=1)
    assert bad.output == "Error: --tools only applies with --tool-results live\n"
    bad = invoke(demo_db, "replay", "main", "--tools-module", str(tools), code=2)
    assert "No such option '--tools-module'" in bad.output


def test_compare_table_and_diff(demo_db):
    out = invoke(demo_db, "compare", "main", "experiment", "--price", "scripted-a=1,2").stdout
    lines = normalise(out).splitlines()
    assert lines[0] == "BRANCH  STATUS  STEPS  TOOLS  IN  OUT  MS  COST  FINAL"
    assert re.match(
        r"main  completed  2  1  58  14  \d+  0\.000086  Done: Bob has the Paris forecast", lines[1]
    )
    assert re.match(r"experiment  completed  1  0  23  12  \d+  -  Paris: sunny, 21C\.", lines[2])
    assert lines[4] == "common ancestor: <id> tool: [call_weather] Sunny in Paris, 21C, light wind"
    assert lines[5] == "--- main: 6 node(s)" and lines[-2] == "+++ experiment: 1 node(s)"
    data = json.loads(invoke(demo_db, "compare", "main", "experiment", "--json").stdout)
    assert [b["branch"] for b in data["branches"]] == ["main", "experiment"]
    assert data["branches"][0]["usage"]["by_model"]["scripted-a"]["calls"] == 2
    bad = invoke(demo_db, "compare", "main", "--price", "nonsense", code=2)
    assert "expected MODEL=INPUT,OUTPUT" in bad.output


def test_rerun_variants_against_a_real_server(agent_fakellm, tmp_path, monkeypatch):
    monkeypatch.setenv("SESSIONTREE_BASE_URL", agent_fakellm.url + "/v1")
    db = tmp_path / "r.db"
    with Store(db) as store:
        s = store.create_session("rerun")
        s.append({"role": "user", "content": f"Say hi ({uuid.uuid4().hex})"})
        s.checkpoint("start", at="main")
    result = invoke(
        db,
        "rerun",
        "start",
        "-s",
        s.id,
        "--variant",
        "cold=gpt-4o-mini:temperature=0",
        "--variant",
        "warm=gpt-4o-mini:temperature=1,system=Be warm.",
        "-n",
        "2",
        "--concurrency",
        "2",
    )
    assert normalise(result.stdout) == textwrap.dedent("""\
        BRANCH  VARIANT  RESULT  ERROR
        cold-1  cold  completed
        cold-2  cold  completed
        warm-1  warm  completed
        warm-2  warm  completed""")
    with Store(db) as store:
        s = store.session(s.id)
        warm = s.branch("warm-2")
        assert warm.metadata["system"] == "Be warm." and warm.metadata["params"] == {"temperature": 1}
        assert store.run(s.head("cold-1").run_id).params == {"temperature": 0}
        assert s.messages("main") == s.messages("start")  # the start is untouched
    bad = invoke(db, "rerun", "start", "--variant", "nomodel", code=2)
    assert "expected NAME=MODEL" in bad.output
    # the variants name the models and reruns never stream: no --model, no --no-stream
    for option in ("--model", "--no-stream"):
        bad = invoke(db, "rerun", "start", "--variant", "a=m", option, code=2)
        assert f"No such option '{option}'" in bad.output


def test_rerun_needs_a_base_url(tmp_path, monkeypatch):
    # (A base URL the run at AT recorded would do: tests/test_recipe.py.)
    monkeypatch.delenv("SESSIONTREE_BASE_URL", raising=False)
    with Store(tmp_path / "x.db") as store:
        store.create_session("no recipe").append({"role": "user", "content": "hi"})
    bad = invoke(tmp_path / "x.db", "rerun", "main", "--variant", "a=m", code=2)
    assert "Error: give --base-url (or SESSIONTREE_BASE_URL)" in bad.output
