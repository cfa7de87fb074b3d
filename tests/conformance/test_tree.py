"""The tree, on every backend: sessions, nodes, refs, runs, paths, compare-and-set of
``append``, forks, checkpoints, ``append_many``, ``~N`` refs and ids, and the errors
users meet."""

from __future__ import annotations

import os

import pytest

from conformance.sample import SQLISH
from sessiontree import (
    AmbiguousRef,
    BranchMoved,
    CheckpointImmutable,
    Completion,
    Conflict,
    FormatError,
    InvalidPayload,
    NotFound,
    Store,
    copy_sessions,
    export_file,
    import_file,
)

from conftest import assistant, public_rows_of, raw, schema_refusals, user

REFUSED = schema_refusals()


def node_count(store: Store) -> int:
    return raw(store, "SELECT count(*) FROM nodes")[0][0]


def test_append_builds_a_branch_and_messages_project_it(session):
    a = session.append(user("hi"))
    b = session.append(assistant("hello"))
    assert (a.parent_id, a.depth, b.parent_id, b.depth) == (None, 0, a.id, 1)
    assert session.branch("main").head_id == b.id
    assert session.messages("main") == [user("hi"), assistant("hello")]
    marker = session.append({"why": "test"}, kind="note")
    assert session.messages() == [user("hi"), assistant("hello")]  # markers never reach a model
    assert [n.id for n in session.path("main")] == [a.id, b.id, marker.id]


def test_ids_are_uuid7_and_time_ordered(session):
    nodes = session.append_many([user(str(i)) for i in range(50)])
    ids = [n.id for n in nodes]
    assert ids == sorted(ids)
    assert all(i[14] == "7" and i[19] in "89ab" for i in ids)


def test_new_branch_without_parent_starts_a_new_root(session):
    session.append(user("one"))
    other = session.append(user("two"), branch="other")
    assert other.parent_id is None and other.depth == 0
    assert session.diff("main", "other").ancestor is None
    assert session.common_ancestor("main", "other") is None


def test_fork_edit_diff_and_common_ancestor(session):
    q = session.append(user("q"))
    a1 = session.append(assistant("a1"))
    session.fork("retry", at=q)
    a2 = session.append(assistant("a2"), branch="retry")
    edited = session.edit(q, user("q, better"), branch="edited")
    assert edited.parent_id is None and edited.depth == 0
    assert session.messages("edited") == [user("q, better")]
    assert session.common_ancestor("main", "retry").id == q.id
    diff = session.diff("main", "retry")
    assert (diff.ancestor.id, [n.id for n in diff.only_a], [n.id for n in diff.only_b]) == (
        q.id,
        [a1.id],
        [a2.id],
    )
    assert [n.id for n in session.children(q)] == [a1.id, a2.id]
    assert {n.id for n in session.leaves()} == {a1.id, a2.id, edited.id}


def test_edit_keeps_the_kind_and_refuses_a_taken_name(store, session):
    session.append(user("q"))
    with pytest.raises(Conflict, match="'main' already exists"):
        session.edit("main", user("x"), branch="main")
    assert node_count(store) == 1


def test_fork_is_one_row_and_checkpoints_never_move(store, session):
    session.append_many([user("a"), assistant("b")])
    cp = session.checkpoint("v1", at="main")
    session.append(user("c"))
    assert session.node("v1").id == cp.node_id != session.branch("main").head_id
    with pytest.raises(CheckpointImmutable, match="'v1' is a checkpoint"):
        session.move("v1", to="main")
    with pytest.raises(REFUSED, match="checkpoints never move"):
        raw(store, "UPDATE checkpoints SET node = node")
    with pytest.raises(Conflict, match="checkpoint named 'v1' already exists"):
        session.checkpoint("v1", at="main")
    before = node_count(store)
    branch = session.fork("exp", at="v1")
    assert branch.head_id == cp.node_id and node_count(store) == before
    session.delete_checkpoint("v1")
    assert session.checkpoints() == []
    with pytest.raises(NotFound, match="no checkpoint 'v1'"):
        session.delete_checkpoint("v1")


def test_branch_and_checkpoint_names_share_one_namespace(session):
    session.append(user("a"))
    session.checkpoint("cp", at="main")
    with pytest.raises(Conflict, match="checkpoint named 'cp' already exists"):
        session.fork("cp", at="main")
    with pytest.raises(Conflict, match="branch named 'main' already exists"):
        session.checkpoint("main", at="main")
    with pytest.raises(Conflict, match="checkpoint named 'cp'"):
        session.append(user("b"), branch="cp")


def test_move_rename_delete_branch(store, session):
    a = session.append(user("a"))
    b = session.append(user("b"))
    session.fork("x", at=a)
    session.move("x", to=b)
    assert session.branch("x").head_id == b.id
    with pytest.raises(BranchMoved) as info:
        session.move("x", to=a, expect_head=a.id)
    assert (info.value.expected, info.value.actual) == (a.id, b.id)
    session.rename("x", "y")
    assert [br.name for br in session.branches()] == ["main", "y"]
    with pytest.raises(Conflict, match="'main' already exists"):
        session.rename("y", "main")
    session.delete_branch("y")
    assert [br.name for br in session.branches()] == ["main"]
    assert node_count(store) == 2  # the pointer only
    with pytest.raises(NotFound, match="no branch 'y'"):
        session.delete_branch("y")


def test_stale_expect_head_raises_branch_moved_and_writes_nothing(store, session):
    a = session.append(user("a"))
    b = session.append(user("b"), expect_head=a.id)
    with pytest.raises(BranchMoved) as info:
        session.append(user("c"), expect_head=a.id)
    assert str(info.value) == f"branch 'main' moved: expected head {a.id}, found {b.id}"
    assert node_count(store) == 2


def test_two_store_handles_compare_and_set(db_target):
    with Store(db_target) as one, Store(db_target) as two:
        s1 = one.create_session()
        head = s1.append(user("start"))
        s2 = two.session(s1.id)
        s1.append(user("first writer"), expect_head=head.id)
        with pytest.raises(BranchMoved):
            s2.append(user("second writer"), expect_head=head.id)
        assert [m["content"] for m in s2.messages()] == ["start", "first writer"]


def test_explicit_parent(session):
    a = session.append(user("a"))
    b = session.append(user("b"))
    detached = session.append(user("side"), parent=a, branch=None)
    assert detached.parent_id == a.id and session.branch("main").head_id == b.id
    with pytest.raises(Conflict, match=f"branch 'main' is at {b.id}, not at the parent {a.id}"):
        session.append(user("x"), parent=a)  # main is not at a
    fresh = session.append(user("y"), parent=a, branch="side")
    assert session.branch("side").head_id == fresh.id
    with pytest.raises(Conflict, match="needs a branch or a parent"):
        session.append(user("z"), branch=None)


def test_unknown_refs_are_named(store, session):
    session.append(user("a"))
    with pytest.raises(NotFound, match="no node, branch or checkpoint 'nope'"):
        session.node("nope")
    with pytest.raises(NotFound, match="no branch 'nope'"):
        session.branch("nope")
    with pytest.raises(NotFound, match="no session 'ffffffff'"):
        store.session("ffffffff")
    with pytest.raises(NotFound, match="no node"):
        session.append(user("x"), parent="0000-not-there")
    with pytest.raises(NotFound, match="no branch 'ghost'"):
        session.move("ghost", to="main")


def test_parent_from_another_session_is_refused(store, session):
    other = store.create_session("other")
    foreign = other.append(user("theirs"))
    session.append(user("mine"))
    with pytest.raises(Conflict, match=f"node {foreign.id} belongs to session {other.id}"):
        session.append(user("x"), parent=foreign.id, branch=None)
    with pytest.raises(Conflict, match="belongs to session"):
        session.append(user("x"), parent=foreign, branch=None)
    with pytest.raises(Conflict, match="belongs to session"):
        session.fork("x", at=foreign.id)
    with pytest.raises(REFUSED, match="same session"):  # the schema refuses it too
        raw(
            store,
            "INSERT INTO nodes (key, id, session, parent, depth, kind, payload, created_at)"
            " VALUES (424242, 'x', (SELECT key FROM sessions WHERE id = ?), (SELECT key FROM nodes WHERE id = ?),"
            " 1, 'message', '{}', 'now')",
            (session.id, foreign.id),
        )


def test_prefixes_resolve_like_git(store, session):
    node = session.append(user("a"))
    assert session.node(node.id[:13]).id == node.id
    assert store.node(node.id[:13]).id == node.id
    assert store.session(session.id[:13]).id == session.id
    with pytest.raises(NotFound, match="at least 4 characters"):
        session.node(node.id[:3])
    many = session.append_many([user(str(i)) for i in range(2)])
    shared = os.path.commonprefix([many[0].id, many[1].id])  # UUIDv7: the same clock prefix
    assert len(shared) >= 8
    with pytest.raises(AmbiguousRef, match=f"node prefix '{shared}' is ambiguous"):
        store.node(shared)


def test_a_prefix_reads_in_any_case_and_among_its_sessions_nodes(store, session):
    node = session.append(user("a"))
    assert session.node(node.id[:13].upper()).id == node.id
    assert store.node(node.id[:13].upper()).id == node.id
    assert store.session(session.id[:13].upper()).id == session.id
    other = store.create_session("other")
    theirs = other.append(user("b"))
    shared = os.path.commonprefix([node.id, theirs.id])  # UUIDv7: the same clock prefix
    assert len(shared) >= 8
    with pytest.raises(
        AmbiguousRef, match=f"node prefix '{shared}' is ambiguous: {min(node.id, theirs.id)}, "
    ):
        store.node(shared)  # two nodes of the store start so
    assert session.node(shared).id == node.id  # one of each session's
    assert other.node(shared).id == theirs.id


def test_nodes_are_immutable_in_the_schema(store, session):
    node = session.append(user("a"))
    for column, value in (
        ("payload", "'{}'"),
        ("parent", "NULL"),
        ("session", "0"),
        ("id", "'x'"),
        ("key", "0"),
    ):
        with pytest.raises(REFUSED, match="nodes are immutable"):
            raw(store, f"UPDATE nodes SET {column} = {value} WHERE id = ?", (node.id,))
    assert session.node(node.id).payload == user("a")


@pytest.mark.parametrize(
    ("payload", "kind", "message"),
    [
        ("text", "message", "must be a JSON object"),
        ({"content": "no role"}, "message", "needs 'role'"),
        ({"role": "user", "content": "x", "score": float("nan")}, "message", "not valid JSON"),
        ({"role": "user", "content": "x", "meta": object()}, "message", "not JSON serializable"),
        ({"role": "user", "content": 5}, "message", "needs 'content' to be text, a list of parts or null"),
        ({"role": ["user"], "content": "x"}, "message", "needs 'role' in"),
        ({"role": "user"}, "bogus", "unknown node kind 'bogus'"),
    ],
)
def test_invalid_payloads_are_refused_whole(session, payload, kind, message):
    session.append(user("keep me"))
    with pytest.raises(InvalidPayload, match=message):
        session.append_many([user("ok"), payload], kind=kind)
    assert session.messages() == [user("keep me")]


def test_append_many_is_one_transaction(store, session):
    session.append(user("a"))
    session.fork("cp-name", at="main")
    session.checkpoint("taken", at="main")
    with pytest.raises(Conflict):
        session.append_many([user("b"), user("c")], branch="taken")
    assert node_count(store) == 1


def test_odd_unicode_round_trips(session):
    text = "\ud800 lone surrogate, \x00 nul, emoji \U0001f600, rtl \u202e"
    session.append(user(text))
    assert session.messages()[0]["content"] == text


def test_provenance_is_recorded_beside_the_node(store, session):
    session.append(user("q"))
    completion = Completion(
        assistant("a"),
        model="m-1",
        provider="test",
        params={"seed": 1},
        usage={"prompt_tokens": 3, "completion_tokens": 5},
        finish_reason="stop",
        latency_ms=12.5,
    )
    node = session.append(completion.message, run=completion)
    run = store.run(node.run_id)
    assert (run.model, run.params, run.usage["completion_tokens"], run.finish_reason, run.latency_ms) == (
        "m-1",
        {"seed": 1},
        5,
        "stop",
        12.5,
    )
    assert "usage" not in node.payload


def test_sessions_listing_archive_and_delete(store):
    a = store.create_session("a", {"owner": "me"})
    b = store.create_session("b")
    a.append_many([user("1"), user("2")])
    a.fork("x", at="main")
    a.checkpoint("c", at="main")
    listing = {s.id: s for s in store.sessions()}
    assert (listing[a.id].node_count, listing[b.id].node_count) == (2, 0)
    assert listing[a.id].metadata == {"owner": "me"}
    assert listing[a.id].last_activity >= listing[a.id].created_at
    a.archive()
    assert [s.id for s in store.sessions()] == [b.id]
    assert {s.id for s in store.sessions(include_archived=True)} == {a.id, b.id}
    # delete moves to the trash: hidden, nothing removed, restorable
    assert store.delete_session(a.id) == 2
    assert [s.id for s in store.sessions(include_archived=True)] == [b.id]
    assert [t.session_id for t in store.trash()] == [a.id]
    assert raw(store, "SELECT count(*) FROM nodes")[0][0] == 2
    store.restore_session(a.id)
    assert {s.id for s in store.sessions(include_archived=True)} == {a.id, b.id}
    assert store.delete_session(a.id, permanently=True) == 2
    assert [s.id for s in store.sessions(include_archived=True)] == [b.id] and store.trash() == []
    for table in ("nodes", "branches", "checkpoints", "runs"):
        assert raw(store, f"SELECT count(*) FROM {table}")[0][0] == 0


def test_a_failed_write_inside_an_outer_transaction_leaves_nothing(store, session):
    session.append(user("a"))
    session.checkpoint("taken", at="main")
    with store.transaction():
        session.append(user("kept"))
        with pytest.raises(Conflict):
            session.append_many([user("b"), user("c")], branch="taken")
    assert [m["content"] for m in session.messages()] == ["a", "kept"]
    assert node_count(store) == 2


def test_writes_through_a_readonly_store_are_refused_clearly(db_target):
    from sessiontree import ReadOnly

    path = db_target
    Store(path).close()
    with Store(path, readonly=True) as store, pytest.raises(ReadOnly, match="open read-only"):
        store.create_session("x")


def test_unknown_run_and_misplaced_decision_are_named(session):
    first = session.append(user("a"))
    with pytest.raises(NotFound, match="no run 'no-such-run'"):
        session.append(assistant("x"), run="no-such-run")
    with pytest.raises(Conflict, match="a decision must be the child of a pause"):
        session.append({"decisions": {}}, kind="decision")
    assert session.head().id == first.id


def test_checkpoint_names_get_checkpoint_errors(session):
    session.append(user("a"))
    session.checkpoint("cp", at="main")
    with pytest.raises(Conflict, match="'cp' is a checkpoint, not a branch; use delete_checkpoint"):
        session.delete_branch("cp")
    with pytest.raises(Conflict, match="'cp' is a checkpoint, not a branch"):
        session.rename("cp", "x")
    assert session.rename("main", "main").name == "main"


def test_ids_made_in_forked_children_differ():
    import multiprocessing

    from sessiontree import new_id

    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(2) as pool:
        batches = pool.map(_ids_in_child, range(4))
    everything = [i for batch in batches for i in batch] + [new_id() for _ in range(100)]
    assert len(set(everything)) == len(everything)
    assert len({i[24:] for i in everything}) == len(everything)  # the random tails differ too


def test_a_batch_of_ids_is_what_one_at_a_time_would_give():
    """new_ids(n) reads the clock once: 6,000 ids in one millisecond overflow its 12-bit
    counter and borrow the next milliseconds, still increasing and valid UUIDv7s."""
    import uuid

    from sessiontree.ids import new_id, new_ids

    made = [new_id(), *new_ids(6000), new_id(), *new_ids(1), *new_ids(0), new_id()]
    assert len(made) == 6004 == len(set(made)) and made == sorted(made)
    for text in made:
        parsed = uuid.UUID(text)
        assert (parsed.version, parsed.variant, str(parsed)) == (7, uuid.RFC_4122, text)
    milliseconds = {int(text[:8] + text[9:13], 16) for text in made[1:6001]}
    assert len(milliseconds) >= 2  # the counter overflowed into the next millisecond


def _ids_in_child(_: int) -> list[str]:
    from sessiontree import new_id

    return [new_id() for _ in range(100)]


def test_fork_returns_the_branch_as_it_reads_back(store):
    s = store.create_session()
    s.append(user("hi"))
    made = s.fork("alt", at="main", metadata={"why": ("a", "tuple"), "n": 1})
    assert made == s.branch("alt")
    assert made.metadata == {"why": ["a", "tuple"], "n": 1}  # as JSON gives it back


def test_usage_since_must_be_on_the_path_to_the_ref(store, session):
    """Before: since was read as a depth only, so a node of another branch counted the
    calls below its depth on this one."""
    q = session.append(user("q"))
    session.append(assistant("a"), run={"model": "m", "usage": {"input_tokens": 3, "output_tokens": 1}})
    session.fork("alt", at=q)
    other = session.append(assistant("b"), branch="alt")
    with pytest.raises(Conflict) as caught:
        session.usage("main", since="alt")
    assert str(caught.value) == (
        f"'alt' ({other.id}) is not an ancestor of 'main' ({session.resolve('main')}):"
        " usage counts the calls after a node on the path"
    )
    assert session.usage("main", since=q).calls == 1
    assert session.usage("main", since="main").calls == 0


def test_delete_checkpoint_given_a_branch_says_it_is_a_branch(session):
    session.append(user("q"))
    with pytest.raises(Conflict, match=r"^'main' is a branch, not a checkpoint; use delete_branch$"):
        session.delete_checkpoint("main")
    assert [b.name for b in session.branches()] == ["main"]


def test_a_huge_ancestor_count_goes_past_the_root(store, session):
    """Before: ~N beyond SQLite's integers was an OverflowError, 4,300+ digits a ValueError."""
    from sessiontree.names import MAX_GENERATIONS, split_ancestry

    root = session.append(user("q"))
    assert split_ancestry("main~" + "9" * 5000) == ("main", MAX_GENERATIONS)
    assert split_ancestry("main~" + "0" * 5000 + "2~1") == ("main", 3)
    with pytest.raises(
        NotFound, match=r"^'main~99999999999999999999999' goes past the root: 'main' is at depth 0$"
    ):
        session.node("main~99999999999999999999999")
    digits = "9" * 5000
    with pytest.raises(NotFound) as caught:
        store.node(f"{root.id}~{digits}")
    assert str(caught.value) == (
        f"'{root.id}~{digits[:23]}'... (5,037 characters) goes past the root: '{root.id}' is at depth 0"
    )


def test_a_huge_name_is_shortened_in_messages(session):
    session.append(user("q"))
    name = "y" * 100_000
    with pytest.raises(Conflict) as caught:
        session.fork(name, at="main")
    assert str(caught.value) == (
        f"invalid branch name '{'y' * 60}'... (100,000 characters): use 1-200 characters,"
        " no leading or trailing spaces"
    )
    with pytest.raises(NotFound) as missing:
        session.node(name)
    assert str(missing.value).startswith(
        f"no node, branch or checkpoint '{'y' * 60}'... (100,000 characters)"
    )


# -- hostile input: stored and read back exactly, or refused whole ----------------------


@pytest.mark.parametrize("depth", [5_000, 100_000])
def test_absurdly_deep_payloads_are_refused_clearly(store, session, depth):
    deep: list = []
    for _ in range(depth):
        deep = [deep]
    before = public_rows_of(store)
    with pytest.raises(InvalidPayload, match="nested too deeply"):
        session.append({"role": "user", "content": "x", "deep": deep})
    assert public_rows_of(store) == before


def test_moderately_deep_payloads_round_trip(store, session):
    deep: dict = {"leaf": True}
    for i in range(200):
        deep = {f"k{i}": deep}
    node = session.append({"role": "user", "content": "deep", "d": deep})
    assert store.node(node.id).payload["d"] == deep
    assert session.verify().ok


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_numbers_in_metadata_and_run_usage_are_refused_whole(store, bad):
    """Before the fix these were stored as NaN/Infinity (not JSON): export then raised a
    bare ValueError, and a run's usage made the insert fail with sqlite3's 'malformed JSON'."""
    before = public_rows_of(store)
    with pytest.raises(InvalidPayload, match="not valid JSON"):
        store.create_session("nan", metadata={"score": bad})
    assert public_rows_of(store) == before
    session = store.create_session("ok")
    session.append(user("hi"))
    before = public_rows_of(store)
    reply = {"role": "assistant", "content": "x"}
    for run in (
        Completion(reply, model="m", usage={"prompt_tokens": bad}),
        Completion(reply, model="m", params={"temperature": bad}),
    ):
        with pytest.raises(InvalidPayload, match="not valid JSON"):
            session.append(reply, run=run)
        assert public_rows_of(store) == before
    with pytest.raises(InvalidPayload, match="not valid JSON"):
        session.fork("f", at="main", metadata={"x": bad})
    assert public_rows_of(store) == before
    assert store.verify().ok


def test_lone_surrogates_outside_payloads_are_kept_or_refused_clearly(store):
    """Before the fix each of these escaped as a bare UnicodeEncodeError from sqlite3, and
    on PostgreSQL a run's usage holding one was a driver error (its token columns read
    the usage as jsonb, which refuses the escape): now it is refused on every backend."""
    session = store.create_session("s", metadata={"note": "\ud800 lone"})
    assert store.session(session.id).metadata == {"note": "\ud800 lone"}
    session.append(user("hi"))
    node = session.append(
        {"role": "assistant", "content": "x"}, run=Completion({"role": "assistant"}, params={"odd\udfff": 1})
    )
    assert store.run(node.run_id).params == {"odd\udfff": 1}
    before = public_rows_of(store)
    with pytest.raises(InvalidPayload, match="run usage holds a lone surrogate in 'odd"):
        session.append(
            {"role": "assistant", "content": "x"},
            run=Completion({"role": "assistant"}, usage={"odd\udfff": 1}),
        )
    with pytest.raises(InvalidPayload, match="lone surrogate"):
        store.create_session("title \ud800")
    with pytest.raises(Conflict, match="lone surrogates are not allowed"):
        session.fork("b\ud800", at="main")
    with pytest.raises(Conflict, match="lone surrogates are not allowed"):
        session.append(user("x"), branch="b\udfff")
    assert public_rows_of(store) == before
    assert store.verify().ok


UNSTORABLE_IN_JSON = {"surrogate": "\ud800", "reversed pair": "\udfff\ud800", "NUL": "\x00"}


@pytest.mark.parametrize("where", ["key", "text"])
@pytest.mark.parametrize("bad", UNSTORABLE_IN_JSON.values(), ids=UNSTORABLE_IN_JSON.keys())
def test_every_json_column_keeps_or_refuses_nul_and_lone_surrogates(store, bad, where):
    """Every JSON value a store writes outside payloads, with a NUL or a lone surrogate in
    a key or a text: metadata and a run's params keep it (stored as a \\u escape, read back
    as it was); a run's usage, which PostgreSQL reads as jsonb for its token columns, is
    refused whole on every backend, so a store always copies to the other."""
    value = {bad: 1} if where == "key" else {"k": [f"a{bad}b"]}
    session = store.create_session("s", metadata=value)
    assert store.session(session.id).metadata == value
    session.set_metadata({"x": 1})
    session.set_metadata(value, expect={"x": 1})
    assert store.session(session.id).metadata == value
    first = session.append(user("hi"))
    assert session.fork("side", at=first, metadata=value).metadata == value
    session.set_branch_metadata("main", value)
    assert {b.name: b.metadata for b in session.branches()} == {"main": value, "side": value}
    reply = {"role": "assistant", "content": "x"}
    node = session.append(
        reply, run=Completion({"role": "assistant"}, params=value, usage={"input_tokens": 3})
    )
    assert (store.run(node.run_id).params, store.run(node.run_id).usage) == (value, {"input_tokens": 3})
    assert session.usage("main").input_tokens == 3
    before = public_rows_of(store)
    for run in (Completion({"role": "assistant"}, usage=value), {"usage": value}):
        with pytest.raises(InvalidPayload, match=r"^run usage holds a (lone surrogate|NUL character) in '"):
            session.append(reply, run=run)
    assert public_rows_of(store) == before
    assert store.verify().ok


def test_a_run_usage_no_store_keeps_is_refused_by_import_and_copy(store, tmp_path):
    """The same refusal where whole trees are written (an import, a copy from a SQLite
    file written before the fix, which kept such a usage): one line naming the run, and
    nothing of the import or the copy is written. Before, on PostgreSQL, a driver error."""
    source = Store(str(tmp_path / "old.db"))
    session = source.create_session("old")
    session.append(user("hi"))
    node = session.append(assistant("x"), run=Completion({"role": "assistant"}, usage={"input_tokens": 3}))
    raw(source, "UPDATE runs SET usage = ? WHERE id = ?", ('{"odd\\udfff":1}', node.run_id))
    export = tmp_path / "old.jsonl"
    export_file(source, export)
    before = public_rows_of(store)
    with pytest.raises(
        FormatError, match=f"^old.jsonl: run {node.run_id}: usage holds a lone surrogate in 'odd"
    ):
        import_file(store, export)
    with pytest.raises(InvalidPayload, match=f"^run {node.run_id}: usage holds a lone surrogate"):
        copy_sessions(source, store)
    source.close()
    assert public_rows_of(store) == before


@pytest.mark.parametrize("count", [2**63, -(2**63) - 1, 10**40, 1e300])
def test_a_token_count_beyond_64_bits_is_refused_on_every_backend(store, count):
    """Before the fix PostgreSQL's token columns (bigint) made such a usage a bare driver
    error ('bigint out of range') and SQLite kept it, so the store could not be copied."""
    session = store.create_session("s")
    session.append(user("hi"))
    reply = {"role": "assistant", "content": "x"}
    edge = 2**63 - 1 if count > 0 else -(2**63)
    kept = session.append(reply, run=Completion({"role": "assistant"}, usage={"completion_tokens": edge}))
    assert store.run(kept.run_id).usage == {"completion_tokens": edge}
    before = public_rows_of(store)
    for name in ("prompt_tokens", "input_tokens", "completion_tokens", "output_tokens"):
        with pytest.raises(InvalidPayload, match=f"^run usage: {name} is (above|below) the 64-bit range"):
            session.append(reply, run=Completion({"role": "assistant"}, usage={name: count}))
    assert public_rows_of(store) == before


@pytest.mark.parametrize("name", SQLISH)
def test_names_with_sql_metacharacters_are_just_names(store, name):
    session = store.create_session(name, metadata={name: name})
    first = session.append(user(name))
    second = session.append(user("two"))
    assert session.fork(name, at=first).head_id == first.id
    session.checkpoint(name + "!", at=second)
    assert session.resolve(name) == first.id and session.resolve(name + "!") == second.id
    assert session.messages(name) == [user(name)]
    renamed = session.rename(name, name + "?")
    assert renamed.head_id == first.id
    with pytest.raises(NotFound):
        session.branch(name)
    assert store.session(session.id).title == name
    assert store.session(session.id).metadata == {name: name}
    # Wildcards never match anything they should not.
    for pattern in ("%", "%%%%", "____", "_", "*", name):
        if pattern in (name, name + "?", name + "!"):
            continue
        with pytest.raises((NotFound, Conflict)):
            session.resolve(pattern)
        with pytest.raises(NotFound):
            store.session(pattern)
        with pytest.raises(NotFound):
            store.node(pattern)
    session.delete_branch(name + "?")
    session.delete_checkpoint(name + "!")
    assert [b.name for b in session.branches()] == ["main"]
    assert set(store.stats()["tables"]) >= {"nodes", "sessions", "branches", "checkpoints", "runs"}
    assert store.verify().ok


@pytest.mark.parametrize("name", ["", " main", "main ", "a\x00b", "a\nb", "x" * 201, "\x7f"])
def test_invalid_names_are_refused_and_nothing_is_written(store, session, name):
    session.append(user("hi"))
    before = public_rows_of(store)
    for attempt in (
        lambda: session.fork(name, at="main"),
        lambda: session.checkpoint(name, at="main"),
        lambda: session.append(user("x"), branch=name),
        lambda: session.edit(session.head(), user("y"), branch=name),
    ):
        with pytest.raises(Conflict, match="invalid"):
            attempt()
    assert public_rows_of(store) == before


# -- reads through the path cache: fresh pointers, the same answers ---------------------


def test_pointers_are_read_fresh_across_processes(db_target):
    with Store(db_target) as a, Store(db_target) as b:
        s = a.create_session()
        nodes = s.append_many([user("1"), assistant("2"), user("3")])
        theirs = b.session(s.id)
        assert [n.id for n in theirs.path("main")] == [n.id for n in nodes]
        s.move("main", to=nodes[0])  # a rewinds the branch
        assert [n.id for n in theirs.path("main")] == [nodes[0].id]
        s.append(assistant("other"))
        assert [m["content"] for m in theirs.messages()] == ["1", "other"]


def test_messages_is_a_new_list_each_time(store, session):
    session.append_many([user("hi"), assistant("there")])
    first = session.messages()
    first.append(user("only in my list"))
    first.pop(0)
    assert session.messages() == [user("hi"), assistant("there")]


def test_older_ends_and_forks_off_a_cached_branch_read_right(store, session):
    nodes = session.append_many([user("a"), assistant("b"), user("c")])
    assert [m["content"] for m in session.messages()] == ["a", "b", "c"]
    grown = session.append_many([assistant("d"), user("e")])
    first = session.messages()
    again = session.messages()
    assert [m["content"] for m in again] == ["a", "b", "c", "d", "e"]
    assert first is not again and all(x is y for x, y in zip(first, again, strict=True))
    # The older end (a prefix of the grown chain) still reads as it was.
    assert [m["content"] for m in session.messages(nodes[-1].id)] == ["a", "b", "c"]
    assert [n.id for n in session.path(nodes[1].id)] == [n.id for n in nodes[:2]]
    # A fork under the middle of the chain gets its own chain; neither disturbs the other.
    session.fork("alt", at=nodes[1])
    other = session.append_many([user("x"), assistant("y")], branch="alt")
    assert [m["content"] for m in session.messages("alt")] == ["a", "b", "x", "y"]
    assert [m["content"] for m in session.messages()] == ["a", "b", "c", "d", "e"]
    assert [n.id for n in session.path("alt")] == [n.id for n in nodes[:2] + other]
    assert session.path("main")[-1].id == grown[-1].id
