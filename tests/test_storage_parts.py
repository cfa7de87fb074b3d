"""The storage layer's parts and rows, on every backend (SQLite file, ``:memory:``,
PostgreSQL): what a backend cannot do is absent and the caller says so; results are
named rows, read by attribute and never by position; the parts are the interfaces
``storage.search``, ``storage.upkeep``, ``storage.tree`` and ``storage.trash`` declare."""

from __future__ import annotations

import dataclasses

import pytest

from sessiontree import SessionTreeError, Store
from sessiontree.storage import search, trash, tree, upkeep
from sessiontree.storage.paths import CachedPaths
from sessiontree.storage.rows import BranchHead, Counts, NodeHandle, RefTarget


def is_postgres(store: Store) -> bool:
    return store.storage.url.startswith("postgres")


def test_each_backend_has_its_parts(every_store):
    storage = every_store.storage
    assert isinstance(storage, tree.Tree) and isinstance(storage.trash, trash.Trash)
    assert isinstance(storage.search, search.Search)
    assert isinstance(storage.upkeep, upkeep.Upkeep)
    assert isinstance(storage.paths, CachedPaths)


def test_a_backup_is_absent_where_the_backend_has_none_and_the_store_says_what_to_use(every_store, tmp_path):
    destination = tmp_path / "copy.db"
    if is_postgres(every_store):
        assert every_store.storage.upkeep.backup is None and every_store.storage.upkeep.sql is None
        with pytest.raises(SessionTreeError) as e:
            every_store.backup(destination)
        said = str(e.value)
        assert (
            "\n" not in said and "pg_dump" in said and f"sessiontree copy {every_store.storage.url}" in said
        )
        assert str(destination) in said and not destination.exists()
    else:
        every_store.create_session("kept").append({"role": "user", "content": "hi"}, branch="main")
        assert every_store.storage.upkeep.backup is not None
        assert every_store.backup(destination) == destination.stat().st_size > 0
        with Store(destination) as copy:
            assert [s.title for s in copy.sessions()] == ["kept"]


def test_storage_results_are_named_rows_that_cannot_be_read_by_position(every_store):
    session = every_store.create_session("rows")
    first = session.append({"role": "user", "content": "a"}, branch="main")
    second = session.append({"role": "assistant", "content": "b"}, branch="main")
    session.checkpoint("cp", first.id)
    storage = every_store.storage
    with storage.snapshot():
        key = storage.session_key(session.id)
        assert key is not None
        handle = storage.handle(second.id)
        head = storage.branch_head(key, "main")
        ref = storage.ref(key, "cp")
        counts = storage.upkeep.counts(key)
        row = storage.session_row(session.id)
    assert handle is not None and ref is not None
    assert handle == NodeHandle(handle.key, session.id, 1, "message")
    assert head == BranchHead(handle.key, second.id, 1, "message")
    assert ref == RefTarget("checkpoint", ref.key, first.id)
    assert counts == Counts(1, 2)
    assert (row.id, row.title, row.trashed_at) == (session.id, "rows", None)
    for named in (handle, head, ref, counts):
        assert dataclasses.is_dataclass(named)
        with pytest.raises(TypeError):
            named[0]  # type: ignore[index]
        with pytest.raises(TypeError):
            _, *_ = named  # type: ignore[misc]
