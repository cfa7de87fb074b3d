"""What bounds the retries of one call: its attempts and deadline, and the server's ``Retry-After``.

Contract: ``Budget(started, deadline)`` counts the failed attempts of one call and
says how much of its deadline is left; ``retry_after(headers)`` is the wait the
server asked for, in seconds, or None.
"""

from __future__ import annotations

import contextlib
import email.utils
import time
from dataclasses import dataclass

import httpx


@dataclass
class Budget:
    """Attempts made so far for one call, when it started and how long it may take."""

    started: float
    deadline: float
    attempts: int = 0

    def remaining(self) -> float:
        return self.deadline - (time.monotonic() - self.started)


def retry_after(headers: httpx.Headers) -> float | None:
    """Seconds the server asked us to wait: OpenAI's retry-after-ms, else Retry-After
    in seconds or as an HTTP-date; None when absent or unreadable."""
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        if (value := headers.get(name)) is None:
            continue
        with contextlib.suppress(ValueError):
            return max(0.0, float(value) / scale)
        with contextlib.suppress(TypeError, ValueError):
            return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
    return None
