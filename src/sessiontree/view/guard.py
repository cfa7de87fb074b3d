"""Connection limits for ``sessiontree serve``: idle or slow sockets cannot lock the
other clients out, nor make the server run out of open files or memory (needs the
``web`` extra).

Contract:
- ``server_config(app, max_connections=, header_timeout=)`` is the uvicorn
  ``Config`` serve runs: uvicorn's h11 parser, which refuses (400) a request whose
  request line and headers exceed ``MAX_HEADER_BYTES`` (httptools, uvicorn's choice
  when it is installed, keeps headers without a bound: one client sending them for
  5 s grew a server to 2.5 GB), and ``GuardedProtocol`` on it. No WebSocket upgrades.
- A connection has ``header_timeout`` seconds, from when it opens and from the end of
  each response, to complete a request's headers; else it is closed. uvicorn has no
  such timeout: a socket that sends nothing, or half a request line, stays open for
  ever (its keep-alive timeout starts only after a response).
- At most ``max_connections`` are open at once. One more closes the connection that
  has waited longest for a request's headers (idle or slow, never one whose request is
  being answered); when every connection is being answered, the newcomer is answered
  503 with Retry-After and closed. So a flood of idle sockets never keeps a real
  client out, and the open files stay bounded.
- uvicorn's ``limit_concurrency`` is not used: it counts idle connections too, so a
  few hundred idle sockets would make it answer every real request with a 503.
- ``file_limit_problem(max_connections)`` raises the process's soft limit of open
  files to what ``max_connections`` need (``FILES_BESIDES`` more, for what requests
  open) when the hard limit allows, else says why it cannot; None when it is enough.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn import Config
from uvicorn.protocols.http.h11_impl import H11Protocol

MAX_HEADER_BYTES = 16 * 1024
"""A request line and headers beyond this are refused (h11's own default, as Node's)."""
FILES_BESIDES = 200
"""Open files a server needs besides its connections: the database files of each
request thread (three with SQLite's WAL, 40 threads), the listening socket, Python's own."""
KEEP_ALIVE = 5
"""Seconds an idle connection is kept after a response (uvicorn's default)."""
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"retry-after: 5\r\nconnection: close\r\ncontent-length: 50\r\n\r\n"
    b"every connection of this server is busy; try again\n"
)


class _Limits:
    """What the connections of one server share."""

    def __init__(self, max_connections: int, header_timeout: float) -> None:
        self.max_connections = max_connections
        self.header_timeout = header_timeout
        self.open: set[GuardedProtocol] = set()
        # those waiting for a request's headers, longest first (a dict keeps its order)
        self.waiting: dict[GuardedProtocol, None] = {}


class GuardedProtocol(H11Protocol):
    """uvicorn's h11 protocol with the header timeout and the connection limit (see the
    module docstring). Made per server by ``server_config``, which sets ``limits``."""

    limits: _Limits

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._timer: asyncio.TimerHandle | None = None
        limits = self.limits
        if len(limits.open) >= limits.max_connections:
            oldest = next(iter(limits.waiting), None)
            if oldest is None:  # every connection has a request in hand: they go first
                transport.write(_BUSY)
                transport.close()
                return
            oldest._close()
        limits.open.add(self)
        self._check()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._check()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # this may start a pipelined request
        self._check()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._forget()

    def _check(self) -> None:
        """Start the header clock when the connection begins to wait for a request; stop
        it when a request's headers are in (uvicorn then starts a new cycle)."""
        if self not in self.limits.open:
            return
        waiting = self.cycle is None or self.cycle.response_complete
        if waiting and self._timer is None:
            self.limits.waiting[self] = None
            self._timer = self.loop.call_later(self.limits.header_timeout, self._close)
        elif not waiting and self._timer is not None:
            self.limits.waiting.pop(self, None)
            self._timer.cancel()
            self._timer = None

    def _forget(self) -> None:
        self.limits.open.discard(self)
        self.limits.waiting.pop(self, None)
        if getattr(self, "_timer", None) is not None:
            self._timer.cancel()  # type: ignore[union-attr]
            self._timer = None

    def _close(self) -> None:
        """Close a connection that is waiting for its headers (too long, or to make room)."""
        self._forget()
        self.transport.close()


def server_config(app: Any, *, max_connections: int, header_timeout: float) -> Config:
    """The uvicorn configuration ``sessiontree serve`` runs ``app`` with (the limits'
    defaults are those of its options)."""
    limits = _Limits(max_connections, header_timeout)
    protocol = type("GuardedProtocol", (GuardedProtocol,), {"limits": limits})
    return Config(
        app,
        http=protocol,
        ws="none",
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        timeout_keep_alive=KEEP_ALIVE,
        log_level="warning",
        lifespan="off",
    )


def file_limit_problem(max_connections: int) -> str | None:
    """Why this process cannot hold ``max_connections`` connections (see the module
    docstring), or None (its soft limit raised if needed)."""
    try:
        import resource
    except ImportError:  # not a POSIX system: no such limit to check
        return None
    need = max_connections + FILES_BESIDES
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return None
    if hard == resource.RLIM_INFINITY or hard >= need:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
            return None
        except (ValueError, OSError):  # a kernel cap below the hard limit (macOS)
            pass
    return (
        f"--max-connections {max_connections} needs {need} open files, and this process "
        f"may open {soft} (ulimit -n): lower --max-connections or raise the limit"
    )
