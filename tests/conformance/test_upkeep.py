"""Upkeep, on every backend: prune (grace periods, what it keeps), verify, stats and
vacuum."""

from __future__ import annotations

import json

import pytest

from sessiontree import Completion, Conflict, NotFound, Store

from conftest import assistant, raw, server_transaction, user


def node_count(store: Store) -> int:
    return raw(store, "SELECT count(*) FROM nodes")[0][0]


def test_prune_keeps_refs_and_unresolved_pauses_and_vacuums(store, session):
    session.append(user("root"))
    session.fork("doomed", at="main")
    doomed = session.append_many([user("x" * 5000) for _ in range(40)], branch="doomed")
    session.fork("paused", at="main")
    pause = session.append({"calls": []}, kind="pause", branch="paused")
    session.delete_branch("doomed")
    session.delete_branch("paused")
    report = store.prune(grace=0)
    assert report.dry_run and report.node_ids == [n.id for n in doomed]
    assert node_count(store) == 42
    report = store.prune(dry_run=False, vacuum=True, grace=0)
    assert node_count(store) == 2
    if store.path.startswith("postgresql://"):
        assert report.bytes_freed is None  # VACUUM keeps the space for reuse: nothing to count
    elif store.path == ":memory:":
        assert report.bytes_freed is None  # no file to shrink
    else:
        assert report.bytes_freed > 100_000
    assert store.node(pause.id).kind == "pause"  # kept: it may get a branch again
    assert store.pending() == []  # but no branch stands at it: nothing to decide
    session.fork("again", at=pause.id)
    assert [n.id for n in store.pending()] == [pause.id]


def test_prune_removes_runs_only_pruned_nodes_used(store, session):
    session.append(user("q"))
    kept = session.append(assistant("a"), run=Completion(assistant("a"), model="keep"))
    session.fork("tmp", at="main")
    gone = session.append(assistant("b"), branch="tmp", run=Completion(assistant("b"), model="x"))
    session.delete_branch("tmp")
    report = session.prune(dry_run=False, grace=0)
    assert report.run_ids == [gone.run_id]
    assert store.run(kept.run_id).model == "keep"
    with pytest.raises(NotFound):
        store.run(gone.run_id)


def test_verify_reports_broken_invariants(db_target):
    store = Store(db_target)
    session = store.create_session()
    session.append(
        assistant(None, [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}])
    )
    session.append({"role": "tool", "tool_call_id": "c1", "content": "ok"})
    assert store.verify().ok
    session.append({"role": "tool", "tool_call_id": "c1", "content": "again"})
    session.fork("bad", at="main")
    session.append(
        assistant(None, [{"id": "c2", "type": "function", "function": {"name": "f", "arguments": "{}"}}]),
        branch="bad",
    )
    session.append(user("moving on"), branch="bad")
    # Break the database the way only another tool could: schema checks off.
    key = raw(store, "SELECT key FROM sessions WHERE id = ?", (session.id,))[0][0]
    postgres = store.path.startswith("postgresql://")
    breakage = [
        "INSERT INTO nodes (key, id, session, parent, depth, kind, payload, created_at)"
        " VALUES (999997, 'orphan', ?, 999999, 3, 'note', 'not json', 'now')",
        "INSERT INTO branches VALUES (?, 'dangling', 999998, '{}', 'now', 'now')",
    ]
    if postgres:  # one transaction with triggers and foreign keys off
        with server_transaction(store) as conn:
            conn.execute("SET LOCAL session_replication_role = replica")
            for statement in breakage:
                conn.execute(statement.replace("?", "%s"), (key,))
    else:
        store.conn.execute("PRAGMA foreign_keys = OFF")
        for trigger in ("nodes_parent_in_session", "branches_head_in_session"):
            store.conn.execute(f"DROP TRIGGER {trigger}")
        for statement in breakage:
            store.conn.execute(statement, (key,))
    checks = sorted({(p.check, p.detail.split(" ")[0]) for p in store.verify().problems})
    assert ("parent", "node") in checks and ("payload", "node") in checks
    assert ("ref", "branch") in checks
    details = " | ".join(p.detail for p in session.verify().problems)
    assert "tool call 'c1' is answered twice" in details
    assert "tool calls ['c2'] are unanswered" in details
    store.close()


def test_store_json_columns_are_valid(store, session):
    session.append(user("a"))
    row = raw(store, "SELECT payload FROM nodes")[0]
    assert json.loads(row[0]) == user("a")
    assert store.stats()["tables"]["nodes"] == 1


def test_prune_and_verify_resolve_the_session(store, session):
    session.append(user("a"))
    with pytest.raises(NotFound, match="no session 'nope'"):
        store.verify("nope")
    with pytest.raises(NotFound, match="no session"):
        store.prune(session_id="ffffffff", grace=0)
    assert store.verify(session.id[:13]).nodes == 1


def test_a_decision_no_run_has_carried_on_from_is_never_pruned(store, session):
    """Before: deciding a pause whose branch had moved on wrote the decision, and the next
    prune deleted both: a human's answer, collected."""
    from sessiontree import Approve, decide

    session.append(user("pay"))
    pause = session.append(
        {"reason": "r", "calls": [{"id": "c", "name": "pay", "arguments": "{}"}]}, kind="pause"
    )
    decision = decide(store, pause, {"c": Approve()})
    session.move("main", to="main~2!")  # the branch moved away from the decision
    assert store.prune(dry_run=False, grace=0).node_ids == []
    assert store.node(decision.id).kind == "decision" and store.node(pause.id).kind == "pause"


def test_prune_keeps_what_was_written_inside_the_grace_period(store, session):
    """A node another process just appended with parent= (no branch yet) is not collected
    under that writer."""
    root = session.append(user("root"))
    fresh = session.append(assistant("being written"), parent=root, branch=None)
    assert store.prune(dry_run=False).node_ids == []  # the default grace: 10 minutes
    assert session.node(fresh.id) == fresh
    assert store.prune(dry_run=False, grace=0).node_ids == [fresh.id]


@pytest.mark.parametrize("grace", [float("nan"), -1, "600", True])
def test_prune_grace_must_be_a_number_of_seconds(store, grace):
    """Before: nan compared as no grace at all, and pruned what was just written."""
    with pytest.raises(Conflict, match="^grace must be a number of seconds >= 0, not "):
        store.prune(grace=grace)


@pytest.mark.parametrize("grace", [float("inf"), 1e300])
def test_a_grace_longer_than_the_clock_keeps_every_node(store, session, grace):
    root = session.append(user("root"))
    session.append(assistant("unreachable"), parent=root, branch=None)
    assert store.prune(dry_run=False, grace=grace).node_ids == []


def test_stats_count_every_table_and_the_tokens_of_each_model(store, session):
    session.append(user("q"))
    usage = {"input_tokens": 7, "output_tokens": 3}
    session.append(assistant("a"), run=Completion(assistant("a"), model="m1", usage=usage))
    session.append(user("again"))
    session.append(assistant("b"), run=Completion(assistant("b"), model="m1", usage=usage))
    session.checkpoint("cp", at="main")
    stats = store.stats()
    tables = stats["tables"]
    assert (tables["sessions"], tables["nodes"], tables["runs"], tables["checkpoints"]) == (1, 4, 2, 1)
    assert [(m["model"], m["input_tokens"], m["output_tokens"]) for m in stats["models"]] == [("m1", 14, 6)]


def test_a_backup_opens_as_the_same_store_or_the_backend_says_how_to_back_it_up(store, session, tmp_path):
    """SQLite (a file or ``:memory:``) writes a compacted copy; PostgreSQL has no file to
    copy and names pg_dump and ``sessiontree copy`` instead, writing nothing."""
    from sessiontree import SessionTreeError

    session.append(user("keep me"))
    destination = tmp_path / "backup.db"
    if store.path.startswith("postgresql://"):
        with pytest.raises(
            SessionTreeError, match="back it up with pg_dump, or copy it into a new SQLite file"
        ):
            store.backup(destination)
        assert not destination.exists()
        return
    assert store.backup(destination) == destination.stat().st_size > 0
    with Store(destination) as copy:
        assert copy.session(session.id).messages() == [user("keep me")]
        assert copy.verify().ok


def test_vacuum_after_a_prune_keeps_what_is_reachable(store, session):
    session.append(user("root"))
    session.fork("gone", at="main")
    session.append_many([user("x" * 2000) for _ in range(10)], branch="gone")
    session.delete_branch("gone")
    report = store.prune(dry_run=False, vacuum=True, grace=0)
    assert len(report.node_ids) == 10
    assert [m["content"] for m in session.messages()] == ["root"] and store.verify().ok
