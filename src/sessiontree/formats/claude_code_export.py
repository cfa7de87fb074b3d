"""A session as a Claude Code transcript (JSONL): the inverse of ``claude_code.parse_claude_code``.

Contract: ``export_claude_code(store, session_id, branch=None)`` yields the lines
(each ending in a newline) of one transcript holding the whole tree, forks
included, or with ``branch`` only the path to that ref. Importing it back gives
the same node ids, parents, messages and tool pairing, the same ``main`` head and
the other leaves as ``leaf-`` branches:
- every record carries ``uuid`` (the node id), ``parentUuid``, ``sessionId`` (the
  session id), ``isSidechain: false``, ``userType``, ``timestamp``, and the ``cwd``,
  ``version`` and ``gitBranch`` the session's metadata kept from Claude Code;
- a ``user`` message is a ``user`` record with text content; an ``assistant``
  message one ``assistant`` record (one Anthropic message: ``text`` and ``tool_use``
  blocks, the run's model, usage and stop reason; ``model: "<synthetic>"`` without a
  run, as Claude Code marks messages no model wrote); each ``tool`` message a
  ``user`` record holding one ``tool_result`` block; the title a ``summary`` record;
- what Claude Code's own records became comes back as them (``system`` records,
  compaction summaries as ``isCompactSummary`` user records); every other node is a
  ``system`` record of subtype ``sessiontree`` carrying ``{"kind", "payload"}``,
  which the importer turns back into the node;
- Claude Code links a tool result to its call, not through what came between: the
  loop's ``tool_start``, ``pause`` and ``decision`` markers that lie between a call and
  what follows are left out (one at a head, where a run waits, is kept).
Refused (``FormatError``): a tree whose tool results do not follow their message
in call order, one result per call, with nothing else hanging between them (the
importer re-chains them so); ``main``'s head with children (Claude Code carries on
from the last record); a branch other than ``main`` that ends where the tree goes on.
Checkpoints have no place in a transcript and are not written.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..bulk import ImportedNode
from ..errors import FormatError
from ..kinds import SummaryPayload
from .outgoing import Outgoing, line, reply_blocks, text

if TYPE_CHECKING:
    from ..store import Store

SUBTYPE = "sessiontree"  # a system record holding a node Claude Code cannot hold
MARKERS = frozenset({"tool_start", "pause", "decision"})
SYSTEM_NOTE = {"source", "type", "subtype", "content", "level"}
STOP = {"tool_calls": "tool_use", "toolUse": "tool_use", "stop": "end_turn", "length": "max_tokens"}


def export_claude_code(store: Store, session_id: str, branch: str | None = None) -> Iterator[str]:
    tree = Outgoing.read(store, session_id, branch, markers=MARKERS)
    tree.check_branches("claude-code")
    sid = tree.session.id
    if tree.main is not None and tree.children.get(tree.main):
        raise FormatError(
            f"session {sid}: main's head {tree.main} has children; Claude Code carries on from a"
            " transcript's last record, which no record can follow (export -b main, or move main to a leaf)"
        )
    for n in tree.nodes:
        if n.kind == "message" and n.payload.get("role") == "assistant" and n.payload.get("tool_calls"):
            _check_results(tree, n)
    return _lines(tree)


def _check_results(tree: Outgoing, caller: ImportedNode) -> None:
    """The importer chains a message's tool results right after it in call order, and
    hangs what follows from the last: refuse a tree that would come back otherwise."""
    calls = [c.get("id") for c in caller.payload["tool_calls"] if isinstance(c, dict)]
    at, done = caller, -1
    while True:
        kids = tree.children.get(at.id, [])
        answers = [
            k for k in kids if k.payload.get("role") == "tool" and k.payload.get("tool_call_id") in calls
        ]
        if not answers:
            return
        problem = None
        if len(answers) > 1:
            problem = f"node {at.id} has {len(answers)} tool results as children"
        elif len(kids) > 1:
            problem = f"node {next(k for k in kids if k is not answers[0]).id} hangs between them"
        elif calls.index(answers[0].payload["tool_call_id"]) <= done:
            problem = f"tool result {answers[0].id} comes out of call order"
        if problem:
            raise FormatError(
                f"session {tree.session.id}: the tool results of message {caller.id} do not follow it in"
                f" call order ({problem}); a Claude Code transcript links them to their calls, and"
                " sessiontree's importer chains them so (export each branch alone with -b)"
            )
        at, done = answers[0], calls.index(answers[0].payload["tool_call_id"])


def _lines(tree: Outgoing) -> Iterator[str]:
    s = tree.session
    if s.title:
        yield line({"type": "summary", "summary": s.title, "leafUuid": tree.main})
    common: dict[str, Any] = {"isSidechain": False, "userType": "external"}
    for key in ("cwd",):
        common[key] = s.metadata.get(key) if isinstance(s.metadata.get(key), str) else ""
    common["sessionId"] = s.id
    for key in ("version", "gitBranch"):
        if isinstance(s.metadata.get(key), str):
            common[key] = s.metadata[key]
    for n in tree.ordered():
        record = {"parentUuid": tree.parent[n.id], **common, **_record(tree, n)}
        yield line({**record, "uuid": n.id, "timestamp": n.created_at})


def _record(tree: Outgoing, n: ImportedNode) -> dict[str, Any]:
    p = n.payload
    role = p.get("role") if n.kind == "message" else None
    if role == "user":
        return {"type": "user", "message": {"role": "user", "content": text(p.get("content"))}}
    if role == "tool":
        block = {
            "tool_use_id": p.get("tool_call_id"),
            "type": "tool_result",
            "content": text(p.get("content")),
        }
        return {"type": "user", "message": {"role": "user", "content": [block]}}
    if role == "assistant":
        return {"type": "assistant", "message": _assistant(tree, n)}
    if p.get("source") == "claude-code":
        summarised = SummaryPayload.from_node(n) if n.kind == "summary" else None
        if summarised is not None and set(summarised.order) <= {"source", "summary", "covers"}:
            content = summarised.summary if isinstance(summarised.summary, str) else ""
            return {"type": "user", "message": {"role": "user", "content": content}, "isCompactSummary": True}
        if n.kind == "note" and p.get("type") == "system" and set(p) <= SYSTEM_NOTE:
            return {
                "type": "system",
                "subtype": p.get("subtype"),
                "content": p.get("content"),
                "level": p.get("level"),
            }
    node = {"kind": n.kind, "payload": p}
    return {
        "type": "system",
        "subtype": SUBTYPE,
        "content": f"sessiontree {n.kind}",
        "level": "info",
        SUBTYPE: node,
    }


def _assistant(tree: Outgoing, n: ImportedNode) -> dict[str, Any]:
    blocks, calls = reply_blocks(n.payload, "tool_use", "input")
    run = tree.run_of(n)
    stop = (
        run.finish_reason if run is not None and run.finish_reason else ("tool_use" if calls else "end_turn")
    )
    usage = dict(run.usage) if run is not None else {}
    for theirs, ours in (("input_tokens", "input"), ("output_tokens", "output")):
        usage.setdefault(theirs, usage.get(ours, 0))
    return {
        "model": (run.model if run is not None else None) or "<synthetic>",
        "id": "msg_" + n.id.replace("-", ""),
        "type": "message",
        "role": "assistant",
        "content": blocks,
        "stop_reason": STOP.get(stop, stop),
        "stop_sequence": None,
        "usage": usage,
    }
