"""UUIDv7 identifiers and UTC timestamps.

Contract: ``new_id()`` returns a canonical lower-case UUIDv7 string (RFC 9562).
Ids made by one process are strictly increasing, so sorting by id sorts by
creation order even within one millisecond; ids from different processes or
files never collide in practice (62 random bits in each); they read the wall clock.
``now()`` is the time the store records, read from ``clock`` (which a test can freeze).
``is_stamp`` says whether a text is a time in exactly the form ``now()`` writes.

``iso(t)`` is the one formatter of the store's time text (``now()``, deadlines, retention
and prune cutoffs, imported times): SQL compares these as TEXT, so every writer must
produce the same bytes. ``new_call_id()`` is the one recipe for a tool-call id made up
for a call that came without one.
"""

from __future__ import annotations

import os
import random
import re
import threading
import time

from . import clock

_lock = threading.Lock()
_last_ms = 0
_counter = 0  # rand_a: 12 bits, counts ids within one millisecond
# Seeded from os.urandom, and again in every forked child, so two processes never
# share a sequence. Ids need uniqueness, not secrecy; this saves two system calls an id.
_random = random.Random(os.urandom(32))
os.register_at_fork(after_in_child=lambda: _random.seed(os.urandom(32)))


def new_id() -> str:
    """A new UUIDv7, monotonic within this process.

    Layout (RFC 9562, method 1): 48 bits of Unix milliseconds, a 12-bit counter
    that starts at a random value below 2048 each millisecond, 62 random bits.
    Ids of one millisecond therefore differ early (in the counter), which keeps
    the unique prefixes the CLI shows short.
    """
    with _lock:
        return _next(time.time_ns() // 1_000_000)


def new_ids(count: int) -> list[str]:
    """``count`` new UUIDv7s, increasing, as ``count`` calls of ``new_id`` would make them,
    with one lock and one clock read for all (a batch append names many nodes at once)."""
    with _lock:
        ms = time.time_ns() // 1_000_000
        return [_next(ms) for _ in range(count)]


_prefix_ms, _prefix = -1, ""  # the last millisecond seen, formatted as the id's first 14 characters


def _next(ms: int) -> str:
    """The next id at ``ms`` milliseconds (or just after the last one); hold ``_lock``."""
    global _last_ms, _counter, _prefix_ms, _prefix
    if ms > _last_ms:
        _last_ms, _counter = ms, _random.getrandbits(11)
    else:  # same millisecond, or the clock stepped back: count on
        _counter += 1
        if _counter > 0xFFF:  # 4096 ids in one millisecond: borrow the next one
            _last_ms, _counter = _last_ms + 1, 0
    if _last_ms != _prefix_ms:
        _prefix_ms, _prefix = _last_ms, f"{_last_ms >> 16:08x}-{_last_ms & 0xFFFF:04x}-"
    # version 7 and the counter, then variant 0b10 and 62 random bits
    h = f"{(0x7000 | _counter) << 64 | 0b10 << 62 | _random.getrandbits(62):020x}"
    return f"{_prefix}{h[:4]}-{h[4:8]}-{h[8:]}"


def _date(seconds: int) -> str:
    """Whole UTC seconds since the epoch as ``YYYY-MM-DDTHH:MM:SS`` (four-digit year)."""
    t = time.gmtime(seconds)
    return f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}T{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}"


def iso(t: float) -> str:
    """``t`` seconds since the epoch as the store writes times, to the nearest millisecond:
    ``2026-11-30T09:14:15.123Z``."""
    seconds, ms = divmod(round(t * 1000), 1000)
    return f"{_date(seconds)}.{ms:03d}Z"


def new_call_id(of: str | None = None) -> str:
    """An id for a tool call that came without one: ``call_`` and 16 hex digits of a new
    UUIDv7; or, for a call an import makes up for the node ``of``, 24 hex digits of that
    node's id, so importing one file twice makes the same ids."""
    if of is not None:
        return f"call_{of.replace('-', '')[:24]}"
    return f"call_{new_id().replace('-', '')[-16:]}"


_second: tuple[int, str] = (-1, "")
"""The last second formatted, and its text: one tuple, read once, so a thread never pairs
one second's text with another's (no lock: replacing the tuple is atomic)."""


def now() -> str:
    """The current UTC time as ISO 8601 with milliseconds, e.g. ``2026-11-30T09:14:15.123Z``
    (read from ``clock``, so a test can set it)."""
    global _second
    seconds, ms = divmod(clock.time_ns() // 1_000_000, 1000)
    cached = _second
    if cached[0] != seconds:  # formatting the date is most of the cost: once a second
        cached = _second = (seconds, _date(seconds))
    return f"{cached[1]}.{ms:03d}Z"


_STAMP = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z")


def is_stamp(text: object) -> bool:
    """Whether ``text`` is a real UTC time written as ``now()`` writes it (stored times
    compare as text, so one in another form would sort wrongly)."""
    if not isinstance(text, str) or _STAMP.fullmatch(text) is None:
        return False
    try:
        time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S")
    except ValueError:  # the shape, but no such day or hour (2026-02-30, 25:00)
        return False
    return True
