"""The errors of an OpenAI-compatible adapter: each a ``ProviderError`` that names the
model and never holds a secret.

Contract: ``Failures(prefix, redactor)`` is called like ``ProviderError`` with
extras: ``detail`` (the server's words: redacted, *then* cut to ``limit``,
optionally quoted) and ``raw`` (a reply that is itself the problem: redacted, cut
to ``RAW_REPLY_LIMIT``). ``failures.transport(exc, doing)`` turns any httpx error
into one, retryable when another attempt may fare better; a
``LocalProtocolError`` is reported by type only, because its text may quote a
header value.
"""

from __future__ import annotations

import httpx

from ..errors import ProviderError
from ..redact import Redactor

RAW_REPLY_LIMIT = 2000  # characters of a bad reply kept on its ProviderError
# Worth another attempt: a later one may connect, get a whole reply, or pass another proxy.
RETRYABLE_TRANSPORT = (
    httpx.TimeoutException,
    httpx.NetworkError,
    httpx.RemoteProtocolError,
    httpx.ProxyError,
    httpx.DecodingError,
)


class Failures:
    def __init__(self, prefix: str, redactor: Redactor) -> None:
        self.prefix, self._redact = prefix, redactor

    def __call__(
        self,
        message: str,
        *,
        detail: str | None = None,
        limit: int = 500,
        quote: bool = False,
        status: int | None = None,
        retryable: bool = False,
        raw: str | None = None,
    ) -> ProviderError:
        """A ProviderError whose message carries no secret.

        ``detail`` (the server's words) is redacted, then cut to ``limit``
        characters, then appended (as a repr with ``quote``). ``raw`` (a reply
        that is itself the problem) is redacted and cut to ``RAW_REPLY_LIMIT``.
        """
        if detail is not None:
            clipped = self._redact.clip(detail, limit) or "(empty body)"
            message += repr(clipped) if quote else clipped
        message = self._redact(message)
        return ProviderError(
            self.prefix + message.removeprefix(self.prefix),
            status=status,
            retryable=retryable,
            raw=None if raw is None else self._redact.clip(raw, RAW_REPLY_LIMIT),
        )

    def transport(self, exc: httpx.HTTPError, doing: str, shown: bool = False) -> ProviderError:
        """Any httpx failure as a ProviderError, retryable when another attempt may fare
        better and nothing was ``shown`` to the caller yet."""
        if isinstance(exc, httpx.LocalProtocolError):  # h11's message may quote a header value
            return self(
                f"{doing}: {type(exc).__name__}: the request could not be sent "
                "(details withheld: they may quote a header value)"
            )
        return self(
            f"{doing}: {type(exc).__name__}: {exc}",
            retryable=isinstance(exc, RETRYABLE_TRANSPORT) and not shown,
        )
