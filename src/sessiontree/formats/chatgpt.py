"""ChatGPT data export (``conversations.json``): ``mapping`` trees with a ``current_node``.

Contract: ``parse_chatgpt(data)`` takes the parsed JSON (a list of
conversations, or one) and yields one ``ImportedSession`` per conversation, as it is read.
- Each mapping entry with a message becomes a ``message`` node; its content
  parts are joined into text (non-text parts become ``[content type]``).
- Entries without a message (the root) and system messages with no text (the
  hidden system node ChatGPT puts under the root) are skipped; their
  children hang from the nearest kept ancestor.
- An assistant message addressed to a tool (``recipient`` other than ``all``)
  becomes an assistant message with one tool call; the ``tool`` message that
  answers it gets that call's id.
- ``main`` is the path to ``current_node`` (or to the newest leaf when it is
  missing); every other leaf gets a branch ``leaf-<first 8 chars of its id>``.
- Ids are kept when they are UUIDs, else derived stably from the conversation
  id; the model slug and finish reason become a run.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..bulk import ImportedNode, ImportedRun, ImportedSession
from ..errors import FormatError
from ..ids import new_call_id, now
from .common import (
    EPOCH,
    block_text,
    chat_message,
    iso,
    keep_or_derive,
    make_run,
    optional,
    parents_first,
    parse_each,
    resolve,
    stable_id,
    tool_call,
    tree_branches,
    tree_entry,
)
from .jsonstream import JsonItems

ROLES = {"system", "user", "assistant", "tool"}


def parse_chatgpt(data: Any, skipped: list[str] | None = None) -> Iterator[ImportedSession]:
    """One session per entry, parsed as it is taken (see ``common.parse_each``); with
    ``skipped``, an entry that fails is left out and its error appended there instead
    of failing the whole file."""
    conversations = data if isinstance(data, list | JsonItems) else [data]

    def one(i: int, conv: Any) -> ImportedSession:
        where = f"conversation {i}"
        if not isinstance(conv, dict) or not isinstance(conv.get("mapping"), dict):
            raise FormatError(f"{where}: expected an object with a 'mapping' object")
        return _conversation(conv, where)

    return parse_each(conversations, one, skipped)


def content_text(content: Any) -> str:
    """The text of a ChatGPT ``content`` object, whatever its content_type."""
    if not isinstance(content, dict):
        return ""
    if isinstance(content.get("parts"), list):
        return block_text(content["parts"])
    text = content.get("text")
    if isinstance(text, str):  # code, execution_output
        return text
    # user_editable_context (custom instructions), tether_browsing_display, ...
    texts = [content.get(k) for k in ("user_profile", "user_instructions", "result", "summary")]
    return "\n\n".join(t for t in texts if isinstance(t, str) and t)


def reasoning_text(content: Any, where: str = "content") -> str | None:
    """The text of a ``thoughts`` or ``reasoning_recap`` content (None for others);
    FormatError naming ``where`` when ``thoughts`` is not a list."""
    if not isinstance(content, dict):
        return None
    kind = content.get("content_type")
    if kind == "reasoning_recap":
        return str(content.get("content") or "")
    if kind != "thoughts":
        return None
    parts: list[str] = []
    for thought in optional(content, "thoughts", list, where) or []:
        if isinstance(thought, dict):
            parts.extend(str(thought[k]) for k in ("summary", "content") if thought.get(k))
    return "\n\n".join(parts)


def _conversation(conv: dict[str, Any], where: str) -> ImportedSession:
    raw_id = (
        optional(conv, "conversation_id", str, where)
        or optional(conv, "id", str, where)
        or stable_id(where, str(conv.get("title")))
    )
    sid = keep_or_derive(raw_id, "chatgpt")
    created = iso(conv.get("create_time")) or now()
    session = ImportedSession(
        sid,
        conv.get("title") if isinstance(conv.get("title"), str) else None,
        {"source": "chatgpt", "original_id": raw_id, "model": conv.get("default_model_slug")},
        created,
        source=where,
    )
    mapping: dict[str, Any] = conv["mapping"]
    aliases: dict[str, str | None] = {}  # skipped entry -> its parent
    ids: dict[str, str] = {}
    for key, entry in mapping.items():
        label = f"{where}, node {key!r}"
        parent = tree_entry(entry, "parent", mapping, "the mapping", label)
        if _skipped(optional(entry, "message", dict, label), label):
            aliases[key] = parent
        else:
            ids[key] = keep_or_derive(key, "chatgpt", raw_id)
    calls: dict[str, str] = {}  # node id of an assistant tool call -> call id
    times: dict[str, str] = {}
    parent_of = {k: e.get("parent") for k, e in mapping.items()}
    for key in parents_first(parent_of, lambda k: f"{where}, node {k!r}"):
        if key in aliases:
            continue
        msg = mapping[key]["message"]
        parent_key = resolve(aliases, mapping[key].get("parent"))
        parent = ids.get(parent_key) if parent_key else None
        at = iso(msg.get("create_time")) or times.get(parent or "", created or EPOCH)
        times[ids[key]] = at
        payload, run = _payload(msg, ids[key], parent, calls, at, where, key)
        orphan = payload.get("role") == "tool" and "tool_call_id" not in payload
        if orphan:  # a tool output no message asked for (image generation): a note
            payload = {"source": "chatgpt", "type": "tool_output", **payload}
        session.nodes.append(
            ImportedNode(
                ids[key],
                parent,
                "note" if orphan else "message",
                payload,
                at,
                run.id if run else None,
                source=f"{where}, node {key!r}",
            )
        )
        if run:
            session.runs.append(run)
    current = resolve(aliases, optional(conv, "current_node", str, where))
    head = ids.get(current) if current else None
    session.branches = tree_branches(session.nodes, head, ids)
    return session


def _skipped(msg: dict[str, Any] | None, label: str) -> bool:
    if msg is None:
        return True
    role = optional(optional(msg, "author", dict, label) or {}, "role", str, f"{label}, author")
    return role == "system" and not content_text(optional(msg, "content", dict, label)).strip()


def _payload(
    msg: dict[str, Any],
    node_id: str,
    parent: str | None,
    calls: dict[str, str],
    at: str,
    where: str,
    key: str,
) -> tuple[dict[str, Any], ImportedRun | None]:
    label = f"{where}, node {key!r}"
    author = optional(msg, "author", dict, label) or {}
    role = optional(author, "role", str, f"{label}, author")
    if role not in ROLES:
        raise FormatError(f"{label}: unknown author role {role!r}")
    name = optional(author, "name", str, f"{label}, author")
    content = optional(msg, "content", dict, label)
    text = content_text(content)
    meta = optional(msg, "metadata", dict, label) or {}
    finish = (optional(meta, "finish_details", dict, f"{label}, metadata") or {}).get("type")
    run = None
    if role == "assistant":
        run = make_run(node_id, at, model=meta.get("model_slug"), provider="chatgpt", finish_reason=finish)
    recipient = msg.get("recipient")
    if role == "assistant" and isinstance(recipient, str) and recipient != "all":
        calls[node_id] = call_id = new_call_id(of=node_id)
        return chat_message(
            "assistant", None, tool_calls=[tool_call(call_id, recipient, {"input": text})]
        ), run
    if role == "tool":
        return chat_message("tool", text, tool_call_id=calls.get(parent or ""), name=name), run
    reasoning = reasoning_text(content, f"{label}, content")
    if reasoning is not None:  # thoughts, reasoning_recap: not an answer, but kept
        return chat_message(role, "", reasoning_content=reasoning), run
    return chat_message(role, text, name=name), run
