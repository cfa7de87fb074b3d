"""Keep credentials out of error messages and stored replies.

Contract:

- ``check_header(what, value)`` refuses (``ValueError``) a header value with a
  control character before anything is sent: httpx would otherwise raise an
  error that quotes the whole value. The message names ``what`` (the key, a
  header) and the character, never the value.
- ``Redactor(headers)`` collects every credential in the headers
  (``Authorization``, ``api-key``, ``x-api-key``: the value and each part after
  the scheme) in the forms a server may echo it: as is, JSON-escaped, with
  ``/`` written ``\\/``, percent-encoded. ``redactor(text)`` replaces each with
  ``[redacted]``, as well as anything after ``Bearer`` or ``Authorization:``
  (text already redacted stays as it is: a second pass changes nothing);
  ``redactor.credentials(text)`` replaces only the credentials (for replies
  that are kept: a server that echoes the key must not get it stored);
  ``redactor.credentials_in(value)`` does it to every string of a JSON value.
- ``redactor.clip(text, limit)`` redacts *before* cutting to ``limit``
  characters, so a key that straddles the cut is never half left behind.
- ``redactor.found(text)`` is what ``redactor(text)`` takes out: for a fragment
  of a text (a search snippet) in which the patterns cannot see a credential
  whole, because the fragment starts after ``Bearer`` or marks the word.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

CREDENTIAL_HEADERS = ("authorization", "api-key", "x-api-key")
_SCHEMES = ("bearer", "basic", "token")
# "Authorization: x", authorization=x, "authorization": "x", and the last escaped in a JSON
# text inside JSON (a tool call's arguments): the value stops before a quote or backslash.
_AUTH_FIELD = re.compile(
    r"(?i)(authorization\\?[\"']?\s*[:=]\s*\\?[\"']?)(?!\[redacted\])[^\s\"',}\\]+(\s+[^\s\"',}\\]+)?"
)
_BEARER = re.compile(r"(?i)\bbearer\s+(?!\[redacted\])\S+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_MENTION = re.compile(r"(?i)bearer|authorization")
"""What either pattern needs: most text has neither word and is returned after one scan."""


def check_header(what: str, value: str) -> None:
    """Refuse a header value httpx cannot send, without quoting it; ``what`` names it."""
    if found := _CONTROL.search(value):
        raise ValueError(
            f"{what} contains a control character (U+{ord(found.group()):04X}) "
            f"at position {found.start()}; a key read from a file or variable often has a trailing "
            "newline or carriage return: strip it"
        )


class Redactor:
    def __init__(self, headers: Mapping[str, str]) -> None:
        secrets = {
            part
            for name, value in headers.items()
            if name.lower() in CREDENTIAL_HEADERS
            for part in [value, *value.split()]
            if part.lower() not in _SCHEMES
        }
        forms = set()
        for secret in secrets:
            escaped = json.dumps(secret)[1:-1]
            forms |= {
                secret,
                escaped,
                escaped.replace("/", "\\/"),
                secret.replace("/", "\\/"),
                urllib.parse.quote(secret, safe=""),
            }
        self._forms = sorted(forms, key=len, reverse=True)  # a longer form before a part of it

    def __call__(self, text: str) -> str:
        text = self.credentials(text)
        if not _MENTION.search(text):
            return text
        text = _AUTH_FIELD.sub(r"\1[redacted]", text)
        return _BEARER.sub("Bearer [redacted]", text)

    def credentials(self, text: str) -> str:
        """Only the credentials themselves replaced: for a model's own words, where
        "Authorization:" may be what it is explaining."""
        for form in self._forms:
            text = text.replace(form, "[redacted]")
        return text

    def credentials_in(self, value: Any) -> Any:
        """``credentials`` applied to every string in a JSON value (keys included), a new value."""
        if isinstance(value, str):
            return self.credentials(value)
        if isinstance(value, list):
            return [self.credentials_in(v) for v in value]
        if isinstance(value, dict):
            return {self.credentials_in(k): self.credentials_in(v) for k, v in value.items()}
        return value

    def found(self, text: str) -> set[str]:
        """The credentials in ``text``: each part ``self(text)`` replaces."""
        parts = {form for form in self._forms if form in text}
        if _MENTION.search(text):
            parts |= {m.group(0)[len(m.group(1)) :] for m in _AUTH_FIELD.finditer(text)}
            parts |= {m.group(0).split(None, 1)[1] for m in _BEARER.finditer(text)}
        return parts

    def clip(self, text: str, limit: int) -> str:
        return self(text)[:limit]
