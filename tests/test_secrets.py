"""API keys never reach the database, its WAL, or an export; read-only stores refuse
every write with ``ReadOnly``. (tests/test_cli.py checks that the CLI's inspection
commands open read-only; tests/test_agent_fakellm.py checks a key over real HTTP.)"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from sessiontree import Approve, Pause, ReadOnly, Store, decide, export_file, import_file, run
from sessiontree.providers import http, openai_compatible
from sessiontree.testing import tool_call

from conftest import user
from flows import get_weather

KEY_ARG = "sk-test-SECRET123"
KEY_ENV = "sk-test-ENVSECRET456"


def reply_json(message: dict, usage: dict | None = None) -> dict:
    return {
        "id": "x",
        "model": "mock-1",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
            }
        ],
        "usage": usage or {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
    }


def handler(request: httpx.Request) -> httpx.Response:
    """A server that echoes the key it was sent wherever an error message could carry it."""
    auth = request.headers.get("authorization", "")
    body = json.loads(request.content)
    last = body["messages"][-1]
    if "fail" in str(last.get("content")):
        return httpx.Response(
            401,
            json={
                "error": {"message": f"Incorrect API key provided: {auth.removeprefix('Bearer ')} ({auth})"}
            },
        )
    if last["role"] == "tool":
        return httpx.Response(200, json=reply_json({"role": "assistant", "content": "sunny, done"}))
    call = tool_call("get_weather", {"city": "Paris"}, id=f"w{len(body['messages'])}")
    return httpx.Response(200, json=reply_json({"role": "assistant", "content": None, "tool_calls": [call]}))


@pytest.fixture(autouse=True)
def _instant_retries(monkeypatch):
    async def no_sleep(seconds):
        return None

    monkeypatch.setattr(http, "_sleep", no_sleep)


def file_bytes(*paths: Path) -> bytes:
    return b"".join(p.read_bytes() for p in paths if p.exists())


def test_api_keys_never_reach_the_database_or_an_export(tmp_path, monkeypatch):
    monkeypatch.setenv("MOCK_KEY", KEY_ENV)
    db = tmp_path / "keys.db"
    transport = httpx.MockTransport(handler)
    by_argument = openai_compatible(
        "http://mock/v1", "mock-1", api_key=KEY_ARG, transport=transport, max_retries=1
    )
    by_env = openai_compatible(
        "http://mock/v1",
        "mock-1",
        api_key_env="MOCK_KEY",
        transport=transport,
        max_retries=1,
        temperature=0.5,
    )
    seen_errors = []
    with Store(db) as store:
        for name, call, key in (("arg", by_argument, KEY_ARG), ("env", by_env, KEY_ENV)):
            session = store.create_session(name)
            session.append(user("weather in Paris?"))
            steps = list(
                run(
                    store,
                    session,
                    call=call,
                    tools=[get_weather],
                    approve=lambda c, name=name: (
                        Pause("check") if c.id == "w2" and name == "arg" else Approve()
                    ),
                )
            )
            if steps[-1].reason == "paused":  # a pause and a decision are stored too
                decide(store, steps[-1].node.id, {"w2": Approve()}, by="ops")
                steps = list(run(store, session, call=call, tools=[get_weather]))
            assert steps[-1].reason == "completed"
            session.append(user("now fail please"))
            failed = list(run(store, session, call=call))[-1]
            assert failed.reason == "error" and failed.node.kind == "error"
            assert "Incorrect API key" in failed.node.payload["message"]  # the server's words...
            assert key not in failed.node.payload["message"]  # ...without the key
            seen_errors.append(failed.error)
            record = store.run(session.path("main")[1].run_id)
            assert record.model == "mock-1" and key not in json.dumps(record.params)
        assert store.verify().ok
        ids = [s.id for s in store.sessions()]
        native = export_file(store, tmp_path / "all.jsonl", "native")
        openai_exports = [export_file(store, tmp_path / f"{i}.json", "openai", session_ids=[i]) for i in ids]
        # The WAL holds the latest pages until a checkpoint: search it before closing.
        wal = file_bytes(Path(f"{db}-wal"))
        everything = file_bytes(db, Path(f"{db}-wal"), Path(f"{db}-shm"), native, *openai_exports)
    assert wal, "expected a write-ahead log to search"
    for key in (KEY_ARG, KEY_ENV):
        for form in (key, key.encode("utf-16-le").decode("latin-1"), key[3:]):
            assert form.encode("latin-1") not in everything
        assert all(key not in e for e in seen_errors)
    assert b"[redacted]" in everything  # the error text was kept, with the key taken out
    # And a round trip through the export cannot bring one back.
    with Store(tmp_path / "copy.db") as copy:
        import_file(copy, native)
    assert KEY_ARG.encode() not in file_bytes(tmp_path / "copy.db", tmp_path / "copy.db-wal")


def test_every_write_through_a_readonly_store_raises_read_only(tmp_path):
    path = tmp_path / "ro.db"
    with Store(path) as store:
        s = store.create_session("ro")
        s.append(user("hi"))
        s.checkpoint("cp", at="main")
        s.fork("other", at="main")
        s.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [tool_call("get_weather", {"city": "x"}, id="c")],
            }
        )
        pause = s.append({"calls": [{"id": "c", "name": "get_weather", "arguments": "{}"}]}, kind="pause")
    with Store(tmp_path / "other.db") as other:
        other.create_session("new").append(user("new"))
        native = export_file(other, tmp_path / "x.jsonl")
    before = file_bytes(path, Path(f"{path}-wal"))
    with Store(path, readonly=True) as store:
        s = store.session(store.sessions()[0].id)
        writes = {
            "create_session": lambda: store.create_session("x"),
            "append": lambda: s.append(user("x"), branch="other"),
            "append_many": lambda: s.append_many([user("x"), user("y")], branch="other"),
            "edit": lambda: s.edit(s.path("main")[0], user("z"), branch="edited"),
            "fork": lambda: s.fork("f", at="main"),
            "move": lambda: s.move("other", to="cp"),
            "rename": lambda: s.rename("other", "renamed"),
            "delete_branch": lambda: s.delete_branch("other"),
            "checkpoint": lambda: s.checkpoint("cp2", at="main"),
            "delete_checkpoint": lambda: s.delete_checkpoint("cp"),
            "record_run": lambda: s.record_run({"model": "m"}),
            "archive": lambda: store.archive_session(s.id),
            "delete_session": lambda: store.delete_session(s.id),
            "prune": lambda: store.prune(dry_run=False),
            "decide": lambda: decide(store, pause.id, {"c": Approve()}),
            "import": lambda: import_file(store, native),
            "transaction": lambda: store.transaction().__enter__(),
        }
        for name, write in writes.items():
            with pytest.raises(ReadOnly, match="read-only"):
                write()
                pytest.fail(f"{name} wrote through a read-only store")
        # Reading still works, and the dry-run prune is a read.
        assert s.messages("main")[0] == user("hi") and store.prune().dry_run
        assert store.verify().ok
    assert file_bytes(path, Path(f"{path}-wal")) == before
