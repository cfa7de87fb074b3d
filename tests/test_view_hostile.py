"""``sessiontree serve`` against hostile or unlucky requests, without a browser: the login
cookie is not the token, searches are bounded, decisions are checked before they are
written and never stall the server, every stored string travels, and an IPv6 host works."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from sessiontree import Store
from sessiontree.errors import Busy, OutcomeUnknown
from sessiontree.testing import tool_call

from viewdata import demo_store

pytest.importorskip("starlette", reason="the web extra is not installed")

from sessiontree.view import server  # noqa: E402  (after the skip: it needs Starlette)

TOKEN = "t0k"
AUTH = {"X-Sessiontree-Token": TOKEN}
CALL = "call_send_email"  # the demo's pending call


@pytest.fixture
def demo(tmp_path):
    db = tmp_path / "demo.db"
    session_id, pause_id = demo_store(db)
    return db, session_id, pause_id


@pytest.fixture
def client(app_client):
    """``client(db, **options)``: the serve app on ``db``, called in process."""
    return lambda db, **options: app_client(server.create_app(db, **options))


def pending_ids(db) -> list[str]:
    with Store(db, readonly=True) as store:
        return [p.id for p in store.pending()]


# -- 1. the login cookie reads, and only reads ------------------------------------------


def test_the_login_cookie_holds_a_read_secret_named_by_port_never_the_token(demo, client):
    db, session_id, pause_id = demo
    c = client(db, login=True, token=TOKEN, allow_decide=True)
    went = c.get("/login", params={"token": TOKEN}, follow_redirects=False)
    assert went.status_code == 303 and went.headers["location"] == f"/#token={TOKEN}"
    name, _, rest = went.headers["set-cookie"].partition("=")
    value = rest.partition(";")[0]
    assert TOKEN not in value and value == server.read_secret(TOKEN)
    assert name == server.login_cookie(8765) == "sessiontree_read_8765"  # the client's server port
    assert c.cookies.get(name) == value
    assert [s["id"] for s in c.get("/api/sessions").json()] == [session_id]  # the cookie reads
    # what another service on this host received with the cookie decides nothing, and
    # does not stand in for the token in the header either
    body = {"decisions": {CALL: {"action": "approve"}}}
    url = f"/api/pauses/{pause_id}/decision"
    refused = c.post(url, json=body, headers={"X-Sessiontree-Token": value})
    assert refused.status_code == 403
    assert refused.json() == {"error": "missing or wrong X-Sessiontree-Token header"}
    assert pending_ids(db) == [pause_id]
    c.cookies.clear()
    assert c.get("/api/sessions", headers={"X-Sessiontree-Token": value}).status_code == 401
    # a login to the server on another port is that server's, not this one's
    c.cookies.set(server.login_cookie(8766), value)
    assert c.get("/api/sessions").status_code == 401
    # the token in the header still decides, as the page does
    assert c.post(url, json=body, headers=AUTH).status_code == 200


# -- 2. searches are bounded -------------------------------------------------------------


def test_search_refuses_long_and_many_worded_queries_naming_the_limit(demo, client):
    db, _, _ = demo
    c = client(db)
    long = c.get("/api/search", params={"q": "w" * 501})
    assert long.status_code == 400
    assert long.json() == {"error": "the search query has 501 characters; at most 500 are searched"}
    many = c.get("/api/search", params={"q": " OR ".join(["weather"] * 33)})
    assert many.status_code == 400
    assert many.json() == {"error": "the search query has 33 words; at most 32 are searched"}
    # the limits themselves pass: operators are not words
    at_limit = c.get("/api/search", params={"q": " OR ".join(["weather"] * 32)})
    assert at_limit.status_code == 200 and at_limit.json()


def test_a_search_over_its_time_is_stopped_with_a_400(tmp_path, client, monkeypatch):
    db = tmp_path / "many.db"
    with Store(db) as store:
        s = store.create_session("many")
        with store.transaction():
            for i in range(400):
                s.append({"role": "user", "content": f"lorem ipsum {i}"})
    c = client(db)
    monkeypatch.setattr(server, "SEARCH_SECONDS", 0.0)  # any search is over its time
    stopped = c.get("/api/search", params={"q": "lorem OR ipsum"})
    assert stopped.status_code == 400
    assert stopped.json() == {
        "error": "the search took longer than 0 s and was stopped; search for fewer or rarer words"
    }
    monkeypatch.setattr(server, "SEARCH_SECONDS", 5.0)
    hits = c.get("/api/search", params={"q": "lorem OR ipsum"})  # the next one is not affected
    assert hits.status_code == 200 and len(hits.json()) == server.SEARCH_LIMIT


# -- 3. a decision waits in a thread, and a busy database is a 503 ----------------------


def test_a_decision_waiting_for_the_database_does_not_stall_other_requests(demo, monkeypatch):
    import httpx

    db, _, pause_id = demo
    entered, answered = threading.Event(), threading.Event()
    real_decide = server.decide

    def slow_decide(store, pause, decisions, *, by=None):  # as decide waits for a writer's lock
        entered.set()
        assert answered.wait(5), "no other request was answered while the decision waited"
        return real_decide(store, pause, decisions, by=by)

    monkeypatch.setattr(server, "decide", slow_decide)
    app = server.create_app(db, allow_decide=True, token=TOKEN)

    async def scenario():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8765") as c:
            body = {"decisions": {CALL: {"action": "approve"}}}
            post = asyncio.create_task(c.post(f"/api/pauses/{pause_id}/decision", json=body, headers=AUTH))
            while not entered.is_set():  # never resumes if the decision holds the event loop
                await asyncio.sleep(0.01)
            read = await c.get("/api/sessions")
            answered.set()
            return read, await post

    read, post = asyncio.run(scenario())
    assert read.status_code == 200 and post.status_code == 200, post.text
    assert pending_ids(db) == []


def test_a_busy_database_is_a_503_saying_to_try_again(demo, client, monkeypatch):
    db, _, pause_id = demo

    def busy(*args, **kwargs):
        raise Busy("the database is locked by another writer (waited 30 s)")

    monkeypatch.setattr(server, "decide", busy)
    c = client(db, allow_decide=True, token=TOKEN)
    r = c.post(
        f"/api/pauses/{pause_id}/decision", json={"decisions": {CALL: {"action": "approve"}}}, headers=AUTH
    )
    assert r.status_code == 503 and r.headers["retry-after"] == "5"
    assert r.json() == {"error": "the database is locked by another writer (waited 30 s); try again later"}


def test_a_decision_whose_commit_was_lost_is_a_503_naming_it_not_try_again(demo, client, monkeypatch):
    db, _, pause_id = demo
    said = "lost the connection to PostgreSQL at postgresql://db while committing: ..."

    def lost(*args, **kwargs):
        raise OutcomeUnknown(said, node_id="01a2-decision", backend_pid=7)

    monkeypatch.setattr(server, "decide", lost)
    c = client(db, allow_decide=True, token=TOKEN)
    r = c.post(
        f"/api/pauses/{pause_id}/decision", json={"decisions": {CALL: {"action": "approve"}}}, headers=AUTH
    )
    assert r.status_code == 503 and "retry-after" not in r.headers  # it may be recorded already
    assert r.json() == {"error": said, "decision": "01a2-decision"}


# -- 4. a lone surrogate in stored data -------------------------------------------------


def test_a_lone_surrogate_in_a_payload_travels_in_every_json_reply(tmp_path, client):
    db = tmp_path / "s.db"
    with Store(db) as store:
        s = store.create_session("surrogates")
        s.append({"role": "user", "content": "half a pair: \udc00"})
        asked = s.append(
            {"role": "assistant", "content": None, "tool_calls": [tool_call("send", "{}", id="c1")]}
        )
        call = {"id": "c1", "name": "send", "arguments": '{"to": "\udc00"}'}
        pause = s.append({"reason": "ask \udc00", "assistant_id": asked.id, "calls": [call]}, kind="pause")
    c = client(db)
    inbox = c.get("/api/inbox")
    assert inbox.status_code == 200
    (item,) = inbox.json()
    assert item["pause"] == pause.id and item["reason"] == "ask \udc00"
    assert item["calls"][0]["arguments"] == '{"to": "\udc00"}'
    data = c.get(f"/api/sessions/{s.id}/data")
    assert data.status_code == 200
    assert data.json()["nodes"][0]["payload"]["content"] == "half a pair: \udc00"
    assert "\\udc00" in data.text  # an escape: the reply itself is valid UTF-8
    assert c.get("/api/search", params={"q": "half"}).status_code == 200


# -- 5. bodies: nesting and size --------------------------------------------------------


def test_a_deeply_nested_or_huge_decision_body_is_refused(demo, client):
    db, _, pause_id = demo
    c = client(db, allow_decide=True, token=TOKEN)
    url = f"/api/pauses/{pause_id}/decision"
    deep = c.post(url, content=b"[" * 100_000, headers=AUTH)
    assert deep.status_code == 400 and deep.json() == {"error": "bad decision: the body is nested too deeply"}
    nested = {"decisions": {CALL: {"action": "edit", "arguments": {"a": json.loads("[" * 300 + "]" * 300)}}}}
    too_deep = c.post(url, json=nested, headers=AUTH)  # parses, but the store keeps 256 levels at most
    assert too_deep.status_code == 400 and "nested too deeply" in too_deep.json()["error"]
    huge = b'{"decisions": {}, "by": "' + b"x" * server.MAX_BODY + b'"}'
    declared = c.post(url, content=huge, headers=AUTH)
    assert declared.status_code == 413
    assert declared.json() == {"error": "the request body is over 1048576 bytes; a decision needs far less"}

    async def chunks():  # no Content-Length: counted as it arrives
        for _ in range(300):
            yield b" " * 4096

    streamed = c.post(url, content=chunks(), headers=AUTH)
    assert streamed.status_code == 413
    assert pending_ids(db) == [pause_id]


# -- 6. edits and reasons are checked as the CLI checks them ----------------------------


@pytest.mark.parametrize(
    ("decision", "error"),
    [
        (
            {"action": "edit", "arguments": "not an object"},
            f"decisions.{CALL}.arguments must be a JSON object, not text",
        ),
        (
            {"action": "edit", "arguments": [1, 2]},
            f"decisions.{CALL}.arguments must be a JSON object, not an array",
        ),
        (
            {"action": "edit", "arguments": None},
            f"decisions.{CALL}.arguments must be a JSON object, not null",
        ),
        (
            {"action": "edit", "arguments": 0},
            f"decisions.{CALL}.arguments must be a JSON object, not a number",
        ),
        ({"action": "edit", "arguments": ""}, f"decisions.{CALL}.arguments must be a JSON object, not text"),
        (
            {"action": "edit"},
            f"decisions.{CALL}.arguments is missing: an edit gives the call's new arguments",
        ),
        ({"action": "reject", "reason": {"x": 1}}, f"decisions.{CALL}.reason must be text, not an object"),
        (
            {"action": "approve", "arguments": {}},
            f"decisions.{CALL} has field(s) 'arguments' that 'approve' does not take",
        ),
        (
            {"action": "explode"},
            f"decisions.{CALL}.action must be 'approve', 'reject' or 'edit', not 'explode'",
        ),
        ("approve", f"decisions.{CALL} must be an object with an 'action', not text"),
    ],
)
def test_malformed_decisions_are_refused_naming_the_field(demo, client, decision, error):
    db, _, pause_id = demo
    c = client(db, allow_decide=True, token=TOKEN)
    r = c.post(f"/api/pauses/{pause_id}/decision", json={"decisions": {CALL: decision}}, headers=AUTH)
    assert r.status_code == 400 and r.json() == {"error": f"bad decision: {error}"}
    assert pending_ids(db) == [pause_id]


def test_the_cli_and_the_web_share_the_rule_for_edited_arguments():
    from sessiontree.decisions import edit_arguments

    assert edit_arguments({"to": "bob"}) == {"to": "bob"}
    for value in ([1], "x", None, 0):
        with pytest.raises(ValueError, match="must be a JSON object"):
            edit_arguments(value)


# -- 7. a malformed request is a 400; only a second decision is a 409 -------------------


def test_malformed_decision_requests_are_400_and_a_second_decision_409(demo, client):
    db, session_id, pause_id = demo
    c = client(db, allow_decide=True, token=TOKEN)
    url = f"/api/pauses/{pause_id}/decision"
    empty = c.post(url, json={"decisions": {}}, headers=AUTH)
    assert empty.status_code == 400
    assert empty.json() == {"error": "bad decision: 'decisions' is empty: decide at least one call"}
    unknown = c.post(url, json={"decisions": {"call_nope": {"action": "approve"}}}, headers=AUTH)
    assert unknown.status_code == 400
    assert unknown.json() == {
        "error": f"bad decision: pause {pause_id} has no call(s) call_nope; its calls are {CALL}"
    }
    for body, error in [
        ([], "the body must be a JSON object, not an array"),
        ({"decisions": []}, "'decisions' must be an object of call id -> decision, not an array"),
        ({"decisions": {CALL: {"action": "approve"}}, "by": 7}, "'by' must be text, not a number"),
        ({"decision": {}}, "unknown field(s) 'decision'; a decision has 'decisions' and 'by'"),
    ]:
        r = c.post(url, json=body, headers=AUTH)
        assert r.status_code == 400 and r.json() == {"error": f"bad decision: {error}"}, body
    with Store(db) as store:
        message = store.session(session_id).head("main")
    not_a_pause = c.post(
        f"/api/pauses/{message.id}/decision", json={"decisions": {CALL: {"action": "approve"}}}, headers=AUTH
    )
    assert not_a_pause.status_code == 404
    assert not_a_pause.json() == {
        "error": f"no pause {message.id}: node {message.id} is a {message.kind} node"
    }
    assert pending_ids(db) == [pause_id]
    body = {"decisions": {CALL: {"action": "approve"}}}
    assert c.post(url, json=body, headers=AUTH).status_code == 200
    again = c.post(url, json=body, headers=AUTH)
    assert again.status_code == 409 and again.json() == {"error": f"pause {pause_id} already has a decision"}


# -- 8. an IPv6 host ----------------------------------------------------------------------


def test_an_ipv6_host_is_answered_in_its_bracketed_form(demo, app_client):
    from sessiontree.cli.view import host_names

    db, _, _ = demo
    assert host_names("::1") == ["127.0.0.1", "[::1]", "localhost"]
    assert host_names("[::1]") == host_names("::1")
    assert host_names("0:0:0:0:0:0:0:1") == ["127.0.0.1", "[0:0:0:0:0:0:0:1]", "[::1]", "localhost"]
    assert host_names("192.168.1.5") == ["127.0.0.1", "192.168.1.5", "localhost"]
    c = app_client(server.create_app(db, hosts=host_names("::1")))
    assert c.get("/api/sessions", headers={"host": "[::1]:8765"}).status_code == 200
    assert c.get("/api/sessions", headers={"host": "[::2]:8765"}).status_code == 400


# -- 9, 10. the live view's baseline, and a session that is gone ------------------------


def test_the_view_carries_the_version_it_was_built_from_and_a_gone_session_is_404(demo, client):
    from test_view import embedded

    db, session_id, _ = demo
    c = client(db)
    built = embedded(c.get(f"/s/{session_id}").text, "st-config")["live"]["built"]
    assert built == c.get(f"/api/sessions/{session_id}/version").json()["version"]
    with Store(db) as store:
        store.session(session_id).append({"role": "user", "content": "after the page"})
    assert c.get(f"/api/sessions/{session_id}/version").json()["version"] != built
    with Store(db) as store:
        store.delete_session(session_id, permanently=True)
    gone = c.get(f"/api/sessions/{session_id}/version")
    assert gone.status_code == 404 and gone.json() == {"error": f"no session {session_id!r}"}
