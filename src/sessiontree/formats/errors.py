"""The error every importer raises for input it cannot read.

Contract: ``FormatError`` is a ``SessionTreeError`` (and a ``ValueError``) whose
message names the file when there is one, then the line or record, then the
problem: ``chat.jsonl line 7: ...`` or
``conversations.json: conversation 2, node 'abc': ...``.
"""

from __future__ import annotations

from ..bulk import InvalidTree


class FormatError(InvalidTree):
    """Malformed or unsupported import input; nothing was written."""


def located(name: str | None, message: str) -> str:
    """Prefix a message with a file name: ``f.jsonl line 3: ...`` or ``f.json: ...``."""
    if not name:
        return message
    return f"{name} {message}" if message.startswith("line ") else f"{name}: {message}"
