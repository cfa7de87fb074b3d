"""`sessiontree run`, `approve` and `resume` against a real OpenAI-compatible server (fakellm)."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from sessiontree import Store
from sessiontree.cli import cli

import servers
from test_cli import normalise

FLOWS = str(Path(__file__).parent / "flows.py")
EXPECTED_RUN = """\
session <id> branch main
assistant -> get_weather({"city": "Paris"})
  running get_weather [call_<id>]
  ok get_weather: Sunny in Paris, 21C
assistant -> send_email({"to": "bob@example.com", "body": "Sunny, 21C"})
paused: --approve unsafe: send_email needs a human
  call call_<id>: send_email({"to": "bob@example.com", "body": "Sunny, 21C"})
decide with: sessiontree approve <id>  (or: sessiontree reject <id> --reason ...)
then resume: sessiontree resume <id>"""


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "plain"])
def test_run_pauses_then_approve_and_resume(agent_fakellm, tmp_path, monkeypatch, stream):
    monkeypatch.setenv("SESSIONTREE_BASE_URL", agent_fakellm.url + "/v1")
    monkeypatch.setenv("SESSIONTREE_MODEL", "gpt-4o-mini")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-cli-secret")
    db = str(tmp_path / "run.db")
    runner = CliRunner()
    extra = [] if stream else ["--no-stream"]
    prompt = f"What is the weather in Paris? Email bob. ({uuid.uuid4().hex})"
    result = runner.invoke(cli, ["--db", db, "run", prompt, "--tools", FLOWS, *extra])
    assert result.exit_code == 0, result.output
    assert normalise(re.sub(r"call_[0-9a-f]+", "call_<id>", result.output)) == EXPECTED_RUN
    pause = re.search(r"sessiontree approve (\S+)", result.output)[1]

    result = runner.invoke(cli, ["--db", db, "approve", pause[:20], "--by", "me"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(cli, ["--db", db, "resume", pause, "--tools", FLOWS, *extra])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1].endswith("Emailed bob: sunny in Paris.")
    assert "ok send_email: sent to bob@example.com" in result.output

    with Store(db) as store:
        (info,) = store.sessions()
        s = store.session(info.id)
        assert s.messages()[-1]["content"] == "Emailed bob: sunny in Paris."
        assert store.verify().ok
    raw = Path(db).read_bytes() + (Path(db + "-wal").read_bytes() if Path(db + "-wal").exists() else b"")
    assert b"sk-cli-secret" not in raw


def test_run_needs_an_endpoint(tmp_path, monkeypatch):
    monkeypatch.delenv("SESSIONTREE_BASE_URL", raising=False)
    monkeypatch.delenv("SESSIONTREE_MODEL", raising=False)
    result = CliRunner().invoke(cli, ["--db", str(tmp_path / "x.db"), "run", "hi"])
    assert result.exit_code == 2
    assert "Error: give --base-url and --model" in result.output


def test_run_reports_a_model_error_and_exits_1(tmp_path):
    result = CliRunner().invoke(
        cli,
        [
            "--db",
            str(tmp_path / "x.db"),
            "run",
            "hi",
            "--base-url",
            f"http://127.0.0.1:{servers.free_port()}/v1",
            "-m",
            "m",
            "--no-stream",
            "-o",
            "max_retries",
            "0",
        ],
    )
    assert result.exit_code == 1
    assert "error: ProviderError" in result.output
