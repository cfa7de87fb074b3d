"""Pause deadlines: when a pause stops waiting for a human, and what it is then.

Contract:
- A pause node may carry ``expires_at`` (UTC, ISO 8601 with milliseconds, like every
  time the store records). The loop sets it from the first deadline it is given, in
  this order: the approver's ``Pause(expires_in=...)``, the tool's
  ``@tool(approval_timeout=...)``, the run's ``pause_expires=`` (CLI ``--pause-expires``);
  of several calls in one pause, the earliest deadline holds.
- ``pause_state(session, pause)`` is ``"decided"`` (a decision follows it),
  ``"expired"`` (its deadline has passed with no decision) or ``"pending"``. An expired
  pause is never a human's rejection: ``decide`` refuses it, and only
  ``reject_expired`` continues it, with a decision ``{"by": "system", "reason":
  "expired"}`` that rejects every call.
- ``clock`` is the seam every deadline is read through (seconds since the epoch,
  ``sessiontree.clock.seconds`` by default, so ``clock.frozen()`` moves deadlines too):
  tests set it instead of sleeping past a deadline.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from .clock import seconds as _seconds
from .ids import iso
from .kinds import PausePayload

if TYPE_CHECKING:
    from .bulk import ImportedNode
    from .model import Node
    from .session import Session

clock: Callable[[], float] = _seconds
"""Seconds since the epoch, for every deadline (set it in tests)."""

PauseState = Literal["pending", "expired", "decided"]
SYSTEM = "system"
"""Who a decision made by a policy, not a person, names as ``by``."""


stamp = iso
"""``seconds`` since the epoch as the store writes times (``ids.iso``)."""


def parse(text: str) -> float:
    """A time the store wrote (``stamp``'s form) as seconds since the epoch."""
    head, _, rest = text.rstrip("Z").partition(".")
    fraction = float(f"0.{rest}") if rest.isdigit() else 0.0
    return calendar.timegm(time.strptime(head, "%Y-%m-%dT%H:%M:%S")) + fraction


def deadline(expires_in: float | None) -> str | None:
    """The ``expires_at`` of a pause written now that waits ``expires_in`` seconds."""
    return None if expires_in is None else stamp(clock() + expires_in)


def expires_at(pause: Node | ImportedNode) -> str | None:
    value = PausePayload.from_node(pause).expires_at if pause.kind == "pause" else None
    return value if isinstance(value, str) else None


def is_expired(pause: Node | ImportedNode) -> bool:
    """Whether ``pause`` has a deadline and it has passed (decided or not)."""
    at = expires_at(pause)
    return at is not None and parse(at) <= clock()


def pause_state(session: Session, pause: Node) -> PauseState:
    """See the module docstring."""
    if any(n.kind == "decision" for n in session.children(pause)):
        return "decided"
    return "expired" if is_expired(pause) else "pending"


def about(pause: Node) -> dict[str, Any]:
    """The deadline fields shown with an undecided pause: ``state`` and ``expires_at``."""
    return {"state": "expired" if is_expired(pause) else "pending", "expires_at": expires_at(pause)}


def validate(expires_in: Any, what: str) -> float | None:
    """``expires_in`` as seconds (None: no deadline), or ValueError naming ``what``."""
    if expires_in is None:
        return None
    if isinstance(expires_in, bool) or not isinstance(expires_in, int | float) or not expires_in >= 0:
        raise ValueError(f"{what} must be a number of seconds, at least 0, not {expires_in!r}")
    if expires_in == float("inf"):
        raise ValueError(f"{what} must be finite; leave it out for no deadline")
    return float(expires_in)
