"""Claude Code session transcripts (``~/.claude/projects/<project>/<session>.jsonl``).

Contract: ``parse_claude_code(lines)`` returns one ``ImportedSession``. Records
are linked by ``uuid``/``parentUuid``; what becomes of each record:
- ``user`` with text: a ``user`` message (text blocks joined, images as
  ``[image]``). ``user`` with ``tool_result`` blocks: one ``tool`` message per
  block, with ``tool_call_id``. A compaction summary (``isCompactSummary``)
  becomes a ``summary`` marker.
- ``assistant``: Claude Code writes one record per content block, all with
  the same ``message.id``, each the child of the one before; consecutive
  records of one message are merged into ONE assistant message (text joined,
  ``tool_use`` blocks as ``tool_calls``; ``thinking`` blocks are dropped).
  Model, usage and stop reason become a run.
- Parallel tool results hang off different records of one merged message;
  they are chained one after another in file order, so they do not fork.
- ``system`` records become ``note`` markers in the chain (they never reach a
  model, and they sit on the line, so they fork nothing).
- Skipped, with their children re-attached to the nearest kept ancestor:
  ``progress`` (hook output, which would otherwise fork every tool call),
  sidechain records (sub-agent conversations), and every record without a
  ``uuid`` (``queue-operation``, ``file-history-snapshot``, ``summary``; the
  latter gives the title).
- A ``parentUuid`` that is not in the file (a resumed session's first record)
  makes a new root; the missing ids are listed in the metadata.
- ``main`` is the path to the node of the last record; every other leaf gets a
  branch ``leaf-<first 8 chars of its uuid>``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..bulk import ImportedNode, ImportedSession
from ..errors import FormatError
from ..ids import now
from .common import (
    block_text,
    chat_message,
    iso,
    jsonl_records,
    keep_or_derive,
    leaf_branches,
    make_run,
    parents_first,
    stable_id,
    tool_call,
)

KEPT = {"user", "assistant", "system"}


def parse_claude_code(lines: Iterable[str]) -> ImportedSession:
    records = {}  # uuid -> (line number, record)
    meta: dict[str, Any] = {"source": "claude-code"}
    title = None
    for number, rec in jsonl_records(lines):
        if rec.get("type") == "summary" and isinstance(rec.get("summary"), str):
            title = rec["summary"]
        uid = rec.get("uuid")
        if uid is None:
            continue
        if not isinstance(uid, str) or not uid:
            raise FormatError(f"line {number}: 'uuid' should be a string")
        if uid in records:
            raise FormatError(f"line {number}: uuid {uid} appears twice")
        for key in ("sessionId", "cwd", "version", "gitBranch"):
            if key not in meta and isinstance(rec.get(key), str):
                meta[key] = rec[key]
        records[uid] = (number, rec)
    if not records:
        raise FormatError("no Claude Code records (lines with a 'uuid') in the input")
    return _Builder(records, meta, title).build()


class _Builder:
    def __init__(
        self, records: dict[str, tuple[int, dict[str, Any]]], meta: dict[str, Any], title: str | None
    ) -> None:
        self.records = records
        raw_id = meta.get("sessionId") or stable_id("claude-code", *sorted(records)[:1])
        self.scope = ("claude-code", raw_id)
        first_time = iso(records[next(iter(records))][1].get("timestamp"))
        self.session = ImportedSession(
            keep_or_derive(raw_id, "claude-code"), title, meta, first_time or now()
        )
        self.node_of: dict[str, str | None] = {}  # record uuid -> node it ends at (None: root)
        self.by_id: dict[str, ImportedNode] = {}
        self.group: dict[str, str] = {}  # assistant node id -> its message.id
        self.owner: dict[str, str] = {}  # tool node -> the assistant whose calls it answers
        self.tail: dict[str, str] = {}  # assistant node -> last tool message answering it
        self.texts: dict[str, list[str]] = {}
        self.dangling: list[str] = []

    def build(self) -> ImportedSession:
        parent_of = {u: self._parent_uuid(r) for u, (_, r) in self.records.items()}
        for uid in parents_first(parent_of, lambda u: f"line {self.records[u][0]}"):
            number, rec = self.records[uid]
            parent_uuid = parent_of[uid]
            if parent_uuid is not None and parent_uuid not in self.records:
                self.dangling.append(parent_uuid)
                parent_uuid = None
            parent = self.node_of.get(parent_uuid) if parent_uuid else None
            self.node_of[uid] = self._record(uid, number, rec, parent)
        for node_id, parts in self.texts.items():
            payload = self.by_id[node_id].payload
            text = "\n\n".join(p for p in parts if p.strip())
            payload["content"] = text or (None if payload.get("tool_calls") else "")
        last = list(self.records)[-1]
        if self.dangling:
            self.session.metadata["dangling_parents"] = sorted(set(self.dangling))
        if self.session.title is None:
            self.session.title = self._first_prompt()
        originals = {self._id(u): u for u in self.records if self.node_of[u] == self._id(u)}
        self.session.branches = leaf_branches(self.session.nodes, self.node_of[last], originals)
        return self.session

    def _parent_uuid(self, rec: dict[str, Any]) -> str | None:
        parent = rec.get("parentUuid") or rec.get("logicalParentUuid")
        return parent if isinstance(parent, str) else None

    def _id(self, uid: str, part: int = 0) -> str:
        return keep_or_derive(uid, *self.scope) if part == 0 else stable_id(*self.scope, uid, str(part))

    def _add(self, node: ImportedNode) -> str:
        self.session.nodes.append(node)
        self.by_id[node.id] = node
        return node.id

    def _record(self, uid: str, number: int, rec: dict[str, Any], parent: str | None) -> str | None:
        """Add the nodes of one record; return the node its children hang from."""
        kind = rec.get("type")
        if kind not in KEPT or rec.get("isSidechain"):
            return parent  # skipped: children re-attach to the nearest kept ancestor
        at = iso(rec.get("timestamp")) or self.session.created_at
        where = f"line {number}"
        if kind == "system":
            payload = {
                "source": "claude-code",
                "type": "system",
                "subtype": rec.get("subtype"),
                "content": rec.get("content"),
                "level": rec.get("level"),
            }
            return self._add(ImportedNode(self._id(uid), parent, "note", payload, at, source=where))
        msg = rec.get("message")
        if not isinstance(msg, dict):
            raise FormatError(f"{where}: a {kind} record needs a 'message' object")
        if kind == "assistant":
            return self._assistant(uid, msg, parent, at, where)
        return self._user(uid, rec, msg, parent, at, where)

    def _assistant(self, uid: str, msg: dict[str, Any], parent: str | None, at: str, where: str) -> str:
        content = msg.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
        message_id = msg.get("id")
        if parent is not None and message_id and self.group.get(parent) == message_id:
            node_id = parent  # another block of the same message: merge
        else:
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
            self._add(
                ImportedNode(
                    node_id,
                    parent,
                    "message",
                    chat_message("assistant", None),
                    at,
                    run.id if run else None,
                    source=where,
                )
            )
            self.texts[node_id] = []
            if message_id:
                self.group[node_id] = message_id
        payload = self.by_id[node_id].payload
        for block in blocks:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text":
                self.texts[node_id].append(str(block.get("text") or ""))
            elif block.get("type") == "tool_use":
                payload.setdefault("tool_calls", []).append(
                    tool_call(str(block.get("id")), str(block.get("name")), block.get("input") or {})
                )
        return node_id

    def _user(
        self, uid: str, rec: dict[str, Any], msg: dict[str, Any], parent: str | None, at: str, where: str
    ) -> str:
        content = msg.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
        others = [b for b in blocks if not (isinstance(b, dict) and b.get("type") == "tool_result")]
        part = 0
        node_id = parent
        if results and parent is not None:
            owner = self.owner.get(parent, parent)
            node_id = self.tail.get(owner, parent)  # chain parallel results, do not fork
        for block in results:
            tool = chat_message(
                "tool", block_text(block.get("content")), tool_call_id=str(block.get("tool_use_id"))
            )
            node_id = self._add(ImportedNode(self._id(uid, part), node_id, "message", tool, at, source=where))
            part += 1
            if parent is not None:
                owner = self.owner.get(parent, parent)
                self.owner[node_id], self.tail[owner] = owner, node_id
        if others or not results:
            text = block_text(others)
            kind, payload = (
                ("summary", {"summary": text, "source": "claude-code"})
                if rec.get("isCompactSummary")
                else ("message", chat_message("user", text))
            )
            return self._add(ImportedNode(self._id(uid, part), node_id, kind, payload, at, source=where))
        assert node_id is not None  # results is not empty here, and each one added a node
        return node_id

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
