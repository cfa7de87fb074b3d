"""Open WebUI chat exports: ``history.messages`` linked by ``parentId``, ``history.currentId``.

Contract: ``parse_openwebui(data)`` takes the parsed JSON: a chat object
(``{"history": ...}``), an exported record wrapping one (``{"chat": {...}}``,
as "Export chat" writes them), or a list of either; one ``ImportedSession``
per chat.
- Every entry of ``history.messages`` becomes a ``message`` node with its
  ``role`` and ``content`` exactly as stored (text is not unescaped: doubled
  quotes stay doubled). ``parentId`` is the tree; ``childrenIds`` is only
  checked to be a list. The legacy flat ``messages`` list is ignored.
- ``main`` is the path to ``history.currentId`` (else the newest leaf); every
  other leaf gets a branch ``leaf-<first 8 chars of its id>``.
- An assistant's ``model`` and ``usage`` become a run; files, images,
  annotations and ratings are dropped.
"""

from __future__ import annotations

from typing import Any

from ..bulk import ImportedNode, ImportedSession
from ..errors import FormatError
from ..ids import now
from ..model import ROLES
from .common import (
    block_text,
    chat_message,
    iso,
    keep_or_derive,
    latest_leaf,
    leaf_branches,
    make_run,
    stable_id,
)


def parse_openwebui(data: Any) -> list[ImportedSession]:
    chats = data if isinstance(data, list) else [data]
    sessions = []
    for i, chat in enumerate(chats, 1):
        where = f"chat {i}" if isinstance(data, list) else "chat"
        outer = chat if isinstance(chat, dict) else {}
        nested = outer.get("chat")
        inner = nested if isinstance(nested, dict) else outer
        history = inner.get("history")
        if not isinstance(history, dict) or not isinstance(history.get("messages"), dict):
            raise FormatError(f"{where}: expected an object with a 'history.messages' object")
        sessions.append(_chat(outer, inner, history, where))
    return sessions


def _chat(
    outer: dict[str, Any], inner: dict[str, Any], history: dict[str, Any], where: str
) -> ImportedSession:
    messages: dict[str, Any] = history["messages"]
    raw_id = outer.get("id") or inner.get("id")
    if not isinstance(raw_id, str) or not raw_id:
        # The chat has no id of its own (a bare chat object): name it by its messages.
        raw_id = stable_id("openwebui", *sorted(messages))
    sid = keep_or_derive(raw_id, "openwebui")
    created = iso(outer.get("created_at")) or iso(inner.get("timestamp")) or now()
    title = outer.get("title") or inner.get("title")
    session = ImportedSession(
        sid,
        title if isinstance(title, str) else None,
        {
            "source": "openwebui",
            "original_id": raw_id,
            "models": inner.get("models"),
            "tags": inner.get("tags"),
        },
        created,
        source=where,
    )
    ids = {key: keep_or_derive(key, "openwebui", raw_id) for key in messages}
    for key, msg in messages.items():
        label = f"{where}, message {key!r}"
        if not isinstance(msg, dict):
            raise FormatError(f"{label}: expected an object")
        parent = msg.get("parentId")
        if parent is not None and parent not in messages:
            raise FormatError(f"{label}: parent {parent!r} is not in history.messages")
        if not isinstance(msg.get("childrenIds", []), list):
            raise FormatError(f"{label}: 'childrenIds' should be a list")
        role = msg.get("role")
        if role not in ROLES:
            raise FormatError(f"{label}: unknown role {role!r}")
        content = msg.get("content")
        if not isinstance(content, str):
            content = block_text(content)
        at = iso(msg.get("timestamp")) or created
        run = None
        if role == "assistant":
            run = make_run(ids[key], at, model=msg.get("model"), provider="openwebui", usage=msg.get("usage"))
            if run:
                session.runs.append(run)
        session.nodes.append(
            ImportedNode(
                ids[key],
                ids[parent] if parent else None,
                "message",
                chat_message(role, content),
                at,
                run.id if run else None,
                source=label,
            )
        )
    current = history.get("currentId")
    head = ids.get(current) if isinstance(current, str) else None
    session.branches = leaf_branches(
        session.nodes, head or latest_leaf(session.nodes), {v: k for k, v in ids.items()}
    )
    return session
