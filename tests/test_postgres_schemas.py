"""Stores in different schemas of one PostgreSQL database, and what a server is given:
a schema holding another application's tables (even ones the role may not read) is
refused before any write; the stores of two schemas never wait for each other's locks
while writers of one schema still do; a long schema name still carries decisions to
its workers; libpq's own URL parameters reach the server as written.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg import sql

import reliability_workers as workers
from sessiontree import Approve, Busy, Final, NotOurs, Resuming, Store, decide, work
from sessiontree.storage import postgres_db as pgdb
from sessiontree.testing import reply
from test_pause_races import make_pauses

from conftest import drop_schema, postgres_server, raw, user, without_pgbouncer


@pytest.fixture
def server() -> str:
    return postgres_server()


@pytest.fixture
def schemas(server) -> Iterator[Callable[[str], str]]:
    """``schema_url(name)``: the URL of a schema (named ``name`` padded with a unique
    suffix), dropped after the test."""
    made: list[str] = []

    def schema_url(prefix: str = "t_") -> str:
        url = f"{server}?schema={prefix}{uuid.uuid4().hex[:12]}"
        made.append(url)
        return url

    yield schema_url
    for url in made:
        drop_schema(url)


def schema_of(url: str) -> str:
    return url.partition("?schema=")[2]


def relations(server: str, schema: str) -> list[str]:
    with psycopg.connect(server) as conn:
        rows = conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace"
            " WHERE ns.nspname = %s AND c.relkind = 'r' ORDER BY 1",
            (schema,),
        ).fetchall()
    return [name for (name,) in rows]


@contextmanager
def role(server: str, *grants: str) -> Iterator[str]:
    """A login role without a password (the test server trusts 127.0.0.1), given these
    GRANT statements (``{role}`` in each names it, ``{db}`` the database); its URL, and
    the role dropped after, with what it owns."""
    name = f"r_{uuid.uuid4().hex[:12]}"
    parts = urlsplit(server)
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
        for grant in grants:
            conn.execute(grant.format(role=name, db=conn.info.dbname))
    try:
        yield parts._replace(netloc=f"{name}@{parts.hostname}:{parts.port}").geturl()
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))  # and its grants
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


# -- another application's schema -----------------------------------------------------


def test_a_schema_holding_tables_the_role_cannot_read_is_not_ours(server, schemas):
    """information_schema shows a role only the tables it has a privilege on: the schema
    looked empty, and sessiontree's nine tables were created beside the payroll."""
    schema = schema_of(schemas())
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}; CREATE TABLE {schema}.payroll (id int)")
    grants = (
        f"GRANT USAGE, CREATE ON SCHEMA {schema} TO {{role}}",
        "GRANT CREATE ON DATABASE {db} TO {role}",  # even a role that may create schemas
    )
    refused = f"schema '{schema}' already holds other tables \\(payroll\\)"
    with role(server, *grants) as url, pytest.raises(NotOurs, match=refused):
        Store(f"{url}?schema={schema}")
    assert relations(server, schema) == ["payroll"]


def test_another_tools_schema_version_table_is_not_ours(server, schemas):
    """A table named schema_version (Flyway's before version 5) made the schema look like
    a sessiontree store at its version 1, and migrate added steps 3 on to it."""
    schema = schema_of(schemas())
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(
            f"CREATE SCHEMA {schema};"
            f" CREATE TABLE {schema}.schema_version (installed_rank int, version varchar(50), script text);"
            f" INSERT INTO {schema}.schema_version VALUES (1, '1', 'V1__init.sql')"
        )
    with pytest.raises(NotOurs, match="already holds other tables \\(schema_version\\)"):
        Store(f"{server}?schema={schema}")
    assert relations(server, schema) == ["schema_version"]


def test_a_role_given_only_an_empty_schema_can_create_its_store_there(server, schemas):
    """CREATE SCHEMA IF NOT EXISTS needs the database's CREATE privilege even when the
    schema exists: a role a DBA gave just a schema could not open it."""
    schema = schema_of(schemas())
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    grant = f"GRANT USAGE, CREATE ON SCHEMA {schema} TO {{role}}"
    with role(server, grant) as url, Store(f"{url}?schema={schema}") as store:
        store.create_session("mine").append(user("hello"))
        assert [s.title for s in store.sessions()] == ["mine"]


# -- locks: per schema ------------------------------------------------------------------


@contextmanager
def holding(store: Store, take: Callable[[], object]) -> Iterator[None]:
    """A write transaction of ``store`` in another thread that has done ``take()`` (and so
    holds its locks) until the block ends."""
    held, release = threading.Event(), threading.Event()
    failed: list[BaseException] = []

    def hold() -> None:
        try:
            with store.storage.transaction():
                take()
                held.set()
                release.wait(30)
        except BaseException as e:  # noqa: BLE001 - reported by the test's thread
            failed.append(e)
            held.set()

    thread = threading.Thread(target=hold)
    thread.start()
    held.wait(30)
    try:
        assert not failed, failed
        yield
    finally:
        release.set()
        thread.join(30)


@pytest.fixture
def two_schemas(schemas, monkeypatch):
    """Store A, a second Store of A's schema, and store B, each holding one session
    (session key 1 in both schemas); a lock wait is Busy after 200 ms, not 30 s."""
    monkeypatch.setattr(pgdb, "LOCK_TIMEOUT", "200ms")
    a_url, b_url = schemas(), schemas()
    with Store(a_url) as a, Store(a_url) as a_again, Store(b_url) as b:
        sa, sb = a.create_session("a"), b.create_session("b")
        assert a.storage.session_row(sa.id)[0] == b.storage.session_row(sb.id)[0] == 1
        yield a, a_again.session(sa.id), sb


def test_a_session_lock_in_one_schema_does_not_block_another_schema(two_schemas):
    a, a_session_again, b_session = two_schemas
    (a_session_id,) = a.storage.session_ids()
    with holding(a, lambda: a.storage.lock_sessions([a_session_id])):
        b_session.append(user("not waiting for schema A"))  # was Busy: same lock key
        with pytest.raises(Busy):
            a_session_again.append(user("waits for A's writer"))
    a_session_again.append(user("after A's writer"))
    assert [m["content"] for m in b_session.messages()] == ["not waiting for schema A"]


def test_prunes_store_lock_in_one_schema_does_not_block_another_schema(two_schemas):
    a, a_session_again, b_session = two_schemas
    with holding(a, lambda: a.storage.unreachable(None, delete=True)):
        b_session.append(user("not waiting for A's prune"))  # was Busy: one key per database
        with pytest.raises(Busy):
            a_session_again.append(user("waits for A's prune"))
    a_session_again.append(user("after A's prune"))


def test_lock_classes_differ_per_schema_and_never_change():
    assert pgdb.lock_class("sessiontree") == pgdb.lock_class("sessiontree")
    assert len({pgdb.lock_class(f"s{i}") for i in range(1000)}) == 1000
    assert pgdb.lock_class("sessiontree") == 1084712042  # every process, every machine


# -- long schema names --------------------------------------------------------------------


@without_pgbouncer("there is no LISTEN (it lasts one transaction): workers poll")
@pytest.mark.parametrize("length", [52, 63])
def test_a_long_schema_name_still_wakes_its_workers(schemas, length):
    """'sessiontree:' and a schema of 52 characters or more made a channel name past
    PostgreSQL's 63 bytes: pg_notify refused, and with it every decision."""
    url = schemas("t_" + "x" * (length - 14))
    assert len(schema_of(url)) == length
    with Store(url) as store:
        (pause_id,) = make_pauses(store, 1)
        assert store.storage.wait_for_decisions(0) is False  # listening, nothing yet
        decide(store, pause_id, {"e": Approve()}, by="ops")
        assert store.storage.wait_for_decisions(30) is True


@without_pgbouncer("there is no LISTEN (it lasts one transaction): workers poll")
def test_a_worker_on_a_long_schema_is_woken_by_a_decision_not_by_its_poll(schemas, tmp_path, monkeypatch):
    monkeypatch.setenv(workers.TOOL_LOG_ENV, str(tmp_path / "executions.log"))
    url = schemas("t_" + "x" * 49)
    with Store(url) as store, Store(url) as human:
        (pause_id,) = make_pauses(store, 1)
        waiting = threading.Event()
        listen = store.storage.wait_for_decisions

        def wait_for_decisions(timeout: float) -> bool:
            if timeout > 0:  # the worker has looked, found nothing decided, and waits
                waiting.set()
            return listen(timeout)

        monkeypatch.setattr(store.storage, "wait_for_decisions", wait_for_decisions)
        carried: list[str] = []

        def worker() -> None:
            steps = work(store, poll=300, call=lambda m, t: reply("done"), tools=[workers.transfer])
            for step in steps:
                if isinstance(step, Resuming):
                    carried.append(step.pause_id)
                if isinstance(step, Final):
                    steps.close()
                    return

        thread = threading.Thread(target=worker, daemon=True)
        thread.start()
        assert waiting.wait(30)
        decide(human, pause_id, {"e": Approve()}, by="ops")
        thread.join(30)  # its poll is 300 s: only the NOTIFY wakes it this soon
        assert carried == [pause_id]
        assert (tmp_path / "executions.log").read_text().split()[1] == "0"


def test_channel_names_fit_and_stay_unique_per_schema(schemas):
    with Store(schemas()) as store:

        def channel(schema: str) -> str:
            return raw(store, "SELECT sessiontree_decision_channel(?)", (schema,))[0][0]

        assert channel("sessiontree") == "sessiontree:sessiontree"  # as before step 10
        assert channel("s" * 51) == "sessiontree:" + "s" * 51
        long = ["s" * 62 + "a", "s" * 62 + "b", "s" * 52]
        names = [channel(schema) for schema in long]
        assert len(set(names)) == 3 and all(len(name.encode()) <= 63 for name in names)
        assert all(name.startswith("sessiontree:" + "s" * 34 + ":") for name in names)


# -- libpq's own parameters -----------------------------------------------------------------


@without_pgbouncer("PgBouncer refuses the `options` startup parameter")
def test_libpq_url_parameters_reach_the_server_as_written(schemas):
    """They were decoded and re-encoded with + for a space, which libpq reads as a plus:
    the connection failed (unrecognized configuration parameter "+statement_timeout")."""
    url = schemas() + "&options=-c%20statement_timeout%3D5000&application_name=my%20worker"
    with Store(url) as store:
        settings = "SELECT current_setting('application_name'), current_setting('statement_timeout')"
        assert raw(store, settings) == [("my worker", "5s")]
        store.storage.wait_for_decisions(0)  # the listener's own connection too
        listener = store.storage._listener  # type: ignore[attr-defined]
        assert listener.execute(settings).fetchall() == [("my worker", "5s")]
    plus = pgdb.parse_url("postgresql://u@h/db?application_name=a+b&schema=s%5Fx&sslmode=disable")
    assert plus.schema == "s_x"
    assert plus.conninfo == "postgresql://u@h/db?application_name=a+b&sslmode=disable"
