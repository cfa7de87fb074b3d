"""Decisions as a person sends them (a web form, a command line): checked strictly.

Contract:
- ``edit_arguments(value)`` returns ``value`` when it can be an edited call's
  arguments (a JSON object) and raises ``ValueError`` saying what it must be
  otherwise: the rule ``sessiontree edit-call`` applies to its ARGUMENTS, so a
  decision means the same whichever way it arrives (nothing becomes ``{}``).
- ``parse_decisions(body)`` reads the body of a decision request, ``{"decisions":
  {call id: {"action": "approve"} | {"action": "reject", "reason": text} |
  {"action": "edit", "arguments": {...}}}, "by": text}``, into call id ->
  ``Decision`` and who decided (``None`` when not said). Anything else raises
  ``ValueError`` naming the field: a missing or extra field, a reason that is
  not text, arguments that are not an object, no decision at all. Nothing is
  filled in silently (``steps.decision_from_dict``, which reads decisions back
  from the store, is lenient on purpose; this is the gate in front of it).
- No web framework is needed here: the checks are plain Python.
"""

from __future__ import annotations

from typing import Any

from .steps import Approve, Decision, Edit, Reject

_FIELDS = {"approve": {"action"}, "reject": {"action", "reason"}, "edit": {"action", "arguments"}}


def edit_arguments(value: Any) -> dict[str, Any]:
    """``value`` as an edited call's arguments, or ValueError: they must be a JSON object."""
    if not isinstance(value, dict):
        raise ValueError(f"must be a JSON object, not {_kind(value)}")
    return value


def parse_decision(call_id: str, data: Any) -> Decision:
    """One call's decision (see the module docstring); errors name ``decisions.<call id>``."""
    where = f"decisions.{call_id}"
    if not isinstance(data, dict):
        raise ValueError(f"{where} must be an object with an 'action', not {_kind(data)}")
    action = data.get("action")
    if action not in _FIELDS:
        raise ValueError(f"{where}.action must be 'approve', 'reject' or 'edit', not {action!r}")
    extra = sorted(set(data) - _FIELDS[action])
    if extra:
        raise ValueError(f"{where} has field(s) {', '.join(map(repr, extra))} that {action!r} does not take")
    if action == "approve":
        return Approve()
    if action == "reject":
        reason = data.get("reason", "")
        if not isinstance(reason, str):
            raise ValueError(f"{where}.reason must be text, not {_kind(reason)}")
        return Reject(reason)
    if "arguments" not in data:
        raise ValueError(f"{where}.arguments is missing: an edit gives the call's new arguments")
    try:
        return Edit(edit_arguments(data["arguments"]))
    except ValueError as e:
        raise ValueError(f"{where}.arguments {e}") from None


def parse_decisions(body: Any) -> tuple[dict[str, Decision], str | None]:
    """The decisions of a request body and who decided (see the module docstring)."""
    if not isinstance(body, dict):
        raise ValueError(f"the body must be a JSON object, not {_kind(body)}")
    extra = sorted(set(body) - {"decisions", "by"})
    if extra:
        raise ValueError(
            f"unknown field(s) {', '.join(map(repr, extra))}; a decision has 'decisions' and 'by'"
        )
    decisions = body.get("decisions")
    if not isinstance(decisions, dict):
        raise ValueError(f"'decisions' must be an object of call id -> decision, not {_kind(decisions)}")
    if not decisions:
        raise ValueError("'decisions' is empty: decide at least one call")
    by = body.get("by")
    if by is not None and not isinstance(by, str):
        raise ValueError(f"'by' must be text, not {_kind(by)}")
    return {call: parse_decision(call, data) for call, data in decisions.items()}, by or None


def _kind(value: Any) -> str:
    """How a JSON value is named in an error (its type, not its contents: those may be huge)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, list):
        return "an array"
    return "an object" if isinstance(value, dict) else type(value).__name__
