"""The OpenAI Agents SDK's ``Session`` on a sessiontree store (``openai-agents`` 0.24).

Contract:
- ``SessiontreeSession(session_id, store, *, branch="main", strict=False,
  session_settings=None)`` is an ``agents.memory.Session``. The SDK's ``session_id`` is
  a key of the application's, not a sessiontree id: it names the sessiontree session
  whose id is ``session_uuid(session_id)`` (a UUIDv5 of it), found by one exact lookup of
  that id (never a prefix match), and created on first use with ``session_id`` as its
  title and ``{"openai_agents": {"session_id": ...}}`` as its metadata.
- ``add_items`` groups what it is given: consecutive model-side items (one model
  response: reasoning, text, parallel function calls, hosted tool calls) become one
  assistant node; a ``function_call_output`` one ``tool`` node; a user, system or
  developer message one node of that role; anything else (an ``item_reference``, a
  computer call's output...) one ``note`` node. Every node keeps its items verbatim in
  ``payload["raw"]["openai_agents"]`` (kept, searched, exported, never sent to a model:
  ``model.sendable``); the rest of the payload is the chat-shaped projection that
  sessiontree's own loop, search, ``compare`` and the view read. The items of one call
  are written in one transaction: all of them or none.
- ``get_items(limit)`` returns the items on the branch's path in order, exactly as they
  were added (as JSON keeps them); the last ``limit`` (or ``session_settings.limit``).
  A new list; the dicts in it are shared with the store's cache (as ``messages()``'s
  are, and as the SDK's reference session shares its own), so treat them as read-only.
- Concurrency: by default a write lands at whatever the branch head is inside its own
  transaction, so concurrent ``add_items`` calls (threads, tasks, processes) all land, as
  the SDK expects. ``strict=True`` makes every write a compare-and-set on the head this
  object last read or wrote: an interleaved run gets ``BranchMoved`` and nothing is
  written.
- ``pop_item`` and ``clear_session`` move pointers and lose nothing: a popped node stays
  in the tree, off the branch (``prune`` may collect it later); a clear leaves the
  checkpoint ``<branch>-cleared-N`` at the old head. A real delete is
  ``delete_session(permanently=True)``. ``fork(name)`` is one row.
- Approvals: ``await session.pause(result)`` records a run's interruptions as one
  sessiontree ``pause`` node holding the SDK's ``RunState`` (its own ``to_json``), which
  ``pending``, ``decide``/``sessiontree approve`` and the inbox see. ``await
  resume(store, pause, agent, **runner_kwargs)`` rebuilds the ``RunState`` from the
  decision (``approve``/``reject`` per call) and returns ``Runner.run``'s result; it
  claims the decision with a compare-and-set first, so a second resume (in any
  process) is refused and a tool runs once. ``Edit`` has no SDK counterpart
  (``RunState.approve`` takes no arguments): ``decide`` refuses an edit that changes
  the arguments, and ``resume`` refuses one, before anything is written.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from typing import Any, cast

from agents import Agent, Runner, RunResult
from agents.items import TResponseInputItem
from agents.memory.session_settings import SessionSettings, resolve_session_limit
from agents.run_state import RunState

from ..decisions import Approve, Edit, Reject, decided
from ..errors import BranchMoved, Conflict, InvalidPayload, NotFound
from ..kinds import MarkerCall, NotePayload, PausePayload
from ..model import RAW, Node
from ..names import check_name
from ..session import Ref, Session
from ..store import Store
from . import claim_decision, decision_at

KIND = "openai_agents"
"""The key of the SDK's own items under a payload's ``raw``, and of the session metadata."""

NAMESPACE = uuid.UUID("5d0a6c1e-3f59-4c43-9a57-0b7e2f1c8a61")
"""The UUIDv5 namespace of ``session_uuid``: fixed, so every process maps a key alike."""

_INPUT_ROLES = frozenset({"user", "system", "developer"})
_NOT_MODEL = frozenset({"item_reference", "mcp_approval_response", "compaction"})


def session_uuid(session_id: str) -> str:
    """The sessiontree session id an SDK ``session_id`` names."""
    return str(uuid.uuid5(NAMESPACE, session_id))


class SessiontreeSession:
    """An Agents SDK session stored as one branch of a sessiontree session."""

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        store: Store,
        *,
        branch: str = "main",
        strict: bool = False,
        session_settings: SessionSettings | None = None,
    ) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise NotFound(f"an Agents SDK session id must be non-empty text, not {session_id!r}")
        self.session_id = session_id
        self.store = store
        self.branch = check_name(branch, new=False)
        self.strict = strict
        self.session_settings = session_settings
        self._session: Session | None = None
        self._lock = threading.RLock()  # one object may be used from several threads
        self._seen: str | None | object = _UNSEEN  # strict: the head last read or written
        self._cache: tuple[str | None, list[Any]] | None = None  # (head id, its items)

    def __repr__(self) -> str:
        return f"SessiontreeSession({self.session_id!r}, branch={self.branch!r})"

    # -- the SDK's Session protocol ---------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        return await asyncio.to_thread(self.get_items_sync, limit)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        await asyncio.to_thread(self.add_items_sync, items)

    async def pop_item(self) -> TResponseInputItem | None:
        return await asyncio.to_thread(self.pop_item_sync)

    async def clear_session(self) -> None:
        await asyncio.to_thread(self.clear_session_sync)

    # -- the same, for callers without asyncio ------------------------------

    def get_items_sync(self, limit: int | None = None) -> list[TResponseInputItem]:
        """``get_items`` without asyncio."""
        limit = resolve_session_limit(limit, self.session_settings)
        with self._lock:
            head, items = self._path_items()
            self._seen = head
        if limit is not None:
            items = items[-limit:] if limit > 0 else []
        return list(items)

    def add_items_sync(self, items: list[TResponseInputItem]) -> None:
        """``add_items`` without asyncio."""
        groups = _groups(list(items))
        if not groups:
            return
        payloads = [_payload(side, group) for side, group in groups]
        with self._lock:
            session = self.tree()
            with self.store.transaction():
                before = self._check_head(session)
                written: list[Node] = []
                for kind, run in _runs(payloads):  # a chain of one kind is one append
                    written += session.append_many(run, branch=self.branch, kind=kind)
            self._wrote(before, written[-1].id, [i for n in written for i in _items_of(n)])

    def pop_item_sync(self) -> TResponseInputItem | None:
        """``pop_item`` without asyncio: the branch stops short of the last item."""
        with self._lock:
            session = self.tree()
            with self.store.transaction():
                head = self._check_head(session)
                if head is None:
                    return None
                path = session.path(head)
                holder = next((n for n in reversed(path) if _items_of(n)), None)
                if holder is None:
                    return None
                kept = _items_of(holder)[:-1]
                popped = _items_of(holder)[-1]
                new_head: str | None
                if kept:  # a sibling with the others, and the branch there
                    kind, payload = _payload(_side(kept[0]), kept)
                    if holder.parent_id is None:
                        session.delete_branch(self.branch)
                        new_head = session.append(payload, kind=kind, branch=self.branch).id
                    else:
                        new = session.append(payload, kind=kind, branch=None, parent=holder.parent_id)
                        new_head = session.move(self.branch, to=new).head_id
                elif holder.parent_id is not None:
                    new_head = session.move(self.branch, to=holder.parent_id).head_id
                else:
                    session.delete_branch(self.branch)
                    new_head = None
            self._cache = None
            self._seen = new_head
            return cast(TResponseInputItem, json.loads(json.dumps(popped)))

    def clear_session_sync(self) -> None:
        """``clear_session`` without asyncio: a checkpoint keeps the old head, then the
        branch is removed; the next ``add_items`` starts a new root."""
        with self._lock:
            session = self.tree()
            with self.store.transaction():
                head = self._check_head(session)
                if head is not None:
                    taken = {c.name for c in session.checkpoints()}
                    number = 1
                    while f"{self.branch}-cleared-{number}" in taken:
                        number += 1
                    session.checkpoint(f"{self.branch}-cleared-{number}", at=head)
                    session.delete_branch(self.branch)
            self._cache = (None, [])
            self._seen = None

    # -- the tree underneath ------------------------------------------------

    def tree(self) -> Session:
        """The sessiontree session this SDK session lives in (created on first use)."""
        with self._lock:
            if self._session is None:
                self._session = open_session(self.store, self.session_id)
            return self._session

    def fork(self, name: str, *, at: Ref | None = None) -> SessiontreeSession:
        """A new session on the new branch ``name``, forked at ``at`` (default: this
        branch's head). One row; nothing is copied."""
        session = self.tree()
        where = at if at is not None else self._head(session)
        if where is None:
            raise Conflict(f"branch {self.branch!r} of session {self.session_id!r} has no items to fork from")
        session.fork(name, at=where)
        return SessiontreeSession(
            self.session_id,
            self.store,
            branch=name,
            strict=self.strict,
            session_settings=self.session_settings,
        )

    def delete_session(self, *, permanently: bool = False) -> int:
        """Trash the whole sessiontree session (every branch); ``permanently=True`` removes
        it with all its nodes at once. Returns its node count."""
        with self._lock:
            count = self.tree().delete(permanently=permanently)
            self._session, self._cache, self._seen = None, None, _UNSEEN
            return count

    async def pause(self, result: Any, *, reason: str | None = None) -> Node:
        """Record ``result.interruptions`` as a pause node on this branch; return it."""
        return await asyncio.to_thread(self.pause_sync, result, reason=reason)

    def pause_sync(self, result: Any, *, reason: str | None = None) -> Node:
        """``pause`` without asyncio."""
        interruptions = list(getattr(result, "interruptions", None) or [])
        if not interruptions:
            raise Conflict("the run has no interruptions (nothing needs approval): there is nothing to pause")
        state = result.to_state().to_json()
        calls = tuple(MarkerCall(str(i.call_id), str(i.name), i.arguments) for i in interruptions)
        # An Edit has no SDK counterpart: ``decide`` checks edits against these schemas,
        # which only the original arguments fit, so a changing edit is refused up front.
        schemas: dict[str, Any] = {}
        for call in calls:
            schemas.setdefault(str(call.name), {"anyOf": []})["anyOf"].append({"const": _decoded(call)})
        with self._lock:
            session = self.tree()
            with self.store.transaction():
                head = self._check_head(session)
                wanted = {c.id for c in calls}
                holder = _call_holder(session, head, wanted) if head else None
                kept = {RAW: {KIND: {"run_state": state}}}
                record = PausePayload(reason or "approval needed", holder, calls, schemas, extra=kept)
                node = session.append(record.to_payload(), kind="pause", branch=self.branch)
            self._wrote(head, node.id, [])
            return node

    # -- helpers ------------------------------------------------------------

    def _head(self, session: Session) -> str | None:
        try:
            return session.branch(self.branch).head_id
        except NotFound:
            return None

    def _check_head(self, session: Session) -> str | None:
        """The branch head now (inside the write's transaction); strict: BranchMoved unless
        it is the head this object last saw."""
        head = self._head(session)
        if self.strict and self._seen is not _UNSEEN and head != self._seen:
            raise BranchMoved(self.branch, cast("str | None", self._seen), head)
        return head

    def _wrote(self, before: str | None, after: str, items: list[Any]) -> None:
        cached = self._cache
        if cached is not None and cached[0] == before:
            self._cache = (after, cached[1] + items)
        else:
            self._cache = None
        self._seen = after

    def _path_items(self) -> tuple[str | None, list[Any]]:
        """(head id, every item on the branch's path), from the cache when the head is the
        one it was made at."""
        session = self.tree()
        head = self._head(session)
        cached = self._cache
        if cached is not None and cached[0] == head:
            return cached
        items = [] if head is None else [i for n in session.path(head) for i in _items_of(n)]
        self._cache = (head, items)
        return head, items


_UNSEEN = object()


def open_session(store: Store, session_id: str) -> Session:
    """The sessiontree session of an SDK ``session_id``: one exact lookup, creating it on
    first use (a concurrent creator's session is taken when it wins the race)."""
    tree_id = session_uuid(session_id)
    for _ in range(2):
        try:
            found = Session.from_row(store.storage, store.storage.session_row(tree_id))
        except NotFound:
            try:
                return store.create_session(session_id, {KIND: {"session_id": session_id}}, id=tree_id)
            except Conflict:
                continue  # created by someone else meanwhile: read it
        if found.trashed_at is not None:
            raise Conflict(
                f"the session of {session_id!r} ({tree_id}) is in the trash:"
                " restore it (store.restore_session) or delete it permanently"
            )
        return found
    raise Conflict(f"could not open or create the session of {session_id!r} ({tree_id})")


# -- items <-> nodes -------------------------------------------------------


def _side(item: Any) -> str:
    """Which node an item goes to: "input" (a user, system or developer message), "model"
    (part of a model response), "tool" (a function call's output) or "other"."""
    kind, role = item.get("type"), item.get("role")
    if kind in (None, "message") and role in _INPUT_ROLES:
        return "input"
    if kind in (None, "message") and role == "assistant":
        return "model"
    if kind == "function_call_output":
        return "tool"
    if not isinstance(kind, str) or kind.endswith("_output") or kind in _NOT_MODEL:
        return "other"
    return "model"


def _groups(items: list[Any]) -> list[tuple[str, list[Any]]]:
    """Items as the nodes they become: one model response's items together."""
    groups: list[tuple[str, list[Any]]] = []
    for number, item in enumerate(items):
        if not isinstance(item, dict):
            raise InvalidPayload(
                "add_items takes Responses input items (JSON objects);"
                f" item {number} is a {type(item).__name__}"
            )
        side = _side(item)
        if side == "model" and groups and groups[-1][0] == "model":
            groups[-1][1].append(item)
        else:
            groups.append((side, [item]))
    return groups


def _runs(payloads: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """Consecutive payloads of one node kind together."""
    runs: list[tuple[str, list[dict[str, Any]]]] = []
    for kind, payload in payloads:
        if runs and runs[-1][0] == kind:
            runs[-1][1].append(payload)
        else:
            runs.append((kind, [payload]))
    return runs


def _text(content: Any) -> str | None:
    """Message content or a tool's output as chat text (parts joined; non-text parts named)."""
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, list):
        return json.dumps(content, ensure_ascii=False, default=str)
    parts = []
    for part in content:
        if isinstance(part, str):
            parts.append(part)
        elif isinstance(part, dict):
            text = part.get("text", part.get("refusal"))
            parts.append(text if isinstance(text, str) else f"[{part.get('type', 'part')}]")
    return "".join(parts)


def _payload(side: str, items: list[Any]) -> tuple[str, dict[str, Any]]:
    """(kind, payload) of the node holding ``items``: their chat projection plus the items."""
    raw = {RAW: {KIND: items}}
    first = items[0]
    if side == "input":
        return "message", {"role": first["role"], "content": _text(first.get("content")), **raw}
    if side == "tool":
        content = _text(first.get("output")) or ""
        return "message", {
            "role": "tool",
            "tool_call_id": str(first.get("call_id")),
            "content": content,
            **raw,
        }
    if side == "model":
        texts, calls, thoughts = [], [], []
        for item in items:
            kind = item.get("type")
            if kind in (None, "message"):
                texts.append(_text(item.get("content")) or "")
            elif kind == "function_call":
                arguments = item.get("arguments")
                if not isinstance(arguments, str):
                    arguments = json.dumps(arguments, ensure_ascii=False, default=str)
                function = {"name": str(item.get("name")), "arguments": arguments}
                calls.append({"id": str(item.get("call_id")), "type": "function", "function": function})
            elif kind == "reasoning":
                summary = item.get("summary") or []
                thoughts += [
                    s["text"] for s in summary if isinstance(s, dict) and isinstance(s.get("text"), str)
                ]
        if texts or calls:
            message: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) if texts else None}
            if calls:
                message["tool_calls"] = calls
            if thoughts:
                message["reasoning_content"] = "\n".join(thoughts)
            return "message", {**message, **raw}
    types = sorted({str(i.get("type", i.get("role"))) for i in items})
    return "note", NotePayload(type=KIND, text=f"Agents SDK item: {', '.join(types)}", extra=raw).to_payload()


def _items_of(node: Node) -> list[Any]:
    """The SDK items a node holds (none for sessiontree's own nodes: pauses, decisions)."""
    raw = node.payload.get(RAW)
    items = raw.get(KIND) if isinstance(raw, dict) else None
    return items if isinstance(items, list) else []


def _call_holder(session: Session, head: str, call_ids: set[str]) -> str | None:
    """The id of the assistant node on the path to ``head`` that made these calls."""
    for node in reversed(session.path(head)):
        calls = node.payload.get("tool_calls") if node.kind == "message" else None
        if isinstance(calls, list) and call_ids & {c.get("id") for c in calls if isinstance(c, dict)}:
            return node.id
    return None


def _decoded(call: MarkerCall | None) -> Any:
    arguments = call.arguments if call is not None else None
    try:
        return json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        return arguments


# -- resuming a decided pause ---------------------------------------------


async def resume(store: Store, pause: Ref, agent: Agent[Any], **runner_kwargs: Any) -> RunResult:
    """Carry on the SDK run a decided pause stopped: ``RunState.from_json`` with ``agent``,
    each decided call approved or rejected, then ``Runner.run(agent, state,
    session=..., **runner_kwargs)`` on the branch at the decision; its result.

    ``Conflict`` (nothing written, nothing run) when the node is not an Agents SDK pause,
    has no decision yet, was already resumed (here or in another process), no branch
    stands at its decision, or the decision edits a call's arguments.
    """
    node = store.node(pause)
    raw = node.payload.get(RAW) if node.kind == "pause" else None
    state_json = raw.get(KIND, {}).get("run_state") if isinstance(raw, dict) else None
    if not isinstance(state_json, dict):
        raise Conflict(f"node {node.id} is not an Agents SDK pause (no RunState recorded on it)")
    session = store.session(node.session_id)
    decision, branches = decision_at(session, node)
    chosen = decided(decision)
    calls = {c.id: c for c in PausePayload.from_node(node).calls}
    for call_id, answer in chosen.items():
        if isinstance(answer, Edit) and answer.arguments != _decoded(calls.get(call_id)):
            raise Conflict(
                f"pause {node.id}: the decision edits call {call_id}, and the Agents SDK cannot run a call"
                " with edited arguments (RunState.approve takes none); nothing was run"
            )
    state = await RunState.from_json(agent, state_json)
    for item in state.get_interruptions():
        chosen_answer = chosen.get(str(item.call_id))
        if isinstance(chosen_answer, Approve | Edit):  # an Edit here repeats the arguments
            state.approve(item)
        elif isinstance(chosen_answer, Reject):
            state.reject(item, rejection_message=chosen_answer.reason or None)
    foreign = (session.metadata.get(KIND) or {}).get("session_id")
    if "session" not in runner_kwargs:
        if not isinstance(foreign, str):
            raise Conflict(f"session {session.id} was not made by SessiontreeSession: pass session=")
        runner_kwargs["session"] = SessiontreeSession(foreign, store, branch=branches[0])
    # the claim: one resume per decision, whichever process is first
    note = NotePayload(type=KIND, text="resumed by the Agents SDK", extra={"decision": decision.id})
    claim_decision(session, node, decision, branches[0], note.to_payload())
    return await Runner.run(agent, state, **runner_kwargs)
