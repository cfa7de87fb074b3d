"""Shared fixtures: stores live in real files under pytest's tmp_path."""

from __future__ import annotations

import os
import subprocess
import textwrap
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from sessiontree import Store

# fakellm rules for an agent run: weather, then an email, then a final answer.
AGENT_RULES = textwrap.dedent("""\
    version: 1
    defaults: {fallback: deterministic_echo}
    rules:
      - name: done
        when: {tool_result_contains: "sent to"}
        respond: {content: "Emailed bob: sunny in Paris."}
      - name: email
        when: {tool_result_contains: "Sunny in Paris"}
        respond:
          tool_calls: [{name: send_email, arguments: {to: bob@example.com, body: "Sunny, 21C"}}]
      - name: weather
        when: {messages_contain: "weather in paris"}
        respond:
          tool_calls: [{name: get_weather, arguments: {city: Paris}}]
    """)


@pytest.fixture(scope="session")
def agent_fakellm(tmp_path_factory):
    """A real fakellm server on 127.0.0.1 scripted with AGENT_RULES, for the whole run."""
    import servers

    root = tmp_path_factory.mktemp("fakellm-agent")
    (root / "rules.yaml").write_text(AGENT_RULES)
    server = servers.start_fakellm(root / "rules.yaml", root / "logs")
    yield server
    server.stop()


def pytest_assertrepr_compare(op: str, left: object, right: object) -> list[str] | None:
    """Two strings holding a lone surrogate are explained by their ``ascii()`` forms:
    pytest's text diff would put the raw surrogate in the report, and under pytest-xdist a
    worker sends reports as UTF-8, which cannot encode one (the worker dies mid-run)."""
    strings = op == "==" and isinstance(left, str) and isinstance(right, str)
    if strings and any("\ud800" <= c <= "\udfff" for c in f"{left}{right}"):
        return [f"{ascii(left)} == {ascii(right)}"]
    return None


@contextmanager
def tmpfs(where: Path, size: str = "8m") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted on ``where`` (made here) for the test, unmounted after
    it; mounting needs root and the capability to mount, so elsewhere the test is skipped,
    saying why."""
    where.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True, text=True
    )
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "--lazy", str(where)], check=True)  # even if a test left a file open


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "store.db") as s:
        yield s


@pytest.fixture
def session(store):
    return store.create_session("test")


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def assistant(text: str | None = None, tool_calls: list | None = None) -> dict:
    message: dict = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return message


# Every table as public ids (the rows link by integer keys inside the file, and keys
# differ between two stores holding the same sessions).
PUBLIC_ROWS = {
    "sessions": "SELECT id, title, metadata, created_at, archived_at FROM sessions",
    "runs": "SELECT r.id, s.id, model, provider, params, usage, latency_ms, finish_reason, r.created_at"
    " FROM runs r JOIN sessions s ON s.key = r.session",
    "nodes": "SELECT n.id, s.id, p.id, n.depth, n.kind, n.payload, n.created_at, r.id FROM nodes n"
    " JOIN sessions s ON s.key = n.session LEFT JOIN nodes p ON p.key = n.parent LEFT JOIN runs r ON r.key = n.run",
    "branches": "SELECT s.id, b.name, n.id, b.metadata, b.created_at, b.updated_at FROM branches b"
    " JOIN sessions s ON s.key = b.session LEFT JOIN nodes n ON n.key = b.head",
    "checkpoints": "SELECT s.id, c.name, n.id, c.created_at FROM checkpoints c"
    " JOIN sessions s ON s.key = c.session JOIN nodes n ON n.key = c.node",
}


def public_rows(conn) -> dict[str, list[tuple]]:
    """Every row of every table, with ids instead of row keys, sorted."""
    return {t: sorted(conn.execute(sql).fetchall(), key=repr) for t, sql in PUBLIC_ROWS.items()}


# -- PostgreSQL: the same tests against a real server -----------------------------


def postgres_server() -> str:
    """The URL of a test server, or skip (a failure under CI=true: CI must test both backends)."""
    import pg_cluster

    url, why = pg_cluster.server_url()
    if url is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but the PostgreSQL tests cannot run: {why}")
        pytest.skip(why)
    return url


def fresh_schema_url(server: str) -> str:
    """A new schema's URL. The random part keeps tests apart; the pytest-xdist worker's
    name (``gw0``...) says which worker left a schema behind if a run is killed."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    return f"{server}?schema=t_{worker}_{uuid.uuid4().hex[:16]}"


def drop_schema(url: str) -> None:
    import psycopg

    server, _, query = url.partition("?schema=")
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{query}" CASCADE')


@pytest.fixture
def pg_url():
    """A fresh, empty PostgreSQL schema of the test server (dropped afterwards)."""
    url = fresh_schema_url(postgres_server())
    yield url
    drop_schema(url)


def backend_target(backend: str, request: pytest.FixtureRequest) -> str:
    """What ``Store()`` opens for a backend's test id: ``sqlite`` a file in the test's
    tmp_path, ``memory`` SQLite's ``:memory:``, ``postgres`` a fresh schema."""
    if backend == "sqlite":
        return str(request.getfixturevalue("tmp_path") / "store.db")
    if backend == "memory":
        return ":memory:"
    return request.getfixturevalue("pg_url")


@pytest.fixture(params=["sqlite", "postgres"])
def db_target(request) -> str:
    """What ``Store()`` opens, for tests that run against both backends: a SQLite file,
    or a fresh PostgreSQL schema. (A target a test reopens, or hands to another process:
    ``:memory:`` is not one.)"""
    return backend_target(request.param, request)


@pytest.fixture
def any_store(db_target):
    with Store(db_target) as s:
        yield s


@pytest.fixture(params=["sqlite", "memory", "postgres"])
def every_store(request):
    """A store on every backend, for behaviour they all promise: a SQLite file, SQLite
    ``:memory:`` and a fresh PostgreSQL schema (test ids end in the backend's name)."""
    with Store(backend_target(request.param, request)) as s:
        yield s


def raw(store: Store, sql: str, params: tuple = ()) -> list[tuple]:
    """Run SQL on the store's database behind the API's back (``?`` placeholders on both
    backends): how tests play another program, or check what the schema refuses."""
    from sessiontree.storage import SQLiteStorage

    if isinstance(store.storage, SQLiteStorage):
        return store.conn.execute(sql, params).fetchall()
    storage = store.storage
    with storage.pool.connection() as conn:  # type: ignore[attr-defined]
        if not storage.target.pgbouncer:  # type: ignore[attr-defined]
            cursor = conn.execute(sql.replace("?", "%s"), params)
            return cursor.fetchall() if cursor.description else []
        with conn.transaction():  # behind PgBouncer: the store's settings last one transaction
            conn.execute(storage._local_settings)  # type: ignore[attr-defined]
            cursor = conn.execute(sql.replace("?", "%s"), params)
            return cursor.fetchall() if cursor.description else []


def schema_refusals() -> tuple[type[Exception], ...]:
    """What each backend's driver raises when the schema refuses a row."""
    import sqlite3

    try:
        import psycopg
    except ImportError:
        return (sqlite3.IntegrityError,)
    return (sqlite3.IntegrityError, psycopg.IntegrityError)


def public_rows_of(store: Store) -> dict[str, list[tuple]]:
    """``public_rows`` of any backend's store."""
    return {t: sorted((tuple(r) for r in raw(store, sql)), key=repr) for t, sql in PUBLIC_ROWS.items()}


# -- the web app, in process ---------------------------------------------------------


class AppClient:
    """A synchronous HTTP client that calls an ASGI app in this process, through httpx's
    own ASGI transport (Starlette's TestClient is moving off httpx): cookies persist,
    redirects are followed unless a call says otherwise, as a browser would."""

    def __init__(self, app, base_url: str = "http://127.0.0.1:8765") -> None:
        import asyncio

        import httpx

        self._loop = asyncio.new_event_loop()
        self._client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url=base_url, follow_redirects=True
        )

    @property
    def cookies(self):
        return self._client.cookies

    def request(self, method: str, url: str, **options):
        return self._loop.run_until_complete(self._client.request(method, url, **options))

    def get(self, url: str, **options):
        return self.request("GET", url, **options)

    def post(self, url: str, **options):
        return self.request("POST", url, **options)

    def close(self) -> None:
        self._loop.run_until_complete(self._client.aclose())
        self._loop.close()


@pytest.fixture
def app_client():
    """``app_client(app)``: an ``AppClient`` on ``app``, closed after the test."""
    made: list[AppClient] = []

    def make(app) -> AppClient:
        made.append(AppClient(app))
        return made[-1]

    yield make
    for c in made:
        c.close()


def together(work, args: list, timeout: float = 120) -> None:
    """``work(arg)`` for each of ``args``, each in a thread of its own, all started at one
    barrier; raises the first error a thread raised (an uncaught one would only be logged)."""
    import threading

    start = threading.Barrier(len(args))
    errors: list[BaseException] = []

    def run(arg) -> None:
        try:
            start.wait(30)
            work(arg)
        except BaseException as e:  # noqa: BLE001 - raised below, in the test's thread
            errors.append(e)
            start.abort()

    threads = [threading.Thread(target=run, args=(arg,)) for arg in args]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), f"a thread is still running after {timeout} s"
    if errors:
        raise errors[0]
