"""The one clock every stored time and every age is read from.

Contract: ``time_ns()`` (and ``seconds()``) is the time since the epoch that ``ids.now()``
writes, that pause deadlines are set and judged by (``deadlines.clock``), and that the
cutoffs of ``prune``'s grace period, retention's ``older_than`` ages and the trash's
``empty_trash(older_than=...)`` are measured back from. It is ``time.time_ns`` unless
``frozen()`` holds it: inside ``with frozen(at) as clock:`` the clock reads ``at`` (now, by
default) and moves only by ``clock.advance(seconds)``, so a test sets an age instead of
sleeping it. Freezing is process-wide (every thread reads it) and reentrant (the outer
clock comes back when the block ends).

Not read from here, on purpose: node ids (``ids.new_id``) keep the wall clock, so a test
that moved the clock ahead does not leave the rest of the process's ids in the future, and
waits, timeouts and retry delays use ``time.monotonic``: none of them is a stored time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_source: Callable[[], int] = time.time_ns


def time_ns() -> int:
    """Nanoseconds since the epoch: the wall clock, or the frozen one."""
    return _source()


def seconds() -> float:
    """Seconds since the epoch: the wall clock, or the frozen one."""
    return _source() / 1e9


class FrozenClock:
    """A clock that reads one time until it is told otherwise."""

    def __init__(self, at_ns: int) -> None:
        self.ns = at_ns

    def __call__(self) -> int:
        return self.ns

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass (to the millisecond, the resolution of stored times)."""
        self.ns += round(seconds * 1000) * 1_000_000

    def seconds(self) -> float:
        return self.ns / 1e9


@contextmanager
def frozen(at: float | None = None) -> Iterator[FrozenClock]:
    """Hold the clock at ``at`` seconds since the epoch (to the millisecond; default: now)
    for the block."""
    global _source
    clock = FrozenClock(time.time_ns() if at is None else round(at * 1000) * 1_000_000)
    previous, _source = _source, clock
    try:
        yield clock
    finally:
        _source = previous
