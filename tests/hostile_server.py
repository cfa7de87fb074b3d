"""A hostile OpenAI-compatible server for the tests, on 127.0.0.1 only.

``HostileServer()`` starts a stdlib ``ThreadingHTTPServer`` on a free port in a
daemon thread; ``server.url(mode)`` is an OpenAI base URL whose
``/chat/completions`` answers with that attack, ``server.stop()`` ends it. The
modes:

- ``trickle``: a 200 JSON response whose body arrives one byte every 0.5 s, forever.
- ``ping``: an SSE stream of ``: ping`` comments, one byte every 0.5 s, forever.
- ``endless``: an SSE stream of text chunks, as fast as the client reads, forever.
- ``longline``: an SSE ``data:`` line that never ends.
- ``bomb``: a small gzip body that inflates to 64 MB (``Content-Encoding: gzip``).
- ``badgzip``: ``Content-Encoding: gzip`` over bytes that are not gzip.
- ``echo-long``: a 401 whose message echoes the key after padding that puts
  it across character 500.
- ``echo-escaped``: a 401 whose (not quite JSON) body echoes the key with ``/``
  written ``\\/``.
- ``reply-<name>``: a 200 with the odd reply ``REPLIES[name]``.
- ``anthropic-<name>``: the recorded Messages stream ``fixtures/anthropic/<name>.sse``
  (``<name>-continued.sse`` when the request ends with an assistant turn, as a
  continued ``pause_turn`` does), or ``<name>.json`` (a whole Message) for a request
  that does not stream, when there is one (``cache-usage``: a reply with both cache
  usage fields; ``thinking-tool``: the whole Message of ``thinking-tool.sse``); ``anthropic-echo``: a 401 that echoes ``x-api-key``.
  ``server.bodies`` holds every request body received, parsed, ``server.headers``
  the headers of every request (names in lower case).
- ``responses-<name>``: the recorded Responses stream ``fixtures/responses/<name>.sse``
  (``<name>-continued.sse`` when the input ends with a ``function_call_output``); a
  request without ``stream`` gets the final response object of that stream as JSON.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
RECORDED = Path(__file__).parent / "fixtures" / "anthropic"
RECORDED_RESPONSES = Path(__file__).parent / "fixtures" / "responses"


def _reply(message: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {
        "model": "hostile",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        **top,
    }


def _calls(*ids: Any) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "echo", "arguments": "{}"}} for i in ids
        ],
    }


TEXT = {"role": "assistant", "content": "hi"}
REPLIES: dict[str, dict[str, Any]] = {
    "model-object": _reply(TEXT, model={"name": "x"}),
    "finish-object": {
        "model": "hostile",
        "choices": [{"index": 0, "message": TEXT, "finish_reason": {"a": 1}}],
    },
    "id-list": _reply(_calls(["a", "b"])),
    "duplicate-ids": _reply(_calls("call_1", "call_1")),
    "content-object": _reply({"role": "assistant", "content": {"text": "hi"}}),
    "calls-object": _reply({"role": "assistant", "content": None, "tool_calls": {"id": "x"}}),
}


@functools.cache
def _bomb() -> bytes:  # built on first use: it takes a moment
    return gzip.compress(b"\0" * (64 * 2**20), compresslevel=9)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        self.server.headers.append({k.lower(): v for k, v in self.headers.items()})  # type: ignore[attr-defined]
        with contextlib.suppress(ValueError):
            self.server.bodies.append(json.loads(raw))  # type: ignore[attr-defined]
        mode = self.path.strip("/").split("/")[0]
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client gave up
            getattr(self, "_" + mode.replace("-", "_").split("_")[0])(mode)

    def _head(self, status: int, ctype: str, length: int | None = None, **extra: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        if length is not None:
            self.send_header("Content-Length", str(length))
        for name, value in extra.items():
            self.send_header(name.replace("_", "-"), value)
        self.end_headers()

    def _drip(self, data: bytes) -> None:
        while True:
            for byte in data:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.5)

    def _trickle(self, mode: str) -> None:
        self._head(200, "application/json", 10**9)
        self._drip(b" ")

    def _ping(self, mode: str) -> None:
        self._head(200, "text/event-stream", Connection="close")
        self._drip(b": ping\n")

    def _endless(self, mode: str) -> None:
        self._head(200, "text/event-stream", Connection="close")
        chunk = {"choices": [{"index": 0, "delta": {"content": "x" * 1000}, "finish_reason": None}]}
        event = f"data: {json.dumps(chunk)}\n\n".encode() * 64
        while True:
            self.wfile.write(event)

    def _longline(self, mode: str) -> None:
        self._head(200, "text/event-stream", Connection="close")
        self.wfile.write(b"data: ")
        block = b"a" * 65536
        while True:
            self.wfile.write(block)

    def _bomb(self, mode: str) -> None:
        body = _bomb()
        self._head(200, "application/json", len(body), Content_Encoding="gzip")
        self.wfile.write(body)

    def _badgzip(self, mode: str) -> None:
        body = b"this is not gzip at all" * 10
        self._head(200, "application/json", len(body), Content_Encoding="gzip")
        self.wfile.write(body)

    def _echo(self, mode: str) -> None:
        key = self.headers.get("authorization", "").removeprefix("Bearer ")  # as OpenAI echoes it
        if mode == "echo-long":
            message = "x" * 460 + " Incorrect API key provided: " + key  # the key spans character 500
            body = json.dumps({"error": {"message": message}}).encode()
        else:  # echo-escaped: JSON-style escaping in a body that does not parse
            body = ('{"error": "bad key ' + key.replace("/", "\\/") + '"').encode()
        self._head(401, "application/json", len(body))
        self.wfile.write(body)

    def _reply(self, mode: str) -> None:
        body = json.dumps(REPLIES[mode.removeprefix("reply-")]).encode()
        self._head(200, "application/json", len(body))
        self.wfile.write(body)

    def _anthropic(self, mode: str) -> None:
        name = mode.removeprefix("anthropic-")
        if name == "echo":
            key = self.headers.get("x-api-key", "")
            body = json.dumps(
                {
                    "type": "error",
                    "error": {"type": "authentication_error", "message": "invalid x-api-key: " + key},
                }
            ).encode()
            self._head(401, "application/json", len(body))
            self.wfile.write(body)
            return
        request = self.server.bodies[-1]  # type: ignore[attr-defined]
        messages = request.get("messages") or [{}]
        if messages[-1].get("role") == "assistant":
            name += "-continued"
        whole = RECORDED / f"{name}.json"
        if not request.get("stream") and whole.exists():  # a recorded reply, not streamed
            body = whole.read_bytes()
            self._head(200, "application/json", len(body))
            self.wfile.write(body)
            return
        body = (RECORDED / f"{name}.sse").read_bytes()
        self._head(200, "text/event-stream", len(body))
        self.wfile.write(body)

    def _responses(self, mode: str) -> None:
        name = mode.removeprefix("responses-")
        request = self.server.bodies[-1]  # type: ignore[attr-defined]
        items = request.get("input") or [{}]
        if items[-1].get("type") == "function_call_output":
            name += "-continued"
        body = (RECORDED_RESPONSES / f"{name}.sse").read_bytes()
        if request.get("stream"):
            self._head(200, "text/event-stream", len(body))
            self.wfile.write(body)
            return
        last = json.loads(body.decode().strip().split("\n\n")[-1].split("data: ", 1)[1])
        status = 500 if last["type"] == "error" else 200
        body = json.dumps(last if status == 500 else last["response"]).encode()
        self._head(status, "application/json", len(body))
        self.wfile.write(body)


class HostileServer:
    def __init__(self) -> None:
        _bomb()  # before any test measures memory
        self._server = ThreadingHTTPServer((HOST, 0), _Handler)
        self.bodies: list[Any] = []
        self._server.bodies = self.bodies  # type: ignore[attr-defined]
        self.headers: list[dict[str, str]] = []  # of every request, as received
        self._server.headers = self.headers  # type: ignore[attr-defined]
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def url(self, mode: str) -> str:
        return f"http://{HOST}:{self.port}/{mode}/v1"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
