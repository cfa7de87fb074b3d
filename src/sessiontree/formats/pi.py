"""pi coding-agent session files (JSONL, version 3; 2 and 1 are read too).

Contract: ``stream_pi(lines, sink)`` reports one session to a
``bulk_stream.Sink`` as the lines are read, each node as soon as its parent
has come (an import writes them as they come: no payload is held until the
end); ``parse_pi(lines)`` collects it into one ``ImportedSession``. Line 1 is the
header (``type: session``: id, timestamp, cwd); every other line is an entry
linked by ``id``/``parentId`` (version 1 files have no ids: each entry is the
child of the one before, as pi's own migration does). Entries become:
- ``message``: user -> ``user``; assistant -> ``assistant`` (text joined,
  ``toolCall`` blocks as ``tool_calls``, thinking dropped; provider, model,
  usage and stop reason as a run); toolResult -> ``tool`` with
  ``tool_call_id``; bashExecution -> a ``user`` message ``$ command`` plus
  output (a ``note`` when excluded from context); custom/hookMessage ->
  ``user``; branchSummary/compactionSummary -> ``summary``; other roles ->
  ``note``.
- ``compaction`` -> a ``summary`` node covering its path from the root to the
  entry before ``first_kept_entry_id`` (mapped to a node id), so the projection
  sends it as pi builds a model's context; ``branch_summary`` -> a ``summary``
  marker (``from_id`` mapped).
- ``custom_message`` -> ``user``; ``model_change`` and
  ``thinking_level_change`` -> ``note`` markers.
- ``label`` -> a checkpoint named by the label at its target (the last label
  of a target wins; a cleared label removes it; a label that is no valid name or
  clashes with a branch gets a derived one, see ``_label_name``); ``session_info`` -> the
  session title (the last one wins); a ``custom`` entry of type ``sessiontree``
  (what ``pi_export`` writes for a node pi cannot hold) -> that node again;
  other ``custom`` entries (extension state) and unknown types are skipped.
  Skipped entries create no node: entries hanging from them re-attach to the
  nearest kept ancestor, so they fork nothing.
- ``main`` is the path to the last entry of the file (pi's leaf when it opens
  the file); every other leaf gets a branch ``leaf-<first 8 chars of its id>``.
- The header needs an ``id`` string, a ``timestamp`` and an integer ``version``
  from 1 to 3; a record of sessiontree's own format (``NATIVE_TYPES``) is refused:
  it is a native file that lost its header line, never a pi file to skip through.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ..bulk import ImportedNode, ImportedRef, ImportedRun, ImportedSession
from ..bulk_stream import Collector, Sink
from ..errors import Conflict, FormatError
from ..ids import now
from ..kinds import SummaryPayload
from ..model import KINDS
from ..names import MAX_NAME, check_name
from .common import (
    OpenCalls,
    block_text,
    chat_message,
    iso,
    jsonl_records,
    keep_or_derive,
    leaf_refs,
    make_run,
    optional,
    report_entry,
    resolve,
    stored_text,
    token_usage,
    tool_call,
)

CUSTOM_TYPE = "sessiontree"  # see ``pi_export``: a node pi cannot hold, as extension state
NODE_TYPES = {
    "message",
    "compaction",
    "branch_summary",
    "custom_message",
    "model_change",
    "thinking_level_change",
}
# The record types of sessiontree's own format: a native file without its header line
# has a first line that passes for a pi header, so these are refused, never skipped.
NATIVE_TYPES = {"run", "node", "branch", "checkpoint"}


def parse_pi(lines: Iterable[str]) -> ImportedSession:
    """The session of a pi file, whole (see ``stream_pi``)."""
    sink = Collector()
    stream_pi(lines, sink)
    (session,) = sink.sessions
    return session


def is_header(record: dict[str, Any]) -> bool:
    """Whether a first line is a pi session header. pi writes an id and a timestamp in
    every one; sessiontree's own session records have ``created_at`` instead."""
    return record.get("type") == "session" and "id" in record and "timestamp" in record


def stream_pi(lines: Iterable[str], sink: Sink) -> None:
    """Report the session of a pi file to ``sink``, each node as soon as its parent
    has come (open tool calls answered on the way, see ``common.OpenCalls``)."""
    records = jsonl_records(lines)
    first = next(records, None)
    if first is None:
        raise FormatError("the file is empty (expected a pi session header)")
    number, header = first
    if not is_header(header):
        raise FormatError(
            f"line {number}: not a pi session header (expected type 'session' with an 'id' and a 'timestamp')"
        )
    version = header.get("version", 1)
    if type(version) is not int or not 1 <= version <= 3:  # bool is an int: refused too
        raise FormatError(
            f"line {number}: unsupported pi session version {version!r} (versions 1 to 3 are supported)"
        )
    raw_id = optional(header, "id", str, f"line {number}")
    if not raw_id:
        raise FormatError(f"line {number}: the header has no session 'id'")
    meta = {"source": "pi", "original_id": raw_id, "version": version}
    meta.update({k: header[k] for k in ("cwd", "parentSession") if k in header})
    session = ImportedSession(keep_or_derive(raw_id, "pi"), None, meta, iso(header.get("timestamp")) or now())
    sink.session(session)
    reader = _Reader(session, lambda eid: keep_or_derive(eid, "pi", raw_id), sink)
    for number, entry in records:
        if version < 2:  # linear: give ids the way pi's migration does
            entry = {**entry, "id": f"v1-{number}", "parentId": reader.last}
        reader.read(number, entry)
    reader.finish()


class _Reader:
    """The entries of one pi file, turned into nodes as their parents come.

    It keeps every entry id (to refuse a duplicate and to tell a missing parent),
    with the entry id of its parent node (a compaction covers a path), the parents
    of skipped entries, labels, the leaves, and the entries that came before their parent;
    never a converted payload after handing it on."""

    def __init__(self, session: ImportedSession, node_id: Callable[[str], str], sink: Sink) -> None:
        self.session, self.node_id, self.sink = session, node_id, sink
        # entry id -> the entry id of its parent node once placed (None before, and for a root)
        self.seen: dict[str, str | None] = {}
        self.waiting: dict[str, list[tuple[int, dict[str, Any]]]] = {}  # parent -> entries
        self.waiting_ids: set[str] = set()
        self.aliases: dict[str, str | None] = {}  # skipped entry -> its nearest kept ancestor
        self.labels: dict[str, str | None] = {}  # target entry -> label
        self.leaves: dict[str, str] = {}  # node id -> entry id
        self.calls = OpenCalls("pi")
        self.last: str | None = None
        self.title: tuple[int, str] | None = None  # (line, title) of the last session_info

    def read(self, number: int, entry: dict[str, Any]) -> None:
        where = f"line {number}"
        kind = optional(entry, "type", str, where)
        if kind in NATIVE_TYPES:
            raise FormatError(
                f"{where}: a sessiontree {kind!r} record, not a pi entry"
                ' (a native file needs its header line, {"format": "sessiontree", "version": 1})'
            )
        eid, parent = entry.get("id"), optional(entry, "parentId", str, where)
        if not isinstance(eid, str) or not eid:
            raise FormatError(f"{where}: an entry needs an 'id' string")
        if eid in self.seen:
            raise FormatError(f"line {number}: entry id {eid!r} appears twice")
        self.seen[eid] = None
        self.last = eid
        if parent is not None and (parent not in self.seen or parent in self.waiting_ids):
            self.waiting.setdefault(parent, []).append((number, entry))
            self.waiting_ids.add(eid)
            return
        ready = [(number, entry)]
        while ready:
            number, entry = ready.pop()
            self._place(number, entry)
            later = self.waiting.pop(entry["id"], [])
            self.waiting_ids.difference_update(e["id"] for _, e in later)
            ready.extend(reversed(later))

    def _place(self, number: int, entry: dict[str, Any]) -> None:
        eid, kind = entry["id"], entry.get("type")
        if kind == "session_info" and isinstance(entry.get("name"), str):
            self.title = (number, entry["name"])
        elif kind == "label" and isinstance(entry.get("targetId"), str):
            label = entry.get("label")
            self.labels.pop(entry["targetId"], None)  # re-insert: the last label's order counts
            self.labels[entry["targetId"]] = label.strip() if isinstance(label, str) else None
        parent = resolve(self.aliases, entry.get("parentId"))
        if kind not in NODE_TYPES and not _is_kept_node(entry, f"line {number}"):
            self.aliases[eid] = parent
            return
        at = iso(entry.get("timestamp")) or self.session.created_at
        own = self.node_id(eid)
        node_kind, payload, run = _convert(entry, self._mapped, own, at, f"line {number}")
        parent_id, run_id = self.node_id(parent) if parent else None, run.id if run else None
        node = ImportedNode(own, parent_id, node_kind, payload, at, run_id, source=f"line {number}")
        self.seen[eid] = parent
        if kind == "compaction":
            self._cover(node, parent, entry.get("firstKeptEntryId"))
        report_entry(self.sink, self.session.id, eid, node, run, self.calls, self.leaves)

    def _cover(self, summary: ImportedNode, parent: str | None, first_kept: Any) -> None:
        """A compaction stands for its path from the root to the entry before its first
        kept one, as pi builds a model's context (walked through ``seen``: no payloads)."""
        kept = resolve(self.aliases, first_kept) if isinstance(first_kept, str) else None
        last = self.seen.get(kept) if kept is not None else None
        path: list[str] = []
        while parent is not None:
            path.append(parent)
            parent = self.seen.get(parent)
        path.reverse()
        if last is not None and last in path:
            record = SummaryPayload.from_payload(summary.payload)
            spanned = record.spanning(self.node_id(path[0]), self.node_id(last), path.index(last) + 1)
            summary.payload = spanned.to_payload()

    def _mapped(self, value: Any) -> Any:
        """The node id an entry id became; anything else (None, a stray number) unchanged."""
        return self.node_id(value) if isinstance(value, str) and value in self.seen else value

    def finish(self) -> None:
        if self.waiting:
            for parent, entries in self.waiting.items():
                if parent not in self.seen:
                    line = min(n for n, _ in entries)
                    raise FormatError(f"line {line}: parent {parent!r} is not in the file")
            left = min(n for entries in self.waiting.values() for n, _ in entries)
            raise FormatError(f"line {left}: the parent links form a cycle")
        head = resolve(self.aliases, self.last)
        main = self.node_id(head) if head else None
        refs = leaf_refs(self.leaves, main, bool(self.leaves))
        for ref in refs:
            self.sink.branch(self.session.id, ref)
        taken = {r.name for r in refs}
        for target, label in self.labels.items():
            node = resolve(self.aliases, target) if target in self.seen else None
            if not label or node is None:
                continue
            name = _label_name(label, node, taken)
            taken.add(name)
            self.sink.checkpoint(self.session.id, ImportedRef(name, self.node_id(node)))
        if self.title is not None:
            number, title = self.title
            self.sink.title(self.session.id, stored_text(title, f"line {number}", "name"))


def _label_name(label: str, entry_id: str, taken: set[str]) -> str:
    """The checkpoint name of a label: the label itself when it is a valid name no
    branch uses; else ``label-<target id>-<label>`` (pi labels are free text: one may
    look like an id prefix, hold a newline or clash with a branch), with what a name
    cannot hold replaced by ``_``, and a number added until it is unique."""
    if label[:MAX_NAME] not in taken and _valid_name(label[:MAX_NAME]):
        return label[:MAX_NAME]
    text = "".join(c if c.isprintable() and c != "~" else "_" for c in f"label-{entry_id[:8]}-{label}")
    name = base = text[:MAX_NAME].rstrip()
    number = 1
    while name in taken:
        number += 1
        name = f"{base[: MAX_NAME - len(str(number)) - 1]}-{number}"
    return name


def _valid_name(name: str) -> bool:
    try:
        check_name(name, "checkpoint")
    except Conflict:
        return False
    return True


def _is_kept_node(entry: dict[str, Any], where: str) -> bool:
    """Whether an entry is a node sessiontree's pi export kept as extension state
    (``pi_export``): a ``custom`` entry of type ``sessiontree`` holding its kind and payload."""
    if entry.get("type") != "custom" or entry.get("customType") != CUSTOM_TYPE:
        return False
    data = entry.get("data")
    if not (isinstance(data, dict) and data.get("kind") in KINDS and isinstance(data.get("payload"), dict)):
        raise FormatError(
            f"{where}: a {CUSTOM_TYPE!r} custom entry needs data {{'kind': one of {', '.join(sorted(KINDS))},"
            " 'payload': an object}"
        )
    return True


def assistant_run(message: dict[str, Any], node_id: str, at: str) -> ImportedRun | None:
    """The run of an assistant message as pi writes it (yoagent writes the same fields)."""
    return make_run(
        node_id,
        at,
        model=message.get("model"),
        provider=message.get("provider"),
        usage=token_usage(message.get("usage"), "input", "output"),
        finish_reason=message.get("stopReason"),
    )


def _summary(entry: dict[str, Any], **fields: Any) -> tuple[str, dict[str, Any], None]:
    """A compaction or branch summary entry as a ``summary`` node (kind, payload, no run)."""
    payload = {"source": "pi", "type": entry.get("type"), "summary": entry.get("summary"), **fields}
    return "summary", payload, None


def _convert(
    entry: dict[str, Any], mapped: Callable[[Any], Any], node_id: str, at: str, where: str
) -> tuple[str, dict[str, Any], Any]:
    """(kind, payload, run or None) of one entry that becomes a node."""
    kind = entry.get("type")
    if kind == "custom":  # a node sessiontree wrote as extension state (``_is_kept_node``)
        return entry["data"]["kind"], entry["data"]["payload"], None
    if kind == "compaction":
        first, before = mapped(entry.get("firstKeptEntryId")), entry.get("tokensBefore")
        return _summary(entry, first_kept_entry_id=first, tokens_before=before)
    if kind == "branch_summary":
        return _summary(entry, from_id=mapped(entry.get("fromId")))
    if kind == "custom_message":
        return "message", chat_message("user", block_text(entry.get("content"))), None
    if kind in ("model_change", "thinking_level_change"):
        fields = {k: v for k, v in entry.items() if k not in ("id", "parentId", "timestamp")}
        return "note", {"source": "pi", **fields}, None
    msg = entry.get("message")
    if not isinstance(msg, dict):
        raise FormatError(f"{where}: a message entry needs a 'message' object")
    return _message(msg, node_id, at)


def _message(msg: dict[str, Any], node_id: str, at: str) -> tuple[str, dict[str, Any], Any]:
    role = msg.get("role")
    content = msg.get("content")
    if role == "user" or role in ("custom", "hookMessage"):
        return "message", chat_message("user", block_text(content)), None
    if role == "assistant":
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        texts = [b.get("text") for b in blocks if isinstance(b, dict) and b.get("type") == "text"]
        calls = [
            tool_call(str(b.get("id")), str(b.get("name")), b.get("arguments") or {})
            for b in blocks
            if isinstance(b, dict) and b.get("type") == "toolCall"
        ]
        text = "\n\n".join(t for t in texts if isinstance(t, str) and t.strip())
        run = assistant_run(msg, node_id, at)
        payload = chat_message("assistant", text or (None if calls else ""), tool_calls=calls or None)
        return "message", payload, run
    if role == "toolResult":
        return (
            "message",
            chat_message("tool", block_text(content), tool_call_id=str(msg.get("toolCallId"))),
            None,
        )
    if role == "bashExecution":
        text = f"$ {msg.get('command', '')}\n{msg.get('output', '')}"
        if msg.get("excludeFromContext"):
            return "note", {"source": "pi", "type": "bashExecution", "text": text}, None
        return "message", chat_message("user", text), None
    if role in ("branchSummary", "compactionSummary"):
        return "summary", {"source": "pi", "type": role, "summary": msg.get("summary")}, None
    return "note", {"source": "pi", "message": msg}, None
