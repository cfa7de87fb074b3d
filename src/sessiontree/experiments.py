"""Experiments on recorded runs: replay a branch, rerun from any point with
variants, and compare the branches that come out.

Contract:
- ``replay`` forks the recorded branch just before its first model call and
  runs the agent loop again with the recorded assistant replies as the model
  (a cassette; or ``call``, a live model), the recorded human decisions as the
  approver (a call the recording paused for and nobody decided pauses again),
  and either the recorded tool results or live tools. It goes turn by turn: a
  turn starts where the recording has user (system, developer) messages after
  what the agent wrote; the replay appends those messages as recorded and runs
  the loop again, with only that turn's replies on the cassette. It reports,
  per turn and for the whole branch, whether every model reply, tool call,
  argument and tool result matched, and where it first diverged. Markers
  (pauses, decisions, tool starts, errors) are not compared. A pause, or a
  live model's failure, stops it; the later turns are reported not replayed.
- ``rerun`` starts one new branch per variant and repetition at a ref, labels
  it with its variant in the branch metadata, and runs them concurrently (at
  most ``concurrency`` at once). It never touches the branch it started from.
- ``compare`` summarises branches from their common ancestor: final answer,
  status, steps, tool calls, tokens, latency, cost (when prices are given),
  errors, pauses and the latest score by each scorer (see ``scoring``). Usage comes
  from the runs table; nothing is bookkept.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from . import bridge
from .decisions import decided
from .errors import CassetteExhausted, Conflict, SessionTreeError
from .kinds import ErrorPayload, PausePayload
from .limits import Limits
from .loop import ModelCall, arun
from .model import Completion, Node, Usage
from .options import RunOptions
from .recipe import Recipe
from .scoring import KIND as SCORE
from .scoring import latest_scores
from .session import Ref, Session
from .steps import Approve, Decision, Final, Pause, ToolCall
from .store import Store, session_of
from .tools import Tool, as_tools

# -- shared ----------------------------------------------------------------


def free_branch_name(session: Session, wanted: str) -> str:
    taken = {b.name for b in session.branches()} | {c.name for c in session.checkpoints()}
    name, i = wanted, 2
    while name in taken:
        name, i = f"{wanted}-{i}", i + 1
    return name


def _event(node: Node) -> tuple | None:
    """What a replay compares about a node (None: not compared)."""
    if node.kind != "message":
        return None
    p = node.payload
    if p.get("role") == "assistant":
        calls = tuple(ToolCall.from_message(c).signature for c in p.get("tool_calls") or [])
        return ("assistant", p.get("content"), calls)
    if p.get("role") == "tool":
        return ("tool", p.get("tool_call_id"), p.get("content"))
    return (p.get("role"), p.get("content"))


# -- replay ------------------------------------------------------------------


@dataclass(frozen=True)
class Divergence:
    index: int  # among the compared messages after the fork point
    expected: str | None
    actual: str | None
    node_id: str | None  # the replayed node, when there is one
    turn: int = 1  # the turn it is in: 1 is the first agent run, each user turn fed back adds one


@dataclass(frozen=True)
class TurnReport:
    """How one turn of a replay went: the user messages fed back (none in turn 1) and the
    agent run that followed them."""

    turn: int
    first: int  # the index of its first compared message, among all of the replay's
    compared: int  # recorded messages in it, the user messages fed back included
    matched: bool
    divergence: Divergence | None
    final: str  # the reason the turn's run ended; "not replayed" or "no reply recorded"

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "divergence": self.divergence.__dict__ if self.divergence else None}


@dataclass(frozen=True)
class ReplayReport:
    recorded: str
    branch: str
    matched: bool
    compared: int
    divergence: Divergence | None  # the first, in the first turn that diverged
    final: str  # how the last turn replayed ended
    turns: list[TurnReport] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.__dict__,
            "divergence": self.divergence.__dict__ if self.divergence else None,
            "turns": [t.to_dict() for t in self.turns],
        }


@dataclass
class _Turn:
    """One turn of a recording: the user (system, developer) messages that open it (none
    in turn 1), then the agent run they started."""

    inputs: list[Node] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)  # every node of the turn, inputs first
    replies: list[Completion] = field(default_factory=list)


def _is_input(node: Node) -> bool:
    """A message the agent loop does not write: what a replay feeds back."""
    return node.kind == "message" and node.payload.get("role") not in ("assistant", "tool")


@dataclass
class _Recording:
    """A recorded branch from its first model reply, read for a replay, cut into turns
    where a user message follows what the agent wrote. Tool results, decisions and pauses
    are keyed by (turn, model reply in the turn, call id): the n-th reply's calls."""

    turns: list[_Turn] = field(default_factory=list)
    results: dict[tuple[int, int, str], Any] = field(default_factory=dict)
    decisions: dict[tuple[int, int, str], Decision] = field(default_factory=dict)
    paused: set[tuple[int, int, str]] = field(default_factory=set)

    @classmethod
    def read(cls, store: Store, nodes: list[Node]) -> _Recording:
        recording = cls([_Turn()])
        for node in nodes:
            turn = recording.turns[-1]
            if _is_input(node) and any(n.kind == "message" and not _is_input(n) for n in turn.nodes):
                turn = _Turn()
                recording.turns.append(turn)
            turn.nodes.append(node)
            key = (len(recording.turns) - 1, len(turn.replies))
            if _is_input(node):
                turn.inputs.append(node)
            elif node.kind == "message" and node.payload.get("role") == "assistant":
                run = store.run(node.run_id) if node.run_id else None
                turn.replies.append(
                    Completion(
                        node.payload,
                        model=run.model if run else None,
                        provider="cassette",
                        params=run.params if run else {},
                        finish_reason=run.finish_reason if run else None,
                    )
                )
            elif node.kind == "message" and node.payload.get("role") == "tool":
                recording.results[(*key, str(node.payload.get("tool_call_id")))] = node.payload.get("content")
            elif node.kind == "decision":
                for call_id, decision in decided(node).items():
                    recording.decisions[(*key, call_id)] = decision
            elif node.kind == "pause":
                recording.paused |= {(*key, c) for c in PausePayload.from_node(node).call_ids}
        return recording


class _Player:
    """The model of a replay: the recorded replies of the turn being replayed (a
    cassette), or a live ``call``. It counts the model calls of the turn, which is how
    recorded results and decisions find the call they belong to."""

    def __init__(self, recording: _Recording, call: ModelCall | None) -> None:
        self.recording, self.live = recording, call
        self.turn = self.calls = 0
        self.ran_out = False  # the cassette had no reply left for the turn

    def start(self, turn: int) -> None:
        self.turn, self.calls, self.ran_out = turn, 0, False

    @property
    def key(self) -> tuple[int, int]:
        return self.turn, self.calls

    def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        self.calls += 1
        if self.live is not None:
            return self.live(messages, tools)
        replies = self.recording.turns[self.turn].replies
        if self.calls > len(replies):
            self.ran_out = True
            raise CassetteExhausted(
                f"the replay asked for model call {self.calls} of turn {self.turn + 1}; "
                f"the recording has {len(replies)}"
            )
        return replies[self.calls - 1]

    def approver(self) -> Callable[[ToolCall], Decision | Pause]:
        """What the humans decided; a call the recording paused for and nobody decided
        pauses again, so live tools never run a call that was never approved."""

        def approve(call: ToolCall) -> Decision | Pause:
            key = (*self.key, call.id)
            if key in self.recording.decisions:
                return self.recording.decisions[key]
            return Pause("the recording paused here") if key in self.recording.paused else Approve()

        return approve


def _recorded() -> None:
    """Plays back the result recorded for each call."""


class RecordedTool(Tool):
    """A tool that answers each call with the result recorded for it: results are keyed by
    (turn, model reply, call id), since some servers reuse call ids from one reply to the
    next, and the reply being answered is the last one ``player`` gave."""

    def __init__(self, name: str, player: _Player) -> None:
        super().__init__(_recorded, name=name)
        self.player = player

    def parse(self, arguments: str | dict[str, Any] | None) -> dict[str, Any]:
        return {}  # the recording answers whatever was asked; the comparison judges it

    async def invoke(self, arguments: dict[str, Any], context: Any = None) -> Any:
        call_id = context.call_id if context else None
        key = (*self.player.key, str(call_id))
        if key not in self.player.recording.results:
            return f"Error: no recorded result for call {call_id!r} of {self.name}"
        return self.player.recording.results[key]


async def areplay(
    store: Store,
    branch: str,
    *,
    session: Session | str | None = None,
    tools: Literal["recorded", "live"] = "recorded",
    implementations: Iterable[Tool | Callable[..., Any]] = (),
    into: str | None = None,
    call: ModelCall | None = None,
    max_steps: int | None = None,
) -> ReplayReport:
    """Re-run a recorded branch against its own recording, turn by turn; see the module
    docstring."""
    s = session_of(store, branch, session)
    path = s.path(branch)
    first = next(
        (i for i, n in enumerate(path) if n.kind == "message" and n.payload.get("role") == "assistant"), None
    )
    if first is None or first == 0:
        raise Conflict(f"branch {branch!r} has no model call to replay after a first message")
    recording = _Recording.read(store, path[first:])
    player = _Player(recording, call)
    if tools == "recorded":
        names = {
            c["function"]["name"]
            for t in recording.turns
            for r in t.replies
            for c in r.message.get("tool_calls") or []
        }
        registry: list[Tool] = [RecordedTool(name, player) for name in sorted(names)]
    elif tools == "live":
        registry = list(as_tools(implementations).values())
    else:
        raise ValueError(f"tools must be 'recorded' or 'live', not {tools!r}")

    name = into or free_branch_name(s, f"{branch}-replay")
    metadata: dict[str, Any] = {"replay_of": branch, "tools": tools}
    if call is not None:
        metadata["model"] = getattr(call, "model", None)
    s.fork(name, at=path[first - 1], metadata=metadata)
    reports: list[TurnReport] = []
    stopped = None  # why the turns after this one are not replayed
    position = 0
    for t, turn in enumerate(recording.turns):
        expected = [e for e in map(_event, turn.nodes) if e is not None]
        if stopped is not None:
            reports.append(_turn_report(t, position, expected, [], "not replayed"))
            position += len(expected)
            continue
        start = len(s.path(name))
        for node in turn.inputs:
            s.append(dict(node.payload), branch=name)
        reason = "no reply recorded"
        if call is not None or turn.replies:  # a cassette with nothing to play stops as the recording did
            player.start(t)
            limit = max_steps if max_steps is not None else len(turn.replies) + 1
            reason = "none"
            async for step in arun(
                store, s, name, call=player, tools=registry, approve=player.approver(), max_steps=limit
            ):
                if isinstance(step, Final):
                    reason = step.reason
            # Feed the next turn after a run that ended as a run can between user turns;
            # a pause, or a failing live model, stops the replay.
            if reason not in ("completed", "max_steps") and not (reason == "error" and player.ran_out):
                stopped = reason
        replayed = [n for n in s.path(name)[start:] if _event(n) is not None]
        reports.append(_turn_report(t, position, expected, replayed, reason))
        position += len(expected)
    divergence = next((r.divergence for r in reports if r.divergence is not None), None)
    last = next((r.final for r in reversed(reports) if r.final != "not replayed"), "none")
    return ReplayReport(branch, name, divergence is None, position, divergence, last, reports)


def _turn_report(t: int, first: int, expected: list[tuple], replayed: list[Node], final: str) -> TurnReport:
    """Compare one turn's recorded messages with what its replay wrote."""
    actual = [_event(n) for n in replayed]
    divergence = None
    for i in range(max(len(expected), len(actual))):
        want = expected[i] if i < len(expected) else None
        got = actual[i] if i < len(actual) else None
        if want != got:
            node_id = replayed[i].id if i < len(actual) else None
            divergence = Divergence(first + i, _show(want), _show(got), node_id, t + 1)
            break
    return TurnReport(t + 1, first, len(expected), divergence is None, divergence, final)


def _show(event: tuple | None) -> str | None:
    return None if event is None else json.dumps(event, ensure_ascii=False)


replay = bridge.calling(areplay)


# -- rerun -------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    """One arm of an experiment: a model call, optional parameters and system prompt.

    ``params`` are applied with ``call.with_params(**params)`` (the HTTP adapter
    and ScriptedModel have it); ``system`` replaces the leading system
    message(s) the model is sent, without rewriting the tree. ``recipe`` is what its
    runs record for continuing them (default: what the call tells, ``sessiontree.recipe``).
    """

    name: str
    call: ModelCall
    params: dict[str, Any] = field(default_factory=dict)
    system: str | None = None
    recipe: Recipe | None = None

    def model_call(self) -> ModelCall:
        call = self.call
        if self.params:
            if not hasattr(call, "with_params"):
                raise TypeError(
                    f"variant {self.name!r}: this call takes no parameters; build a call per variant instead"
                )
            call = call.with_params(**self.params)
        if self.system is None:
            return call
        system = {"role": "system", "content": self.system}

        def with_system(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
            start = 0
            while start < len(messages) and messages[start].get("role") == "system":
                start += 1
            return call([system, *messages[start:]], tools)

        # The loop hands a call its own raw entries (signed thinking, say) by this attribute.
        with_system.raw_kind = getattr(call, "raw_kind", None)  # type: ignore[attr-defined]
        return with_system

    def label(self) -> dict[str, Any]:
        return {
            "variant": self.name,
            "params": self.params,
            "system": self.system,
            "model": getattr(self.call, "model", None),
        }


@dataclass(frozen=True)
class RerunResult:
    variant: str
    repetition: int
    branch: str
    reason: str
    node_id: str | None
    error: str | None = None


async def arerun(
    store: Store,
    at: Ref,
    variants: Sequence[Variant],
    n: int = 1,
    *,
    session: Session | str | None = None,
    tools: Iterable[Tool | Callable[..., Any]] = (),
    approve: Callable[[ToolCall], Any] | None = None,
    max_steps: int = 20,
    limits: Limits | None = None,
    parallel_tools: int = 4,
    concurrency: int = 4,
    prefix: str = "",
    progress: Callable[[int, int, RerunResult], None] | None = None,
    options: RunOptions | None = None,
) -> list[RerunResult]:
    """Run every variant ``n`` times from ``at``, each on its own new branch; ``approve``,
    ``max_steps``, ``limits`` and ``parallel_tools`` (or ``options``, a ``RunOptions``
    holding them and the rest) are each run's, as ``arun`` takes them."""
    if not variants or n < 1 or concurrency < 1:
        raise ValueError("rerun needs at least one variant, n >= 1 and concurrency >= 1")
    if len({v.name for v in variants}) != len(variants):
        raise ValueError("variant names must be unique")
    options = RunOptions.given(options, locals())  # nothing assigned yet: the parameters
    s = session_of(store, at, session)
    start = s.resolve(at)
    tool_list = list(as_tools(tools).values())
    plan = []
    with store.transaction():  # all branches or none
        for variant in variants:
            for i in range(1, n + 1):
                name = f"{prefix}{variant.name}" + (f"-{i}" if n > 1 else "")
                s.fork(name, at=start, metadata={**variant.label(), "repetition": i, "rerun_at": start})
                plan.append((variant, i, name))
    limit = asyncio.Semaphore(concurrency)
    results: list[RerunResult] = []

    async def one(variant: Variant, i: int, name: str) -> RerunResult:
        async with limit:
            final = Final("error", None, "no final step")
            try:
                async for step in arun(
                    store,
                    s,
                    name,
                    call=variant.model_call(),
                    tools=tool_list,
                    recipe=variant.recipe,
                    options=options,
                ):
                    if isinstance(step, Final):
                        final = step
            except SessionTreeError as e:
                final = Final("error", None, str(e))
            result = RerunResult(
                variant.name, i, name, final.reason, final.node.id if final.node else None, final.error
            )
            results.append(result)
            if progress:
                progress(len(results), len(plan), result)
            return result

    return list(await asyncio.gather(*(one(*p) for p in plan)))


rerun = bridge.calling(arerun)


# -- compare -----------------------------------------------------------------


@dataclass(frozen=True)
class BranchSummary:
    branch: str
    status: str  # completed, paused, error, in progress
    final: str | None
    steps: int  # model calls since the common ancestor
    tool_calls: int
    usage: Usage
    cost: float | None
    errors: list[str]
    pauses: int
    metadata: dict[str, Any]
    scores: dict[str, float] = field(default_factory=dict)  # the latest by each scorer

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "usage": self.usage.to_dict()}


@dataclass(frozen=True)
class Comparison:
    ancestor: Node | None
    branches: list[BranchSummary]

    def to_dict(self) -> dict[str, Any]:
        return {
            "ancestor": self.ancestor.id if self.ancestor else None,
            "branches": [b.to_dict() for b in self.branches],
        }


def compare(
    store: Store,
    branches: Sequence[str],
    *,
    session: Session | str | None = None,
    prices: dict[str, dict[str, float]] | None = None,
) -> Comparison:
    """Summarise each branch from the common ancestor of them all."""
    if not branches:
        raise ValueError("compare needs at least one branch")
    s = session_of(store, branches[0], session)
    ancestor: Node | None = s.node(branches[0])
    for other in branches[1:]:
        ancestor = s.common_ancestor(ancestor, other) if ancestor else None
    if len(branches) == 1:
        ancestor = None  # one branch: summarise all of it
    pending = {p.id for p in s.pending()}
    summaries = []
    for name in branches:
        path = s.path(name)
        added = path[ancestor.depth + 1 :] if ancestor else path
        messages = [n.payload for n in added if n.kind == "message"]
        assistants = [m for m in messages if m.get("role") == "assistant"]
        final = next((m.get("content") for m in reversed(assistants) if not m.get("tool_calls")), None)
        usage = s.usage(name, since=ancestor) if ancestor else s.usage(name)
        head = next((n for n in reversed(path) if n.kind != SCORE), path[-1])  # a score judges, not acts
        status = (
            "paused"
            if head.id in pending
            else "error"
            if head.kind == "error"
            else "completed"
            if head.kind == "message" and head.role == "assistant" and not head.payload.get("tool_calls")
            else "in progress"
        )
        try:
            metadata = s.branch(name).metadata
        except SessionTreeError:
            metadata = {}  # a checkpoint or a node id
        summaries.append(
            BranchSummary(
                name,
                status,
                final,
                len(assistants),
                sum(len(m.get("tool_calls") or []) for m in assistants),
                usage,
                usage.cost(prices) if prices else None,
                [_error_said(n) for n in added if n.kind == "error"],
                sum(1 for n in added if n.kind == "pause"),
                metadata,
                {name: sc.value for name, sc in latest_scores(added).items()},
            )
        )
    return Comparison(ancestor, summaries)


def _error_said(node: Node) -> Any:
    """What an error node of a compared branch says."""
    return ErrorPayload.from_node(node).said
