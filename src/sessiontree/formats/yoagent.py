"""yoagent (0.18) sessions: its session JSONL and its flat ``save_messages`` array.

Contract:
- ``stream_yoagent(lines, sink)`` reads a session file: one ``SessionEntry`` a line
  (``id``, ``parent_id``, ``message``, ``timestamp`` in ms, optional ``label``), as
  yoagent's ``from_jsonl`` does: blank lines skipped, a duplicate id or a parent that
  has not appeared earlier refused, the last line's entry is the head. The file has
  no session id: the session's id is derived from its first entry, and each node id
  from the session and the entry id, so the same file imports to the same ids.
- ``parse_yoagent_messages(data)`` reads the flat array (``Agent::save_messages``): a
  linear session with entry ids ``e1``, ``e2``... as ``Session::from_messages`` gives.
- Messages: ``user`` -> ``user`` (text joined, images as ``[image]``);
  ``assistant`` -> ``assistant`` (text, ``toolCall`` blocks as ``tool_calls`` with
  JSON-encoded arguments; model, provider, usage and stop reason as a run);
  ``toolResult`` -> ``tool`` (``tool_call_id``, ``name``); an extension message (any
  other role) -> a ``note``, never sent to a model. Every node keeps yoagent's message
  (the five legacy snake_case keys renamed), entry id, place in the file, label and
  timestamp under ``payload["raw"]["yoagent"]``, never sent to a model
  (``model.sendable``), which the export writes back.
- ``label`` -> a checkpoint (see ``pi._label_name`` for labels that are no valid
  name; a label used twice names the entry created last, as ``seek_checkpoint``);
  the head is ``main``, every other leaf gets ``leaf-<entry id>``.
- ``export_yoagent(session)`` yields the lines of a yoagent file: parents first,
  ``main``'s head last, each line byte for byte as yoagent's ``serde_json`` writes it
  (compact; struct fields in declaration order; keys inside JSON values sorted; UTF-8
  unescaped, ``/`` too; floats in ryu's shortest form, ``1.0``, ``-0.0``, ``1e16``),
  joined by ``\\n`` with no trailing newline. Nodes that were never yoagent entries
  become extension messages ``sessiontree.<kind>``. It refuses (``FormatError``) a
  tree yoagent cannot hold: ``main``'s head with children, two checkpoints on one
  node, or a lone surrogate in a string (which the import refuses too, as yoagent).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from .. import bulk
from ..bulk import ImportedNode, ImportedRef, ImportedSession
from ..bulk_stream import Collector, Sink
from ..errors import FormatError
from ..ids import now
from ..model import RAW
from .common import (
    OpenCalls,
    jsonl_records,
    leaf_refs,
    optional,
    parents_first,
    report_entry,
    stable_id,
    tool_call,
)
from .pi import _label_name, assistant_run

if TYPE_CHECKING:
    from ..store import Store

KEY = "yoagent"  # the entry of a payload's never-sent ``raw`` field holding what yoagent wrote
LEGACY = {
    "cache_read": "cacheRead",
    "cache_write": "cacheWrite",
    "total_tokens": "totalTokens",
    "error_message": "errorMessage",
    "provider_metadata": "providerMetadata",
}
ROLES = ("user", "assistant", "toolResult")


def is_entry(record: dict[str, Any]) -> bool:
    """Whether a first line is a yoagent ``SessionEntry``."""
    message = record.get("message")
    return "parent_id" in record and "id" in record and isinstance(message, dict) and "role" in message


def is_message(record: Any) -> bool:
    """Whether an array element is a yoagent ``AgentMessage`` (not an OpenAI message)."""
    if not isinstance(record, dict):
        return False
    role = record.get("role")
    return (
        role in ROLES
        and isinstance(record.get("content"), list)
        and "timestamp" in record
        or (
            "kind" in record
            and "data" in record
            and isinstance(role, str)
            and role not in ("user", "assistant")
        )
    )


def parse_yoagent(lines: Iterable[str]) -> ImportedSession:
    sink = Collector()
    stream_yoagent(lines, sink)
    (session,) = sink.sessions
    return session


def stream_yoagent(lines: Iterable[str], sink: Sink) -> None:
    reader: _Reader | None = None
    for number, record in jsonl_records(lines):
        where = f"line {number}"
        if reader is None:
            reader = _Reader(sink, "yoagent", _fingerprint(record), where)
        reader.entry(record, where)
    if reader is None:
        raise FormatError("the file is empty (expected yoagent session entries)")
    reader.finish()


def parse_yoagent_messages(data: Any) -> ImportedSession:
    if not isinstance(data, list):
        raise FormatError(f"expected a JSON array of yoagent messages, got {type(data).__name__}")
    if not data:
        raise FormatError("no messages: the array is empty")
    sink = Collector()
    reader = _Reader(sink, "yoagent-messages", _fingerprint(data[0]), "message 1")
    parent = None
    for i, message in enumerate(data, 1):
        where = f"message {i}"
        if not isinstance(message, dict):
            raise FormatError(f"{where}: expected an object, got {type(message).__name__}")
        stamp = message.get("timestamp") if isinstance(message.get("timestamp"), int) else 0
        reader.entry({"id": f"e{i}", "parent_id": parent, "message": message, "timestamp": stamp}, where)
        parent = f"e{i}"
    reader.finish()
    (session,) = sink.sessions
    return session


def _fingerprint(record: Any) -> str:
    text = json.dumps(record, sort_keys=True, ensure_ascii=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class _Reader:
    def __init__(self, sink: Sink, source: str, key: str, where: str) -> None:
        self.sink, self.source = sink, source
        self.session = ImportedSession(stable_id("yoagent", key), None, {"source": source}, now())
        sink.session(self.session)
        self.seen: set[str] = set()
        self.leaves: dict[str, str] = {}
        self.labels: dict[str, str] = {}  # label -> entry id (the last created wins)
        self.calls = OpenCalls(source)
        self.last: str | None = None
        self.first_at: str | None = None

    def node_id(self, entry_id: str) -> str:
        return stable_id(self.session.id, entry_id)

    def entry(self, record: dict[str, Any], where: str) -> None:
        eid = optional(record, "id", str, where)
        if not eid:
            raise FormatError(f"{where}: an entry needs an 'id' string")
        parent = optional(record, "parent_id", str, where)
        message = optional(record, "message", dict, where)
        if message is None:
            raise FormatError(f"{where}: an entry needs a 'message' object")
        stamp = record.get("timestamp")
        if type(stamp) is not int or stamp < 0:
            raise FormatError(f"{where}: 'timestamp' should be a whole number of milliseconds >= 0")
        label = optional(record, "label", str, where)
        if eid in self.seen:
            raise FormatError(f"{where}: entry id {eid!r} appears twice")
        if parent is not None and parent not in self.seen:
            raise FormatError(f"{where}: parent {parent!r} has not appeared before this entry")
        self.seen.add(eid)
        at = _iso_ms(stamp)
        kept = _normalised(message, where)
        if _unwritable(json.dumps(kept, ensure_ascii=False)):
            raise FormatError(f"{where}: a string {_SURROGATE}")
        own = self.node_id(eid)
        kind, payload, run = _convert(kept, own, at, where)
        # Kept for the export, never sent to a model (``model.sendable``).
        # The entry's place in the file: the export's order where timestamps cannot give
        # it (forks made in one millisecond, a clock that stepped back).
        yo: dict[str, Any] = {"message": kept, "id": eid, "position": len(self.seen) - 1}
        if label is not None:
            yo["label"] = label
        if stamp != _ms(at):
            yo["timestamp"] = stamp
        payload.setdefault(RAW, {})[KEY] = yo
        parent_id, run_id = self.node_id(parent) if parent else None, run.id if run else None
        node = ImportedNode(own, parent_id, kind, payload, at, run_id, source=where)
        if label is not None:
            self.labels.pop(label, None)
            self.labels[label] = eid
        self.last = eid
        report_entry(self.sink, self.session.id, eid, node, run, self.calls, self.leaves)

    def finish(self) -> None:
        main = self.node_id(self.last) if self.last else None
        refs = leaf_refs(self.leaves, main, bool(self.leaves))
        for ref in refs:
            self.sink.branch(self.session.id, ref)
        taken = {r.name for r in refs}
        for label, eid in self.labels.items():
            name = _label_name(label, eid, taken)
            taken.add(name)
            self.sink.checkpoint(self.session.id, ImportedRef(name, self.node_id(eid), metadata={}))


def _normalised(message: dict[str, Any], where: str) -> dict[str, Any]:
    """The message with the legacy snake_case keys renamed (in place of the old key)."""

    def rename(value: Any, depth: int = 0) -> Any:
        if isinstance(value, dict):
            return {
                LEGACY.get(k, k): rename(v, depth + 1) if k in ("usage", "content") else v
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [{LEGACY.get(k, k): v for k, v in b.items()} if isinstance(b, dict) else b for b in value]
        return value

    role = message.get("role")
    if not isinstance(role, str):
        raise FormatError(f"{where}: a message needs a 'role' string")
    if role not in ROLES:
        return dict(message)
    for field in ("content",):
        if not isinstance(message.get(field), list):
            raise FormatError(f"{where}: {field!r} should be an array")
    out = rename(message)
    if role == "assistant" and isinstance(out.get("usage"), dict):
        out["usage"] = {LEGACY.get(k, k): v for k, v in out["usage"].items()}
    return out


def _convert(m: dict[str, Any], node_id: str, at: str, where: str) -> tuple[str, dict[str, Any], Any]:
    role = m["role"]
    if role not in ROLES:
        return "note", {"source": "yoagent", "type": "extension"}, None
    blocks = [b for b in m["content"] if isinstance(b, dict)]
    texts = [b["text"] for b in blocks if b.get("type") == "text" and isinstance(b.get("text"), str)]
    images = ["[image]" for b in blocks if b.get("type") == "image"]
    if role == "user":
        return "message", {"role": "user", "content": "\n".join(texts + images)}, None
    if role == "toolResult":
        call_id = optional(m, "toolCallId", str, where)
        payload = {"role": "tool", "content": "\n".join(texts + images), "tool_call_id": call_id}
        if isinstance(m.get("toolName"), str):
            payload["name"] = m["toolName"]
        return "message", payload, None
    calls = [
        tool_call(str(b.get("id")), str(b.get("name")), b.get("arguments"))
        for b in blocks
        if b.get("type") == "toolCall"
    ]
    payload = {"role": "assistant", "content": "\n\n".join(texts) if texts or not calls else None}
    if calls:
        payload["tool_calls"] = calls
    return "message", payload, assistant_run(m, node_id, at)


def _iso_ms(ms: int) -> str:
    try:
        moment = datetime.fromtimestamp(ms / 1000, UTC)
    except (OverflowError, OSError, ValueError):
        return "9999-12-31T23:59:59.999Z"
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _ms(at: str) -> int | None:
    try:
        moment = datetime.fromisoformat(at.replace("Z", "+00:00"))
    except ValueError:
        return None
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    delta = moment - epoch
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


# -- export ------------------------------------------------------------------

# yoagent's struct field order (serde writes fields in declaration order).
_ORDER = {
    "user": ("role", "content", "timestamp"),
    "assistant": ("role", "content", "stopReason", "model", "provider", "usage", "timestamp", "errorMessage"),
    "toolResult": ("role", "toolCallId", "toolName", "content", "isError", "timestamp"),
}
_BLOCKS = {
    "text": ("type", "text"),
    "image": ("type", "data", "mimeType"),
    "thinking": ("type", "thinking", "signature"),
    "toolCall": ("type", "id", "name", "arguments", "providerMetadata"),
}
_USAGE = ("input", "output", "cacheRead", "cacheWrite", "totalTokens")
_VALUES = ("arguments", "providerMetadata", "data")


def export_yoagent(store: Store, session_id: str) -> Iterator[str]:
    """The lines of a session as a yoagent file (see the module docstring), without
    newlines: the caller joins them."""
    return _export(bulk.read_session(store, store.resolve_session_id(session_id)))


def _export(s: ImportedSession) -> Iterator[str]:
    main = next((b.node_id for b in s.branches if b.name == "main"), None)
    children: dict[str | None, list[ImportedNode]] = {}
    for n in s.nodes:
        children.setdefault(n.parent_id, []).append(n)
    if main is not None and children.get(main):
        raise FormatError(
            f"session {s.id}: main's head {main} has children; a yoagent file's head is its last line, "
            "which no entry can follow"
        )
    labels: dict[str, str] = {}
    for c in s.checkpoints:
        if c.node_id in labels:
            raise FormatError(
                f"session {s.id}: node {c.node_id} has two checkpoints ({labels[c.node_id]!r}, {c.name!r});"
                " a yoagent entry holds one label"
            )
        if c.node_id is not None:
            labels[c.node_id] = c.name
    runs = {r.id: r for r in s.runs}
    ids = {n.id: f"e{i}" for i, n in enumerate(s.nodes, 1)}
    # Answers the import synthesised for calls the file left open were never entries.
    skipped = {
        n.id: n.parent_id for n in s.nodes if n.payload.get("synthesised") and "message" not in _kept(n)
    }
    # Creation order (a yoagent file's order), parents first, main's head last.
    created = sorted(s.nodes, key=lambda n: n.created_at)
    # A file's own entries take the places creation order gives them, in file order.
    slots = [i for i, n in enumerate(created) if type(_kept(n).get("position")) is int]
    filed = sorted((created[i] for i in slots), key=lambda n: _kept(n)["position"])
    for i, n in zip(slots, filed, strict=True):
        created[i] = n
    ranked = parents_first({n.id: n.parent_id for n in created}, str)
    order = [_by_id(s, i) for i in ranked if i != main and i not in skipped]
    order += [n for n in s.nodes if n.id == main]
    for n in order:
        entry_id = _entry_id(n, ids)
        up = n.parent_id
        while up in skipped:
            up = skipped[up]
        parent = _entry_id(_by_id(s, up), ids) if up else None
        message = _message(n, runs)
        stamp = _kept(n).get("timestamp")
        line = '{"id":' + _dump(entry_id) + ',"parent_id":' + _dump(parent)
        line += (
            ',"message":'
            + message
            + ',"timestamp":'
            + str(stamp if type(stamp) is int else _ms(n.created_at) or 0)
        )
        label = _kept(n).get("label")
        label = label if isinstance(label, str) else labels.get(n.id)
        if label is not None:
            line += ',"label":' + _dump(label)
        if _unwritable(line):
            raise FormatError(f"session {s.id}: node {n.id} {_SURROGATE}")
        yield line + "}"


def _kept(n: ImportedNode) -> dict[str, Any]:
    """What the import kept of yoagent's entry (message, id, label, timestamp), or {}."""
    raw = n.payload.get(RAW)
    kept = raw.get(KEY) if isinstance(raw, dict) else None
    return kept if isinstance(kept, dict) else {}


def _by_id(s: ImportedSession, node_id: str | None) -> ImportedNode:
    index = getattr(s, "_index", None)
    if index is None:
        index = {n.id: n for n in s.nodes}
        s._index = index  # type: ignore[attr-defined]
    return index[node_id]


def _entry_id(n: ImportedNode, ids: dict[str, str]) -> str:
    original = _kept(n).get("id")
    return original if isinstance(original, str) else ids[n.id]


def _message(n: ImportedNode, runs: dict[str, Any]) -> str:
    kept = _kept(n).get("message")
    if not isinstance(kept, dict):
        kept = _from_chat(n, runs)
    role = kept.get("role")
    if role not in _ORDER:
        return _struct(kept, ("role", "kind", "data"), values=True)
    return _struct(kept, _ORDER[role])


def _from_chat(n: ImportedNode, runs: dict[str, Any]) -> dict[str, Any]:
    at = _ms(n.created_at) or 0
    p = n.payload
    role = p.get("role") if n.kind == "message" else None
    content = p.get("content")
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    if role == "user":
        return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": at}
    if role == "tool":
        return {
            "role": "toolResult",
            "toolCallId": str(p.get("tool_call_id")),
            "toolName": str(p.get("name") or ""),
            "content": [{"type": "text", "text": text}],
            "isError": False,
            "timestamp": at,
        }
    if role == "assistant":
        blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if content else []
        for call in p.get("tool_calls") or []:
            fn = call.get("function") or {}
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except ValueError:
                args = fn.get("arguments")
            blocks.append(
                {"type": "toolCall", "id": call.get("id"), "name": fn.get("name"), "arguments": args}
            )
        run = runs.get(n.run_id) if n.run_id else None
        usage = run.usage if run is not None else {}
        return {
            "role": "assistant",
            "content": blocks,
            "stopReason": "toolUse" if p.get("tool_calls") else "stop",
            "model": (run.model if run else None) or "",
            "provider": (run.provider if run else None) or "",
            "usage": {
                "input": usage.get("input", usage.get("input_tokens", 0)),
                "output": usage.get("output", usage.get("output_tokens", 0)),
            },
            "timestamp": at,
        }
    return {"role": "extension", "kind": f"sessiontree.{n.kind}", "data": p}


def _struct(obj: dict[str, Any], fields: tuple[str, ...], values: bool = False) -> str:
    parts = []
    for field in fields:
        if (
            field not in obj
            or obj[field] is None
            and field in ("errorMessage", "signature", "providerMetadata")
        ):
            if field in ("cacheRead", "cacheWrite", "totalTokens"):
                parts.append(f'"{field}":0')
            continue
        value = obj[field]
        if field == "content" and isinstance(value, list):
            text = "[" + ",".join(_block(b) for b in value) + "]"
        elif field == "usage" and isinstance(value, dict):
            text = "{" + ",".join(f'"{k}":{_value(value.get(k, 0))}' for k in _USAGE) + "}"
        else:
            text = _value(value)
        parts.append(f"{_dump(field)}:{text}")
    return "{" + ",".join(parts) + "}"


def _block(b: Any) -> str:
    if not isinstance(b, dict) or b.get("type") not in _BLOCKS:
        return _value(b)
    return _struct(b, _BLOCKS[b["type"]])


def _dump(text: Any) -> str:
    return json.dumps(text, ensure_ascii=False)


def _value(v: Any) -> str:
    """A JSON value as serde_json writes a ``Value``: compact, object keys sorted,
    floats in ryu's shortest form."""
    if isinstance(v, dict):
        return "{" + ",".join(f"{_dump(k)}:{_value(v[k])}" for k in sorted(v)) + "}"
    if isinstance(v, list):
        return "[" + ",".join(_value(x) for x in v) + "]"
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return _dump(v)
    if isinstance(v, int):
        return str(v) if -(2**63) <= v < 2**64 else _float(float(v))
    return _float(v)


def _float(f: float) -> str:
    if not math.isfinite(f):
        return "null"
    digits, exp = _shortest(f)
    sign = "-" if math.copysign(1.0, f) < 0 else ""  # serde_json writes -0.0 as "-0.0"
    kk = len(digits) + exp
    if exp >= 0 and kk <= 16:
        return sign + digits + "0" * exp + ".0"
    if 0 < kk <= 16:
        return sign + digits[:kk] + "." + digits[kk:]
    if -5 < kk <= 0:
        return sign + "0." + "0" * -kk + digits
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{sign}{mantissa}e{kk - 1}"


def _shortest(f: float) -> tuple[str, int]:
    """The shortest round-tripping digits of |f| and their exponent (value = digits x 10^exp)."""
    text = repr(abs(f))
    mantissa, _, e = text.partition("e")
    whole, _, frac = mantissa.partition(".")
    digits = (whole + frac).lstrip("0") or "0"
    exp = int(e or 0) - len(frac)
    stripped = digits.rstrip("0")
    exp += len(digits) - len(stripped)
    return stripped or "0", exp if stripped else 0


def export_yoagent_messages(store: Store, session_id: str, branch: str = "main") -> str:
    """The messages on ``branch``'s path as the flat array ``restore_messages`` reads."""
    s = bulk.read_session(store, store.resolve_session_id(session_id))
    runs = {r.id: r for r in s.runs}
    head = next((b.node_id for b in s.branches if b.name == branch), None)
    path: list[ImportedNode] = []
    while head is not None:
        node = _by_id(s, head)
        if not (node.payload.get("synthesised") and "message" not in _kept(node)):
            path.append(node)
        head = node.parent_id
    text = "[" + ",".join(_message(n, runs) for n in reversed(path)) + "]"
    if _unwritable(text):
        raise FormatError(f"session {s.id}: branch {branch!r} {_SURROGATE}")
    return text


_SURROGATE = "holds a lone surrogate (an unpaired \\ud800-\\udfff escape), which yoagent's serde_json refuses"


def _unwritable(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate: JSON's ``\\u`` escapes let one in, but
    it is no UTF-8, so no yoagent file holds one (serde_json refuses it)."""
    if text.isascii():  # O(1) in CPython: most lines skip the encode below
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False
