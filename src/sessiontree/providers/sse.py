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
  the stream was complete is the caller's call, not the parser's;
- with ``max_line_bytes``, a line longer than that raises ``ProviderError``
  (an endless unterminated line never grows past it); lines are split in
  linear time however the bytes are chunked.

Written here rather than taken from a dependency because it is this short,
and because httpx's ``aiter_lines`` splits on every Unicode line break
(U+2028, U+0085, ...), which servers legitimately leave unescaped inside JSON
strings; splitting there would corrupt a data line.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from dataclasses import dataclass

from ..errors import ProviderError

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


def split_lines(chunks: Iterable[bytes], max_line_bytes: int | None = None) -> Iterator[str]:
    """Split byte chunks into decoded lines on LF, CRLF and CR only."""
    splitter = _LineSplitter(max_line_bytes)
    for chunk in chunks:
        yield from splitter.push(chunk)
    yield from splitter.end()


def iter_events(chunks: Iterable[bytes], max_line_bytes: int | None = None) -> Iterator[Event]:
    """The synchronous twin of ``aiter_events``, handy for tests and tools."""
    decoder = Decoder()
    for line in split_lines(chunks, max_line_bytes):
        if (event := decoder.feed(line)) is not None:
            yield event
    if (event := decoder.flush()) is not None:
        yield event


async def aiter_events(
    chunks: AsyncIterable[bytes], max_line_bytes: int | None = None
) -> AsyncIterator[Event]:
    decoder, splitter = Decoder(), _LineSplitter(max_line_bytes)
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
    """Lines out of byte chunks in linear time: each byte is scanned once, and the
    unterminated tail is kept as a list of pieces, joined once when its line ends."""

    def __init__(self, max_line_bytes: int | None = None) -> None:
        self._pending: list[bytes] = []
        self._pending_size = 0
        self._max = max_line_bytes
        self._skip_lf = False  # the previous chunk ended in CR: a leading LF belongs to it
        self._first = True

    def push(self, chunk: bytes) -> list[str]:
        if self._skip_lf and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._skip_lf = chunk.endswith(b"\r")
        parts = _NEWLINE.split(chunk)
        tail = parts.pop()  # the unterminated tail, b"" after a newline
        lines = []
        if parts:
            parts[0] = b"".join([*self._pending, parts[0]])
            self._pending, self._pending_size = [], 0
            for part in parts:
                self._check(len(part))
                lines.append(self._decode(part))
        if tail:
            self._pending.append(tail)
            self._pending_size += len(tail)
            self._check(self._pending_size)
        return lines

    def end(self) -> list[str]:
        tail = b"".join(self._pending)
        self._pending, self._pending_size = [], 0
        return [self._decode(tail)] if tail else []

    def _check(self, size: int) -> None:
        if self._max is not None and size > self._max:
            raise ProviderError(f"an SSE line is longer than max_line_bytes ({self._max} bytes)")

    def _decode(self, raw: bytes) -> str:
        # Lines are decoded whole, so a multi-byte character split across
        # network chunks is never cut; invalid bytes become U+FFFD.
        text = raw.decode("utf-8", errors="replace")
        if self._first:
            self._first = False
            text = text.removeprefix("\ufeff")
        return text
