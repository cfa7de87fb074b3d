"""The browser view without a browser: the export's data, its escaping and secrets, the
``html`` command, and the ``serve`` app driven through Starlette's test client."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from sessiontree import Conflict, Store, render_html, write_html
from sessiontree.cli import cli
from sessiontree.view import inbox, session_data
from sessiontree.view.data import version
from sessiontree.view.page import embed_json, page

from viewdata import HOSTILE, SECRET, hostile_store


def embedded(html: str, element: str) -> object:
    match = re.search(rf'<script type="application/json" id="{element}">(.*?)</script>', html, re.S)
    assert match, f"no {element} element"
    return json.loads(match.group(1))


@settings(max_examples=60)  # each dangerous character also has its own case in the hostile test
@given(
    st.recursive(st.text() | st.integers() | st.none(), lambda c: st.lists(c) | st.dictionaries(st.text(), c))
)
def test_embedded_json_reads_back_and_cannot_close_its_element(value):
    text = embed_json(value)
    assert json.loads(text) == value
    assert not set(text) & set("<>&\u2028\u2029")


def test_a_lone_surrogate_is_carried_by_escapes(tmp_path):
    assert json.loads(embed_json({"text": "a\ud800b"})) == {"text": "a\ud800b"}
    with Store(tmp_path / "s.db") as store:
        s = store.create_session("surrogates")
        s.append({"role": "user", "content": "half a pair: \ud83d"})
        path = write_html(store, s.id, tmp_path / "s.html")
    assert (
        embedded(path.read_text("utf-8"), "st-data")["nodes"][0]["payload"]["content"]
        == "half a pair: \ud83d"
    )


def test_the_page_is_self_contained_and_its_scripts_carry_the_nonce(demo):
    db, session_id, _ = demo
    with Store(db) as store:
        html = render_html(store, session_id)
    nonce = re.search(r"script-src 'nonce-([\w-]+)'", html).group(1)
    assert html.count(f'<script nonce="{nonce}">') == 1 and html.count(f'<style nonce="{nonce}">') == 1
    # nothing is fetched: no URL in the page except inside the session's own text
    assert not re.search(r"https?://", html)
    assert not re.search(r"<(link|img|iframe)\b", html)
    assert "view.js" not in html and "{{" not in html  # every slot filled, the static files inlined
    with Store(db) as store:
        again = render_html(store, session_id)
    assert re.search(r"script-src 'nonce-([\w-]+)'", again).group(1) != nonce  # a fresh nonce per page


def test_hostile_payloads_stay_inside_the_data_element(tmp_path):
    db = tmp_path / "hostile.db"
    session_id = hostile_store(db)
    with Store(db) as store:
        html = render_html(store, session_id)
    data = embedded(html, "st-data")
    contents = [n["payload"]["content"] for n in data["nodes"]]
    assert contents[: len(HOSTILE)] == HOSTILE  # the data reads back exactly
    # three script elements: data, config, code; no payload opened another or a comment
    assert html.count("<script") == 3 and html.count("</script>") == 3
    assert "<!--" not in html and "\u2028" not in html and "<img" not in html
    assert "<title>&lt;b&gt;title&lt;/b&gt;&lt;script&gt;" in html


def test_secrets_are_redacted_and_run_parameters_left_out(tmp_path):
    db = tmp_path / "secret.db"
    session_id = hostile_store(db)
    with Store(db) as store:
        s = store.session(session_id)
        s.append(
            {"role": "assistant", "content": "ok"},
            run={"model": "m", "params": {"api_key": "sk-params-secret", "temperature": 0.2}, "usage": {}},
        )
        html = render_html(store, session_id)
    assert SECRET not in html and "sk-params-secret" not in html
    assert "Authorization: [redacted]" in html or "Bearer [redacted]" in html


def test_session_data_has_what_the_page_shows(demo):
    db, session_id, pause_id = demo
    with Store(db) as store:
        data = session_data(store, session_id[:13], prices={"scripted-a": {"input": 1.0, "output": 2.0}})
        s = store.session(session_id)
        assert len(data["nodes"]) == len(s.tree()) == 14
        assert data["pending"] == [pause_id]
        assert data["current"] == "main"
        assert {b["name"] for b in data["branches"]} == {"main", "experiment", "urgent"}
        assert data["checkpoints"] == [{"name": "weather-known", "node": s.node("weather-known").id}]
        assert data["prices"] == {"scripted-a": {"input": 1.0, "output": 2.0}}
        models = sorted(r["model"] for r in data["runs"].values())
        assert models == ["scripted-a", "scripted-a", "scripted-a", "scripted-b", "scripted-c"]
        tokens = sum(r["input_tokens"] or 0 for r in data["runs"].values())
        assert tokens == sum(m.input_tokens for m in [s.subtree_usage(s.tree()[0])])
        assert all(store.node(n["id"][: data["short"]]).id == n["id"] for n in data["nodes"])
        (item,) = inbox(store)
        assert item["pause"] == pause_id and item["session"] == session_id
        assert [c["name"] for c in item["calls"]] == ["send_email"]


def test_version_changes_when_the_session_grows(demo):
    db, session_id, _ = demo
    with Store(db) as store:
        before = version(store, session_id)
        assert version(store, session_id) == before
        store.session(session_id).append({"role": "user", "content": "more"}, branch="experiment")
        assert version(store, session_id) != before


def test_html_command_writes_the_file_and_reports_it(demo, tmp_path, monkeypatch):
    db, session_id, _ = demo
    out = tmp_path / "run.html"
    result = CliRunner().invoke(cli, ["--db", str(db), "html", session_id[:13], "-o", str(out), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report == {
        "path": str(out),
        "session": session_id,
        "nodes": 14,
        "branches": 3,
        "checkpoints": 1,
        "pending": 1,
        "bytes": out.stat().st_size,
    }
    assert embedded(out.read_text("utf-8"), "st-data")["session"]["id"] == session_id
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["--db", str(db), "html", "--price", "scripted-a=1,2"])
    assert result.exit_code == 0, result.output
    (written,) = tmp_path.glob("sessiontree-*.html")
    assert result.output == f"wrote {written.name} (14 nodes); open it in a browser\n"
    assert embedded(written.read_text("utf-8"), "st-data")["prices"] == {
        "scripted-a": {"input": 1.0, "output": 2.0}
    }


def test_html_command_reads_the_session_once(demo, tmp_path, monkeypatch):
    import sessiontree.cli.view
    import sessiontree.view.page

    db, session_id, _ = demo
    reads: list[str] = []

    def counted(store, sid, **options):
        reads.append(sid)
        return session_data(store, sid, **options)

    for module in (sessiontree.cli.view, sessiontree.view.page):
        monkeypatch.setattr(module, "session_data", counted)
    result = CliRunner().invoke(cli, ["--db", str(db), "html", session_id, "-o", str(tmp_path / "once.html")])
    assert result.exit_code == 0, result.output
    assert reads == [session_id]


def test_html_command_errors_are_one_line(demo, tmp_path):
    db, _, _ = demo
    result = CliRunner().invoke(cli, ["--db", str(db), "html", "ffffffff"])
    assert result.exit_code == 1 and result.output == "Error: no session 'ffffffff'\n"
    result = CliRunner().invoke(cli, ["--db", str(db), "html", "--price", "nonsense"])
    assert result.exit_code == 2 and "expected MODEL=INPUT,OUTPUT" in result.output


def test_html_never_overwrites_the_store_it_reads(demo):
    db, session_id, _ = demo
    for target in (db, f"{db}-wal", f"{db}-shm", f"{db}-tools"):  # -tools: the tool leases
        result = CliRunner().invoke(cli, ["--db", str(db), "html", session_id, "-o", str(target)])
        assert result.exit_code == 1
        assert (
            result.output
            == f"Error: {target} is this store's own database file; choose another file to write\n"
        )
    with Store(db) as store:
        with pytest.raises(Conflict, match="own database file"):
            write_html(store, session_id, db)
        assert store.verify().ok and len(store.session(session_id).tree()) == 14


def test_write_html_returns_the_path(demo, tmp_path):
    db, session_id, _ = demo
    with Store(db) as store:
        path = write_html(store, session_id, tmp_path / "x.html")
    assert path == tmp_path / "x.html" and path.read_text("utf-8").startswith("<!doctype html>")


def test_page_fills_each_slot_once():
    # a title or data that looks like a slot stays as it is: values are never scanned again
    html = page("index", "{{js}}", {"text": "{{css}}"}, {})
    assert "<title>{{js}}</title>" in html and embedded(html, "st-data") == {"text": "{{css}}"}
    assert html.count("{{") == 2


# -- sessiontree serve, without a browser ----------------------------------------------


def test_serve_pages_and_api(demo, client):
    db, session_id, pause_id = demo
    c = client(db)
    index = c.get("/")
    assert index.status_code == 200 and "script-src 'nonce-" in index.text
    assert embedded(index.text, "st-data")["inbox"][0]["pause"] == pause_id
    view = c.get(f"/s/{session_id[:13]}")
    assert view.status_code == 200
    config = embedded(view.text, "st-config")
    assert config["live"]["data"] == f"/api/sessions/{session_id}/data" and config["decide"] is None
    assert [s["id"] for s in c.get("/api/sessions").json()] == [session_id]
    assert c.get(f"/api/sessions/{session_id}/data").json()["pending"] == [pause_id]
    assert len(c.get(f"/api/sessions/{session_id}/version").json()["version"]) == 16
    assert c.get("/s/ffffffff").status_code == 404
    assert c.get("/", headers={"host": "evil.example"}).status_code == 400  # DNS rebinding


def test_serve_searches_every_session_and_links_each_hit_to_its_branch(demo, client):
    db, session_id, _ = demo
    c = client(db)
    assert embedded(c.get("/").text, "st-config")["api"]["search"] == "/api/search"
    hits = c.get("/api/search", params={"q": "weather"}).json()
    assert hits and all(h["session"] == session_id for h in hits)
    first = hits[0]
    assert first["href"] == f"/s/{session_id}#node={first['node']}"
    assert "«" in first["snippet"] and first["node"].startswith(first["short"])
    assert "main" in first["branches"] or first["checkpoints"]
    assert c.get("/api/search", params={"q": ""}).json() == []
    bad = c.get("/api/search", params={"q": '"unbalanced'})
    assert bad.status_code == 400 and "not valid full-text syntax" in bad.json()["error"]


def test_serve_decisions_need_the_flag_and_the_token(demo, client):
    db, _, pause_id = demo
    body = {"decisions": {"call_send_email": {"action": "approve"}}, "by": "ana"}
    url = f"/api/pauses/{pause_id}/decision"
    read_only = client(db)
    assert read_only.post(url, json=body, headers={"X-Sessiontree-Token": "t0k"}).status_code == 403
    c = client(db, allow_decide=True, token="t0k")
    assert c.post(url, json=body).status_code == 403
    assert c.post(url, json=body, headers={"X-Sessiontree-Token": "wrong"}).status_code == 403
    c.cookies.set("X-Sessiontree-Token", "t0k")  # a cookie is what a browser would add by itself
    assert c.post(url, json=body).status_code == 403
    c.cookies.clear()
    assert c.post(url, content=b"{not json", headers={"X-Sessiontree-Token": "t0k"}).status_code == 400
    bad = {"decisions": {"call_send_email": {"action": "explode"}}}
    assert c.post(url, json=bad, headers={"X-Sessiontree-Token": "t0k"}).status_code == 400
    with Store(db) as store:
        assert [p.id for p in store.pending()] == [pause_id]  # nothing was written so far
    ok = c.post(url, json=body, headers={"X-Sessiontree-Token": "t0k"})
    assert ok.status_code == 200, ok.text
    with Store(db) as store:
        decision = store.node(ok.json()["decision"])
        assert decision.parent_id == pause_id and decision.payload["by"] == "ana"
        assert decision.payload["decisions"] == {"call_send_email": {"action": "approve"}}
        assert store.pending() == []
    again = c.post(url, json=body, headers={"X-Sessiontree-Token": "t0k"})
    assert again.status_code == 409  # one decision per pause
    assert c.get("/api/inbox").json() == []


def test_serve_refuses_a_pause_its_branch_moved_away_from(demo, client):
    """Before: the inbox kept listing it, the decision was written (under no branch), and
    resuming it then said it "was already resumed"."""
    db, session_id, pause_id = demo
    c = client(db, allow_decide=True, token="t0k")
    with Store(db) as store:
        session = store.session(session_id)
        for name in session.branches_at(pause_id):
            session.append({"role": "user", "content": "never mind"}, branch=name)
    assert c.get("/api/inbox").json() == []
    assert c.get(f"/api/sessions/{session_id}/data").json()["pending"] == []
    body = {"decisions": {"call_send_email": {"action": "approve"}}}
    refused = c.post(f"/api/pauses/{pause_id}/decision", json=body, headers={"X-Sessiontree-Token": "t0k"})
    assert refused.status_code == 409
    assert "no branch stands at it any more" in refused.json()["error"]
    with Store(db) as store:
        assert [n.kind for n in store.session(session_id).children(pause_id)] == ["message"]


def test_serve_edit_decision_stores_the_new_arguments(demo, client):
    db, _, pause_id = demo
    c = client(db, allow_decide=True, token="t0k")
    edited = {"to": "bob@example.com", "subject": "hi", "body": "x"}  # send_email's schema, all of it
    body = {"decisions": {"call_send_email": {"action": "edit", "arguments": edited}}}
    ok = c.post(f"/api/pauses/{pause_id}/decision", json=body, headers={"X-Sessiontree-Token": "t0k"})
    assert ok.status_code == 200, ok.text
    with Store(db) as store:
        payload = store.node(ok.json()["decision"]).payload
    assert payload["decisions"]["call_send_email"] == {"action": "edit", "arguments": edited}
    assert payload["by"] == "sessiontree serve"


def test_with_login_every_request_needs_the_token_from_the_header_or_the_login_cookie(demo, client):
    from sessiontree.view.server import NOT_LOGGED_IN, login_cookie

    db, session_id, pause_id = demo
    c = client(db, login=True, token="s3cret", allow_decide=True)
    for path in ("/", f"/s/{session_id}", "/api/sessions", "/api/inbox", f"/api/sessions/{session_id}/data"):
        refused = c.get(path)
        assert refused.status_code == 401, path
        assert NOT_LOGGED_IN in refused.text and session_id not in refused.text
    assert c.get("/api/sessions").json() == {"error": NOT_LOGGED_IN}
    assert c.get("/login", params={"token": "wrong"}).status_code == 401
    assert c.cookies.get(login_cookie(8765)) is None
    assert c.get("/api/sessions", headers={"X-Sessiontree-Token": "s3cret"}).status_code == 200  # scripts
    went = c.get("/login", params={"token": "s3cret"}, follow_redirects=False)
    assert went.status_code == 303 and went.headers["location"] == "/#token=s3cret"
    cookie = went.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    assert c.get("/").status_code == 200  # the client keeps the cookie, as a browser does
    assert [s["id"] for s in c.get("/api/sessions").json()] == [session_id]
    # the cookie reads; a decision still needs the header (a cookie is sent by any page)
    decision = {"decisions": {"call_send_email": {"action": "reject", "reason": "not now"}}}
    assert c.post(f"/api/pauses/{pause_id}/decision", json=decision).status_code == 403


def test_login_on_a_read_only_server_goes_to_the_index_without_a_token_in_the_url(demo, client):
    db, _, _ = demo
    c = client(db, login=True, token="t")
    went = c.get("/login", params={"token": "t"}, follow_redirects=False)
    assert went.headers["location"] == "/"
    assert client(db).get("/login", params={"token": "t"}).status_code == 404  # no login: no such page


def test_serve_needs_a_login_beyond_loopback():
    from sessiontree.cli.view import is_loopback

    assert is_loopback("127.0.0.1") and is_loopback("127.8.0.1") and is_loopback("::1")
    assert is_loopback("[::1]") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.5") and not is_loopback("::")
    assert not is_loopback("myhost.example")  # a name may resolve to anything


def test_create_app_refuses_decisions_without_a_token(demo):
    from sessiontree.view.server import create_app

    with pytest.raises(ValueError, match="token"):
        create_app(demo[0], allow_decide=True)
    with pytest.raises(ValueError, match="token"):
        create_app(demo[0], login=True)


@contextmanager
def serve_process(db, *options: str, open_files: int | None = None) -> Iterator[tuple[str, str]]:
    """``sessiontree serve --port 0 OPTIONS`` in a process of its own (``open_files``: its
    soft limit of open files): the first two lines it prints; stopped after."""
    import os
    import subprocess
    import sys

    command = [sys.executable, "-c", "from sessiontree.cli import cli; cli()", "--db", str(db)]
    with subprocess.Popen(  # closes the pipes on the way out
        [*command, "serve", "--port", "0", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        preexec_fn=None if open_files is None else lambda: limit_open_files(open_files),
    ) as process:
        try:
            assert process.stdout is not None
            yield process.stdout.readline(), process.stdout.readline()
        finally:
            process.terminate()
            process.wait(10)


def limit_open_files(soft: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))


def first_answer(url: str):
    """GET ``url`` once the server listens (its address is printed a moment before)."""
    import socket
    from urllib.parse import urlsplit

    import httpx

    address = urlsplit(url)
    assert address.hostname and address.port
    deadline = time.monotonic() + 20
    while True:
        # closed here, refused or not (a failed client connect can leak one); IPv6 too
        probe = socket.socket(socket.AF_INET6 if ":" in address.hostname else socket.AF_INET)
        try:
            probe.connect((address.hostname, address.port))
            break
        except OSError:
            assert time.monotonic() < deadline, "serve printed its address but never listened"
            time.sleep(0.1)
        finally:
            probe.close()
    return httpx.get(url, timeout=10)


@pytest.mark.slow  # a real server process
def test_serve_command_prints_the_token_and_listens_on_loopback(demo):
    import httpx

    db, _, pause_id = demo
    with serve_process(db, "--allow-decide") as (first, second):
        match = re.fullmatch(rf"serving {re.escape(str(db))} on (http://127\.0\.0\.1:\d+/)\n", first)
        assert match, first
        url = match.group(1)
        token = re.fullmatch(
            rf"decisions allowed with the token (\S+): open {re.escape(url)}#token=\1\n", second
        )
        assert token, second
        assert first_answer(url).status_code == 200
        decision = {"decisions": {"call_send_email": {"action": "reject", "reason": "not now"}}}
        endpoint = f"{url}api/pauses/{pause_id}/decision"
        assert httpx.post(endpoint, json=decision, timeout=10).status_code == 403
        ok = httpx.post(endpoint, json=decision, headers={"X-Sessiontree-Token": token.group(1)}, timeout=10)
        assert ok.status_code == 200, ok.text
    with Store(db) as store:
        assert store.pending() == []
        assert (
            store.node(ok.json()["decision"]).payload["decisions"]["call_send_email"]["reason"] == "not now"
        )


@pytest.mark.slow  # a real server process
def test_serve_command_with_login_prints_where_to_log_in(demo):
    import httpx

    db, session_id, _ = demo
    with serve_process(db, "--login") as (first, second):
        url = re.fullmatch(
            rf"serving {re.escape(str(db))} on (http://127\.0\.0\.1:\d+/) \(read-only\)\n", first
        )
        assert url, first
        login = re.fullmatch(
            rf"every page needs the token: log in at ({re.escape(url.group(1))}login\?token=\S+)\n", second
        )
        assert login, second
        assert first_answer(url.group(1)).status_code == 401
        with httpx.Client(follow_redirects=True, timeout=10) as browser:
            page = browser.get(login.group(1))
            assert page.status_code == 200 and str(page.url) == url.group(1)
            assert [s["id"] for s in browser.get(f"{url.group(1)}api/sessions").json()] == [session_id]


@pytest.mark.slow  # a real server process
def test_serve_command_on_ipv6_loopback_answers_its_own_url(demo):
    import socket

    db, _, _ = demo
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError as e:
        pytest.skip(f"no IPv6 loopback here: {e}")
    with serve_process(db, "--host", "::1", "--allow-decide") as (first, second):  # two lines
        url = re.fullmatch(rf"serving {re.escape(str(db))} on (http://\[::1\]:\d+/)\n", first)
        assert url, first
        token = rf"decisions allowed with the token (\S+): open {re.escape(url.group(1))}#token=\1\n"
        assert re.fullmatch(token, second), second
        page = first_answer(url.group(1))  # the browser sends Host: [::1]:PORT
        assert page.status_code == 200, page.text


def test_serve_command_refuses_a_taken_port(demo):
    import socket

    db, _, _ = demo
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(cli, ["--db", str(db), "serve", "--port", str(port)])
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: cannot listen on 127.0.0.1:{port}: ")
