"""The path cache: nodes never change, so a long-lived Store re-reads a branch that
grew by k nodes in O(k); pointers are always read fresh, so other processes' writes
are seen at once; memory stays under its bound; prune and delete leave nothing stale."""

from __future__ import annotations

import threading

from sessiontree import Store
from sessiontree.storage.cache import PathCache

from conftest import assistant, user


def rows_read(store: Store, action) -> int:
    """How much work SQLite did for a read (virtual machine steps, in units of 1)."""
    steps = []
    store.conn.set_progress_handler(lambda: steps.append(1), 1)
    try:
        action()
    finally:
        store.conn.set_progress_handler(None, 1)
    return len(steps)


def test_a_grown_branch_reads_only_the_new_nodes(tmp_path):
    with Store(tmp_path / "s.db") as writer, Store(tmp_path / "s.db") as reader:
        session = writer.create_session()
        session.append_many([user(f"m{i}") for i in range(400)])
        mine = reader.session(session.id)
        first = mine.path("main")
        with Store(tmp_path / "s.db") as fresh:
            cold = rows_read(fresh, lambda: fresh.session(session.id).path("main"))
        session.append_many([assistant("a"), user("b"), assistant("c")])  # another process, say
        warm = rows_read(reader, lambda: mine.path("main"))
        again = mine.path("main")
        assert len(again) == 403 and [n.id for n in again[:400]] == [n.id for n in first]
        assert all(a is b for a, b in zip(again, first, strict=False))  # the same decoded nodes
        assert warm * 20 < cold  # O(k), not O(depth)
        assert again[-1].payload == assistant("c") and again[-1].parent_id == again[-2].id


def test_a_long_branch_rereads_in_constant_time(store, session):
    """messages() of a branch that grew by k nodes is O(k): the projection is cached too."""
    session.append_many([user(f"m{i}") for i in range(2000)])
    session.messages()
    session.append_many([assistant("a")])
    with Store(store.path) as fresh:
        cold = rows_read(fresh, lambda: fresh.session(session.id).messages())
    warm = rows_read(store, lambda: session.messages())
    assert warm * 50 < cold
    assert len(session.messages()) == 2001


def test_appends_feed_the_cache_so_the_loop_never_rereads(store, session):
    session.append_many([user(f"q{i}") for i in range(300)])
    session.path("main")
    session.append_many([assistant("a"), user("q2")])
    with Store(store.path) as fresh:
        cold = rows_read(fresh, lambda: fresh.session(session.id).path("main"))
    assert rows_read(store, lambda: session.path("main")) * 20 < cold  # the head check only


def test_memory_stays_under_the_bound(tmp_path):
    with Store(tmp_path / "s.db", cache_bytes=50_000) as store:
        for _ in range(20):
            s = store.create_session()
            s.append_many([user("x" * 500) for _ in range(30)])  # 15 KB a path
            s.path("main")
            assert store.storage.cache.bytes <= 50_000
        assert store.storage.cache.bytes > 0


def test_a_path_larger_than_the_bound_is_not_cached_and_zero_turns_it_off(tmp_path):
    with Store(tmp_path / "s.db", cache_bytes=0) as store:
        s = store.create_session()
        s.append_many([user("x")] * 5)
        assert len(s.path("main")) == 5 and store.storage.cache.bytes == 0


def test_prune_and_delete_leave_nothing_stale(store, session):
    session.append(user("root"))
    session.fork("gone", at="main")
    doomed = session.append_many([user("a"), user("b")], branch="gone")
    session.path("gone")
    session.delete_branch("gone")
    store.prune(dry_run=False, grace=0)
    assert store.storage.cache.bytes == 0
    again = session.append_many([user("new")])
    assert [n.id for n in session.path("main")][-1] == again[-1].id
    assert doomed[-1].id not in {n.id for n in session.tree()}


def test_the_cache_is_safe_across_threads():
    from sessiontree.model import Node

    cache = PathCache(max_bytes=20_000)
    errors = []

    def work(t: int) -> None:
        try:
            for i in range(2000):
                payload = '{"role":"user","content":"' + str(i) + '"}'
                node = Node(f"{t}-{i}", "s", None, 0, "message", payload, "now")
                cache.put((node,))
                cache.get(f"{t}-{i // 2}")
                cache.heads("s")
                with cache._lock:  # between two calls: inside one, eviction follows the add
                    assert cache.bytes <= 20_000
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert 0 < cache.bytes <= 20_000


def test_one_branch_is_counted_once_however_many_paths_end_on_it(store, session):
    """Paths that are prefixes of one another share their nodes, and their bytes are counted
    once: 200 appends of 1 KB hold about 200 KB, not the 20 MB of 200 separate paths."""
    from sessiontree.storage.cache import ENTRY_BYTES

    session.append(user("start"))
    session.messages()
    for i in range(200):
        session.append(assistant(f"{i:04d}" + "x" * 996))
        assert len(session.messages()) == i + 2
    payload = sum(len(n.payload_json) for n in session.path("main"))
    cache = store.storage.cache
    assert payload <= cache.bytes <= payload + 201 * ENTRY_BYTES


def test_a_branch_past_the_bound_leaves_the_cache_and_still_reads(tmp_path):
    with Store(tmp_path / "s.db", cache_bytes=20_000) as store:
        s = store.create_session()
        for i in range(60):  # 60 KB on one branch, read after every append
            s.append(user(f"{i:03d}" + "x" * 997))
            assert len(s.messages()) == i + 1
            assert store.storage.cache.bytes <= 20_000
        assert [m["content"][:3] for m in s.messages()] == [f"{i:03d}" for i in range(60)]
