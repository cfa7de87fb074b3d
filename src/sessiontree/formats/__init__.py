"""Import and export of conversation trees: sessiontree's own JSONL and foreign formats.

Contract:
- ``import_file(store, path, format="auto")`` writes every session the file
  holds in ONE transaction: all of it or nothing. It returns the sessions
  (``Imported``: a sequence that reads each from the store when asked for).
  The JSONL formats that can be written as they are read (``native``, ``pi``,
  ``yoagent``) are streamed into the store line by line
  (``sessiontree.bulk_stream``); the others are parsed one session at a time
  (pure, no SQL), each written via ``bulk.write_each`` before the next is read:
  a file of many conversations (chatgpt, librechat, openwebui) is never held
  whole, so memory follows its largest conversation, not the file.
- Malformed input raises ``FormatError`` in one line naming the file (once), the
  line or record, and the problem; a clash with what the store holds raises
  ``bulk.ImportConflict`` (a ``Conflict``). Either way nothing is written. The
  readers word their messages without the file (``line 7: ...``); ``_named``
  adds it at each public entry point. ``check_file(path)`` refuses a directory
  or a missing path first, naming it as given.
- ``detect_format(path)`` names the format from the file's first bytes and
  shape: ``native``, ``openai``, ``chatgpt``, ``librechat``, ``openwebui``,
  ``claude-code``, ``pi``, ``yoagent``, ``yoagent-messages``, ``yieldagent`` or ``sharegpt``.
- ``export_lines`` is the text of an export: ``native``, ``messages`` and
  ``sharegpt`` (any number of sessions; see ``finetune``), ``openai`` and
  ``yoagent-messages`` (one branch of one session), ``yoagent``, ``pi`` and
  ``claude-code`` (one session, the whole tree or one branch), ``yieldagent`` (a
  pause), ``preference`` (chosen/rejected pairs of scored branches, any number of
  sessions); ``export_file`` writes it atomically: a temporary file renamed into place.
  ``messages`` and ``preference`` have no importer.
- ``progress(done, total)`` is called with node counts as nodes are written;
  a streamed import does not know its total until the end and passes 0 until then.
- ``skip_invalid=True`` leaves out a conversation that fails to parse (files
  holding several) and reports it; ``report(line)`` receives what the import
  has to say (warnings when no ``report`` is given).
See docs/formats.md for what each format maps to.
"""

from __future__ import annotations

import codecs
import errno
import json
import os
import tempfile
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, overload

from .. import bulk
from ..bulk import ImportConflict, ImportedSession, InvalidTree
from ..bulk_stream import Sink, write_stream
from ..errors import DiskFull, FormatError, InvalidPayload, SessionTreeError
from .chatgpt import parse_chatgpt
from .claude_code import parse_claude_code
from .claude_code_export import export_claude_code
from .common import answer_open_calls
from .errors import located
from .finetune import export_dataset, export_preference
from .jsonstream import CHUNK, JsonItems, read_json
from .librechat import parse_librechat
from .native import export_native, parse_native, stream_native
from .openai import export_openai, parse_openai
from .openwebui import parse_openwebui
from .pi import is_header as is_pi_header
from .pi import parse_pi, stream_pi
from .pi_export import export_pi
from .sharegpt import is_record as is_sharegpt
from .sharegpt import parse_sharegpt_array, parse_sharegpt_lines
from .yieldagent import export_yieldagent, parse_yieldagent
from .yieldagent import is_state as is_yieldagent_state
from .yoagent import (
    export_yoagent,
    export_yoagent_messages,
    is_entry,
    is_message,
    parse_yoagent,
    parse_yoagent_messages,
    stream_yoagent,
)

if TYPE_CHECKING:
    from ..session import Session
    from ..store import Store

__all__ = [
    "FORMATS",
    "FormatError",
    "Imported",
    "ImportConflict",
    "check_file",
    "detect_format",
    "export_file",
    "export_lines",
    "export_native",
    "export_openai",
    "export_yoagent",
    "export_yoagent_messages",
    "import_file",
    "import_native",
    "import_openai",
    "parse_file",
    "stream_file",
]

Progress = Callable[[int, int], None]
JSONL_FORMATS: dict[str, Callable[[Iterable[str]], Any]] = {
    "native": parse_native,
    "claude-code": parse_claude_code,
    "pi": parse_pi,
    "yoagent": parse_yoagent,
    "sharegpt": parse_sharegpt_lines,  # a JSON array of them too (see _parsed)
}
# Written as they are read (see import_file); their parsers answer open calls themselves.
STREAMED: dict[str, Callable[[Iterable[str], Sink], None]] = {
    "native": stream_native,
    "pi": stream_pi,
    "yoagent": stream_yoagent,
}
JSON_FORMATS: dict[str, Callable[[Any], Any]] = {
    "openai": partial(parse_openai, copy_messages=False),  # the decoded file is ours alone
    "chatgpt": parse_chatgpt,
    "librechat": parse_librechat,
    "openwebui": parse_openwebui,
    "yoagent-messages": parse_yoagent_messages,
    "yieldagent": parse_yieldagent,
}
FORMATS = (*JSONL_FORMATS, *JSON_FORMATS)
EXPORT_FORMATS = (
    "native",
    "openai",
    "yoagent",
    "yoagent-messages",
    "pi",
    "claude-code",
    "messages",
    "sharegpt",
    "yieldagent",
    "preference",
)
# One session per file; with a branch, its path alone, else the whole tree (see export_lines).
ONE_SESSION = ("openai", "yoagent", "yoagent-messages", "pi", "claude-code", "yieldagent")
BRANCH_FORMATS = ("openai", "yoagent-messages", "pi", "claude-code", "messages", "sharegpt", "yieldagent")
CLAUDE_CODE_TYPES = {
    "user",
    "assistant",
    "system",
    "progress",
    "summary",
    "queue-operation",
    "file-history-snapshot",
}


def check_file(path: str | Path) -> Path:
    """``path`` when it names a file; FormatError naming it as given otherwise."""
    path = Path(path)
    if path.is_dir():
        raise FormatError(f"{path}: is a directory, not a file")
    if not path.exists():
        raise FormatError(f"{path}: the file does not exist")
    return path


@contextmanager
def _named(name: str | None) -> Iterator[None]:
    """Errors about the input raised inside gain the file's name, once: every reader
    below words its messages without it (``line 7: ...``, ``conversation 2: ...``)."""
    try:
        yield
    except (InvalidTree, InvalidPayload) as e:  # FormatError included; a bad title is a payload
        kind = type(e) if isinstance(e, FormatError) else FormatError  # InvalidEntry stays one
        raise kind(located(name, str(e))) from None
    except ImportConflict as e:
        raise ImportConflict(located(name, str(e))) from None


@contextmanager
def _reading(path: Path) -> Iterator[TextIO]:
    """Lines of a UTF-8 text file (a BOM is ignored); FormatError for anything else."""
    try:
        with open(path, encoding="utf-8-sig", newline=None) as f:
            yield f
    except UnicodeDecodeError:
        raise FormatError(_not_utf8(path)) from None


def _not_utf8(path: Path) -> str:
    """Where the file's first byte that is not UTF-8 is. The decoder's own position
    counts from the chunk it was decoding, so the file is read again, as bytes."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset, line = 0, 1
    with open(path, "rb") as f:
        while True:
            chunk = f.read(CHUNK)
            pending = len(decoder.getstate()[0])  # the start of a character cut by the last chunk
            try:
                decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as e:
                line += chunk[: max(e.start - pending, 0)].count(b"\n")
                at = offset - pending + e.start
                return f"line {line}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {at})"
            if not chunk:
                return "not UTF-8 text"  # the decoder failed on what this one accepts
            line += chunk.count(b"\n")
            offset += len(chunk)


def detect_format(path: str | Path, *, name: str | None = None) -> str:
    """The name of the file's format (see ``FORMATS``); FormatError when unknown.
    ``name``: what messages call the file (default: its file name)."""
    path = check_file(path)
    with _named(name or path.name):
        record = _first_record(path)
        if isinstance(record, dict):
            name = _jsonl_kind(record)
            if name:
                return name
            whole: Any = record  # a one-line JSON document
        else:
            whole = read_json(path, _reading)
        name = _json_kind(whole)
        if name is None:
            raise FormatError(f"unknown format; pass one of {', '.join(FORMATS)}")
        return name


def _first_record(path: Path) -> Any:
    """The first non-blank line, decoded; None when it is not JSON on its own (a
    pretty-printed document) or opens an array."""
    with _reading(path) as lines:
        first = ""
        while not first.strip():
            first = lines.readline(CHUNK)  # bounded: an export may be one long line
            if not first:
                raise FormatError("the file is empty")
        if first.lstrip().startswith("["):  # a JSON array: its first element decides
            return None
        if not first.endswith("\n"):
            first += lines.readline()
    try:
        return json.loads(first)
    except json.JSONDecodeError:
        return None  # a multi-line (pretty-printed) JSON document
    except RecursionError:  # what every reader says of it (see common.load_json)
        raise FormatError("JSON nested too deeply") from None


def _jsonl_kind(record: dict[str, Any]) -> str | None:
    kind = record.get("type")
    if record.get("format") == "sessiontree":
        return "native"
    if is_entry(record):
        return "yoagent"
    if is_sharegpt(record):
        return "sharegpt"
    if is_pi_header(record) and "history" not in record:
        return "pi"
    if kind == "session" and "created_at" in record:
        return "native"  # a native file without its header line: the native reader says so
    if (
        "uuid" in record
        or "parentUuid" in record
        or "leafUuid" in record
        or (isinstance(kind, str) and kind in CLAUDE_CODE_TYPES and "messages" not in record)
    ):
        return "claude-code"
    return None


def _json_kind(data: Any) -> str | None:
    if isinstance(data, JsonItems):
        sample = data.first()
        if sample is None:
            return "openai"  # an empty message list
        return _json_kind([sample])
    sample = data[0] if isinstance(data, list) and data else data
    if isinstance(data, list) and not data:
        return "openai"  # an empty message list
    if is_yieldagent_state(data):
        return "yieldagent"
    if not isinstance(sample, dict):
        return None
    if "mapping" in sample:
        return "chatgpt"
    if isinstance(data, list) and is_sharegpt(sample):
        return "sharegpt"
    if isinstance(data, list) and is_message(sample):
        return "yoagent-messages"
    if "history" in sample or isinstance(sample.get("chat"), dict):
        return "openwebui"
    if "conversationId" in sample and isinstance(sample.get("messagesTree"), list):
        return "librechat"  # the key older LibreChat versions wrote
    messages = sample.get("messages")
    if isinstance(messages, list) and (
        "conversationId" in sample
        or "recursive" in sample
        or any(isinstance(m, dict) and "messageId" in m for m in messages[:5])
    ):
        return "librechat"
    if isinstance(data, list) and "role" in sample or isinstance(messages, list):
        return "openai"
    return None


Report = Callable[[str], None]
SKIPPABLE = {"chatgpt", "librechat", "openwebui"}  # files holding a list of conversations


def parse_file(
    path: str | Path,
    format: str = "auto",
    *,
    skip_invalid: bool = False,
    report: Report | None = None,
    name: str | None = None,
) -> list[ImportedSession]:
    """The sessions a file holds, parsed but not written (all of them in memory:
    ``import_file`` writes each as it is parsed instead).

    ``report(line)`` is told what the import should say: the sessions' notes
    (e.g. a current-message pointer that names no message) and, with
    ``skip_invalid``, each conversation left out and why. Without ``report``
    these lines are issued as warnings. ``skip_invalid`` applies to the formats
    whose files hold several conversations (chatgpt, librechat, openwebui).
    ``name``: what messages call the file (default: its file name).
    """
    path, format, name = _known(path, format, name)
    skipped: list[str] | None = [] if skip_invalid and format in SKIPPABLE else None
    with _named(name):
        sessions = list(_sessions(path, format, skipped))
    _say(name, [n for s in sessions for n in s.notes], skipped, report)
    return sessions


def _known(path: str | Path, format: str, name: str | None) -> tuple[Path, str, str]:
    """The checked path, the format (detected for ``auto``) and what messages call the file."""
    path = check_file(path)
    name = name or path.name
    if format == "auto":
        format = detect_format(path, name=name)
    if format not in FORMATS:
        raise FormatError(f"unknown format {format!r}; expected auto or one of {', '.join(FORMATS)}")
    return path, format, name


def _say(name: str, notes: list[str], skipped: list[str] | None, report: Report | None) -> None:
    """Tell ``report`` (else warn) the sessions' notes, then each conversation left out."""
    said = [located(name, n) for n in notes]
    said += [located(name, f"skipped {why}") for why in skipped or []]
    for line in said:
        if report is not None:
            report(line)
        else:
            warnings.warn(line, stacklevel=3)


def _sessions(path: Path, format: str, skipped: list[str] | None) -> Iterator[ImportedSession]:
    """The sessions of a file of a known format, one at a time, their open calls
    answered (errors not yet naming the file). A file of several conversations
    (``SKIPPABLE``, a top-level array) is decoded one conversation per session taken."""
    answer = format not in ("native", "openai", *STREAMED)  # a native file is restored row for row
    for session in _parsed(path, format, skipped):
        if answer:
            answer_open_calls(session)
        yield session


def _parsed(path: Path, format: str, skipped: list[str] | None) -> Iterator[ImportedSession]:
    """The sessions of a file of a known format, as its parser makes them."""
    if format in JSONL_FORMATS and not (format == "sharegpt" and _first_record(path) is None):
        with _reading(path) as lines:  # open while a lazy parser reads it
            yield from _each(JSONL_FORMATS[format](lines))
        return
    data = read_json(path, _reading)  # a top-level array: decoded one element at a time
    if format == "sharegpt":  # a JSON array of records, not JSONL
        yield from parse_sharegpt_array(data)
        return
    if isinstance(data, JsonItems) and format not in SKIPPABLE:
        data = list(data)  # parsers of one conversation take a list
    parser: Callable[..., Any] = JSON_FORMATS[format]
    yield from _each(parser(data, skipped) if skipped is not None else parser(data))


def _each(parsed: ImportedSession | Iterable[ImportedSession]) -> Iterable[ImportedSession]:
    """A parser's result as sessions: one, a list, or the lazy ones of a ``SKIPPABLE`` format."""
    return [parsed] if isinstance(parsed, ImportedSession) else parsed


def write(
    store: Store, sessions: list[ImportedSession], name: str | None = None, progress: Progress | None = None
) -> Imported:
    """Write parsed sessions in one transaction; errors gain the file name."""
    return _located(store, name, lambda: bulk.write_sessions(store, sessions, progress, consume=True))


def _located(store: Store, name: str | None, writing: Callable[[], list[str]]) -> Imported:
    """The sessions ``writing`` wrote; its errors gain the file name."""
    with _named(name):
        ids = writing()
    return Imported(store, ids)


class Imported(Sequence["Session"]):
    """The sessions an import wrote, in the file's order, each read from the store when
    it is asked for: an export of 100,000 conversations returns 100,000 ids, not
    100,000 sessions with their metadata decoded (2 KB each for LibreChat's)."""

    def __init__(self, store: Store, ids: list[str]) -> None:
        self.store, self.ids = store, ids

    def __len__(self) -> int:
        return len(self.ids)

    @overload
    def __getitem__(self, index: int) -> Session: ...
    @overload
    def __getitem__(self, index: slice) -> list[Session]: ...
    def __getitem__(self, index: int | slice) -> Session | list[Session]:
        if isinstance(index, slice):
            return [self.store.session(i) for i in self.ids[index]]
        return self.store.session(self.ids[index])

    def __repr__(self) -> str:
        return f"<{len(self.ids)} imported session(s)>"


def stream_file(
    store: Store,
    path: str | Path,
    format: str,
    progress: Progress | None = None,
    *,
    name: str | None = None,
) -> Imported:
    """Import a file of a ``STREAMED`` format, written as it is read, all or nothing.
    ``name``: what messages call the file (default: its file name)."""
    path = check_file(path)
    with _named(name or path.name), _reading(path) as lines:
        ids = write_stream(store, lambda sink: STREAMED[format](lines, sink), progress)
    return Imported(store, ids)


def import_file(
    store: Store,
    path: str | Path,
    format: str = "auto",
    progress: Progress | None = None,
    *,
    skip_invalid: bool = False,
    report: Report | None = None,
    name: str | None = None,
) -> Imported:
    """Import every session of a file, all or nothing; return them. Each session is
    written as soon as it is parsed (``bulk.write_each``; native and pi records as
    they are read, ``stream_file``), inside the file's one transaction. ``skip_invalid``,
    ``report`` and ``name``: see ``parse_file``."""
    path, format, name = _known(path, format, name)
    if format in STREAMED:
        return stream_file(store, path, format, progress, name=name)
    skipped: list[str] | None = [] if skip_invalid and format in SKIPPABLE else None

    def parsed() -> Iterator[ImportedSession]:
        notes: list[str] = []
        for session in _sessions(path, format, skipped):
            notes.extend(session.notes)
            yield session  # written (and its nodes dropped) before the next is parsed
        _say(name, notes, skipped, report)  # the file is read: what parse_file says, before the commit

    return _located(store, name, lambda: bulk.write_each(store, parsed(), progress))


def import_native(
    store: Store, source: str | Path | Iterable[str], progress: Progress | None = None
) -> Imported:
    """Import a native file (a path) or its lines; merges by id, idempotently."""
    if isinstance(source, str | Path):
        return import_file(store, source, "native", progress)
    return _located(
        store, None, lambda: write_stream(store, lambda sink: stream_native(source, sink), progress)
    )


def import_openai(store: Store, messages: Any, title: str | None = None) -> Session:
    """A new session whose ``main`` branch is the given messages (a list, or {"messages": [...]})."""
    return write(store, [parse_openai(messages, title)])[0]


def _joined(lines: Iterable[str]) -> Iterator[str]:
    """Lines joined by newlines, none after the last (as yoagent's ``to_jsonl``)."""
    for i, line in enumerate(lines):
        yield ("\n" if i else "") + line


def export_lines(
    store: Store,
    format: str = "native",
    *,
    session_ids: Iterable[str] | None = None,
    branch: str | None = None,
    per: str = "leaf",
) -> Iterable[str]:
    """The text of an export, in pieces to write one after the other (a session at a
    time: the store is never read whole). Everything the export refuses is refused
    before the first piece. ``branch``: the ref whose path ``openai`` and
    ``yoagent-messages`` write (default ``main``), or the path ``pi``, ``claude-code``,
    ``messages`` and ``sharegpt`` write instead of the whole tree. ``per``: ``leaf`` or
    ``branch``, the lines of ``messages`` and ``sharegpt``."""
    if format not in EXPORT_FORMATS:
        raise FormatError(f"cannot export to {format!r}; export formats: {', '.join(EXPORT_FORMATS)}")
    if branch is not None and format not in BRANCH_FORMATS:
        raise FormatError(
            f"the {format} format exports whole sessions; a branch applies to {', '.join(BRANCH_FORMATS)}"
        )
    if format == "native":
        return export_native(store, session_ids)
    if format in ("messages", "sharegpt"):
        return export_dataset(store, format, session_ids, per, branch)
    if format == "preference":
        return export_preference(store, session_ids)
    ids = list(session_ids or [])
    if len(ids) != 1:
        what = "one branch of one session" if format in ("openai", "yoagent-messages") else "one session"
        raise FormatError(f"the {format} format holds {what}; got {len(ids)} session ids")
    if format in ("openai", "yieldagent"):
        document = (
            export_openai(store.session(ids[0]), branch or "main")
            if format == "openai"
            else export_yieldagent(store, ids[0], branch or "main")
        )
        text = json.dumps(document, ensure_ascii=False, indent=2)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate survives only as a \u escape
            text = json.dumps(document, ensure_ascii=True, indent=2)
        return [text + "\n"]
    if format == "yoagent":
        return _joined(export_yoagent(store, ids[0]))
    if format == "yoagent-messages":
        return [export_yoagent_messages(store, ids[0], branch or "main")]
    if format == "pi":
        return export_pi(store, ids[0], branch)
    return export_claude_code(store, ids[0], branch)


def export_file(
    store: Store,
    path: str | Path,
    format: str = "native",
    *,
    session_ids: Iterable[str] | None = None,
    branch: str | None = None,
    per: str = "leaf",
) -> Path:
    """Write an export (``export_lines``) to ``path`` atomically: a temporary file
    renamed into place, nothing left behind when it fails. Never the store's own
    file (``Store.check_output``)."""
    store.check_output(path)
    path = Path(path)
    lines = iter(export_lines(store, format, session_ids=session_ids, branch=branch, per=per))
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
    except OSError as e:  # no such directory, no permission: say it of the path asked for
        raise SessionTreeError(f"cannot write {path}: {e.strerror}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.writelines(lines)
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError) and e.errno == errno.ENOSPC:
            raise DiskFull(f"cannot write {path}: the disk is full; nothing was written") from None
        raise
    return path
