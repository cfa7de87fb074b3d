"""Refs and ids: REF~N, names that can never shadow a node, store-wide unique
abbreviations, and expect_head taking a Node or an id."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessiontree import BranchMoved, Conflict, NotFound, Store
from sessiontree.names import looks_like_id, split_ancestry

from conftest import assistant, user


@pytest.fixture
def store(every_store):
    """Refs resolve alike on a SQLite file, SQLite ``:memory:`` and PostgreSQL."""
    return every_store


@pytest.fixture
def chain(session):
    return session.append_many([user("q"), assistant("a"), user("q2"), assistant("a2")])


def test_tilde_n_is_the_nth_ancestor_of_a_branch_checkpoint_or_node(store, session, chain):
    q, a, q2, a2 = chain
    session.checkpoint("answered", at=a)
    assert session.resolve("main~0") == a2.id
    assert session.resolve("main~") == q2.id
    assert session.resolve("main~1") == q2.id
    assert session.resolve("main~3") == q.id
    assert session.resolve("main~1~2") == q.id  # suffixes add up, as in git
    assert session.resolve("answered~1") == q.id
    assert session.resolve(f"{a2.id}~2") == a.id
    short = store.abbreviations([a2.id])[a2.id]
    assert session.resolve(f"{short}~2") == a.id
    assert store.node(f"{a2.id}~3").id == q.id  # across sessions too
    assert [n.id for n in session.path("main~2")] == [q.id, a.id]


def test_tilde_past_the_root_names_the_problem(store, session, chain):
    with pytest.raises(NotFound, match=r"'main~4' goes past the root: 'main' is at depth 3"):
        session.resolve("main~4")
    with pytest.raises(NotFound, match="goes past the root"):
        store.node(f"{chain[0].id}~1")


@pytest.mark.parametrize("name", ["abcd", "ABCD", "2024-12-01", "0196", "dead-beef", "a~b", "main~2", "~"])
def test_names_that_could_be_read_as_ids_or_ancestry_are_refused(store, session, chain, name):
    before = session.branches()
    with pytest.raises(Conflict, match="invalid branch name"):
        session.fork(name, at="main")
    with pytest.raises(Conflict, match="invalid checkpoint name"):
        session.checkpoint(name, at="main")
    with pytest.raises(Conflict, match="invalid branch name"):
        session.append(user("x"), branch=name)
    assert session.branches() == before and session.checkpoints() == []


@pytest.mark.parametrize("name", ["abc", "feature", "fix-2024", "beefy", "v1.2", "café"])
def test_ordinary_names_are_fine(session, chain, name):
    assert session.fork(name, at="main").head_id == chain[-1].id
    assert session.resolve(f"{name}~1") == chain[-2].id


def test_a_node_id_prefix_always_means_the_node(store, session, chain):
    prefix = store.abbreviations([chain[1].id])[chain[1].id]
    assert session.resolve(prefix) == chain[1].id
    with pytest.raises(Conflict, match="could be read as a node id prefix"):
        session.fork(prefix, at="main")


@given(st.text(alphabet="0123456789abcdefABCDEF-", min_size=4, max_size=40))
def test_every_hex_and_dash_string_of_4_or_more_looks_like_an_id(text):
    assert looks_like_id(text)


@given(
    st.text(min_size=1, max_size=20).filter(lambda t: "~" not in t), st.lists(st.integers(0, 50), max_size=4)
)
def test_split_ancestry_adds_up_the_suffixes(base, steps):
    ref = base + "".join(f"~{n}" for n in steps)
    assert split_ancestry(ref) == (base, sum(steps))


def test_abbreviations_are_unique_in_the_whole_store_and_resolve(db_target):
    with Store(db_target) as store:
        # Many ids in the same few milliseconds share long prefixes across sessions.
        sessions = [store.create_session(f"s{i}") for i in range(5)]
        nodes = [n for s in sessions for n in s.append_many([user(str(j)) for j in range(40)])]
        shown = store.abbreviations([n.id for n in nodes[:10]])  # a listing shows a few of them
        assert len({len(v) for v in shown.values()}) == 1  # one width per listing
        for full, short in shown.items():
            assert store.node(short).id == full
        session_short = store.abbreviations([s.id for s in sessions])
        for full, short in session_short.items():
            assert store.session(short).id == full
            with pytest.raises(NotFound):  # and it names no node
                store.node(short)


def test_expect_head_takes_a_node_or_an_id(session, chain):
    head = session.head()
    assert head is not None
    node = session.append(user("next"), expect_head=head)  # the Node just read
    assert session.append(assistant("ok"), expect_head=node.id).parent_id == node.id
    with pytest.raises(BranchMoved) as moved:
        session.append(user("stale"), expect_head=node)
    assert moved.value.expected == node.id and "Node(" not in str(moved.value)
    with pytest.raises(TypeError, match="expect_head must be a Node, a node id or None, not int"):
        session.append(user("x"), expect_head=42)
    branch = session.move("main", to=node, expect_head=session.head())
    assert branch.head_id == node.id


def test_a_retry_loop_passing_the_node_it_read_succeeds(session, chain):
    """The bug this fixes: comparing a Node with the stored id never matched, so
    such a loop spun forever on BranchMoved."""
    attempts = 0
    while True:
        attempts += 1
        head = session.head()
        try:
            session.append(user("retry"), expect_head=head)
            break
        except BranchMoved:  # pragma: no cover - only on a real race
            assert attempts < 3, "a retry loop passing the node it read must not spin"
    assert attempts == 1


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 3))
def test_node_and_id_forms_agree(tmp_path_factory, steps):
    with Store(tmp_path_factory.mktemp("agree") / "s.db") as store:
        s = store.create_session()
        nodes = s.append_many([user(str(i)) for i in range(4)])
        assert s.resolve(f"main~{steps}") == s.resolve(f"{nodes[-1].id}~{steps}") == nodes[-1 - steps].id


@pytest.mark.parametrize(
    "name",
    ["a\x85b", "a\u2028b", "evil\u202etxt", "zero\u200bwidth", "a\u2029b", "bom\ufeff", "tab\tname"],
)
def test_invisible_and_control_characters_are_refused_in_names(session, chain, name):
    with pytest.raises(Conflict, match="control characters"):
        session.fork(name, at="main")
    assert [b.name for b in session.branches()] == ["main"]
