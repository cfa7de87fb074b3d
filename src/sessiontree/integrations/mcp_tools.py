"""MCP servers' tools in the agent loop (the ``mcp`` extra).

Contract:
- ``mcp_tools(server, *, trusted=True)`` connects to one MCP server and lists its tools
  as sessiontree ``Tool``s. ``server`` is an ``http://``/``https://`` URL (streamable
  HTTP), or a command, as one string (split as a shell would, ``shlex``) or an argv list,
  launched over stdio with the SDK's small default environment (never this process's
  secrets). A string may start with ``untrusted:`` (as ``--mcp`` takes it), the same as
  ``trusted=False``, and a URL may follow ``bearer-env:NAME `` (after ``untrusted:``,
  if both): the server is sent ``Authorization: Bearer`` and the value of the variable
  ``NAME``, read when it connects, so that the spec names the token without holding it
  and a later process (a resume, a worker) connects with its own.
- The result, ``MCPTools``, iterates over the tools and is a context manager (``with``
  or ``async with``): the connection is one MCP session, held by a thread with an event
  loop of its own, so its tools can be awaited from any event loop, and ``close()``
  ends it (and the server process). A server that cannot be started or listed raises
  ``ToolsUnavailable`` in one line.
- Safety comes from the annotations and fails closed (the spec's defaults for a missing
  hint: not read-only, destructive, not idempotent; see ``safety``): a tool runs without
  asking only when ``readOnlyHint`` is true, or ``destructiveHint`` is false and
  ``idempotentHint`` is true; every other tool, and every tool of an untrusted server,
  requires approval. ``idempotentHint: true`` also makes the tool ``idempotent`` (safe to
  run again after a crash); an untrusted server's tools never are. Only read-only tools
  run concurrently with the other calls of their batch (``parallel``).
- Results are kept faithfully: the model is told the text blocks (an image, audio or
  resource block as a placeholder naming its type and size), else the structured content
  as JSON; the whole result (the image's bytes too) is kept in the tool message's ``raw``
  field, which no model is sent, whenever the text does not carry all of it. A result
  marked ``isError`` raises ``ToolFailed`` with the server's words, which the loop hands
  the model as a failed call (and keeps the result in ``raw`` too).
- Each tool carries ``source`` (``"mcp:" + the spec``, what a later process needs to
  launch the same server again: the command or URL, never an environment),
  ``annotations`` (the hints as sent, camelCase) and ``mcp_name``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import sys
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from typing import Any

from mcp import Client, StdioServerParameters

from ..errors import ToolFailed, ToolsUnavailable
from ..tools import Tool, ToolOutput

UNTRUSTED = "untrusted:"
BEARER_ENV = "bearer-env:"
SOURCE_PREFIX = "mcp:"
LIST_TIMEOUT = 60.0
"""Seconds a server may take to start and list its tools."""


def safety(annotations: dict[str, Any] | None, *, trusted: bool = True) -> tuple[bool, bool]:
    """(idempotent, requires_approval) of a tool with these annotations (camelCase, as on
    the wire); see the module docstring."""
    hints = annotations or {}
    read_only = hints.get("readOnlyHint") is True
    destructive = hints.get("destructiveHint") is not False  # the spec's default: true
    idempotent = read_only or hints.get("idempotentHint") is True
    if not trusted:
        return False, True  # annotations of an untrusted server are not a basis for anything
    runs_unasked = read_only or (not destructive and idempotent)
    return idempotent, not runs_unasked


def parse_spec(
    server: str | Sequence[str], *, trusted: bool = True
) -> tuple[str, list[str] | str, bool, str | None]:
    """(the spec as one string, argv or URL, trusted, the bearer token's variable or None)
    of what ``mcp_tools`` was given."""
    bearer: str | None = None
    if isinstance(server, str):
        text = server.strip()
        if text.startswith(UNTRUSTED):
            trusted, text = False, text[len(UNTRUSTED) :].strip()
        if text.startswith(BEARER_ENV):
            bearer, _, text = text[len(BEARER_ENV) :].partition(" ")
            text = text.strip()
            if not bearer.isidentifier() or not text.startswith(("http://", "https://")):
                raise ToolsUnavailable(
                    f"MCP server {server!r}: write {BEARER_ENV}NAME, then a space and an http(s) URL"
                )
        if text.startswith(("http://", "https://")):
            target: list[str] | str = text
        else:
            try:
                target = shlex.split(text)
            except ValueError as e:
                raise ToolsUnavailable(f"MCP server {server!r}: {e}") from None
    else:
        target = [str(part) for part in server]
    if not target:
        raise ToolsUnavailable("an MCP server needs a command or a URL; nothing was given")
    spec = target if isinstance(target, str) else shlex.join(target)
    if bearer is not None:
        spec = f"{BEARER_ENV}{bearer} {spec}"
    return (spec if trusted else UNTRUSTED + spec), target, trusted, bearer


class MCPTools:
    """The tools of one MCP server over one connection; see the module docstring."""

    def __init__(
        self,
        server: str | Sequence[str],
        *,
        trusted: bool = True,
        env: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.spec, self._target, self.trusted, bearer = parse_spec(server, trusted=trusted)
        self.source = SOURCE_PREFIX + self.spec
        if bearer is not None:
            token = os.environ.get(bearer)
            if not token:
                raise ToolsUnavailable(f"MCP server {self.spec}: the variable {bearer} is not set or empty")
            headers = {**(headers or {}), "Authorization": f"Bearer {token}"}
        self._env, self._headers = env, headers
        self._client: Any = None
        self._stop: asyncio.Event | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="sessiontree-mcp", daemon=True)
        self._thread.start()
        listed: Future[list[Any]] = Future()
        self._main = asyncio.run_coroutine_threadsafe(self._hold(listed), self._loop)
        try:
            definitions = listed.result(LIST_TIMEOUT)
        except BaseException as e:
            self.close()
            if isinstance(e, ToolsUnavailable):
                raise
            raise ToolsUnavailable(
                f"MCP server {self.spec}: cannot start or list its tools: {_one_line(e)}"
            ) from None
        self.tools = [self._tool(d) for d in definitions]

    # -- the connection, on its own loop ------------------------------------

    async def _hold(self, listed: Future[list[Any]]) -> None:
        """Open the session, list the tools, and keep it open until ``close``."""
        self._stop = asyncio.Event()
        try:
            async with contextlib.AsyncExitStack() as stack:
                if isinstance(self._target, str):
                    target: Any = self._target
                    if self._headers:  # a client of our own, closed with the session
                        import httpx2
                        from mcp.client.streamable_http import streamable_http_client

                        http = await stack.enter_async_context(httpx2.AsyncClient(headers=self._headers))
                        target = streamable_http_client(self._target, http_client=http)
                else:
                    from mcp.client.stdio import stdio_client

                    parameters = StdioServerParameters(
                        command=self._target[0], args=self._target[1:], env=self._env
                    )
                    # The server's stderr: given here, because the SDK's default is the
                    # sys.stderr of when it was imported, which may be a stream that no
                    # longer has a file behind it (a test runner's capture, CliRunner's).
                    target = stdio_client(parameters, errlog=_errlog())
                client = await stack.enter_async_context(Client(target))
                self._client = client
                definitions, cursor = [], None
                while True:  # every page of the list
                    page = await client.list_tools(cursor=cursor) if cursor else await client.list_tools()
                    definitions += page.tools
                    cursor = page.next_cursor
                    if not cursor:
                        break
                listed.set_result(definitions)
                await self._stop.wait()
        except BaseException as e:
            if not listed.done():
                listed.set_exception(e)
            elif not isinstance(e, asyncio.CancelledError):
                raise
        finally:
            self._client = None

    async def _call(self, name: str, arguments: dict[str, Any]) -> Any:
        if self._client is None:
            raise ToolsUnavailable(f"the connection to MCP server {self.spec} is closed")
        return await self._client.call_tool(name, arguments)

    # -- tools --------------------------------------------------------------

    def _tool(self, definition: Any) -> Tool:
        annotations = (
            definition.annotations.model_dump(by_alias=True, exclude_none=True, mode="json")
            if definition.annotations is not None
            else {}
        )
        idempotent, requires_approval = safety(annotations, trusted=self.trusted)
        name = definition.name

        async def call(arguments: dict[str, Any]) -> Any:
            future = asyncio.run_coroutine_threadsafe(self._call(name, arguments), self._loop)
            return result_value(await asyncio.wrap_future(future))

        schema = definition.input_schema if isinstance(definition.input_schema, dict) else {}
        tool = Tool.from_schema(
            name,
            definition.description or definition.title or "",
            {"type": "object", "properties": {}, **schema},
            call,
            idempotent=idempotent,
            requires_approval=requires_approval,
            # Only what changes nothing runs beside other calls of its batch: effects of
            # one server's tools must not interleave in an order nobody chose.
            parallel=annotations.get("readOnlyHint") is True and self.trusted,
        )
        tool.source = self.source  # type: ignore[attr-defined]
        tool.annotations = annotations  # type: ignore[attr-defined]
        tool.mcp_name = name  # type: ignore[attr-defined]
        return tool

    def __iter__(self) -> Iterator[Tool]:
        return iter(self.tools)

    def __len__(self) -> int:
        return len(self.tools)

    # -- lifetime -----------------------------------------------------------

    def close(self) -> None:
        """End the session and the server process; idempotent."""
        if self._loop.is_closed():
            return
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        with contextlib.suppress(BaseException):  # a server that died meanwhile has nothing left to close
            self._main.result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._loop.close()

    def __enter__(self) -> MCPTools:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> MCPTools:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.close)

    def __repr__(self) -> str:
        return f"MCPTools({self.spec!r}, {len(self.tools)} tools)"


def mcp_tools(
    server: str | Sequence[str],
    *,
    trusted: bool = True,
    env: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
) -> MCPTools:
    """The tools of the MCP server ``server``, connected; see the module docstring."""
    return MCPTools(server, trusted=trusted, env=env, headers=headers)


def result_value(result: Any) -> ToolOutput:
    """What the model is told of an MCP ``CallToolResult`` (see the module docstring). The
    whole result is kept in the tool message's raw field (``{"mcp": ...}``) when the text
    does not carry all of it: an image's bytes, a resource, structured content."""
    blocks = list(result.content or [])
    text = "\n".join(p for p in (_block_text(block) for block in blocks) if p)
    if not text and result.structured_content is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False)
    if result.is_error:
        said = text or "the tool reported an error and said nothing more"
        raise ToolFailed(said, raw={"mcp": _raw(result)})
    plain = all(getattr(b, "type", None) == "text" for b in blocks) and _carried(
        text, result.structured_content
    )
    return ToolOutput(text, None if plain else {"mcp": _raw(result)})


def _carried(text: str, structured: Any) -> bool:
    """Whether ``text`` already says all of ``structured`` (absent, the text itself wrapped
    as ``{"result": text}``, or the same JSON), so that keeping it again adds nothing."""
    if structured is None or structured == {"result": text}:
        return True
    try:
        said = json.loads(text)
    except ValueError:
        return False
    return bool(said == structured or (isinstance(structured, dict) and structured.get("result") == said))


def _block_text(block: Any) -> str:
    kind = getattr(block, "type", None)
    if kind == "text":
        return str(block.text)
    if kind in ("image", "audio"):
        size = len(block.data or "") * 3 // 4  # base64: four characters carry three bytes
        return f"[{kind}: {block.mime_type}, about {size} bytes, not shown]"
    if kind == "resource_link":
        return f"[resource link: {block.uri}]"
    if kind == "resource":
        inner = block.resource
        return getattr(inner, "text", None) or f"[resource: {inner.uri}, {inner.mime_type or 'binary'}]"
    return f"[{kind or 'unknown'} content]"


def _raw(result: Any) -> Any:
    try:
        return result.model_dump(by_alias=True, exclude_none=True, mode="json")
    except Exception:
        return repr(result)


def _one_line(error: BaseException) -> str:
    """An exception (or the first leaf of an exception group) as one line."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")


def _errlog() -> Any:
    """Where a stdio server's stderr goes: this process's stderr when it is a file, else
    the interpreter's original one."""
    try:
        sys.stderr.fileno()
        return sys.stderr
    except (AttributeError, OSError, ValueError):
        return sys.__stderr__
