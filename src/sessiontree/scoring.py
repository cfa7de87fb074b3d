"""Judge and promote: score nodes on branches, ``promote``, and preference pairs.

Contract: a score is one node of kind ``score`` appended to the branch it judges, with
the payload ``{"value": <finite number>, "scorer": <name>, "note": <text or null>}``
and, when the scorer called a model, that call as the node's run. A score is a marker:
it is never sent to a model, and a run continued on the branch carries on after it. A
branch standing at a pause is not scored (the score would hide the pause from every
inbox); ``Conflict`` says so and nothing is written. The score is appended with a
compare-and-set on the head the scorer read, so a branch that moved meanwhile raises
``BranchMoved`` rather than scoring a path the scorer never saw.

``promote`` moves ``main`` (or another branch) to a branch's head and checkpoints the
head it had, in one transaction whose move is a compare-and-set on that head.

``preference_pairs`` turns scored sibling branches into (prompt, chosen, rejected)
records: two branches whose latest scores (by one scorer) differ and whose paths share
the prompt, the messages up to their common ancestor.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from . import bridge
from .errors import Conflict, InvalidPayload
from .kinds import ScorePayload
from .model import Completion, Node
from .session import Session
from .store import Store, session_of

KIND = "score"


@dataclass(frozen=True)
class Score:
    """One judgement of a branch, as a score node stores it."""

    value: float
    scorer: str
    note: str | None = None

    def __post_init__(self) -> None:
        if (
            isinstance(self.value, bool)
            or not isinstance(self.value, int | float)
            or not math.isfinite(self.value)
        ):
            raise InvalidPayload(f"a score needs a finite number as its value, got {str(self.value)[:40]}")
        if not isinstance(self.scorer, str) or not self.scorer.strip():
            raise InvalidPayload(f"a score needs a scorer name, got {self.scorer!r:.40}")
        if self.note is not None and not isinstance(self.note, str):
            raise InvalidPayload(f"a score's note must be text, not {type(self.note).__name__}")

    def to_payload(self) -> dict[str, Any]:
        return ScorePayload(self.value, self.scorer, self.note).to_payload()

    @classmethod
    def from_node(cls, node: Node) -> Score:
        if node.kind != KIND:
            raise Conflict(f"node {node.id} is a {node.kind} node, not a score")
        stored = ScorePayload.from_node(node)
        return cls(stored.value, stored.scorer, stored.note)


@dataclass(frozen=True)
class Judgement:
    """What a scorer function may return instead of a bare number: the value, a note,
    and the model call it made (recorded as the score node's run)."""

    value: float
    note: str | None = None
    run: Completion | dict[str, Any] | None = None


Scorer = Callable[[list[dict[str, Any]]], Any]


def score(
    store: Store,
    branch: str,
    scorer: Scorer | float,
    *,
    session: Session | str | None = None,
    name: str | None = None,
    note: str | None = None,
) -> Node:
    """Judge ``branch`` and append the score node; return it.

    ``scorer`` is a number (a human's or an outside judgement: ``name`` defaults to
    ``"human"``), or a function given the branch's messages (what a model would be sent)
    that returns a number or a ``Judgement``; it may be a coroutine function. ``name``
    defaults to the function's ``__name__``.
    """
    s = session_of(store, branch, session)
    path = s.path(branch)
    head = path[-1] if path else None
    if head is None:
        raise Conflict(f"branch {branch!r} is empty: there is nothing to score")
    if head.kind == "pause":
        raise Conflict(
            f"branch {branch!r} stands at pause {head.id}; decide it before scoring (nothing was written)"
        )
    run: Completion | dict[str, Any] | None = None
    if callable(scorer):
        verdict = scorer(s.messages(branch))
        if inspect.isawaitable(verdict):
            verdict = bridge.call(_awaited(verdict))
        if isinstance(verdict, Judgement):
            value, note, run = verdict.value, verdict.note if note is None else note, verdict.run
        else:
            value = verdict
        label = name or getattr(scorer, "__name__", None) or type(scorer).__name__
    else:
        value, label = scorer, name or "human"
    record = Score(value, label, note)
    return s.append(record.to_payload(), kind=KIND, branch=branch, run=run, expect_head=head.id)


async def _awaited(value: Any) -> Any:
    return await value


def scores(store: Store, branch: str, *, session: Session | str | None = None) -> dict[str, Score]:
    """The latest score by each scorer on ``branch``'s path, by scorer name."""
    return latest_scores(session_of(store, branch, session).path(branch))


def latest_scores(path: Sequence[Node]) -> dict[str, Score]:
    """The latest score by each scorer among ``path``'s nodes."""
    found: dict[str, Score] = {}
    for node in path:
        if node.kind == KIND:
            s = Score.from_node(node)
            found.pop(s.scorer, None)  # keep insertion order by latest
            found[s.scorer] = s
    return found


@dataclass(frozen=True)
class Promotion:
    branch: str  # the branch that moved (``main`` by default)
    to: str  # the node it moved to
    checkpoint: str  # the name now pointing at its old head
    previous: str  # the old head

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def promote(
    store: Store,
    source: str,
    *,
    session: Session | str | None = None,
    target: str = "main",
    checkpoint: str | None = None,
) -> Promotion:
    """Move ``target`` to ``source``'s head and checkpoint the head it had, in one
    transaction (a compare-and-set on that head: a target that moved meanwhile raises
    ``BranchMoved`` and nothing is written). The checkpoint is ``checkpoint`` or
    ``{target}-before-{source}`` (with ``-2``, ``-3``… when taken)."""
    s = session_of(store, source, session)
    if source == target:
        raise Conflict(f"{source!r} is the branch being promoted to; name another branch")
    with store.transaction():
        to = s.node(source)
        old = s.branch(target).head_id
        if old is None:
            raise Conflict(f"branch {target!r} is empty; fork it from {source!r} instead")
        if old == to.id:
            raise Conflict(f"{target!r} already stands at {source!r}'s head {to.id}; nothing was written")
        name = checkpoint or _free_name(s, f"{target}-before-{source}")
        s.checkpoint(name, at=old)
        s.move(target, to=to, expect_head=old)
    return Promotion(target, to.id, name, old)


def _free_name(session: Session, wanted: str) -> str:
    taken = {b.name for b in session.branches()} | {c.name for c in session.checkpoints()}
    if wanted not in taken:
        return wanted
    n = 2
    while f"{wanted}-{n}" in taken:
        n += 1
    return f"{wanted}-{n}"


@dataclass(frozen=True)
class PreferencePair:
    prompt: list[dict[str, Any]]
    chosen: list[dict[str, Any]]
    rejected: list[dict[str, Any]]
    scorer: str
    chosen_branch: str
    rejected_branch: str
    chosen_score: float
    rejected_score: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def preference_pairs(
    session: Session, *, scorer: str | None = None, branches: Sequence[str] | None = None
) -> Iterator[PreferencePair]:
    """Chosen/rejected pairs from scored branches of ``session`` that share a prompt.

    Of every two branches scored by one scorer (``scorer``, or each scorer in turn) with
    different latest values, the higher is chosen. The prompt is the messages up to the
    branches' common ancestor, and it must end with a user message (else the two are not
    two answers to one prompt and are left out); chosen and rejected are the messages
    after it, score nodes and other markers left out.
    """
    names = list(branches) if branches is not None else sorted(b.name for b in session.branches())
    paths = {name: session.path(name) for name in names}
    scored = {name: latest_scores(path) for name, path in paths.items()}
    scorers = [scorer] if scorer else sorted({k for s in scored.values() for k in s})
    for by in scorers:
        judged = [(name, scored[name][by].value) for name in names if by in scored[name]]
        for i, (a, va) in enumerate(judged):
            for b, vb in judged[i + 1 :]:
                if va == vb:
                    continue
                (win, wv), (lose, lv) = ((a, va), (b, vb)) if va > vb else ((b, vb), (a, va))
                pair = _pair(paths[win], paths[lose])
                if pair is not None:
                    prompt, chosen, rejected = pair
                    yield PreferencePair(prompt, chosen, rejected, by, win, lose, wv, lv)


def _pair(win: list[Node], lose: list[Node]) -> tuple[list, list, list] | None:
    shared = 0
    while shared < min(len(win), len(lose)) and win[shared].id == lose[shared].id:
        shared += 1
    prompt = [n.payload for n in win[:shared] if n.kind == "message"]
    if not prompt or prompt[-1].get("role") != "user":
        return None
    chosen = [n.payload for n in win[shared:] if n.kind == "message"]
    rejected = [n.payload for n in lose[shared:] if n.kind == "message"]
    if not chosen or not rejected:
        return None
    return prompt, chosen, rejected


__all__ = [
    "Judgement",
    "Promotion",
    "PreferencePair",
    "Score",
    "latest_scores",
    "preference_pairs",
    "promote",
    "score",
    "scores",
]
