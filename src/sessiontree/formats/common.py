"""Helpers the format modules share: ids, timestamps, text, refs, JSON reading.

Contract: pure functions, no I/O beyond reading the text they are given.
Derived ids are UUIDv5 over a fixed namespace, so importing the same file twice
yields the same ids (and the second import merges into the first).
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from .. import calls, ids
from ..bulk import ImportedNode, ImportedRef, ImportedRun, ImportedSession
from ..errors import FormatError, InvalidPayload
from ..kinds import SummaryPayload
from ..names import check_text
from .errors import InvalidEntry

if TYPE_CHECKING:
    from ..bulk_stream import Sink

NAMESPACE = uuid.UUID("3f6c1e0a-8d51-4e0b-9c8e-5a1f2b7d9e40")  # sessiontree imports
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
EPOCH = "1970-01-01T00:00:00.000Z"


def stable_id(*parts: str) -> str:
    """A UUIDv5 of the parts: the same parts give the same id in every process. What
    ``uuid.uuid5`` computes, except that a lone surrogate (a file may hold one as a
    ``\\ud800`` escape) is hashed as its own bytes instead of failing to encode."""
    name = "\x1f".join(parts).encode("utf-8", "surrogatepass")
    digest = hashlib.sha1(NAMESPACE.bytes + name, usedforsecurity=False).digest()
    return str(uuid.UUID(bytes=digest[:16], version=5))


def keep_or_derive(original: str, *scope: str) -> str:
    """The original id when it is a UUID (lower-cased), else one derived from scope + id."""
    if _UUID.fullmatch(original):
        return original.lower()
    return stable_id(*scope, original)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def iso(value: Any, default: str | None = None) -> str | None:
    """A timestamp (epoch seconds or ms, or ISO 8601 text) as ``YYYY-MM-DDTHH:MM:SS.mmmZ``."""
    try:
        if isinstance(value, bool) or value is None:
            return default
        if isinstance(value, int | float):
            seconds = value / 1000 if value > 1e11 else value  # ms since the epoch
            moment = datetime.fromtimestamp(seconds, UTC)
        elif isinstance(value, str) and value:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=UTC)
        else:
            return default
    except (ValueError, OverflowError, OSError):
        return default
    # Whole milliseconds, cut (not rounded) as ``isoformat(timespec="milliseconds")`` did.
    return ids.iso((moment - _EPOCH) // timedelta(milliseconds=1) / 1000)


def tool_call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    """An OpenAI-shaped tool call; arguments become a JSON string as the API sends them."""
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def block_text(blocks: Any, placeholder: bool = True) -> str:
    """The text of a content value: a string, or a list of text blocks (others as ``[type]``)."""
    if isinstance(blocks, str):
        return blocks
    if not isinstance(blocks, list):
        return ""
    parts = []
    for block in blocks:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict):
            text = block.get("text")
            if isinstance(text, dict):  # LibreChat agents: {"type": "text", "text": {"value": ..}}
                text = text.get("value")
            if isinstance(text, str):
                parts.append(text)
            elif placeholder and block.get("type") not in ("thinking", "redacted_thinking"):
                parts.append(f"[{block.get('type') or block.get('content_type') or 'content'}]")
    return "\n".join(parts)


def chat_message(role: str, content: Any, **extra: Any) -> dict[str, Any]:
    """A chat message payload without the keys whose value is None."""
    payload = {"role": role, "content": content}
    payload.update({k: v for k, v in extra.items() if v is not None})
    return payload


def make_run(
    node_id: str,
    created_at: str,
    *,
    model: Any = None,
    provider: Any = None,
    usage: Any = None,
    finish_reason: Any = None,
) -> ImportedRun | None:
    """Provenance for an imported assistant node (None when the source says nothing)."""
    if not model and not usage and not finish_reason:
        return None
    return ImportedRun(
        stable_id("run", node_id),
        model=_str(model),
        provider=_str(provider),
        usage=usage if isinstance(usage, dict) else {},
        finish_reason=_str(finish_reason),
        created_at=created_at,
    )


def token_usage(usage: Any, input_field: str, output_field: str) -> dict[str, Any] | None:
    """The source's usage object, its fields kept, with the token counts also under
    ``input_tokens``/``output_tokens`` (the names the runs table sums)."""
    if not isinstance(usage, dict):
        return None
    named = dict(usage)
    for field, name in ((input_field, "input_tokens"), (output_field, "output_tokens")):
        value = usage.get(field)
        if isinstance(value, int | float) and not isinstance(value, bool):
            named.setdefault(name, value)
    return named


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def tree_entry(entry: Any, parent_field: str, tree: dict[str, Any], tree_name: str, where: str) -> str | None:
    """The parent of one entry of an export's id -> entry tree (``tree_name`` in messages),
    which must be an object whose parent, if any, is in ``tree``."""
    if not isinstance(entry, dict):
        raise FormatError(f"{where}: expected an object")
    parent = optional(entry, parent_field, str, where)
    if parent is not None and parent not in tree:
        raise FormatError(f"{where}: parent {parent!r} is not in {tree_name}")
    return parent


def parse_each(
    entries: Iterable[Any], parse_one: Callable[[int, Any], ImportedSession], skipped: list[str] | None
) -> Iterator[ImportedSession]:
    """``parse_one(number, entry)`` for each entry (numbered from 1), lazily: an entry
    is read only when the session before it has been taken, so a caller that writes
    each session before asking for the next holds one conversation at a time. With
    ``skipped`` given, an entry that raises FormatError is left out and its message
    appended."""
    for number, entry in enumerate(entries, 1):
        try:
            session = parse_one(number, entry)
        except FormatError as e:
            if skipped is None:
                raise InvalidEntry(str(e)) from None
            skipped.append(str(e))
            continue
        yield session


NO_RESULT = "no result was recorded"


def answer_open_calls(session: ImportedSession) -> None:
    """Give every tool call the source left unanswered (an aborted turn, a
    compaction, a call the next call replaced) a synthesised tool message,
    placed right before the conversation moves on, so each branch is one the
    API accepts. The payload says ``"synthesised": true``; nothing is invented
    where the source simply ends (a leaf). A tool message that answers no open
    call becomes a ``note``. See ``OpenCalls`` for the rule."""
    children: dict[str | None, list[ImportedNode]] = {}
    ids = {node.id for node in session.nodes}
    for node in session.nodes:
        children.setdefault(node.parent_id if node.parent_id in ids else None, []).append(node)
    calls = OpenCalls(str(session.metadata.get("source") or "import"))
    added: list[ImportedNode] = []
    queue = list(children.get(None, []))
    for node in queue:  # parents first; a cycle is never reached (bulk refuses it)
        queue.extend(children.get(node.id, []))
        added.extend(calls.add(node)[:-1])
    session.nodes.extend(added)


class OpenCalls:
    """The rule of ``answer_open_calls`` for nodes that arrive one at a time, parents
    first (a streamed import): ``add(node)`` returns the node, re-parented under
    the synthesised answers when the conversation moves on from open calls, and
    those answers before it. A tool message that answers no call still open on
    its chain (output no message asked for, a second answer, a call id the file
    lost) becomes a ``note`` ``{"source", "type": "tool_output", ...the message}``,
    so every branch passes ``verify``. It remembers only the chains that still
    have open calls, never a payload."""

    def __init__(self, source: str) -> None:
        self.source = source  # the format, named in the notes made of orphan tool output
        # node id -> (the calls open after it, the created_at of the node that left them open)
        self._open: dict[str, tuple[calls.Open, str]] = {}
        self._answers: dict[str, str] = {}  # node id -> the last answer synthesised under it

    def add(self, node: ImportedNode) -> list[ImportedNode]:
        out: list[ImportedNode] = []
        held = self._open.get(node.parent_id) if node.parent_id is not None else None
        step = calls.advance(held[0] if held else None, node)
        if step.stray is not None:
            node.kind, node.payload = "note", {"source": self.source, "type": "tool_output", **node.payload}
        if step.left and node.parent_id is not None and held is not None:
            # the conversation moves on: answer what is still open first
            last = self._answers.get(node.parent_id)
            if last is None:
                last = node.parent_id
                for call_id in step.left:
                    answer = _no_result(held[0].caller, call_id, last, held[1])
                    out.append(answer)
                    last = answer.id
                self._answers[node.parent_id] = last
            node.parent_id = last
        if step.open is not None and step.open.missing:  # only chains with calls still open
            self._open[node.id] = (step.open, node.created_at)
        out.append(node)
        return out


def report_entry(
    sink: Sink,
    session_id: str,
    entry_id: str,
    node: ImportedNode,
    run: ImportedRun | None,
    calls: OpenCalls,
    leaves: dict[str, str],
) -> None:
    """Report the node a streamed file's entry became (pi, yoagent): its run first, then
    the answers ``calls`` makes up before it, then the node; it takes its parent's place
    among ``leaves`` (node id -> entry id)."""
    if run is not None:
        sink.run(session_id, run)
    leaves.pop(node.parent_id or "", None)
    leaves[node.id] = entry_id
    for out in calls.add(node):
        sink.node(session_id, out)


def _no_result(caller: str, call_id: Any, parent: str, at: str) -> ImportedNode:
    payload = chat_message("tool", NO_RESULT, tool_call_id=call_id, synthesised=True)
    return ImportedNode(stable_id("no-result", caller, str(call_id)), parent, "message", payload, at)


def leaf_branches(
    nodes: list[ImportedNode], main_head: str | None, label: dict[str, str] | None = None
) -> list[ImportedRef]:
    """``main`` at ``main_head``, and one ``leaf-<short id>`` branch per other leaf.

    ``label`` maps node ids to the short original id shown in the branch name
    (default: the node id). Names grow longer until they are unique.
    """
    parents = {n.parent_id for n in nodes}
    leaves = {n.id: (label or {}).get(n.id, n.id) for n in nodes if n.id not in parents}
    return leaf_refs(leaves, main_head, bool(nodes))


def tree_branches(nodes: list[ImportedNode], head: str | None, ids: dict[str, str]) -> list[ImportedRef]:
    """``leaf_branches`` of an export's tree: ``main`` at ``head``, else at the leaf
    created last; the other leaves named by their original ids (``ids``: original id ->
    node id)."""
    return leaf_branches(nodes, head or latest_leaf(nodes), {v: k for k, v in ids.items()})


def leaf_refs(leaves: dict[str, str], main_head: str | None, any_nodes: bool) -> list[ImportedRef]:
    """``leaf_branches`` from the leaves (node id -> original id, in input order)."""
    refs = [ImportedRef("main", main_head)] if main_head is not None or not any_nodes else []
    used = {"main"}
    for node_id, original in leaves.items():
        if node_id == main_head:
            continue
        size = 8
        name = f"leaf-{original[:size]}"
        while name in used and size < len(original):
            size += 4
            name = f"leaf-{original[:size]}"
        while name in used:
            name += "-"
        used.add(name)
        refs.append(ImportedRef(name, node_id))
    return refs


def latest_leaf(nodes: list[ImportedNode]) -> str | None:
    """The leaf created last (ties: the one that comes last in the input)."""
    parents = {n.parent_id for n in nodes}
    leaves = [(n.created_at, i, n.id) for i, n in enumerate(nodes) if n.id not in parents]
    return max(leaves)[2] if leaves else None


def resolve(aliases: dict[str, str | None], original: str | None) -> str | None:
    """Follow the aliases of skipped records up to the nearest kept one."""
    seen = set()
    while original is not None and original in aliases:
        if original in seen:  # a cycle among skipped records: treat as a root
            return None
        seen.add(original)
        original = aliases[original]
    return original


def parents_first(parent_of: dict[str, str | None], label: Callable[[str], str]) -> list[str]:
    """Keys ordered so every parent comes before its children (parents outside the
    dict are ignored); FormatError naming ``label(key)`` on a cycle."""
    order: list[str] = []
    state: dict[str, bool] = {}  # key -> finished
    for start in parent_of:
        stack = []
        key: str | None = start
        while key is not None and key in parent_of and key not in state:
            state[key] = False
            stack.append(key)
            key = parent_of[key]
        if key is not None and state.get(key) is False:
            raise FormatError(f"{label(key)}: the parent links form a cycle")
        for k in reversed(stack):
            state[k] = True
            order.append(k)
    return order


def load_json(text: str) -> Any:
    """Parse a whole JSON document; FormatError names the line and column."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise FormatError(f"line {e.lineno}: not valid JSON ({_why(e)})") from None
    except RecursionError:
        raise FormatError("JSON nested too deeply") from None


def _why(e: json.JSONDecodeError) -> str:
    return f"{e.msg.removesuffix(' at')} at column {e.colno}"


def jsonl_records(lines: Iterable[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line; FormatError on anything else.

    A line may be as big as the file (one huge payload), so it is never copied (no
    ``strip``) and not held once decoded (no ``enumerate``, whose reused result tuple
    would keep it until the next line)."""
    number = 0
    for line in lines:
        number += 1
        if not line or line.isspace():
            continue
        record = _record(line, number)
        del line
        yield number, record


def _record(line: str, number: int) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as e:
        raise FormatError(f"line {number}: not valid JSON ({_why(e)}); a truncated line?") from None
    except RecursionError:
        raise FormatError(f"line {number}: JSON nested too deeply") from None
    if not isinstance(record, dict):
        raise FormatError(f"line {number}: expected a JSON object, got {type(record).__name__}")
    return record


# How messages name the type of a decoded JSON value: in the file's terms, not Python's.
_JSON_NAMES = {
    dict: "an object",
    list: "an array",
    str: "a string",
    bool: "true or false",
    int: "an integer",
    float: "a number",
    type(None): "null",
}


def require(value: Any, types: type | tuple[type, ...], where: str, field_name: str) -> Any:
    """``value`` when it has one of ``types``, else a FormatError naming the field and
    both types: ``line 3: 'payload' should be an object, got a string``."""
    wanted = _tuple(types)
    if not isinstance(value, wanted) or isinstance(value, bool) and bool not in wanted:
        names = [_JSON_NAMES.get(t, t.__name__) for t in wanted]
        if int in wanted and float in wanted:  # JSON has one number type
            names.remove(_JSON_NAMES[int])
        raise FormatError(f"{where}: {field_name!r} should be {' or '.join(names)}, got {json_type(value)}")
    return value


def optional(record: dict[str, Any], key: str, types: type | tuple[type, ...], where: str) -> Any:
    """``record[key]``, or None when the field is absent or null; FormatError naming
    ``where`` and the field when it holds another type (a list where an id belongs
    would otherwise fail later as an unhashable value, far from the file)."""
    value = record.get(key)
    return None if value is None else require(value, types, where, key)


def stored_text(text: str | None, where: str, field_name: str) -> str | None:
    """``text`` when a store can keep it (``names.check_text``: no NUL, no lone
    surrogate), else a FormatError naming ``where``, found while reading, not when written."""
    try:
        return check_text(text, repr(field_name))
    except InvalidPayload as e:
        raise FormatError(f"{where}: {e}") from None


def json_type(value: Any) -> str:
    """The JSON name of a decoded value's type: ``an object``, ``a string``, ..."""
    return _JSON_NAMES.get(type(value), type(value).__name__)


def _tuple(types: type | tuple[type, ...]) -> tuple[type, ...]:
    return types if isinstance(types, tuple) else (types,)


def cover_from_root(nodes: list[ImportedNode], summary: ImportedNode, last_id: str | None) -> None:
    """Give an imported compaction summary the span it stands for (``compaction``): from
    the root of its path to ``last_id`` (the last node the tool summarised away). Nothing
    is added when ``last_id`` is not on the summary's path."""
    parents = {n.id: n.parent_id for n in nodes}
    path: list[str] = []
    current = summary.parent_id
    while current is not None and current in parents:
        path.append(current)
        current = parents[current]
    path.reverse()
    if last_id in path:
        last = path.index(last_id)
        record = SummaryPayload.from_payload(summary.payload)
        summary.payload = record.spanning(path[0], last_id, last + 1).to_payload()
