"""pi coding-agent session files (JSONL, version 3; 2 and 1 are read too).

Contract: ``parse_pi(lines)`` returns one ``ImportedSession``. Line 1 is the
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
  of a target wins; a cleared label removes it); ``session_info`` -> the
  session title (the last one wins); ``custom`` (extension state) and unknown
  types are skipped. Skipped entries create no node: entries hanging from
  them re-attach to the nearest kept ancestor, so they fork nothing.
- ``main`` is the path to the last entry of the file (pi's leaf when it opens
  the file); every other leaf gets a branch ``leaf-<first 8 chars of its id>``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..bulk import ImportedNode, ImportedRef, ImportedSession
from ..errors import FormatError
from ..ids import now
from .common import (
    block_text,
    chat_message,
    cover_from_root,
    iso,
    jsonl_records,
    keep_or_derive,
    leaf_branches,
    make_run,
    parents_first,
    resolve,
    token_usage,
    tool_call,
)

SKIPPED = {"label", "session_info", "custom"}
# Entries that need no other entry to convert (compaction and branch_summary
# name other entries): converted as they are read.
EARLY = {"message", "custom_message", "model_change", "thinking_level_change"}
NODE_TYPES = {
    "message",
    "compaction",
    "branch_summary",
    "custom_message",
    "model_change",
    "thinking_level_change",
}


def parse_pi(lines: Iterable[str]) -> ImportedSession:
    records = jsonl_records(lines)
    first = next(records, None)
    if first is None:
        raise FormatError("the file is empty (expected a pi session header)")
    number, header = first
    if header.get("type") != "session":
        raise FormatError(f"line {number}: not a pi session header (expected type 'session')")
    version = header.get("version", 1)
    if not isinstance(version, int) or version > 3:
        raise FormatError(
            f"line {number}: unsupported pi session version {version!r} (versions 1 to 3 are supported)"
        )
    raw_id = str(header.get("id") or "")
    if not raw_id:
        raise FormatError(f"line {number}: the header has no session 'id'")
    created = iso(header.get("timestamp")) or now()

    def node_id(eid: str) -> str:
        return keep_or_derive(eid, "pi", raw_id)

    entries: dict[str, tuple[int, dict[str, Any]]] = {}
    parent_of: dict[str, str | None] = {}
    previous = None
    for number, entry in records:
        if version < 2:  # linear: give ids the way pi's migration does
            entry = {**entry, "id": f"v1-{number}", "parentId": previous}
        eid, parent = entry.get("id"), entry.get("parentId")
        if not isinstance(eid, str) or not eid:
            raise FormatError(f"line {number}: an entry needs an 'id' string")
        if parent is not None and not isinstance(parent, str):
            raise FormatError(f"line {number}: 'parentId' should be a string or null")
        if eid in entries:
            raise FormatError(f"line {number}: entry id {eid!r} appears twice")
        if entry.get("type") in EARLY:  # converted now, so the raw entry is not kept
            at = iso(entry.get("timestamp")) or created
            entry = {
                "type": entry["type"],
                "converted": _convert(entry, {}, node_id(eid), at, f"line {number}"),
            }
        entries[eid], parent_of[eid], previous = (number, entry), parent, eid
    for eid, parent in parent_of.items():
        if parent is not None and parent not in entries:
            raise FormatError(f"line {entries[eid][0]}: parent {parent!r} is not in the file")
    meta = {"source": "pi", "original_id": raw_id, "version": version}
    meta.update({k: header[k] for k in ("cwd", "parentSession") if k in header})
    session = ImportedSession(keep_or_derive(raw_id, "pi"), None, meta, created)
    ids = {eid: node_id(eid) for eid in entries}
    aliases: dict[str, str | None] = {}
    labels: dict[str, str | None] = {}  # target entry -> label
    for eid in parents_first(parent_of, lambda e: f"line {entries[e][0]}"):
        number, entry = entries[eid]
        kind = entry.get("type")
        if kind == "session_info" and isinstance(entry.get("name"), str):
            session.title = entry["name"]
        elif kind == "label" and isinstance(entry.get("targetId"), str):
            label = entry.get("label")
            labels.pop(entry["targetId"], None)  # re-insert: the last label's order counts
            labels[entry["targetId"]] = label.strip() if isinstance(label, str) else None
        if kind not in NODE_TYPES:
            aliases[eid] = parent_of[eid]
            continue
        parent = resolve(aliases, parent_of[eid])
        at = iso(entry.get("timestamp")) or session.created_at
        converted = entry.get("converted") or _convert(entry, ids, ids[eid], at, f"line {number}")
        node_kind, payload, run = converted
        if run:
            session.runs.append(run)
        session.nodes.append(
            ImportedNode(
                ids[eid],
                ids[parent] if parent else None,
                node_kind,
                payload,
                at,
                run.id if run else None,
                source=f"line {number}",
            )
        )
    _cover_compactions(session.nodes, ids)
    head = resolve(aliases, previous)
    originals = {v: k for k, v in ids.items()}
    session.branches = leaf_branches(session.nodes, ids[head] if head else None, originals)
    session.checkpoints = _checkpoints(labels, aliases, ids, {b.name for b in session.branches})
    return session


def _cover_compactions(nodes: list[ImportedNode], ids: dict[str, str]) -> None:
    """A compaction stands for its path from the root to the entry before its first kept
    one, as pi builds a model's context."""
    by_id = {n.id: n for n in nodes}
    for node in nodes:
        if node.kind != "summary" or node.payload.get("type") != "compaction":
            continue
        kept = by_id.get(node.payload.get("first_kept_entry_id") or "")
        if kept is not None and kept.parent_id is not None:
            cover_from_root(nodes, node, kept.parent_id)


def _checkpoints(
    labels: dict[str, str | None], aliases: dict[str, str | None], ids: dict[str, str], taken: set[str]
) -> list[ImportedRef]:
    refs = []
    for target, label in labels.items():
        node = resolve(aliases, target) if target in ids else None
        if not label or node is None:
            continue
        name = label[:200]
        if name in taken:
            name = f"label-{node[:8]}-{label}"[:200]
        taken.add(name)
        refs.append(ImportedRef(name, ids[node]))
    return refs


def _mapped(ids: dict[str, str], value: Any) -> Any:
    """The node id an entry id became; anything else (None, a stray number) unchanged."""
    return ids.get(value, value) if isinstance(value, str) else value


def _convert(
    entry: dict[str, Any], ids: dict[str, str], node_id: str, at: str, where: str
) -> tuple[str, dict[str, Any], Any]:
    """(kind, payload, run or None) of one entry that becomes a node."""
    kind = entry.get("type")
    if kind == "compaction":
        first = entry.get("firstKeptEntryId")
        return (
            "summary",
            {
                "source": "pi",
                "type": "compaction",
                "summary": entry.get("summary"),
                "first_kept_entry_id": _mapped(ids, first),
                "tokens_before": entry.get("tokensBefore"),
            },
            None,
        )
    if kind == "branch_summary":
        origin = entry.get("fromId")
        return (
            "summary",
            {
                "source": "pi",
                "type": "branch_summary",
                "summary": entry.get("summary"),
                "from_id": _mapped(ids, origin),
            },
            None,
        )
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
        run = make_run(
            node_id,
            at,
            model=msg.get("model"),
            provider=msg.get("provider"),
            usage=token_usage(msg.get("usage"), "input", "output"),
            finish_reason=msg.get("stopReason"),
        )
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
