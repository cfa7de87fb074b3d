"""Shared fixtures: stores live in real files under pytest's tmp_path."""

from __future__ import annotations

import os
import subprocess
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from sessiontree import Store
from sessiontree.testing import tool_call

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


# -- the slow marker, kept honest -------------------------------------------------------

SLOW_MARK = 1.5
"""What ``slow`` means (pyproject.toml): a test over ~1.5 s on a quiet core."""
CI_SLOW_LIMIT = 5.0
"""The guard's least limit under CI=true. On a shared 2-core machine running one test per
core (xdist) beside other jobs, a test takes 2-3x its quiet time (the review measured load
4-8 on 2 cores): a test over 5 s there is over 1.5 s anywhere, and one a little over 1.5 s
on a loaded run is noise, not a finding. Busier still, the limit grows with the load."""
_too_slow: list[tuple[str, float, float]] = []


def slow_limit() -> float | None:
    """Seconds an unmarked test's call may take before the run fails: $SESSIONTREE_SLOW_LIMIT,
    else under CI=true the larger of ``CI_SLOW_LIMIT`` and twice ``SLOW_MARK`` per runnable
    job on each core (the 1-minute load average over the cores: how far a wall clock
    stretches when every core is shared), else no limit (a local run on a busy laptop)."""
    if value := os.environ.get("SESSIONTREE_SLOW_LIMIT"):
        return float(value)
    if os.environ.get("CI", "").lower() != "true":
        return None
    return max(CI_SLOW_LIMIT, 2 * SLOW_MARK * os.getloadavg()[0] / (os.cpu_count() or 1))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Note every test not marked ``slow`` whose call took longer than ``slow_limit()``
    (under pytest-xdist the reports reach the controlling process, which keeps the list)."""
    if report.when != "call" or "slow" in report.keywords:
        return
    limit = slow_limit()
    if limit is not None and report.duration > limit:
        _too_slow.append((report.nodeid, report.duration, limit))


def pytest_terminal_summary(terminalreporter) -> None:
    if _too_slow:
        terminalreporter.section("tests over the slow limit, not marked slow")
        for nodeid, seconds, limit in sorted(_too_slow, key=lambda t: -t[1]):
            terminalreporter.line(f"{seconds:6.2f} s (limit {limit:.1f} s)  {nodeid}")
        terminalreporter.line(
            f"{len(_too_slow)} test(s) took over the limit: mark them @pytest.mark.slow or make them faster"
        )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A run with an unmarked test over the limit fails (exit status 1) even if every test passed."""
    if _too_slow and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


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
def frozen_clock():
    """The store's clock held still for the test (``sessiontree.clock.frozen``): move it
    with ``frozen_clock.advance(seconds)`` to give what was written an age."""
    from sessiontree import clock

    with clock.frozen() as frozen:
        yield frozen


@pytest.fixture
def no_env_key(monkeypatch):
    """No provider API key in the environment: a test's key is the one it passes."""
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def sleeps(monkeypatch):
    """The provider adapters' retry delays, recorded instead of waited (each still yields
    to the event loop once); ``sleeps.real = True`` really waits them too."""
    import asyncio

    from sessiontree.providers import http

    class Sleeps(list):
        real = False

    delays = Sleeps()
    real_sleep = asyncio.sleep

    async def fake_sleep(seconds: float) -> None:
        delays.append(seconds)
        await real_sleep(seconds if delays.real else 0)

    monkeypatch.setattr(http, "_sleep", fake_sleep)
    return delays


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


@pytest.fixture
def garage(store):
    """A session to search: a question, a tool call and its result, a checkpoint, a fork."""
    s = store.create_session("garage")
    s.append(user("Find the flux capacitor in the garage"))
    s.append(assistant(None, [tool_call("grep_files", {"pattern": "capacitor"}, id="c1")]))
    s.append({"role": "tool", "tool_call_id": "c1", "content": "shelf.txt: flux capacitor, 1.21 gigawatts"})
    s.append(assistant("It is on the shelf."))
    s.checkpoint("found", at="main~1")
    s.fork("kitchen", at="main~3")
    s.append(user("Look in the kitchen instead"), branch="kitchen")
    return s


def big_tool_session(store: Store, title: str = "tools", size: int = 5000):
    """A session with a big tool result (``walrus`` ... ``size`` - 2 bytes) among big messages."""
    s = store.create_session(title)
    s.append(user("x" * size))  # a big user message: never stripped
    s.append(assistant(None, [tool_call("cat", {"path": "a.log"}, id="c1")]))
    s.append({"role": "tool", "tool_call_id": "c1", "content": "walrus " * (size // 7)})
    s.append(assistant("y" * size))
    return s


# -- the command line ---------------------------------------------------------------


@pytest.fixture
def db(tmp_path):
    """The CLI tests' store file (not made yet)."""
    return tmp_path / "cli.db"


@pytest.fixture
def invoke(db):
    """``invoke(*args, code=0)``: the CLI on ``db``, in process; the exit code must be ``code``."""
    from click.testing import CliRunner

    from sessiontree.cli import cli

    runner = CliRunner()

    def invoke(*args: str, code: int = 0, **kwargs):
        result = runner.invoke(cli, ["--db", str(db), *args], catch_exceptions=False, **kwargs)
        assert result.exit_code == code, result.output
        return result

    return invoke


@pytest.fixture
def small(db):
    """A session with a fork, a checkpoint and a pending pause."""
    with Store(db) as store:
        s = store.create_session("small")
        q = s.append(user("Hi?"))
        s.append({"role": "assistant", "content": "Hello!"})
        s.checkpoint("greeted", at="main")
        s.fork("alt", at=q)
        s.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "rm", "arguments": '{"path": "/"}'}}
                ],
            },
            branch="alt",
        )
        from sessiontree import Pause
        from sessiontree.loop import run
        from sessiontree.testing import ScriptedModel

        steps = list(run(store, s, "alt", call=ScriptedModel([]), approve=lambda c: Pause("risky")))
        return {"session": s.id, "question": q.id, "pause": steps[0].node.id}


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
def db_target(request) -> Iterator[str]:
    """What ``Store()`` opens, for tests that run against both backends: a SQLite file,
    or a fresh PostgreSQL schema. (A target a test reopens, or hands to another process:
    ``:memory:`` is not one.) For a test that takes ``any_store`` too, the schema is an
    emptied one when there is one (``EmptiedSchemas``): that store migrates it anyway."""
    if request.param != "postgres" or "any_store" not in request.fixturenames:
        yield backend_target(request.param, request)
        return
    url = EMPTIED.take()
    try:
        yield url
    finally:
        EMPTIED.give_back(url)


@pytest.fixture
def any_store(db_target):
    with Store(db_target) as s:
        if db_target in EMPTIED.taken:
            EMPTIED.note(db_target)
        yield s


@pytest.fixture(params=["sqlite", "memory", "postgres"])
def every_store(request):
    """A store on every backend, for behaviour they all promise: a SQLite file, SQLite
    ``:memory:`` and an empty PostgreSQL schema (test ids end in the backend's name).
    The schema is one this worker emptied after an earlier test, when that test left its
    tables, functions and statistics as the migrations made them (``EmptiedSchemas``),
    else a new one: migrating a new schema took most of a short test's time."""
    if request.param != "postgres":
        with Store(backend_target(request.param, request)) as s:
            yield s
        return
    url = EMPTIED.take()
    try:
        with Store(url) as s:
            EMPTIED.note(url)
            yield s
    finally:
        EMPTIED.give_back(url)


class EmptiedSchemas:
    """Migrated PostgreSQL schemas of this worker, emptied for the next test.

    A schema is noted right after its first open (the migrations' work: every table,
    column, index, trigger, function and constraint, and each table's rows). Given back,
    it is emptied (``TRUNCATE ... RESTART IDENTITY``, the migrations' rows put back, every
    sequence restarted) only if it still matches that note and holds no statistics (an
    ``ANALYZE``, by a test or autovacuum, would change what the planner sees): otherwise,
    or if anything goes wrong, it is dropped, as every schema used to be."""

    CATALOG = """
        SELECT md5(coalesce(string_agg(x, '|' ORDER BY x), '')) FROM (
            SELECT 'c ' || c.relname || ' ' || c.relkind::text || ' ' || coalesce(c.reloptions::text, '')
                   || ' ' || coalesce(c.relacl::text, '') AS x
            FROM pg_class c WHERE c.relnamespace = %(ns)s::regnamespace
            UNION ALL
            SELECT 'a ' || c.relname || ' ' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
                   || ' ' || a.attnotnull::text || ' ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
            FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
            LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
            WHERE c.relnamespace = %(ns)s::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
            UNION ALL
            SELECT 'i ' || pg_get_indexdef(i.indexrelid)
            FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid WHERE c.relnamespace = %(ns)s::regnamespace
            UNION ALL
            SELECT 't ' || c.relname || ' ' || t.tgname || ' ' || t.tgenabled::text || ' ' || pg_get_triggerdef(t.oid)
            FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
            WHERE c.relnamespace = %(ns)s::regnamespace AND NOT t.tgisinternal
            UNION ALL
            SELECT 'p ' || p.oid::regprocedure::text || ' ' || md5(p.prosrc) || ' ' || coalesce(p.proconfig::text, '')
            FROM pg_proc p WHERE p.pronamespace = %(ns)s::regnamespace
            UNION ALL
            SELECT 'k ' || k.conname || ' ' || pg_get_constraintdef(k.oid)
            FROM pg_constraint k WHERE k.connamespace = %(ns)s::regnamespace
            UNION ALL
            SELECT 's ' || count(*) FROM pg_statistic s JOIN pg_class c ON c.oid = s.starelid
            WHERE c.relnamespace = %(ns)s::regnamespace
        ) parts
    """

    def __init__(self) -> None:
        self.spare: list[str] = []
        self.notes: dict[str, tuple[str, dict[str, list[tuple]]]] = {}
        self.taken: set[str] = set()  # handed out, not given back yet

    def take(self) -> str:
        url = self.spare.pop() if self.spare else fresh_schema_url(postgres_server())
        self.taken.add(url)
        return url

    def note(self, url: str) -> None:
        if url not in self.notes:
            with self._connect(url) as conn:
                self.notes[url] = (
                    self._catalog(conn, url),
                    {t: self._rows(conn, url, t) for t in self._tables(conn, url)},
                )

    def give_back(self, url: str) -> None:
        self.taken.discard(url)
        try:
            if url in self.notes and self._empty(url):
                self.spare.append(url)
                return
        except Exception:
            pass
        self.notes.pop(url, None)
        drop_schema(url)

    def drop_all(self) -> None:
        while self.spare:
            self.notes.pop(self.spare[-1], None)
            drop_schema(self.spare.pop())

    def _empty(self, url: str) -> bool:
        catalog, rows = self.notes[url]
        schema = self._schema(url)
        with self._connect(url) as conn, conn.transaction():
            conn.execute("SET LOCAL lock_timeout = '2s'")
            if self._catalog(conn, url) != catalog or set(self._tables(conn, url)) != set(rows):
                return False
            tables = ", ".join(f'"{schema}"."{t}"' for t in rows)
            conn.execute(f"TRUNCATE {tables} RESTART IDENTITY CASCADE")
            for table, kept in rows.items():
                for row in kept:
                    marks = ", ".join(["%s"] * len(row))
                    conn.execute(
                        f'INSERT INTO "{schema}"."{table}" OVERRIDING SYSTEM VALUE VALUES ({marks})', row
                    )
            sequences = conn.execute("SELECT sequencename FROM pg_sequences WHERE schemaname = %s", (schema,))
            for (sequence,) in sequences.fetchall():
                conn.execute(f'ALTER SEQUENCE "{schema}"."{sequence}" RESTART')
        return True

    @staticmethod
    def _schema(url: str) -> str:
        return url.partition("?schema=")[2]

    @classmethod
    def _connect(cls, url: str):
        import psycopg

        return psycopg.connect(url.partition("?schema=")[0], autocommit=True)

    def _catalog(self, conn, url: str) -> str:
        return conn.execute(self.CATALOG, {"ns": f'"{self._schema(url)}"'}).fetchone()[0]

    def _tables(self, conn, url: str) -> list[str]:
        found = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (self._schema(url),))
        return [t for (t,) in found.fetchall()]

    def _rows(self, conn, url: str, table: str) -> list[tuple]:
        return conn.execute(f'SELECT * FROM "{self._schema(url)}"."{table}"').fetchall()


EMPTIED = EmptiedSchemas()


@pytest.fixture(scope="session", autouse=True)
def _drop_emptied_schemas():
    yield
    EMPTIED.drop_all()


@pytest.fixture
def proxied():
    """(a URL through a dropping proxy, the same schema's direct URL, the proxy). The
    proxied URL names its connections after the schema (``application_name``), so a test
    can find its own server processes on the shared server."""
    from pg_proxy import DroppingProxy

    server = postgres_server()
    proxy = DroppingProxy(server)
    schema = fresh_schema_url(server).partition("?schema=")[2]
    direct = f"{server}?schema={schema}"
    yield proxy.url(schema) + "&application_name=" + schema, direct, proxy
    proxy.stop()
    drop_schema(direct)


PGBOUNCER = os.environ.get("SESSIONTREE_PGBOUNCER", "").lower() in ("true", "1", "yes", "on")
"""The PostgreSQL tests run through PgBouncer in transaction mode (tests/pg_bouncer.py)."""


def without_pgbouncer(limit: str) -> pytest.MarkDecorator:
    """Skip where PgBouncer's transaction mode cannot give what the test needs: ``limit``
    says what (the same list is in docs/postgres.md, *Pooling and PgBouncer*)."""
    return pytest.mark.skipif(PGBOUNCER, reason=f"behind PgBouncer in transaction mode, {limit}")


@contextmanager
def server_transaction(store: Store) -> Iterator:
    """A transaction on one of a server store's connections, with the store's settings
    (``search_path`` to its schema...): behind PgBouncer they last one transaction."""
    storage = store.storage
    with storage.pool.connection() as conn, conn.transaction():  # type: ignore[attr-defined]
        if storage.target.pgbouncer:  # type: ignore[attr-defined]
            conn.execute(storage._local_settings)  # type: ignore[attr-defined]
        yield conn


def raw(store: Store, sql: str, params: tuple = ()) -> list[tuple]:
    """Run SQL on the store's database behind the API's back (``?`` placeholders on both
    backends): how tests play another program, or check what the schema refuses."""
    from sessiontree.storage import SQLiteStorage

    if isinstance(store.storage, SQLiteStorage):
        return store.conn.execute(sql, params).fetchall()
    storage = store.storage
    if storage.target.pgbouncer:  # type: ignore[attr-defined]
        with server_transaction(store) as conn:  # the store's settings last one transaction there
            cursor = conn.execute(sql.replace("?", "%s"), params)
            return cursor.fetchall() if cursor.description else []
    with storage.pool.connection() as conn:  # type: ignore[attr-defined]
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


# -- interleavings: wait for a state, never for a time ------------------------------


def announce_lock_wait(store: Store, reached: threading.Event) -> None:
    """Call in a thread about to write through the SQLite ``store``: ``reached`` is set as
    this thread's next write transaction begins (its ``BEGIN IMMEDIATE`` is running, and
    waits there while another store holds the write lock)."""

    def trace(statement: str) -> None:
        if statement.startswith("BEGIN IMMEDIATE"):
            reached.set()

    store.conn.set_trace_callback(trace)


def blocked_backends(store: Store) -> int:
    """How many connections to the PostgreSQL ``store``'s schema wait for a lock another
    connection holds (the server's own view: ``pg_blocking_pids``)."""
    import psycopg

    server, _, schema = store.path.partition("?schema=")
    with psycopg.connect(server, autocommit=True) as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_stat_activity a WHERE cardinality(pg_blocking_pids(a.pid)) > 0"
            " AND EXISTS (SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation"
            " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE l.pid = a.pid AND n.nspname = %s)",
            (schema.partition("&")[0],),
        ).fetchone()[0]


def until_done_or_blocked(
    thread: threading.Thread, store: Store, reached: threading.Event, timeout: float = 60.0
) -> None:
    """Until ``thread`` has finished, or is waiting for a lock on ``store``'s database:
    on SQLite ``reached`` (``announce_lock_wait``), on PostgreSQL the server says a
    connection to the schema is blocked. (Polled: neither says so by a callback.)"""
    postgres = store.path.startswith("postgresql://")
    deadline = time.monotonic() + timeout
    while thread.is_alive():
        if (postgres and blocked_backends(store)) or (not postgres and reached.is_set()):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{thread.name} neither finished nor waited for a lock in {timeout:g} s")
        thread.join(0.01)


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
def client(app_client):
    """``client(db, **options)``: the serve app on ``db``, called in process."""
    pytest.importorskip("starlette", reason="the web extra is not installed")
    from sessiontree.view.server import create_app

    return lambda db, **options: app_client(create_app(db, **options))


@pytest.fixture
def demo(tmp_path):
    """(file, session id, pause id) of the view's demo store (tests/viewdata.py)."""
    from viewdata import demo_store

    db = tmp_path / "demo.db"
    session_id, pause_id = demo_store(db)
    return db, session_id, pause_id


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
