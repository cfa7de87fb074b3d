"""yieldagent's resumable pause, ``resumeState``: in as a paused session, out from a pause.

The shape follows issue 30's description, ``{"messages": [...], "pendingCall": {"id",
"name", "arguments"}}`` (plain JSON, messages in OpenAI's chat shape): yieldagent's
own source was not available to check it against (see docs/formats.md).

Contract:
- ``parse_yieldagent(data)`` is one new session (fresh ids, as an OpenAI list: the
  state has none) whose ``main`` is the messages in order, then a ``pause`` for the
  pending call, which ``decide``/``approve`` and ``resume`` carry on as any pause of
  the loop. The messages must be a list the API accepts (``openai._answered``) but for
  the pending call: when the last assistant message made it, the pause follows it
  (and the tool messages answering its other calls); when no message made it, an
  assistant message making it is added first, marked in its never-sent ``raw`` field
  so the export leaves it out again. ``arguments`` may be an object or JSON text.
- ``export_yieldagent(store, session_id, branch)`` is the state of a pause waiting
  for a decision at ``branch``'s head (default ``main``): the messages on its path
  (as a model is sent them) and its call as ``pendingCall`` (arguments as an
  object). Refused (``FormatError``): a head that is not an undecided pause, or a
  pause for more than one call (a resumeState holds one).
"""

from __future__ import annotations

import copy
import json
from typing import TYPE_CHECKING, Any

from ..bulk import ImportedNode, ImportedRef, ImportedSession
from ..errors import FormatError
from ..ids import new_id, now
from ..kinds import MarkerCall, PausePayload
from ..model import RAW, sendable
from .common import tool_call
from .openai import _answered

if TYPE_CHECKING:
    from ..store import Store

KEY = "yieldagent"  # raw[KEY] marks the assistant message the import added for the pending call
REASON = "pending in yieldagent"


def is_state(data: Any) -> bool:
    """Whether a decoded document is a yieldagent ``resumeState``."""
    return isinstance(data, dict) and isinstance(data.get("messages"), list) and "pendingCall" in data


def parse_yieldagent(data: Any) -> ImportedSession:
    if not is_state(data):
        raise FormatError("expected a yieldagent resumeState: an object with 'messages' and 'pendingCall'")
    pending = _pending(data["pendingCall"])
    created = now()
    session = ImportedSession(new_id(), None, {"source": "yieldagent"}, created)
    parent: str | None = None
    open_calls: list[Any] = []
    caller: str | None = None
    messages = data["messages"]
    for i, item in enumerate(messages, 1):
        if not isinstance(item, dict):
            raise FormatError(f"message {i}: expected an object, got {type(item).__name__}")
        if item.get("role") == "tool" and item.get("tool_call_id") == pending["id"]:
            raise FormatError(
                f"message {i}: answers the pending call {pending['id']!r}, which is still to run"
            )
        if open_calls == [pending["id"]] and item.get("role") != "tool":
            raise FormatError(
                f"message {i}: the conversation moves on past the pending call {pending['id']!r};"
                " a resumeState waits at it"
            )
        open_calls = _answered(item, open_calls, i)
        node = ImportedNode(new_id(), parent, "message", copy.deepcopy(item), created, source=f"message {i}")
        session.nodes.append(node)
        parent = node.id
        if item.get("role") == "assistant" and open_calls:
            caller = node.id
    if open_calls and open_calls != [pending["id"]]:
        others = ", ".join(repr(c) for c in open_calls if c != pending["id"])
        raise FormatError(f"the tool call(s) {others} have no tool message answering them")
    if not open_calls:  # no message made the call: the model's message that did
        made = tool_call(pending["id"], pending["name"], pending["arguments"])
        payload = {"role": "assistant", "content": None, "tool_calls": [made], RAW: {KEY: {"added": True}}}
        node = ImportedNode(new_id(), parent, "message", payload, created, source="pendingCall")
        session.nodes.append(node)
        parent = caller = node.id
    call = MarkerCall(pending["id"], pending["name"], _text(pending["arguments"]), REASON)
    pause = PausePayload(REASON, caller, (call,)).to_payload()
    node = ImportedNode(new_id(), parent, "pause", pause, created, source="pendingCall")
    session.nodes.append(node)
    session.branches.append(ImportedRef("main", node.id))
    return session


def _pending(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise FormatError("'pendingCall' should be an object with 'id', 'name' and 'arguments'")
    for field in ("id", "name"):
        if not isinstance(value.get(field), str) or not value[field]:
            raise FormatError(f"'pendingCall' needs an {field!r} string")
    arguments = value.get("arguments", {})
    if isinstance(arguments, str):
        try:
            json.loads(arguments)
        except ValueError:
            raise FormatError("'pendingCall' 'arguments' should be an object or JSON text") from None
    return {"id": value["id"], "name": value["name"], "arguments": arguments}


def _text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def export_yieldagent(store: Store, session_id: str, branch: str = "main") -> dict[str, Any]:
    session = store.session(store.resolve_session_id(session_id))
    head = session.node(branch)
    if head.kind != "pause" or session.children(head):
        state = "a decided pause" if head.kind == "pause" else f"a {head.kind} node"
        raise FormatError(
            f"session {session.id}: {branch!r} is at {state} ({head.id}); a yieldagent resumeState"
            " is a run waiting at a pause no one has decided"
        )
    calls = PausePayload.from_node(head).calls
    if len(calls) != 1:
        raise FormatError(
            f"session {session.id}: pause {head.id} waits on {len(calls)} calls; a yieldagent"
            " resumeState holds one pendingCall"
        )
    messages = [m for m in session.messages(head.id) if not _added(m)]
    try:
        arguments = json.loads(calls[0].arguments or "{}")
    except ValueError:
        arguments = calls[0].arguments
    pending = {"id": calls[0].id, "name": calls[0].name, "arguments": arguments}
    return {"messages": copy.deepcopy(sendable(messages)), "pendingCall": pending}


def _added(message: dict[str, Any]) -> bool:
    raw = message.get(RAW)
    return isinstance(raw, dict) and isinstance(raw.get(KEY), dict) and bool(raw[KEY].get("added"))
