"""What a server store says when the server fails it: a connection lost before COMMIT
(rolled back: ``Unavailable``) against one lost once COMMIT was sent (``OutcomeUnknown``,
naming the node to look for), and statement errors that are not the connection at all
(a statement timeout, a bad server option, a PostgreSQL limit), each one line saying
what it is. The connection is cut by a proxy (``pg_proxy``) at a chosen message, or by
``pg_terminate_backend`` from another connection."""

from __future__ import annotations

import time

import psycopg
import pytest

from sessiontree import (
    Approve,
    NotFound,
    OutcomeUnknown,
    SessionTreeError,
    Store,
    Unavailable,
    decide,
)
from sessiontree.storage import postgres_db as pgdb
from test_pause_races import make_pauses

from conftest import PGBOUNCER, user, without_pgbouncer

COMMIT = b"COMMIT\x00"
APPEND = b"sessiontree_append("
DECIDE = b"sessiontree_decide("
"""An append under a branch head is one statement, its own transaction: sending it is
sending its COMMIT."""


def an_appends_commit(call: bytes = APPEND) -> dict[str, bytes]:
    """``drop_at``'s pattern for the message that commits a one-statement write (an append
    under a head; a decision with ``DECIDE``): the one call, or behind PgBouncer
    (``pgbouncer=true``: BEGIN and the settings first) the COMMIT after it."""
    return {"pattern": COMMIT, "after": call} if PGBOUNCER else {"pattern": call}


def server_process_ended(direct: str, pid: int) -> None:
    """Wait (at most 10 s) until the server process ``pid`` has gone."""
    server = direct.partition("?")[0]
    with psycopg.connect(server, autocommit=True) as conn:
        deadline = time.monotonic() + 10
        while conn.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
            assert time.monotonic() < deadline, f"server process {pid} is still there"
            time.sleep(0.02)


def test_a_connection_lost_once_commit_was_sent_is_outcome_unknown_and_it_did_commit(proxied):
    url, direct, proxy = proxied
    with Store(url) as store:
        s = store.create_session("lost")
        s.append(user("first"))
        proxy.drop_at(**an_appends_commit(), forward=True)  # the server commits; the client never hears
        with pytest.raises(OutcomeUnknown) as lost:
            s.append(user("second"))
        assert proxy.dropped.is_set()
        message = str(lost.value)
        assert "\n" not in message and "while committing" in message and "may or may not" in message
        assert f"store.node({lost.value.node_id!r})" in message and "***" not in message
        assert s.append(user("third")).depth == 2  # the store carries on (a new connection)
    with Store(direct) as store:  # it was saved, whole: a blind retry would have doubled it
        node = store.node(lost.value.node_id)
        assert node.payload["content"] == "second"
        assert [m["content"] for m in store.session(s.id).messages()] == ["first", "second", "third"]


def test_a_commit_that_never_reached_the_server_is_outcome_unknown_then_found_absent(proxied):
    url, direct, proxy = proxied
    with Store(url) as store:
        s = store.create_session("lost")
        s.append(user("first"))
        proxy.drop_at(**an_appends_commit(), forward=False)
        with pytest.raises(OutcomeUnknown) as lost:
            s.append_many([user("a"), user("b")])
    assert lost.value.backend_pid is not None and f"process {lost.value.backend_pid}" in str(lost.value)
    server_process_ended(direct, lost.value.backend_pid)  # the check the message describes
    with Store(direct) as store:
        with pytest.raises(NotFound):
            store.node(lost.value.node_id)
        assert [m["content"] for m in store.session(s.id).messages()] == ["first"]


def test_a_connection_lost_before_commit_is_unavailable_and_nothing_is_written(proxied):
    url, direct, proxy = proxied
    with Store(url) as store:
        s = store.create_session("lost")
        s.append(user("first"))
        proxy.drop_at(b"INSERT INTO nodes", forward=False)
        with pytest.raises(Unavailable) as lost:  # a new branch: a transaction of statements
            s.append(user("second"), branch="other")
        assert not isinstance(lost.value, OutcomeUnknown)
        assert str(lost.value).startswith("lost the connection to PostgreSQL at postgresql://")
        assert str(lost.value).endswith("nothing was written") and "\n" not in str(lost.value)
        s.append(user("second"))  # so trying again is safe: it is there once
    with Store(direct) as store:
        assert [m["content"] for m in store.session(s.id).messages()] == ["first", "second"]


def test_behind_pgbouncer_an_append_lost_before_its_commit_is_unavailable_and_not_written(proxied):
    """With ``pgbouncer=true`` the one call runs inside BEGIN (the settings go with it), so
    its COMMIT, not the call, is the point of no return: a connection lost after the call
    was sent and before COMMIT was rolled back. (It said OutcomeUnknown, "may or may not".)"""
    url, direct, proxy = proxied
    with Store(f"{url}&pgbouncer=true") as store:
        s = store.create_session("lost")
        s.append(user("first"))
        proxy.drop_at(APPEND, forward=True)  # the server ran the call; COMMIT is never sent
        with pytest.raises(Unavailable) as lost:
            s.append(user("second"))
        assert proxy.dropped.is_set() and not isinstance(lost.value, OutcomeUnknown)
        assert str(lost.value).endswith("nothing was written")
        assert s.append(user("third")).depth == 1  # the store carries on, and "second" is not there
    with Store(direct) as store:
        assert [m["content"] for m in store.session(s.id).messages()] == ["first", "third"]


def test_a_decision_whose_commit_was_lost_is_found_by_the_id_the_error_carries(proxied):
    url, direct, proxy = proxied
    with Store(url) as store:
        (pause,) = make_pauses(store, 1)
        proxy.drop_at(**an_appends_commit(DECIDE), forward=True)  # one statement, as an append
        with pytest.raises(OutcomeUnknown) as lost:
            decide(store, pause, {"e": Approve()}, by="alice")
    with Store(direct) as store:  # it is the decision, not someone else's
        decision = store.node(lost.value.node_id)
        assert (decision.kind, decision.parent_id) == ("decision", pause)


@without_pgbouncer(
    "a client's backend pid is PgBouncer's, not a server process's: there is none to end by it"
)
def test_a_terminated_server_process_is_replaced_unseen(pg_url):
    with Store(f"{pg_url}&pool_size=1") as store:
        s = store.create_session("kill")
        s.append(user("first"))
        pool = store.storage.pool  # type: ignore[attr-defined]
        with pool.connection() as conn:  # its one connection (only the store's: the server is shared)
            pid = conn.info.backend_pid
        with psycopg.connect(pg_url.partition("?")[0], autocommit=True) as other:
            assert other.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,)).fetchone() == (True,)
        # Its connection had the server's FATAL waiting: the pool gave a new one (before,
        # this read was Unavailable).
        assert [m["content"] for m in s.messages()] == ["first"]
        assert pool.get_stats().get("connections_num", 0) >= 2


@without_pgbouncer("PgBouncer refuses the `options` startup parameter")
def test_a_statement_timeout_says_so(pg_url):
    with Store(pg_url) as store:
        s = store.create_session("slow")
    server, _, schema = pg_url.partition("?schema=")
    timed = f"{server}?options=-cstatement_timeout%3D200&schema={schema}"
    with Store(timed) as store, psycopg.connect(server, autocommit=True) as other:
        with other.transaction():
            other.execute(f'LOCK TABLE "{schema}".nodes IN EXCLUSIVE MODE')
            with pytest.raises(SessionTreeError) as slow:
                store.session(s.id).append(user("waits for the lock"))
        assert not isinstance(slow.value, Unavailable)
        assert str(slow.value).startswith(f"PostgreSQL at {server}?schema={schema} canceled the statement:")
        assert "statement timeout" in str(slow.value) and "nothing was written" in str(slow.value)
        assert store.session(s.id).branches() == []  # the append left nothing


@without_pgbouncer("PgBouncer refuses the `options` startup parameter")
def test_a_bad_server_option_is_named_not_unreachable(pg_url):
    server, _, schema = pg_url.partition("?schema=")
    for option, said in [
        ("no_such_setting%3D1", 'unrecognized configuration parameter "no_such_setting"'),
        ("statement_timeout%3Dsoon", 'invalid value for parameter "statement_timeout": "soon"'),
    ]:
        with pytest.raises(SessionTreeError) as refused:
            Store(f"{server}?options=-c{option}&schema={schema}")
        assert not isinstance(refused.value, Unavailable)
        assert str(refused.value) == f"PostgreSQL at {server}?schema={schema} refused the connection: {said}"


def test_a_postgresql_limit_is_named_not_unreachable(pg_url):
    too_many_words = " ".join(f"w{i:07d}" for i in range(100_000))
    with (
        Store(pg_url) as store,
        store.storage.pool.connection() as conn,  # type: ignore[attr-defined]
        pytest.raises(SessionTreeError) as limit,
        pgdb.clear_errors("here"),
    ):
        conn.execute("SELECT to_tsvector('simple', %s)", (too_many_words,))
    assert not isinstance(limit.value, Unavailable)
    assert str(limit.value) == (
        "a PostgreSQL limit was exceeded at here: string is too long for tsvector"
        " (1200000 bytes, max 1048575 bytes); nothing was written"
    )
