"""A TCP proxy in front of the test PostgreSQL server that drops a connection on cue.

``DroppingProxy(server_url)`` listens on a free port of 127.0.0.1 and relays every
connection to the server; ``proxy.url(schema)`` is the URL to give ``Store``.
``proxy.drop_at(pattern, forward=...)`` arms it: the first message from a client
that holds ``pattern`` (say ``b"COMMIT\\x00"``) ends that client's connection, either
before the server sees it (``forward=False``) or once the server has answered it,
without passing the answer on (``forward=True``: the server did the work, the client
never hears so). ``proxy.dropped`` is set then. ``proxy.stop()`` ends it. With
``after=other``, it is armed only once a client message holding ``other`` went by (the
COMMIT of a write, not of a read before it).

``DroppingProxy(server_url, delay=seconds)`` holds every chunk that long before passing
it on, each way: a network's round trip of twice that. It is a propagation delay: each
chunk is due ``delay`` after it arrived, whatever else is in flight (a 900 KB answer in
many chunks is late by one delay, not one per chunk); order is kept and bandwidth is not
limited. Timers fire late by tens of µs (the relay threads ask the kernel for 1 µs of
timer slack), so a benchmark calibrates: ``proxy.set_delay(seconds)`` changes it.

``proxy.traffic()`` gives (bytes client→server, bytes server→client) since the last call.

``ProxyProcess(server_url, n)`` runs n of them in a child process, so that the relaying
never waits for the caller's Python work (one process has one GIL): ``.urls[i]``, and
``.call(i, "counted")`` (or any method above) runs on the i-th.

``proxy.round_trips`` counts round trips on the wire, over every connection: a burst of
client bytes that comes after the server last spoke on that connection (or first) is
one. Pipelined statements are one round trip; a statement whose answer the client
waits for before the next is one each. ``proxy.counted()`` gives the count since the
last call.

``proxy.connections`` counts the connections made through it; ``proxy.close_all()``
ends every open one at once, as a cloud pooler's idle timeout does.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import multiprocessing
import select
import socket
import threading
import time
from typing import Any
from urllib.parse import urlsplit


class DroppingProxy:
    def __init__(self, server_url: str, delay: float = 0.0) -> None:
        parts = urlsplit(server_url)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 5432)
        self.user, self.database = parts.username or "postgres", parts.path.lstrip("/") or "postgres"
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.pattern: bytes | None = None
        self.forward = False
        self.after: bytes | None = None
        self.dropped = threading.Event()
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self.round_trips = 0
        self.connections = 0
        self.delay = delay
        self._seen = 0
        self._up = self._down = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, schema: str) -> str:
        return (
            f"postgresql://{self.user}@127.0.0.1:{self.port}/{self.database}?sslmode=disable&schema={schema}"
        )

    def drop_at(self, pattern: bytes, *, forward: bool, after: bytes | None = None) -> None:
        with self._lock:
            self.pattern, self.forward, self.after = pattern, forward, after
            self.dropped.clear()

    def counted(self) -> int:
        """Round trips since the last call."""
        with self._lock:
            now, self._seen = self.round_trips - self._seen, self.round_trips
        return now

    def set_delay(self, seconds: float) -> None:
        self.delay = seconds

    def traffic(self) -> tuple[int, int]:
        """(bytes client→server, bytes server→client) since the last call."""
        with self._lock:
            up, down, self._up, self._down = self._up, self._down, 0, 0
        return up, down

    def close_all(self) -> None:
        with self._lock:
            socks, self._open = list(self._open), []
        for sock in socks:
            with contextlib.suppress(OSError):  # already gone
                sock.shutdown(socket.SHUT_RDWR)

    def stop(self) -> None:
        self.listener.close()
        for sock in list(self._open):
            sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:  # stopped
                return
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _armed(self, data: bytes) -> bool | None:
        """The forward setting when ``data`` holds the pattern (disarming it), else None."""
        with self._lock:
            if self.after is not None and self.after in data:
                self.after = None
                return None
            if self.pattern is None or self.after is not None or self.pattern not in data:
                return None
            self.pattern = None
            return self.forward

    def _relay(self, client: socket.socket) -> None:
        with contextlib.suppress(Exception):  # Linux: this thread's timers fire within 1 µs
            ctypes.CDLL(None).prctl(29, 1000, 0, 0, 0)  # PR_SET_TIMERSLACK
        server = socket.create_connection(self.upstream)
        with self._lock:
            self.connections += 1
        for sock in (client, server):  # as libpq does: small messages go at once
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._open += [client, server]
        # chunks on their way, each with the time it is due: (due, data), in order
        towards: dict[socket.socket, collections.deque[tuple[float, bytes]]] = {
            server: collections.deque(),
            client: collections.deque(),
        }
        answered = True  # the server spoke last (nothing yet): the client's next burst is a round trip
        try:
            while True:
                if client.fileno() < 0 or server.fileno() < 0:  # stopped
                    return
                now = time.perf_counter()
                for sock, queue in towards.items():
                    while queue and queue[0][0] <= now:
                        sock.sendall(queue.popleft()[1])
                due = [queue[0][0] for queue in towards.values() if queue]
                wait = max(0.0, min(due) - time.perf_counter()) if due else None
                ready, _, _ = select.select([client, server], [], [], wait)
                if client in ready:
                    data = client.recv(65536)
                    if not data:
                        return
                    with self._lock:
                        self._up += len(data)
                        if answered:
                            self.round_trips += 1
                    answered = False
                    forward = self._armed(data)
                    if forward is not None:
                        if forward:
                            server.sendall(data)
                            server.recv(65536)  # its answer: the work is done, and swallowed
                        self.dropped.set()
                        return
                    self._pass(server, data, towards[server])
                if server in ready:
                    data = server.recv(65536)
                    if not data:
                        return
                    with self._lock:
                        self._down += len(data)
                    answered = True
                    self._pass(client, data, towards[client])
        except OSError:
            return
        finally:
            client.close()
            server.close()

    def _pass(self, sock: socket.socket, data: bytes, queue: collections.deque[tuple[float, bytes]]) -> None:
        if self.delay or queue:  # behind what is still on its way, in order
            queue.append((time.perf_counter() + self.delay, data))
        else:
            sock.sendall(data)


def _serve(server_url: str, count: int, conn: Any) -> None:
    proxies = [DroppingProxy(server_url) for _ in range(count)]
    conn.send([p.url("SCHEMA") for p in proxies])
    while True:
        try:
            request = conn.recv()
        except EOFError:  # the caller is gone
            return
        if request is None:
            return
        index, method, args = request
        conn.send(getattr(proxies[index], method)(*args))


class ProxyProcess:
    """``count`` proxies in a child process; ``urls[i]`` has ``SCHEMA`` for the schema."""

    def __init__(self, server_url: str, count: int) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(server_url, count, child), daemon=True)
        self.process.start()
        self.urls: list[str] = self._conn.recv()

    def call(self, index: int, method: str, *args: Any) -> Any:
        self._conn.send((index, method, args))
        return self._conn.recv()

    def stop(self) -> None:
        self._conn.send(None)
        self.process.join(10)
