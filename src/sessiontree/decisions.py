"""Human decisions on a pause: their types, their stored form, reading them from a person,
checking them against the pause, and writing them.

Contract:
- ``Approve()``, ``Reject(reason)`` and ``Edit(arguments)`` are the ``Decision`` a human
  (or an approver, for the first two) gives one call. ``to_entry``/``from_entry`` turn one
  into its stored ``kinds.DecisionEntry`` and back; ``decision_to_dict`` and
  ``decision_from_dict`` are the same as JSON objects. Reading back from the store is
  lenient (a reject without a reason reads as ``Reject("")``).
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
  filled in silently: this is the strict gate in front of the lenient reading above.
- ``check_decisions(pause, decisions)`` is what ``decide`` asks before it writes
  anything; ``decide`` writes a human's decision node under the pause (one decision a
  pause, never on an expired one); ``reject_expired`` writes the system's rejection of
  an expired pause. A decision node's parent is its pause: ``Session.append_many``,
  the import checks and the schema hold that too.
- No web framework is needed here: the checks are plain Python.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import deadlines, schema_check
from .errors import Conflict, ToolArgumentError
from .ids import new_id, now
from .kinds import DecisionEntry, DecisionPayload, PausePayload
from .model import Node, encode_payload

if TYPE_CHECKING:
    from .session import Ref
    from .store import Store


@dataclass(frozen=True)
class Approve:
    """Run the call as the model asked."""


@dataclass(frozen=True)
class Reject:
    """Do not run the call; the model reads ``reason`` in a tool message."""

    reason: str = ""


@dataclass(frozen=True)
class Edit:
    """(Human decisions only) run the call with these arguments instead."""

    arguments: dict[str, Any] = field(default_factory=dict)


Decision = Approve | Reject | Edit


def to_entry(decision: Decision) -> DecisionEntry:
    """The stored form of one call's decision."""
    if isinstance(decision, Approve):
        return DecisionEntry("approve")
    if isinstance(decision, Reject):
        return DecisionEntry("reject", reason=decision.reason)
    if isinstance(decision, Edit):
        return DecisionEntry("edit", arguments=decision.arguments)
    raise TypeError(f"a decision is Approve(), Reject(reason) or Edit(arguments), not {decision!r}")


def from_entry(entry: DecisionEntry) -> Decision:
    """A stored decision as a ``Decision`` (leniently: see the module docstring)."""
    if entry.action == "approve":
        return Approve()
    if entry.action == "reject":
        return Reject(entry.reason if entry.reason is not None else "")
    if entry.action == "edit":
        return Edit(entry.arguments or {})
    raise ValueError(f"unknown decision action {entry.action!r}")


def decision_to_dict(decision: Decision) -> dict[str, Any]:
    return to_entry(decision).to_payload()


def decision_from_dict(data: dict[str, Any]) -> Decision:
    action = data.get("action")
    if action not in ("approve", "reject", "edit"):
        raise ValueError(f"unknown decision action {action!r}")
    return from_entry(DecisionEntry.from_payload(data))


def decided(node: Node) -> dict[str, Decision]:
    """Call id -> ``Decision`` of a decision node."""
    return {k: from_entry(v) for k, v in DecisionPayload.from_node(node).decisions.items()}


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


# -- checking and writing -------------------------------------------------------


def check_decisions(pause: Node, decisions: dict[str, Decision]) -> None:
    """What ``decide`` asks of a decision before it writes anything: ``Conflict`` unless
    ``pause`` is a pause and ``decisions`` names at least one of its calls and nothing else;
    ``ToolArgumentError`` when an ``Edit``'s arguments do not fit the schema the pause
    recorded for the call's tool (the check the run would make: ``schema_check``). A pause
    written before pauses recorded schemas (no ``schemas`` key) has its edits checked on
    resume only, as then."""
    if pause.kind != "pause":
        raise Conflict(f"node {pause.id} is a {pause.kind} node, not a pause")
    record = PausePayload.from_node(pause)
    known = record.call_ids
    unknown = sorted(set(decisions) - set(known))
    if unknown:
        raise Conflict(
            f"pause {pause.id} has no call(s) {', '.join(unknown)}; its calls are {', '.join(known)}"
        )
    if not decisions:
        raise Conflict(f"no decision given for pause {pause.id}; its calls are {', '.join(known)}")
    for call in record.calls:
        edit = decisions.get(call.id)
        schema = record.schema_of(call.name)
        if isinstance(edit, Edit) and schema is not None:
            found = schema_check.problems(edit.arguments, schema, "arguments")
            if found:
                what = f"edit of call {call.id} ({call.name})"
                raise ToolArgumentError(f"{what}: {'; '.join(found)} (nothing was written)")


def decide(store: Store, pause: Ref, decisions: dict[str, Decision], *, by: str | None = None) -> Node:
    """Record a human's answer to a pause; return the decision node.

    ``decisions`` maps call ids of the pause to Approve(), Reject(reason) or
    Edit(arguments). Calls left out are asked about again on resume. Every
    branch whose head is the pause moves to the decision. A pause takes one
    decision: a second decider gets ``Conflict``, and so does the decider of a
    pause no branch stands at any more (nothing could carry the decision on), and of
    a pause whose deadline has passed (``expired``: see ``reject_expired``).
    """
    pause = store.node(pause)
    check_decisions(pause, decisions)
    record = DecisionPayload({k: to_entry(v) for k, v in decisions.items()}, by=by, at=now())
    if store.storage.one_statement and not deadlines.is_expired(pause):
        # One statement on a server (``Storage.decide_at``); anything but the common case
        # writes nothing there, and the long way below says what is wrong.
        text, node_id, created = encode_payload(record.to_payload(), "decision"), new_id(), now()
        if store.storage.decide_at(pause.session_id, pause.id, (node_id, text), created):
            return Node(node_id, pause.session_id, pause.id, pause.depth + 1, "decision", text, created)
    session = store.session(pause.session_id)
    with store.transaction():
        at_pause = session.branches_at(pause)
        if any(n.kind == "decision" for n in session.children(pause)):  # the store's words
            raise Conflict(f"pause {pause.id} already has a decision")
        if deadlines.is_expired(pause):
            raise Conflict(
                f"pause {pause.id} expired at {deadlines.expires_at(pause)} with no decision;"
                " nothing was written"
            )
        if not at_pause:
            raise Conflict(
                f"pause {pause.id}: no branch stands at it any more ({why_left(store, pause)});"
                " nothing was written"
            )
        node = session.append(record.to_payload(), kind="decision", parent=pause, branch=at_pause[0])
        for name in at_pause[1:]:
            session.move(name, to=node, expect_head=pause.id)
    return node


def reject_expired(store: Store, pause: Ref) -> Node:
    """Continue an expired pause as a rejection by the system: a decision node that
    rejects every call, ``{"by": "system", "reason": "expired"}``; return it.

    ``Conflict`` when the pause has no deadline, it has not passed, or the pause is
    decided already (a human was first) or no branch stands at it; nothing is written.
    """
    pause = store.node(pause)
    calls = PausePayload.from_node(pause).call_ids if pause.kind == "pause" else []
    check_decisions(pause, {c: Reject() for c in calls})
    at = deadlines.expires_at(pause)
    if at is None or not deadlines.is_expired(pause):
        raise Conflict(f"pause {pause.id} has not expired ({'expires ' + at if at else 'no deadline'})")
    said = f"no decision was made before the pause expired at {at}"
    record = DecisionPayload(
        {c: to_entry(Reject(said)) for c in calls}, by=deadlines.SYSTEM, reason="expired", at=now()
    )
    session = store.session(pause.session_id)
    with store.transaction():
        if any(n.kind == "decision" for n in session.children(pause)):
            raise Conflict(f"pause {pause.id} already has a decision; nothing was written")
        at_pause = session.branches_at(pause)
        if not at_pause:
            raise Conflict(f"pause {pause.id}: no branch stands at it any more; nothing was written")
        node = session.append(record.to_payload(), kind="decision", parent=pause, branch=at_pause[0])
        for name in at_pause[1:]:
            session.move(name, to=node, expect_head=pause.id)
    return node


def why_left(store: Store, node: Node) -> str:
    """Why no branch stands at ``node``: which moved on past it, or that none has it."""
    found = store.storage.search.refs_containing([node.id]).get(node.id)
    passed = found.branches if found is not None else []
    if passed:
        return f"{', '.join(passed)} moved on"
    return "no branch has it on its path: a branch moved back or was deleted"
