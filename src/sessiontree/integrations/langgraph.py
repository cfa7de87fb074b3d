"""LangGraph's checkpoint saver on a sessiontree store (``langgraph-checkpoint`` 4.3).

Contract:
- ``SessiontreeSaver(store, *, cas=True, serde=None)`` is a ``BaseCheckpointSaver``, sync
  and async (the async methods run the sync ones on a worker thread; one ``Store`` is
  shared by every thread LangGraph writes from).
- A thread is a session: its id is ``thread_session_id(thread_id)`` (a UUIDv5 of it, one
  exact lookup, never a prefix match), its title the thread id, its metadata
  ``{"langgraph": {"thread_id": ...}}``. A checkpoint namespace is a branch: ``main`` for
  the root graph, ``ns:<namespace>`` for a subgraph (whose first checkpoint hangs under
  the parent graph's checkpoint, so a subgraph call is a subtree). The branch follows the
  newest checkpoint put, which is what LangGraph calls the latest.
- A checkpoint is a ``note`` node whose id is ``checkpoint_node_id(session, ns,
  checkpoint_id)``; its nearest checkpoint ancestor of the same namespace is its parent
  checkpoint. Only the channels in ``new_versions`` are stored on it; a list channel that
  only grew since the parent is stored as what it appended. Messages a message channel
  appended (lists of LangChain messages) are ``message`` nodes just before the checkpoint
  (chat-shaped, the LangChain message kept in ``payload["raw"]["langgraph"]``), so
  ``messages()``, search, ``compare`` and the view read a LangGraph thread as a chat.
- Pending writes are ``note`` nodes after their checkpoint, on the branch while the
  checkpoint is the latest. LangGraph stores a step's writes and the next checkpoints
  concurrently: writes wait (a while) for their checkpoint's put, and may land after a
  later checkpoint of the same run. An interrupt of the root graph is a ``pause`` at the
  branch head, which ``sessiontree pending``, ``approve`` and the inbox see; ``resume(store,
  pause, graph)`` (and ``aresume``) claims the decision once and runs the graph on with
  ``Command(resume={interrupt id: decision})``.
- ``cas=True``: a stale worker (langgraph#8796: another one moved the thread on) gets
  ``BranchMoved`` before it writes anything: a ``put`` whose parent is no longer the
  latest, and writes for an older checkpoint, unless they are the late writes of the run
  that moved on (a task's first writes there; a second set is another worker's).
  ``cas=False`` keeps LangGraph's own semantics: such a write forks (a sibling in the
  tree) and the branch follows the newest.
- ``copy_thread`` copies the tree node by node; ``prune`` (``keep_latest``) and
  ``delete_for_runs`` rebuild a thread from the checkpoints they keep.
- Nothing LangGraph can still ask for is garbage to ``prune``: a node that leaves a
  branch's path (a fork's old head, writes to an older checkpoint) gets a sessiontree
  checkpoint ``langgraph-keep-<node id>``.
- Blobs are LangGraph's own ``serde`` bytes (base64 in the payload), decoded only through
  ``serde`` with its msgpack allowlist (strict by default; ``saver.with_allowlist`` adds
  types); a pickle is never loaded, and a serde that would write one is refused.
The core never imports this module.
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import contextlib
import hashlib
import json
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from ..decisions import Approve, Edit, Reject, decided
from ..errors import BranchMoved, Conflict, NotFound
from ..kinds import MarkerCall, PausePayload
from ..model import RAW, Node
from ..session import Ref, Session
from ..store import Store
from . import claim_decision, decision_at

KIND = "langgraph"
"""The key of LangGraph's data under a payload's ``raw``, and of the session metadata."""

NAMESPACE = uuid.UUID("0b5f8a3e-6c2d-4f7a-9e41-3d8c2b7a5f10")
"""The UUIDv5 namespace of the ids here: fixed, so every process maps a thread alike."""

WAIT_FOR_CHECKPOINT_S = 30.0
"""How long writes wait for their checkpoint's put (LangGraph runs both concurrently)."""

GIVE_UP_AFTER_FAILURE_S = 1.0
"""After a put of the thread failed (a stale run refused), how long its writes still wait."""

INTERRUPT, RESUME = "__interrupt__", "__resume__"
_CHECKPOINT, _WRITES = "checkpoint", "writes"
_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool", "developer": "developer"}


def thread_session_id(thread_id: str) -> str:
    """The sessiontree session id a LangGraph ``thread_id`` names."""
    return str(uuid.uuid5(NAMESPACE, f"thread\0{thread_id}"))


def checkpoint_node_id(session_id: str, checkpoint_ns: str, checkpoint_id: str) -> str:
    """The node id of a checkpoint: one lookup finds it (and a copied thread's ids differ)."""
    return str(uuid.uuid5(NAMESPACE, f"{session_id}\0{checkpoint_ns}\0{checkpoint_id}"))


def branch_name(checkpoint_ns: str) -> str:
    """The branch a checkpoint namespace is: ``main`` for the root graph."""
    if not checkpoint_ns:
        return "main"
    name = f"ns:{checkpoint_ns}"
    return name if len(name) <= 120 else f"ns:{uuid.uuid5(NAMESPACE, checkpoint_ns)}"


class _Channel(NamedTuple):
    """What a checkpoint holds of one channel: its version, and for a list its length and
    the running hash of its items' serialised bytes (how a later put tells "only grew")."""

    version: Any
    length: int | None = None
    digest: str | None = None


Summary = dict[str, _Channel]
Stored = dict[str, tuple[list[str] | None, list[list[str]] | None]]
"""A checkpoint's values serialised: channel -> (a whole blob, appended item blobs)."""

CACHED_CHECKPOINTS = 64


class SessiontreeSaver(BaseCheckpointSaver[int]):
    """LangGraph checkpoints as a sessiontree tree on ``store`` (SQLite or PostgreSQL)."""

    def __init__(self, store: Store, *, cas: bool = True, serde: SerializerProtocol | None = None) -> None:
        # Strict by default: only LangGraph's safe types (messages among them) and what
        # ``with_allowlist`` adds are rebuilt from msgpack; never a pickle.
        super().__init__(serde=serde or JsonPlusSerializer(allowed_msgpack_modules=None))
        if getattr(self.serde, "pickle_fallback", False):
            raise Conflict("SessiontreeSaver never stores pickles: give a serde without pickle_fallback")
        self.store = store
        self.cas = cas
        # Recent checkpoints' channel summaries and serialised values (node id -> both): a
        # put reads its parent's, a read of the latest its own, from here instead of the
        # path. Nodes never change, so an entry never goes stale. Any thread may fill it.
        self._cache: OrderedDict[str, tuple[Summary, Stored]] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._stored = threading.Condition()  # notified after each put
        self._refused: dict[str, Exception] = {}  # checkpoint id -> why its put failed
        self._failed: dict[tuple[str, str], tuple[float, Exception]] = {}  # (thread, ns) -> the last

    # -- serialisation -------------------------------------------------------

    def _dump(self, value: Any) -> list[str]:
        kind, data = self.serde.dumps_typed(value)
        if kind == "pickle":
            raise Conflict("SessiontreeSaver never stores pickles: the serde produced one")
        return [kind, base64.b64encode(data).decode("ascii")]

    def _load(self, blob: Sequence[str]) -> Any:
        kind, data = blob
        if kind == "pickle":  # written by something else: refused, never unpickled
            raise Conflict("refusing to load a pickled LangGraph value (SessiontreeSaver never unpickles)")
        return self.serde.loads_typed((kind, base64.b64decode(data)))

    # -- finding things --------------------------------------------------------

    def _session(self, thread_id: str, *, create: bool = False) -> Session | None:
        sid = thread_session_id(str(thread_id))
        try:
            found = self.store.session(sid)
        except NotFound:
            found = None
        if found is not None and found.id == sid:
            return found
        if not create:
            return None
        try:
            return self.store.create_session(
                title=str(thread_id), metadata={KIND: {"thread_id": str(thread_id)}}, id=sid
            )
        except Conflict:  # another writer created it first
            return self.store.session(sid)

    def _checkpoint_node(self, session: Session, ns: str, checkpoint_id: str) -> Node | None:
        try:
            node = self.store.node(checkpoint_node_id(session.id, ns, checkpoint_id))
        except NotFound:
            return None
        return node if node.session_id == session.id and _lg(node).get("type") == _CHECKPOINT else None

    def _head(self, session: Session, ns: str) -> Node | None:
        try:
            return session.head(branch_name(ns))
        except NotFound:
            return None

    def _owner(self, session: Session, node: Node | None) -> str | None:
        """The checkpoint id whose segment ``node`` (a branch head) is in: a checkpoint's
        own, a write's, or, for a human's decision, its pause's."""
        while node is not None:
            raw = _lg(node)
            if raw:
                return raw["id"] if raw.get("type") == _CHECKPOINT else raw.get("seg", raw.get("of"))
            if node.parent_id is None:
                return None
            node = session.node(node.parent_id)
        return None

    # -- put ---------------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        with self._refusing_writes(config, checkpoint["id"]):
            return self._put(config, checkpoint, metadata, new_versions)

    @contextlib.contextmanager
    def _refusing_writes(self, config: RunnableConfig, checkpoint_id: str) -> Iterator[None]:
        """When the put of ``checkpoint_id`` fails, its writes (on their way, maybe) are
        refused at once instead of waiting for it, and so, soon, are those of the
        checkpoints its run made after it in memory, whose puts (chained to it) never come."""
        try:
            yield
        except Exception as e:
            conf = config["configurable"]
            with self._stored:
                self._refused[checkpoint_id] = e
                self._failed[(str(conf["thread_id"]), conf.get("checkpoint_ns", ""))] = (time.monotonic(), e)
                while len(self._refused) > CACHED_CHECKPOINTS:
                    del self._refused[next(iter(self._refused))]
                self._stored.notify_all()
            raise

    def _put(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: Any, new_versions: Any
    ) -> RunnableConfig:
        conf = config["configurable"]
        thread_id, ns = str(conf["thread_id"]), conf.get("checkpoint_ns", "")
        parent_id = conf.get("checkpoint_id")
        values = dict(checkpoint.get("channel_values") or {})
        stored = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        meta = get_checkpoint_metadata(config, metadata)
        session = self._session(thread_id, create=True)
        assert session is not None
        branch = branch_name(ns)
        node_id = checkpoint_node_id(session.id, ns, checkpoint["id"])
        summary: Summary | None = None
        for _ in range(50):  # a concurrent write in the parent's segment moved the head: again
            try:
                with self.store.transaction():
                    if self._checkpoint_node(session, ns, checkpoint["id"]) is not None:
                        break  # put already (a retry of a put that did commit): nodes never change
                    head = self._head(session, ns)
                    parent = self._checkpoint_node(session, ns, parent_id) if parent_id else None
                    if parent is None:  # a new thread (or namespace): a new root, or a subtree
                        under = self._subgraph_parent(session, ns, meta)
                    elif head is not None and self._owner(session, head) == parent_id:
                        under = head
                    elif self.cas:
                        raise BranchMoved(branch, parent.id, head.id if head else None)
                    else:
                        under = parent  # LangGraph's fork: a sibling of what followed the parent
                    base, known = self._known(session, parent) if parent is not None else ({}, {})
                    chain, entries, summary, forms = self._encode(
                        checkpoint["id"], values, new_versions, base, known
                    )
                    payload = {
                        "type": "langgraph.checkpoint",
                        "text": f"checkpoint step {meta.get('step')} ({meta.get('source')})",
                        RAW: {
                            KIND: {
                                "type": _CHECKPOINT,
                                "ns": ns,
                                "id": checkpoint["id"],
                                "parent": parent_id,
                                "checkpoint": self._dump(stored),
                                "metadata": self._dump(meta),
                                "channels": entries,
                            }
                        },
                    }
                    self._write_chain(session, branch, head, under, chain, payload, node_id)
                break
            except BranchMoved:  # another write moved the head meanwhile: place again
                if self.cas and (
                    parent_id is None or self._owner(session, self._head(session, ns)) != parent_id
                ):
                    raise
        else:
            raise BranchMoved(branch, None, None)
        # Its values, when they are the parent's with this put's changes (always, from LangGraph).
        versions = checkpoint.get("channel_versions") or {}
        if summary is not None and all(
            c in new_versions or (c in base and base[c].version == v) for c, v in versions.items()
        ):
            self._remember(
                node_id, summary, {c: f for c, f in {**known, **forms}.items() if c in versions and f}
            )
        with self._stored:
            self._failed.pop((thread_id, ns), None)
            self._stored.notify_all()
        return {
            "configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}
        }

    def _subgraph_parent(self, session: Session, ns: str, meta: Mapping[str, Any]) -> Node | None:
        """A subgraph's first checkpoint hangs under the parent graph's checkpoint."""
        if not ns:
            return None
        parents = meta.get("parents") or {}
        outer = ns.rsplit("|", 1)[0] if "|" in ns else ""
        parent_id = parents.get(outer) if isinstance(parents, dict) else None
        return self._checkpoint_node(session, outer, parent_id) if isinstance(parent_id, str) else None

    def _write_chain(
        self,
        session: Session,
        branch: str,
        head: Node | None,
        under: Node | None,
        messages: list[dict[str, Any]],
        payload: dict[str, Any],
        node_id: str,
    ) -> None:
        """Append ``messages`` then the checkpoint ``payload`` under ``under`` and move the
        branch to it; a head the branch leaves behind off its new path is kept."""
        extends = head is not None and under is not None and under.id == head.id
        if under is None:
            # A new root needs a branch to stand on: a scratch one, gone before the end.
            scratch = f"langgraph-root-{node_id}"
            if messages:
                session.append_many(messages, branch=scratch)
            session.append(payload, kind="note", branch=scratch, id=node_id)
            target: Ref = scratch
        elif extends:
            if messages:
                session.append_many(messages, branch=branch, expect_head=head)
                head = None
            session.append(payload, kind="note", branch=branch, id=node_id, expect_head=head)
            return
        else:
            parent: Ref = under
            if messages:
                parent = session.append_many(messages, branch=None, parent=under)[-1]
            session.append(payload, kind="note", branch=None, parent=parent, id=node_id)
            target = node_id
        if head is None:
            try:
                session.branch(branch)
                exists = True
            except NotFound:
                exists = False
            if exists:
                session.move(branch, target)
            else:
                session.fork(branch, target)
        else:
            _keep(session, head)
            session.move(branch, target, expect_head=head)
        if under is None:
            session.delete_branch(scratch)

    def _encode(
        self,
        checkpoint_id: str,
        values: dict[str, Any],
        new_versions: ChannelVersions,
        base: Summary,
        known: Stored,
    ) -> tuple[list[dict[str, Any]], dict[str, Any], Summary, dict[str, Any]]:
        """(message payloads, channel entries, the new checkpoint's summary, the changed
        channels serialised: None for an empty one)."""
        summary = dict(base)
        forms: dict[str, Any] = {}
        entries: dict[str, Any] = {}
        chain: list[dict[str, Any]] = []
        for channel, version in new_versions.items():
            if channel not in values:
                entries[channel] = {"v": version, "empty": True}
                summary[channel] = _Channel(version)
                forms[channel] = None
                continue
            value = values[channel]
            if type(value) is not list:
                entries[channel] = {"v": version, "blob": self._dump(value)}
                summary[channel] = _Channel(version)
                forms[channel] = (entries[channel]["blob"], None)
                continue
            blobs = [self._dump(item) for item in value]
            forms[channel] = (None, blobs)
            before = base.get(channel)
            entry: dict[str, Any] = {"v": version, "len": len(blobs)}
            start, digest = 0, ""
            if before is None:  # new since the parent: it grew from nothing
                entry["base"] = None
            elif before.length is not None and before.length <= len(blobs):
                prefix = blobs[: before.length]
                held = known.get(channel)
                grew = (
                    held[1] == prefix  # the parent's items, remembered: compared as they are
                    if held is not None and held[0] is None and held[1] is not None
                    else _digest("", prefix) == before.digest
                )
                if grew:
                    start, digest = before.length, before.digest or ""
                    entry["base"] = before.version
            entry["h"] = _digest(digest, blobs[start:])
            added = blobs[start:]
            if added and all(isinstance(item, BaseMessage) for item in value[start:]):
                entry["n"] = len(added)
                entry["at"] = len(chain)  # the first of its message nodes, in the chain
                for item, blob in zip(value[start:], added, strict=True):
                    chain.append(
                        _chat(item, {"type": "message", "of": checkpoint_id, "ch": channel, "blob": blob})
                    )
            elif "base" in entry:
                entry["items"] = added
            else:
                entry["blob"] = self._dump(value)
            entries[channel] = entry
            summary[channel] = _Channel(version, len(blobs), entry["h"])
        for entry in entries.values():  # offsets back from the checkpoint node, once the chain is known
            if "at" in entry:
                entry["at"] = len(chain) - entry["at"]
        return chain, entries, summary, forms

    # -- put_writes ----------------------------------------------------------------

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        conf = config["configurable"]
        thread_id, ns, checkpoint_id = (
            str(conf["thread_id"]),
            conf.get("checkpoint_ns", ""),
            conf["checkpoint_id"],
        )
        session, node = self._wait_for(thread_id, ns, checkpoint_id)
        encoded: list[list[Any]] = [
            [channel, WRITES_IDX_MAP.get(channel, i), *self._dump(v)] for i, (channel, v) in enumerate(writes)
        ]
        interrupts = _interrupt_calls(writes) if not ns else []
        resumed = any(channel == RESUME for channel, _ in writes)
        raw = {
            "type": _WRITES,
            "ns": ns,
            "of": checkpoint_id,
            "task": task_id,
            "path": task_path,
            "writes": encoded,
        }
        channels = ", ".join(sorted({str(w[0]) for w in encoded})) or "nothing"
        payload = {
            "type": "langgraph.writes",
            "text": f"task {task_path or task_id} wrote {channels}",
            RAW: {KIND: raw},
        }
        branch = branch_name(ns)
        for _ in range(50):  # a concurrent write for the same checkpoint moved the head: again
            try:
                with self.store.transaction():
                    head = self._head(session, ns)
                    owner = self._owner(session, head)
                    if owner == checkpoint_id:
                        assert head is not None
                        self._on_head(session, branch, head, payload, interrupts, resumed)
                        return
                    # LangGraph stores a step's writes and the checkpoints after it concurrently,
                    # so later checkpoints of the same run may be stored first: then this is a
                    # late write of that run, unless a write of the same task and index is there
                    # already for this checkpoint (another worker ran the task: a stale writer).
                    since = self._since(session, head, node) if head is not None else None
                    if since is not None:
                        assert head is not None
                        regular = {w[1] for w in encoded if w[1] >= 0}
                        if self.cas and _task_wrote(since, checkpoint_id, task_id, regular):
                            raise _Refused(BranchMoved(branch, node.id, head.id))
                        late_raw = {**raw, "seg": owner}  # in the later checkpoint's segment
                        self._on_head(session, branch, head, {**payload, RAW: {KIND: late_raw}}, [], resumed)
                        return
                    if self.cas:
                        raise _Refused(BranchMoved(branch, node.id, head.id if head else None))
                    # An older checkpoint's writes (LangGraph's fork): off the path, and kept.
                    _keep(session, session.append(payload, kind="note", branch=None, parent=node))
                    return
            except _Refused as refused:
                raise refused.moved from None
            except BranchMoved:  # another write moved the head meanwhile: place again
                head = self._head(session, ns)
                if self.cas and (head is None or self._since(session, head, node) is None):
                    raise
        raise BranchMoved(branch, node.id, None)

    def _on_head(
        self,
        session: Session,
        branch: str,
        head: Node,
        payload: dict[str, Any],
        interrupts: list[dict[str, Any]],
        resumed: bool,
    ) -> None:
        """Writes for the latest checkpoint: on the branch. An interrupt makes them a pause
        (listing every interrupt still waiting); a waiting pause stays the head."""
        held = PausePayload.from_node(head) if head.kind == "pause" else None
        waiting = [c.to_payload() for c in held.calls] if held is not None else []
        if interrupts:
            calls = tuple(MarkerCall.from_payload(_call(c)) for c in _merged(waiting, interrupts))
            reason = "; ".join(c["reason"] for c in interrupts)
            pause = PausePayload(reason, None, calls, extra=payload).to_payload()
            session.append(pause, kind="pause", branch=branch, expect_head=head)
            return
        written = session.append(payload, kind="note", branch=branch, expect_head=head)
        if waiting and not resumed:
            raw = {KIND: {"type": "pause", "ns": _lg(head).get("ns", ""), "of": _lg(head).get("of")}}
            assert held is not None
            again = PausePayload(
                held.reason or "interrupted",
                None,
                held.calls,
                extra={"type": "langgraph.interrupt", RAW: raw},
            ).to_payload()
            session.append(again, kind="pause", branch=branch, expect_head=written)

    def _wait_for(self, thread_id: str, ns: str, checkpoint_id: str) -> tuple[Session, Node]:
        """The checkpoint's session and node. LangGraph may hand a checkpoint's writes over
        before that checkpoint's own put has finished: wait for it (a while)."""
        deadline = time.monotonic() + WAIT_FOR_CHECKPOINT_S
        while True:
            session = self._session(thread_id)
            node = self._checkpoint_node(session, ns, checkpoint_id) if session is not None else None
            if session is not None and node is not None:
                return session, node
            left = deadline - time.monotonic()
            if left <= 0:
                raise NotFound(
                    f"no LangGraph checkpoint {checkpoint_id} in thread {thread_id!r} to write for"
                )
            with self._stored:
                refused = self._refused.get(checkpoint_id)
                if refused is not None:
                    raise refused
                failed = self._failed.get((thread_id, ns))
                if failed is not None and time.monotonic() - failed[0] > GIVE_UP_AFTER_FAILURE_S:
                    raise failed[1]
                self._stored.wait(min(left, 0.05))

    # -- reading ---------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        conf = config["configurable"]
        thread_id, ns = str(conf["thread_id"]), conf.get("checkpoint_ns", "")
        session = self._session(thread_id)
        if session is None:
            return None
        head = self._head(session, ns)
        owner = self._owner(session, head)
        checkpoint_id = get_checkpoint_id(config) or owner
        node = self._checkpoint_node(session, ns, checkpoint_id) if checkpoint_id else None
        if node is None or checkpoint_id is None:
            return None
        since = self._since(session, head, node) if head is not None and owner == checkpoint_id else None
        if since is not None:  # the latest: its writes are on the path after it
            writes = _writes_for(since, ns, checkpoint_id)
        else:  # an older one: its writes may be anywhere after it (forks, late writes)
            writes = _writes_for(session.tree(), ns, checkpoint_id)
        return self._tuple(thread_id, node, self._known(session, node)[1], writes)

    def _since(self, session: Session, head: Node, node: Node) -> list[Node] | None:
        """The nodes after ``node`` on the path to ``head`` (oldest first), or None when
        ``node`` is not on that path. Walks up from the head: a step or a few, usually."""
        found: list[Node] = []
        at: Node | None = head
        while at is not None and at.depth > node.depth:
            found.append(at)
            at = session.node(at.parent_id) if at.parent_id else None
        return found[::-1] if at is not None and at.id == node.id else None

    def _tuple(self, thread_id: str, node: Node, values: Stored, writes: list[Node]) -> CheckpointTuple:
        raw = _lg(node)
        ns = raw["ns"]
        checkpoint: dict[str, Any] = self._load(raw["checkpoint"])
        checkpoint["channel_values"] = {channel: self._decode(form) for channel, form in values.items()}
        parent = raw.get("parent")
        return CheckpointTuple(
            config={
                "configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": raw["id"]}
            },
            checkpoint=checkpoint,  # type: ignore[arg-type]
            metadata=self._load(raw["metadata"]),
            parent_config=(
                {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": parent}}
                if parent
                else None
            ),
            pending_writes=self._pending(writes),
        )

    def _decode(self, form: tuple[list[str] | None, list[list[str]] | None]) -> Any:
        whole, items = form
        if items is None:
            assert whole is not None
            return self._load(whole)
        head = list(self._load(whole)) if whole is not None else []
        if items and all(kind == "msgpack" for kind, _ in items):
            # One msgpack array of the items, decoded in one call (as a whole list would be).
            count = len(items)
            header = (
                bytes([0xDC]) + count.to_bytes(2, "big")
                if count < 1 << 16
                else bytes([0xDD]) + count.to_bytes(4, "big")
            )
            packed = header + b"".join(base64.b64decode(data) for _, data in items)
            return head + list(self.serde.loads_typed(("msgpack", packed)))
        return head + [self._load(b) for b in items]

    def _pending(self, nodes: list[Node]) -> list[tuple[str, str, Any]]:
        kept: dict[tuple[str, int], tuple[str, str, str, list[str]]] = {}
        for node in nodes:
            raw = _lg(node)
            for channel, idx, kind, data in raw["writes"]:
                key = (raw["task"], idx)
                if idx >= 0 and key in kept:  # a regular write: the first one stays
                    continue
                kept[key] = (raw["path"], raw["task"], channel, [kind, data])
        order = sorted(kept, key=lambda k: writes_sort_key(kept[k][0], k[0], k[1]))
        return [(kept[k][1], kept[k][2], self._load(kept[k][3])) for k in order]

    def _known(self, session: Session, node: Node, path: list[Node] | None = None) -> tuple[Summary, Stored]:
        """A checkpoint's channel summary and values (serialised): remembered, or read
        off its path (one query; ``path``, root to ``node``, when the caller has it)."""
        with self._cache_lock:
            found = self._cache.get(node.id)
        if found is not None:
            return found
        path = path or session.path(node)
        raw = _lg(node)
        versions = self._load(raw["checkpoint"]).get("channel_versions") or {}
        stored: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        for i in range(len(path) - 1, -1, -1):
            up = _lg(path[i])
            if up.get("type") == _CHECKPOINT and up.get("ns") == raw["ns"]:
                for channel, entry in up["channels"].items():
                    stored.setdefault(channel, []).append((i, entry))
        summary: Summary = {}
        values: Stored = {}
        for channel, version in versions.items():
            entries = stored.get(channel, [])
            entry = next((e for _, e in entries if e["v"] == version), None)
            if entry is not None:
                summary[channel] = _Channel(version, entry.get("len"), entry.get("h"))
            form = _serialised(path, entries, version)
            if form is not None:
                values[channel] = form
        self._remember(node.id, summary, values)
        return summary, values

    def _remember(self, node_id: str, summary: Summary, values: Stored) -> None:
        with self._cache_lock:
            self._cache[node_id] = (summary, values)
            self._cache.move_to_end(node_id)
            while len(self._cache) > CACHED_CHECKPOINTS:
                self._cache.popitem(last=False)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        conf = (config or {}).get("configurable") or {}
        if "thread_id" in conf:
            threads = [str(conf["thread_id"])]
        else:
            threads = [
                info.metadata[KIND]["thread_id"]
                for info in self.store.sessions(include_archived=True)
                if isinstance(info.metadata.get(KIND), dict) and "thread_id" in info.metadata[KIND]
            ]
        want_ns = conf.get("checkpoint_ns")
        want_id = conf.get("checkpoint_id")
        before_id = get_checkpoint_id(before) if before else None
        for thread_id in threads:
            session = self._session(thread_id)
            if session is None:
                continue
            nodes = session.tree()
            by_id = {n.id: n for n in nodes}
            writes: dict[tuple[str, str], builtins.list[Node]] = {}
            for n in nodes:
                raw = _lg(n)
                if raw.get("type") == _WRITES:
                    writes.setdefault((raw.get("ns", ""), raw["of"]), []).append(n)
            found = [n for n in nodes if _lg(n).get("type") == _CHECKPOINT]
            found.sort(key=lambda n: _lg(n)["id"], reverse=True)
            for node in found:
                raw = _lg(node)
                if want_ns is not None and raw["ns"] != want_ns:
                    continue
                if want_id and raw["id"] != want_id:
                    continue
                if before_id and raw["id"] >= before_id:
                    continue
                if filter:
                    meta = self._load(raw["metadata"])
                    if not all(meta.get(k) == v for k, v in filter.items()):
                        continue
                if limit is not None and limit <= 0:
                    return
                if limit is not None:
                    limit -= 1
                values = self._known(session, node, _path_in(by_id, node))[1]
                yield self._tuple(thread_id, node, values, _ordered(writes.get((raw["ns"], raw["id"]), [])))

    # -- deleting --------------------------------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        session = self._session(str(thread_id))
        if session is not None:
            session.delete(permanently=True)
        with self._cache_lock:  # a thread made again under the same ids starts afresh
            self._cache.clear()

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Every node of the source thread (checkpoints, writes, pauses and decisions,
        branches and kept refs) into a new thread: the same tree, with its own ids."""
        source = self._session(str(source_thread_id))
        if source is None:
            return
        with self.store.transaction():
            if self._session(str(target_thread_id)) is not None:
                raise Conflict(f"thread {target_thread_id!r} already exists: copy_thread makes a new one")
            target = self._session(str(target_thread_id), create=True)
            assert target is not None
            made: dict[str, str] = {}
            for node in sorted(source.tree(), key=lambda n: n.depth):
                raw = _lg(node)
                chosen = (
                    checkpoint_node_id(target.id, raw["ns"], raw["id"])
                    if raw.get("type") == _CHECKPOINT
                    else str(uuid.uuid4())
                )
                if node.parent_id is None:
                    scratch = f"langgraph-root-{chosen}"
                    target.append(
                        node.payload, kind=node.kind, branch=scratch, id=chosen, created_at=node.created_at
                    )
                    target.delete_branch(scratch)
                else:
                    target.append(
                        node.payload,
                        kind=node.kind,
                        branch=None,
                        parent=made[node.parent_id],
                        id=chosen,
                        created_at=node.created_at,
                    )
                made[node.id] = chosen
            for branch in source.branches():
                if branch.head_id is not None:
                    target.fork(branch.name, made[branch.head_id])
            for ref in source.checkpoints():
                name = (
                    f"langgraph-keep-{made[ref.node_id]}"
                    if ref.name.startswith("langgraph-keep-")
                    else ref.name
                )
                target.checkpoint(name, made[ref.node_id])

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: each thread keeps only the latest checkpoint of each namespace
        (its values whole, its pending writes), rebuilt as a new tree; ``delete``: the
        threads go. A thread whose channels are LangGraph ``DeltaChannel``s is refused
        (``Conflict``): their values live in the history that keep_latest would drop."""
        if strategy not in ("keep_latest", "delete"):
            raise Conflict(f"unknown prune strategy {strategy!r}: use 'keep_latest' or 'delete'")
        for thread_id in thread_ids:
            if strategy == "delete":
                self.delete_thread(thread_id)
                continue
            self._rebuild(str(thread_id), _latest_per_namespace)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Every checkpoint whose metadata names one of ``run_ids`` goes, with its writes;
        the threads they were in are rebuilt from what is left (a checkpoint whose parent
        went becomes a root)."""
        gone = {str(r) for r in run_ids}
        if not gone:
            return
        for info in self.store.sessions(include_archived=True):
            meta = info.metadata.get(KIND)
            if isinstance(meta, dict) and "thread_id" in meta:
                self._rebuild(
                    meta["thread_id"],
                    lambda tuples: [t for t in tuples if str(t.metadata.get("run_id")) not in gone],
                )

    def _rebuild(
        self, thread_id: str, keep: Callable[[builtins.list[CheckpointTuple]], builtins.list[CheckpointTuple]]
    ) -> None:
        """The thread again with only the checkpoints ``keep`` chooses (oldest first), each
        put whole under its parent if kept (else as a root), with its pending writes."""
        with self.store.transaction():
            tuples = sorted(
                self.list({"configurable": {"thread_id": thread_id}}), key=lambda t: t.checkpoint["id"]
            )
            if not tuples:
                return
            kept = keep(tuples)
            if len(kept) == len(tuples):
                return
            for t in kept:
                if t.metadata.get("counters_since_delta_snapshot"):
                    raise Conflict(
                        f"thread {thread_id!r} has DeltaChannel history, which rebuilding it would lose;"
                        " nothing changed"
                    )
            self.delete_thread(thread_id)
            rebuilt = SessiontreeSaver(self.store, cas=False, serde=self.serde)
            for t in kept:
                versions = dict(t.checkpoint.get("channel_versions") or {})
                config = dict(t.config["configurable"])
                if t.parent_config is not None:
                    config["checkpoint_id"] = t.parent_config["configurable"]["checkpoint_id"]
                else:
                    config.pop("checkpoint_id", None)
                rebuilt.put({"configurable": config}, t.checkpoint, t.metadata, versions)
                by_task: dict[str, builtins.list[tuple[str, Any]]] = {}
                for task_id, channel, value in t.pending_writes or []:
                    by_task.setdefault(task_id, []).append((channel, value))
                for task_id, writes in by_task.items():
                    rebuilt.put_writes(t.config, writes, task_id)

    # -- async twins: the sync methods, on a worker thread ------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(self, config: RunnableConfig | None, **options: Any) -> AsyncIterator[CheckpointTuple]:
        found = await asyncio.to_thread(lambda: builtins.list(self.list(config, **options)))
        for item in found:
            yield item

    async def aput(self, *args: Any, **kwargs: Any) -> RunnableConfig:
        return await asyncio.to_thread(self.put, *args, **kwargs)

    async def aput_writes(self, *args: Any, **kwargs: Any) -> None:
        await asyncio.to_thread(self.put_writes, *args, **kwargs)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)


# -- resuming an interrupt --------------------------------------------------------


def decision_value(decision: Approve | Edit | Reject) -> dict[str, Any]:
    """What an interrupted node gets back by default: the human's decision as a dict,
    ``{"action": "approve"}``, ``{"action": "edit", "arguments": {...}}`` or
    ``{"action": "reject", "reason": ...}``."""
    if isinstance(decision, Edit):
        return {"action": "edit", "arguments": decision.arguments}
    if isinstance(decision, Reject):
        return {"action": "reject", "reason": decision.reason}
    return {"action": "approve"}


def resume_command(
    store: Store, pause: Ref, *, value: Callable[[Approve | Edit | Reject], Any] = decision_value
) -> tuple[RunnableConfig, Any]:
    """Claim a decided LangGraph pause (once: a second claim, in any process, is refused)
    and return ``(config, Command(resume={interrupt id: value(decision)}))`` to run the
    graph on with. ``Conflict`` (nothing written) when the node is not a LangGraph pause,
    is undecided, was resumed already, or no branch stands at its decision."""
    from langgraph.types import Command

    node = store.node(pause)
    raw = _lg(node) if node.kind == "pause" else {}
    if not raw:
        raise Conflict(f"node {node.id} is not a LangGraph interrupt (no LangGraph data on it)")
    session = store.session(node.session_id)
    decision, branches = decision_at(session, node)
    answers = {call_id: value(d) for call_id, d in decided(decision).items()}
    # the claim: one resume per decision, whichever process is first
    note = {
        "type": "langgraph.resume",
        "text": "resumed by LangGraph",
        RAW: {KIND: {"type": "resume", "of": raw["of"]}},
    }
    claim_decision(session, node, decision, branches[0], note)
    thread_id = (session.metadata.get(KIND) or {}).get("thread_id", session.title)
    return {"configurable": {"thread_id": thread_id}}, Command(resume=answers)


def resume(store: Store, pause: Ref, graph: Any, **invoke_kwargs: Any) -> Any:
    """Carry a decided LangGraph pause on: ``graph.invoke`` of ``resume_command``'s Command."""
    value = invoke_kwargs.pop("value", decision_value)
    config, command = resume_command(store, pause, value=value)
    return graph.invoke(command, config, **invoke_kwargs)


async def aresume(store: Store, pause: Ref, graph: Any, **invoke_kwargs: Any) -> Any:
    """``resume`` with ``graph.ainvoke``."""
    value = invoke_kwargs.pop("value", decision_value)
    config, command = await asyncio.to_thread(resume_command, store, pause, value=value)
    return await graph.ainvoke(command, config, **invoke_kwargs)


# -- the mapping ----------------------------------------------------------------------

_MISSING = object()


def _lg(node: Node) -> dict[str, Any]:
    """The LangGraph data a node carries (empty for a node of sessiontree's own)."""
    raw = node.payload.get(RAW)
    kept = raw.get(KIND) if isinstance(raw, dict) else None
    return kept if isinstance(kept, dict) else {}


def _keep(session: Session, node: Node) -> None:
    """A ref at a node that is leaving every branch's path, so that ``prune`` keeps it."""
    name = f"langgraph-keep-{node.id}"
    with contextlib.suppress(Conflict):  # kept already
        session.checkpoint(name, node)


def _digest(start: str, blobs: list[list[str]]) -> str:
    """The running hash of a list's items, on from ``start`` (the hash of the items before
    them, "" for none): a list that grew has its parent's hash as the hash of its prefix."""
    digest = bytes.fromhex(start)
    for kind, data in blobs:
        digest = hashlib.blake2b(digest + kind.encode() + b"\0" + data.encode(), digest_size=16).digest()
    return digest.hex()


def _chat(message: BaseMessage, raw: dict[str, Any]) -> dict[str, Any]:
    """A LangChain message as the chat message sessiontree's readers take."""
    role = _ROLES.get(message.type) or (getattr(message, "role", None) if message.type == "chat" else None)
    if role not in _ROLES.values():
        role = "user"
    content: Any = message.content
    if not isinstance(content, str):
        content = message.text if hasattr(message, "text") else json.dumps(content, default=str)
        content = content() if callable(content) else content
    payload: dict[str, Any] = {"role": role, "content": content}
    if message.name:
        payload["name"] = message.name
    calls = getattr(message, "tool_calls", None) or []
    if role == "assistant" and calls:
        payload["tool_calls"] = [
            {
                "id": str(c.get("id") or f"call_{i}"),
                "type": "function",
                "function": {"name": str(c.get("name") or ""), "arguments": json.dumps(c.get("args") or {})},
            }
            for i, c in enumerate(calls)
        ]
    if role == "tool":
        payload["tool_call_id"] = str(getattr(message, "tool_call_id", "") or "")
    payload[RAW] = {KIND: raw}
    return payload


def _interrupt_calls(writes: Sequence[tuple[str, Any]]) -> list[dict[str, Any]]:
    calls = []
    for channel, value in writes:
        if channel != INTERRUPT:
            continue
        for item in value if isinstance(value, list | tuple) else [value]:
            shown = getattr(item, "value", item)
            try:
                arguments = json.dumps(shown)
            except (TypeError, ValueError):
                arguments = json.dumps(str(shown))
            reason = shown if isinstance(shown, str) else arguments
            calls.append({"id": str(getattr(item, "id", "")), "arguments": arguments, "reason": reason[:500]})
    return calls


def _call(call: dict[str, Any]) -> dict[str, Any]:
    return {"id": call["id"], "name": "interrupt", "arguments": call["arguments"]}


def _merged(waiting: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen = {c["id"] for c in new}
    return [c for c in waiting if c["id"] not in seen] + new


def _path_in(by_id: dict[str, Node], node: Node) -> list[Node]:
    path = [node]
    while path[-1].parent_id is not None:
        path.append(by_id[path[-1].parent_id])
    return path[::-1]


def _serialised(
    path: list[Node], entries: list[tuple[int, dict[str, Any]]], version: Any
) -> tuple[list[str] | None, list[list[str]] | None] | None:
    """A channel at ``version`` as (a whole blob, appended item blobs) from the nearest
    entry up the path storing it (``entries``: (path index, entry), nearest first), or
    None when it has no value (empty, or never stored)."""
    chunks: list[list[list[str]]] = []
    want, below = version, len(path)
    while True:
        hit = next(((i, e) for i, e in entries if i < below and e["v"] == want), None)
        if hit is None:
            if chunks:  # an append whose base is gone: the saver never writes one
                raise Conflict(f"a LangGraph list value's base version {want!r} is missing from the path")
            return None
        i, entry = hit
        if entry.get("empty"):
            return None
        appended = [b for chunk in reversed(chunks) for b in chunk]
        if "blob" in entry:
            return (entry["blob"], appended if chunks else None)
        if "n" in entry:
            first = i - entry["at"]
            chunks.append([_lg(path[first + k])["blob"] for k in range(entry["n"])])
        else:
            chunks.append(entry.get("items", []))
        if entry.get("base") is None:
            return (None, [b for chunk in reversed(chunks) for b in chunk])
        want, below = entry["base"], i


def _latest_per_namespace(tuples: list[CheckpointTuple]) -> list[CheckpointTuple]:
    latest: dict[str, CheckpointTuple] = {}
    for t in tuples:  # oldest first: the last one of a namespace stays
        latest[t.config["configurable"].get("checkpoint_ns", "")] = t
    kept = {id(t) for t in latest.values()}
    return [t for t in tuples if id(t) in kept]


def _task_wrote(nodes: list[Node], checkpoint_id: str, task_id: str, indexes: set[int]) -> bool:
    """Whether ``nodes`` hold a write of ``task_id`` for ``checkpoint_id`` at one of ``indexes``."""
    for node in nodes:
        raw = _lg(node)
        mine = raw.get("type") == _WRITES and raw.get("of") == checkpoint_id and raw.get("task") == task_id
        if mine and any(w[1] in indexes for w in raw["writes"]):
            return True
    return False


class _Refused(Exception):
    """A refusal decided inside a write's transaction: not retried."""

    def __init__(self, moved: BranchMoved) -> None:
        self.moved = moved


def _writes_for(nodes: list[Node], ns: str, checkpoint_id: str) -> list[Node]:
    """The write nodes among ``nodes`` for one checkpoint, in the order they were written."""
    return _ordered(
        [
            n
            for n in nodes
            if (raw := _lg(n)).get("type") == _WRITES
            and raw.get("of") == checkpoint_id
            and raw.get("ns", "") == ns
        ]
    )


def _ordered(nodes: list[Node]) -> list[Node]:
    return sorted(nodes, key=lambda n: (n.created_at, n.depth))
