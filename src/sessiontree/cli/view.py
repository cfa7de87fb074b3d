"""``sessiontree html`` and ``sessiontree serve``: the session tree in a browser.

``html`` writes one self-contained HTML file (no network, no extra needed).
``serve`` runs the local web app of ``view.server`` on 127.0.0.1 with uvicorn
(the ``web`` extra): read-only unless ``--allow-decide``, which prints the token
a browser needs to post decisions; ``--deciders FILE`` lets named people decide,
each with a token of their own (``sessiontree decider-token NAME`` makes one and the
file's line for it); ``--max-connections`` and ``--header-timeout`` are the limits of
``view.guard``. ``--work`` runs a worker in a thread beside the server (``start_worker``):
each decided pause continues as its run recorded it (``sessiontree.recipe``), and on
shutdown the worker finishes the run under way and starts no other.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import signal
import socket
import threading
from pathlib import Path
from typing import Any

import click

from .. import deciders as deciders_file
from ..errors import SessionTreeError
from ..notify import Webhook
from ..store import Store
from ..view import session_data
from ..view.page import view_page
from ..worker import DEFAULT_POLL, awork
from .common import (
    abbreviations,
    command,
    db_path,
    db_url,
    echo_result,
    open_store,
    pick_session,
    resume_command,
)
from .inspect import session_argument
from .params import PRICE_HELP, Seconds, parse_price
from .running import (
    close_held,
    finish_deliveries,
    make_webhook,
    on_expiry_option,
    recipe_preparer,
    webhook_options,
    worker_defaults,
)
from .stepview import print_steps

MAX_CONNECTIONS = 100
"""serve's default: a browser opens at most six connections to a server, so a hundred
serve a dozen users and stay far below any limit of open files."""
HEADER_TIMEOUT = 10.0
"""serve's default seconds to send a request's headers: a browser needs milliseconds."""
STOP_WAIT = 30.0
"""Seconds ``serve --work`` waits on shutdown for a run under way to end."""


@click.command()
@session_argument()
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, writable=True),
    help="File to write. Default: sessiontree-<session id>.html in the current directory.",
)
@click.option("--price", "prices", multiple=True, help=PRICE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON.")
@click.pass_context
def html(
    ctx: click.Context, session: str | None, output: str | None, prices: tuple[str, ...], as_json: bool
) -> None:
    """Write SESSION's tree as one self-contained HTML file (default: the latest session).

    The file works offline: two panes (tree, and the path to the selected node),
    badges, filters, search, pinned pauses, compare, deep links (#node=ID).
    """
    store = open_store(ctx)
    s = pick_session(store, session)
    price_table = dict(parse_price(p) for p in prices) or None
    path = Path(output or f"sessiontree-{abbreviations(store, [s.id])[s.id]}.html")
    store.check_output(path)
    data = session_data(store, s.id, prices=price_table)  # read once: the page and the summary
    path.write_text(view_page(data), "utf-8")
    summary = {
        "path": str(path),
        "session": s.id,
        "nodes": len(data["nodes"]),
        "branches": len(data["branches"]),
        "checkpoints": len(data["checkpoints"]),
        "pending": len(data["pending"]),
        "bytes": path.stat().st_size,
    }
    echo_result(as_json, summary, f"wrote {path} ({summary['nodes']} nodes); open it in a browser")


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option(
    "--port", default=8765, show_default=True, type=click.IntRange(0, 65535), help="0 picks a free port."
)
@click.option(
    "--allow-decide",
    is_flag=True,
    help="Let the inbox approve, reject and edit pauses (needs the token printed at start).",
)
@click.option(
    "--deciders",
    "deciders_path",
    type=click.Path(dir_okay=False),
    help="Only the people this file names may decide, each with their own token (Authorization: "
    "Bearer TOKEN), and the decision records who; lines are 'NAME sha256:HASH' "
    "(sessiontree decider-token NAME). Implies --allow-decide.",
)
@click.option(
    "--login/--no-login",
    default=None,
    help="Need the token printed at start for every page, not only decisions "
    "[default: on when HOST is not a loopback address].",
)
@click.option("--price", "prices", multiple=True, help=PRICE_HELP)
@click.option(
    "--max-connections",
    default=MAX_CONNECTIONS,
    show_default=True,
    type=click.IntRange(1, 1_000_000),
    metavar="N",
    help="Connections open at once; one more closes the one that has waited longest for its request.",
)
@click.option(
    "--header-timeout",
    default=HEADER_TIMEOUT,
    show_default=True,
    type=Seconds(0.1),
    help="Seconds a connection has to send a request's headers, from its start or the last response.",
)
@click.option(
    "--work",
    is_flag=True,
    help="Also carry decided pauses on, as a worker beside the server would: each continues "
    "as its run was recorded (model, tools, --approve, ...; keys from the variables it named).",
)
@on_expiry_option(
    "With --work: what becomes of a pause past its deadline: keep it (expired, shown in the "
    "inbox) or continue it as a rejection by the system (as worker --on-expiry)."
)
@webhook_options  # with --work: the pauses the runs it carries on reach
@click.pass_context
def serve(
    ctx: click.Context,
    host: str,
    port: int,
    allow_decide: bool,
    deciders_path: str | None,
    login: bool | None,
    prices: tuple[str, ...],
    max_connections: int,
    header_timeout: float,
    work: bool,
    on_expiry: str,
    webhook_url: str | None,
    webhook_secret_env: str,
) -> None:
    """Serve the sessions, their live trees and an inbox of pending pauses on HOST:PORT.

    Read-only unless --allow-decide. Beyond loopback every page needs the token printed
    at start (--login). A connection that sends no request within --header-timeout is
    closed, and idle ones make room when --max-connections are open, so idle sockets
    cannot lock clients out. Needs the web extra: pip install 'sessiontree[web]'.
    """
    try:
        import uvicorn

        from ..view.guard import file_limit_problem, server_config
        from ..view.server import create_app
    except ImportError:
        raise click.ClickException(
            "sessiontree serve needs the web extra: pip install 'sessiontree[web]'"
        ) from None
    if not work and (on_expiry != "keep" or webhook_url):
        flag = "--on-expiry" if on_expiry != "keep" else "--webhook"
        raise click.UsageError(f"{flag} acts on the runs --work carries on: add --work")
    hook = make_webhook(webhook_url, webhook_secret_env)
    deciders = None
    if deciders_path is not None:
        try:
            deciders = deciders_file.load(deciders_path)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--deciders") from None
        allow_decide = True
    problem = file_limit_problem(max_connections)
    if problem:
        raise click.ClickException(problem)
    store = open_store(ctx)  # creates the default file on first use, checks the schema
    store.close()
    path = db_url(ctx) or str(db_path(ctx)[0])
    if login is None:
        login = not is_loopback(host)
    token = secrets.token_urlsafe(24) if allow_decide or login else None
    host = host.removeprefix("[").removesuffix("]")  # --host [::1] as in a URL: bind ::1
    shown = f"[{host}]" if ":" in host else host  # as in a URL
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise click.ClickException(f"cannot listen on {shown}:{port}: {e.strerror or e}") from None
    port = sock.getsockname()[1]
    app = create_app(
        path,
        allow_decide=allow_decide,
        token=token,
        prices=dict(parse_price(p) for p in prices) or None,
        hosts=host_names(host),
        login=login,
        deciders=deciders,
        work=work,
        commands=lambda pause: (resume_command(ctx, pause), command(ctx, "worker")),
    )
    url = f"http://{shown}:{port}/"
    click.echo(f"serving {store.path} on {url}" + ("" if allow_decide else " (read-only)"))
    if login:
        click.echo(f"every page needs the token: log in at {url}login?token={token}")
    elif deciders:
        click.echo(
            f"decisions allowed to {', '.join(sorted(deciders))}, each with their own token: open {url}"
        )
    elif token:
        click.echo(f"decisions allowed with the token {token}: open {url}#token={token}")
    if work:
        click.echo("carrying decided pauses on (--work)")
    click.echo("Ctrl-C stops the server", err=True)
    config = server_config(app, max_connections=max_connections, header_timeout=header_timeout)
    server = uvicorn.Server(config)
    worker = start_worker(path, on_expiry=on_expiry, hook=hook) if work else None
    stopped_by = signal.SIGINT

    def on_term(signum: int, frame: Any) -> None:  # uvicorn raises the signal again once stopped
        nonlocal stopped_by
        stopped_by = signal.SIGTERM
        raise KeyboardInterrupt

    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, on_term) if main else None
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # a requested stop (Ctrl-C, SIGTERM), after uvicorn's own shutdown
        click.echo(f"serve stopped ({stopped_by.name})", err=True)
        ctx.exit(128 + stopped_by)
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)
        if worker is not None:
            worker.stop()  # after the server: no decision comes in that it would leave behind


class Worker:
    """A worker carrying decided pauses on in a thread of its own (``serve --work``)."""

    def __init__(
        self, db: str, poll: float = DEFAULT_POLL, on_expiry: str = "keep", hook: Webhook | None = None
    ) -> None:
        self.db, self.poll, self.on_expiry, self.hook = db, poll, on_expiry, hook
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="sessiontree serve --work", daemon=True)

    def _run(self) -> None:
        say = lambda line: click.echo(line, err=True)  # noqa: E731
        held: list[Any] = []  # the MCP servers of the pause under way: no command closes them here
        try:
            with Store(self.db) as store:
                print_steps(
                    awork(
                        store,
                        poll=self.poll,
                        stop=self.stopping,
                        prepare=recipe_preparer(worker_defaults(), {}, say, held),
                        on_expiry=self.on_expiry,
                        on_pause=self.hook,  # None: no notification
                    ),
                    hints=False,  # a pause it reaches is in the inbox, to decide there
                )
        except SessionTreeError as e:  # the server goes on; what it cannot do is said once
            click.echo(f"worker stopped: {e}", err=True)
        finally:
            close_held(held)

    def stop(self, timeout: float = STOP_WAIT) -> bool:
        """Stop between two pauses and wait up to ``timeout`` seconds; whether it ended."""
        self.stopping.set()
        self.thread.join(timeout)
        if self.thread.is_alive():  # a run still under way; a worker recovers it if cut off
            click.echo(f"worker: a run was still under way after {timeout:g} s", err=True)
            return False
        finish_deliveries(self.hook)
        return True


def start_worker(
    db: str, poll: float = DEFAULT_POLL, on_expiry: str = "keep", hook: Webhook | None = None
) -> Worker:
    """A started ``Worker`` on ``db`` (``on_expiry`` and ``hook``: as ``worker``'s
    ``--on-expiry`` and ``--webhook``)."""
    worker = Worker(db, poll, on_expiry, hook)
    worker.thread.start()
    return worker


def host_names(host: str) -> list[str]:
    """The Host header names the server listening on HOST answers to: HOST, 127.0.0.1
    and localhost. An IPv6 address comes in brackets (``Host: [::1]:8765``), as written
    and as a browser shortens it."""
    names = {"127.0.0.1", "localhost"}
    host = host.removeprefix("[").removesuffix("]")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:  # a name
        return sorted(names | {host})
    if address.version == 6:
        return sorted(names | {f"[{host}]", f"[{address.compressed}]"})
    return sorted(names | {host})


def is_loopback(host: str) -> bool:
    """Whether HOST is this machine only (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a name: it may resolve to anything
        return False


@click.command(name="decider-token")
@click.argument("name")
@click.option(
    "--file",
    "path",
    type=click.Path(dir_okay=False),
    help="Add the line to this deciders file (made if missing, readable by you only).",
)
def decider_token(name: str, path: str | None) -> None:
    """Make a decider token for NAME (for serve --deciders): prints the token, to give to NAME,
    and the file's line, which holds only its hash."""
    token = deciders_file.new_token()
    try:
        entry = deciders_file.line(name, token)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="NAME") from None
    if path is not None:
        target = Path(path)
        try:
            known = deciders_file.load(target, allow_empty=True) if target.exists() else {}
        except ValueError as e:  # a file it cannot read, or one holding what is not a hash
            raise click.ClickException(str(e)) from None
        if name in known:
            raise click.ClickException(f"{path} names {name} already: remove that line first")
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            f.write(entry + "\n")
        click.echo(f"added {name} to {path}", err=True)
    else:
        click.echo(f"add this line to the deciders file: {entry}", err=True)
    click.echo(token)


COMMANDS = [html, serve, decider_token]
