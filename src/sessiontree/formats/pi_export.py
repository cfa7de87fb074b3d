"""A session as a pi session file (JSONL, version 3): the inverse of ``pi.stream_pi``.

Contract: ``export_pi(store, session_id, branch=None)`` yields the lines (each
ending in a newline) of one pi file holding the whole tree, forks included, or
with ``branch`` only the path to that ref. Importing the file back
(``pi.stream_pi``) gives the same node ids, parents, kinds, messages and tool
pairing, the same ``main`` head, the other leaves as ``leaf-`` branches, the
checkpoints and the title:
- the header is ``{"type": "session", "version": 3, "id": <session id>, ...}``
  (``cwd`` and ``parentSession`` from the session's metadata); entry ids are node ids;
- ``user``/``assistant``/``tool`` messages become ``message`` entries as pi writes
  them (content blocks, ``toolCall`` with object arguments, the run's model,
  provider, usage and stop reason; ``toolResult`` with the tool's name);
- what pi's own entries became comes back as them (``compaction``,
  ``branch_summary``, ``model_change``, ``thinking_level_change``); every other node
  (system messages, pauses, decisions, tool markers, notes, sessiontree's summaries)
  is a ``custom`` entry ``{"customType": "sessiontree", "data": {"kind", "payload"}}``:
  extension state, which pi keeps in its tree but never sends to a model, and which
  the pi importer turns back into the node;
- checkpoints are ``label`` entries and the title a ``session_info`` entry, after
  every node, chained from ``main``'s head: pi carries on from the last entry, and
  so does the importer's ``main``. When ``main``'s head has children a ``custom``
  entry (``sessiontree.head``) marks it.
Refused (``FormatError``): a branch other than ``main`` that ends where the tree goes
on (``Outgoing.check_branches``); two checkpoints on one node (a pi entry has one label).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..bulk import ImportedNode
from ..errors import FormatError
from ..kinds import SummaryPayload
from .common import stable_id
from .outgoing import Outgoing, line, ms, reply_blocks, text

if TYPE_CHECKING:
    from ..store import Store

CUSTOM_TYPE = "sessiontree"  # a node pi cannot hold, kept as extension state
HEAD_TYPE = "sessiontree.head"  # where main's head is, when it is not the last node
NOTE_TYPES = ("model_change", "thinking_level_change")
# OpenAI's and Anthropic's stop reasons in pi's words (others are kept as they are).
STOP = {"tool_calls": "toolUse", "tool_use": "toolUse", "end_turn": "stop", "max_tokens": "length"}


def export_pi(store: Store, session_id: str, branch: str | None = None) -> Iterator[str]:
    tree = Outgoing.read(store, session_id, branch)
    tree.check_branches("pi")
    labels: dict[str, str] = {}
    for c in tree.session.checkpoints:
        if c.node_id in labels:
            raise FormatError(
                f"session {tree.session.id}: node {c.node_id} has two checkpoints"
                f" ({labels[c.node_id]!r}, {c.name!r}); a pi entry holds one label"
            )
        if c.node_id is not None and c.node_id in tree.parent:
            labels[c.node_id] = c.name
    return _lines(tree, labels)


def _lines(tree: Outgoing, labels: dict[str, str]) -> Iterator[str]:
    s = tree.session
    header: dict[str, Any] = {"type": "session", "version": 3, "id": s.id, "timestamp": s.created_at}
    header["cwd"] = s.metadata.get("cwd") if isinstance(s.metadata.get("cwd"), str) else ""
    if isinstance(s.metadata.get("parentSession"), str):
        header["parentSession"] = s.metadata["parentSession"]
    yield line(header)
    for n in tree.ordered():
        yield line(_entry(tree, n))
    # pi appends every entry under the one before: the trailing ones keep main's head.
    last, at = tree.main, s.created_at
    tail = [("label", {"targetId": node, "label": name}) for node, name in labels.items()]
    if s.title:
        tail.append(("session_info", {"name": s.title}))
    if not tail and tree.main is not None and tree.children.get(tree.main):
        tail.append(("custom", {"customType": HEAD_TYPE}))
    for kind, fields in tail:
        eid = stable_id("pi-export", s.id, kind, str(fields.get("targetId") or ""))
        yield line({"type": kind, "id": eid, "parentId": last, "timestamp": at, **fields})
        last = eid


def _entry(tree: Outgoing, n: ImportedNode) -> dict[str, Any]:
    head = {"id": n.id, "parentId": tree.parent[n.id], "timestamp": n.created_at}
    p = n.payload
    if n.kind == "message" and p.get("role") in ("user", "assistant", "tool"):
        return {"type": "message", **head, "message": _message(tree, n)}
    if p.get("source") == "pi":
        if n.kind == "note" and p.get("type") in NOTE_TYPES:
            return {"type": p["type"], **head, **{k: v for k, v in p.items() if k not in ("source", "type")}}
        if n.kind == "summary" and p.get("type") == "compaction":
            said = SummaryPayload.from_node(n).summary
            fields = {"summary": said, "firstKeptEntryId": p.get("first_kept_entry_id")}
            return {"type": "compaction", **head, **fields, "tokensBefore": p.get("tokens_before")}
        if n.kind == "summary" and p.get("type") == "branch_summary" and set(p) <= _BRANCH_SUMMARY:
            said = SummaryPayload.from_node(n).summary
            return {"type": "branch_summary", **head, "fromId": p.get("from_id"), "summary": said}
    return {"type": "custom", "customType": CUSTOM_TYPE, **head, "data": {"kind": n.kind, "payload": p}}


_BRANCH_SUMMARY = {"source", "type", "summary", "from_id"}


def _message(tree: Outgoing, n: ImportedNode) -> dict[str, Any]:
    p, at = n.payload, ms(n.created_at)
    role = p["role"]
    if role == "user":
        return {
            "role": "user",
            "content": [{"type": "text", "text": text(p.get("content"))}],
            "timestamp": at,
        }
    if role == "tool":
        return {
            "role": "toolResult",
            "toolCallId": p.get("tool_call_id"),
            "toolName": p.get("name") or tree.call_name(p.get("tool_call_id")),
            "content": [{"type": "text", "text": text(p.get("content"))}],
            "isError": False,
            "timestamp": at,
        }
    blocks, calls = reply_blocks(p, "toolCall", "arguments")
    run = tree.run_of(n)
    usage = dict(run.usage) if run is not None else {}
    for ours, theirs in (("input_tokens", "input"), ("output_tokens", "output")):
        value = usage.pop(ours, 0)
        usage.setdefault(theirs, value)
    stop = run.finish_reason if run is not None and run.finish_reason else ("toolUse" if calls else "stop")
    provider = (run.provider if run is not None else None) or ""
    return {
        "role": "assistant",
        "content": blocks,
        "api": "anthropic-messages" if provider == "anthropic" else "openai-completions",
        "provider": provider,
        "model": (run.model if run is not None else None) or "",
        "usage": usage,
        "stopReason": STOP.get(stop, stop),
        "timestamp": at,
    }
