"""``copy`` streams a session between stores: its memory does not follow the session's size.

A session of ``SMALL`` nodes and one of 4x that are copied SQLite file -> SQLite file,
SQLite file -> PostgreSQL and PostgreSQL -> SQLite file; the peak of Python
allocations during each copy (tracemalloc) must stay about flat. Before, the copy
read the whole session (``bulk.read_session``) and then wrote it: the peak followed
the session, about 4x for 4x the nodes.
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from sessiontree import Store, copy_sessions
from sessiontree.formats import import_native

from conftest import fresh_schema_url, postgres_server, public_rows_of

SMALL = 20_000
TEXT = "x" * 300
T0 = "2025-01-01T00:00:00Z"


def native_lines(session_id: str, nodes: int) -> list[str]:
    """A native file of one session: a chain of ``nodes`` messages with a branch every 1000."""
    records: list[dict] = [
        {"format": "sessiontree", "version": 1},
        {"type": "session", "id": session_id, "title": "big", "metadata": {}, "created_at": T0},
    ]
    for i in range(nodes):
        records.append(
            {
                "type": "node",
                "session_id": session_id,
                "id": f"{session_id}-{i:06d}",
                "parent_id": f"{session_id}-{i - 1:06d}" if i else None,
                "depth": i,
                "kind": "message",
                "payload": {"role": "user" if i % 2 else "assistant", "content": f"{i} {TEXT}"},
                "created_at": T0,
            }
        )
    records += [
        {"type": "branch", "session_id": session_id, "name": f"step-{i}", "head_id": f"{session_id}-{i:06d}"}
        for i in range(0, nodes, 1000)
    ]
    records.append(
        {"type": "branch", "session_id": session_id, "name": "main", "head_id": records[-1]["head_id"]}
    )
    return [json.dumps(r) + "\n" for r in records]


def copied_peak(source: str, destination: str) -> int:
    """Peak of Python allocations while ``copy_sessions`` runs, in bytes."""
    with Store(source) as src, Store(destination) as dst:
        tracemalloc.start()
        try:
            copy_sessions(src, dst)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[int, str]:
    """SQLite files holding one session of SMALL nodes, and of 4x SMALL."""
    made = {}
    for nodes in (SMALL, 4 * SMALL):
        path = str(tmp_path_factory.mktemp("copy") / f"{nodes}.db")
        with Store(path) as store:
            import_native(store, native_lines(f"s{nodes}", nodes))
        made[nodes] = path
    return made


def pg() -> str:
    return fresh_schema_url(postgres_server())


def drop(url: str) -> None:
    from conftest import drop_schema

    drop_schema(url)


Targets = Callable[[Path, int], tuple[str, str, list[str]]]


def sqlite_to_sqlite(sources: dict[int, str], tmp: Path, nodes: int) -> tuple[str, str, list[str]]:
    return sources[nodes], str(tmp / f"dest{nodes}.db"), []


def sqlite_to_postgres(sources: dict[int, str], tmp: Path, nodes: int) -> tuple[str, str, list[str]]:
    url = pg()
    return sources[nodes], url, [url]


def postgres_to_sqlite(sources: dict[int, str], tmp: Path, nodes: int) -> tuple[str, str, list[str]]:
    url = pg()
    with Store(sources[nodes]) as src, Store(url) as dst:
        copy_sessions(src, dst)
    return url, str(tmp / f"back{nodes}.db"), [url]


@pytest.mark.slow
@pytest.mark.parametrize("pair", [sqlite_to_sqlite, sqlite_to_postgres, postgres_to_sqlite])
def test_copy_memory_does_not_follow_the_session(sources, tmp_path, pair):
    peaks = {}
    for nodes in (SMALL, 4 * SMALL):
        source, destination, schemas = pair(sources, tmp_path, nodes)
        try:
            peaks[nodes] = copied_peak(source, destination)
            with Store(source) as src, Store(destination) as dst:
                assert public_rows_of(dst) == public_rows_of(src)  # the copy is whole
        finally:
            for url in schemas:
                drop(url)
    # Before: the whole session was read, then written (the 4x session peaked ~4x).
    assert peaks[4 * SMALL] < 1.5 * peaks[SMALL], peaks
    assert peaks[4 * SMALL] < 20_000_000, peaks  # a few writer batches, not 80,000 payloads
