"""Approvals from anywhere, with honest state (issue 25 item 3): pause deadlines and the
``expired`` state, the system's rejection of an expired pause, named decider tokens in
``serve``, and notifications (a signed webhook, an ``on_pause`` callback) that never hold
up the run's commit."""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner

from sessiontree import Approve, Conflict, Pause, Store, deadlines, decide, resume, run, tool
from sessiontree.cli import cli
from sessiontree.loop import reject_expired
from sessiontree.notify import SIGNATURE_HEADER, Webhook, verify
from sessiontree.testing import ScriptedModel, reply, tool_call
from sessiontree.worker import work

SENT: list[str] = []
SECRET = "hook-secret"


@tool(idempotent=False, approval_timeout=60)
def send_email(to: str) -> str:
    """Send an email (not safe to repeat)."""
    SENT.append(to)
    return f"sent to {to}"


@tool(idempotent=False)
def wire_money(amount: int) -> str:
    """Move money (no deadline of its own)."""
    return f"wired {amount}"


def email_model(*after: dict) -> ScriptedModel:
    return ScriptedModel([reply("Emailing.", tool_call("send_email", {"to": "bob@example.com"})), *after])


@pytest.fixture
def clock(monkeypatch):
    """The deadline clock, set by the test: ``clock.now`` seconds since the epoch."""

    class Clock:
        now = 1_800_000_000.0

    monkeypatch.setattr(deadlines, "clock", lambda: Clock.now)
    return Clock


def paused(store: Store, model: ScriptedModel, tools=(send_email,), **options):
    session = store.create_session("deadline")
    session.append({"role": "user", "content": "email bob"})
    steps = list(run(store, session, call=model, tools=tools, **options))
    assert steps[-1].reason == "paused"
    return session, steps[-1].node


# -- deadlines -------------------------------------------------------------


def test_an_expired_pause_is_expired_and_cannot_be_decided(any_store, clock):
    """Before: a pause waited for ever; there was no deadline to give it."""
    session, pause = paused(any_store, email_model())
    assert pause.payload["expires_at"] == deadlines.stamp(clock.now + 60)
    assert deadlines.pause_state(session, pause) == "pending"
    clock.now += 61
    assert [p.id for p in any_store.pending()] == [pause.id]  # still shown, as expired
    assert deadlines.pause_state(session, pause) == "expired"
    with pytest.raises(Conflict, match=r"expired at .* with no decision; nothing was written"):
        decide(any_store, pause.id, {"call_send_email": Approve()}, by="alice")
    with pytest.raises(Conflict, match="expired at .* nothing was run"):
        list(resume(any_store, pause.id, call=email_model(), tools=[send_email]))
    assert session.children(pause) == []  # no human's rejection, nothing at all
    assert SENT == []


def test_the_deadline_comes_from_the_approver_then_the_tool_then_the_run(any_store, clock):
    _, pause = paused(any_store, email_model(), approve=lambda call: Pause("ask", expires_in=5))
    assert pause.payload["expires_at"] == deadlines.stamp(clock.now + 5)
    _, pause = paused(any_store, email_model(), pause_expires=3600)  # the tool's 60 s win
    assert pause.payload["expires_at"] == deadlines.stamp(clock.now + 60)
    model = ScriptedModel([reply("Wiring.", tool_call("wire_money", {"amount": 5}))])
    _, pause = paused(any_store, model, tools=[wire_money], pause_expires=3600)
    assert pause.payload["expires_at"] == deadlines.stamp(clock.now + 3600)
    model = ScriptedModel([reply("Wiring.", tool_call("wire_money", {"amount": 5}))])
    _, pause = paused(any_store, model, tools=[wire_money])
    assert "expires_at" not in pause.payload  # no deadline anywhere: none invented
    two = ScriptedModel(
        [
            reply(
                "Both.",
                tool_call("send_email", {"to": "bob@example.com"}),
                tool_call("wire_money", {"amount": 1}),
            )
        ]
    )
    _, pause = paused(any_store, two, tools=[send_email, wire_money], pause_expires=30)
    assert pause.payload["expires_at"] == deadlines.stamp(clock.now + 30)  # the earliest holds


def test_a_bad_deadline_is_refused(store):
    with pytest.raises(ValueError, match="pause_expires must be a number of seconds"):
        list(run(store, store.create_session(), call=email_model(), pause_expires=-1))
    with pytest.raises(ValueError, match="approval_timeout of tool f must be"):

        @tool(approval_timeout=float("nan"))
        def f() -> str:
            return ""


def test_a_decision_in_time_stands_after_the_deadline(any_store, clock):
    session, pause = paused(any_store, email_model(reply("Done.")))
    decide(any_store, pause.id, {"call_send_email": Approve()}, by="alice")
    clock.now += 3600
    assert deadlines.pause_state(session, pause) == "decided"
    with pytest.raises(Conflict, match="has not expired|already"):
        reject_expired(any_store, pause.id)
    steps = list(resume(any_store, pause.id, call=ScriptedModel([reply("Done.")]), tools=[send_email]))
    assert steps[-1].reason == "completed"


def test_the_expiry_policy_rejects_as_the_system(any_store, clock):
    """``worker --on-expiry reject``: a decision by the system, not a person."""
    SENT.clear()
    session, pause = paused(any_store, email_model())
    clock.now += 61
    model = ScriptedModel([reply("Not sent, then.")])
    list(work(any_store, until_idle=True, call=model, tools=[send_email]))  # keep: untouched
    assert session.children(pause) == [] and model.calls == []
    list(work(any_store, until_idle=True, on_expiry="reject", call=model, tools=[send_email]))
    (decision,) = session.children(pause)
    assert decision.kind == "decision"
    assert decision.payload["by"] == "system" and decision.payload["reason"] == "expired"
    assert decision.payload["decisions"]["call_send_email"]["action"] == "reject"
    assert SENT == []
    told = [m for m in model.calls[0]["messages"] if m.get("role") == "tool"]
    assert "expired" in told[-1]["content"]
    assert deadlines.pause_state(session, pause) == "decided"
    assert any_store.pending() == []


def test_expired_in_pending_show_and_json(db_target, clock):
    """The CLI says ``expired`` and refuses to decide it in one line, writing nothing."""
    with Store(db_target) as store:
        session, pause = paused(store, email_model())
    runner = CliRunner()
    cli_db = ["--db", db_target]
    listed = runner.invoke(cli, [*cli_db, "pending"])
    assert f"pending (expires {deadlines.stamp(clock.now + 60)})" in listed.output
    clock.now += 61
    listed = runner.invoke(cli, [*cli_db, "pending"])
    assert listed.exit_code == 0 and "expired at" in listed.output, listed.output
    (entry,) = json.loads(runner.invoke(cli, [*cli_db, "pending", "--json"]).output)
    assert entry["state"] == "expired" and entry["expires_at"] == pause.payload["expires_at"]
    shown = runner.invoke(cli, [*cli_db, "show", pause.id])
    assert "state    expired at" in shown.output
    assert json.loads(runner.invoke(cli, [*cli_db, "show", pause.id, "--json"]).output)["state"] == "expired"
    refused = runner.invoke(cli, [*cli_db, "approve", pause.id, "--by", "alice"])
    assert refused.exit_code != 0
    assert refused.output.strip().count("\n") == 0 and "expired at" in refused.output, refused.output
    with Store(db_target) as store:
        assert store.session(session.id).children(pause.id) == []


def test_cli_pause_expires_takes_a_unit(tmp_path, clock):
    script = tmp_path / "script.jsonl"
    script.write_text(json.dumps(reply("Wiring.", tool_call("wire_money", {"amount": 5}))) + "\n")
    tools = tmp_path / "tools.py"
    tools.write_text("from test_approvals import wire_money\n")
    db = str(tmp_path / "s.db")
    result = CliRunner().invoke(
        cli,
        [
            "--db",
            db,
            "run",
            "--new",
            "wire it",
            "--model",
            f"script:{script}",
            "--tools",
            "test_approvals:wire_money",
            "--pause-expires",
            "1h",
        ],
    )
    assert result.exit_code == 3, result.output  # paused
    with Store(db) as store:
        (pause,) = store.pending()
    assert pause.payload["expires_at"] == deadlines.stamp(clock.now + 3600)
    bad = CliRunner().invoke(
        cli, ["--db", db, "run", "again", "--model", f"script:{script}", "--pause-expires", "soon"]
    )
    assert bad.exit_code == 2 and "is not a duration" in bad.output


# -- the inbox and decider tokens ------------------------------------------


def deciders_file(tmp_path: Path) -> tuple[Path, str, str]:
    """A deciders file made by ``sessiontree decider-token``: (path, alice's, bob's token)."""
    path = tmp_path / "deciders"
    tokens = []
    for name in ("alice", "bob"):
        made = CliRunner().invoke(cli, ["decider-token", name, "--file", str(path)])
        assert made.exit_code == 0, made.output
        tokens.append(made.stdout.strip())
    return path, tokens[0], tokens[1]


def test_the_inbox_shows_expired_and_refuses_its_decision(db_target, client, clock):
    with Store(db_target) as store:
        session, pause = paused(store, email_model())
    c = client(db_target, allow_decide=True, token="t0k")
    (item,) = c.get("/api/inbox").json()
    assert item["state"] == "pending" and item["expires_at"] == pause.payload["expires_at"]
    clock.now += 61
    (item,) = c.get("/api/inbox").json()
    assert item["state"] == "expired"
    assert c.get(f"/api/sessions/{session.id}/data").json()["expired"] == [pause.id]
    body = {"decisions": {"call_send_email": {"action": "approve"}}}
    refused = c.post(f"/api/pauses/{pause.id}/decision", json=body, headers={"X-Sessiontree-Token": "t0k"})
    assert refused.status_code == 409 and "expired at" in refused.json()["error"]
    with Store(db_target) as store:
        assert store.session(session.id).children(pause.id) == []


def test_a_decider_token_records_who_decided(db_target, client, tmp_path):
    """Before: ``by`` was whatever the request said ("web" by default), from anyone with
    the one server token."""
    from sessiontree.deciders import load

    path, alice, bob = deciders_file(tmp_path)
    text = path.read_text()
    assert alice not in text and bob not in text and text.count("sha256:") == 2  # hashes only
    with Store(db_target) as store:
        session, pause = paused(store, email_model())
    c = client(db_target, token="t0k", deciders=load(path))
    url = f"/api/pauses/{pause.id}/decision"
    body = {"decisions": {"call_send_email": {"action": "approve"}}}
    assert c.post(url, json=body, headers={"X-Sessiontree-Token": "t0k"}).status_code == 401
    assert c.post(url, json=body, headers={"Authorization": f"Bearer {alice}x"}).status_code == 403
    assert c.post(url, json=body, headers={"Authorization": "Bearer t0k"}).status_code == 403
    lying = {**body, "by": "bob"}
    assert c.post(url, json=lying, headers={"Authorization": f"Bearer {alice}"}).status_code == 400
    with Store(db_target) as store:
        assert store.session(session.id).children(pause.id) == []  # nothing written so far
    ok = c.post(url, json=body, headers={"Authorization": f"Bearer {alice}"})
    assert ok.status_code == 200, ok.text
    with Store(db_target) as store:
        assert store.node(ok.json()["decision"]).payload["by"] == "alice"


def test_a_deciders_file_holding_a_token_is_refused(tmp_path):
    from sessiontree.deciders import load

    path = tmp_path / "deciders"
    path.write_text("# who may decide\nalice sha256:" + "a" * 64 + "\nbob hunter2\n")
    with pytest.raises(ValueError, match=r"deciders line 3: expected 'NAME sha256:<64 hex digits>'"):
        load(path)
    result = CliRunner().invoke(cli, ["--db", str(tmp_path / "s.db"), "serve", "--deciders", str(path)])
    assert result.exit_code == 2 and "line 3" in result.output


# -- notifications ---------------------------------------------------------


class Receiver:
    """A webhook receiver on 127.0.0.1: records each POST; ``hold`` keeps it from answering."""

    def __init__(self, hold: bool = False) -> None:
        self.posts: list[tuple[dict[str, str], bytes]] = []
        self.got = threading.Event()
        self.release = threading.Event()
        if not hold:
            self.release.set()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.posts.append((dict(self.headers), body))
                receiver.got.set()
                receiver.release.wait(30)
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    made: list[Receiver] = []

    def make(hold: bool = False) -> Receiver:
        made.append(Receiver(hold))
        return made[-1]

    yield make
    for r in made:
        r.close()


def test_a_webhook_gets_one_signed_post_per_pause(any_store, receiver):
    r = receiver()
    hook = Webhook(r.url, SECRET)
    session, pause = paused(any_store, email_model(), on_pause=hook)
    # a run that stops at an existing pause writes no new one, and sends nothing
    assert (
        list(run(any_store, session, call=email_model(), tools=[send_email], on_pause=hook))[-1].reason
        == "paused"
    )
    assert hook.wait(10) and hook.delivered == 1 and hook.failed == 0
    ((headers, body),) = r.posts
    assert verify(SECRET, body, headers[SIGNATURE_HEADER])
    assert not verify("another secret", body, headers[SIGNATURE_HEADER])
    document = json.loads(body)
    assert document["pause"] == pause.id and document["session"] == session.id
    assert (
        document["calls"][0]["name"] == "send_email" and document["expires_at"] == pause.payload["expires_at"]
    )
    assert headers["X-Sessiontree-Delivery"] == pause.id


def test_a_receiver_that_never_answers_does_not_hold_up_the_commit(db_target, receiver):
    r = receiver(hold=True)
    hook = Webhook(r.url, SECRET, attempts=1, deadline=30)
    with Store(db_target) as store:
        session, pause = paused(store, email_model(), on_pause=hook)
    # the run has returned with its pause committed, and the delivery is still open
    assert r.got.wait(10) and not r.release.is_set()
    assert hook.delivered == hook.failed == 0
    with Store(db_target) as other:
        assert [p.id for p in other.pending()] == [pause.id]
    r.release.set()
    assert hook.wait(10) and hook.delivered == 1


def test_a_dead_receiver_is_retried_then_logged(any_store, caplog):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    hook = Webhook(f"http://127.0.0.1:{port}/hook", SECRET, attempts=3, backoff=0.01, deadline=5)
    with caplog.at_level(logging.WARNING, logger="sessiontree.notify"):
        _, pause = paused(any_store, email_model(), on_pause=hook)
        assert hook.wait(10)
    assert hook.failed == 1 and hook.delivered == 0
    (record,) = [r for r in caplog.records if r.name == "sessiontree.notify"]
    assert pause.id in record.getMessage() and "after 3 attempts" in record.getMessage()


def test_on_pause_is_called_after_the_commit_and_cannot_break_the_run(db_target, caplog):
    seen = []

    def on_pause(node):
        with Store(db_target) as other:  # another connection sees it: it is committed
            seen.append(other.node(node.id).kind)
        raise RuntimeError("the pager is down")

    with caplog.at_level(logging.ERROR, logger="sessiontree.notify"), Store(db_target) as store:
        paused(store, email_model(), on_pause=on_pause)
    assert seen == ["pause"]
    assert any("the pager is down" in (r.exc_text or "") or r.exc_info for r in caplog.records)


def test_cli_webhook_flag(tmp_path, receiver, monkeypatch):
    r = receiver()
    script = tmp_path / "script.jsonl"
    script.write_text(json.dumps(reply("Wiring.", tool_call("wire_money", {"amount": 5}))) + "\n")
    db = str(tmp_path / "s.db")
    base = [
        "--db",
        db,
        "run",
        "--new",
        "wire it",
        "--model",
        f"script:{script}",
        "--tools",
        "test_approvals:wire_money",
    ]
    missing = CliRunner().invoke(cli, [*base, "--webhook", r.url])
    assert missing.exit_code == 2 and "SESSIONTREE_WEBHOOK_SECRET" in missing.output
    monkeypatch.setenv("HOOK_SECRET", SECRET)
    result = CliRunner().invoke(cli, [*base, "--webhook", r.url, "--webhook-secret-env", "HOOK_SECRET"])
    assert result.exit_code == 3, result.output  # paused
    ((headers, body),) = r.posts
    assert verify(SECRET, body, headers[SIGNATURE_HEADER])


def webhook_run(tmp_path: Path, url: str, monkeypatch: pytest.MonkeyPatch):
    """`run --webhook URL` that pauses before wire_money; its result."""
    script = tmp_path / "script.jsonl"
    script.write_text(json.dumps(reply("Wiring.", tool_call("wire_money", {"amount": 5}))) + "\n")
    monkeypatch.setenv("SESSIONTREE_WEBHOOK_SECRET", SECRET)
    args = ["--db", str(tmp_path / "s.db"), "run", "--new", "wire it", "--model", f"script:{script}"]
    return CliRunner().invoke(cli, [*args, "--tools", "test_approvals:wire_money", "--webhook", url])


def test_cli_waiting_for_a_slow_receiver_says_so_and_names_only_its_host(tmp_path, receiver, monkeypatch):
    from sessiontree.cli import running

    r = receiver(hold=True)  # never answers in time
    monkeypatch.setattr(running, "QUIET_WAIT", 0.0)
    monkeypatch.setattr(running, "Webhook", lambda url, secret: Webhook(url, secret, attempts=1, deadline=1))
    result = webhook_run(tmp_path, r.url + "?token=secret-in-url", monkeypatch)
    assert result.exit_code == 3, result.output  # paused, and the exit code says so
    host = r.url.split("/")[2]
    assert f"webhook: waiting for {host} to take the pause (up to 1 s;" in result.stderr
    assert "secret-in-url" not in result.output
    with Store(tmp_path / "s.db") as store:
        assert len(store.pending()) == 1  # committed before the wait


def test_cli_ctrl_c_while_waiting_for_a_receiver_keeps_the_exit_code(tmp_path, receiver, monkeypatch):
    r = receiver(hold=True)
    waits = iter([False])  # the quiet wait ends undelivered; then the user presses Ctrl-C

    def wait(self: Webhook, timeout: float | None = None) -> bool:
        if next(waits, None) is None:
            raise KeyboardInterrupt
        return False

    monkeypatch.setattr(Webhook, "wait", wait)
    result = webhook_run(tmp_path, r.url, monkeypatch)
    assert result.exit_code == 3, result.output
    assert result.stderr.endswith("webhook: stopped waiting; the delivery was cut off\n")
    with Store(tmp_path / "s.db") as store:
        assert len(store.pending()) == 1


def test_cli_worker_on_expiry_reject(db_target, clock, tmp_path):
    with Store(db_target) as store:
        model = ScriptedModel([reply("Wiring.", tool_call("wire_money", {"amount": 5}))])
        session, pause = paused(store, model, tools=[wire_money], pause_expires=60)
    clock.now += 61
    script = tmp_path / "script.jsonl"
    # a script's reply k+1 follows k assistant messages since the user's: line 1 was "Wiring."
    lines = [
        reply("Wiring.", tool_call("wire_money", {"amount": 5})),
        reply("No answer, so nothing was wired."),
    ]
    script.write_text("".join(json.dumps(line) + "\n" for line in lines))
    base = ["--db", db_target, "worker", "--until-idle", "--model", f"script:{script}"]
    kept = CliRunner().invoke(cli, [*base, "--tools", "test_approvals:wire_money"])
    assert kept.exit_code == 0, kept.output
    with Store(db_target) as store:
        assert store.session(session.id).children(pause.id) == []  # keep: left expired
    result = CliRunner().invoke(cli, [*base, "--tools", "test_approvals:wire_money", "--on-expiry", "reject"])
    assert result.exit_code == 0, result.output
    assert "No answer, so nothing was wired." in result.output
    with Store(db_target) as store:
        (decision,) = store.session(session.id).children(pause.id)
        assert decision.payload["by"] == "system" and decision.payload["reason"] == "expired"


# -- serve --work: the same policies as a worker -----------------------------------


def recorded_pause(db: str, tmp_path: Path, lines: list[dict], *flags: str) -> str:
    """A CLI run on a script that pauses before wire_money, its recipe recorded; the pause id."""
    script = tmp_path / "serve-script.jsonl"
    script.write_text("".join(json.dumps(line) + "\n" for line in lines))
    args = ["--db", db, "run", "--new", "wire it", "--model", f"script:{script}"]
    result = CliRunner().invoke(cli, [*args, "--tools", "test_approvals:wire_money", *flags])
    assert result.exit_code == 3, result.output
    with Store(db) as store:
        (pause,) = store.pending()
    return pause.id


def until(condition, seconds: float = 30.0) -> None:
    """Until ``condition()`` holds: what the worker thread does is seen in the store."""
    import time

    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the worker did not get there in time"
        time.sleep(0.05)


def test_serve_work_on_expiry_reject_continues_an_expired_pause_as_the_system(db_target, clock, tmp_path):
    from sessiontree.cli.view import start_worker

    lines = [reply("Wiring.", tool_call("wire_money", {"amount": 5})), reply("Nothing was wired.")]
    pause = recorded_pause(db_target, tmp_path, lines, "--pause-expires", "60s")
    clock.now += 61
    worker = start_worker(db_target, poll=0.05, on_expiry="reject")
    try:
        with Store(db_target) as store:
            until(lambda: store.session(store.node(pause).session_id).node("main").kind == "message")
            (decision,) = store.session(store.node(pause).session_id).children(pause)
            assert (decision.payload["by"], decision.payload["reason"]) == ("system", "expired")
    finally:
        assert worker.stop()


def test_serve_work_webhook_gets_the_pauses_its_runs_reach(db_target, tmp_path, receiver):
    from sessiontree.cli.view import start_worker

    r = receiver()
    wire = reply("Wiring.", tool_call("wire_money", {"amount": 5}))
    again = reply("And more.", tool_call("wire_money", {"amount": 7}, id="call_2"))
    first = recorded_pause(db_target, tmp_path, [wire, again])
    worker = start_worker(db_target, poll=0.05, hook=Webhook(r.url, SECRET))
    try:
        with Store(db_target) as store:
            decide(store, first, {next(iter(store.node(first).payload["calls"]))["id"]: Approve()})
            until(lambda: bool(store.pending()))  # the resumed run paused again
            (second,) = store.pending()
        assert r.got.wait(10)
    finally:
        assert worker.stop()
    ((headers, body),) = r.posts  # one POST, for the pause the worker's run reached
    assert json.loads(body)["pause"] == second.id and verify(SECRET, body, headers[SIGNATURE_HEADER])


def test_serve_on_expiry_and_webhook_need_work(tmp_path):
    for flags, named in (
        (["--on-expiry", "reject"], "--on-expiry"),
        (["--webhook", "http://127.0.0.1:1/"], "--webhook"),
    ):
        result = CliRunner().invoke(cli, ["--db", str(tmp_path / "s.db"), "serve", *flags])
        assert result.exit_code == 2
        assert result.output.endswith(f"Error: {named} acts on the runs --work carries on: add --work\n")
