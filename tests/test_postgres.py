"""What only a server store has: migrating once under many workers, URLs and their errors,
workers woken by NOTIFY that carry each decided pause on exactly once, and copies between
SQLite and PostgreSQL. (The store's own behaviour runs on both backends in conformance/test_tree.py,
test_store_machine.py and the reliability tests.)
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from collections import Counter

import psycopg
import pytest
from click.testing import CliRunner

import reliability_workers as workers
from sessiontree import (
    Approve,
    Conflict,
    ImportConflict,
    InvalidPayload,
    NotOurs,
    SchemaTooNew,
    SessionTreeError,
    Store,
    Unavailable,
    copy_sessions,
    decide,
)
from sessiontree.cli import cli
from sessiontree.db import migrations
from test_pause_races import make_pauses

from conftest import drop_schema, fresh_schema_url, public_rows_of, raw, user

CTX = multiprocessing.get_context("spawn")


def open_at_once(url: str, barrier) -> None:
    barrier.wait(30)
    with Store(url) as store:
        store.create_session("hello")


@pytest.mark.slow
def test_workers_starting_together_migrate_exactly_once(pg_url):
    barrier = CTX.Barrier(6)
    procs = [CTX.Process(target=open_at_once, args=(pg_url, barrier)) for _ in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * 6
    with Store(pg_url) as store:
        assert store.schema_version == len(migrations()) and len(store.sessions()) == 6
        assert raw(store, "SELECT count(*) FROM schema_version") == [(1,)]


def test_a_newer_schema_and_foreign_tables_are_refused_before_any_write(pg_url):
    Store(pg_url).close()
    server, _, schema = pg_url.partition("?schema=")
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'UPDATE "{schema}".schema_version SET version = 99')
    with pytest.raises(SchemaTooNew, match="schema version 99 is newer"):
        Store(pg_url)
    other = fresh_schema_url(server)
    _, _, name = other.partition("?schema=")
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"; CREATE TABLE "{name}".invoices (id int)')
    try:
        with pytest.raises(NotOurs, match="already holds other tables \\(invoices\\)"):
            Store(other)
        with psycopg.connect(server, autocommit=True) as conn:  # nothing was added to it
            tables = conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (name,)
            ).fetchall()
        assert tables == [("invoices",)]
    finally:
        drop_schema(other)


def test_an_unreachable_server_is_one_clear_error_with_the_password_hidden():
    port = __import__("pg_cluster").free_port()
    url = f"postgresql://me:secret@127.0.0.1:{port}/db"
    with pytest.raises(
        Unavailable, match=f"cannot reach PostgreSQL at postgresql://me:\\*\\*\\*@127.0.0.1:{port}"
    ):
        Store(url)
    result = CliRunner().invoke(cli, ["--db", url, "sessions"])
    assert result.exit_code == 1
    assert result.output.startswith("Error: cannot reach PostgreSQL at postgresql://me:***@")
    assert "secret" not in result.output and "Traceback" not in result.output


def test_nul_is_refused_in_titles_on_both_backends_and_kept_in_payloads(any_store):
    with pytest.raises(InvalidPayload, match="NUL"):
        any_store.create_session("a\x00b")
    session = any_store.create_session("ok")
    with pytest.raises(Conflict, match="invalid branch name"):  # names refuse every control character
        session.append(user("x"), branch="ma\x00in")
    session.append(user("before\x00after"))
    assert session.messages() == [user("before\x00after")]


def test_the_cli_works_on_a_server_store(pg_url):
    runner = CliRunner()
    with Store(pg_url) as store:
        session_id = store.create_session("cli").id
    created = runner.invoke(cli, ["--db", pg_url, "append", "hello there", "-s", session_id, "--json"])
    assert created.exit_code == 0, created.output
    assert json.loads(created.output)["node"]["payload"] == user("hello there")
    listed = runner.invoke(cli, ["--db", pg_url, "sessions", "--json"])
    assert [s["id"] for s in json.loads(listed.output)] == [session_id]
    log = runner.invoke(cli, ["--db", pg_url, "log", "main", "-s", session_id])
    assert "hello there" in log.output
    verify = runner.invoke(cli, ["--db", pg_url, "verify"])
    assert verify.exit_code == 0 and "ok" in verify.output


# -- workers -----------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_n_workers_resume_m_pauses_each_exactly_once(tmp_path, backend, request):
    db = str(tmp_path / "w.db") if backend == "sqlite" else request.getfixturevalue("pg_url")
    tool_log = tmp_path / "executions.log"
    tool_log.touch()
    pauses_total, n_workers = 24, 4
    with Store(db) as store:
        pauses = make_pauses(store, pauses_total)
        for pause_id in pauses:
            decide(store, pause_id, {"e": Approve()}, by="ops")
    start = CTX.Event()
    procs = [
        CTX.Process(
            target=workers.pause_worker, args=(db, f"w{i}", start, str(tmp_path), str(tool_log), 0.2, True)
        )
        for i in range(n_workers)
    ]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * n_workers
    carried = Counter(
        pause for i in range(n_workers) for pause in json.loads((tmp_path / f"work-w{i}.json").read_text())
    )
    assert carried == Counter(pauses)  # every pause carried on by exactly one worker
    amounts = Counter(int(line.split()[1]) for line in tool_log.read_text().splitlines())
    assert amounts == Counter(range(pauses_total))  # and its unsafe tool ran exactly once
    with Store(db) as store:
        assert store.storage.resumable() == [] and store.verify().ok
    print(
        f"\n{backend}: pauses per worker {Counter(len(json.loads((tmp_path / f'work-w{i}.json').read_text())) for i in range(n_workers))}"
    )


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("SESSIONTREE_PGBOUNCER", "").lower() in ("true", "1", "yes", "on"),
    reason="behind PgBouncer in transaction mode there is no LISTEN: the worker polls (docs/postgres.md)",
)
def test_a_waiting_worker_is_woken_by_a_decision_not_by_its_poll(tmp_path, pg_url):
    tool_log = tmp_path / "executions.log"
    tool_log.touch()
    with Store(pg_url) as store:
        (pause_id,) = make_pauses(store, 1)
    start, waiting = CTX.Event(), CTX.Event()
    worker = CTX.Process(
        target=workers.pause_worker,
        args=(pg_url, "w", start, str(tmp_path), str(tool_log), 300.0, False, waiting),
    )
    worker.start()
    start.set()
    try:
        assert waiting.wait(60)  # the worker has looked, found nothing decided, and waits (poll: 300 s)
        assert tool_log.read_text() == ""
        with Store(pg_url) as store:
            decide(store, pause_id, {"e": Approve()}, by="ops")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not tool_log.read_text():
            time.sleep(0.1)
        assert tool_log.read_text().split()[1] == "0"  # it ran, long before any poll
    finally:
        worker.kill()
        worker.join(10)


def test_work_until_idle_in_process_and_the_worker_command(tmp_path):
    db = str(tmp_path / "w.db")
    with Store(db) as store:
        session = store.create_session("cli")
        session.append(user("hello"))
        session.append({"reason": "check", "calls": []}, kind="pause")
    result = CliRunner().invoke(
        cli,
        ["--db", db, "worker", "--base-url", "http://127.0.0.1:9/v1", "-m", "m", "--until-idle", "--json"],
    )
    assert result.exit_code == 0, result.output
    assert result.output == ""  # nothing decided: nothing to do
    with Store(db) as store:
        assert len(store.pending()) == 1  # the undecided pause was left alone
    # from a thread other than the main one (which alone may set signal handlers)
    results = []
    thread = threading.Thread(
        target=lambda: results.append(
            CliRunner().invoke(
                cli, ["--db", db, "worker", "--base-url", "http://127.0.0.1:9/v1", "-m", "m", "--until-idle"]
            )
        )
    )
    thread.start()
    thread.join(30)
    assert results[0].exit_code == 0 and results[0].output == "", results[0].output


@pytest.mark.parametrize(
    ("backend", "stop"), [("sqlite", "SIGINT"), ("postgres", "SIGINT"), ("sqlite", "SIGTERM")]
)
def test_ctrl_c_or_sigterm_stops_a_waiting_worker_at_once_whatever_its_poll(tmp_path, backend, stop, request):
    """asyncio waits for a running thread before it exits: the worker waits in short
    slices, so Ctrl-C is not held up by a 30-second poll (it was, for up to the poll).
    A stop is not a failure: one line, and the shell's exit code for the signal (SIGTERM,
    a service manager's stop, is taken like Ctrl-C)."""
    import signal

    db = str(tmp_path / "w.db") if backend == "sqlite" else request.getfixturevalue("pg_url")
    Store(db).close()
    command = ["--db", db, "worker", "--poll", "30", "--base-url", "http://127.0.0.1:9/v1", "-m", "m"]
    worker = subprocess.Popen(
        [sys.executable, "-c", "from sessiontree.cli import cli; cli()", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for_handler(worker.pid, signal.SIGTERM)  # its stop handlers are in place
        assert worker.poll() is None
        stopped = time.monotonic()
        worker.send_signal(signal.Signals[stop])
        _, err = worker.communicate(timeout=25)
        assert time.monotonic() - stopped < 5  # a slice is 0.25 s; the poll is 30 s
        assert err == f"worker stopped ({stop})\n"
        assert worker.returncode == 128 + signal.Signals[stop]
    finally:
        worker.kill()
        worker.wait(10)


def _wait_for_handler(pid: int, signum: int, timeout: float = 60.0) -> None:
    """Until process ``pid`` catches ``signum`` (its SigCgt mask in /proc): the worker sets
    its SIGTERM handler just before it starts working, so a signal sent after that is
    taken by the worker and not by the interpreter while it still imports (which under a
    loaded machine took longer than any fixed sleep)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/status") as f:
            caught = next(int(line.split()[1], 16) for line in f if line.startswith("SigCgt:"))
        if caught & (1 << (signum - 1)):
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} never caught signal {signum}")


# -- copy ----------------------------------------------------------------------------------


def fill(store: Store) -> list[str]:
    """Two sessions with runs, forks, checkpoints, a pause and a decision."""
    from sessiontree import Completion, run
    from sessiontree.testing import ScriptedModel, reply

    a = store.create_session("a", {"team": "x"})
    a.append(user("hi"))
    list(
        run(
            store, a, call=ScriptedModel([Completion(reply("hello"), model="m1", usage={"prompt_tokens": 3})])
        )
    )
    a.checkpoint("v1", at="main")
    a.fork("exp", at="v1")
    a.append(user("other way"), branch="exp")
    make_pauses(store, 1)
    return [s.id for s in store.sessions()]


def test_copy_both_ways_is_lossless_and_idempotent(tmp_path, pg_url):
    sqlite_path = str(tmp_path / "a.db")
    with Store(sqlite_path) as origin:
        ids = fill(origin)
        before = public_rows_of(origin)
    runner = CliRunner()
    up = runner.invoke(cli, ["copy", sqlite_path, pg_url])
    assert up.exit_code == 0, up.output
    assert up.output.endswith(f"copied {len(ids)} session(s) from {sqlite_path} to {pg_url}\n")
    with Store(pg_url) as server:
        assert public_rows_of(server) == before
        assert server.verify().ok
    again = runner.invoke(cli, ["copy", sqlite_path, pg_url, "--json"])
    assert sorted(json.loads(again.stdout)["sessions"]) == sorted(ids)
    with Store(pg_url) as server:
        assert public_rows_of(server) == before  # nothing new the second time
    back = str(tmp_path / "back.db")
    down = runner.invoke(cli, ["copy", pg_url, back])
    assert down.exit_code == 0, down.output
    with Store(back) as copy:
        assert public_rows_of(copy) == before


def test_copy_refuses_a_diverged_branch_and_keeps_what_it_copied(tmp_path, pg_url):
    with Store(tmp_path / "a.db") as origin, Store(pg_url) as server:
        fill(origin)
        copy_sessions(origin, server)
        session_id = next(s.id for s in origin.sessions() if s.title == "a")
        origin.session(session_id).append(user("here"), branch="main")
        server.session(session_id).append(user("there"), branch="main")
        with pytest.raises(ImportConflict, match="branch 'main' has diverged"):
            copy_sessions(origin, server, [session_id])
        assert [m["content"] for m in server.session(session_id).messages()][-1] == "there"


def test_many_threads_share_one_server_store(pg_url):
    """One Store, several threads (a web server's workers): each transaction has its own
    connection from the pool, and compare-and-set still holds."""
    with Store(pg_url) as store:
        session = store.create_session("threads")
        session.append(user("root"))
        errors: list[Exception] = []

        def writer(i: int) -> None:
            try:
                for j in range(20):
                    session.append(user(f"{i}-{j}"), branch=f"b{i}" if j else "main")
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert store.verify().ok


def test_every_step_from_3_has_a_postgres_file():
    from sessiontree import db
    from sessiontree.storage import postgres_db

    assert [s.version for s in postgres_db.steps()] == list(range(3, len(db.migrations()) + 1))


def test_migrate_lists_then_applies_on_a_server(pg_url):
    runner = CliRunner()
    listed = runner.invoke(cli, ["--db", pg_url, "migrate", "--list"])
    steps = [
        "0003_integer_keys",
        "0004_search",
        "0005_retention",
        "0006_search_queue",
        "0007_search_watermark",
        "0008_redaction_count",
        "0009_search_tools",
        "0010_decision_channel",
        "0011_search_bounds",
        "0012_fixed_plans",
        "0013_lighter_writes",
    ]
    assert listed.output == "".join(f"{s}\n" for s in steps) + "11 pending step(s); schema version 0\n"
    applied = runner.invoke(cli, ["--db", pg_url, "migrate"])
    assert applied.output == "".join(f"applied {s}\n" for s in steps)
    again = runner.invoke(cli, ["--db", pg_url, "migrate"])
    assert again.output == "0 pending step(s); schema version 13\n"


def test_the_sqlite_path_imports_no_postgres_driver_and_a_missing_driver_is_explained(monkeypatch):
    code = (
        "import sys, sessiontree; s = sessiontree.Store(':memory:'); s.create_session('x');"
        " from sessiontree.cli import cli; assert not [m for m in sys.modules if m.startswith('psycopg')]"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    for module in [m for m in sys.modules if m.startswith(("psycopg", "sessiontree.storage.postgres"))]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if the extra were not installed
    with pytest.raises(
        SessionTreeError, match=r"needs the postgres extra .*pip install 'sessiontree\[postgres\]'"
    ):
        Store("postgresql://127.0.0.1/x")


@pytest.mark.slow
def test_many_machines_appending_and_resuming_at_once(tmp_path, pg_url):
    """Writer and worker processes, each with its own pool over TCP, as on separate machines:
    appends with compare-and-set to shared branches while decided pauses are carried on."""
    tool_log = tmp_path / "executions.log"
    tool_log.touch()
    with Store(pg_url) as store:
        session = store.create_session("shared")
        root = session.append(user("root"), branch="shared")
        pauses = make_pauses(store, 12)
        for pause_id in pauses:
            decide(store, pause_id, {"e": Approve()}, by="ops")
    start = CTX.Event()
    writers = [
        CTX.Process(target=workers.append_worker, args=(pg_url, session.id, i, 3.0, str(tmp_path), start))
        for i in range(3)
    ]
    resumers = [
        CTX.Process(
            target=workers.pause_worker,
            args=(pg_url, f"w{i}", start, str(tmp_path), str(tool_log), 0.2, True),
        )
        for i in range(3)
    ]
    for p in writers + resumers:
        p.start()
    start.set()
    for p in writers + resumers:
        p.join(120)
    assert [p.exitcode for p in writers + resumers] == [0] * 6
    results = [json.loads((tmp_path / f"result-{i}.json").read_text()) for i in range(3)]
    assert [r["errors"] for r in results] == [[]] * 3
    acks = [
        line.split("\t") for i in range(3) for line in (tmp_path / f"acks-{i}.log").read_text().splitlines()
    ]
    carried = Counter(p for i in range(3) for p in json.loads((tmp_path / f"work-w{i}.json").read_text()))
    assert carried == Counter(pauses)
    assert sorted(int(line.split()[1]) for line in tool_log.read_text().splitlines()) == list(range(12))
    with Store(pg_url) as store:
        s = store.session(session.id)
        assert sorted(n.id for n in s.tree()) == sorted([root.id, *(node for _, node in acks)])
        shared = s.path("shared")
        assert [n.depth for n in shared] == list(range(len(shared)))
        assert sorted(n.id for n in shared[1:]) == sorted(node for branch, node in acks if branch == "shared")
        assert store.verify().ok and store.storage.resumable() == []


def test_a_reply_naming_a_model_with_nul_becomes_an_error_node_on_both_backends(any_store):
    from sessiontree import Completion, run

    session = any_store.create_session("nul")
    session.append(user("hi"))
    odd = Completion({"role": "assistant", "content": "hi"}, model="gpt\x00evil")
    steps = list(run(any_store, session, call=lambda messages, tools: odd))
    assert steps[-1].reason == "error" and "NUL" in steps[-1].error
    assert steps[-1].node.kind == "error" and any_store.verify().ok
    fine = list(run(any_store, session, call=lambda messages, tools: {"role": "assistant", "content": "ok"}))
    assert fine[-1].reason == "completed"


@pytest.mark.parametrize(
    "fixture",
    ["pi/pi-mono-before-compaction.jsonl", "claude-code/claude-code-log-sidechain_integrated.jsonl"],
)
def test_an_import_stores_the_same_rows_on_both_backends(tmp_path, pg_url, fixture):
    """pi imports stream into the store (bulk_stream), Claude Code through write_sessions:
    both give the same rows on PostgreSQL as on SQLite."""
    from pathlib import Path

    path = Path(__file__).parent / "fixtures" / "real" / fixture
    runner = CliRunner()
    for target in (str(tmp_path / "s.db"), pg_url):
        result = runner.invoke(cli, ["--db", target, "import", str(path)])
        assert result.exit_code == 0, result.output
    with Store(tmp_path / "s.db") as sqlite_store, Store(pg_url) as server:
        ours, theirs = public_rows_of(server), public_rows_of(sqlite_store)
        # a branch the file does not date is dated by the import: the only difference
        for rows in (ours, theirs):
            rows["branches"] = [b[:4] for b in rows["branches"]]
        assert ours == theirs
        assert server.verify().ok


def test_serve_reads_a_server_store_through_one_pool(pg_url, app_client):
    pytest.importorskip("starlette", reason="the web extra is not installed")
    from sessiontree.view.server import create_app

    with Store(pg_url) as store:
        session = store.create_session("served")
        session.append(user("hello from the server store"))
    client = app_client(create_app(pg_url))
    assert [s["id"] for s in client.get("/api/sessions").json()] == [session.id]
    assert client.get(f"/s/{session.id}").status_code == 200
    (hit,) = client.get("/api/search", params={"q": "hello"}).json()
    assert hit["href"] == f"/s/{session.id}#node={hit['node']}"
