"""Claude Code session transcripts (``~/.claude/projects/<project>/<session>.jsonl``).

Contract: ``parse_claude_code(lines)`` returns one ``ImportedSession``. Records
are linked by ``uuid``/``parentUuid``; what becomes of each record:
- ``user`` with text: a ``user`` message (text blocks joined, images as
  ``[image]``). ``user`` with ``tool_result`` blocks: one ``tool`` message per
  block, with ``tool_call_id``. A compaction summary (``isCompactSummary``)
  becomes a ``summary`` node covering its path up to its parent (Claude Code
  starts a new root, the ``compact_boundary`` note, at a compaction), so the
  projection sends it as the model saw it.
- ``assistant``: Claude Code writes one record per content block, all with
  the same ``message.id``; a later block may hang under an earlier block's
  tool result. All records of one message are merged into ONE assistant
  message (text joined, ``tool_use`` blocks as ``tool_calls``; ``thinking``
  blocks are dropped). Model, usage and stop reason become a run.
- Tool results are chained right after the message that made the calls, in
  call order; what hangs from the message or its results hangs from the last
  result, so nothing forks. A result answering no call in the file stays where
  it hangs (``parse_file`` then makes it a note, see ``common.OpenCalls``); a
  call or result id that is not a string is refused.
- ``system`` records become ``note`` markers in the chain (they never reach a
  model, and they sit on the line, so they fork nothing); one of subtype
  ``sessiontree`` (what ``claude_code_export`` writes for a node Claude Code cannot
  hold) becomes that node again.
- Skipped, with their children re-attached to the nearest kept ancestor:
  ``progress`` (hook output, which would otherwise fork every tool call),
  sidechain records (sub-agent turns inside a session), and every record without a
  ``uuid`` (``queue-operation``, ``file-history-snapshot``, ``summary``; the
  latter gives the title).
- A file whose records are ALL sidechain is a sub-agent transcript: it is
  imported as its own session (id derived from the parent session and the
  ``agentId``; metadata ``parent_session``, ``agentId``).
- A ``parentUuid`` that is not in the file (a resumed session's first record)
  makes a new root; the missing ids are listed in the metadata.
- ``main`` is the path to the node of the last record; every other leaf gets a
  branch ``leaf-<first 8 chars of its uuid>``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..bulk import ImportedNode, ImportedRun, ImportedSession
from ..errors import FormatError
from ..ids import now
from ..model import KINDS
from .common import (
    block_text,
    chat_message,
    cover_from_root,
    iso,
    jsonl_records,
    keep_or_derive,
    leaf_branches,
    make_run,
    optional,
    parents_first,
    require,
    stable_id,
    tool_call,
)

KEPT = {"user", "assistant", "system"}
# The fields the conversion reads. Everything else (``toolUseResult``, a second copy of
# each tool's output; ``progress`` data; display fields) is dropped as each line is
# read, so it is never held for the whole session.
LINKS = {"type", "uuid", "parentUuid", "logicalParentUuid", "isSidechain", "agentId", "timestamp"}
READ = LINKS | {"message", "subtype", "content", "level", "isCompactSummary", "sessiontree"}
SUBTYPE = "sessiontree"  # see ``claude_code_export``: a node Claude Code cannot hold


@dataclass(slots=True)
class _Record:
    """What the first pass keeps of a record with a ``uuid``: its links, and the fields
    the conversion reads as compact JSON text (decoded again when its node is made).
    Text is about the size of the line less what is dropped; the decoded dicts would
    be several times that, for the whole session at once."""

    number: int
    parent: str | None  # parentUuid, else logicalParentUuid
    sidechain: bool
    text: str


def parse_claude_code(lines: Iterable[str]) -> ImportedSession:
    records: dict[str, _Record] = {}
    meta: dict[str, Any] = {"source": "claude-code"}
    title = None
    agent_id = first_time = None
    for number, rec in jsonl_records(lines):
        where = f"line {number}"
        kind = optional(rec, "type", str, where)
        if kind == "summary" and isinstance(rec.get("summary"), str):
            title = rec["summary"]
        uid = optional(rec, "uuid", str, where)
        if uid is None:
            continue
        if not uid:
            raise FormatError(f"{where}: 'uuid' should not be empty")
        for link in ("parentUuid", "logicalParentUuid"):
            optional(rec, link, str, where)
        if uid in records:
            raise FormatError(f"line {number}: uuid {uid} appears twice")
        for key in ("sessionId", "cwd", "version", "gitBranch"):
            if key not in meta and isinstance(rec.get(key), str):
                meta[key] = rec[key]
        if not records:
            first_time = rec.get("timestamp")
        if agent_id is None and isinstance(rec.get("agentId"), str):
            agent_id = rec["agentId"]
        keep = READ if kind in KEPT else LINKS
        parent = rec.get("parentUuid") or rec.get("logicalParentUuid")
        text = json.dumps({k: v for k, v in rec.items() if k in keep}, ensure_ascii=False)
        up = parent if isinstance(parent, str) else None
        records[uid] = _Record(number, up, bool(rec.get("isSidechain")), text)
        del rec  # only the text is held until the second pass
    if not records:
        raise FormatError("no Claude Code records (lines with a 'uuid') in the input")
    agent = all(r.sidechain for r in records.values())
    if agent:  # a sub-agent transcript (<session>/subagents/agent-*.jsonl): its own session
        parent_session = meta.pop("sessionId", None)
        meta.update(parent_session=parent_session, agentId=agent_id or "")
        meta["sessionId"] = stable_id(
            "claude-code", str(parent_session), "agent", agent_id or sorted(records)[0]
        )
    return _Builder(records, meta, title, iso(first_time), agent).build()


Anchor = tuple[str, str] | None  # where children hang: ("node", id), ("tail", message node) or a root


class _Builder:
    """Two passes: records become nodes whose parents are anchors, then anchors
    become node ids. A message's "tail" is its last tool result in call order (or
    the message itself), known only once every record has been read."""

    def __init__(
        self,
        records: dict[str, _Record],
        meta: dict[str, Any],
        title: str | None,
        first_time: str | None,
        agent: bool = False,
    ) -> None:
        self.records = records
        self.agent = agent  # a sub-agent transcript: its sidechain records are the conversation
        raw_id = meta.get("sessionId") or stable_id("claude-code", *sorted(records)[:1])
        self.scope = ("claude-code", raw_id)
        self.session = ImportedSession(
            keep_or_derive(raw_id, "claude-code"), title, meta, first_time or now()
        )
        self.anchor: dict[str, Anchor] = {}  # record uuid -> where its children hang
        self.parent: dict[str, Anchor] = {}  # node id -> its parent, as an anchor
        self.by_id: dict[str, ImportedNode] = {}
        self.message_node: dict[str, str] = {}  # message.id -> its assistant node
        self.call_owner: dict[str, str] = {}  # tool_use id -> assistant node making the call
        self.results: dict[str, dict[str, list[str]]] = {}  # assistant node -> call id -> tool nodes
        self.runs: dict[str, ImportedRun] = {}  # assistant node -> its run
        self.tail: dict[str, str] = {}  # assistant node -> its last tool result
        self.texts: dict[str, list[str]] = {}
        self.dangling: list[str] = []
        self.restored: set[str] = set()  # nodes sessiontree's export kept as they were

    def build(self) -> ImportedSession:
        parent_of = {u: r.parent for u, r in self.records.items()}
        for uid in parents_first(parent_of, lambda u: f"line {self.records[u].number}"):
            record = self.records[uid]
            number, rec = record.number, json.loads(record.text)
            record.text = ""  # decoded: what is left of it becomes this record's nodes
            parent_uuid = parent_of[uid]
            if parent_uuid is not None and parent_uuid not in self.records:
                self.dangling.append(parent_uuid)
                parent_uuid = None
            parent = self.anchor.get(parent_uuid) if parent_uuid else None
            self.anchor[uid] = self._record(uid, number, rec, parent)
        self._place_results()
        for node in self.session.nodes:
            node.parent_id = self._resolve(self.parent[node.id])
        for node in self.session.nodes:  # a summary stands for everything before it
            if node.kind == "summary" and node.id not in self.restored:
                cover_from_root(self.session.nodes, node, node.parent_id)
        for node_id, parts in self.texts.items():
            payload = self.by_id[node_id].payload
            text = "\n\n".join(p for p in parts if p.strip())
            payload["content"] = text or (None if payload.get("tool_calls") else "")
        last = list(self.records)[-1]
        if self.dangling:
            self.session.metadata["dangling_parents"] = sorted(set(self.dangling))
        if self.session.title is None:
            self.session.title = self._first_prompt()
        originals = {self._id(u): u for u in self.records if self._id(u) in self.by_id}
        self.session.branches = leaf_branches(self.session.nodes, self._resolve(self.anchor[last]), originals)
        return self.session

    def _place_results(self) -> None:
        """Chain each message's tool results after it, in the order of its calls."""
        for node_id, by_call in self.results.items():
            previous = node_id
            for call in self.by_id[node_id].payload.get("tool_calls", []):
                for tool_id in by_call.pop(call["id"], []):
                    self.parent[tool_id] = ("node", previous)
                    previous = tool_id
            self.tail[node_id] = previous

    def _resolve(self, anchor: Anchor) -> str | None:
        if anchor is None:
            return None
        kind, node_id = anchor
        return self.tail.get(node_id, node_id) if kind == "tail" else node_id

    def _id(self, uid: str, part: int = 0) -> str:
        return keep_or_derive(uid, *self.scope) if part == 0 else stable_id(*self.scope, uid, str(part))

    def _add(self, node: ImportedNode, parent: Anchor) -> str:
        self.session.nodes.append(node)
        self.by_id[node.id] = node
        self.parent[node.id] = parent
        return node.id

    def _record(self, uid: str, number: int, rec: dict[str, Any], parent: Anchor) -> Anchor:
        """Add the nodes of one record; return where its children hang."""
        kind = rec.get("type")
        if kind not in KEPT or rec.get("isSidechain") and not self.agent:
            return parent  # skipped: children re-attach to the nearest kept ancestor
        at = iso(rec.get("timestamp")) or self.session.created_at
        where = f"line {number}"
        if kind == "system" and rec.get("subtype") == SUBTYPE:
            node_kind, payload = _kept_node(rec, where)
            node = ImportedNode(self._id(uid), None, node_kind, payload, at, source=where)
            self.restored.add(node.id)
            return ("node", self._add(node, parent))
        if kind == "system":
            payload = {
                "source": "claude-code",
                "type": "system",
                "subtype": rec.get("subtype"),
                "content": rec.get("content"),
                "level": rec.get("level"),
            }
            node = ImportedNode(self._id(uid), None, "note", payload, at, source=where)
            return ("node", self._add(node, parent))
        msg = rec.get("message")
        if not isinstance(msg, dict):
            raise FormatError(f"{where}: a {kind} record needs a 'message' object")
        if kind == "assistant":
            return ("tail", self._assistant(uid, msg, parent, at, where))
        return self._user(uid, rec, msg, parent, at, where)

    def _assistant(self, uid: str, msg: dict[str, Any], parent: Anchor, at: str, where: str) -> str:
        """Every record of one ``message.id`` merges into one node, wherever it hangs."""
        content = msg.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
        message_id = msg.get("id")
        node_id = self.message_node.get(message_id) if isinstance(message_id, str) else None
        if node_id is None:
            node_id = self._id(uid)
            run = make_run(
                node_id,
                at,
                model=msg.get("model"),
                provider="anthropic",
                usage=msg.get("usage"),
                finish_reason=msg.get("stop_reason"),
            )
            if run:
                self.session.runs.append(run)
                self.runs[node_id] = run
            node = ImportedNode(
                node_id,
                None,
                "message",
                chat_message("assistant", None),
                at,
                run.id if run else None,
                source=where,
            )
            self._add(node, parent)
            self.texts[node_id] = []
            if isinstance(message_id, str):
                self.message_node[message_id] = node_id
        else:
            self._update_run(node_id, msg)
        payload = self.by_id[node_id].payload
        for block in blocks:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text":
                self.texts[node_id].append(str(block.get("text") or ""))
            elif block.get("type") == "tool_use":
                call_id = require(block.get("id"), str, f"{where}, tool_use block", "id")
                payload.setdefault("tool_calls", []).append(
                    tool_call(call_id, str(block.get("name")), block.get("input") or {})
                )
                self.call_owner.setdefault(call_id, node_id)
        return node_id

    def _update_run(self, node_id: str, msg: dict[str, Any]) -> None:
        """A later streaming record of a message carries the fuller usage: the last one wins."""
        run = self.runs.get(node_id)
        if run is None:
            return
        if isinstance(msg.get("usage"), dict):
            run.usage = msg["usage"]
        if msg.get("stop_reason"):
            run.finish_reason = str(msg["stop_reason"])

    def _user(
        self, uid: str, rec: dict[str, Any], msg: dict[str, Any], parent: Anchor, at: str, where: str
    ) -> Anchor:
        content = msg.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
        others = [b for b in blocks if not (isinstance(b, dict) and b.get("type") == "tool_result")]
        anchor = parent
        for part, block in enumerate(results):
            call_id = require(block.get("tool_use_id"), str, f"{where}, tool_result block", "tool_use_id")
            tool = chat_message("tool", block_text(block.get("content")), tool_call_id=call_id)
            node = ImportedNode(self._id(uid, part), None, "message", tool, at, source=where)
            owner = self.call_owner.get(call_id)
            if owner is None:  # answers no call in the file: it stays where it hangs, as a note
                anchor = ("node", self._add(node, anchor))
                continue
            self._add(node, None)  # placed after its message by _place_results
            self.results.setdefault(owner, {}).setdefault(call_id, []).append(node.id)
            anchor = ("tail", owner)
        if others or not results:
            text = block_text(others)
            kind, payload = (
                ("summary", {"summary": text, "source": "claude-code"})
                if rec.get("isCompactSummary")
                else ("message", chat_message("user", text))
            )
            node = ImportedNode(self._id(uid, len(results)), None, kind, payload, at, source=where)
            return ("node", self._add(node, anchor))
        return anchor

    def _first_prompt(self) -> str | None:
        for node in self.session.nodes:
            content = node.payload.get("content")
            if (
                node.payload.get("role") == "user"
                and isinstance(content, str)
                and content.strip()
                and not content.startswith("<")
            ):
                line = content.strip().splitlines()[0]
                return line[:77] + "..." if len(line) > 80 else line
        return None


def _kept_node(rec: dict[str, Any], where: str) -> tuple[str, dict[str, Any]]:
    """(kind, payload) of a ``system`` record of subtype ``sessiontree``."""
    node = rec.get(SUBTYPE)
    if not (isinstance(node, dict) and node.get("kind") in KINDS and isinstance(node.get("payload"), dict)):
        raise FormatError(
            f"{where}: a system record of subtype {SUBTYPE!r} needs {SUBTYPE!r}:"
            f" {{'kind': one of {', '.join(sorted(KINDS))}, 'payload': an object}}"
        )
    return node["kind"], node["payload"]
