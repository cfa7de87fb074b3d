"""MCP both ways (the ``mcp`` extra): ``sessiontree mcp`` driven by the official SDK's own
client over stdio and HTTP, and MCP servers' tools in the loop (a real git server nobody
here wrote: a commit pauses, is approved in another process, and happens once)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner

from sessiontree import Store, ToolsUnavailable
from sessiontree import recipe as recipes
from sessiontree.cli import cli
from sessiontree.loop import decide, run
from sessiontree.steps import Approve, Final, Paused
from sessiontree.testing import ScriptedModel, reply, tool_call
from sessiontree.tools import Tool, ToolArgumentError, tool

from conftest import public_rows_of

mcp = pytest.importorskip("mcp")  # the test extra has it; CI installs it
from mcp import Client, StdioServerParameters  # noqa: E402

from sessiontree.integrations.mcp_tools import mcp_tools, safety  # noqa: E402

SESSIONTREE = str(Path(sys.executable).parent / "sessiontree")
FIXTURE_SERVER = str(Path(__file__).parent / "mcp_fixture_server.py")
READ_ONLY_TOOLS = {"list_sessions", "list_branches", "transcript", "show_node", "search", "diff", "pending"}


@tool(idempotent=False)
def send_email(to: str, body: str) -> str:
    """Send an email."""
    return f"sent to {to}"


def seeded(target: str) -> dict[str, str]:
    """A store with a session whose main branch paused on a call, and a `retry` branch."""
    with Store(target) as store:
        s = store.create_session("weather for bob")
        s.append({"role": "user", "content": "Weather in Oslo? Email bob the forecast."})
        model = ScriptedModel([reply("Emailing.", tool_call("send_email", {"to": "bob", "body": "sunny"}))])
        steps = list(run(store, s, call=model, tools=[send_email]))
        assert isinstance(steps[-1], Final) and steps[-1].reason == "paused"
        pause = steps[-1].node
        first = s.path("main")[0]
        s.fork("retry", at=first)
        s.append({"role": "assistant", "content": "A forecast of drizzle in Oslo."}, branch="retry")
        return {"session": s.id, "pause": pause.id, "first": first.id}


def stdio(target: str, *args: str) -> StdioServerParameters:
    # The SDK gives a server only a few variables of ours unless told: behind PgBouncer the
    # server must see SESSIONTREE_PGBOUNCER too, or it keeps settings on a shared connection.
    return StdioServerParameters(
        command=SESSIONTREE, args=["--db", target, "mcp", *args], env=dict(os.environ)
    )


def call(client, name: str, **arguments):
    return client.call_tool(name, arguments)


# -- the server, over stdio and HTTP ---------------------------------------------------------


@contextlib.contextmanager
def served(transport: str, target: str, *args: str):
    """What the SDK's ``Client`` connects to: ``sessiontree mcp ARGS`` over stdio (launched
    by the client) or over streamable HTTP (a process of its own, stopped after)."""
    if transport == "stdio":
        yield stdio(target, *args)
        return
    process, url = http_server(target, *args)
    try:
        yield url
    finally:
        stop(process)


TRANSPORTS = ["stdio", "http"]


@pytest.mark.slow  # a server process
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_every_tool_answers_with_structured_content_and_decide_takes_one_decision(db_target, transport):
    seed = seeded(db_target)
    found: dict[str, object] = {}

    async def main(server) -> None:
        async with Client(server) as client:
            listed = {t.name: t for t in (await client.list_tools()).tools}
            found["tools"] = listed
            for name in ("list_sessions", "pending"):
                found[name] = (await call(client, name)).structured_content
            found["list_branches"] = (
                await call(client, "list_branches", session=seed["session"])
            ).structured_content
            found["transcript"] = (
                await call(client, "transcript", session=seed["session"], ref="main", limit=2)
            ).structured_content
            found["page2"] = (
                await call(client, "transcript", session=seed["session"], ref="main", limit=2, offset=2)
            ).structured_content
            found["show_node"] = (await call(client, "show_node", node=seed["first"])).structured_content
            found["search"] = (await call(client, "search", query="drizzle")).structured_content
            found["diff"] = (
                await call(client, "diff", session=seed["session"], a="main", b="retry")
            ).structured_content
            pending = found["pending"]
            call_id = pending["pauses"][0]["calls"][0]["id"]
            found["bad_edit"] = await call(  # the rules of approve and the inbox: the schema
                client, "decide", pause=seed["pause"], call=call_id, action="edit", arguments={"to": 3}
            )
            found["decide"] = await call(
                client, "decide", pause=seed["pause"], call=call_id, action="approve"
            )
            found["again"] = await call(
                client, "decide", pause=seed["pause"], call=call_id, action="reject", reason="no"
            )
            found["pending_after"] = (await call(client, "pending")).structured_content
            found["missing"] = await call(client, "transcript", session="nope", ref="main")
            found["sessions_resource"] = await client.read_resource("sessiontree://sessions")
            found["branch_resource"] = await client.read_resource(
                f"sessiontree://session/{seed['session']}/branch/retry"
            )
            found["templates"] = await client.list_resource_templates()

    with served(transport, db_target, "--allow-decide", "--by", "alice") as server:
        anyio.run(main, server)
    tools = found["tools"]
    assert set(tools) == READ_ONLY_TOOLS | {"decide"}
    for name in READ_ONLY_TOOLS:  # on the wire, as every client reads them
        hints = tools[name].annotations.model_dump(by_alias=True, exclude_none=True)
        assert hints["readOnlyHint"] is True and hints["openWorldHint"] is False, name
    decide_hints = tools["decide"].annotations.model_dump(by_alias=True, exclude_none=True)
    assert decide_hints["readOnlyHint"] is False and decide_hints["destructiveHint"] is False
    assert found["list_sessions"]["sessions"][0]["id"] == seed["session"]
    assert found["list_sessions"]["total"] == 1
    assert {b["name"] for b in found["list_branches"]["branches"]} == {"main", "retry"}
    transcript = found["transcript"]
    assert transcript["total"] == 3 and transcript["next_offset"] == 2
    assert [m["role"] for m in transcript["messages"]] == ["user", "assistant"]
    page2 = found["page2"]
    assert [m["kind"] for m in page2["messages"]] == ["pause"] and page2["next_offset"] is None
    assert found["show_node"]["id"] == seed["first"] and set(found["show_node"]["branches_here"]) == set()
    (hit,) = found["search"]["hits"]
    assert hit["branches"] == ["retry"] and hit["session"] == seed["session"]
    assert found["diff"]["ancestor"] == seed["first"] and len(found["diff"]["only_b"]) == 1
    (pause,) = found["pending"]["pauses"]
    assert pause["pause"] == seed["pause"] and pause["state"] == "pending" and pause["expires_at"] is None
    assert pause["calls"][0]["name"] == "send_email"
    bad_edit = found["bad_edit"]
    assert bad_edit.is_error and "\n" not in bad_edit.content[0].text
    assert "edit of call call_send_email (send_email):" in bad_edit.content[0].text
    assert found["decide"].is_error is False
    assert found["decide"].structured_content["by"] == "alice"
    # the command that continues it, pasteable anywhere: the store's --db, as the CLI prints
    resume = shlex.join(["sessiontree", "--db", db_target, "resume", seed["pause"]])
    assert found["decide"].structured_content["next"].startswith(resume)
    again = found["again"]
    assert again.is_error and "already" in again.content[0].text and "\n" not in again.content[0].text
    assert found["pending_after"]["pauses"] == []
    missing = found["missing"]
    assert missing.is_error and "no session 'nope'" in missing.content[0].text
    sessions = json.loads(found["sessions_resource"].contents[0].text)
    assert sessions["sessions"][0]["id"] == seed["session"]
    branch = json.loads(found["branch_resource"].contents[0].text)
    assert branch["messages"][-1]["payload"]["content"] == "A forecast of drizzle in Oslo."
    (template,) = found["templates"].resource_templates
    assert template.uri_template == "sessiontree://session/{session}/branch/{branch}"
    with Store(db_target) as store:
        decisions = [n for n in store.session(seed["session"]).children(seed["pause"])]
        assert [d.kind for d in decisions] == ["decision"]
        assert decisions[0].payload["by"] == "alice"
        assert store.verify().ok


@pytest.mark.slow  # a server process
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_without_allow_decide_nothing_a_client_sends_writes(db_target, transport):
    seed = seeded(db_target)
    with Store(db_target) as store:
        before = public_rows_of(store)
    said: dict[str, object] = {}

    async def main(server) -> None:
        async with Client(server) as client:
            said["tools"] = {t.name for t in (await client.list_tools()).tools}
            said["decide"] = await call(
                client, "decide", pause=seed["pause"], call="call_send_email", action="approve"
            )
            said["path"] = await call(client, "transcript", session="/etc/passwd", ref="../../x")
            said["limit"] = await call(client, "list_sessions", limit=10**9)
            said["pending"] = (await call(client, "pending")).structured_content

    with served(transport, db_target) as server:
        anyio.run(main, server)
    assert said["tools"] == READ_ONLY_TOOLS
    for name in ("decide", "path", "limit"):
        result = said[name]
        assert result.is_error, name
        assert "\n" not in result.content[0].text, name
    assert "limit must be a whole number from 1 to 200" in said["limit"].content[0].text
    assert said["pending"]["can_decide"] is False and len(said["pending"]["pauses"]) == 1
    with Store(db_target) as store:
        assert public_rows_of(store) == before


@pytest.mark.slow  # a server process
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_client_listening_to_a_branch_is_told_when_it_moves(db_target, transport):
    db = db_target
    seed = seeded(db)
    uri = f"sessiontree://session/{seed['session']}/branch/retry"
    told: list[str] = []

    async def main(server) -> None:
        async with (
            Client(server) as client,
            client.listen(resource_subscriptions=[uri]) as subscription,
        ):
            with Store(db) as store:
                store.session(seed["session"]).append(
                    {"role": "user", "content": "and tomorrow?"}, branch="retry"
                )
            with anyio.fail_after(20):
                async for event in subscription:
                    told.append(event.uri)
                    break

    with served(transport, db, "--poll", "0.05") as server:
        anyio.run(main, server)
    assert told == [uri]


def test_pending_shows_a_deadline_and_decide_refuses_an_expired_pause(any_store):
    from sessiontree.clock import frozen
    from sessiontree.integrations.mcp_server import build_server

    store = any_store
    with frozen() as clock:
        s = store.create_session("deadline")
        s.append({"role": "user", "content": "Email bob."})
        model = ScriptedModel([reply(None, tool_call("send_email", {"to": "bob", "body": "hi"}))])
        steps = list(run(store, s, call=model, tools=[send_email], pause_expires=60))
        pause = steps[-1].node
        said: dict[str, object] = {}

        async def main() -> None:
            async with Client(build_server(store, allow_decide=True)) as client:  # in process
                said["before"] = (await call(client, "pending")).structured_content
                clock.advance(61)
                said["after"] = (await call(client, "pending")).structured_content
                said["decide"] = await call(
                    client, "decide", pause=pause.id, call="call_send_email", action="approve"
                )

        anyio.run(main)
    (before,) = said["before"]["pauses"]
    assert before["state"] == "pending" and before["expires_at"] is not None
    assert said["after"]["pauses"][0]["state"] == "expired"
    refused = said["decide"]
    assert refused.is_error and f"pause {pause.id} expired at" in refused.content[0].text
    assert "\n" not in refused.content[0].text
    assert [n.kind for n in s.children(pause)] == []


def test_list_branches_is_bounded_and_pages(any_store):
    from sessiontree.integrations.mcp_server import build_server

    s = any_store.create_session("many")
    first = s.append({"role": "user", "content": "hi"})
    for i in range(3):
        s.fork(f"b{i}", at=first)
    said = {}

    async def main() -> None:
        async with Client(build_server(any_store)) as client:
            said["page"] = (await call(client, "list_branches", session=s.id, limit=2)).structured_content
            said["next"] = (
                await call(client, "list_branches", session=s.id, limit=2, offset=2)
            ).structured_content
            said["huge"] = await call(client, "list_branches", session=s.id, limit=10**6)

    anyio.run(main)
    assert len(said["page"]["branches"]) == 2 and said["page"]["branches_total"] == 4
    assert said["page"]["next_offset"] == 2
    assert len(said["next"]["branches"]) == 2 and said["next"]["next_offset"] is None
    names = {b["name"] for b in said["page"]["branches"] + said["next"]["branches"]}
    assert names == {"main", "b0", "b1", "b2"}
    assert (
        said["huge"].is_error and "limit must be a whole number from 1 to 200" in said["huge"].content[0].text
    )


def test_sessiontree_mcp_without_the_extra_says_how_to_install_it(tmp_path, monkeypatch):
    for name in [n for n in sys.modules if n == "mcp" or n.startswith("mcp.")] + ["mcp"]:
        monkeypatch.setitem(sys.modules, name, None)  # importing it raises ImportError
    for name in ("sessiontree.integrations.mcp_server", "sessiontree.integrations.mcp_tools"):
        monkeypatch.delitem(sys.modules, name, raising=False)  # imported again, and failing
    result = CliRunner().invoke(cli, ["--db", str(tmp_path / "s.db"), "mcp"])
    assert result.exit_code == 1
    assert result.output == "Error: sessiontree mcp needs the mcp extra: pip install 'sessiontree[mcp]'\n"
    script = tmp_path / "replies.jsonl"
    script.write_text('{"content": "hello"}\n')
    result = CliRunner().invoke(
        cli,
        [
            "--db",
            str(tmp_path / "s.db"),
            "run",
            "--new",
            "hi",
            "--model",
            f"script:{script}",
            "--mcp",
            "true",
        ],
    )
    assert "--mcp needs the mcp extra: pip install 'sessiontree[mcp]'" in result.output


def test_http_beyond_loopback_needs_a_token(tmp_path, monkeypatch):
    db = str(tmp_path / "s.db")
    result = CliRunner().invoke(cli, ["--db", db, "mcp", "--http", "0.0.0.0:0"])
    assert result.exit_code == 2
    assert "reachable beyond this machine: give a bearer token with --token-env NAME" in result.output
    monkeypatch.delenv("NO_SUCH_TOKEN", raising=False)
    result = CliRunner().invoke(
        cli, ["--db", db, "mcp", "--http", "127.0.0.1:0", "--token-env", "NO_SUCH_TOKEN"]
    )
    assert "--token-env NO_SUCH_TOKEN: the variable is not set or empty" in result.output
    result = CliRunner().invoke(cli, ["--db", db, "mcp", "--http", "nonsense"])
    assert "'nonsense' is not HOST:PORT or PORT" in result.output
    result = CliRunner().invoke(cli, ["--db", db, "mcp", "--by", "alice"])
    assert "--by names who decides: it needs --allow-decide" in result.output


# -- the server, over streamable HTTP ------------------------------------------------


def http_server(
    db: str, *args: str, env: dict[str, str] | None = None, address: str = "127.0.0.1:0"
) -> tuple[subprocess.Popen, str]:
    """`sessiontree mcp --http 127.0.0.1:0` and the URL it prints once it listens."""
    process = subprocess.Popen(
        [SESSIONTREE, "--db", db, "mcp", "--http", address, *args],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **(env or {})},
    )
    assert process.stderr is not None
    line = process.stderr.readline()
    found = re.search(r"on (http://\S+/mcp)", line)
    if not found:
        process.kill()
        process.wait()
        process.stderr.close()
        raise AssertionError(f"no URL in {line!r}")
    return process, found[1]


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    process.wait(20)
    if process.stderr is not None:
        process.stderr.close()


@pytest.mark.slow  # a server process
def test_over_http_a_token_is_required_when_given(tmp_path, monkeypatch):
    db = str(tmp_path / "s.db")
    seeded(db)
    process, url = http_server(
        db, "--token-env", "MCP_TOKEN_FOR_TEST", env={"MCP_TOKEN_FOR_TEST": "s3cret"}, address="0"
    )
    assert url.startswith("http://127.0.0.1:")  # a port alone is on loopback
    try:
        import httpx

        refused = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=10)
        wrong = httpx.post(url, json={}, headers={"Authorization": "Bearer nope"}, timeout=10)
        # mcp_tools over HTTP, with the token: sessiontree's own tools, all read-only, run unasked
        with mcp_tools(url, headers={"Authorization": "Bearer s3cret"}) as tools:
            safety_of = {t.name: (t.idempotent, t.requires_approval) for t in tools}
            assert tools.spec == url and {t.source for t in tools} == {f"mcp:{url}"}
            with pytest.raises(ToolsUnavailable, match="cannot start or list its tools"):
                mcp_tools(url)  # no token
        # the spec names the token's variable, never the token: what a recipe records, and
        # what a resume in another process connects with (its own value of the variable)
        spec = f"bearer-env:SERVER_TOKEN {url}"
        assert recipes.withheld(spec) == (spec, None)
        with pytest.raises(ToolsUnavailable, match="the variable SERVER_TOKEN is not set or empty"):
            mcp_tools(spec)
        monkeypatch.setenv("SERVER_TOKEN", "s3cret")
        with mcp_tools(spec) as tools, mcp_tools(f"untrusted: {spec}") as asking:
            assert {t.source for t in tools} == {f"mcp:{spec}"} and len(tools.tools) == len(READ_ONLY_TOOLS)
            assert asking.spec == f"untrusted:{spec}" and all(t.requires_approval for t in asking)
        monkeypatch.setenv("SERVER_TOKEN", "nope")
        with pytest.raises(ToolsUnavailable, match="cannot start or list its tools"):
            mcp_tools(spec)
        with pytest.raises(ToolsUnavailable, match="write bearer-env:NAME, then a space and an http"):
            mcp_tools("bearer-env:SERVER_TOKEN python -m mcp_server_time")
    finally:
        stop(process)
    assert refused.status_code == 401 and wrong.status_code == 401
    assert safety_of == dict.fromkeys(READ_ONLY_TOOLS, (True, False))


# -- MCP servers' tools in the loop ----------------------------------------------------

SAFETY = [
    ({"readOnlyHint": True}, True, (True, False)),
    ({"destructiveHint": True}, True, (False, True)),
    ({"destructiveHint": False, "idempotentHint": True}, True, (True, False)),
    ({"destructiveHint": False}, True, (False, True)),  # additive, but not safe to repeat
    ({"idempotentHint": True}, True, (True, True)),  # destructive by default: asks
    ({}, True, (False, True)),  # the spec's defaults: not read-only, destructive
    (None, True, (False, True)),
    ({"readOnlyHint": True}, False, (False, True)),  # an untrusted server's word counts for nothing
    ({"destructiveHint": False, "idempotentHint": True}, False, (False, True)),
]


@pytest.mark.parametrize("hints, trusted, expected", SAFETY)
def test_safety_from_annotations_fails_closed(hints, trusted, expected):
    assert safety(hints, trusted=trusted) == expected


def test_a_tool_from_a_schema_checks_its_arguments_against_it():
    seen = []
    t = Tool.from_schema(
        "lookup",
        "Look a city up.",
        {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
            "additionalProperties": False,
        },
        lambda arguments: seen.append(arguments) or "ok",
        idempotent=False,
    )
    assert t.requires_approval is True and t.idempotent is False
    assert t.spec()["function"]["parameters"]["required"] == ["city"]
    assert t.parse('{"city": "Oslo", "days": 2}') == {"city": "Oslo", "days": 2}
    for bad, said in [
        ("{}", "missing required argument(s) city"),
        ('{"city": "Oslo", "x": 1}', "unexpected argument(s) x"),
        ('{"city": 3}', "arguments.city: expected a string, got 3"),
        ('{"city": "Oslo", "days": true}', "arguments.days: expected an integer, got true"),
        ("[1]", "arguments must be a JSON object"),
    ]:
        with pytest.raises(ToolArgumentError, match=re.escape(said)):
            t.parse(bad)
    assert anyio.run(t.invoke, {"city": "Oslo"}) == "ok"
    assert seen == [{"city": "Oslo"}]


@pytest.mark.slow  # a server process
def test_mcp_results_are_kept_faithfully_and_hints_decide_what_pauses(tmp_path, monkeypatch):
    effects = tmp_path / "effects.log"
    db = str(tmp_path / "store.db")
    calls = [
        tool_call("lookup", {"city": "Oslo"}, id="c1"),
        tool_call("chart", {}, id="c2"),
        tool_call("broken", {"why": "no disk"}, id="c3"),
        tool_call("upsert_note", {"key": "k", "text": "t"}, id="c4"),
        tool_call("no_hints", {"value": 21}, id="c5"),
    ]
    model = ScriptedModel([reply(None, *calls), reply("done")])
    with (
        mcp_tools([sys.executable, FIXTURE_SERVER], env={"EFFECTS_LOG": str(effects)}) as tools,
        Store(db) as store,
    ):
        s = store.create_session()
        s.append({"role": "user", "content": "go"})
        steps = list(run(store, s, call=model, tools=tools))
        assert isinstance(steps[-1], Final) and steps[-1].reason == "paused"
        pause = steps[-1].node
        assert [c["name"] for c in pause.payload["calls"]] == ["no_hints"]  # no hints: it asks
        assert effects.read_text() == "upsert k\n"  # an upsert that says so runs
        by_call = {
            n.payload["tool_call_id"]: n.payload for n in s.path("main") if n.payload.get("role") == "tool"
        }
        assert by_call["c1"]["content"] == "sunny in Oslo" and "raw" not in by_call["c1"]
        chart = by_call["c2"]
        assert chart["content"] == "[image: image/png, about 72 bytes, not shown]\none pixel"
        image = chart["raw"]["mcp"]["content"][0]
        assert image["type"] == "image" and image["mimeType"] == "image/png" and len(image["data"]) > 50
        broken = by_call["c3"]
        assert (
            broken["content"].startswith("Error: broken raised ToolFailed:")
            and "cannot: no disk" in broken["content"]
        )
        assert broken["raw"]["mcp"]["isError"] is True
        decide(store, pause.id, {"c5": Approve()})
        from sessiontree.loop import resume

        assert isinstance(list(resume(store, pause.id, call=model, tools=tools))[-1], Final)
        assert effects.read_text() == "upsert k\nno_hints 21\n"
        # What a model is sent never has the raw field.
        sent = model.calls[-1]["messages"]
        assert all("raw" not in m for m in sent)
        assert store.verify().ok


def test_a_server_that_cannot_start_is_one_line(tmp_path):
    with pytest.raises(
        ToolsUnavailable, match=r"^MCP server /no/such/server: cannot start or list its tools: "
    ):
        mcp_tools("/no/such/server")
    with pytest.raises(ToolsUnavailable, match="No closing quotation"):
        mcp_tools("python 'unclosed")
    script = tmp_path / "replies.jsonl"
    script.write_text('{"content": "hello"}\n')
    result = CliRunner().invoke(
        cli,
        [
            "--db",
            str(tmp_path / "s.db"),
            "run",
            "--new",
            "hi",
            "--model",
            f"script:{script}",
            "--mcp",
            "/no/such/server",
        ],
    )
    assert result.exit_code == 2
    assert "Invalid value for --mcp: MCP server /no/such/server: cannot start" in result.output
    assert not (tmp_path / "s.db").exists()


@pytest.mark.slow  # a server process
def test_a_read_only_server_runs_without_asking(tmp_path):
    db = str(tmp_path / "store.db")
    model = ScriptedModel(
        [reply(None, tool_call("get_current_time", {"timezone": "UTC"})), reply("It is now.")]
    )
    with mcp_tools([sys.executable, "-m", "mcp_server_time"]) as tools, Store(db) as store:
        assert {t.name: (t.idempotent, t.requires_approval) for t in tools} == {
            "get_current_time": (True, False),
            "convert_time": (True, False),
        }
        s = store.create_session()
        s.append({"role": "user", "content": "What time is it?"})
        steps = list(run(store, s, call=model, tools=tools))
        assert steps[-1].reason == "completed" and not any(isinstance(x, Paused) for x in steps)
        (result,) = [n.payload for n in s.path("main") if n.payload.get("role") == "tool"]
        assert json.loads(result["content"])["timezone"] == "UTC"
        assert "raw" not in result  # the text is the structured content already
    # untrusted: even the read-only tool asks
    with mcp_tools(f"untrusted: {sys.executable} -m mcp_server_time") as tools:
        assert {t.requires_approval for t in tools} == {True}
        assert tools.spec.startswith("untrusted:")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


@pytest.mark.slow  # git, a server process per command
def test_a_git_commit_pauses_is_approved_elsewhere_and_happens_once(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "test@example.com")
    git(repo, "config", "user.name", "Test")
    (repo / "a.txt").write_text("one\n")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-qm", "first")
    (repo / "a.txt").write_text("two\n")
    git(repo, "add", "a.txt")
    script = tmp_path / "replies.jsonl"
    lines = [
        reply(None, tool_call("git_status", {"repo_path": str(repo)}, id="call_status")),
        reply(
            "Committing.",
            tool_call("git_commit", {"repo_path": str(repo), "message": "second"}, id="call_commit"),
        ),
        reply("Committed."),
    ]
    script.write_text("".join(json.dumps(line) + "\n" for line in lines))
    server = f"{sys.executable} -m mcp_server_git --repository {repo}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SESSIONTREE_", "OPENAI_"))}
    env["SESSIONTREE_DB"] = str(tmp_path / "store.db")

    def shell(*args: str, code: int = 0) -> str:
        done = subprocess.run(
            [SESSIONTREE, *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == code, done.stdout + done.stderr
        return done.stdout

    out = shell("run", "--new", "Commit my change.", "--model", f"script:{script}", "--mcp", server, code=3)
    assert "ok git_status: Repository status:" in out
    assert "paused: git_commit requires approval" in out
    pause = re.search(r"sessiontree approve (\S+)", out)[1]
    assert git(repo, "rev-list", "--count", "HEAD").strip() == "1"  # nothing committed yet
    shell("approve", pause, "--by", "alice")
    out = shell("resume", pause)  # as printed, no flags: the recipe relaunches the server
    assert "ok git_commit:" in out and "Committed." in out
    assert git(repo, "rev-list", "--count", "HEAD").strip() == "2"
    again = shell("resume", pause, "--model", f"script:{script}", "--mcp", server, code=1)
    assert again == ""  # the refusal is on stderr; nothing ran
    assert git(repo, "rev-list", "--count", "HEAD").strip() == "2"  # exactly once
    assert git(repo, "log", "-1", "--format=%s").strip() == "second"
    assert shell("verify").startswith("ok")


# -- a client that is not ours ------------------------------------------------------------


def inspector() -> str | None:
    """The MCP Inspector's command (npm ``@modelcontextprotocol/inspector``, which .ci/run
    installs into .ci-node/), or None."""
    chosen = os.environ.get("SESSIONTREE_TEST_INSPECTOR")
    local = Path(__file__).parent.parent / ".ci-node" / "node_modules" / ".bin" / "mcp-inspector"
    for candidate in (chosen, str(local)):
        if candidate and Path(candidate).exists() and shutil.which("node"):
            return candidate
    return None


@pytest.mark.slow  # node, a server process
def test_the_mcp_inspector_lists_and_calls_the_servers_tools(tmp_path):
    command = inspector()
    if command is None:
        if os.environ.get("CI"):
            pytest.fail("CI installs the MCP Inspector into .ci-node/ (see .ci/run); it is missing")
        pytest.skip(
            "the MCP Inspector is not installed (npm install --prefix .ci-node @modelcontextprotocol/inspector)"
        )
    db = str(tmp_path / "store.db")
    seed = seeded(db)
    base = [command, "--cli", SESSIONTREE, "--db", db, "mcp"]

    def inspect(*args: str) -> dict:
        done = subprocess.run([*base, *args], capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads(done.stdout[done.stdout.index("{") :])

    listed = inspect("--method", "tools/list")
    hints = {t["name"]: t.get("annotations", {}) for t in listed["tools"]}
    assert set(hints) == READ_ONLY_TOOLS
    assert all(h["readOnlyHint"] is True and h["openWorldHint"] is False for h in hints.values())
    called = inspect(
        "--method", "tools/call", "--tool-name", "list_branches", "--tool-arg", f"session={seed['session']}"
    )
    assert called["isError"] is False
    assert {b["name"] for b in called["structuredContent"]["branches"]} == {"main", "retry"}


# -- a pause outlives the connection: servers relaunched from the recipe --------------------


def fixture_spec(tmp_path: Path, *extra: str) -> str:
    """The fixture server as --mcp takes it, its effects (and process ids) in files, since a
    server relaunched from a recipe gets none of the test's environment."""
    effects, pids = tmp_path / "effects.log", tmp_path / "pids.log"
    return f"{sys.executable} {FIXTURE_SERVER} --effects {effects} --pids {pids} {' '.join(extra)}".strip()


def paused_run(shell, tmp_path: Path, server: str, name: str, value: int) -> tuple[str, str]:
    """`run --new` on the server's tool NAME called with VALUE, approved; (pause, stderr)."""
    script = tmp_path / f"replies-{name}-{value}.jsonl"
    replies = [reply(None, tool_call(name, {"value": value}, id=f"call_{value}")), reply(f"done {value}")]
    script.write_text("".join(json.dumps(r) + "\n" for r in replies))
    done = shell("run", "--new", f"go {value}", "--model", f"script:{script}", "--mcp", server, code=3)
    pause = re.search(r"sessiontree approve (\S+)", done.stdout)[1]
    shell("approve", pause)
    return pause, done.stderr


def cli_in(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SESSIONTREE_", "OPENAI_"))}
    env["SESSIONTREE_DB"] = str(tmp_path / "store.db")

    def shell(*args: str, code: int = 0) -> subprocess.CompletedProcess:
        done = subprocess.run(
            [SESSIONTREE, *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == code, done.stdout + done.stderr
        return done

    return shell


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow  # server processes
def test_serve_work_carries_mcp_pauses_on_and_closes_each_pauses_server(tmp_path):
    from sessiontree.cli.view import start_worker

    shell = cli_in(tmp_path)
    server = fixture_spec(tmp_path)
    for value in (1, 2):
        paused_run(shell, tmp_path, server, "no_hints", value)
    effects, pids = tmp_path / "effects.log", tmp_path / "pids.log"
    started = len(pids.read_text().split())  # one server a run
    worker = start_worker(str(tmp_path / "store.db"), poll=0.05)  # serve --work's: a thread, no click
    try:
        with anyio.from_thread.start_blocking_portal() as portal:  # a deadline, not a guess

            async def both_ran() -> None:
                with anyio.fail_after(60):
                    while not effects.exists() or len(effects.read_text().splitlines()) < 2:
                        await anyio.sleep(0.05)

            portal.call(both_ran)
        relaunched = [int(p) for p in pids.read_text().split()[started:]]
        assert len(relaunched) == 2  # one server a pause
        assert not alive(relaunched[0])  # the first pause's server ended before the second ran
    finally:
        assert worker.stop()
    assert sorted(effects.read_text().splitlines()) == ["no_hints 1", "no_hints 2"]  # each once
    assert not any(alive(p) for p in relaunched)
    with Store(str(tmp_path / "store.db")) as store:
        finals = sorted(store.session(i.id).path("main")[-1].payload.get("content") for i in store.sessions())
        assert finals == ["done 1", "done 2"] and store.verify().ok


@pytest.mark.slow  # server processes
def test_a_resume_asks_again_when_the_approved_tools_hints_changed(tmp_path):
    shell = cli_in(tmp_path)
    hints = tmp_path / "hints.json"
    hints.write_text(json.dumps({"destructiveHint": True}))
    server = fixture_spec(tmp_path, "--hints", str(hints))
    pause, _ = paused_run(shell, tmp_path, server, "tunable", 7)
    # The server, relaunched, now says something else of the approved tool (here: that it
    # is safe to repeat), which is not what the human saw when approving.
    hints.write_text(json.dumps({"destructiveHint": True, "idempotentHint": True}))
    refused = shell("resume", pause, code=1)
    assert "the tool 'tunable' of the decided call call_7 has changed since the pause" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    effects = tmp_path / "effects.log"
    assert not effects.exists()  # nothing ran
    hints.write_text(json.dumps({"destructiveHint": True}))  # as it was: the decision still stands
    assert "ok tunable: tuned 7" in shell("resume", pause).stdout
    assert effects.read_text() == "tunable 7\n"
    assert len((tmp_path / "pids.log").read_text().split()) == 3  # run, refused resume, resume


@pytest.mark.slow  # a server process
def test_mcp_server_git_hints_run_status_and_add_and_pause_commit_and_reset(tmp_path):
    git(tmp_path, "init", "-q")
    with mcp_tools([sys.executable, "-m", "mcp_server_git", "--repository", str(tmp_path)]) as tools:
        asks = {t.name: t.requires_approval for t in tools}
    assert {name: asks[name] for name in ("git_status", "git_add", "git_commit", "git_reset")} == {
        "git_status": False,
        "git_add": False,
        "git_commit": True,
        "git_reset": True,
    }


@pytest.mark.slow  # a server process
def test_structured_content_beyond_the_text_is_kept_in_raw(tmp_path):
    with mcp_tools([sys.executable, FIXTURE_SERVER], env={"EFFECTS_LOG": str(tmp_path / "e")}) as tools:
        forecast = next(t for t in tools if t.name == "forecast")
        said = anyio.run(forecast.invoke, {"city": "Oslo"})
    assert said.content == "Oslo: 21/12, then 19/11"
    assert said.raw["mcp"]["structuredContent"]["days"][1] == {"high": 19, "low": 11}
    assert said.raw["mcp"]["isError"] is False


@pytest.mark.slow  # server processes
def test_a_credential_in_a_launch_spec_is_never_recorded_and_resume_asks_for_it(tmp_path):
    shell = cli_in(tmp_path)
    server = fixture_spec(tmp_path, "--api-key", "sk-live-123", "GITHUB_TOKEN=ghp-456")
    pause, said = paused_run(shell, tmp_path, server, "no_hints", 3)
    assert "--mcp: the server's arguments hold a credential (--api-key)" in said
    with Store(str(tmp_path / "store.db")) as store:
        stored = json.dumps(public_rows_of(store))
    assert "sk-live-123" not in stored and "ghp-456" not in stored
    refused = shell("resume", pause, code=1)
    assert refused.stderr.count("\n") == 1
    assert "give --mcp again" in refused.stderr and "--api-key ***" in refused.stderr
    assert not (tmp_path / "effects.log").exists()
    assert "ok no_hints: 6" in shell("resume", pause, "--mcp", server).stdout
    assert (tmp_path / "effects.log").read_text() == "no_hints 3\n"


@pytest.mark.parametrize(
    "spec, recorded",
    [
        ("mcp-server-git --repository /r", "mcp:mcp-server-git --repository /r"),
        ("srv --api-key sk-1 --port 8", "mcp-withheld:srv --api-key *** --port 8"),
        ("srv --token=abc", "mcp-withheld:srv --token=***"),
        ("GITHUB_TOKEN=ghp srv", "mcp-withheld:GITHUB_TOKEN=*** srv"),
        ("https://me:pw@host:8443/mcp", "mcp-withheld:https://me:***@host:8443/mcp"),
        ("https://host/mcp?api_key=1&x=2", "mcp-withheld:https://host/mcp?api_key=***&x=2"),
        ("https://host/mcp?x=2", "mcp:https://host/mcp?x=2"),
        ("srv --max-tokens 100", "mcp:srv --max-tokens 100"),
    ],
)
def test_a_recipe_never_holds_a_launch_specs_credentials(spec, recorded):
    from sessiontree.recipe import Recipe

    assert Recipe(tools=("tools.py", f"mcp:{spec}")).tools == ("tools.py", recorded)


@pytest.mark.slow  # server processes
def test_replay_runs_an_mcp_servers_tools_again_with_tool_results_live(tmp_path):
    shell = cli_in(tmp_path)
    server = fixture_spec(tmp_path)
    script = tmp_path / "replies.jsonl"
    replies = [reply(None, tool_call("upsert_note", {"key": "k", "text": "t"})), reply("noted")]
    script.write_text("".join(json.dumps(r) + "\n" for r in replies))
    shell("run", "--new", "note it", "--model", f"script:{script}", "--mcp", server)
    effects = tmp_path / "effects.log"
    assert effects.read_text() == "upsert k\n"
    refused = shell("replay", "main", "--mcp", server, code=1)
    assert refused.stderr == "Error: --mcp only applies with --tool-results live\n"
    out = shell("replay", "main", "--tool-results", "live", "--mcp", server).stdout
    assert "matched" in out
    assert effects.read_text() == "upsert k\nupsert k\n"  # run again, through the server


@pytest.mark.slow  # server processes
def test_worker_relaunches_the_recorded_server_of_each_pause(tmp_path):
    shell = cli_in(tmp_path)
    server = fixture_spec(tmp_path)
    paused_run(shell, tmp_path, server, "no_hints", 5)
    done = shell("worker", "--until-idle")
    assert "ok no_hints: 10" in done.stdout
    assert (tmp_path / "effects.log").read_text() == "no_hints 5\n"
    pids = [int(p) for p in (tmp_path / "pids.log").read_text().split()]
    assert len(pids) == 2 and not any(alive(p) for p in pids)


@pytest.mark.slow  # server processes
def test_a_resume_given_mcp_records_the_server_it_used(tmp_path):
    from sessiontree import recipe as recipes

    shell = cli_in(tmp_path)
    script = tmp_path / "replies.jsonl"
    replies = [
        reply(None, tool_call("no_hints", {"value": 1}, id="call_1")),
        reply(None, tool_call("no_hints", {"value": 2}, id="call_2")),
        reply("done"),
    ]
    script.write_text("".join(json.dumps(r) + "\n" for r in replies))
    old, new = fixture_spec(tmp_path), fixture_spec(tmp_path, "--variant", "new")
    out = shell("run", "--new", "go", "--model", f"script:{script}", "--mcp", old, code=3).stdout
    first = re.search(r"sessiontree approve (\S+)", out)[1]
    shell("approve", first)
    out = shell("resume", first, "--mcp", new, code=3).stdout  # pauses again, on the second call
    second = re.search(r"sessiontree approve (\S+)", out)[1]
    with Store(str(tmp_path / "store.db")) as store:
        assert recipes.of(store.node(first)).tools == (f"mcp:{old}",)
        assert recipes.of(store.node(second)).tools == (f"mcp:{new}",)  # what that run used
    shell("approve", second)
    shell("resume", second)  # with no flags: the server the last run recorded
    assert (tmp_path / "effects.log").read_text() == "no_hints 1\nno_hints 2\n"


@pytest.mark.slow  # server processes
def test_a_run_through_a_token_guarded_server_resumes_with_no_flags_and_stores_no_token(
    tmp_path, monkeypatch
):
    served = str(tmp_path / "served.db")
    seed = seeded(served)
    process, url = http_server(served, "--token-env", "SERVED_TOKEN", env={"SERVED_TOKEN": "s3cret"})
    try:
        monkeypatch.setenv("MY_TOKEN", "s3cret")
        shell = cli_in(tmp_path)
        script = tmp_path / "replies.jsonl"
        replies = [reply(None, tool_call("list_sessions", {}, id="c1")), reply("one session")]
        script.write_text("".join(json.dumps(r) + "\n" for r in replies))
        spec = f"untrusted: bearer-env:MY_TOKEN {url}"  # untrusted: every call asks first
        out = shell("run", "--new", "how many?", "--model", f"script:{script}", "--mcp", spec, code=3).stdout
        pause = re.search(r"sessiontree approve (\S+)", out)[1]
        shell("approve", pause)
        shell("resume", pause)  # another process, no flags: the recipe names the server and the variable
    finally:
        stop(process)
    with Store(str(tmp_path / "store.db")) as store:
        assert recipes.of(store.node(pause)).tools == (f"mcp:{spec}",)  # as given: no token in it
        (session,) = store.sessions()
        messages = store.session(session.id).messages()
        assert messages[-1]["content"] == "one session"
        assert seed["session"] in messages[-2]["content"]  # what the guarded server answered
    assert b"s3cret" not in (tmp_path / "store.db").read_bytes()
