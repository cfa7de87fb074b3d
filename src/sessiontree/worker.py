"""Workers: carry on decided pauses, from any process on any machine.

Contract:
- ``awork(store, call=..., tools=...)`` finds every decided pause no run has
  carried on yet (its decision is a branch head with nothing after it), resumes it to its end,
  and waits for the next decision: ``LISTEN/NOTIFY`` on PostgreSQL (the signal
  only wakes it; it re-reads what is resumable, and a poll every ``poll``
  seconds covers a missed signal), a plain poll on SQLite. It yields
  ``Resuming(pause, session)`` before each run's steps. ``until_idle=True``
  returns once nothing is left instead of waiting. ``work`` is its sync twin.
- At most once per pause, with any number of workers: every run's first write
  after a decision is a compare-and-set on the decision (the ``tool_start``
  marker, or a rejection), committed before any tool runs. The worker that
  loses it gets ``BranchMoved`` and moves on, having run nothing.
- A pause whose run fails outside the loop's own error handling (the model
  adapter raising, say) is reported as a ``Final("error")`` step and not
  retried by this worker; a decision that stays unresumed stays visible to
  ``resumable`` for another worker, or a human, to look at.
- Stopping (Ctrl-C, or closing the iterator) takes at most ``WAIT_SLICE`` seconds
  while it waits, whatever ``poll`` is.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from . import bridge
from .errors import Conflict
from .loop import aresume
from .steps import Final, Resuming, Step
from .store import Store

DEFAULT_POLL = 5.0
"""Seconds between two looks for decisions when no signal came (SQLite: the poll)."""
WAIT_SLICE = 0.25
"""Longest single wait in a thread: a stopped worker (Ctrl-C) is gone within this, not
after a whole ``poll`` (asyncio waits for a running thread before it shuts down)."""


async def awork(
    store: Store,
    *,
    poll: float = DEFAULT_POLL,
    until_idle: bool = False,
    **run_options: Any,
) -> AsyncIterator[Step | Resuming]:
    """Resume decided pauses as they come (``arun`` keyword arguments apply: ``call``,
    ``tools``, ``approve``, ``max_steps``)."""
    failed: set[str] = set()
    if not until_idle:  # start listening before the first look, so no decision slips between
        await asyncio.to_thread(store.storage.wait_for_decisions, 0)
    while True:
        found = False
        for pause_id, session_id in store.storage.resumable():
            if pause_id in failed:
                continue
            found = True
            started = False
            try:
                async for step in aresume(store, pause_id, **run_options):
                    if not started:
                        yield Resuming(pause_id, session_id)
                        started = True
                    yield step
            except Conflict:
                continue  # another worker carried it on first (BranchMoved), or just did
            except Exception as e:  # noqa: BLE001 - reported, and the other pauses go on
                failed.add(pause_id)
                if not started:
                    yield Resuming(pause_id, session_id)
                yield Final("error", None, f"{type(e).__name__}: {e}")
        if until_idle and not found:
            return
        if not found:
            await _wait_for_decisions(store, poll)


async def _wait_for_decisions(store: Store, poll: float) -> None:
    """Wait ``poll`` seconds, or less when a signal comes, in short slices."""
    deadline = time.monotonic() + poll
    while (left := deadline - time.monotonic()) > 0:
        if await asyncio.to_thread(store.storage.wait_for_decisions, min(left, WAIT_SLICE)):
            return


def work(store: Store, **options: Any) -> Iterator[Step | Resuming]:
    """``awork`` for callers without asyncio: the same steps, as a plain iterator."""
    return bridge.iterate(awork(store, **options))
