"""The store against a tiny in-memory model of a tree, driven by hypothesis.

After every step the store's paths, children, refs and pending pauses must
equal the model's, on a real database file.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from sessiontree import CheckpointImmutable, Conflict, Store

pytestmark = pytest.mark.slow  # hypothesis state machine, seconds per run

NAMES = st.sampled_from(["main", "dev", "x", "y", "cp1", "cp2"])
TEXTS = st.text(max_size=12)


class StoreMachine(RuleBasedStateMachine):
    url: str | None = None
    """A PostgreSQL schema to run on (each example in a new session); None: a new SQLite file."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp()
        self.store = Store(self.url or Path(self.dir) / "m.db")
        self.session = self.store.create_session()
        self.parent: dict[str, str | None] = {}  # node id -> parent id
        self.payload: dict[str, dict] = {}
        self.kind: dict[str, str] = {}
        self.branches: dict[str, str] = {}
        self.checkpoints: dict[str, str] = {}

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir)

    # -- the model's view ------------------------------------------------

    def model_path(self, node_id: str) -> list[str]:
        path = []
        current: str | None = node_id
        while current is not None:
            path.append(current)
            current = self.parent[current]
        return path[::-1]

    def undecided_pauses(self) -> set[str]:
        """Pauses with no decision: prune keeps them all, a branch at them or not."""
        decided = {self.parent[n] for n, k in self.kind.items() if k == "decision"}
        return {n for n, k in self.kind.items() if k == "pause" and n not in decided}

    def unresolved_pauses(self) -> set[str]:
        """What ``pending`` lists: an undecided pause some branch stands at."""
        return self.undecided_pauses() & set(self.branches.values())

    def record(self, node) -> None:
        self.parent[node.id] = node.parent_id
        self.payload[node.id] = node.payload
        self.kind[node.id] = node.kind

    def name_taken(self, name: str) -> bool:
        return name in self.branches or name in self.checkpoints

    # -- rules -----------------------------------------------------------

    @rule(name=NAMES, text=TEXTS)
    def append(self, name, text):
        if name in self.checkpoints:
            try:
                self.session.append({"role": "user", "content": text}, branch=name)
            except Conflict:
                return
            raise AssertionError("appending to a checkpoint name must fail")
        node = self.session.append({"role": "user", "content": text}, branch=name)
        assert node.parent_id == self.branches.get(name)
        self.record(node)
        self.branches[name] = node.id

    @precondition(lambda self: self.branches)
    @rule(data=st.data(), texts=st.lists(TEXTS, min_size=1, max_size=4))
    def append_many(self, data, texts):
        name = data.draw(st.sampled_from(sorted(self.branches)))
        nodes = self.session.append_many([{"role": "assistant", "content": t} for t in texts], branch=name)
        for node in nodes:
            self.record(node)
        assert nodes[0].parent_id == self.branches[name]
        self.branches[name] = nodes[-1].id

    @precondition(lambda self: self.branches)
    @rule(data=st.data())
    def pause_and_maybe_decide(self, data):
        name = data.draw(st.sampled_from(sorted(self.branches)))
        pause = self.session.append({"calls": []}, branch=name, kind="pause")
        self.record(pause)
        self.branches[name] = pause.id
        if data.draw(st.booleans()):
            decision = self.session.append({"by": "t"}, branch=name, kind="decision")
            self.record(decision)
            self.branches[name] = decision.id
            try:  # a second decision on the same pause loses
                self.session.append({"by": "u"}, branch=None, parent=pause.id, kind="decision")
            except Conflict:
                pass
            else:
                raise AssertionError("a pause took two decisions")

    @precondition(lambda self: self.parent)
    @rule(data=st.data(), name=NAMES)
    def fork(self, data, name):
        at = data.draw(st.sampled_from(sorted(self.parent)))
        if self.name_taken(name):
            try:
                self.session.fork(name, at=at)
            except Conflict:
                return
            raise AssertionError("duplicate name accepted")
        branch = self.session.fork(name, at=at)
        assert branch.head_id == at
        self.branches[name] = at

    @precondition(lambda self: self.parent)
    @rule(data=st.data(), name=NAMES, text=TEXTS)
    def edit(self, data, name, text):
        original = data.draw(
            st.sampled_from(sorted(n for n, k in self.kind.items() if k == "message") or ["none"])
        )
        if original == "none":
            return
        payload = {"role": "user", "content": "edited " + text}
        if self.name_taken(name):
            try:
                self.session.edit(original, payload, branch=name)
            except Conflict:
                return
            raise AssertionError("duplicate name accepted")
        node = self.session.edit(original, payload, branch=name)
        assert node.parent_id == self.parent[original] and node.id != original
        self.record(node)
        self.branches[name] = node.id

    @precondition(lambda self: self.parent)
    @rule(data=st.data(), name=NAMES)
    def checkpoint(self, data, name):
        at = data.draw(st.sampled_from(sorted(self.parent)))
        if self.name_taken(name):
            try:
                self.session.checkpoint(name, at=at)
            except Conflict:
                return
            raise AssertionError("duplicate name accepted")
        self.session.checkpoint(name, at=at)
        self.checkpoints[name] = at

    @precondition(lambda self: self.parent and (self.branches or self.checkpoints))
    @rule(data=st.data())
    def move(self, data):
        name = data.draw(st.sampled_from(sorted(self.branches | self.checkpoints)))
        to = data.draw(st.sampled_from(sorted(self.parent)))
        if name in self.checkpoints:
            try:
                self.session.move(name, to=to)
            except CheckpointImmutable:
                return
            raise AssertionError("a checkpoint moved")
        self.session.move(name, to=to)
        self.branches[name] = to

    @precondition(lambda self: self.branches)
    @rule(data=st.data())
    def delete_branch(self, data):
        name = data.draw(st.sampled_from(sorted(self.branches)))
        self.session.delete_branch(name)
        del self.branches[name]

    @rule(dry_run=st.booleans())
    def prune(self, dry_run):
        keep = set()
        has_child = set(self.parent.values())
        pending_decisions = [n for n, k in self.kind.items() if k == "decision" and n not in has_child]
        refs = [
            *self.branches.values(),
            *self.checkpoints.values(),
            *self.undecided_pauses(),
            *pending_decisions,
        ]
        for ref in refs:
            keep.update(self.model_path(ref))
        expected = sorted(set(self.parent) - keep)
        report = self.session.prune(dry_run=dry_run, grace=0)
        assert report.node_ids == expected
        if not dry_run:
            for node_id in expected:
                del self.parent[node_id], self.payload[node_id], self.kind[node_id]

    # -- invariants --------------------------------------------------------

    @invariant()
    def refs_match(self):
        assert {b.name: b.head_id for b in self.session.branches()} == self.branches
        assert {c.name: c.node_id for c in self.session.checkpoints()} == self.checkpoints

    @invariant()
    def paths_match(self):
        for name, head in self.branches.items():
            path = self.session.path(name)
            assert [n.id for n in path] == self.model_path(head)
            assert [n.depth for n in path] == list(range(len(path)))
            assert [n.payload for n in path] == [self.payload[i] for i in self.model_path(head)]

    @invariant()
    def children_match(self):
        tree = self.session.tree()
        assert {n.id for n in tree} == set(self.parent)
        for node in tree:
            expected = sorted(c for c, p in self.parent.items() if p == node.id)
            assert [c.id for c in self.session.children(node.id)] == expected

    @invariant()
    def pending_and_verify(self):
        assert {n.id for n in self.session.pending()} == self.unresolved_pauses()
        assert self.session.verify().ok


StoreMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestStoreMachine = StoreMachine.TestCase


class PostgresStoreMachine(StoreMachine):
    pass


def test_the_same_machine_on_postgres(pg_url):
    PostgresStoreMachine.url = pg_url
    run_state_machine_as_test(
        PostgresStoreMachine,
        settings=settings(
            max_examples=30,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
