"""sessiontree's own JSONL format: a lossless dump of whole sessions.

Contract:
- Line 1 is the header ``{"format": "sessiontree", "version": 1}``; every other
  line is one JSON object with a ``type``: ``session``, then that session's
  ``run``, ``node`` (parents before children), ``branch`` and ``checkpoint``
  records, each naming its ``session_id``. docs/formats.md lists every field.
- ``export_native`` yields the lines (each ending in a newline) and reads each
  session as one consistent snapshot. Export, then ``import_native`` into an
  empty store, gives back identical ids, payloads, depths, refs, timestamps
  and runs.
- ``stream_native(lines, sink)`` reads the lines one at a time and reports each
  record to a ``bulk_stream.Sink`` as it is read (an import writes them as they
  come, so a file of any length is imported in bounded memory);
  ``parse_native`` collects them into ``ImportedSession``s. Both are strict: a
  wrong header or version, a line that is not a JSON object, an unknown record
  type, a missing or mistyped field or a record before its session raise
  ``FormatError`` naming the line.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from .. import bulk
from ..bulk import ImportedNode, ImportedRef, ImportedRun, ImportedSession
from ..bulk_stream import Collector, Sink
from ..errors import FormatError
from ..names import shown
from .common import jsonl_records, require, stored_text

if TYPE_CHECKING:
    from ..store import Store

FORMAT = "sessiontree"
VERSION = 1
HEADER = {"format": FORMAT, "version": VERSION}

_str, _opt = str, (str, type(None))
_dict = dict


def _line(record: dict[str, Any]) -> str:
    try:
        text = json.dumps(record, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: only \u escapes can carry it
        text = json.dumps(record, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return text + "\n"


def session_records(s: ImportedSession) -> Iterator[dict[str, Any]]:
    """The records of one session, in file order."""
    yield {
        "type": "session",
        "id": s.id,
        "title": s.title,
        "metadata": s.metadata,
        "created_at": s.created_at,
        "archived_at": s.archived_at,
    }
    for r in s.runs:
        yield {
            "type": "run",
            "session_id": s.id,
            "id": r.id,
            "model": r.model,
            "provider": r.provider,
            "params": r.params,
            "usage": r.usage,
            "latency_ms": r.latency_ms,
            "finish_reason": r.finish_reason,
            "created_at": r.created_at,
        }
    for n in s.nodes:
        yield {
            "type": "node",
            "session_id": s.id,
            "id": n.id,
            "parent_id": n.parent_id,
            "depth": n.depth,
            "kind": n.kind,
            "payload": n.payload,
            "created_at": n.created_at,
            "run_id": n.run_id,
        }
    for b in s.branches:
        yield {
            "type": "branch",
            "session_id": s.id,
            "name": b.name,
            "head_id": b.node_id,
            "created_at": b.created_at,
            "updated_at": b.updated_at,
            "metadata": b.metadata,
        }
    for c in s.checkpoints:
        yield {
            "type": "checkpoint",
            "session_id": s.id,
            "name": c.name,
            "node_id": c.node_id,
            "created_at": c.created_at,
        }


def export_native(store: Store, session_ids: Iterable[str] | None = None) -> Iterator[str]:
    """The lines of a native file holding the given sessions (default: all, archived too).

    Session ids may be unique prefixes; they are resolved before the first line.
    """
    ids = (
        bulk.session_ids(store) if session_ids is None else [store.resolve_session_id(i) for i in session_ids]
    )
    return _lines(store, ids)


def _lines(store: Store, ids: list[str]) -> Iterator[str]:
    yield _line(HEADER)
    for session_id in ids:
        for record in session_records(bulk.read_session(store, session_id)):
            yield _line(record)


def _header(number: int, record: dict[str, Any]) -> None:
    if record.get("format") != FORMAT and record.get("type") == "session":
        raise FormatError(f"line {number}: the header line {_line(HEADER).strip()} is missing")
    if record.get("format") != FORMAT:
        raise FormatError(f'line {number}: not a sessiontree file (the header needs "format": "{FORMAT}")')
    version = record.get("version")
    if type(version) is not int or version != VERSION:  # not 1.0, nor true (bool is an int)
        raise FormatError(
            f"line {number}: unsupported sessiontree format version {version!r}"
            f" (this version of sessiontree reads version {VERSION})"
        )


def parse_native(lines: Iterable[str]) -> list[ImportedSession]:
    """Parse the lines of a native file (see the module docstring)."""
    sink = Collector()
    stream_native(lines, sink)
    return sink.sessions


def stream_native(lines: Iterable[str], sink: Sink) -> None:
    """Report each record of a native file to ``sink`` as it is read."""
    sessions: set[str] = set()
    header_seen = False
    for number, rec in jsonl_records(lines):
        if not header_seen:
            _header(number, rec)
            header_seen = True
            continue
        where = f"line {number}"
        kind = rec.get("type")
        if kind == "session":
            sid = _get(rec, "id", _str, where)
            if sid in sessions:
                raise FormatError(f"{where}: session {sid} appears twice")
            sessions.add(sid)
            sink.session(
                ImportedSession(
                    sid,
                    _get(rec, "title", _opt, where),
                    _get(rec, "metadata", _dict, where, {}),
                    _get(rec, "created_at", _str, where),
                    archived_at=_get(rec, "archived_at", _opt, where),
                )
            )
            continue
        if kind not in ("run", "node", "branch", "checkpoint"):
            raise FormatError(f"{where}: unknown record type {kind!r}")
        sid = _get(rec, "session_id", _str, where)
        if sid not in sessions:
            raise FormatError(f"{where}: {kind} of session {sid}, which no earlier session record introduced")
        _add(sink, sid, kind, rec, where)
    if not header_seen:
        raise FormatError("the file is empty (expected a sessiontree header line)")


IDS = {"id", "session_id", "parent_id", "run_id", "head_id", "node_id"}


def _get(rec: dict[str, Any], name: str, types: Any, where: str, default: Any = None) -> Any:
    """A field of a record: of ``types``; text a store can keep; an id that prints on one
    line (error messages and the command line show ids as they are)."""
    value = require(rec.get(name, default), types, where, name)
    if isinstance(value, str):
        stored_text(value, where, name)
        if name in IDS and not value.isprintable():
            raise FormatError(f"{where}: {name!r} {shown(value)} holds a control or invisible character")
    return value


def _add(sink: Sink, sid: str, kind: str, rec: dict[str, Any], where: str) -> None:
    def get(name: str, types: Any, default: Any = None) -> Any:
        return _get(rec, name, types, where, default)

    if kind == "node":
        depth = get("depth", (int, type(None)))
        if depth is not None and depth < 0:
            raise FormatError(f"{where}: 'depth' must not be negative")
        sink.node(
            sid,
            ImportedNode(
                get("id", _str),
                get("parent_id", _opt),
                get("kind", _str),
                get("payload", _dict),
                get("created_at", _str),
                get("run_id", _opt),
                depth=depth,
                source=where,
            ),
        )
    elif kind == "run":
        sink.run(
            sid,
            ImportedRun(
                get("id", _str),
                get("model", _opt),
                get("provider", _opt),
                get("params", _dict, {}),
                get("usage", _dict, {}),
                get("latency_ms", (int, float, type(None))),
                get("finish_reason", _opt),
                get("created_at", _opt),
            ),
        )
    elif kind == "branch":
        sink.branch(
            sid,
            ImportedRef(
                get("name", _str),
                get("head_id", _opt),
                get("created_at", _opt),
                get("updated_at", _opt),
                get("metadata", _dict, {}),
            ),
        )
    else:
        sink.checkpoint(sid, ImportedRef(get("name", _str), get("node_id", _str), get("created_at", _opt)))
