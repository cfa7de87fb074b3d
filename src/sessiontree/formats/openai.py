"""OpenAI chat messages: a branch out as a list, a list in as a linear ``main`` branch.

Contract:
- ``export_openai(session, branch)`` is the chat-completions ``messages`` of the
  branch: the ``message`` payloads on its path, as copies (markers left out, and the
  never-sent ``raw`` field of each, as ``model.sendable`` leaves it out of a request).
- ``parse_openai(data)`` accepts a list of messages or ``{"messages": [...]}``
  (an optional ``"title"`` is used when no title is given) and builds one new
  session whose ``main`` branch is the messages in order. Every message must
  be an object with a role in system/user/assistant/tool/developer, and the list
  must be one the API accepts: not empty, every tool message answering a call
  of the assistant message before it, and those calls answered before the
  conversation moves on; otherwise ``FormatError`` names the message by its
  1-based position. The messages carry no ids, so each import makes a new
  session with fresh UUIDv7 ids.
- ``export_openai(import_openai(store, m)) == m`` for every valid list ``m``.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from ..bulk import ImportedNode, ImportedRef, ImportedSession
from ..errors import FormatError, NotFound
from ..ids import new_id, now
from ..model import sendable

if TYPE_CHECKING:
    from ..session import Session


def export_openai(session: Session, branch: str = "main") -> list[dict[str, Any]]:
    """The chat messages of ``branch`` (any ref works), in the shape the API takes."""
    try:
        return copy.deepcopy(sendable(session.messages(branch)))
    except NotFound:
        if any(b.name == branch and b.head_id is None for b in session.branches()):
            return []  # a branch with no node yet holds no messages
        raise


def parse_openai(data: Any, title: str | None = None, *, copy_messages: bool = True) -> ImportedSession:
    """One session from a messages list (see the module docstring). The messages are
    copied, so the caller's list is never shared with the session; a list just decoded
    from a file is nobody else's, and ``copy_messages=False`` spares holding it twice."""
    if isinstance(data, dict):
        if not isinstance(data.get("messages"), list):
            raise FormatError("expected a list of messages or an object with a 'messages' list")
        if title is None and isinstance(data.get("title"), str):
            title = data["title"]
        data = data["messages"]
    if not isinstance(data, list):
        raise FormatError(f"expected a list of messages, got {type(data).__name__}")
    if not data:
        raise FormatError("no messages: the list is empty")
    created = now()
    session = ImportedSession(new_id(), title, {"source": "openai"}, created)
    parent = None
    open_calls: list[Any] = []  # ids of the last assistant message's calls not answered yet
    for i, item in enumerate(data, 1):
        if not isinstance(item, dict):
            raise FormatError(f"message {i}: expected an object, got {type(item).__name__}")
        open_calls = _answered(item, open_calls, i)
        payload = copy.deepcopy(item) if copy_messages else item
        node = ImportedNode(new_id(), parent, "message", payload, created, source=f"message {i}")
        session.nodes.append(node)
        parent = node.id
    session.branches.append(ImportedRef("main", parent))
    return session


def _answered(message: dict[str, Any], open_calls: list[Any], position: int) -> list[Any]:
    """The calls still open after ``message``; ``FormatError`` for a list the API would
    refuse (and ``verify`` would flag): a tool message that answers no open call, or a
    conversation that moves on with calls unanswered."""
    if message.get("role") == "tool":
        call_id = message.get("tool_call_id")
        if call_id not in open_calls:
            raise FormatError(
                f"message {position}: a tool message must answer a call of the assistant message "
                f"before it; tool_call_id {call_id!r} answers none"
            )
        return [c for c in open_calls if c != call_id]
    if open_calls:
        raise FormatError(
            f"message {position}: the tool call(s) {', '.join(map(repr, open_calls))} before it "
            "have no tool message answering them"
        )
    calls = message.get("tool_calls") if message.get("role") == "assistant" else None
    return [c.get("id") for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []
