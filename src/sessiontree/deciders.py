"""Named decider tokens: who decided, from a token, for ``sessiontree serve --deciders``.

Contract:
- A deciders file holds one decider a line, ``NAME sha256:HEX``: a name (no spaces,
  at most ``MAX_NAME`` characters) and the SHA-256 of that person's token, never the
  token. Blank lines and lines starting with ``#`` are skipped. ``load(path)`` reads
  one into name -> hash, or raises ``ValueError`` naming the file, the line and what is
  wrong (a line holding anything but a hash is refused, so a token pasted in by
  mistake is caught, not served).
- ``new_token()`` makes a token (32 random bytes, URL-safe) and ``line(name, token)``
  the line to add for it: ``sessiontree decider-token NAME`` prints both.
- ``who(deciders, token)`` is the name whose hash matches ``token``'s, or None. Every
  entry is compared, each with ``hmac.compare_digest``, so the time taken says nothing
  about which entry, or how much of one, matched. A plain hash is enough: the tokens
  are random, so there is nothing to guess that a slow hash would protect.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from pathlib import Path

MAX_NAME = 100
_HASH = re.compile(r"sha256:[0-9a-f]{64}")


def hash_token(token: str) -> str:
    """What a deciders file holds for ``token``."""
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return secrets.token_urlsafe(32)


def line(name: str, token: str) -> str:
    """The deciders file's line for ``name`` deciding with ``token``."""
    problem = name_problem(name)
    if problem:
        raise ValueError(problem)
    return f"{name} {hash_token(token)}"


def name_problem(name: str) -> str | None:
    if not name or len(name) > MAX_NAME or any(c.isspace() or not c.isprintable() for c in name):
        return f"a decider's name is 1 to {MAX_NAME} printable characters with no spaces, not {name[:40]!r}"
    return None


def load(path: str | Path, *, allow_empty: bool = False) -> dict[str, str]:
    """The deciders of the file at ``path`` (see the module docstring); one naming nobody
    is refused unless ``allow_empty`` (a server must not fall back to no deciders)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"cannot read the deciders file {path}: {e}") from None
    found: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        where = f"{path} line {number}"
        fields = stripped.split()
        if len(fields) != 2 or not _HASH.fullmatch(fields[1]):
            raise ValueError(
                f"{where}: expected 'NAME sha256:<64 hex digits>' (a token's hash, never the token;"
                " sessiontree decider-token NAME makes one)"
            )
        name, digest = fields
        problem = name_problem(name)
        if problem:
            raise ValueError(f"{where}: {problem}")
        if name in found:
            raise ValueError(f"{where}: the decider {name!r} is named twice")
        found[name] = digest
    if not found and not allow_empty:
        raise ValueError(f"the deciders file {path} names no decider")
    return found


def who(deciders: dict[str, str], token: str | None) -> str | None:
    """The decider ``token`` belongs to, or None (see the module docstring)."""
    if not token:
        return None
    given = hash_token(token).encode()
    match = None
    for name, digest in deciders.items():
        if hmac.compare_digest(given, digest.encode()) and match is None:
            match = name
    return match
