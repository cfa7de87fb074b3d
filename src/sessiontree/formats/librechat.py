"""LibreChat conversation exports: nested ``children`` (``recursive: true``) or flat lists.

Contract: ``parse_librechat(data)`` takes the parsed JSON (one export object, or
a list of them) and yields one ``ImportedSession`` per conversation, as it is read.
- Messages come from ``messages``: nested ones are walked through
  ``children``; flat ones are linked by ``parentMessageId``. A
  ``parentMessageId`` of null or the all-zero UUID means a root.
- ``isCreatedByUser`` makes a ``user`` message, anything else an
  ``assistant`` message; text is ``text`` (or the text parts of ``content``).
  A message flagged ``error: true`` becomes an ``error`` marker node.
- Timestamps are ``createdAt``; a message without one inherits its parent's.
- There is no "current message" field, so ``main`` is the path to the leaf
  created last (ties: the one that comes last in the file, which is the
  sibling LibreChat shows by default); every other leaf gets a branch
  ``leaf-<first 8 chars of its id>``.
- ``model``, ``endpoint``, ``finish_reason`` and token counts become a run;
  the conversation's ``options`` (model, prompt prefix, temperature, ...) are
  kept in the session metadata, not turned into a system message.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..bulk import ImportedNode, ImportedSession
from ..errors import FormatError
from ..ids import now
from .common import (
    block_text,
    chat_message,
    iso,
    keep_or_derive,
    make_run,
    optional,
    parse_each,
    stable_id,
    token_usage,
    tree_branches,
)
from .jsonstream import JsonItems

ZERO = "00000000-0000-0000-0000-000000000000"


def parse_librechat(data: Any, skipped: list[str] | None = None) -> Iterator[ImportedSession]:
    """One session per entry, parsed as it is taken (see ``common.parse_each``); with
    ``skipped``, an entry that fails is left out and its error appended there instead
    of failing the whole file."""
    exports = data if isinstance(data, list | JsonItems) else [data]

    def one(i: int, export: Any) -> ImportedSession:
        where = f"conversation {i}" if isinstance(data, list | JsonItems) else "conversation"
        if isinstance(export, dict) and "messages" not in export and "messagesTree" in export:
            export = {**export, "messages": export["messagesTree"]}  # older exports, always nested
        if not isinstance(export, dict) or not isinstance(export.get("messages"), list):
            raise FormatError(f"{where}: expected an object with a 'messages' (or 'messagesTree') list")
        return _conversation(export, where)

    return parse_each(exports, one, skipped)


def _flatten(export: dict[str, Any], where: str) -> list[tuple[dict[str, Any], str | None]]:
    """(message, parent message id) in file order, walking nested children depth-first."""
    out: list[tuple[dict[str, Any], str | None]] = []
    stack: list[tuple[Any, str | None]] = [(m, None) for m in reversed(export["messages"])]
    while stack:
        msg, nest_parent = stack.pop()
        if not isinstance(msg, dict) or not isinstance(msg.get("messageId"), str):
            raise FormatError(
                f"{where}, message {len(out) + 1}: expected an object with a 'messageId' string"
            )
        label = f"{where}, message {msg['messageId']!r}"
        parent = optional(msg, "parentMessageId", str, label)
        if parent in (None, ZERO, ""):
            parent = None
        if nest_parent is not None:
            if parent not in (None, nest_parent):
                raise FormatError(
                    f"{label}: nested under {nest_parent!r} but its parentMessageId is {parent!r}"
                )
            parent = nest_parent
        out.append((msg, parent))
        children = optional(msg, "children", list, label) or []
        stack.extend((c, msg["messageId"]) for c in reversed(children))
    return out


def _conversation(export: dict[str, Any], where: str) -> ImportedSession:
    raw_id = export.get("conversationId")
    if not isinstance(raw_id, str) or not raw_id:
        raw_id = stable_id("librechat", where, str(export.get("title")))
    sid = keep_or_derive(raw_id, "librechat")
    flat = _flatten(export, where)
    first_time = next((iso(m.get("createdAt")) for m, _ in flat if iso(m.get("createdAt"))), None)
    created = first_time or now()
    options = export.get("options") if isinstance(export.get("options"), dict) else {}
    session = ImportedSession(
        sid,
        export.get("title") if isinstance(export.get("title"), str) else None,
        {
            "source": "librechat",
            "original_id": raw_id,
            "endpoint": export.get("endpoint"),
            "options": options,
        },
        created,
        source=where,
    )
    known = {m["messageId"] for m, _ in flat}
    ids = {m["messageId"]: keep_or_derive(m["messageId"], "librechat", raw_id) for m, _ in flat}
    times: dict[str, str] = {}
    for msg, parent in flat:
        key = msg["messageId"]
        label = f"{where}, message {key!r}"
        if parent is not None and parent not in known:
            raise FormatError(f"{label}: parent {parent!r} is not in the export")
        at = iso(msg.get("createdAt")) or (times.get(parent) if parent else None) or created
        times[key] = at
        text = msg.get("text")
        if not isinstance(text, str):
            text = block_text(msg.get("content"))
        node_id = ids[key]
        run = None
        if msg.get("error"):
            kind, payload = "error", {"error": text, "source": "librechat"}
        elif msg.get("isCreatedByUser"):
            kind, payload = "message", chat_message("user", text)
        else:
            kind, payload = "message", chat_message("assistant", text)
            usage = {k: msg[k] for k in ("promptTokens", "tokenCount") if isinstance(msg.get(k), int)}
            run = make_run(
                node_id,
                at,
                model=msg.get("model"),
                provider=msg.get("endpoint") or export.get("endpoint"),
                usage=token_usage(usage, "promptTokens", "tokenCount") if usage else None,
                finish_reason=msg.get("finish_reason"),
            )
        if run:
            session.runs.append(run)
        session.nodes.append(
            ImportedNode(
                node_id,
                ids[parent] if parent else None,
                kind,
                payload,
                at,
                run.id if run else None,
                source=label,
            )
        )
    session.branches = tree_branches(session.nodes, None, ids)
    return session
