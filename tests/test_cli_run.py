"""`sessiontree run`, `approve` and `resume` against a real OpenAI-compatible server (fakellm)."""

from __future__ import annotations

import functools
import json
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
paused: send_email requires approval
  call call_<id>: send_email({"to": "bob@example.com", "body": "Sunny, 21C"})
decide with: sessiontree --db <tmp>/run.db approve <id>  (or: sessiontree --db <tmp>/run.db reject <id> --reason ...)
then resume: sessiontree --db <tmp>/run.db resume <id>"""


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
    assert result.exit_code == 3, result.output  # paused: waiting for a human
    assert normalise(re.sub(r"call_[0-9a-f]+", "call_<id>", result.output), tmp_path) == EXPECTED_RUN
    pause = re.search(r" approve (\S+)", result.output)[1]

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


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("api_key", "the key is read from the variable --api-key-env names"),
        ("timeout", "it is a setting of the adapter (openai_compatible in Python)"),
        ("headers", "it is a setting of the adapter (openai_compatible in Python)"),
    ],
)
def test_run_refuses_an_adapter_setting_as_a_request_parameter(tmp_path, key, why):
    args = ["--db", str(tmp_path / "x.db"), "run", "hi", "--base-url", "http://127.0.0.1:9/v1", "-m", "m"]
    result = CliRunner().invoke(cli, [*args, "-o", key, "1"])
    assert result.exit_code == 2
    assert (
        result.output.splitlines()[-1]
        == f"Error: Invalid value for -o: {key!r} is not a request parameter: {why}"
    )


def test_run_refuses_a_key_with_a_carriage_return_without_showing_it(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-cli-secret-key\r")
    args = ["--db", str(tmp_path / "x.db"), "run", "hi", "--base-url", "http://127.0.0.1:9/v1", "-m", "m"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        "Error: $OPENAI_API_KEY: the API key contains a control character (U+000D) at position 17; "
        "a key read from a file or variable often has a trailing newline or carriage return: strip it"
    ]
    assert "sk-cli" not in result.output


def test_run_reports_a_model_error_and_exits_1(tmp_path, monkeypatch):
    from sessiontree import providers
    from sessiontree.providers import naming

    # max_retries is the adapter's setting, not a request parameter (-o refuses it): no retries
    # here. Patched where --model is turned into a call (it retried for 4.6 s, over the slow limit).
    monkeypatch.setattr(
        naming, "openai_compatible", functools.partial(providers.openai_compatible, max_retries=0)
    )
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
        ],
    )
    assert result.exit_code == 1
    assert "error: ProviderError" in result.output
    assert (tmp_path / "x.db").exists()  # a failed run keeps the prompt it stored


@pytest.fixture
def endpoint(agent_fakellm, monkeypatch):
    monkeypatch.setenv("SESSIONTREE_BASE_URL", agent_fakellm.url + "/v1")
    monkeypatch.setenv("SESSIONTREE_MODEL", "gpt-4o-mini")


def cli_run(db, *args, code=0):
    result = CliRunner().invoke(cli, ["--db", str(db), *args])
    assert result.exit_code == code, result.output
    return result


def json_lines(text: str) -> list[dict]:
    """Each line one JSON object; ids (nodes, sessions, tool calls) replaced by placeholders."""
    steps = [json.loads(line) for line in text.splitlines()]
    ids: dict[str, str] = {}

    def placeholder(value):
        if isinstance(value, dict):
            return {
                k: placeholder(v)
                if k not in ("node", "session", "id")
                else ids.setdefault(v, f"<{k}{len(ids)}>")
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [placeholder(v) for v in value]
        return value

    return [placeholder(s) for s in steps]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "plain"])
def test_run_and_resume_print_json_lines(endpoint, tmp_path, stream):
    db = tmp_path / "run.db"
    extra = [] if stream else ["--no-stream"]
    prompt = f"What is the weather in Paris? Email bob. ({uuid.uuid4().hex})"
    result = cli_run(db, "run", prompt, "--tools", FLOWS, "--json", *extra, code=3)
    assert result.stderr.startswith("session ")  # the note is not on stdout
    assert json_lines(result.stdout) == [
        {
            "step": "assistant",
            "node": "<node0>",
            "content": None,
            "tool_calls": [{"id": "<id1>", "name": "get_weather", "arguments": '{"city": "Paris"}'}],
        },
        {
            "step": "tool_start",
            "node": "<node2>",
            "call": {"id": "<id1>", "name": "get_weather", "arguments": '{"city": "Paris"}'},
        },
        {
            "step": "tool_end",
            "node": "<node3>",
            "call": {"id": "<id1>", "name": "get_weather", "arguments": '{"city": "Paris"}'},
            "ok": True,
            "content": "Sunny in Paris, 21C",
        },
        {
            "step": "assistant",
            "node": "<node4>",
            "content": None,
            "tool_calls": [
                {
                    "id": "<id5>",
                    "name": "send_email",
                    "arguments": '{"to": "bob@example.com", "body": "Sunny, 21C"}',
                }
            ],
        },
        {
            "step": "paused",
            "node": "<node6>",
            "reason": "send_email requires approval",
            "calls": [
                {
                    "id": "<id5>",
                    "name": "send_email",
                    "arguments": '{"to": "bob@example.com", "body": "Sunny, 21C"}',
                    "reason": "send_email requires approval",
                }
            ],
            "state": "pending",
            "expires_at": None,
        },
        {
            "step": "final",
            "node": "<node6>",
            "reason": "paused",
            "error": None,
            "session": "<session7>",
            "branch": "main",
        },
    ]
    pause = json.loads(result.stdout.splitlines()[-1])["node"]
    decision = json.loads(cli_run(db, "approve", pause, "--json").stdout)
    assert decision["kind"] == "decision" and decision["parent_id"] == pause
    assert decision["payload"]["decisions"] == {
        json.loads(result.stdout.splitlines()[3])["tool_calls"][0]["id"]: {"action": "approve"}
    }

    result = cli_run(db, "resume", pause, "--tools", FLOWS, "--json", *extra)
    assert result.stderr == ""
    steps = json_lines(result.stdout)
    tokens = [s.pop("text") for s in steps if s["step"] == "token"]
    assert bool(tokens) == stream
    steps = [s for s in steps if s["step"] != "token"]
    assert steps == [
        {
            "step": "tool_start",
            "node": "<node0>",
            "call": {
                "id": "<id1>",
                "name": "send_email",
                "arguments": '{"to": "bob@example.com", "body": "Sunny, 21C"}',
            },
        },
        {
            "step": "tool_end",
            "node": "<node2>",
            "call": {
                "id": "<id1>",
                "name": "send_email",
                "arguments": '{"to": "bob@example.com", "body": "Sunny, 21C"}',
            },
            "ok": True,
            "content": "sent to bob@example.com",
        },
        {"step": "assistant", "node": "<node3>", "content": "Emailed bob: sunny in Paris.", "tool_calls": []},
        {
            "step": "final",
            "node": "<node3>",
            "reason": "completed",
            "error": None,
            "session": "<session4>",
            "branch": "main",
        },
    ]
    if stream:
        assert "".join(tokens) == "Emailed bob: sunny in Paris."


def test_approve_policies(endpoint, tmp_path):
    prompt = f"What is the weather in Paris? Email bob. ({uuid.uuid4().hex})"
    result = cli_run(
        tmp_path / "all.db", "run", prompt, "--tools", FLOWS, "--approve", "all", "--no-stream", code=3
    )
    assert "paused: --approve all: get_weather needs a human" in result.stdout
    result = cli_run(
        tmp_path / "none.db", "run", prompt, "--tools", FLOWS, "--approve", "none", "--no-stream"
    )
    assert "paused" not in result.stdout
    assert "ok send_email: sent to bob@example.com" in result.stdout
    assert result.stdout.endswith("assistant: Emailed bob: sunny in Paris.\n")
    result = cli_run(tmp_path / "x.db", "run", "hi", "--approve", "unsafe", code=2)
    assert "'unsafe' is not one of 'default', 'all', 'none'" in result.output


def test_run_continues_the_latest_session_unless_new(endpoint, tmp_path):
    db = tmp_path / "s.db"
    tag = uuid.uuid4().hex
    first = cli_run(db, "run", f"first {tag}", "--system", "Be brief.", "--no-stream")
    assert first.stdout.startswith("assistant: [mock response for gpt-4o-mini")  # fakellm's fallback
    session = re.match(r"session (\S+) branch main", first.stderr)[1]
    again = cli_run(db, "run", f"again {tag}", "--no-stream")
    assert again.stderr == f"session {session} branch main\n"
    other = cli_run(db, "run", "--new", f"other {tag}", "--no-stream")
    assert session not in other.stderr
    cli_run(db, "run", "-s", session[:13], f"third {tag}", "--no-stream")
    with Store(db) as store:
        assert [m["role"] for m in store.session(session).messages()] == ["system"] + [
            "user",
            "assistant",
        ] * 3
        assert len(store.sessions()) == 2
    for args, message in [
        (["--system", "x", "hi"], "Error: --system only applies to a new session (add --new)\n"),
        (["--new", "-s", session, "hi"], "Error: give -s SESSION or --new, not both\n"),
        (["--new"], "Error: give a PROMPT to start a new session\n"),
        (["-b", "typo", "hi"], f"Error: no branch 'typo' in session {session}\n"),
    ]:
        assert cli_run(db, "run", *args, code=1).output == message


def test_run_with_a_context_budget_compacts_and_keeps_every_original(agent_fakellm, tmp_path, monkeypatch):
    monkeypatch.setenv("SESSIONTREE_BASE_URL", agent_fakellm.url + "/v1")
    monkeypatch.setenv("SESSIONTREE_MODEL", "gpt-4o-mini")
    db = str(tmp_path / "budget.db")
    runner = CliRunner()
    with Store(db) as store:
        s = store.create_session("long")
        for i in range(6):
            s.append({"role": "user", "content": f"note {i}: " + "words " * 40})
            s.append({"role": "assistant", "content": f"noted {i}"})
        s.append({"role": "user", "content": f"Say hello. ({uuid.uuid4().hex})"})
    args = ["--db", db, "run", "-s", s.id, "--context-budget", "100", "--keep-last", "1", "--no-stream"]
    result = runner.invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["step"] for line in lines] == ["compacted", "assistant", "final"]
    with Store(db) as store:
        s = store.session(s.id)
        path = s.path("main")
        assert [n.kind for n in path].count("summary") == 1 and len(path) == 15
        summary = next(n for n in path if n.kind == "summary")
        assert lines[0]["node"] == summary.id and lines[0]["covers"]["nodes"] == 12
        assert summary.payload["covers"] == {"first": path[0].id, "last": path[11].id, "nodes": 12}
        assert store.run(summary.run_id).model  # the model wrote it: its run is recorded
        assert s.messages()[0]["content"] == summary.payload["summary"]
        assert store.verify().ok
