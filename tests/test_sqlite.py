"""Facts of the SQLite backend alone: what it sends to the file (what every backend
promises is in tests/conformance/)."""

from __future__ import annotations

from sessiontree import Store

from conftest import user


def test_path_is_one_query_whatever_the_depth(tmp_path):
    with Store(tmp_path / "deep.db") as store:
        session = store.create_session()
        session.append_many([user(str(i)) for i in range(500)])
    with Store(tmp_path / "deep.db") as cold:  # another store: nothing cached
        statements = []
        cold.conn.set_trace_callback(statements.append)
        path = cold.session(session.id).path("main")
        cold.conn.set_trace_callback(None)
    assert len(path) == 500
    assert sum("WITH RECURSIVE" in s for s in statements) == 1
    queries = [s for s in statements if s not in ("BEGIN", "COMMIT") and "FROM sessions" not in s]
    # resolving the branch name, the redaction count (is the cache still good?), the path
    assert len(queries) <= 3
