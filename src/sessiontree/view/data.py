"""What the browser view shows of a session, as plain JSON-ready data.

Contract:
- ``session_data(store, session_id, prices=None)`` reads one session whole, in
  one consistent snapshot (``bulk.read_session``), and returns a dict the page's
  script understands: the nodes (id, parent, kind, time, run, payload), the
  branches and checkpoints, the pauses a human can decide (undecided, a branch
  at them; ``expired`` names those past their deadline), the runs' metrics and the
  width at which ids are shown. Nothing else of the store is included.
- Secrets: a run contributes only its model, provider, token counts, latency
  and finish reason (never its request parameters). ``redacted(value)`` is the
  one redaction of everything the view hands out, the same as provider errors
  get (anything after ``Bearer`` or ``Authorization:``), so a key pasted into a
  conversation, a title or a branch name travels neither into a shared HTML
  file nor to a browser. It runs where data leaves: ``page.page`` (every page
  and file) and ``sessiontree serve``'s JSON replies; the functions here
  return strings as stored, so nothing is redacted twice.
  ``scrubbed_snippet(snippet, payload)`` is for a search snippet, a fragment
  in which a credential may be cut or marked so the patterns miss it: every
  word of every credential of the node's payload is taken out of it (and the
  snippet is then redacted where it leaves, as any string).
- ``inbox(store)`` lists every pause a human can decide (``Store.pending``: no
  decision yet, a branch stands at it, not in the trash), oldest first, with its
  calls, its ``state`` (``pending``, or ``expired`` once its deadline has passed: see
  ``deadlines``) and ``expires_at``: what ``sessiontree serve`` shows as its inbox.
- ``version(store, session_id)`` is a short text that changes whenever a node,
  a branch head or a checkpoint of the session changes; the live view polls it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from typing import Any

from .. import deadlines
from ..bulk import read_session
from ..kinds import PausePayload
from ..model import usage_tokens
from ..redact import Redactor
from ..store import Store

_REDACT = Redactor({})  # no known key: the patterns alone (Bearer ..., Authorization: ...)
_WORD = re.compile(r"[^\W_]+")  # a word as the full-text index splits text (``_`` separates too)


def redacted(value: Any) -> Any:
    """``value`` with every string redacted, at any nesting depth."""
    if isinstance(value, str):
        return _REDACT(value)
    if isinstance(value, dict):
        return {_REDACT(k) if isinstance(k, str) else k: redacted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redacted(v) for v in value]
    return value


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def scrubbed_snippet(snippet: str, payload: Any) -> str:
    """``snippet`` (of a node whose payload is ``payload``) with each word of each
    credential in the payload replaced by ``[redacted]``."""
    words = {w for text in _strings(payload) for secret in _REDACT.found(text) for w in _WORD.findall(secret)}
    if words:
        alternatives = "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))
        snippet = re.sub(rf"(?<![^\W_])(?:{alternatives})(?![^\W_])", "[redacted]", snippet)
    return snippet


def session_data(
    store: Store, session_id: str, *, prices: dict[str, dict[str, float]] | None = None
) -> dict[str, Any]:
    """The view's data for one session (see the module docstring)."""
    s = read_session(store, store.resolve_session_id(session_id))
    runs = {
        r.id: {
            "model": r.model,
            "provider": r.provider,
            "input_tokens": usage_tokens(r.usage)[0],
            "output_tokens": usage_tokens(r.usage)[1],
            "latency_ms": r.latency_ms,
            "finish_reason": r.finish_reason,
        }
        for r in s.runs
    }
    # As ``Store.pending`` has it: undecided, and a branch stands at it (so it can go on).
    decided = {n.parent_id for n in s.nodes if n.kind == "decision"}
    heads = {b.node_id for b in s.branches}
    waiting = [n for n in s.nodes if n.kind == "pause" and n.id in heads and n.id not in decided]
    pending = [n.id for n in waiting]
    expired = [n.id for n in waiting if deadlines.is_expired(n)]
    branches = sorted(s.branches, key=lambda b: b.updated_at or "", reverse=True)
    names = {b.name for b in branches}
    current = "main" if "main" in names else (branches[0].name if branches else None)
    ids = [n.id for n in s.nodes]
    short = store.abbreviations(ids) if ids else {}
    return {
        "session": {"id": s.id, "title": s.title or "", "created_at": s.created_at},
        "short": len(next(iter(short.values()))) if short else 8,
        "nodes": [
            {
                "id": n.id,
                "parent": n.parent_id,
                "kind": n.kind,
                "at": n.created_at,
                "run": n.run_id,
                "payload": n.payload,
            }
            for n in s.nodes
        ],
        "runs": runs,
        "branches": [{"name": b.name, "head": b.node_id} for b in branches if b.node_id],
        "checkpoints": [{"name": c.name, "node": c.node_id} for c in s.checkpoints],
        "pending": pending,
        "expired": expired,  # of the pending ones, those past their deadline: not decidable
        "current": current,
        "prices": prices or {},
    }


def inbox(store: Store) -> list[dict[str, Any]]:
    """Every pause a human can decide, oldest first, with its session and calls."""
    titles = {info.id: info.title for info in store.sessions(include_archived=True)}
    pauses = store.pending()
    short = store.abbreviations([p.id for p in pauses]) if pauses else {}
    return [
        {
            "pause": p.id,
            "short": short[p.id],
            "session": p.session_id,
            "title": titles.get(p.session_id) or "",
            "at": p.created_at,
            "reason": record.reason,
            "calls": record.call_payloads(),
            **deadlines.about(p),
        }
        for p in pauses
        for record in [PausePayload.from_node(p)]
    ]


def version(store: Store, session_id: str) -> str:
    """Changes whenever the session gains a node or a pointer moves (for polling)."""
    session = store.session(session_id)
    parts = [leaf.id for leaf in session.leaves()]
    parts += [f"b:{b.name}={b.head_id}" for b in session.branches()]
    parts += [f"c:{c.name}={c.node_id}" for c in session.checkpoints()]
    parts += [f"p:{p.id}" for p in session.pending()]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
