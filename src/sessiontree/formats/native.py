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
from ..bulk import ImportedSession
from ..bulk_stream import Collector, Sink
from ..errors import FormatError
from ..names import shown
from ..records import (
    BRANCH_FIELDS,
    CHECKPOINT_FIELDS,
    NODE_FIELDS,
    RUN_FIELDS,
    SESSION_FIELDS,
    branch_from,
    checkpoint_from,
    fields,
    node_from,
    run_from,
)
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


# What each record's fields may hold in a file: one type for each name of the record's
# field list (``sessiontree.records``). An absent field is null, or {} for these:
_num = (int, float, type(None))
OBJECTS = {"metadata", "params", "usage"}
SPECS: dict[str, tuple[tuple[str, ...], tuple[Any, ...]]] = {
    "session": (SESSION_FIELDS, (_str, _opt, _dict, _str, _opt)),
    "run": (RUN_FIELDS, (_str, _opt, _opt, _dict, _dict, _num, _opt, _opt)),
    "node": (NODE_FIELDS, (_str, _opt, (int, type(None)), _str, _dict, _str, _opt)),
    "branch": (BRANCH_FIELDS, (_str, _opt, _opt, _opt, _dict)),
    "checkpoint": (CHECKPOINT_FIELDS, (_str, _str, _opt)),
}


def _record(kind: str, session_id: str | None, record: Any) -> dict[str, Any]:
    """A record's line: its type, its session and its fields, named as in the file."""
    line: dict[str, Any] = {"type": kind} if session_id is None else {"type": kind, "session_id": session_id}
    return line | fields(record, SPECS[kind][0])


def session_records(s: ImportedSession) -> Iterator[dict[str, Any]]:
    """The records of one session, in file order."""
    yield _record("session", None, s)
    for r in s.runs:
        yield _record("run", s.id, r)
    for n in s.nodes:
        yield _record("node", s.id, n)
    for b in s.branches:
        yield _record("branch", s.id, b)
    for c in s.checkpoints:
        yield _record("checkpoint", s.id, c)


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
            header = _values(rec, "session", where)
            if header["id"] in sessions:
                raise FormatError(f"{where}: session {header['id']} appears twice")
            sessions.add(header["id"])
            sink.session(ImportedSession(**header))
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


def _values(rec: dict[str, Any], kind: str, where: str) -> dict[str, Any]:
    """The fields of a record of type ``kind``, each checked (see ``_get``)."""
    names, types = SPECS[kind]
    return {
        name: _get(rec, name, t, where, {} if name in OBJECTS else None)
        for name, t in zip(names, types, strict=True)
    }


def _add(sink: Sink, sid: str, kind: str, rec: dict[str, Any], where: str) -> None:
    values = _values(rec, kind, where)
    if kind == "node":
        if values["depth"] is not None and values["depth"] < 0:
            raise FormatError(f"{where}: 'depth' must not be negative")
        sink.node(sid, node_from(values, where))
    elif kind == "run":
        sink.run(sid, run_from(values))
    elif kind == "branch":
        sink.branch(sid, branch_from(values))
    else:
        sink.checkpoint(sid, checkpoint_from(values))
