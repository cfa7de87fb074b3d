"""Reading a JSON file whose top level is an array one element at a time.

Contract: ``read_json(path, opener)`` returns the decoded document, except that
a top-level array comes back as ``JsonItems``: an iterable that decodes the
elements one by one from the file (read in chunks), so a large export never
sits in memory as text and objects at once. Errors raise ``FormatError`` with
the line and column, worded as ``load_json`` words them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import IO, Any

from ..errors import FormatError
from .common import load_json

CHUNK = 1 << 20
Opener = Callable[[Path], AbstractContextManager[IO[str]]]


class JsonItems:
    """The elements of a top-level JSON array, decoded lazily (each pass re-reads the file)."""

    def __init__(self, path: Path, opener: Opener) -> None:
        self.path, self.opener = path, opener

    def first(self) -> Any:
        """The first element, or None for an empty array."""
        return next(iter(self), None)

    def __iter__(self) -> Iterator[Any]:
        with self.opener(self.path) as f:
            yield from _Reader(f).items()


def read_json(path: Path, opener: Opener) -> Any:
    with opener(path) as f:
        head = f.read(CHUNK)
        start = head.lstrip()[:1]
        if start != "[":
            return load_json(head + f.read())
    return JsonItems(path, opener)


class _Reader:
    def __init__(self, f: IO[str]) -> None:
        self.f, self.buf, self.pos, self.eof = f, "", 0, False
        self.lines, self.column = 0, 0  # line and column of buf[0] in the file
        self.decoder = json.JSONDecoder()

    def items(self) -> Iterator[Any]:
        self._skip()
        self.pos += 1  # the "["
        self._skip()
        if self._peek() == "]":
            self._end()
            return
        while True:
            yield self._value()
            self._skip()
            char = self._peek()
            if char == "]":
                self._end()
                return
            if char != ",":
                self._fail("Expecting ',' delimiter")
            self.pos += 1
            self._skip()

    def _value(self) -> Any:
        while True:
            try:
                value, end = self.decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as e:
                if self._more():
                    continue
                raise self._error(e.msg, e.pos) from None
            except RecursionError:
                raise FormatError("JSON nested too deeply") from None
            if end == len(self.buf) and self._more():  # a number may go on
                continue
            self.pos = end
            if self.pos > CHUNK:
                self._trim()
            return value

    def _end(self) -> None:
        self.pos += 1
        self._skip()
        if self.pos < len(self.buf):
            self._fail("Extra data")

    def _skip(self) -> None:
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in " \t\n\r":
                self.pos += 1
            if self.pos < len(self.buf) or not self._more():
                return

    def _peek(self) -> str:
        return self.buf[self.pos] if self.pos < len(self.buf) else ""

    def _more(self) -> bool:
        """Read more of the file (as much again as is buffered); False at its end."""
        if self.eof:
            return False
        more = self.f.read(max(CHUNK, len(self.buf)))
        self.eof = not more
        self.buf += more
        return bool(more)

    def _trim(self) -> None:
        done = self.buf[: self.pos]
        newlines = done.count("\n")
        self.column = len(done) - done.rfind("\n") - 1 if newlines else self.column + len(done)
        self.lines += newlines
        self.buf, self.pos = self.buf[self.pos :], 0

    def _error(self, message: str, at: int) -> FormatError:
        before = self.buf[:at]
        line = before.count("\n")
        column = at - before.rfind("\n") if line else at + 1 + self.column
        if message.endswith(" at"):
            message = message.removesuffix(" at")
        return FormatError(f"line {self.lines + line + 1}: not valid JSON ({message} at column {column})")

    def _fail(self, message: str) -> None:
        raise self._error(message, self.pos)
