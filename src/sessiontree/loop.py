"""The agent loop: advance a branch one committed node at a time.

Contract:
- ``arun(store, session, branch, call=..., tools=..., approve=...)`` is an
  async generator of steps (see ``steps``); ``run`` is its sync twin, and
  ``aresume``/``resume`` continue a decided pause (see ``bridge`` for the
  naming rule and how the twins behave inside a running event loop). It reads the branch, asks
  ``plan.next_action`` what to do, does it, commits the node it produced, and
  repeats. Each append is a compare-and-set on the head this run last wrote,
  so two runs can never interleave on one branch: the later one gets
  ``BranchMoved`` before it has done anything.
- Before a batch of tool calls runs, one ``tool_start`` node records which
  calls start. A call that started and has no answer on the path was cut off
  (crash, kill, cancel); an idempotent tool is simply run again, any other
  pauses with reason ``interrupted`` for a human. Nothing runs twice silently.
  From before the ``tool_start`` until the batch's last result the run holds
  the session's tool lease (``Session.tool_lease``), which its process gives up
  by dying: that is how a worker tells a run cut off from one still running.
- ``call(messages, tools)`` may be sync or async and may return an assistant
  message dict, a ``Completion``, or an (async) iterator of text deltas ending
  with one of those (the streaming form). It never sees a message's ``raw`` field
  unless it has a ``raw_kind`` attribute naming an entry of it (``model.sendable``).
- With ``context_budget`` (tokens), before a model call whose messages would
  exceed it the branch is compacted (``Session.compact``: a ``summary`` node
  that stands for all but the last ``keep_last`` messages in the projection;
  the originals stay). Tokens are counted by ``count_tokens(messages)`` when
  given, else estimated from the usage recorded for the last model call on the
  path plus a quarter of the characters added since. The summary comes from
  ``summarize(messages)`` (sync or async), else from ``call`` itself asked to
  summarise; a failed summary ends the run like a failed model call.
- Model failures end the run with an ``error`` node and ``Final("error")``;
  ``asyncio`` cancellation records an ``error`` node and re-raises
  ``CancelledError`` (a cancel is never swallowed).
  Bad tool calls (unknown tool, bad JSON, bad arguments, a raising tool) never
  end the run: the model gets a tool message saying exactly what was wrong.
- A pause may carry a deadline (``expires_at``, see ``deadlines``): from the approver's
  ``Pause(expires_in=...)``, else the tool's ``approval_timeout``, else the run's
  ``pause_expires``. ``decide`` refuses an expired pause; ``reject_expired`` continues
  it as a rejection by the system.
- ``on_pause(node)`` (sync or async) is called with each pause this run writes, after
  its commit and before its ``Paused`` step; what it raises is logged
  (``sessiontree.notify``), never raised: a notification cannot undo or stop a pause.
  ``notify.Webhook`` is one (it only queues the delivery).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import Any

from . import bridge, compaction, deadlines
from . import recipe as recipes
from .decisions import (  # noqa: F401 (check_decisions, decide, reject_expired: their old home)
    Approve,
    Decision,
    Edit,
    Reject,
    check_decisions,
    decide,
    reject_expired,
    why_left,
)
from .errors import (
    BranchMoved,
    Conflict,
    InvalidPayload,
    ModelOutputError,
    SessionTreeError,
    ToolChanged,
    ToolFailed,
    ToolMissing,
)
from .ids import new_call_id, now
from .kinds import DecisionPayload, ErrorPayload, MarkerCall, NotePayload, PausePayload, ToolStartPayload
from .limits import Budget, Limits
from .model import Completion, Node, completion_problem, sendable
from .options import Approver, RunOptions, Summarizer, TokenCounter
from .plan import Action, next_action
from .recipe import Recipe
from .redact import Redactor
from .session import Ref, Session, summary_text
from .steps import (
    Assistant,
    Compacted,
    Final,
    FinalReason,
    Pause,
    Paused,
    Step,
    Token,
    ToolCall,
    ToolEnd,
    ToolStart,
)
from .store import Store
from .tools import Tool, ToolArgumentError, ToolContext, ToolOutput, as_tools

RAW_REPLY_LIMIT = 2000  # characters of a bad reply kept in its error node
_REDACT = Redactor({})  # no key known here: "Bearer ..." and "Authorization: ..." only

ModelCall = Callable[[list[dict[str, Any]], list[dict[str, Any]]], Any]
PauseHook = Callable[[Node], Any]
_log = logging.getLogger("sessiontree.notify")


SUMMARY_PROMPT = (
    "Summarise the conversation above for your own later use: the user's goals, what was "
    "decided and done, tool results that still matter, and open questions. Be concise; "
    "reply with the summary only."
)


async def arun(
    store: Store,
    session: Session | str,
    branch: str = "main",
    *,
    call: ModelCall,
    tools: Iterable[Tool | Callable[..., Any]] = (),
    approve: Approver | None = None,
    max_steps: int = 20,
    expect_head: Ref | None = None,
    context_budget: int | None = None,
    summarize: Summarizer | None = None,
    keep_last: int = 4,
    count_tokens: TokenCounter | None = None,
    pause_expires: float | None = None,
    on_pause: PauseHook | None = None,
    recipe: Recipe | None = None,
    limits: Limits | None = None,
    parallel_tools: int = 4,
    options: RunOptions | None = None,
) -> AsyncIterator[Step]:
    """Advance ``branch`` until the model is done, a human is needed, or a limit is hit.

    With ``approve=None`` calls to tools marked ``requires_approval`` (by
    default, the ``idempotent=False`` ones) pause for a human and every other
    call runs; an ``approve`` function replaces that rule and is asked about
    every call. With ``expect_head`` (a ``Node`` or an id) the run refuses
    (``BranchMoved``) to start unless the branch is still at that node. With
    ``context_budget`` the branch is compacted before a model call that would exceed
    it (see the module docstring). ``pause_expires`` (seconds) is the deadline of a
    pause neither the approver nor the tool gives one; ``on_pause`` is told of each pause
    written (see the module docstring). ``limits`` are this run's budgets (``Limits``:
    tokens, seconds, cost, repeated calls); ``parallel_tools`` bounds how many calls of one
    batch run at once (1: one after another). ``recipe`` is what continuing the run needs,
    recorded on its pauses and ``tool_start`` nodes (default: what ``call`` and the tools
    tell; see ``sessiontree.recipe``). ``options`` (a ``RunOptions``) gives all of
    ``approve`` ... ``parallel_tools`` at once; those keywords are then left out.
    """
    options = RunOptions.given(options, locals())  # first thing: locals() are the parameters
    budget = Budget(options.limits) if options.limits is not None else None
    session = session if isinstance(session, Session) else store.session(session)
    registry = as_tools(tools)
    specs = [t.spec() for t in registry.values()]
    head = session.branch(branch).head_id
    expected = session.expected_head(expect_head)
    if expected is not None and head != expected:
        raise BranchMoved(branch, expected, head)
    cursor = _BranchCursor(store, session, branch, session.path(head) if head else [])
    cursor.recipe = recipes.for_run(recipe, call=call, tools=registry, options=options).to_dict()
    cursor.parallel_tools, cursor.budget = options.parallel_tools, budget
    model_calls = 0
    try:
        while True:
            path = cursor.path
            action = next_action(path)
            if action.kind == "empty":
                raise Conflict(f"branch {branch!r} is empty: append a user message first")
            if action.kind == "final":
                yield Final("completed", path[-1])
                return
            if action.kind == "paused":
                yield Paused(path[-1])
                yield Final("paused", path[-1])
                return
            if action.kind == "model":
                if model_calls >= options.max_steps:
                    yield Final("max_steps", path[-1])
                    return
                over = budget.before_model_call() if budget else None
                if over is not None:
                    yield cursor.stop(*over)
                    return
                model_calls += 1
                budget_tokens = options.context_budget
                if budget_tokens is not None and _tokens(cursor, options.count_tokens) > budget_tokens:
                    try:
                        summary = await _compact(cursor, call, options.summarize, options.keep_last)
                    except SessionTreeError:
                        raise  # a lost compare-and-set: another run owns the branch now
                    except Exception as e:
                        yield cursor.fail(e, "compaction")
                        return
                    if summary is not None:
                        yield Compacted(summary)
                async for step in _model_step(cursor, call, specs):
                    yield step
                    if isinstance(step, Final):
                        return
                continue
            over = budget.before_tools(path) if budget else None
            if over is not None:
                yield cursor.stop(*over)
                return
            pause = None
            try:
                async for step in _resolve_calls(
                    cursor, action, registry, options.approve, options.pause_expires
                ):
                    if isinstance(step, Paused):
                        pause = step.node
                        await _tell(on_pause, pause)
                    yield step
            except SessionTreeError:
                raise  # a lost compare-and-set: another run owns the branch now
            except Exception as e:  # the approver failed: stop, say why, run nothing more
                yield cursor.fail(e, "approval")
                return
            if pause is not None:
                yield Final("paused", pause)
                return
    except asyncio.CancelledError:
        with contextlib.suppress(SessionTreeError):  # the branch moved meanwhile: nothing to record
            cursor.append(ErrorPayload("cancelled", "the run was cancelled").to_payload(), kind="error")
        raise


class _BranchCursor:
    """The branch a run advances and its path, read once: every later node is one this
    run appended with a compare-and-set, so the path in memory stays the path on disk."""

    def __init__(self, store: Store, session: Session, branch: str, path: list[Node]) -> None:
        self.store, self.session, self.branch, self.path = store, session, branch, path
        # The projection a model is sent, kept in step with the path.
        self.messages = compaction.project(path)
        # A decision at the head that the next append claims (see ``_resolve_calls``).
        self.claiming: Node | None = None
        # What continuing the run needs, stored on its pauses and tool_start nodes.
        self.recipe: dict[str, Any] | None = None
        self.parallel_tools = 1  # how many calls of a batch run at once
        self.budget: Budget | None = None  # what this run may still spend

    @property
    def head(self) -> str | None:
        return self.path[-1].id if self.path else None

    def append(self, payload: dict[str, Any], *, kind: str = "message", run: Any = None) -> Node:
        claiming, self.claiming = self.claiming, None
        if claiming is None:
            node = self.session.append(payload, branch=self.branch, kind=kind, run=run, expect_head=self.head)
        else:  # the node and the look at its siblings in one transaction: of two racing
            # branches, the later one sees the earlier one's node and writes nothing
            with self.store.transaction():
                node = self.session.append(
                    payload, branch=self.branch, kind=kind, run=run, expect_head=self.head
                )
                if len(self.session.children(claiming)) > 1:
                    raise _DecisionTaken
        self.path.append(node)
        if kind == "message":
            self.messages.append(node.payload)
        elif kind == "summary":
            self.messages = compaction.project(self.path)
        return node

    def stop(self, reason: FinalReason, message: str) -> Final:
        """Record that a budget ran out in a ``note`` node (see ``limits``); the Final step."""
        node = self.append(NotePayload(type="limit", limit=reason, message=message).to_payload(), kind="note")
        return Final(reason, node, message)

    def fail(self, error: Exception, during: str) -> Final:
        """Record why the run stops in an ``error`` node; the Final step that says so."""
        node = self.append(_error_payload(error, during), kind="error")
        return Final("error", node, f"{type(error).__name__}: {error}")


async def _model_step(
    cursor: _BranchCursor, call: ModelCall, specs: list[dict[str, Any]]
) -> AsyncIterator[Step]:
    """One model call: its Token steps, then Assistant, or Final("error")."""
    completion = None
    started = time.perf_counter()
    try:
        # A new list (the call may keep it) of the payloads, shared and read-only; a
        # message's "raw" goes only to a call of the kind that wrote it (``model.sendable``).
        messages = sendable(cursor.messages, getattr(call, "raw_kind", None))
        async for item in _stream(call, messages, specs):
            if not isinstance(item, str):
                completion = item
            elif item:
                yield Token(item)
        completion = _as_completion(completion)
    except Exception as e:  # CancelledError is not an Exception: arun() handles it
        yield cursor.fail(e, "model call")
        return
    if completion.latency_ms is None:  # the call did not time itself
        completion.latency_ms = round((time.perf_counter() - started) * 1000, 3)
    if cursor.budget is not None:
        cursor.budget.spend(completion)
    try:
        node = cursor.append(completion.message, run=completion)
    except InvalidPayload as e:  # NaN in the usage, a reply nested absurdly deep, ...
        yield cursor.fail(e, "model reply")
        return
    yield Assistant(node)


def _tokens(cursor: _BranchCursor, count_tokens: TokenCounter | None) -> int:
    """The tokens the next model call would send (see the module docstring)."""
    if count_tokens is not None:
        return count_tokens(cursor.messages)
    # The last model call after the last summary measured its own input and output.
    for i in range(len(cursor.path) - 1, -1, -1):
        node = cursor.path[i]
        if node.kind == "summary":
            break
        if node.run_id is None:
            continue
        usage = cursor.store.run(node.run_id).usage
        used_in = usage.get("prompt_tokens", usage.get("input_tokens"))
        used_out = usage.get("completion_tokens", usage.get("output_tokens"))
        if isinstance(used_in, int) and isinstance(used_out, int):
            # Anthropic's input_tokens leaves out what the prompt cache wrote and read.
            for cached in ("cache_creation_input_tokens", "cache_read_input_tokens"):
                if isinstance(usage.get(cached), int):
                    used_in += usage[cached]
            since = [n.payload for n in cursor.path[i + 1 :] if n.kind == "message"]
            return used_in + used_out + compaction.estimate_tokens(since)
        break
    return compaction.estimate_tokens(cursor.messages)


async def _compact(
    cursor: _BranchCursor, call: ModelCall, summarize: Summarizer | None, keep_last: int
) -> Node | None:
    """Append a summary standing for all but the last ``keep_last`` messages."""
    planned = compaction.plan(cursor.path, keep_last)
    if planned is None:
        return None
    if summarize is not None:
        result = await _maybe_await(summarize(planned.messages))
    else:  # ask the model itself
        asked = [*sendable(planned.messages), {"role": "user", "content": SUMMARY_PROMPT}]
        reply = None
        async for item in _stream(call, asked, []):
            if not isinstance(item, str):
                reply = item
        result = _as_completion(reply)
    text, completion = summary_text(result)
    if cursor.budget is not None and completion is not None:
        cursor.budget.spend(completion)
    return cursor.append(planned.payload(text), kind="summary", run=completion)


async def _tell(on_pause: PauseHook | None, pause: Node) -> None:
    """Tell ``on_pause`` of a committed pause; its failure is logged, not raised."""
    if on_pause is None:
        return
    try:
        await _maybe_await(on_pause(pause))
    except Exception:  # noqa: BLE001 - the pause is written; a hook cannot take it back
        _log.exception("on_pause failed for pause %s", pause.id)


async def _resolve_calls(
    cursor: _BranchCursor,
    action: Action,
    registry: dict[str, Tool],
    approve: Approver | None,
    pause_expires: float | None = None,
) -> AsyncIterator[Step]:
    """Answer, run or pause the unanswered calls of the last assistant message.

    A human's decision is used once. Several branches can stand at one decision (a
    fork at the pause, a rerun from the decision); the first node written under it
    claims it, and on any other branch its approvals are spent: those calls are
    asked about again (a pause, for a tool that needs approval) instead of run twice.
    """
    head = cursor.path[-1] if cursor.path else None
    decision = head if head is not None and head.kind == "decision" else None
    spent = decision is not None and bool(cursor.session.children(decision))
    cursor.claiming = None if spent else decision
    try:
        async for step in _answer_calls(
            cursor, action, registry, approve, pause_expires, spent=decision if spent else None
        ):
            yield step
    except _DecisionTaken:  # another branch claimed it between our look and our first write
        assert decision is not None
        async for step in _answer_calls(cursor, action, registry, approve, pause_expires, spent=decision):
            yield step
    finally:
        cursor.claiming = None


class _DecisionTaken(Exception):
    """The decision this run was about to act on got a node from another branch first."""


async def _answer_calls(
    cursor: _BranchCursor,
    action: Action,
    registry: dict[str, Tool],
    approve: Approver | None,
    pause_expires: float | None,
    *,
    spent: Node | None,
) -> AsyncIterator[Step]:
    """``_resolve_calls`` given whether the decision at the head was ``spent`` elsewhere."""
    to_run: list[tuple[ToolCall, str]] = []
    rejected: list[tuple[ToolCall, str]] = []
    for_human: list[tuple[ToolCall, str]] = []
    waits: list[float] = []  # the deadline, in seconds, of each call for a human that has one
    decided = action.decided
    if spent is not None:  # a rejection still holds: running nothing cannot happen twice
        decided = {k: v for k, v in decided.items() if isinstance(v, Reject)}
    for call in action.calls:
        tool = registry.get(call.name)
        # A tool this run does not know is not known to be safe to run twice either.
        default_wait = tool.approval_timeout if tool is not None else None
        default_wait = pause_expires if default_wait is None else default_wait
        if call.id in action.interrupted and (tool is None or not tool.idempotent):
            if default_wait is not None:
                waits.append(default_wait)
            for_human.append(
                (
                    call,
                    "interrupted: the tool started but no result was recorded, "
                    "and it is not safe to run twice",
                )
            )
            continue
        answer: Decision | Pause | None = decided.get(call.id)
        if answer is None:
            answer = default_approval(call, tool) if approve is None else await _maybe_await(approve(call))
            if spent is not None and call.id in action.decided and isinstance(answer, Pause):
                answer = Pause(
                    f"{answer.reason} (decision {spent.id} approved it once, "
                    "and another branch has acted on that decision)"
                )
        if isinstance(answer, Approve):
            to_run.append((call, call.arguments))
        elif isinstance(answer, Edit):
            to_run.append((call, json.dumps(answer.arguments, ensure_ascii=False)))
        elif isinstance(answer, Reject):
            rejected.append((call, answer.reason))
        elif isinstance(answer, Pause):
            wait = deadlines.validate(answer.expires_in, f"Pause(expires_in=) for {call.name}")
            wait = default_wait if wait is None else wait
            if wait is not None:
                waits.append(wait)
            for_human.append((call, answer.reason))
        else:
            raise TypeError(
                "approve() must return Approve(), Reject(reason), Pause(reason) or "
                f"Edit(arguments), not {answer!r}"
            )

    for call, reason in rejected:
        if call.id in action.cut_off:  # the model must not believe it did not happen
            what = f"the call to {call.name} started earlier and was cut off before any result"
            said = f"Rejected: {what}, so it may or may not have happened; it was not run again."
        else:
            said = f"Rejected: the call to {call.name} was not run."
        node = cursor.append({"role": "tool", "tool_call_id": call.id, "content": f"{said} {reason}".strip()})
        yield ToolEnd(call, node, ok=False)
    if to_run:
        # Held from before the marker until the last result: while it is, a worker does not
        # take this branch for a run cut off inside a tool (see ``worker.cut_off``).
        with cursor.session.tool_lease():
            started = ToolStartPayload(tuple(MarkerCall(c.id, c.name, a) for c, a in to_run), cursor.recipe)
            marker = cursor.append(started.to_payload(), kind="tool_start")
            for call, _ in to_run:
                yield ToolStart(call, marker)
            async for call, content, ok, raw in _run_batch(registry, to_run, cursor):
                message = {"role": "tool", "tool_call_id": call.id, "content": content}
                node = cursor.append({**message, "raw": raw} if raw else message)
                yield ToolEnd(call, node, ok)
    if for_human:
        record = PausePayload(
            "; ".join(sorted({r for _, r in for_human if r})) or "approval needed",
            action.assistant.id if action.assistant else None,
            tuple(MarkerCall(c.id, c.name, c.arguments, r) for c, r in for_human),
            # What ``decide`` checks an edit of each call against (``check_decisions``).
            {c.name: registry[c.name].parameters for c, _ in for_human if c.name in registry},
            # of several deadlines, the earliest: a human must answer the whole pause
            deadlines.deadline(min(waits)) if waits else None,
            cursor.recipe,
        )
        pause = cursor.append(record.to_payload(), kind="pause")
        yield Paused(pause)


async def _run_batch(
    registry: dict[str, Tool], to_run: list[tuple[ToolCall, str]], cursor: _BranchCursor
) -> AsyncIterator[tuple[ToolCall, str, bool, dict[str, Any] | None]]:
    """Each call's (call, content, ok, raw), in call order. Calls run concurrently, at most
    ``cursor.parallel_tools`` at once, except that a tool marked ``parallel=False`` runs
    alone: the calls before it finish first and the calls after it wait for it. A result
    is yielded (and so committed) as soon as it and every result before it are in."""
    bound = asyncio.Semaphore(cursor.parallel_tools)

    async def one(call: ToolCall, arguments: str) -> tuple[str, bool, dict[str, Any] | None]:
        async with bound:
            return await _execute(registry, call, arguments, cursor)

    groups: list[list[tuple[ToolCall, str]]] = []
    shared = False  # whether the last group takes more calls
    for item in to_run:
        tool = registry.get(item[0].name)
        alone = cursor.parallel_tools == 1 or (tool is not None and not tool.parallel)
        if alone or not shared:
            groups.append([item])
            shared = not alone
        else:
            groups[-1].append(item)
    for group in groups:
        tasks = [asyncio.ensure_future(one(call, arguments)) for call, arguments in group]
        try:
            for (call, _), task in zip(group, tasks, strict=True):
                content, ok, raw = await task
                yield call, content, ok, raw
        finally:  # cancelled, or the consumer stopped: no call outlives its batch
            for task in tasks:
                task.cancel()


async def _execute(
    registry: dict[str, Tool], call: ToolCall, arguments: str, cursor: _BranchCursor
) -> tuple[str, bool, dict[str, Any] | None]:
    """Run one call; every failure becomes text the model can act on. The third item is
    what the tool kept beside its text (``ToolOutput.raw``, ``ToolFailed.raw``), if anything."""
    tool = registry.get(call.name)
    if tool is None:
        available = ", ".join(sorted(registry)) or "none"
        return f"Error: there is no tool named {call.name!r}. Available tools: {available}.", False, None
    try:
        parsed = tool.parse(arguments)
    except ToolArgumentError as e:
        return f"Error: invalid arguments for {call.name}: {e}", False, None
    try:
        result = await tool.invoke(parsed, ToolContext(cursor.session, cursor.branch, call.id, cursor.store))
    except Exception as e:
        kept = e.raw if isinstance(e, ToolFailed) and isinstance(e.raw, dict) else None
        return f"Error: {call.name} raised {type(e).__name__}: {e}", False, kept
    if isinstance(result, ToolOutput):
        return result.content, True, result.raw
    if isinstance(result, str):
        return result, True, None
    try:
        return json.dumps(result, ensure_ascii=False, default=str), True, None
    except (ValueError, TypeError, RecursionError) as e:  # a circular structure, say
        return f"Error: {call.name} returned a value that cannot be sent as JSON ({e})", False, None


async def _stream(
    call: ModelCall, messages: list[dict[str, Any]], specs: list[dict[str, Any]]
) -> AsyncIterator[Any]:
    """Whatever form ``call`` takes, produce its text deltas and then its reply."""
    result = call(messages, specs)
    if inspect.isawaitable(result):
        result = await result
    if hasattr(result, "__aiter__"):
        async for item in result:
            yield item
    elif isinstance(result, Iterator):
        for item in result:
            yield item
    else:
        yield result


def _as_completion(reply: Any) -> Completion:
    """Check a model's reply and normalise its tool calls (ids, JSON text arguments).

    What cannot be stored as an assistant message and its run (see
    ``model.completion_problem``) raises ``ModelOutputError`` with the raw reply
    attached, cut short and redacted: the loop records it in an error node.
    """
    completion = reply if isinstance(reply, Completion) else Completion(reply)
    message = completion.message
    if not isinstance(message, dict) or message.get("role", "assistant") != "assistant":
        raise _bad_reply(reply, f"the model returned {str(message)[:200]!r}, not an assistant message")
    original = message
    message = {**message, "role": "assistant"}
    message.setdefault("content", None)
    raw_calls = message.get("tool_calls")
    calls = []
    for raw in raw_calls if isinstance(raw_calls, list) else []:
        function = raw.get("function") if isinstance(raw, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise _bad_reply(reply, f"the model returned a malformed tool call: {str(raw)[:200]}")
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments if arguments is not None else {})
        calls.append(
            {
                "id": raw.get("id") or new_call_id(),
                "type": "function",
                "function": {"name": function["name"], "arguments": arguments},
            }
        )
    if calls:
        message["tool_calls"] = calls
    elif not raw_calls:  # None, [], "": no calls; anything else is left for the check below
        message.pop("tool_calls", None)
    completion.message = message
    if (problem := completion_problem(completion)) is not None:
        completion.message = original
        raise _bad_reply(completion, f"the model's reply cannot be stored: {problem}")
    return completion


def _bad_reply(reply: Any, problem: str) -> ModelOutputError:
    """The error for a reply that is not an assistant message, the reply attached as text."""
    data = dict(vars(reply)) if isinstance(reply, Completion) else reply
    try:
        text = json.dumps(data, ensure_ascii=False, default=repr)
    except (TypeError, ValueError, RecursionError):
        text = repr(data)
    return ModelOutputError(problem, raw=_REDACT.clip(text, RAW_REPLY_LIMIT))


def _error_payload(error: BaseException, during: str) -> dict[str, Any]:
    raw = getattr(error, "raw", None)
    return ErrorPayload(
        type(error).__name__,
        str(error),
        during=during,
        at=now(),
        status=getattr(error, "status", None),
        raw=raw[:RAW_REPLY_LIMIT] if isinstance(raw, str) else None,
    ).to_payload()


def default_approval(call: ToolCall, tool: Tool | None) -> Approve | Pause:
    """The rule with no approver: pause calls to tools that require approval, run the rest."""
    if tool is not None and tool.requires_approval:
        return Pause(f"{call.name} requires approval", expires_in=tool.approval_timeout)
    return Approve()


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


run = bridge.iterating(arun)


# -- resuming a decided pause ------------------------------------------------


def aresume(store: Store, pause: Ref, **kwargs: Any) -> AsyncIterator[Step]:
    """Run the branch a decided pause belongs to (``arun`` keyword arguments apply): of
    several at its decision, the oldest.

    Raises ``Conflict`` when the node is not a pause, when the pause has no decision
    yet, when it was already resumed (a node follows the decision, on any branch), or
    when no branch stands at its decision any more (moved back, or deleted);
    ``ToolMissing`` when an approved or edited call's tool is not among ``tools``; and
    ``ToolChanged`` when such a tool's JSON schema is not the one the pause's recipe
    recorded (``accept_changed_tools=True`` runs it as it is now). Each is raised before
    anything is written, so the decision stays usable.
    """
    accept_changed = bool(kwargs.pop("accept_changed_tools", False))
    pause = store.node(pause)
    if pause.kind != "pause":
        raise Conflict(f"node {pause.id} is a {pause.kind} node, not a pause")
    owner = framework_of(pause)
    if owner is not None:
        raise Conflict(
            f"pause {pause.id} belongs to a run of {owner}: continue it with that framework's resume"
            " (docs/integrations.md); nothing was run"
        )
    session = store.session(pause.session_id)
    decision = next((n for n in session.children(pause) if n.kind == "decision"), None)
    if decision is None and deadlines.is_expired(pause):
        raise Conflict(
            f"pause {pause.id} expired at {deadlines.expires_at(pause)} with no decision; nothing was run"
            " (a worker with --on-expiry reject continues it as a rejection)"
        )
    if decision is None:
        raise Conflict(f"pause {pause.id} has no decision yet: decide it first")
    if session.children(decision):  # other branches still there stay for `run`
        raise Conflict(f"pause {pause.id} was already resumed: its decision {decision.id} has been acted on")
    branches = session.branches_at(decision)
    if not branches:
        raise Conflict(
            f"pause {pause.id}: no branch stands at its decision {decision.id} any more"
            f" ({why_left(store, decision)}); nothing was run"
        )
    _require_tools(pause, decision, as_tools(kwargs.get("tools") or []), accept_changed)
    if len(branches) > 1:  # forks made at the pause are younger than the branch that paused
        branches.sort(key=lambda name: session.branch(name).created_at)
    return arun(store, session, branches[0], expect_head=decision.id, **kwargs)


def framework_of(pause: Node) -> str | None:
    """The framework whose run a pause belongs to (an adapter keeps that run's state in the
    pause's never-sent ``raw``, under the framework's name), or None for the loop's own
    pauses, which carry no ``raw``. Human decisions work the same for both; only the
    framework's own resume can carry the first kind on."""
    return PausePayload.from_node(pause).framework if pause.kind == "pause" else None


def _require_tools(pause: Node, decision: Node, tools: dict[str, Tool], accept_changed: bool = False) -> None:
    """``ToolMissing`` when a call the decision lets run (approved or edited) has no tool
    among ``tools``, ``ToolChanged`` when its schema is not the recorded one: checked
    before the run writes its ``tool_start``, which would use the decision up on a call
    that can only fail, or that a human approved for another tool."""
    actions = DecisionPayload.from_node(decision).decisions
    recorded = recipes.of(pause)
    hashes = recorded.schema_hashes if recorded is not None else {}
    for call in PausePayload.from_node(pause).calls:
        action = actions.get(call.id)
        if action is None or action.action not in ("approve", "edit"):
            continue
        name = call.name
        tool = tools.get(name) if isinstance(name, str) else None
        if tool is None:
            raise ToolMissing(
                f"pause {pause.id}: the decided call {call.id} needs the tool {name!r},"
                " which this run was not given; nothing was run and the decision stays usable"
                " (give the tool: tools=..., or --tools on the command line)"
            )
        expected = hashes.get(name) if isinstance(name, str) else None
        if expected is not None and not accept_changed and recipes.schema_hash(tool) != expected:
            raise ToolChanged(
                f"pause {pause.id}: the tool {name!r} of the decided call {call.id} has changed"
                " since the pause (its JSON schema is not the one recorded); nothing was run and the"
                " decision stays usable (give the tool as it was, or accept it as it is now:"
                " accept_changed_tools=True, or --accept-changed-tools on the command line)"
            )


resume = bridge.iterating(aresume)
