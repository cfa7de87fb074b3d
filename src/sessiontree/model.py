"""Plain data: nodes, refs, runs, reports and a model's reply. No I/O here.

Contract: these objects are snapshots of rows; changing the store never changes
an object already returned, and nothing here touches the database. ``Node``
decodes its JSON payload on first access, because most path reads only need a
few payloads of a long path and decoding every one would dominate the read.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

from . import kinds
from .errors import InvalidPayload
from .kinds import DECISION_ACTIONS, KINDS, ROLES, tool_calls_problem  # noqa: F401 (their old home)
from .names import check_size, shown, unstorable


class Node:
    """One immutable node of a session tree."""

    __slots__ = (
        "id",
        "session_id",
        "parent_id",
        "depth",
        "kind",
        "created_at",
        "run_id",
        "payload_json",
        "_payload",
    )

    def __init__(
        self,
        id: str,
        session_id: str,
        parent_id: str | None,
        depth: int,
        kind: str,
        payload_json: str,
        created_at: str,
        run_id: str | None = None,
    ) -> None:
        self.id = id
        self.session_id = session_id
        self.parent_id = parent_id
        self.depth = depth
        self.kind = kind
        self.payload_json = payload_json  # the stored JSON text
        self.created_at = created_at
        self.run_id = run_id
        self._payload: dict[str, Any] | None = None

    @property
    def payload(self) -> dict[str, Any]:
        """The node's JSON payload. A fresh copy is not made: treat it as read-only."""
        if self._payload is None:
            self._payload = json.loads(self.payload_json)
        return self._payload

    @property
    def role(self) -> str | None:
        """The chat role of a ``message`` node, else None."""
        return self.payload.get("role") if self.kind == "message" else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "session_id": self.session_id,
            "parent_id": self.parent_id,
            "depth": self.depth,
            "kind": self.kind,
            "payload": self.payload,
            "created_at": self.created_at,
            "run_id": self.run_id,
        }

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Node):
            return NotImplemented
        return (
            self.id,
            self.session_id,
            self.parent_id,
            self.depth,
            self.kind,
            self.created_at,
            self.run_id,
        ) == (
            other.id,
            other.session_id,
            other.parent_id,
            other.depth,
            other.kind,
            other.created_at,
            other.run_id,
        ) and self.payload == other.payload

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        preview = self.payload_json[:60]
        return f"Node(id={self.id!r}, kind={self.kind!r}, depth={self.depth}, payload={preview!r})"


@dataclass(frozen=True)
class SessionInfo:
    """A row of ``Store.sessions()``."""

    id: str
    title: str | None
    metadata: dict[str, Any]
    created_at: str
    archived_at: str | None = None
    node_count: int = 0
    last_activity: str | None = None


@dataclass(frozen=True)
class Branch:
    """A mutable named pointer; ``head_id`` is None for a branch with no node yet."""

    session_id: str
    name: str
    head_id: str | None
    created_at: str
    updated_at: str
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Checkpoint:
    """An immutable named pointer."""

    session_id: str
    name: str
    node_id: str
    created_at: str


@dataclass(frozen=True)
class Run:
    """Provenance of a model call: what produced a node."""

    id: str
    session_id: str
    model: str | None
    provider: str | None
    params: dict[str, Any]
    usage: dict[str, Any]
    latency_ms: float | None
    finish_reason: str | None
    created_at: str


def usage_tokens(usage: dict[str, Any]) -> tuple[int | None, int | None]:
    """(input, output) tokens of a run's usage as either API names them (``prompt_tokens``
    or ``input_tokens``; ``completion_tokens`` or ``output_tokens``); None where it is silent."""
    return _count(usage, "prompt_tokens", "input_tokens"), _count(usage, "completion_tokens", "output_tokens")


def _count(usage: dict[str, Any], *names: str) -> int | None:
    for name in names:
        value = usage.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


@dataclass
class Completion:
    """What a model call returns: the assistant message plus its provenance.

    A ``call`` may return a bare message dict instead; then nothing but the
    message is recorded.
    """

    message: dict[str, Any]
    model: str | None = None
    provider: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)
    finish_reason: str | None = None
    latency_ms: float | None = None


RAW = "raw"
"""The key of a message payload that is kept, searched and exported but never sent to a
model: ``{"raw": {KIND: ...}}`` holds what one API returned in its own shape (Anthropic's
content blocks, signed thinking among them), for the adapter of that ``KIND`` alone."""


def sendable(messages: list[dict[str, Any]], kind: str | None = None) -> list[dict[str, Any]]:
    """``messages`` without their ``raw`` field, or with only ``raw[kind]`` when ``kind`` is
    given (the adapter that wrote it). Messages without one are passed as they are (shared)."""
    out = []
    for message in messages:
        raw = message.get(RAW) if isinstance(message, dict) else None
        if raw is None:
            out.append(message)
            continue
        message = {k: v for k, v in message.items() if k != RAW}
        if kind is not None and isinstance(raw, dict) and kind in raw:
            message[RAW] = {kind: raw[kind]}
        out.append(message)
    return out


def completion_problem(completion: Completion) -> str | None:
    """Why ``completion`` cannot be stored as an assistant message and its run, or None.

    Its message must be an assistant message (content text, a list of parts or
    None) whose tool calls each have a non-empty string id, unique in the
    message, a string name and string arguments; model, provider and
    finish_reason are strings (without NUL or lone surrogates) or None, params and
    usage objects.
    """
    for name in ("model", "provider", "finish_reason"):
        value = getattr(completion, name)
        if value is not None and not isinstance(value, str):
            return f"its {name} is a {type(value).__name__}, not a string"
        if value is not None and ("\x00" in value or any("\ud800" <= c <= "\udfff" for c in value)):
            return f"its {name} holds a NUL or a lone surrogate, which no store keeps as text"
    for name in ("params", "usage"):
        if not isinstance(getattr(completion, name), dict):
            return f"its {name} is not an object"
    try:
        check_latency(completion.latency_ms)
    except InvalidPayload:
        return "its latency_ms is not a finite number"
    message = completion.message
    if not isinstance(message, dict) or message.get("role") != "assistant":
        return "it is not an assistant message"
    content = message.get("content")
    if content is not None and not isinstance(content, str | list):
        return f"its content is a {type(content).__name__}, not text"
    calls = message.get("tool_calls")
    problem = None if calls is None else tool_calls_problem(calls, text_arguments=True)
    return None if problem is None else f"its message {problem}"


CACHE_WRITE, CACHE_READ = 1.25, 0.1
"""The default price of a cache write and a cache read, as a multiple of the input price."""


@dataclass(frozen=True)
class ModelUsage:
    """Model calls of one model, summed."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    latency_ms: float = 0.0
    # Anthropic's prompt caching: tokens written to and read from the cache, which its
    # input_tokens leaves out (OpenAI's prompt_tokens counts its cached tokens in).
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0


N = TypeVar("N", int, float)


class _Total(Generic[N]):
    """A ``Usage`` total: the sum over its models of the ``ModelUsage`` field of the same name."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, usage: Any, owner: type | None = None) -> N:
        if usage is None:  # read on the class (help(), say): the descriptor itself
            return self  # type: ignore[return-value]
        return cast(N, sum(getattr(m, self.name) for m in usage.by_model.values()))


_TOTALS = (
    "calls",
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "latency_ms",
)
"""The totals of a ``Usage``, in the order ``to_dict`` gives them."""


@dataclass(frozen=True)
class Usage:
    """Model calls summed over a path or a subtree, in total and per model."""

    by_model: dict[str, ModelUsage] = field(default_factory=dict)

    # Totals over the models used, each of the ``ModelUsage`` field of its name.
    calls = _Total[int]()
    input_tokens = _Total[int]()
    output_tokens = _Total[int]()
    latency_ms = _Total[float]()
    cache_creation_input_tokens = _Total[int]()
    cache_read_input_tokens = _Total[int]()

    def cost(self, prices: dict[str, dict[str, float]]) -> float | None:
        """Cost from ``{model: {"input": per_million, "output": per_million}}``; None when a
        model that was used has no price. Cache writes cost ``"cache_write"`` per million
        (default 1.25 x input) and cache reads ``"cache_read"`` (default 0.1 x input),
        Anthropic's multipliers for its 5-minute cache."""
        total = 0.0
        for model, used in self.by_model.items():
            price = prices.get(model)
            if price is None:
                return None
            per_input = price.get("input", 0.0)
            total += (
                used.input_tokens * per_input
                + used.output_tokens * price.get("output", 0.0)
                + used.cache_creation_input_tokens * price.get("cache_write", per_input * CACHE_WRITE)
                + used.cache_read_input_tokens * price.get("cache_read", per_input * CACHE_READ)
            ) / 1_000_000
        return total

    def to_dict(self) -> dict[str, Any]:
        return {
            **{name: getattr(self, name) for name in _TOTALS},
            "by_model": {k: v.__dict__ for k, v in self.by_model.items()},
        }


@dataclass(frozen=True)
class Diff:
    """Two refs compared from their common ancestor (None when they share no root)."""

    ancestor: Node | None
    only_a: list[Node]
    only_b: list[Node]


@dataclass(frozen=True)
class PruneReport:
    """What ``prune`` removed, or would remove on a dry run."""

    node_ids: list[str]
    run_ids: list[str]
    dry_run: bool
    bytes_freed: int | None = None


@dataclass(frozen=True)
class TrashEntry:
    """A session in the trash: restorable until the trash is emptied."""

    session_id: str
    title: str | None
    trashed_at: str
    nodes: int


@dataclass(frozen=True)
class Stripped:
    """A tool result a retention policy stripped (or would strip, on a dry run)."""

    node_id: str
    session_id: str
    bytes: int


@dataclass(frozen=True)
class RetentionReport:
    """What a retention run moved to the trash and stripped, or would on a dry run, and
    the idle sessions a drop left alone because work is in flight in them (``kept``)."""

    trashed: list[str]
    stripped: list[Stripped]
    dry_run: bool
    kept: list[str] = field(default_factory=list)

    @property
    def bytes_stripped(self) -> int:
        return sum(s.bytes for s in self.stripped)

    def to_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "trashed": self.trashed,
            "kept_in_flight": self.kept,
            "stripped": [s.__dict__ for s in self.stripped],
            "bytes_stripped": self.bytes_stripped,
        }


@dataclass(frozen=True)
class SearchIndex:
    """The state of a store's full-text index: whether it is on, how many nodes it holds,
    how many were written since it last caught up (they are indexed before the next
    search), and its size on disk (``None`` where the backend cannot tell)."""

    enabled: bool
    indexed: int
    pending: int
    bytes: int | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "indexed": self.indexed,
            "pending": self.pending,
            "bytes": self.bytes,
        }


@dataclass(frozen=True)
class SearchQuery:
    """One full-text search, as ``Store.search`` was asked it: built there once and passed
    down unchanged (``search`` checks it, a backend runs it). ``text`` is the query
    (FTS5 syntax on SQLite, ``websearch_to_tsquery`` on PostgreSQL); ``session_id`` a
    whole session id (the store resolves a prefix first)."""

    text: str
    session_id: str | None = None
    branch: str | None = None
    role: str | None = None
    kind: str | None = None
    limit: int = 20
    tools: bool = True
    """False: leave tool names, arguments and results out of what is matched."""
    newest: bool = False
    """True: the newest matches instead of the best."""


@dataclass(frozen=True)
class SearchHit:
    """A node a search found: its session, a snippet with the matched words between
    ``«`` and ``»``, and the branches and checkpoints whose path contains it."""

    node: Node
    session_id: str
    snippet: str
    branches: list[str] = field(default_factory=list)
    checkpoints: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node.id,
            "session": self.session_id,
            "kind": self.node.kind,
            "role": self.node.role,
            "created_at": self.node.created_at,
            "snippet": self.snippet,
            "branches": self.branches,
            "checkpoints": self.checkpoints,
        }


@dataclass(frozen=True)
class Problem:
    """One integrity problem found by ``verify``."""

    session_id: str
    check: str
    detail: str
    node_id: str | None = None


@dataclass(frozen=True)
class VerifyReport:
    problems: list[Problem]
    sessions: int
    nodes: int

    @property
    def ok(self) -> bool:
        return not self.problems


MAX_NESTING = 256
"""Deepest nesting a stored JSON value may have: deeper values could be written
but not read back on every call stack."""


_PAYLOAD_OPTIONS: dict[str, Any] = {"separators": (",", ":")}
_PAYLOAD_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def encode_json(value: Any, what: str, **options: Any) -> str:
    """Strict JSON text SQLite can store, or InvalidPayload naming ``what``.

    Strict: no NaN or infinity (SQLite's JSON functions and our exports refuse
    them), at most MAX_NESTING levels deep, at most ``names.MAX_VALUE_BYTES`` long.
    A lone surrogate cannot be stored as UTF-8 text, so a value holding one is
    written with JSON's \\u escapes.
    """
    try:
        # The payload encoder is built once: json.dumps with options builds one per call.
        text = (
            _PAYLOAD_ENCODER.encode(value)
            if options == _PAYLOAD_OPTIONS
            else json.dumps(value, ensure_ascii=False, allow_nan=False, **options)
        )
        if not text.isascii():  # O(1) in CPython: most texts skip the check below
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                text = json.dumps(value, ensure_ascii=True, allow_nan=False, **options)
    except RecursionError:
        text = "[" * (MAX_NESTING + 1)  # certainly too deep: refused below
    except (ValueError, TypeError) as e:
        raise InvalidPayload(f"{what} is not valid JSON: {e}") from None
    # Counting brackets is cheap and almost always rules deep nesting out at once.
    if text.count("[") + text.count("{") > MAX_NESTING and _nesting(value) > MAX_NESTING:
        raise InvalidPayload(f"{what} is nested too deeply (more than {MAX_NESTING} levels)")
    return check_size(text, what)


TOKEN_FIELDS = ("prompt_tokens", "input_tokens", "completion_tokens", "output_tokens")
"""The usage fields a store reads token counts from (``usage_tokens``, and the runs'
token columns derived from the usage)."""

_TOKENS_RANGE = range(-(2**63), 2**63)  # a 64-bit integer: PostgreSQL's token columns


def encode_usage(usage: Any, what: str = "run usage", **options: Any) -> str:
    """``encode_json`` for a run's usage, which PostgreSQL also reads as ``jsonb`` (its
    runs' token columns are derived from the usage as each run is inserted), or
    InvalidPayload naming ``what``. So no key or text of it may hold a NUL or a lone
    surrogate (``jsonb`` refuses both, where the stored text keeps them as \\u escapes),
    and a number in a ``TOKEN_FIELDS`` field must fit 64 bits. Refused on every backend,
    so a store always copies to the other."""
    text = encode_json(usage, what, **options)
    if "\\u" in text:  # only escapes carry a NUL or a surrogate into the text
        _check_texts(json.loads(text), what)
    counts = [(n, usage.get(n)) for n in TOKEN_FIELDS] if isinstance(usage, dict) else []
    for name, count in counts:
        if isinstance(count, bool) or not isinstance(count, int | float):
            continue
        if round(count) not in _TOKENS_RANGE:
            side = "above" if count > 0 else "below"
            raise InvalidPayload(f"{what}: {name} is {side} the 64-bit range a token count must fit")
    return text


def _check_texts(value: Any, what: str) -> None:
    """InvalidPayload naming ``what`` when a key or string in ``value`` holds a NUL or a
    lone surrogate."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            why = unstorable(item)
            if why is not None:
                cannot = "which PostgreSQL's JSON cannot keep"
                raise InvalidPayload(f"{what} holds {why} in {shown(item)}, {cannot}")
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _nesting(value: Any) -> int:
    """How deeply lists and dicts nest in ``value`` (stops counting past MAX_NESTING)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list) and depth > deepest:
            deepest = depth
            if deepest > MAX_NESTING:
                break
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return deepest


def encode_payload(payload: Any, kind: str) -> str:
    """Validate a node payload and return its canonical JSON text.

    Raises InvalidPayload naming what is wrong: not an object, not strict JSON
    (see ``encode_json``), or a message without a known role.
    """
    kinds.check(kind, payload)  # each kind's record checks its own shape
    return encode_json(payload, "payload", separators=(",", ":"))


def check_latency(value: Any, what: str = "latency_ms") -> float | None:
    """A run's latency: None, or a finite number of milliseconds SQLite can store."""
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or abs(value) > 1e15
    ):
        raise InvalidPayload(f"{what} must be a finite number of milliseconds, got {str(value)[:40]}")
    return float(value)
