"""Read a response body within a size limit, undoing its Content-Encoding ourselves.

Contract: ``decoded(response, read, cap, cut)`` yields the decoded body, at most
``cap`` bytes of it. ``Inflater(content_encoding)`` turns raw body bytes into decoded bytes
for ``identity``, ``gzip`` and ``deflate`` (zlib-wrapped or raw), handing out at
most ``STEP`` bytes per decompression step, so a small compressed "bomb" is never
inflated beyond the caller's limit plus ``STEP``. Anything else (``br``,
``zstd``, ...) is refused, and a body that is not what its encoding says, or
that ends mid-stream, raises. Every failure is a ``ProviderError``: bad
encodings are ``retryable`` (a broken proxy or connection may be the cause), an
unsupported one is not.

httpx decodes bodies itself, but in one unbounded ``decompress`` per network
read; this module exists so that ``max_response_bytes`` is a real bound.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import httpx

from ..errors import ProviderError

STEP = 64 * 1024
ACCEPT_ENCODING = "gzip, deflate"


class Inflater:
    def __init__(self, content_encoding: str | None) -> None:
        self.encoding = (content_encoding or "identity").strip().lower()
        if self.encoding in ("", "identity"):
            self._z = None
        elif self.encoding in ("gzip", "x-gzip"):
            self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif self.encoding == "deflate":
            self._z = zlib.decompressobj()
        else:
            raise ProviderError(
                f"unsupported Content-Encoding {self.encoding!r} (asked for {ACCEPT_ENCODING})"
            )
        self._fed = False

    def feed(self, data: bytes) -> Iterator[bytes]:
        """Decoded bytes of ``data``, in pieces of at most ``STEP`` bytes."""
        if self._z is None:
            yield data
            return
        first, self._fed, rest, produced = not self._fed, self._fed or bool(data), data, False
        try:
            while rest:
                out = self._z.decompress(rest, STEP)
                rest = self._z.unconsumed_tail
                if out:
                    produced = True
                    yield out
        except zlib.error as e:
            if first and not produced and self.encoding == "deflate":  # raw deflate, no zlib header
                self._z = zlib.decompressobj(-zlib.MAX_WBITS)
                self.encoding = "deflate (raw)"
                self._fed = False
                yield from self.feed(data)
                return
            raise ProviderError(f"the body is not valid {self.encoding}: {e}", retryable=True) from None

    def end(self) -> None:
        """Raise if a compressed body stopped before its end."""
        if self._z is not None and self._fed and not self._z.eof:
            raise ProviderError(f"the {self.encoding} body is truncated", retryable=True)


async def decoded(
    response: httpx.Response, read: Callable[[Awaitable[Any]], Awaitable[Any]], cap: int, cut: bool
) -> AsyncIterator[bytes]:
    """The decoded body of ``response`` in chunks, each network read awaited through ``read``
    (the caller's deadline). Past ``cap`` bytes it raises ``ProviderError`` naming
    ``max_response_bytes``, or with ``cut`` simply ends there."""
    size = 0
    if response.is_stream_consumed:  # built in memory (a MockTransport): read and decoded already
        raw, inflater = _once(response.content), Inflater(None)
    else:
        raw, inflater = response.aiter_raw(), Inflater(response.headers.get("content-encoding"))
    while True:
        try:
            data = await read(anext(raw))
        except StopAsyncIteration:
            break
        for chunk in inflater.feed(data):
            size += len(chunk)
            if size > cap:
                if cut:
                    yield chunk[: len(chunk) - (size - cap)]
                    return
                raise ProviderError(f"the response is larger than max_response_bytes ({cap} bytes)")
            yield chunk
    inflater.end()


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data
