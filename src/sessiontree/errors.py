"""Every error sessiontree raises on purpose.

Contract: all derive from ``SessionTreeError``, so callers can catch one class;
each message names the thing that is wrong (the id, the name, the file).
Lookups that find nothing raise ``NotFound`` (also a ``KeyError``); refusals of
a well-formed request raise ``Conflict`` (also a ``ValueError``). Every class
sessiontree raises is defined here; ``docs/api.md`` draws the hierarchy.
"""

from __future__ import annotations

import json


class SessionTreeError(Exception):
    """Base class of sessiontree's errors."""

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0]) if self.args else ""


class NotFound(SessionTreeError, KeyError):
    """An id, prefix or name that matches nothing."""


class AmbiguousRef(SessionTreeError, ValueError):
    """A prefix that matches more than one id."""


class Conflict(SessionTreeError, ValueError):
    """A request the current state refuses: a duplicate name, a foreign parent, ..."""


class BranchMoved(Conflict):
    """A compare-and-set on a branch head failed: someone else moved it first."""

    def __init__(self, branch: str, expected: str | None, actual: str | None) -> None:
        self.branch, self.expected, self.actual = branch, expected, actual
        super().__init__(
            f"branch {branch!r} moved: expected head {expected or '(empty)'}, found {actual or '(empty)'}"
        )


class MetadataChanged(Conflict):
    """A compare-and-set on session or branch metadata failed: someone else wrote it first."""

    def __init__(self, what: str, expected: object, actual: object) -> None:
        self.what, self.expected, self.actual = what, expected, actual
        super().__init__(
            f"{what} metadata changed: expected {_brief(expected)}, found {_brief(actual)};"
            " read it again and retry"
        )


def _brief(value: object, width: int = 80) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= width else text[: width - 3] + "..."


class CheckpointImmutable(Conflict):
    """Checkpoints never move; fork a branch from one instead."""


class Busy(SessionTreeError):
    """Another writer held the database for more than 30 s; nothing was written, and
    trying again later is safe."""


class DiskFull(SessionTreeError):
    """The disk (or the database's size limit) is full; the write was rolled back whole."""


class Unavailable(SessionTreeError):
    """The database server cannot be reached, or the connection to it was lost before a
    write committed; that write was rolled back whole, and trying again is safe."""


class OutcomeUnknown(SessionTreeError):
    """The connection to the database server was lost while a write was committing: it
    may or may not have been saved, so trying again blindly could write it twice.

    ``node_id`` is the last node the write added (None when it added none): the write was
    saved whole if ``store.node(node_id)`` finds it, and not at all if it does not once
    the server process ``backend_pid`` has ended."""

    def __init__(self, message: str, *, node_id: str | None = None, backend_pid: int | None = None) -> None:
        super().__init__(message)
        self.node_id, self.backend_pid = node_id, backend_pid


class ReadOnly(SessionTreeError):
    """A write through a store opened with ``readonly=True``."""


class NotOurs(SessionTreeError):
    """A file that is not a sessiontree database (another program's SQLite file, or not
    SQLite at all); sessiontree refuses it without writing a byte."""


class SchemaTooNew(SessionTreeError):
    """The database was written by a newer sessiontree; this one will not touch it."""


class InvalidPayload(SessionTreeError, ValueError):
    """A payload that is not a JSON object, or a message without a valid role."""


class InvalidQuery(SessionTreeError, ValueError):
    """A search query SQLite's full-text syntax cannot read, or a filter that names no
    known role or kind."""


class SearchIndexOff(SessionTreeError):
    """A search on a store whose full-text index was turned off (``search-index off``)."""


class ProviderError(SessionTreeError):
    """A model endpoint failed: an HTTP error, a malformed or truncated reply.

    ``status`` is the HTTP status when there was one; ``retryable`` says whether
    the adapter would (or did) retry it; ``raw`` is the reply, cut short and
    redacted, when the reply itself was the problem. Messages never contain an
    API key.
    """

    def __init__(
        self, message: str, *, status: int | None = None, retryable: bool = False, raw: str | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.retryable, self.raw = status, retryable, raw


class ModelOutputError(SessionTreeError):
    """A model call returned something that is not an assistant message.

    ``raw`` is the reply as text, cut short, when there is one to show.
    """

    def __init__(self, message: str, *, raw: str | None = None) -> None:
        super().__init__(message)
        self.raw = raw


class ToolArgumentError(SessionTreeError, ValueError):
    """Arguments that do not fit the tool's schema: a model's call (the loop tells the
    model), or a human's ``Edit`` of a paused call (``decide`` writes nothing)."""


class ToolMissing(SessionTreeError, LookupError):
    """A decided call needs a tool the resuming run was not given: refused before anything
    is written, so the decision stays usable once the tool is given."""


class ToolChanged(ToolMissing):
    """A decided call's tool is there, but its JSON schema is not the one recorded when the
    run paused (the recipe's ``schema_hashes``): refused before anything is written, as
    ``ToolMissing`` is, so the decision stays usable once the tool is as it was."""


class ToolFailed(SessionTreeError):
    """A tool said its call failed (an MCP result marked ``isError``): the model is told
    the tool's own words; ``raw`` keeps everything the tool returned."""

    def __init__(self, message: str, *, raw: object = None) -> None:
        super().__init__(message)
        self.raw = raw


class ToolsUnavailable(SessionTreeError):
    """A source of tools (an MCP server, or the tools module a recipe names) could not be
    started, listed or imported: nothing was run."""


class InvalidTree(SessionTreeError, ValueError):
    """Import input that is not a tree: a missing parent, a cycle, a bad payload or depth."""


class FormatError(InvalidTree):
    """Malformed or unsupported import input; nothing was written.

    The message names the file when there is one, then the line or record, then
    the problem: ``chat.jsonl line 7: ...``.
    """


class ImportConflict(Conflict):
    """Import input that disagrees with what the store already holds under the same ids."""


class CassetteExhausted(SessionTreeError):
    """A replay asked for more model calls than the recording holds."""


class ScriptExhausted(SessionTreeError):
    """A scripted model was called more times than its script has replies."""


class InvalidScript(SessionTreeError, ValueError):
    """A script file (``--model script:PATH``) that cannot be read, or a line of it that is
    not an assistant message; the message names the file and the line."""
