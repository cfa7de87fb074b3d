"""One way to name a model: ``PROVIDER/MODEL`` in the library, ``run``/``resume`` and
``rerun --variant``, and the tutorial of docs/providers.md run against llmock."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from sessiontree import Store
from sessiontree.cli import cli
from sessiontree.providers import Anthropic, OpenAICompatible, OpenAIResponses, model
from sessiontree.providers.naming import parse
from sessiontree.providers.script import ScriptModel

from hostile_server import HostileServer

try:
    from tests import servers
except ImportError:  # tests/ is not a package: pytest put it on sys.path
    import servers  # type: ignore[no-redef]

DOCS = Path(__file__).resolve().parent.parent / "docs" / "providers.md"


@pytest.fixture(autouse=True)
def no_env(monkeypatch):
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "SESSIONTREE_BASE_URL", "SESSIONTREE_MODEL"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("anthropic/claude-sonnet-4-5", ("anthropic", "claude-sonnet-4-5", True)),
        ("responses/gpt-5", ("responses", "gpt-5", True)),
        ("openai/gpt-4o-mini", ("openai", "gpt-4o-mini", True)),
        ("gpt-4o-mini", ("openai", "gpt-4o-mini", False)),
        ("llama3.2:3b", ("openai", "llama3.2:3b", False)),
        # an unknown prefix is part of the model's name, as on vLLM, Together or Hugging Face
        ("meta-llama/Llama-3.3-70B-Instruct", ("openai", "meta-llama/Llama-3.3-70B-Instruct", False)),
        # OpenRouter names models by their maker: openai/ takes the rest as it is
        ("openai/anthropic/claude-sonnet-4.5", ("openai", "anthropic/claude-sonnet-4.5", True)),
        ("script:replies.jsonl", ("script", "replies.jsonl", True)),
    ],
)
def test_a_model_name_says_its_provider(name, parsed):
    assert parse(name) == parsed


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("", "a model name is needed"),
        ("anthropic/", "names the provider anthropic but no model"),
        ("script:", "script: needs a file"),
        ("gpt-4o", "'gpt-4o' names no provider, so it needs a base URL"),
    ],
)
def test_a_bad_name_is_one_clear_error(name, why):
    with pytest.raises(ValueError, match=re.escape(why)):
        model(name)


def test_model_builds_each_provider_at_its_own_endpoint(tmp_path):
    claude, gpt, chat = model("anthropic/claude-sonnet-4-5"), model("responses/gpt-5"), model("openai/gpt-4o")
    assert isinstance(claude, Anthropic) and claude.url == "https://api.anthropic.com/v1/messages"
    assert isinstance(gpt, OpenAIResponses) and gpt.url == "https://api.openai.com/v1/responses"
    assert isinstance(chat, OpenAICompatible) and chat.url == "https://api.openai.com/v1/chat/completions"
    local = model("Qwen/Qwen2.5-7B-Instruct", "http://127.0.0.1:8000/v1", temperature=0)
    assert isinstance(local, OpenAICompatible) and (local.model, local.params) == (
        "Qwen/Qwen2.5-7B-Instruct",
        {"temperature": 0},
    )
    (tmp_path / "r.jsonl").write_text('{"content": "hi"}\n')
    assert isinstance(model(f"script:{tmp_path / 'r.jsonl'}"), ScriptModel)
    assert model("anthropic/m", "http://127.0.0.1:9/anthropic", max_tokens=99).max_tokens == 99


@pytest.mark.parametrize(
    ("name", "header", "env"),
    [
        ("anthropic/m", "x-api-key", "ANTHROPIC_API_KEY"),
        ("responses/m", "authorization", "OPENAI_API_KEY"),
        ("openai/m", "authorization", "OPENAI_API_KEY"),
    ],
)
def test_the_key_comes_from_the_providers_usual_variable(monkeypatch, name, header, env):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-from-env")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-from-env")
    monkeypatch.setenv("OTHER_KEY", "sk-other")
    seen: list[str] = []

    def server(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers[header].removeprefix("Bearer "))
        return httpx.Response(500)

    transport = httpx.MockTransport(server)
    for call in (
        model(name, transport=transport, max_retries=0),
        model(name, api_key="sk-given", transport=transport, max_retries=0),
        model(name, api_key_env="OTHER_KEY", transport=transport, max_retries=0),
    ):
        with pytest.raises(Exception, match="HTTP 500"):
            asyncio.run(call([{"role": "user", "content": "hi"}]))
    assert seen == [os.environ[env], "sk-given", "sk-other"]


# -- the command line --------------------------------------------------------------------


@pytest.fixture(scope="module")
def hostile():
    server = HostileServer()
    yield server
    server.stop()


def invoke(db: Path | str, *args: str, code: int = 0) -> str:
    result = CliRunner().invoke(cli, ["--db", str(db), *args])
    assert result.exit_code == code, result.output
    return result.output


def test_run_names_the_provider_and_reads_its_key(hostile, tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-cli")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-cli")
    db = tmp_path / "s.db"
    hostile.headers.clear()
    claude = [
        "--model",
        "anthropic/claude-sonnet-4-5",
        "--base-url",
        hostile.url("anthropic-redacted-thinking"),
    ]
    invoke(db, "run", "--new", "hi", *claude)
    gpt = ["--model", "responses/gpt-5", "--base-url", hostile.url("responses-incomplete"), "--no-stream"]
    invoke(db, "run", "more", *gpt)
    monkeypatch.setenv("OTHER_KEY", "sk-other")
    invoke(db, "run", "again", *claude, "--api-key-env", "OTHER_KEY")
    assert [h.get("x-api-key") or h.get("authorization") for h in hostile.headers] == [
        "sk-ant-cli",
        "Bearer sk-openai-cli",
        "sk-other",
    ]
    with Store(db) as store:
        session = store.sessions()[0].id
        runs = [store.run(n.run_id) for n in store.session(session).path("main") if n.run_id]
    assert [r.provider for r in runs] == ["anthropic", "openai-responses", "anthropic"]
    assert b"sk-ant-cli" not in db.read_bytes() and b"sk-openai-cli" not in db.read_bytes()


def test_usage_shows_and_prices_the_cache_fields_on_both_backends(hostile, db_target):
    """`usage` of a branch Claude answered with both cache fields (the hostile server's
    recorded Message): the cache columns, and --price with the default or given cache prices."""
    url = hostile.url("anthropic-cache-usage")
    invoke(
        db_target,
        "run",
        "--new",
        "hi",
        "--model",
        "anthropic/claude-sonnet-4-5",
        "--base-url",
        url,
        "--no-stream",
    )
    table = invoke(db_target, "usage", "--price", "claude-sonnet-4-5=3,15").splitlines()
    assert table[0].split() == ["MODEL", "CALLS", "IN", "OUT", "CACHE-W", "CACHE-R", "MS", "COST"]
    # 12 x $3 + 14 x $15 + 2048 written x 1.25 x $3 + 4096 read x 0.1 x $3, per million tokens
    assert table[1].split()[:6] == ["claude-sonnet-4-5", "1", "12", "14", "2048", "4096"]
    assert table[1].split()[-1] == table[2].split()[-1] == "0.009155"
    data = json.loads(invoke(db_target, "usage", "--json", "--price", "claude-sonnet-4-5=3,15,6,0"))
    assert (data["cache_creation_input_tokens"], data["cache_read_input_tokens"]) == (2048, 4096)
    assert (
        data["cost"]
        == data["by_model"]["claude-sonnet-4-5"]["cost"]
        == pytest.approx((12 * 3 + 14 * 15 + 2048 * 6) / 1e6)
    )
    assert json.loads(invoke(db_target, "usage", "--json", "--price", "other=1,1"))["cost"] is None
    assert "cost" not in json.loads(invoke(db_target, "usage", "--json"))
    out = invoke(db_target, "usage", "--price", "claude-sonnet-4-5=3,15,6", code=2)
    assert "expected MODEL=INPUT,OUTPUT[,CACHE_WRITE,CACHE_READ]" in out


def test_a_bare_name_still_needs_a_base_url_and_a_bad_one_is_named(tmp_path):
    out = invoke(tmp_path / "s.db", "run", "--new", "hi", "--model", "gpt-4o", code=2)
    assert "give --base-url (or SESSIONTREE_BASE_URL), or name the provider: --model openai/gpt-4o" in out
    out = invoke(tmp_path / "s.db", "run", "--new", "hi", "--model", "responses/", code=2)
    assert "'responses/' names the provider responses but no model" in out
    out = invoke(
        tmp_path / "s.db", "run", "--new", "hi", "--model", "anthropic/m", "-o", "cache", "false", code=2
    )
    assert "'cache' is not a request parameter: it is a setting of the adapter (anthropic in Python)" in out


# -- against llmock: a slash in a model name, and the tutorial ---------------------------


@pytest.fixture(scope="module")
def llmock(tmp_path_factory):
    server = servers.start_llmock(tmp_path_factory.mktemp("llmock"), "--response-style", "static")
    yield server
    server.stop()


@pytest.mark.slow
def test_a_name_with_an_unknown_prefix_is_a_chat_completions_model(llmock, tmp_path):
    servers.llmock_reset(llmock)
    name = "meta-llama/Llama-3.3-70B-Instruct"
    invoke(tmp_path / "s.db", "run", "--new", "hi", "--model", name, "--base-url", llmock.url + "/v1")
    (record,) = servers.llmock_requests(llmock)
    assert record["path"] == "/v1/chat/completions" and record["body"]["model"] == name


def tutorial() -> str:
    """The block of docs/providers.md after its 'rerun across providers' marker."""
    text = DOCS.read_text()
    start = text.index("<!-- not run: needs llmock")
    body = text[start:].split("```bash\n", 1)[1].split("\n```", 1)[0]
    return body + "\n"


@pytest.mark.slow
def test_the_cross_provider_rerun_tutorial_runs_against_llmock(llmock, tmp_path):
    servers.llmock_reset(llmock)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SESSIONTREE_", "OPENAI_", "ANTHROPIC_"))}
    env.update(
        PATH=str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", ""),
        SESSIONTREE_DB=str(tmp_path / "t.db"),
        LLMOCK=llmock.url,
    )
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", tutorial()],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    records = servers.llmock_requests(llmock)
    assert sorted(r["path"] for r in records) == [
        "/anthropic/v1/messages",
        "/v1/chat/completions",
        "/v1/responses",
    ]
    assert all(r["status"] == 200 for r in records)
    with Store(tmp_path / "t.db") as store:
        session = store.session(store.sessions()[0].id)
        branches = {b.name: b for b in session.branches()}
        for name, provider in (
            ("claude", "anthropic"),
            ("gpt", "openai-compatible"),
            ("gpt5", "openai-responses"),
        ):
            last = session.path(name)[-1]
            assert last.payload["role"] == "assistant" and store.run(last.run_id).provider == provider
            assert branches[name].metadata["variant"] == name
    compared = json.loads(
        subprocess.run(
            [
                "sessiontree",
                "compare",
                "main",
                "claude",
                "gpt",
                "gpt5",
                "--json",
                "--price",
                "claude-sonnet-4-5=3,15",
                "--price",
                "gpt-4o-mini=0.15,0.6",
                "--price",
                "gpt-5=1.25,10",
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert "claude" in json.dumps(compared) and "cost" in json.dumps(compared)


def stdout_of(db: Path, *args: str) -> str:
    """What a command that succeeds prints on stdout (its stderr aside)."""
    result = CliRunner().invoke(cli, ["--db", str(db), *args])
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.slow
def test_a_rerun_with_an_anthropic_and_a_chat_completions_variant_prices_the_cache_fields(
    llmock, hostile, tmp_path, monkeypatch
):
    """The bar's cross-provider rerun: one checkpoint, Claude (the hostile server's recorded
    Messages reply, which reports both cache fields: no mock does) and GPT (llmock's chat
    completions), then `compare --price`: both branches valid, the cost counts the cache."""
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "SESSIONTREE_BASE_URL", "SESSIONTREE_MODEL"):
        monkeypatch.delenv(name, raising=False)
    servers.llmock_reset(llmock)
    hostile.bodies.clear()  # the server is the module's: only this test's requests count
    db = tmp_path / "t.db"
    invoke(db, "demo")
    ran = stdout_of(
        db, "rerun", "weather-known", "--tools", "sessiontree.cli.demo:TOOLS", "--json",
        "--variant", f"claude=anthropic/claude-sonnet-4-5:base_url={hostile.url('anthropic-cache-usage')}",
        "--variant", f"gpt=openai/gpt-4o-mini:base_url={llmock.url}/v1",
    )  # fmt: skip
    results = json.loads(ran)
    assert [(r["branch"], r["reason"], r["error"]) for r in results] == [
        ("claude", "completed", None),
        ("gpt", "completed", None),
    ]
    (sent,) = hostile.bodies
    assert sent["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}  # caching is on
    compared = json.loads(
        invoke(
            db,
            "compare",
            "claude",
            "gpt",
            "--json",
            "--price",
            "claude-sonnet-4-5=3,15",
            "--price",
            "gpt-4o-mini=0.15,0.6",
        )  # fmt: skip
    )
    claude, gpt = compared["branches"]
    assert (claude["status"], gpt["status"]) == ("completed", "completed")
    assert claude["final"] == "Sunny in Paris, 22 C. Bob can leave the umbrella at home."
    usage = claude["usage"]
    assert (usage["input_tokens"], usage["output_tokens"]) == (12, 14)
    assert (usage["cache_creation_input_tokens"], usage["cache_read_input_tokens"]) == (2048, 4096)
    # 12 x $3 + 14 x $15 + 2048 written x 1.25 x $3 + 4096 read x 0.1 x $3, per million tokens
    assert claude["cost"] == pytest.approx(0.0091548, abs=1e-12)
    chat = gpt["usage"]
    assert chat["cache_creation_input_tokens"] == chat["cache_read_input_tokens"] == 0
    assert chat["input_tokens"] > 0
    assert gpt["cost"] == pytest.approx((chat["input_tokens"] * 0.15 + chat["output_tokens"] * 0.6) / 1e6)
    shown = invoke(db, "compare", "claude", "gpt", "--price", "claude-sonnet-4-5=3,15,3.75,0.3").splitlines()
    assert shown[0].split()[4:10] == ["IN", "OUT", "CACHE-W", "CACHE-R", "MS", "COST"]
    assert shown[1].split()[4:7] == ["12", "14", "2048"] and shown[1].split()[7] == "4096"
    assert shown[1].split()[9] == "0.009155" and shown[2].split()[9] == "-"  # gpt-4o-mini: no price
    assert invoke(db, "verify").startswith("ok: 1 session(s)") and "0 problem(s)" in invoke(db, "verify")
    with Store(db) as store:
        session = store.session(store.sessions()[0].id)
        for name, provider in (("claude", "anthropic"), ("gpt", "openai-compatible")):
            last = session.path(name)[-1]
            assert last.payload["role"] == "assistant" and store.run(last.run_id).provider == provider
