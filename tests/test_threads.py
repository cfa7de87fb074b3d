"""One ``Store`` shared by threads: no acknowledged write lost, none half-done, and the
only error a compare-and-set loser's ``BranchMoved``.

Before: five threads adding ten items through one SQLite store kept 4, 6, 3 and 10 of
them in four runs; the others raised "no such savepoint: nested", "cannot start a
transaction within a transaction" or ``BranchMoved`` for heads nobody had moved, and
sometimes an item vanished with no error at all (the threads shared one connection, so
one thread's COMMIT or ROLLBACK ended another's transaction).

Every thread starts at one barrier, so they really race; nothing is timed.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from sessiontree import BranchMoved, Busy, Store, bridge
from sessiontree.model import Node
from sessiontree.storage import sqlite_threads

from conftest import drop_schema, fresh_schema_url, postgres_server

THREADS = 8
APPENDS = 50
FORK_EVERY = 10
CAS_TRIES = 25


@pytest.fixture(params=["file", "memory", "postgres"])
def shared_target(request, tmp_path) -> Iterator[str]:
    """What the threads' one store opens: a SQLite file, ``:memory:``, a PostgreSQL schema."""
    if request.param == "file":
        yield str(tmp_path / "threads.db")
    elif request.param == "memory":
        yield ":memory:"
    else:
        url = fresh_schema_url(postgres_server())
        yield url
        drop_schema(url)


@dataclass
class Acked:
    """What one thread was told it wrote."""

    own: list[str] = field(default_factory=list)  # its appends to its own branch, in order
    forks: dict[str, str] = field(default_factory=dict)  # fork name -> node it was made at
    won: list[Node] = field(default_factory=list)  # compare-and-set appends that were kept
    lost: list[BranchMoved] = field(default_factory=list)  # ... and those refused
    errors: list[BaseException] = field(default_factory=list)


def race(count: int, work: Callable[[int, Acked], None]) -> list[Acked]:
    """Run ``work(i, acked)`` in ``count`` threads started together; what each was told."""
    barrier = threading.Barrier(count)
    acked = [Acked() for _ in range(count)]

    def run(i: int) -> None:
        try:
            barrier.wait()
            work(i, acked[i])
        except BaseException as e:  # any error but a lost compare-and-set fails the test
            acked[i].errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return acked


def test_threads_sharing_a_store_lose_no_acknowledged_write(shared_target):
    with Store(shared_target) as store:
        session = store.create_session("threads")
        root = session.append({"role": "system", "content": "root"}, branch="shared")

        def work(i: int, acked: Acked) -> None:
            s = store.session(session.id)  # a handle of its own, on the shared store
            mine = f"t{i}"
            s.fork(mine, at=root)
            for n in range(APPENDS):
                acked.own.append(s.append({"role": "user", "content": f"{i}.{n}"}, branch=mine).id)
                if n % FORK_EVERY == FORK_EVERY - 1:
                    name = f"t{i}-f{n}"
                    s.fork(name, at=acked.own[-1])
                    acked.forks[name] = acked.own[-1]
                    assert s.path(name)[-1].id == acked.own[-1]  # a read between writes
                if n < CAS_TRIES:
                    head = s.head("shared")
                    try:
                        acked.won.append(
                            s.append(
                                {"role": "user", "content": f"cas {i}.{n}"}, branch="shared", expect_head=head
                            )
                        )
                    except BranchMoved as e:
                        acked.lost.append(e)

        acked = race(THREADS, work)
        assert [a.errors for a in acked] == [[]] * THREADS

        for i, a in enumerate(acked):
            assert [n.id for n in session.path(f"t{i}")] == [root.id, *a.own]
            for name, at in a.forks.items():
                assert session.head(name).id == at
        # The shared branch is one chain of exactly the appends that won, each on the one before.
        won = {n.id: n for a in acked for n in a.won}
        chain = session.path("shared")
        assert chain[0].id == root.id
        assert sorted(n.id for n in chain[1:]) == sorted(won)
        assert all(won[n.id].parent_id == parent.id for parent, n in zip(chain, chain[1:], strict=False))
        # A loser was told the truth: the head had moved, to a node another append put there.
        for e in (e for a in acked for e in a.lost):
            assert e.expected != e.actual and e.actual in won
        assert sum(len(a.won) + len(a.lost) for a in acked) == THREADS * CAS_TRIES
        acknowledged = [root.id, *won, *(id for a in acked for id in a.own)]
        assert len(session.tree()) == len(acknowledged) == len(set(acknowledged))
        assert store.verify().ok


def test_a_path_read_before_a_redaction_is_not_cached_after_it(db_target, monkeypatch):
    """A thread that read a path just before another redacted a node on it must not put
    the old payload in the store's cache once a third thread has seen the redaction:
    every later read would be served the stripped text from memory."""
    with Store(db_target) as store:
        storage = store.storage
        monkeypatch.setattr(storage, "redaction_check_every", 0.0)  # PostgreSQL: look every read
        session = store.create_session()
        secret = session.append({"role": "tool", "tool_call_id": "c1", "content": "secret"})
        storage.cache.clear()
        read, go = threading.Event(), threading.Event()

        def paused(walk):
            def paused_walk(*args):
                rows = walk(*args)
                if threading.current_thread().name == "early":  # read, not cached yet
                    read.set()
                    assert go.wait(30)
                return rows

            return paused_walk

        # The walk, and (PostgreSQL) the read of a branch in one statement that walks too.
        for walk in ("_path_rows", "_ref_walk"):
            monkeypatch.setattr(storage, walk, paused(getattr(storage, walk)))
        early = threading.Thread(target=lambda: session.path("main"), name="early")
        early.start()
        assert read.wait(30)
        with store.transaction():
            storage.redact(secret.id, "content", "[stripped]", "test", secret.created_at)
        assert session.path("main")[-1].payload["content"] == "[stripped]"  # sees it, caches it
        go.set()
        early.join()
        cached = storage.cache.get(secret.id)  # what a read that does not look at the count gets
        assert cached is None or cached[-1].payload["content"] == "[stripped]"
        assert session.path("main")[-1].payload["content"] == "[stripped]"
        assert store.node(secret.id).payload["content"] == "[stripped]"


def test_a_thread_never_reads_what_another_has_not_committed(db_target):
    """Before: the threads shared one connection, so a read in one ran inside the other's
    transaction and saw its writes before they were committed (or rolled back)."""
    with Store(db_target) as store:
        session = store.create_session()
        kept = session.append({"role": "user", "content": "kept"})
        written, seen = threading.Event(), threading.Event()
        heads = []

        def reader() -> None:
            assert written.wait(30)
            heads.append(session.head().id)  # a file's reader never waits for the writer
            seen.set()

        thread = threading.Thread(target=reader)
        thread.start()
        with pytest.raises(RuntimeError), store.transaction():
            session.append({"role": "user", "content": "never committed"})
            written.set()
            assert seen.wait(30)
            raise RuntimeError("roll it back")
        thread.join()
        assert heads == [kept.id] and session.head().id == kept.id


def test_a_connection_outlives_its_thread_only_to_serve_the_next(tmp_path):
    """A thread that ends gives its connection back: a thread per request (or a sync twin
    called inside a running event loop, which works on a new helper thread each time)
    does not open a connection per thread."""
    with Store(tmp_path / "s.db") as store:
        session = store.create_session()
        for i in range(20):
            thread = threading.Thread(target=session.append, args=({"role": "user", "content": f"{i}"},))
            thread.start()
            thread.join()
        assert len(store.storage._connections.slots()) == 2  # this thread's and one reused

        async def append(text: str) -> str:
            return session.append({"role": "user", "content": text}).id

        async def twins() -> list[str]:  # inside a running loop: a helper thread each call
            return [bridge.call(append(f"twin {i}")) for i in range(10)]

        ids = asyncio.run(twins())
        assert len(store.storage._connections.slots()) == 2
        assert [n.id for n in session.path("main")][-10:] == ids
        assert len(session.path("main")) == 30 and store.verify().ok


def test_close_closes_the_connection_of_every_thread(tmp_path):
    store = Store(tmp_path / "s.db")
    session = store.create_session()
    used, closed = threading.Event(), threading.Event()
    after = []

    def worker() -> None:
        session.append({"role": "user", "content": "from a thread"})
        used.set()
        assert closed.wait(30)
        try:
            session.head()
        except sqlite3.ProgrammingError as e:
            after.append(str(e))

    thread = threading.Thread(target=worker)
    thread.start()
    assert used.wait(30)
    conns = [slot.conn for slot in store.storage._connections.slots()]
    store.close()
    closed.set()
    thread.join()
    assert len(conns) == 2 and after == ["Cannot operate on a closed database."]
    for conn in conns:
        with pytest.raises(sqlite3.ProgrammingError):
            conn.execute("SELECT 1")
    fresh = threading.Thread(target=lambda: after.append(_error_of(session.head)))
    fresh.start()
    fresh.join()
    assert after[-1] == "Cannot operate on a closed database."  # no new connection after close


def _error_of(call: Callable[[], object]) -> str:
    try:
        call()
    except sqlite3.ProgrammingError as e:
        return str(e)
    return "no error"


@pytest.mark.parametrize("where", ["file", "memory"])
def test_a_thread_kept_waiting_for_the_store_is_told_busy(where, tmp_path, monkeypatch):
    """A thread waiting for another's transaction (one that waits for it: a deadlock)
    gets ``Busy`` after the wait a file gets from another process, not a hang."""
    monkeypatch.setattr(sqlite_threads, "LOCK_WAIT_S", 0.2)
    with Store(":memory:" if where == "memory" else tmp_path / "s.db") as store:
        session = store.create_session()
        errors = []

        def writer() -> None:
            try:
                session.append({"role": "user", "content": "waits for the other"})
            except Busy as e:
                errors.append(str(e))

        with store.transaction():
            session.append({"role": "user", "content": "holds the store"})
            thread = threading.Thread(target=writer)
            thread.start()
            thread.join()
        assert len(errors) == 1 and "nothing was written" in errors[0]
        assert [n.payload["content"] for n in session.path("main")] == ["holds the store"]


def test_now_never_pairs_one_seconds_text_with_another_seconds_milliseconds(monkeypatch):
    """``ids.now`` caches the text of the current second. Before, that cache was two
    globals, read apart: a thread that had found the cached second to be its own, then
    read the text after another thread had cached the next second, stamped the next
    second's text with its own milliseconds (a timestamp a second off). The test stops
    the first thread exactly there (its comparison of seconds runs the other thread)."""
    import time as real

    from sessiontree import ids

    first, second = 1_700_000_000, 1_700_000_001
    text = {s: real.strftime("%Y-%m-%dT%H:%M:%S", real.gmtime(s)) for s in (first, second)}
    late_wrote = threading.Event()

    class Second(int):
        def __ne__(self, other: object) -> bool:  # the first thread, between look and read
            if threading.current_thread().name == "early" and not late_wrote.is_set():
                late = threading.Thread(target=lambda: stamps.append(ids.now()), name="late")
                late.start()
                late.join()
                late_wrote.set()
            return int(self) != other

        __hash__ = int.__hash__

    def clock_divmod(ms: int, by: int) -> tuple[int, int]:
        at = second if threading.current_thread().name == "late" else first
        return Second(at), 123

    monkeypatch.setattr(ids, "divmod", clock_divmod, raising=False)
    stamps: list[str] = []
    ids.now()  # the cache holds the first second
    early = threading.Thread(target=lambda: stamps.insert(0, ids.now()), name="early")
    early.start()
    early.join()
    assert late_wrote.is_set()
    assert stamps == [f"{text[first]}.123Z", f"{text[second]}.123Z"]
