"""The payload of each node kind as a typed record: one place that parses, checks and writes it.

Contract:
- One frozen record per kind: ``MessagePayload``, ``PausePayload``, ``DecisionPayload``,
  ``ToolStartPayload``, ``SummaryPayload``, ``NotePayload``, ``ErrorPayload`` and
  ``ScorePayload`` (``RECORDS`` maps each kind to its record). The calls of a pause or a
  ``tool_start`` are ``MarkerCall`` records; each call's decision is a ``DecisionEntry``.
- ``Record.from_payload(payload)`` checks what every reader relies on (``check``; the
  message names what is wrong, as ``InvalidPayload``) and reads the payload;
  ``from_node(node)`` does that for a node, and says so (``Conflict``) when the node is of
  another kind. ``to_payload()`` is the JSON object stored.
- The stored JSON never moves: ``to_payload(from_payload(p)) == p`` for every payload that
  passes ``check``, key order included (so its text is byte for byte the same). Keys a
  record has no field for are kept in ``extra`` (an adapter's ``raw``, an import's
  ``source``) and a parsed record remembers the order of its keys. A field the check does
  not look at holds what was stored, whatever its type (imports wrote such payloads);
  its annotation is what sessiontree itself writes.
- A record built in code (not parsed) writes its fields in the order they are declared,
  which is the order the loop has always written them; a field marked optional
  (``omit=True``: a pause's ``expires_at``, a run's ``recipe``) is left out while it is None.
- ``check(kind, payload)`` is what ``model.encode_payload`` runs before every write: it
  validates without building a record (the check is on every append's path).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from math import isfinite
from typing import Any, ClassVar, Protocol, TypeVar

from .errors import Conflict, InvalidPayload

ROLES = frozenset({"system", "user", "assistant", "tool", "developer"})
"""The chat roles a ``message`` payload may have."""

DECISION_ACTIONS = frozenset({"approve", "reject", "edit"})
"""What a human may decide about one call of a pause."""

R = TypeVar("R", bound="Record")


class NodeLike(Protocol):
    """What ``from_node`` reads: a ``model.Node`` or an import's ``bulk.ImportedNode``."""

    @property
    def kind(self) -> str: ...

    @property
    def payload(self) -> Any: ...


def _optional(default: Any = None) -> Any:
    """A field left out of the payload while it is None (on a record built in code)."""
    return field(default=default, metadata={"omit": True})


@dataclass(frozen=True)
class Record:
    """What every payload record shares: keys it has no field for, and their order."""

    KIND: ClassVar[str] = ""
    NESTED: ClassVar[frozenset[str]] = frozenset()  # fields holding records
    # Keys without a field of their own, kept as stored (``raw``, ``source``, ...).
    extra: Mapping[str, Any] = field(default_factory=dict, kw_only=True)
    # The keys of the payload it was read from, in their order (empty: built in code).
    order: tuple[str, ...] = field(default=(), kw_only=True, compare=False, repr=False)

    @classmethod
    def check(cls, payload: dict[str, Any]) -> None:
        """Raise ``InvalidPayload`` unless every reader can rely on ``payload``."""

    @classmethod
    def from_payload(cls: type[R], payload: Any) -> R:
        """The record of a stored (or about to be stored) payload; see the module docstring."""
        if not isinstance(payload, dict):
            raise InvalidPayload(f"payload must be a JSON object (dict), not {type(payload).__name__}")
        cls.check(payload)
        return cls._read(payload)

    @classmethod
    def from_node(cls: type[R], node: NodeLike) -> R:
        """The record of ``node``'s payload; ``Conflict`` when ``node`` is of another kind."""
        if node.kind != cls.KIND:
            raise Conflict(f"node {getattr(node, 'id', '?')} is a {node.kind} node, not a {cls.KIND}")
        return cls.from_payload(node.payload)

    @classmethod
    def _read(cls: type[R], payload: dict[str, Any]) -> R:
        """The record of a checked payload: each field from its key, the rest in ``extra``."""
        known = _keys(cls)
        # Filled in directly, not through ``__init__``: a frozen data class's init sets each
        # field through object.__setattr__, which made reading a path's markers cost more
        # than the loop's own planning (the plan reads them on every step).
        record = object.__new__(cls)
        values = record.__dict__
        template, fresh = _TEMPLATES.get(cls) or _template(cls)
        values.update(template)
        for name in fresh:  # a mutable default is never shared between records
            values[name] = {}
        extra = values["extra"]
        for key, value in payload.items():
            if key in known:
                values[known[key]] = cls._field(key, value)
            else:
                extra[key] = value
        values["order"] = tuple(payload)
        return record

    @classmethod
    def _field(cls, key: str, value: Any) -> Any:
        """A stored value as its field holds it (records for nested records)."""
        return value

    def to_payload(self) -> dict[str, Any]:
        """The JSON object stored for this record (see the module docstring)."""
        cls, values = type(self), self.__dict__
        if not self.order:  # built in code: fields in their order, then extra keys
            built: dict[str, Any] = {}
            for name, (_, omit) in _field_info(cls).items():
                if name == "extra" or name == "order":
                    continue
                value = values[name]
                if value is None and omit:
                    continue
                built[name] = _plain(value) if name in cls.NESTED else value
            for key, value in self.extra.items():
                built.setdefault(key, value)
            return built
        names = _keys(cls)
        own = {key: values[name] for key, name in names.items()}
        out: dict[str, Any] = {}
        for key in self.order:
            if key in own:
                out[key] = _plain(own[key])
            elif key in self.extra:
                out[key] = self.extra[key]
        for key, value in own.items():  # a field set in code, or changed after reading
            if key in out or (self.order and value == _default(type(self), names[key])):
                continue
            if value is None and _omitted(type(self), names[key]):
                continue
            out[key] = _plain(value)
        for key, value in self.extra.items():
            out.setdefault(key, value)
        return out

    def replace(self: R, **changes: Any) -> R:
        return replace(self, **changes)


_KEYS: dict[type, dict[str, str]] = {}
_INFO: dict[type, dict[str, tuple[Any, bool]]] = {}


def _keys(cls: type[Record]) -> dict[str, str]:
    """Payload key -> field name, in declaration order (worked out once per record type)."""
    found = _KEYS.get(cls)
    if found is None:
        found = _KEYS[cls] = {f.name: f.name for f in fields(cls) if f.name not in ("extra", "order")}
    return found


def _field_info(cls: type[Record]) -> dict[str, tuple[Any, bool]]:
    """Field name -> (its default, whether a None is left out), once per record type."""
    found = _INFO.get(cls)
    if found is None:
        found = {}
        for f in fields(cls):
            default = f.default if f.default is not MISSING else None
            if f.default_factory is not MISSING:
                default = f.default_factory()
            found[f.name] = (default, bool(f.metadata.get("omit")))
        _INFO[cls] = found
    return found


_TEMPLATES: dict[type, tuple[dict[str, Any], tuple[str, ...]]] = {}


def _template(cls: type[Record]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Each field's default, and the fields whose default is a fresh dict."""
    info = _field_info(cls)
    found = (
        {name: default for name, (default, _) in info.items()},
        tuple(name for name, (default, _) in info.items() if isinstance(default, dict)),
    )
    _TEMPLATES[cls] = found
    return found


def _default(cls: type[Record], name: str) -> Any:
    return _field_info(cls)[name][0]


def _omitted(cls: type[Record], name: str) -> bool:
    return _field_info(cls)[name][1]


def _plain(value: Any) -> Any:
    """A field's value as JSON data: records become their payloads, tuples lists."""
    if isinstance(value, Record):
        return value.to_payload()
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict) and any(isinstance(v, Record) for v in value.values()):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _bad(kind: str, why: str) -> InvalidPayload:
    return InvalidPayload(f"a {kind} payload {why}")


# -- messages -----------------------------------------------------------------


def tool_calls_problem(calls: Any, *, text_arguments: bool = False) -> str | None:
    """Why a message's ``tool_calls`` cannot be stored and read back, or None: it must be a
    list of calls, each with a non-empty string id unique in the message and a function
    with a string name (and, with ``text_arguments``, string arguments)."""
    if not isinstance(calls, list):
        return f"needs 'tool_calls' to be a list, not a {type(calls).__name__}"
    seen: set[str] = set()
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(call, dict) or not isinstance(call.get("id"), str) or not call["id"]:
            return f"has a tool call without a string id: {str(call)[:80]}"
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            return f"has a tool call without a function name: {str(call)[:80]}"
        if text_arguments and not isinstance(function.get("arguments"), str):
            return f"has a tool call whose arguments are not a string: {str(call)[:80]}"
        if call["id"] in seen:
            return f"has two tool calls with the id {call['id'][:100]!r}"
        seen.add(call["id"])
    return None


@dataclass(frozen=True)
class MessagePayload(Record):
    """A chat message, in the OpenAI chat shape a model is sent (``raw`` and any other key
    the API takes stay in ``extra``). Only ``message`` nodes reach a model."""

    KIND: ClassVar[str] = "message"
    role: str
    content: str | list[Any] | None = None
    tool_calls: list[dict[str, Any]] | None = _optional()
    tool_call_id: str | None = _optional()

    @classmethod
    def check(cls, payload: dict[str, Any]) -> None:
        role = payload.get("role")
        if not isinstance(role, str) or role not in ROLES:
            raise InvalidPayload(f"a message payload needs 'role' in {sorted(ROLES)}, got {role!r:.60}")
        content = payload.get("content")
        if not isinstance(content, str | list | None):  # what the API takes
            raise _bad(
                "message",
                f"needs 'content' to be text, a list of parts or null, not {type(content).__name__}",
            )
        calls = payload.get("tool_calls")
        problem = None if calls is None else tool_calls_problem(calls)
        if problem is not None:
            raise _bad("message", problem)
        if role == "tool" and not isinstance(payload.get("tool_call_id"), str | None):
            raise _bad("message", "with role 'tool' needs a string 'tool_call_id'")

    @property
    def call_ids(self) -> list[str]:
        """The ids of the tool calls an assistant message makes, in its order."""
        return [c["id"] for c in self.tool_calls or ()] if self.role == "assistant" else []


# -- pauses, tool starts and decisions ------------------------------------------


@dataclass(frozen=True)
class MarkerCall(Record):
    """One call named by a pause or a ``tool_start``: its id, tool name and arguments (the
    model's JSON text), and on a pause why it waits for a human."""

    id: str
    name: str | None = None
    arguments: Any = None
    reason: str | None = _optional()


class _Calls(Record):
    """What a pause and a ``tool_start`` share: the ``calls`` they name (``MarkerCall``)."""

    KIND: ClassVar[str] = ""
    NESTED: ClassVar[frozenset[str]] = frozenset({"calls"})
    calls: tuple[MarkerCall, ...]

    @classmethod
    def check(cls, payload: dict[str, Any]) -> None:
        calls = payload.get("calls", [])
        if not isinstance(calls, list) or not all(
            isinstance(c, dict) and isinstance(c.get("id"), str) and isinstance(c.get("name", ""), str)
            for c in calls
        ):
            raise _bad(cls.KIND, "needs 'calls' to be a list of objects with a string 'id' and 'name'")

    @classmethod
    def _field(cls, key: str, value: Any) -> Any:
        return tuple(MarkerCall._read(c) for c in value) if key == "calls" else value

    @property
    def call_ids(self) -> list[str]:
        return [c.id for c in self.calls]

    @classmethod
    def ids_in(cls, node: NodeLike) -> list[str]:
        """``from_node(node).call_ids`` of a stored node (checked when it was written),
        without building its records: the plan reads it on every step of a run."""
        if node.kind != cls.KIND:
            raise Conflict(f"node {getattr(node, 'id', '?')} is a {node.kind} node, not a {cls.KIND}")
        return [c["id"] for c in node.payload.get("calls", ())]

    def call_payloads(self) -> list[dict[str, Any]]:
        """The calls as stored (what the inbox, the view and a webhook show)."""
        return [c.to_payload() for c in self.calls]


@dataclass(frozen=True)
class ToolStartPayload(_Calls):
    """The calls of a batch about to run, written before any of them starts (a call with no
    answer after it was cut off), and the run's ``recipe`` (``sessiontree.recipe``)."""

    KIND: ClassVar[str] = "tool_start"
    calls: tuple[MarkerCall, ...] = ()
    recipe: dict[str, Any] | None = _optional()


@dataclass(frozen=True)
class PausePayload(_Calls):
    """A run waiting for a human: why, the assistant message whose calls wait, the calls,
    the JSON schema of each call's tool (what ``decide`` checks an edit against), an
    optional deadline (``expires_at``, see ``deadlines``) and the run's ``recipe``."""

    KIND: ClassVar[str] = "pause"
    reason: str | None = None
    assistant_id: str | None = None
    calls: tuple[MarkerCall, ...] = ()
    schemas: dict[str, Any] | None = _optional()
    expires_at: str | None = _optional()
    recipe: dict[str, Any] | None = _optional()

    @property
    def framework(self) -> str | None:
        """The framework whose run this pause belongs to (an adapter keeps that run's state
        under its name in the pause's ``raw``), or None for the loop's own pauses."""
        raw = self.extra.get("raw")
        return next(iter(raw)) if isinstance(raw, dict) and raw else None

    def schema_of(self, name: str | None) -> dict[str, Any] | None:
        """The JSON schema the pause recorded for the tool ``name``, if any."""
        found = self.schemas.get(name) if isinstance(self.schemas, dict) and name is not None else None
        return found if isinstance(found, dict) else None


@dataclass(frozen=True)
class DecisionEntry(Record):
    """A human's answer to one call: ``approve``, ``reject`` (with a reason the model
    reads) or ``edit`` (with the arguments to run instead). ``decisions.Decision`` is its
    typed form (``decisions.to_entry``/``decisions.from_entry``)."""

    action: str
    reason: str | None = _optional()
    arguments: dict[str, Any] | None = _optional()


@dataclass(frozen=True)
class DecisionPayload(Record):
    """The answer to a pause: call id -> ``DecisionEntry``, who decided, why (``expired``
    for a system rejection) and when."""

    KIND: ClassVar[str] = "decision"
    NESTED: ClassVar[frozenset[str]] = frozenset({"decisions"})
    decisions: Mapping[str, DecisionEntry] = field(default_factory=dict)
    by: str | None = None
    reason: str | None = _optional()
    at: str | None = _optional()

    @classmethod
    def check(cls, payload: dict[str, Any]) -> None:
        decisions = payload.get("decisions", {})
        if not isinstance(decisions, dict) or not all(
            isinstance(d, dict) and d.get("action") in DECISION_ACTIONS for d in decisions.values()
        ):
            raise _bad(
                cls.KIND, f"needs 'decisions' to map call ids to an action in {sorted(DECISION_ACTIONS)}"
            )

    @classmethod
    def _field(cls, key: str, value: Any) -> Any:
        if key == "decisions":
            return {k: DecisionEntry._read(v) for k, v in value.items()}
        return value


# -- the other markers ------------------------------------------------------------


@dataclass(frozen=True)
class SummaryPayload(Record):
    """A summary (``compaction``): its text, the span of its path it stands for
    (``{"first": id, "last": id, "nodes": n}``) and the role it is sent as (``user`` when
    not given)."""

    KIND: ClassVar[str] = "summary"
    summary: Any = None
    covers: dict[str, Any] | None = _optional()
    role: str | None = _optional()

    @property
    def span(self) -> tuple[str, str] | None:
        """(first id, last id) of the span it stands for, or None (a marker like any other)."""
        if not isinstance(self.covers, dict):
            return None
        first, last = self.covers.get("first"), self.covers.get("last")
        return (first, last) if isinstance(first, str) and isinstance(last, str) else None

    @property
    def text(self) -> str:
        """The summary as text (``""`` when it has none)."""
        return "" if self.summary is None else str(self.summary)

    def spanning(self, first: str, last: str, nodes: int) -> SummaryPayload:
        """This summary standing for the span from ``first`` to ``last`` (``nodes`` long)."""
        return self.replace(covers={"first": first, "last": last, "nodes": nodes})


@dataclass(frozen=True)
class NotePayload(Record):
    """A note: a ``type`` (``limit`` for a budget that ran out, an adapter's name for what
    it keeps), and the words: ``message`` (the loop's) or ``text`` (an adapter's)."""

    KIND: ClassVar[str] = "note"
    type: str | None = _optional()
    limit: str | None = _optional()
    message: str | None = _optional()
    text: str | None = _optional()


@dataclass(frozen=True)
class ErrorPayload(Record):
    """Why a run stopped: the exception's class name, its message, what the run was doing
    (``during``), when, and an HTTP ``status`` and the ``raw`` reply when there were."""

    KIND: ClassVar[str] = "error"
    error: str | None = None
    message: str | None = None
    during: str | None = _optional()
    at: str | None = _optional()
    status: Any = _optional()
    raw: str | None = _optional()

    @property
    def said(self) -> Any:
        """What to show: the message, else the error's name, else ``""``."""
        if self.message is not None:
            return self.message
        return self.error if self.error is not None else ""


@dataclass(frozen=True)
class ScorePayload(Record):
    """A judgement of the branch it is on: a finite number, the scorer's name and a note."""

    KIND: ClassVar[str] = "score"
    value: float
    scorer: str
    note: str | None = None

    @classmethod
    def check(cls, payload: dict[str, Any]) -> None:  # what compare, the view and exports read
        value = payload.get("value")
        if isinstance(value, bool) or not isinstance(value, int | float) or not isfinite(value):
            raise _bad(cls.KIND, f"needs 'value' to be a finite number, not {str(value)[:40]}")
        if not isinstance(payload.get("scorer"), str) or not payload["scorer"]:
            raise _bad(cls.KIND, "needs 'scorer' to be a name")


RECORDS: dict[str, type[Record]] = {
    r.KIND: r
    for r in (
        MessagePayload,
        PausePayload,
        DecisionPayload,
        ToolStartPayload,
        SummaryPayload,
        NotePayload,
        ErrorPayload,
        ScorePayload,
    )
}
"""Each node kind's record."""

KINDS = frozenset(RECORDS)
"""Node kinds. Only ``message`` nodes reach a model; the rest are markers."""


def check(kind: str, payload: Any) -> None:
    """Raise ``InvalidPayload`` unless ``payload`` can be stored as a ``kind`` node."""
    record = RECORDS.get(kind)
    if record is None:
        raise InvalidPayload(f"unknown node kind {kind!r}; expected one of {sorted(KINDS)}")
    if not isinstance(payload, dict):
        raise InvalidPayload(f"payload must be a JSON object (dict), not {type(payload).__name__}")
    record.check(payload)


def read(node: NodeLike) -> Record:
    """The record of ``node``'s payload, whatever its kind."""
    return RECORDS[node.kind].from_payload(node.payload)
