"""The trash and retention, on every backend: trash, restore, empty (with its age),
drop and strip policies with a preview, saved policies, and the redactions they record.
Ages are set on the store's clock (``frozen_clock``), not slept."""

from __future__ import annotations

import time

import pytest

from conformance.sample import CALL, fill, found
from sessiontree import Conflict, Store

from conftest import assistant, big_tool_session, raw, schema_refusals, user


def test_trash_hides_restores_and_empties(store, frozen_clock):
    a, b = fill(store)
    store.delete_session(b.id)  # moves it to the trash
    assert [s.id for s in store.sessions()] == [a.id]
    assert found(store, "mushrooms") == []
    assert [t.session_id for t in store.trash()] == [b.id]
    with pytest.raises(Conflict, match="in the trash"):
        store.session(b.id).append(user("still there?"))
    store.restore_session(b.id)
    assert found(store, "mushrooms") == ["A recipe with paris mushrooms, please"]
    store.delete_session(b.id)
    frozen_clock.advance(0.01)  # emptying takes what was trashed before now
    assert [t.session_id for t in store.empty_trash(dry_run=True)] == [b.id]
    store.empty_trash()
    assert store.trash() == [] and raw(store, "SELECT count(*) FROM nodes")[0][0] == 4


def test_stripping_a_large_tool_result_is_recorded_searchable_and_the_only_change_allowed(
    store, frozen_clock
):
    a, _ = fill(store)
    big = "x " * 8000 + "needle"
    a.append(assistant(None, [{**CALL, "id": "c2"}]), branch="other")
    node = a.append({"role": "tool", "tool_call_id": "c2", "content": big}, branch="other")
    frozen_clock.advance(0.01)
    preview = store.retention(strip_older_than=0.001, strip_min_bytes=10_000)
    assert preview.dry_run and [(s.node_id, s.bytes) for s in preview.stripped] == [(node.id, len(big))]
    assert found(store, "needle") == [big]
    report = store.retention(strip_older_than=0.001, strip_min_bytes=10_000, dry_run=False)
    assert [s.node_id for s in report.stripped] == [node.id]
    content = store.node(node.id).payload["content"]
    assert "stripped" in content and f"{len(big):,} bytes removed" in content
    assert found(store, "needle") == []
    (record,) = store.redactions()
    assert (record["node"], record["field"], record["bytes"]) == (node.id, "content", len(big))
    with pytest.raises(schema_refusals(), match="nodes are immutable"):
        raw(store, 'UPDATE nodes SET payload = \'{"role":"tool"}\' WHERE id = ?', (node.id,))
    assert store.verify().ok


def test_a_redaction_by_another_store_reaches_this_stores_cached_reads(db_target, frozen_clock):
    """Nodes are cached because they never change; a redaction is the one change they
    may undergo. Another store (another process) that strips a result counts it in the
    file, and this store's next read of the path sees the marker, not the cached text."""
    big = "x " * 8000
    with Store(db_target) as agent, Store(db_target) as janitor:
        s = agent.create_session("long-lived")
        s.append(user("list the files"))
        s.append(assistant(None, [CALL]))
        s.append({"role": "tool", "tool_call_id": "c1", "content": big})
        assert s.messages()[-1]["content"] == big  # read, and now cached
        frozen_clock.advance(0.01)
        report = janitor.retention(strip_older_than=0.001, strip_min_bytes=10_000, dry_run=False)
        assert len(report.stripped) == 1
        if db_target.startswith("postgresql://"):
            time.sleep(agent.storage.redaction_check_every)  # a server store looks once a second
        stripped = s.messages()[-1]["content"]
        assert "stripped" in stripped and stripped != big
        assert s.path("main")[-1].payload["content"] == stripped
        s.append(assistant("done"))  # the cache goes on growing from the fresh read
        assert [m["content"] for m in s.messages()][-2:] == [stripped, "done"]


def test_a_trashed_session_is_hidden_kept_and_restorable(store, session):
    session.append(user("the narwhal plan"))
    session.delete()
    assert store.sessions(include_archived=True) == [] and store.search("narwhal") == []
    assert [(t.session_id, t.nodes) for t in store.trash()] == [(session.id, 1)]
    trashed_at = store.session(session.id).trashed_at
    assert trashed_at is not None
    session.delete()  # deleting again keeps its time in the trash
    assert store.trash()[0].trashed_at == trashed_at == session.trashed_at
    store.prune(dry_run=False, grace=0)  # its refs still hold its nodes
    store.restore_session(session.id[:13])
    assert [h.node.payload["content"] for h in store.search("narwhal")] == ["the narwhal plan"]
    with pytest.raises(Conflict, match="not in the trash"):
        store.restore_session(session.id)


def test_drop_trashes_idle_sessions_but_not_checkpointed_or_paused_ones(store, frozen_clock):
    idle, marked, paused = (store.create_session(t) for t in ("idle", "marked", "paused"))
    for s in (idle, marked, paused):
        s.append(user("hello"))
    marked.checkpoint("keep", at="main")
    paused.append({"reason": "approval", "calls": [{"id": "c1", "name": "rm"}]}, kind="pause")
    frozen_clock.advance(1)
    assert store.retention(drop_older_than=86400).trashed == []  # nothing idle for a day
    preview = store.retention(drop_older_than=0)
    assert preview.dry_run and preview.trashed == [idle.id] and store.trash() == []
    report = store.retention(drop_older_than=0, dry_run=False)
    assert report.trashed == [idle.id] and [t.session_id for t in store.trash()] == [idle.id]
    assert {s.id for s in store.sessions()} == {marked.id, paused.id}


def test_bad_policy_values_are_refused(store):
    with pytest.raises(Conflict, match="drop_older_than"):
        store.retention(drop_older_than=-1)
    with pytest.raises(Conflict, match="strip_min_bytes"):
        store.retention(strip_older_than=1, strip_min_bytes=0)


def test_a_saved_policy_is_previewed_and_run_later(store, frozen_clock):
    with pytest.raises(Conflict, match="no retention policy is saved"):
        store.apply_retention_policy()
    with pytest.raises(Conflict, match="needs drop_older_than, strip_older_than or both"):
        store.save_retention_policy()
    assert store.save_retention_policy(strip_older_than=0, strip_min_bytes=1000) == {
        "strip_older_than": 0.0,
        "strip_min_bytes": 1000.0,
    }
    s = big_tool_session(store)
    frozen_clock.advance(1)
    preview = store.apply_retention_policy()
    assert preview.dry_run and [x.bytes for x in preview.stripped] == [4998]
    assert store.redactions() == []
    assert store.apply_retention_policy(dry_run=False).bytes_stripped == 4998
    assert [r["node"] for r in store.redactions()] == [s.path("main")[2].id]
    store.save_retention_policy(drop_older_than=86400)  # replaces the saved policy
    assert store.retention_policy() == {"drop_older_than": 86400.0}


def test_a_session_in_the_trash_takes_no_new_nodes(store, session):
    session.append(user("a"))
    session.delete()
    for write in (
        lambda: session.append(user("b")),
        lambda: session.append_many([user("b"), user("c")]),
        lambda: session.edit("main", user("c"), branch="edited"),
    ):
        with pytest.raises(Conflict, match=f"session {session.id} is in the trash: restore it"):
            write()
    assert store.trash()[0].nodes == 1
    store.restore_session(session.id)
    assert session.append(user("b")).depth == 1


def test_emptying_the_trash_honours_the_age_on_the_clock(store, frozen_clock):
    """What went to the trash 40 days ago goes; what went yesterday stays (the ages are
    set on the clock: the trash times are the store's own)."""
    old, new = store.create_session("old"), store.create_session("new")
    old.append(user("a"))
    new.append(user("b"))
    old.delete()
    frozen_clock.advance(39 * 86400)
    new.delete()
    frozen_clock.advance(86400)
    assert [e.session_id for e in store.empty_trash(older_than=30 * 86400, dry_run=True)] == [old.id]
    assert len(store.trash()) == 2
    assert [e.session_id for e in store.empty_trash(older_than=30 * 86400)] == [old.id]
    assert [t.session_id for t in store.trash()] == [new.id]
    assert raw(store, "SELECT count(*) FROM nodes")[0][0] == 1
    assert store.check_search_index() is None
    frozen_clock.advance(29 * 86400 - 0.001)  # 'new': 30 days less a millisecond in the trash
    assert store.empty_trash(older_than=30 * 86400) == []
    frozen_clock.advance(0.002)
    assert [e.session_id for e in store.empty_trash(older_than=30 * 86400)] == [new.id]
