"""Workers: carry on decided pauses, from any process on any machine.

Contract:
- ``awork(store, call=..., tools=...)`` finds every decided pause no run has
  carried on yet (its decision is a branch head with nothing after it), resumes it to its end,
  and waits for the next decision: ``LISTEN/NOTIFY`` on PostgreSQL (the signal
  only wakes it; it re-reads what is resumable, and a poll every ``poll``
  seconds covers a missed signal), a plain poll on SQLite. It yields
  ``Resuming(pause, session)`` before each run's steps. ``until_idle=True``
  returns once a look finds nothing it can carry on instead of waiting. ``work`` is
  its sync twin.
- It also carries on the runs ``cut_off`` lists: cut off inside a tool (their
  process died there), yielding ``Recovering(session, branch, head)`` first. The
  loop's own rule then applies: a call not safe to run twice becomes an
  ``interrupted`` pause, which ``pending`` and the inbox show a human; an
  idempotent one runs again.
- At most once per pause, with any number of workers: every run's first write
  after a decision is a compare-and-set on the decision (the ``tool_start``
  marker, or a rejection), committed before any tool runs. The worker that
  loses it gets ``BranchMoved`` (or is told the pause was resumed) and, having run
  nothing, looks again at once without that item: what it listed is stale, since
  another worker is at work. From then on it takes what it finds in a random order,
  so that workers looking at once start on different items (a worker that never
  lost takes them oldest first).
- A pause whose run fails outside the loop's own error handling (the model
  adapter raising, say) is reported as a ``Final("error")`` step and not
  retried by this worker; a decision that stays unresumed stays visible to
  ``resumable`` for another worker, or a human, to look at.
- It never spins: each look again after a ``Conflict`` leaves out one more item (the
  ones lost stay left out until the next wait), and a look that finds nothing it can
  carry on is followed by a wait of ``poll`` seconds, or until a signal. A server that cannot be reached
  (``Unavailable``: a restart, a failover) is waited for the same way: the worker
  looks again after the wait, and a dropped ``LISTEN`` connection is opened again.
- With ``on_expiry="reject"`` each look first continues every expired pause (its
  deadline passed with no decision, see ``deadlines``) as a rejection by the system
  (``loop.reject_expired``: a decision ``by: "system"``, ``reason: "expired"``), which it
  then resumes like any decided pause; a deadline is noticed within ``poll`` seconds.
  The default, ``"keep"``, leaves an expired pause as it is: ``expired``, for a human
  to see, and never resumed.
- Each pause continues with the options its own run recorded when ``prepare`` is given:
  ``prepare(recipe)`` is called with the recipe recorded where the item stopped (the
  pause's, or the latest on a cut-off run's path; None when there is none) and returns
  ``arun`` keyword arguments that go over ``run_options`` for that item. What it raises
  is reported for that item, like a refusal (``ToolMissing``, ``ToolChanged``), and the
  worker goes on with the others.
- Stopping (Ctrl-C, or closing the iterator) takes at most ``WAIT_SLICE`` seconds
  while it waits, whatever ``poll`` is. ``stop`` (a ``threading.Event``) stops it
  the same way from another thread, between two items: a run under way is finished.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from . import bridge, deadlines
from . import recipe as recipes
from .errors import Busy, Conflict, Unavailable
from .loop import aresume, arun, framework_of, reject_expired
from .plan import next_action
from .steps import Final, Recovering, Resuming, Step
from .storage.rows import ResumablePause
from .store import Store

DEFAULT_POLL = 5.0
"""Seconds between two looks for decisions when no signal came (SQLite: the poll)."""
WAIT_SLICE = 0.25
"""Longest single wait in a thread: a stopped worker (Ctrl-C) is gone within this, not
after a whole ``poll`` (asyncio waits for a running thread before it shuts down)."""

Item = Resuming | Recovering


def cut_off(store: Store) -> list[Recovering]:
    """Runs cut off inside a tool, oldest first: a branch whose head is a ``tool_start`` or
    a tool result, with a call started and never answered (no human decision since), in a
    session whose tool lease no live run holds (``Session.tool_lease``), outside the trash.

    The heads are read before the leases: a run holds its lease before it writes its
    ``tool_start``, so a head seen while its run lives is seen with the lease held; a run
    that ended in between has moved its branch on, and carrying on from the head seen
    loses the compare-and-set.
    """
    heads = store.storage.tool_heads()
    free = store.storage.unleased(sorted({head.session_key for head in heads})) if heads else set()
    found = []
    for head in heads:
        if (
            head.session_key in free
            and next_action(store.session(head.session_id).path(head.head_id)).interrupted
        ):
            found.append(Recovering(head.session_id, head.branch, head.head_id))
    return found


def expire_pauses(store: Store) -> list[str]:
    """Continue every expired pause as a rejection by the system; the pause ids done
    (one another process continued first, or a human decided, is skipped)."""
    done = []
    for pause in store.pending():
        if deadlines.is_expired(pause):
            try:
                reject_expired(store, pause.id)
            except Conflict:
                continue
            done.append(pause.id)
    return done


def _look(store: Store) -> list[Item]:
    """What can be carried on now: decided pauses, then runs cut off inside a tool."""
    decided: list[Item] = [
        Resuming(decided.pause_id, decided.session_id)
        # _make: a stand-in for the backend (the worker's tests have one) may give plain pairs.
        for decided in map(ResumablePause._make, store.storage.resumable())
    ]
    return decided + cut_off(store)


def _foreign(store: Store, item: Item) -> bool:
    """A framework's pause, which only its own resume carries on (read when it is the next
    to try, not at every look: with many workers a look is repeated often)."""
    return isinstance(item, Resuming) and framework_of(store.node(item.pause_id)) is not None


Prepare = Callable[[recipes.Recipe | None], dict[str, Any]]


def recipe_at(store: Store, item: Item) -> recipes.Recipe | None:
    """The recipe recorded where ``item`` stopped: its pause's, or a cut-off run's latest."""
    if isinstance(item, Resuming):
        return recipes.of(store.node(item.pause_id))
    return recipes.recorded(store.session(item.session_id).path(item.head_id))


def _steps(
    store: Store, item: Item, run_options: dict[str, Any], prepare: Prepare | None
) -> AsyncIterator[Step]:
    options = dict(run_options)
    if prepare is not None:
        options.update(prepare(recipe_at(store, item)))
    if isinstance(item, Resuming):
        return aresume(store, item.pause_id, **options)
    options.pop("accept_changed_tools", None)  # no decision here: nothing was approved for a tool
    return arun(store, item.session_id, item.branch, expect_head=item.head_id, **options)


async def awork(
    store: Store,
    *,
    poll: float = DEFAULT_POLL,
    until_idle: bool = False,
    on_expiry: str = "keep",
    prepare: Prepare | None = None,
    stop: threading.Event | None = None,
    **run_options: Any,
) -> AsyncIterator[Step | Resuming | Recovering]:
    """Resume decided pauses as they come (``arun`` keyword arguments apply: ``call``,
    ``tools``, ``approve``, ``max_steps``, ``pause_expires``, ``on_pause``; and
    ``aresume``'s ``accept_changed_tools``). ``prepare`` and ``stop``: see the module
    docstring."""
    if on_expiry not in ("keep", "reject"):
        raise ValueError(f"on_expiry must be 'keep' or 'reject', not {on_expiry!r}")
    failed: set[Item] = set()  # raised: reported once, not retried by this worker
    foreign: set[Item] = set()  # a framework's pauses
    lost: set[Item] = set()  # another worker's since the last wait (Conflict)
    contended = False  # another worker has been seen: take items in a random order
    if not until_idle:  # start listening before the first look, so no decision slips between
        await asyncio.to_thread(store.storage.wait_for_decisions, 0)
    while stop is None or not stop.is_set():
        ran = stale = False
        try:
            if on_expiry == "reject":
                expire_pauses(store)
            left_out = failed | foreign | lost
            items = [item for item in _look(store) if item not in left_out]
        except (Unavailable, Busy):
            items = []  # the server is away or busy: look again after the wait
        if contended:
            random.shuffle(items)
        for item in items:
            if stop is not None and stop.is_set():
                return
            started = False
            try:
                if _foreign(store, item):
                    foreign.add(item)
                    continue
                async for step in _steps(store, item, run_options, prepare):
                    if not started:
                        yield item
                        started = ran = True
                    yield step
            except Conflict:  # another worker carried it on first (BranchMoved), or just did
                lost.add(item)
                contended = stale = True
                break
            except (Unavailable, Busy):
                break  # the server is away: wait, then look again (nothing is marked failed)
            except Exception as e:  # noqa: BLE001 - reported, and the other pauses go on
                failed.add(item)
                if not started:
                    yield item
                yield Final("error", None, f"{type(e).__name__}: {e}")
                ran = True
        if ran or stale:
            continue
        if until_idle:
            return
        lost.clear()
        await _wait_for_decisions(store, poll, stop)


async def _wait_for_decisions(store: Store, poll: float, stop: threading.Event | None = None) -> None:
    """Wait ``poll`` seconds, or less when a signal comes or ``stop`` is set, in short slices."""
    deadline = time.monotonic() + poll
    while (left := deadline - time.monotonic()) > 0 and (stop is None or not stop.is_set()):
        if await asyncio.to_thread(store.storage.wait_for_decisions, min(left, WAIT_SLICE)):
            return


def work(store: Store, **options: Any) -> Iterator[Step | Resuming | Recovering]:
    """``awork`` for callers without asyncio: the same steps, as a plain iterator."""
    return bridge.iterate(awork(store, **options))
