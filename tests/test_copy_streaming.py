"""``copy`` streams a session between stores: its memory does not follow the session's size.

A session of ``SMALL`` nodes and one of 4x that are copied SQLite file -> SQLite file,
SQLite file -> PostgreSQL and that PostgreSQL store -> SQLite file; the peak of Python
allocations during each copy (tracemalloc) must stay about flat. Before, the copy
read the whole session (``bulk.read_session``) and then wrote it: the peak followed
the session, about 4x for 4x the nodes.
"""

from __future__ import annotations

import json
import tracemalloc
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


def backend(target: str) -> str:
    return "postgres" if target.startswith("postgresql:") else "sqlite"


def sqlite_to_sqlite(source: str, tmp: Path) -> list[tuple[str, str]]:
    return [(source, str(tmp / "dest.db"))]


def sqlite_to_postgres_and_back(source: str, tmp: Path) -> list[tuple[str, str]]:
    """Two copies, each measured: the first's PostgreSQL store is the second's source (a
    PostgreSQL source made any other way would be one more copy of the whole session)."""
    url = pg()
    return [(source, url), (url, str(tmp / "back.db"))]


@pytest.mark.slow
@pytest.mark.parametrize("pair", [sqlite_to_sqlite, sqlite_to_postgres_and_back])
def test_copy_memory_does_not_follow_the_session(sources, tmp_path, pair):
    peaks: dict[tuple[str, int], int] = {}
    for nodes in (SMALL, 4 * SMALL):
        (tmp_path / str(nodes)).mkdir()
        copies = pair(sources[nodes], tmp_path / str(nodes))
        try:
            for source, destination in copies:
                direction = f"{backend(source)} -> {backend(destination)}"
                peaks[direction, nodes] = copied_peak(source, destination)
                with Store(source) as src, Store(destination) as dst:
                    assert public_rows_of(dst) == public_rows_of(src)  # the copy is whole
        finally:
            for url in {u for copy in copies for u in copy if backend(u) == "postgres"}:
                drop(url)
    assert len(peaks) == 2 * len(copies)
    for direction in {d for d, _ in peaks}:
        small, large = peaks[direction, SMALL], peaks[direction, 4 * SMALL]
        # Before: the whole session was read, then written (the 4x session peaked ~4x).
        assert large < 1.5 * small, (direction, peaks)
        assert large < 20_000_000, (direction, peaks)  # a few writer batches, not 80,000 payloads
