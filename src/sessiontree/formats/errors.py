"""Where an import error happened, in its message.

Contract: ``FormatError`` (defined in ``sessiontree.errors``) is the error every
importer raises for input it cannot read; its message names the file when
there is one, then the line or record, then the problem: ``chat.jsonl line 7:
...`` or ``conversations.json: conversation 2, node 'abc': ...``. ``located``
adds the file name. ``InvalidEntry`` is the FormatError of one conversation of a
file that holds several: ``skip_invalid`` would leave it out.
"""

from __future__ import annotations

from ..errors import FormatError


class InvalidEntry(FormatError):
    """One conversation of a file holding several cannot be read (``skip_invalid``
    leaves such a conversation out)."""


def located(name: str | None, message: str) -> str:
    """Prefix a message with a file name: ``f.jsonl line 3: ...`` or ``f.json: ...``."""
    if not name:
        return message
    return f"{name} {message}" if message.startswith("line ") else f"{name}: {message}"
