"""pydantic-ai's ``ConversationStore`` on a sessiontree store (the ``pydantic-ai`` extra).

Contract:
- ``SessiontreeConversationStore(store)`` implements the five primitives of
  ``pydantic_ai.conversation_store.ConversationStore`` and ``read_history`` in one path read;
  everything else (``save``, ``load``, ``branch``, ``fork``, ``delete``) is pydantic-ai's own.
- A conversation is a branch. A new conversation gets a session whose id is its
  ``conversation_id`` and whose branch ``main`` it is; a fork is a branch
  ``conversation-<id>`` of the session it forked from (its entries are shared, not copied),
  found through an empty session of its id whose metadata names that branch.
- An entry is the node with the entry's own id (``append_many(ids=)``): its payload is the
  chat projection, the pydantic-ai message kept whole in ``payload["raw"]["pydantic_ai"]``
  (never sent to a model). A request that is several chat messages (several tool returns)
  is several nodes in a chain, the entry the last; the others carry ``raw.pydantic_ai.part_of``.
- The branch head is the record: a ``note`` child of the record's ``head_id`` entry, or a
  ``pause`` while the run waits on approvals, whose id is the record's ``revision``. So
  ``expected_revision`` is the branch's compare-and-set, and ``sessiontree pending`` /
  ``approve`` / the inbox see pydantic-ai approvals; ``deferred_tool_results`` turns a
  decision into pydantic-ai's ``DeferredToolResults``, and the next save continues under it.
- The tips a record lists in ``branches`` (histories the conversation left, which
  pydantic-ai's ``branch(from_entry=)`` may go back to) are on no branch's path: each is
  pinned (``Session.pin``) while a record of the session lists it, so ``prune`` keeps it.
- ``delete_record`` deletes the branch (and a fork's empty session) and gives up its pins:
  the entries stay in the tree until ``prune`` finds them on no branch, as pydantic-ai lets
  a backend decide.
The core never imports this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Sequence
from typing import Any

from pydantic import TypeAdapter
from pydantic_ai import DeferredToolResults, ToolApproved, ToolDenied
from pydantic_ai import messages as pm
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationEntry,
    ConversationRecord,
    ConversationStore,
)

from ..decisions import parse_decision
from ..errors import BranchMoved, Conflict, NotFound
from ..ids import new_id
from ..kinds import DecisionPayload, MarkerCall, PausePayload
from ..model import RAW, Node
from ..session import Session
from ..steps import Edit, Reject
from ..store import Store

KIND = "pydantic_ai"
_records: TypeAdapter[ConversationRecord] = TypeAdapter(ConversationRecord)
_message: TypeAdapter[pm.ModelMessage] = TypeAdapter(pm.ModelMessage)


class SessiontreeConversationStore(ConversationStore):
    """A persistent, branching ``ConversationStore`` on ``store`` (SQLite or PostgreSQL)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        # One Store is one connection on SQLite: its calls are taken one at a time.
        self._lock = threading.RLock()

    async def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        def locked() -> Any:
            with self._lock:
                return fn(*args, **kwargs)

        return await asyncio.to_thread(locked)

    # -- the primitives ------------------------------------------------------

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        return await self._call(self._st_record, conversation_id)

    async def read_records(
        self, *, scope: str | None = None, limit: int | None = None
    ) -> Sequence[ConversationRecord]:
        return await self._call(self._st_records, scope, limit)

    async def write_record(
        self,
        record: ConversationRecord,
        *,
        new_entries: Sequence[ConversationEntry] = (),
        expected_revision: str | None,
    ) -> None:
        await self._call(self._st_write, record, list(new_entries), expected_revision)

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        await self._call(self._st_delete, conversation_id, expected_revision)

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        return await self._call(self._st_entry, entry_id)

    async def read_history(self, head_id: str | None, *, limit: int | None = None) -> list[ConversationEntry]:
        return await self._call(self._st_history, head_id, limit)

    # -- the work, in one thread ------------------------------------------------

    def _locate(self, conversation_id: str) -> tuple[Session, str] | None:
        """(the session holding the conversation's entries, its branch), or None."""
        try:
            home = self.store.session(conversation_id)
        except NotFound:
            return None
        if home.id != conversation_id:  # a prefix of another conversation's id
            return None
        where = home.metadata.get(KIND)
        if not isinstance(where, dict):
            return None
        family = home if where["session"] == home.id else self.store.session(where["session"])
        if where["branch"] not in {b.name for b in family.branches()}:
            return None
        return family, where["branch"]

    @staticmethod
    def _record_node(session: Session, branch: str) -> Node | None:
        head = session.head(branch)
        if head is not None and head.kind == "decision":  # decided by a human: the pause is the record
            head = session.node(head.parent_id) if head.parent_id else None
        return head

    def _st_record(self, conversation_id: str) -> ConversationRecord | None:
        located = self._locate(conversation_id)
        if located is None:
            return None
        node = self._record_node(*located)
        if node is None:
            return None
        return _record_of(node)

    def _st_records(self, scope: str | None, limit: int | None) -> list[ConversationRecord]:
        found = []
        for info in self.store.sessions():
            record = self._st_record(info.id)
            if record is not None and (scope is None or record.scope == scope):
                found.append(record)
        found.sort(key=lambda r: r.updated_at, reverse=True)
        return found[:limit]

    def _st_write(
        self, record: ConversationRecord, entries: list[ConversationEntry], expected: str | None
    ) -> None:
        cid = record.conversation_id
        try:
            with self.store.transaction():
                located = self._locate(cid)
                current = None if located is None else self._record_node(*located)
                if (current.id if current else None) != expected:
                    raise ConversationConflict(cid)
                session, branch = located or self._new_home(record)
                head = session.head(branch) if located else None
                parents = {e.id for e in entries}
                if record.head_id is not None and record.head_id not in parents:
                    try:
                        if self.store.node(record.head_id).session_id != session.id:
                            raise ConversationConflict(cid)
                    except NotFound:
                        raise ConversationConflict(cid) from None
                for entry in entries:
                    under = entry.parent_id
                    # Answers to a decided pause go under the decision, keeping it on the path.
                    if (
                        head is not None
                        and head.kind == "decision"
                        and current
                        and current.parent_id == under
                    ):
                        under = head.id
                    self._append(session, _projection(entry), under)
                self._append(session, [_record_payload(record)], record.head_id, kind=_record_kind(record))
                left = _record_of(current).branches if current is not None else []
                self._repin(session, branch, left, record.branches)
                if located is not None:
                    session.move(branch, record.revision, expect_head=head)
                else:
                    session.fork(branch, record.revision)
        except (Conflict, BranchMoved) as e:
            if isinstance(e, ConversationConflict):
                raise
            raise ConversationConflict(cid) from e

    def _new_home(self, record: ConversationRecord) -> tuple[Session, str]:
        """Where a new conversation's branch goes: its own session, or, for a fork, the
        session of the conversation it forked from (whose entries it shares)."""
        cid = record.conversation_id
        family = None
        if record.forked_at is not None:
            family = self.store.session(self.store.node(record.forked_at).session_id)
        try:
            home = self.store.session(cid)
            existing = home.id == cid
        except NotFound:
            existing = False
        if existing and not isinstance(home.metadata.get(KIND), dict):
            raise ConversationConflict(cid)  # a session of sessiontree's own by that id: never written into
        if family is None:
            if existing:  # deleted before (its branch gone), created again
                return home, "main"
            home = self.store.create_session(metadata={KIND: {"session": cid, "branch": "main"}}, id=cid)
            return home, "main"
        branch = f"conversation-{cid}"
        if not existing:
            self.store.create_session(metadata={KIND: {"session": family.id, "branch": branch}}, id=cid)
        return family, branch

    def _append(
        self, session: Session, payloads: list[dict[str, Any]], parent: str | None, kind: str = "message"
    ) -> None:
        """A chain under ``parent`` (a root when None), its last node the id ``payloads[-1]``
        names; no branch moves."""
        ids = [p.pop("_id", None) or new_id() for p in payloads]
        if parent is not None:
            session.append_many(payloads, branch=None, parent=parent, kind=kind, ids=ids)
            return
        # A new root needs a branch to stand on: a scratch one, gone before the transaction ends.
        scratch = f"pydantic-ai-root-{ids[-1]}"
        session.append_many(payloads, branch=scratch, kind=kind, ids=ids)
        session.delete_branch(scratch)

    def _repin(self, session: Session, branch: str, before: list[str], now: list[str]) -> None:
        """Pin the tips a conversation's record lists in ``branches`` (on no branch's path,
        but pydantic-ai may branch back to them), and unpin those it no longer lists
        unless another conversation of the session still does."""
        for tip in set(now) - set(before):
            session.pin(tip)
        gone = set(before) - set(now)
        if not gone:
            return
        for other in session.branches():
            node = self._record_node(session, other.name) if other.name != branch else None
            if node is not None and RAW in node.payload and KIND in node.payload[RAW]:
                gone -= set(_record_of(node).branches)
        for tip in gone:
            with contextlib.suppress(NotFound):
                session.unpin(tip)

    def _st_delete(self, conversation_id: str, expected: str) -> None:
        with self.store.transaction():
            located = self._locate(conversation_id)
            current = None if located is None else self._record_node(*located)
            if current is None or current.id != expected:
                raise ConversationConflict(conversation_id)
            session, branch = located  # type: ignore[misc]
            self._repin(session, branch, _record_of(current).branches, [])
            session.delete_branch(branch)
            if session.id != conversation_id:  # a fork's empty session
                self.store.delete_session(conversation_id, permanently=True)

    def _st_entry(self, entry_id: str) -> ConversationEntry:
        try:
            node = self.store.node(entry_id)
        except NotFound:
            raise LookupError(entry_id) from None
        entry = _entry(node)
        if entry is None:
            raise LookupError(entry_id)
        return entry

    def _st_history(self, head_id: str | None, limit: int | None) -> list[ConversationEntry]:
        if head_id is None:
            return []
        try:
            node = self.store.node(head_id)
        except NotFound:
            raise LookupError(head_id) from None
        path = self.store.session(node.session_id).path(node.id)
        entries = [e for e in map(_entry, path) if e is not None]
        return entries if limit is None else entries[len(entries) - limit :] if limit else []


def deferred_tool_results(store: Store, conversation_id: str) -> DeferredToolResults | None:
    """The human's decision on a conversation's paused approvals (made with ``sessiontree
    approve``, the inbox or ``Session.append(kind="decision")``) as pydantic-ai's
    ``DeferredToolResults``; None while undecided (or not paused). Approve is ``True``,
    Edit ``ToolApproved(override_args=...)``, Reject ``ToolDenied(reason)``."""
    located = SessiontreeConversationStore(store)._locate(conversation_id)
    if located is None:
        return None
    head = located[0].head(located[1])
    if head is None or head.kind != "decision":
        return None
    approvals: dict[str, bool | ToolApproved | ToolDenied] = {}
    for call_id, entry in DecisionPayload.from_node(head).decisions.items():
        decision = parse_decision(call_id, entry.to_payload())
        if isinstance(decision, Edit):
            approvals[call_id] = ToolApproved(override_args=decision.arguments)
        elif isinstance(decision, Reject):
            approvals[call_id] = ToolDenied(decision.reason or "The tool call was rejected.")
        else:
            approvals[call_id] = True
    return DeferredToolResults(approvals=approvals)


# -- the mapping -------------------------------------------------------------


def _entry(node: Node) -> ConversationEntry | None:
    raw = node.payload.get(RAW)
    kept = raw.get(KIND) if isinstance(raw, dict) else None
    if not isinstance(kept, dict) or "message" not in kept:
        return None
    return ConversationEntry(
        id=node.id, parent_id=kept["parent_id"], message=_message.validate_python(kept["message"])
    )


def _record_of(node: Node) -> ConversationRecord:
    return _records.validate_python(node.payload[RAW][KIND]["record"])


def _record_kind(record: ConversationRecord) -> str:
    requests = record.deferred_tool_requests
    return "pause" if requests is not None and requests.approvals else "note"


def _record_payload(record: ConversationRecord) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "_id": record.revision,
        RAW: {KIND: {"record": _records.dump_python(record, mode="json")}},
    }
    requests = record.deferred_tool_requests
    if requests is not None and requests.approvals:
        calls = (MarkerCall(c.tool_call_id, c.tool_name, c.args_as_json_str()) for c in requests.approvals)
        # after the record's own keys, as a pause always had them
        payload = PausePayload(calls=tuple(calls), extra=payload, order=(*payload, "calls")).to_payload()
    return payload


def _projection(entry: ConversationEntry) -> list[dict[str, Any]]:
    """The chat messages an entry is (the last one carries the entry), so that what a
    model is sent, search, the view and ``verify`` read is the conversation as chat."""
    message = entry.message
    chat: list[dict[str, Any]] = []
    if isinstance(message, pm.ModelResponse):
        text = "".join(p.content for p in message.parts if isinstance(p, pm.TextPart))
        calls = [
            {
                "id": p.tool_call_id,
                "type": "function",
                "function": {"name": p.tool_name, "arguments": p.args_as_json_str()},
            }
            for p in message.parts
            if isinstance(p, pm.ToolCallPart)
        ]
        chat.append(
            {"role": "assistant", "content": text or None, **({"tool_calls": calls} if calls else {})}
        )
    else:
        for part in message.parts:
            if isinstance(part, pm.SystemPromptPart):
                chat.append({"role": "system", "content": part.content})
            elif isinstance(part, pm.UserPromptPart):
                content = (
                    part.content
                    if isinstance(part.content, str)
                    else json.dumps([c if isinstance(c, str) else str(c) for c in part.content])
                )
                chat.append({"role": "user", "content": content})
            elif isinstance(part, pm.ToolReturnPart):
                chat.append(
                    {"role": "tool", "tool_call_id": part.tool_call_id, "content": part.model_response_str()}
                )
            elif isinstance(part, pm.RetryPromptPart):
                if part.tool_name is not None:
                    chat.append(
                        {"role": "tool", "tool_call_id": part.tool_call_id, "content": part.model_response()}
                    )
                else:
                    chat.append({"role": "user", "content": part.model_response()})
        if not chat:
            chat.append({"role": "user", "content": None})
    for part_of in chat[:-1]:
        part_of[RAW] = {KIND: {"part_of": entry.id}}
    chat[-1]["_id"] = entry.id
    chat[-1][RAW] = {
        KIND: {"parent_id": entry.parent_id, "message": _message.dump_python(message, mode="json")}
    }
    return chat
