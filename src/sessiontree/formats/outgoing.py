"""What the exports to other agents' formats share: a session's tree as they walk it.

Contract:
- ``Outgoing.read(store, session_id, branch=None)`` reads one session as one
  consistent snapshot (``bulk.read_session``; never more than that session) and
  holds its nodes in creation order, parents first, with ``branch`` given only the nodes on that
  ref's path (then ``main`` is its head). Tool answers the importers synthesised
  (``common.answer_open_calls``) are left out where the same importer would make
  them again, with the same id, from the file, and nodes of the kinds in ``markers``
  that have children: their children hang from their parent.
- ``main`` is the head the file must end on (the other heads a file holds are its
  leaves). ``check_branches(format)`` refuses (``FormatError``)
  a branch other than ``main`` whose head is not a leaf: a file of a format that
  names no branches cannot hold it (export that branch with ``-b`` instead).
- ``call_name(call_id)`` is the tool a call named (tool results of these formats
  carry it), ``ms(iso)`` a timestamp in milliseconds, ``text(content)`` the text of a
  message's content (a list of parts joined as the importers join them).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from .. import bulk
from ..bulk import ImportedNode, ImportedRun, ImportedSession
from ..errors import FormatError
from .common import NO_RESULT, block_text, parents_first, stable_id

if TYPE_CHECKING:
    from ..store import Store


@dataclass
class Outgoing:
    session: ImportedSession
    nodes: list[ImportedNode]  # parents first
    main: str | None
    parent: dict[str, str | None] = field(default_factory=dict)  # node id -> parent in the file
    children: dict[str | None, list[ImportedNode]] = field(default_factory=dict)
    runs: dict[str, ImportedRun] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)  # tool call id -> tool name

    @classmethod
    def read(
        cls, store: Store, session_id: str, branch: str | None = None, markers: frozenset[str] = frozenset()
    ) -> Outgoing:
        s = bulk.read_session(store, store.resolve_session_id(session_id))
        nodes = s.nodes
        main = next((b.node_id for b in s.branches if b.name == "main"), None)
        if branch is not None:
            on_path = {n.id for n in store.session(s.id).path(branch)}
            nodes = [n for n in nodes if n.id in on_path]
            main = nodes[-1].id if nodes else None
            s.branches = [b for b in s.branches if b.node_id == main]
            s.checkpoints = [c for c in s.checkpoints if c.node_id in on_path]
        out = cls(s, [], main, runs={r.id: r for r in s.runs})
        by_id = {n.id: n for n in nodes}
        # Creation order, parents first: the order the agents write their own files in.
        created = sorted(nodes, key=lambda n: n.created_at)
        nodes = [by_id[i] for i in parents_first({n.id: n.parent_id for n in created}, str)]
        parents = {n.parent_id for n in s.nodes}
        for n in nodes:
            up = n.parent_id
            while up is not None and up not in out.parent:  # left out: its parent instead
                left = by_id.get(up)
                up = left.parent_id if left is not None else None
            if n.id in parents and (n.kind in markers or _regenerated(n, up, by_id)):
                continue
            out.parent[n.id] = up
            out.nodes.append(n)
            out.children.setdefault(up, []).append(n)
            if n.kind == "message":
                for call in n.payload.get("tool_calls") or []:
                    if isinstance(call, dict):
                        name = (call.get("function") or {}).get("name")
                        out.names[str(call.get("id"))] = str(name or "")
        if main is not None and main not in out.parent:
            main = out.parent.get(main) if main in by_id else None
        out.main = main
        return out

    def check_branches(self, format: str) -> None:
        for b in self.session.branches:
            if b.name == "main" or b.node_id is None or b.node_id == self.main:
                continue
            if self.children.get(b.node_id):
                raise FormatError(
                    f"session {self.session.id}: branch {b.name!r} ends at node {b.node_id}, which has"
                    f" children; a {format} file names no branches and keeps only its leaves"
                    f" (export it alone with -b {b.name})"
                )

    def call_name(self, call_id: Any) -> str:
        return self.names.get(str(call_id), "")

    def run_of(self, n: ImportedNode) -> ImportedRun | None:
        """The run that made a node, if the session holds it."""
        return self.runs.get(n.run_id) if n.run_id else None

    def ordered(self) -> Iterator[ImportedNode]:
        """The nodes parents first, ``main``'s head last when it is a leaf (a file's last
        record is where its agent carries on)."""
        last = None
        for n in self.nodes:
            if n.id == self.main and not self.children.get(n.id):
                last = n
                continue
            yield n
        if last is not None:
            yield last


def _regenerated(n: ImportedNode, parent: str | None, by_id: dict[str, ImportedNode]) -> bool:
    """Whether ``n`` (not a leaf) is an answer an import synthesised for a call its file
    left open, which importing the export makes again, with the same id, in the same place."""
    p = n.payload
    if not (n.kind == "message" and p.get("synthesised") and p.get("content") == NO_RESULT):
        return False
    caller = parent
    while caller is not None and by_id[caller].payload.get("role") != "assistant":  # markers too
        caller = by_id[caller].parent_id
    return caller is not None and n.id == stable_id("no-result", caller, str(p.get("tool_call_id")))


def ms(at: str) -> int:
    """An ISO timestamp as milliseconds since the epoch (0 when it is none)."""
    try:
        moment = datetime.fromisoformat(at.replace("Z", "+00:00"))
    except (AttributeError, ValueError):
        return 0
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def text(content: Any) -> str:
    """A message's content as text: a string as it is, a list of parts as the importers
    read it, anything else as JSON."""
    if content is None:
        return ""
    if isinstance(content, str | list):
        return block_text(content)
    return json.dumps(content, ensure_ascii=False)


def arguments(call: dict[str, Any]) -> Any:
    """A tool call's arguments as a JSON value (they are stored as a JSON string)."""
    raw = (call.get("function") or {}).get("arguments")
    if not isinstance(raw, str):
        return raw if raw is not None else {}
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def reply_blocks(
    payload: dict[str, Any], call_type: str, arguments_key: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """An assistant message as the agents' files write it: its content blocks (its text,
    then one ``call_type`` block a tool call, the arguments under ``arguments_key``) and
    its tool calls."""
    blocks: list[dict[str, Any]] = []
    if text(payload.get("content")):
        blocks.append({"type": "text", "text": text(payload.get("content"))})
    calls = [c for c in payload.get("tool_calls") or [] if isinstance(c, dict)]
    for call in calls:
        name = (call.get("function") or {}).get("name")
        blocks.append({"type": call_type, "id": call.get("id"), "name": name, arguments_key: arguments(call)})
    return blocks, calls


def line(record: dict[str, Any]) -> str:
    """One JSONL record, compact, with a newline (a lone surrogate as a ``\\u`` escape)."""
    try:
        out = json.dumps(record, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        out.encode("utf-8")
    except UnicodeEncodeError:
        out = json.dumps(record, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return out + "\n"
