"""``sessiontree mcp``: the store served to MCP clients over stdio or streamable HTTP
(``--mcp``, MCP servers' tools for the commands that run a model, is in ``running``).

It needs the ``mcp`` extra, imported only when the command runs: without it, one line
says how to install it. See docs/mcp.md.
"""

from __future__ import annotations

import hmac
import os
import socket
from typing import Any

import click

from .common import import_extra, open_store, resume_command
from .params import Seconds
from .view import is_loopback

LOOPBACK = "127.0.0.1"


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6; port 0 picks a free one); ``PORT`` or
    ``:PORT`` alone is on loopback."""
    host, sep, port = text.rpartition(":")
    host = host or LOOPBACK
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise click.BadParameter(
            f"{text!r} is not HOST:PORT or PORT, e.g. 127.0.0.1:8766", param_hint="--http"
        )
    return host.removeprefix("[").removesuffix("]"), int(port)


class BearerGate:
    """An ASGI wrapper letting through only HTTP requests that carry the bearer token."""

    def __init__(self, app: Any, token: str) -> None:
        self.app, self.token = app, token.encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            scheme, _, value = given.partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(value.strip(), self.token):
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"text/plain"),
                            (b"www-authenticate", b'Bearer realm="sessiontree"'),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": b"missing or wrong bearer token\n"})
                return
        await self.app(scope, receive, send)


@click.command()
@click.option(
    "--http",
    "address",
    metavar="[HOST:]PORT",
    help="Serve streamable HTTP on HOST:PORT (at /mcp) instead of stdio; HOST is 127.0.0.1 unless "
    "given, and beyond loopback it needs --token-env.",
)
@click.option(
    "--token-env",
    metavar="NAME",
    help="Environment variable holding the bearer token every HTTP request must carry "
    "(Authorization: Bearer TOKEN).",
)
@click.option(
    "--allow-decide",
    is_flag=True,
    help="Offer the decide tool (approve, reject or edit one call of a pause); without it the "
    "store is opened read-only.",
)
@click.option(
    "--by", metavar="NAME", help="Who the decisions made here are recorded as (default: sessiontree mcp)."
)
@click.option(
    "--poll",
    type=Seconds(minimum=0.05),
    default=1.0,
    show_default=True,
    help="Seconds between looks at the resources clients listen to.",
)
@click.pass_context
def mcp(
    ctx: click.Context,
    address: str | None,
    token_env: str | None,
    allow_decide: bool,
    by: str | None,
    poll: float,
) -> None:
    """Serve the store to MCP clients (assistants, IDEs): read-only tools and resources
    over stdio, or streamable HTTP with --http. Needs the mcp extra:
    pip install 'sessiontree[mcp]'.
    """
    build_server = import_extra("..integrations.mcp_server", "build_server", "mcp", "sessiontree mcp")

    if by is not None and not allow_decide:
        raise click.UsageError("--by names who decides: it needs --allow-decide")
    token = None
    if token_env is not None:
        token = os.environ.get(token_env)
        if not token:
            raise click.UsageError(f"--token-env {token_env}: the variable is not set or empty")
        if address is None:
            raise click.UsageError("--token-env is for --http (stdio has no one to ask for a token)")
    sock = None
    if address is not None:
        host, port = parse_address(address)
        if not is_loopback(host) and token is None:
            raise click.UsageError(
                f"--http {address} is reachable beyond this machine:"
                " give a bearer token with --token-env NAME"
            )
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
            sock.listen(128)  # connections queue from now on: the address printed below answers
        except OSError as e:
            sock.close()
            raise click.ClickException(f"cannot listen on {address}: {e.strerror or e}") from None
    store = open_store(ctx, write=allow_decide)
    server = build_server(
        store, allow_decide=allow_decide, by=by, poll=poll, resume_hint=lambda p: resume_command(ctx, p)
    )
    if sock is None:
        server.run("stdio")
        return
    import uvicorn

    host = sock.getsockname()[0]
    shown = f"[{host}]" if ":" in host else host
    app: Any = server.streamable_http_app(host=host)  # a loopback host guards against DNS rebinding
    if token is not None:
        app = BearerGate(app, token)
    click.echo(
        f"serving {store.path} to MCP clients on http://{shown}:{sock.getsockname()[1]}/mcp"
        + ("" if allow_decide else " (read-only)"),
        err=True,
    )
    config = uvicorn.Config(app, log_level="warning", timeout_keep_alive=5)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()


COMMANDS = [mcp]
