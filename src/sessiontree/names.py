"""What names and refs may look like. Pure functions, no I/O.

Contract:
- A branch or checkpoint name is 1-200 printable characters without
  surrounding spaces or ``~``, and never something that could be read as a
  node id or an id prefix (4+ hex digits and dashes): a name can therefore
  never shadow a node, and a printed id prefix always means the node.
- A ref is a name, a node id, a unique id prefix (MIN_PREFIX+ characters)
  or a ``Node``, optionally followed git-style by ``~N``: the Nth ancestor *message*
  (marker nodes such as pauses, decisions and tool starts are stepped over, so
  ``main~1`` is the message before the head); ``~N!`` counts every node, as git
  does. ``~`` alone is ``~1``; suffixes add up: ``main~2~1`` is ``main~3``.
  This module parses a ref's text; what it points at in a store, and every message
  when it points at nothing or at more than one thing, is ``refs``'s.
"""

from __future__ import annotations

import functools
import re
import unicodedata

from .errors import Conflict, InvalidPayload, NotFound, SessionTreeError

MAX_NAME = 200
MIN_PREFIX = 4
"""Shortest id prefix accepted as a ref."""

FULL_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_ID_LIKE = re.compile(rf"[0-9a-fA-F-]{{{MIN_PREFIX},}}")
_ANCESTRY = re.compile(r"(~\d*)+!?\Z")


def looks_like_id(text: str) -> bool:
    """Whether ``text`` could be a node id or an id prefix."""
    return bool(_ID_LIKE.fullmatch(text))


MAX_GENERATIONS = 1 << 62
"""``~N`` counts above this (deeper than any tree) are read as this: past every root."""


def split_ancestry(ref: str) -> tuple[str, int]:
    """``"main~2"`` -> ``("main", 2)``; a ref without ``~`` -> ``(ref, 0)``. A trailing
    ``!`` (``main~2!``: count every node) is part of the suffix; see ``counts_every_node``.

    A count too large for any tree (even one of thousands of digits) is read as
    ``MAX_GENERATIONS``, so that it goes past the root like any other too-large count.
    """
    match = _ANCESTRY.search(ref)
    if match is None or match.start() == 0:
        return ref, 0
    steps = sum(_generations(part) for part in ref[match.start() + 1 :].rstrip("!").split("~"))
    return ref[: match.start()], min(steps, MAX_GENERATIONS)


def counts_every_node(ref: str) -> bool:
    """Whether a ref's ``~N`` suffix ends in ``!``: it counts markers too, not only messages."""
    return ref.endswith("!") and split_ancestry(ref)[0] != ref


def _generations(part: str) -> int:
    """One ``~N`` suffix's count (``~`` alone is 1), at most ``MAX_GENERATIONS``."""
    if not part:
        return 1
    digits = part.lstrip("0") or "0"
    if len(digits) > len(str(MAX_GENERATIONS)):  # too many to read: int() refuses 4,300+ digits
        return MAX_GENERATIONS
    return min(int(digits), MAX_GENERATIONS)


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def unstorable(text: str) -> str | None:
    """What in ``text`` no store keeps in text (a lone surrogate: not UTF-8; a NUL:
    PostgreSQL refuses it), as a message says it; None when there is nothing."""
    found = _UNSTORABLE.search(text)
    if found is None:
        return None
    if found.group() == "\x00":
        return "a NUL character"
    return "a lone surrogate"


def check_text(text: str | None, what: str) -> str | None:
    """Text every backend stores as it is: a ``str`` (or None), no lone surrogates (not
    UTF-8) and no NUL (PostgreSQL's text refuses it; refused on SQLite too, so a copy
    never fails), at most ``MAX_VALUE_BYTES``."""
    if text is None:
        return None
    if not isinstance(text, str):
        raise InvalidPayload(f"{what} must be text (a str) or None, not {type(text).__name__}")
    why = unstorable(text)
    if why is not None:
        because = "which is not valid Unicode text"
        if "surrogate" not in why:
            because = "which a store cannot keep in text"
        raise InvalidPayload(f"{what} {shown(text)} holds {why}, {because}")
    return check_size(text, what)


def check_lookup(text: str, what: str, error: type[SessionTreeError] = NotFound) -> str:
    """``text``, an id, prefix, ref or name to look up; else ``error`` (``NotFound``:
    "no ``what`` ...") when it holds a NUL or a lone surrogate. Such text matches nothing
    stored (``check_text`` keeps both out of every id, name and title) and would otherwise
    reach the database driver, which fails on it (both backends on a surrogate, PostgreSQL
    on a NUL). Python hands over a command-line argument that is not UTF-8 with each bad
    byte as a lone surrogate (byte 0xff becomes U+DCFF), hence the hint."""
    why = unstorable(text)
    if why is None:
        return text
    if "surrogate" in why:
        why += " (a byte that is not UTF-8, as in a command-line argument)"
    raise error(f"no {what} {shown(text)}: it holds {why}, which nothing stored holds")


MAX_VALUE_BYTES = 250_000_000
"""Most UTF-8 bytes one stored value (a payload, a title, metadata, a run's field) may
hold, on every backend, so a store copies from one to the other: SQLite keeps at most
1,000,000,000 (its default limit), and PostgreSQL's search index cannot take a payload of
more than about 268,000,000 (its regular expressions need four bytes a character, in at
most 1 GiB)."""


def check_size(text: str, what: str) -> str:
    """``text``, or InvalidPayload naming ``what`` when it is over ``MAX_VALUE_BYTES``."""
    if len(text) > MAX_VALUE_BYTES // 4:  # shorter texts cannot be over: no need to count
        size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
        if size > MAX_VALUE_BYTES:
            raise InvalidPayload(
                f"{what} is {size:,} bytes; a store keeps at most {MAX_VALUE_BYTES:,} bytes in one value"
            )
    return text


SHOWN = 60
"""How many characters of a refused text an error message echoes."""


def shown(text: str) -> str:
    """``text`` as an error message quotes it: whole when short, else its first
    ``SHOWN`` characters and its length (an import may carry a title of megabytes)."""
    if len(text) <= SHOWN:
        return repr(text)
    return f"{text[:SHOWN]!r}... ({len(text):,} characters)"


# Control (C0, C1), format (bidi overrides, zero-width), line and paragraph separator,
# and surrogate characters: invisible or misleading in a name printed on a terminal.
_UNPRINTABLE = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


@functools.lru_cache(maxsize=1024)  # a few names are checked on every append
def _printable(name: str) -> bool:
    return not any(unicodedata.category(c) in _UNPRINTABLE for c in name)


def check_name(name: str, what: str = "branch", *, new: bool = True) -> str:
    """A valid branch or checkpoint name (see the module docstring), or Conflict saying why not.

    ``new=False`` checks only what any lookup needs (text SQLite can store), so
    that a name made before the ``~`` and id-like rules still works.
    """
    if not isinstance(name, str) or not name or name != name.strip() or len(name) > MAX_NAME:
        raise Conflict(
            f"invalid {what} name {_quoted(name)}: use 1-{MAX_NAME} characters, no leading or trailing spaces"
        )
    if not _printable(name):
        if any("\ud800" <= c <= "\udfff" for c in name):
            raise Conflict(f"invalid {what} name {_quoted(name)}: lone surrogates are not allowed")
        raise Conflict(
            f"invalid {what} name {_quoted(name)}: control characters and invisible formatting characters"
            " (bidi overrides, zero-width, line separators) are not allowed"
        )
    if not new:
        return name
    if "~" in name:
        raise Conflict(
            f"invalid {what} name {_quoted(name)}: '~' is not allowed (REF~N means the Nth ancestor)"
        )
    if looks_like_id(name):
        raise Conflict(
            f"invalid {what} name {_quoted(name)}: it could be read as a node id prefix; "
            "use a name with a letter beyond a-f"
        )
    return name


def _quoted(name: object) -> str:
    return shown(name) if isinstance(name, str) else repr(name)
