"""A small server-sent-events parser, enough for OpenAI-style streams.

Contract: ``aiter_events(byte_chunks)`` yields one ``Event`` per dispatched SSE
event, following the WHATWG rules that matter to a client that never
reconnects:

- lines end with LF, CRLF or a lone CR (a CRLF split across two network
  chunks counts once);
- a line starting with ``:`` is a comment (servers send ``: ping`` keep-alives);
- ``field: value`` sets a field, dropping one space after the colon;
  ``data`` lines accumulate and are joined with ``\\n``; ``event`` names the
  event; ``id`` and ``retry`` are ignored;
- a blank line dispatches the event; an event without data (a bare blank
  line, a comment followed by a blank line) is not dispatched;
- at end of input a pending event is dispatched even without its blank line,
  so a last ``data: [DONE]`` with no trailing newline still counts. Whether
  the stream was complete is the caller's call, not the parser's.

Written here rather than taken from a dependency because it is this short,
and because httpx's ``aiter_lines`` splits on every Unicode line break
(U+2028, U+0085, ...), which servers legitimately leave unescaped inside JSON
strings; splitting there would corrupt a data line.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from dataclasses import dataclass

_NEWLINE = re.compile(rb"\r\n|\r|\n")


@dataclass(frozen=True)
class Event:
    data: str
    event: str = "message"


class Decoder:
    """Feed it lines (without their terminators); it returns complete events."""

    def __init__(self) -> None:
        self._data: list[str] = []
        self._event = ""

    def feed(self, line: str) -> Event | None:
        if not line:
            return self.flush()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        return None

    def flush(self) -> Event | None:
        data, event = self._data, self._event
        self._data, self._event = [], ""
        return Event("\n".join(data), event or "message") if data else None


def split_lines(chunks: Iterable[bytes]) -> Iterator[str]:
    """Split byte chunks into decoded lines on LF, CRLF and CR only."""
    splitter = _LineSplitter()
    for chunk in chunks:
        yield from splitter.push(chunk)
    yield from splitter.end()


def iter_events(chunks: Iterable[bytes]) -> Iterator[Event]:
    """The synchronous twin of ``aiter_events``, handy for tests and tools."""
    decoder = Decoder()
    for line in split_lines(chunks):
        if (event := decoder.feed(line)) is not None:
            yield event
    if (event := decoder.flush()) is not None:
        yield event


async def aiter_events(chunks: AsyncIterable[bytes]) -> AsyncIterator[Event]:
    decoder, splitter = Decoder(), _LineSplitter()
    async for chunk in chunks:
        for line in splitter.push(chunk):
            if (event := decoder.feed(line)) is not None:
                yield event
    for line in splitter.end():
        if (event := decoder.feed(line)) is not None:
            yield event
    if (event := decoder.flush()) is not None:
        yield event


class _LineSplitter:
    def __init__(self) -> None:
        self._pending = b""
        self._skip_lf = False  # the previous chunk ended in CR: a leading LF belongs to it
        self._first = True

    def push(self, chunk: bytes) -> list[str]:
        if self._skip_lf and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._skip_lf = chunk.endswith(b"\r")
        parts = _NEWLINE.split(self._pending + chunk)
        self._pending = parts.pop()  # the unterminated tail, b"" after a newline
        return [self._decode(p) for p in parts]

    def end(self) -> list[str]:
        tail, self._pending = self._pending, b""
        return [self._decode(tail)] if tail else []

    def _decode(self, raw: bytes) -> str:
        # Lines are decoded whole, so a multi-byte character split across
        # network chunks is never cut; invalid bytes become U+FFFD.
        text = raw.decode("utf-8", errors="replace")
        if self._first:
            self._first = False
            text = text.removeprefix("\ufeff")
        return text
