"""UUIDv7 identifiers and UTC timestamps.

Contract: ``new_id()`` returns a canonical lower-case UUIDv7 string (RFC 9562).
Ids made by one process are strictly increasing, so sorting by id sorts by
creation order even within one millisecond; ids from different processes or
files never collide in practice (74 random bits per millisecond).
"""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime

_lock = threading.Lock()
_last = 0  # the last counter issued: 48 bits of milliseconds, then 74 random bits


def new_id() -> str:
    """A new UUIDv7, monotonic within this process."""
    global _last
    with _lock:
        counter = (time.time_ns() // 1_000_000) << 74 | int.from_bytes(os.urandom(10)) >> 6
        # Within one millisecond (or after a clock step back) count up from the
        # last id instead of trusting the clock, so ids stay ordered.
        _last = counter = max(counter, _last + 1)
    ms, rand = counter >> 74, counter & ((1 << 74) - 1)
    value = ms << 80 | 0x7 << 76 | (rand >> 62) << 64 | 0b10 << 62 | (rand & ((1 << 62) - 1))
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def now() -> str:
    """The current UTC time as ISO 8601 with milliseconds, e.g. ``2026-11-30T09:14:15.123Z``."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
