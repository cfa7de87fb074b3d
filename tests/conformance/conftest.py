"""The backend conformance suite: what every backend of the store promises.

Every test here that takes ``backend`` (or ``store``/``session``, which are it) runs once
per backend, its id ending in the backend's name: ``[sqlite]`` a SQLite file in the test's
tmp_path, ``[memory]`` SQLite's ``:memory:``, ``[postgres]`` a fresh schema of the test
server (tests/conftest.py's ``every_store``). A test that must reopen its store, or hand
it to another store or process, takes ``db_target`` instead (``[sqlite]``, ``[postgres]``).

One module per storage part: test_tree (sessions, nodes, refs, runs, paths,
compare-and-set, forks, checkpoints, ids), test_search, test_trash (trash, restore,
redactions, retention) and test_upkeep (prune, verify, stats, vacuum). The tests use the
public ``Store``/``Session`` API, and ``conftest.raw`` where a test plays another program
writing to the database. Facts of one backend (SQLite's locks and WAL, PostgreSQL's
NOTIFY and pools) are in that backend's own files, not here.
"""

from __future__ import annotations

import pytest

from sessiontree import Store


@pytest.fixture
def backend(every_store) -> Store:
    """The store under test, on each backend in turn."""
    return every_store


@pytest.fixture
def store(backend) -> Store:
    return backend
