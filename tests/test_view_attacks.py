"""``sessiontree serve`` against hostile or unlucky requests, without a browser: the login
cookie is not the token, searches are bounded, decisions are checked before they are
written and never stall the server, every stored string travels, and an IPv6 host works."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

from sessiontree import Store, render_html
from sessiontree.errors import Busy, OutcomeUnknown
from sessiontree.testing import tool_call

pytest.importorskip("starlette", reason="the web extra is not installed")

from sessiontree.view import server  # noqa: E402  (after the skip: it needs Starlette)

TOKEN = "t0k"
AUTH = {"X-Sessiontree-Token": TOKEN}
CALL = "call_send_email"  # the demo's pending call


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
    deep_value = json.loads("[" * 300 + "]" * 300)  # parses, but the store keeps 256 levels at most
    nested = {
        "decisions": {CALL: {"action": "edit", "arguments": {"to": deep_value, "subject": "", "body": ""}}}
    }
    too_deep = c.post(url, json=nested, headers=AUTH)  # send_email's schema refuses it first
    assert too_deep.status_code == 400
    assert too_deep.json()["error"].startswith(
        f"bad decision: edit of call {CALL} (send_email): arguments.to: expected a string, got [[[["
    )
    assert pending_ids(db) == [pause_id]
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


# -- 11. one redaction for everything served --------------------------------------------

# Each kind of credential the view's redactor knows, each with its own secret.
PLANTED = {
    "bearer": "Bearer sk-plant-q7w8e9r0t1y2",
    "authorization": "Authorization: sk-plant-a1s2d3f4g5h6",
    "assigned": "authorization=sk-plant-z1x2c3v4b5n6",
    "json": '{"Authorization": "sk-plant-p0o9i8u7y6t5"}',
    "basic": "Authorization: Basic dXNlcjpwYXNzd29yZDQ0",
}
SECRETS = ["q7w8e9r0t1y2", "a1s2d3f4g5h6", "z1x2c3v4b5n6", "p0o9i8u7y6t5", "dXNlcjpwYXNzd29yZDQ0"]


def planted_store(target: str) -> list[str]:
    """One session per kind of credential, planted in every string the view serves: the
    title, a message (searched), a branch, a checkpoint, a pause's reason and arguments."""
    with Store(target) as store:
        ids = []
        for kind, text in PLANTED.items():
            s = store.create_session(f"{kind}: {text}")
            note = s.append({"role": "user", "content": f"the key is {text} for now"})
            s.fork(text, at=note.id)
            s.checkpoint(f"cp {text}", at=note.id)
            call = {"id": "c1", "name": "send", "arguments": json.dumps({"header": text})}
            s.append({"reason": f"send {text}?", "calls": [call]}, kind="pause")
            ids.append(s.id)
        return ids


def test_every_page_and_reply_redacts_each_kind_of_credential(db_target, client):
    ids = planted_store(db_target)
    c = client(db_target)
    urls = ["/", "/api/sessions", "/api/inbox"]
    urls += [f"/s/{sid}" for sid in ids] + [f"/api/sessions/{sid}/data" for sid in ids]
    # searches for the scheme, the field and each secret itself: the snippets mark the
    # match (a credential cut from its "Bearer" or inside «»), the hits name the branches
    urls += [f"/api/search?q={q}" for q in ["Bearer", "Authorization", "key", "plant", *SECRETS]]
    urls.append("/s/Bearer%20sk-plant-q7w8e9r0t1y2")  # an error quoting the request
    for url in urls:
        r = c.get(url)
        assert r.status_code in (200, 404), (url, r.status_code, r.text)
        leaked = [secret for secret in SECRETS if secret in r.text]
        assert not leaked, (url, leaked)
        assert "[redacted]" in r.text, url
    with Store(db_target, readonly=True) as store:  # the file `sessiontree html` writes
        for sid in ids:
            html = render_html(store, sid)
            assert "[redacted]" in html and not [secret for secret in SECRETS if secret in html]
    hits = c.get("/api/search", params={"q": "Bearer"}).json()
    assert hits and all("sk-plant" not in h["snippet"] for h in hits)
    assert any("[redacted]" in name for h in hits for name in h["branches"])
    # what is not a credential is shown as it is
    (listing,) = [s for s in c.get("/api/sessions").json() if s["id"] == ids[0]]
    assert listing["title"] == "bearer: Bearer [redacted]"
    data = c.get(f"/api/sessions/{ids[4]}/data").json()
    assert data["session"]["title"] == "basic: Authorization: [redacted]"
    assert data["nodes"][0]["payload"]["content"] == "the key is Authorization: [redacted] for now"
    assert {b["name"] for b in data["branches"]} == {"main", "Authorization: [redacted]"}
    (pause,) = [p for p in c.get("/api/inbox").json() if p["session"] == ids[3]]
    assert json.loads(pause["calls"][0]["arguments"]) == {"header": '{"Authorization": "[redacted]"}'}


def test_redaction_finds_a_credential_escaped_in_arguments_and_changes_nothing_twice():
    from sessiontree.redact import Redactor

    redact = Redactor({})
    for text in PLANTED.values():
        once = redact(f"{text}, and more")
        assert "[redacted]" in once and "sk-plant" not in once and once.endswith(" and more")
        assert redact(once) == once
    # a second pass used to take the word after an already redacted value
    assert redact(redact("Authorization: Basic dXNl and more")) == "Authorization: [redacted] and more"
    # a tool call's arguments are JSON text inside JSON: the quotes come escaped
    arguments = json.dumps({"headers": json.dumps({"Authorization": "sk-plant-p0o9i8u7y6t5"})})
    assert json.loads(json.loads(redact(arguments))["headers"]) == {"Authorization": "[redacted]"}


# -- 12. nothing a browser read is cached ------------------------------------------------


def test_every_reply_says_no_store_and_vary_cookie(db_target, client):
    ids = planted_store(db_target)
    with Store(db_target, readonly=True) as store:
        pause = store.pending()[0].id
    c = client(db_target, login=True, token=TOKEN, allow_decide=True)
    replies = [c.get("/login", params={"token": TOKEN}, follow_redirects=False)]  # sets the cookie
    for url in [
        "/",
        f"/s/{ids[0]}",
        "/api/sessions",
        "/api/inbox",
        "/api/search?q=key",
        f"/api/sessions/{ids[0]}/version",  # the live view's poll
        f"/api/sessions/{ids[0]}/data",  # and its refetch
        "/s/ffffffff",  # an error
    ]:
        replies.append(c.get(url))
    body = {"decisions": {"c1": {"action": "approve"}}}
    replies.append(c.post(f"/api/pauses/{pause}/decision", json=body, headers=AUTH))
    c.cookies.clear()
    replies += [c.get("/"), c.get("/api/sessions"), c.get("/", headers={"host": "evil.example"})]
    assert [r.status_code for r in replies] == [303] + [200] * 7 + [404, 200, 401, 401, 400]
    for r in replies:
        assert r.headers["cache-control"] == "no-store", r.url
        assert r.headers["vary"] == "Cookie", r.url


# -- 13. a lookup holding NUL or a lone surrogate ----------------------------------------

# A lone surrogate cannot come in a URL: its UTF-8 bytes (%ED%A0%80) are not valid, and
# the server decodes them as U+FFFD; it can come in a JSON body, as the \ud800 escape.
LOOKUPS = ["%00", "ab%00cd", "0123%00", "%0A", "%ED%A0%80", "%FF", "a%00%ED%A0%80"]


def one_line_error(r, status: int) -> str:
    assert r.status_code == status, (r.request.url, r.status_code, r.text)
    assert r.headers["content-type"] == "application/json"
    (error,) = r.json().values()
    assert "\n" not in error and "\r" not in error
    return error


def check_lookups(target: str, c) -> None:
    """NUL, a line break, a lone surrogate's bytes: 404 as a session, node or pause id, 400
    as a query when it holds NUL; never a 500."""
    with Store(target, readonly=True) as store:
        pause = store.pending()[0].id
    for bad in LOOKUPS:
        for url in [f"/s/{bad}", f"/api/sessions/{bad}/data", f"/api/sessions/{bad}/version"]:
            assert one_line_error(c.get(url), 404).startswith("no session ")
        r = c.post(
            f"/api/pauses/{bad}/decision", json={"decisions": {"c1": {"action": "approve"}}}, headers=AUTH
        )
        assert one_line_error(r, 404).startswith("no node ")
        for query in [bad, f"key%20{bad}"]:
            r = c.get(f"/api/search?q={query}")
            if "%00" in bad:
                assert "it holds a NUL character" in one_line_error(r, 400)
            else:  # U+FFFD is text, a line break alone no query
                assert r.status_code == 200 and isinstance(r.json(), list), r.text
    for body in [
        b'{"decisions": {"\\ud800": {"action": "approve"}}}',  # no such call
        b'{"decisions": {"c1\\u0000": {"action": "approve"}}}',
        b'{"decisions": {"c1": {"action": "\\ud800"}}}',
        b'{"decisions": {"c1": {"action": "approve"}}, "by": "\\ud800\\u0000"}',
    ][: 3 if target.startswith("postgresql") else 4]:
        r = c.post(f"/api/pauses/{pause}/decision", content=body, headers=AUTH)
        if b"by" in body:  # a stored string may hold both (it is text, not a lookup)
            assert r.status_code == 200, r.text
        else:
            assert one_line_error(r, 400).startswith("bad decision: "), body


def test_a_lookup_holding_nul_or_a_lone_surrogate_is_a_404_or_400_never_a_500(db_target, client):
    planted_store(db_target)
    check_lookups(db_target, client(db_target, allow_decide=True, token=TOKEN))


def asgi_get(app, path: str) -> tuple[int, bytes]:
    """GET ``path`` as an ASGI server that passes any text would (httpx cannot send a lone
    surrogate); returns the status and body."""
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode("utf-8", "surrogatepass"),
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1:8765")],
        "server": ("127.0.0.1", 8765),
        "client": ("127.0.0.1", 50000),
        "root_path": "",
    }
    asyncio.run(app(scope, receive, send))
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def test_a_lone_surrogate_in_the_path_itself_is_a_404(db_target):
    planted_store(db_target)
    app = server.create_app(db_target)
    for path in ["/s/\ud800", "/api/sessions/ab\udc00cd/data", "/api/sessions/\ud800\x00/version"]:
        status, body = asgi_get(app, path)
        assert status == 404, (path, body)
        (error,) = json.loads(body).values()
        assert error.startswith("no session ") and "\n" not in error


def test_sessiontree_errors_map_to_their_status(tmp_path, client, monkeypatch):
    """The mapping itself, whatever the store raises for a lookup."""
    from sessiontree.errors import AmbiguousRef, InvalidQuery, NotFound, Unavailable

    db = str(tmp_path / "planted.db")
    planted_store(db)
    c = client(db)
    for error, status in [
        (NotFound("no session '\\x00'"), 404),
        (InvalidQuery("search query '\\x00' holds a NUL character"), 400),
        (AmbiguousRef("prefix 0123 is ambiguous"), 400),
        (Unavailable("the database server is gone"), 503),
    ]:

        def raising(*args, error=error, **kwargs):
            raise error

        monkeypatch.setattr(Store, "search", raising)
        monkeypatch.setattr(Store, "resolve_session_id", raising)
        for url in ["/api/search?q=x", "/s/0123"]:
            r = c.get(url)
            assert r.status_code == status and r.json()["error"].startswith(str(error)), (url, r.text)


# -- 14. idle, half-open and slow connections ---------------------------------------------


def closed_by_server(sockets, until: float) -> list[bool]:
    """Which of ``sockets`` the server closed by the time ``until`` (monotonic) is reached
    (a closed one reads end-of-file or a reset); returns as soon as all are closed."""
    import selectors

    closed = [False] * len(sockets)
    with selectors.DefaultSelector() as selector:
        for i, s in enumerate(sockets):
            selector.register(s, selectors.EVENT_READ, i)
        while selector.get_map() and (left := until - time.monotonic()) >= 0:
            for key, _ in selector.select(min(left, 0.5)):
                try:
                    closed[key.data] = key.fileobj.recv(1024) == b""
                except OSError:  # reset: closed as well
                    closed[key.data] = True
                if closed[key.data]:
                    selector.unregister(key.fileobj)
    return closed


@pytest.mark.slow  # a real server process, and a timeout of seconds
def test_idle_and_half_open_connections_neither_lock_clients_out_nor_stay(demo):
    """300 sockets that send nothing or half a request line, to a server that may open
    256 files (macOS's default): a real client still gets its page at once, at most
    --max-connections stay open, and those are closed after --header-timeout."""
    import socket

    import httpx

    from sessiontree.cli.view import MAX_CONNECTIONS
    from test_view import first_answer, serve_process

    db, _, _ = demo
    timeout = 3.0
    # (--allow-decide: serve_process reads the two lines it prints)
    with serve_process(db, "--allow-decide", "--header-timeout", str(timeout), open_files=256) as (first, _):
        url = first.split(" on ")[1].split()[0]
        port = int(url.rsplit(":", 1)[1].strip("/"))
        assert first_answer(url).status_code == 200
        idle = []
        try:
            for i in range(300):
                s = socket.create_connection(("127.0.0.1", port), timeout=10)
                if i % 2:
                    s.sendall(b"GET / HT")
                idle.append(s)
            opened = time.monotonic()
            page = httpx.get(url, timeout=10)
            assert page.status_code == 200 and "sessiontree" in page.text
            assert time.monotonic() - opened < timeout  # not after the idle ones' timeout
            # the oldest made room as the others came; the newest are still open ...
            now = closed_by_server(idle, time.monotonic() + 0.2)
            if time.monotonic() - opened < timeout - 0.5:  # (unless this machine stalled)
                assert now[-(MAX_CONNECTIONS - 1) :] == [False] * (MAX_CONNECTIONS - 1)
            assert sum(not c for c in now) <= MAX_CONNECTIONS - 1  # the page took a place
            # ... until their time for a request is up
            assert all(closed_by_server(idle, opened + timeout + 10))
        finally:
            for s in idle:
                s.close()


@pytest.mark.slow  # a real server process
def test_a_connection_answering_a_request_is_never_closed_to_make_room(demo):
    """With every place taken by a request in hand, a newcomer gets a 503 (Retry-After),
    and the request in hand its answer; headers beyond the bound are a 400."""
    import socket

    from test_view import first_answer, serve_process

    db, _, pause_id = demo
    with serve_process(db, "--allow-decide", "--max-connections", "1") as (first, second):
        url = first.split(" on ")[1].split()[0]
        port = int(url.rsplit(":", 1)[1].strip("/"))
        token = second.split("the token ")[1].split(":")[0]
        assert first_answer(url).status_code == 200
        body = json.dumps({"decisions": {CALL: {"action": "approve"}}}).encode()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as busy:
            busy.sendall(
                f"POST /api/pauses/{pause_id}/decision HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"X-Sessiontree-Token: {token}\r\nContent-Length: {len(body)}\r\n"
                "Expect: 100-continue\r\n\r\n".encode()
            )
            # the server says to go on once the app reads the body: the request is in hand
            assert busy.recv(4096) == b"HTTP/1.1 100 Continue\r\n\r\n"
            with socket.create_connection(("127.0.0.1", port), timeout=10) as newcomer:
                refused = newcomer.recv(4096)
            assert refused.startswith(b"HTTP/1.1 503 ") and b"retry-after: 5" in refused
            busy.sendall(body)
            answer = busy.recv(4096)
            assert answer.startswith(b"HTTP/1.1 200 "), answer
        assert pending_ids(db) == []
        with socket.create_connection(("127.0.0.1", port), timeout=10) as big:
            big.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"x" * 20_000)  # and on...
            assert big.recv(4096).startswith(b"HTTP/1.1 400 ")


def test_the_server_raises_its_open_files_limit_for_its_connections_or_says_why_not():
    import subprocess
    import sys

    from sessiontree.view.guard import FILES_BESIDES, file_limit_problem
    from test_view import limit_open_files

    check = (
        "import resource; from sessiontree.view.guard import file_limit_problem; "
        "print(file_limit_problem(100), resource.getrlimit(resource.RLIMIT_NOFILE)[0])"
    )

    out = subprocess.run(
        [sys.executable, "-c", check],
        capture_output=True,
        text=True,
        check=True,
        preexec_fn=lambda: limit_open_files(256),
    ).stdout
    assert out == f"None {100 + FILES_BESIDES}\n"  # raised from 256, below the hard limit
    problem = file_limit_problem(10**9)
    assert problem is not None and problem.startswith("--max-connections 1000000000 needs ")
    assert problem.endswith("(ulimit -n): lower --max-connections or raise the limit")
