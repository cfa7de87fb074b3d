"""``sessiontree serve``: the browser view as a small local web app (needs the ``web`` extra).

Contract:
- ``create_app(db, allow_decide=False, token=None, prices=None)`` returns a
  Starlette app over the database file ``db``: ``/`` lists the sessions and the
  inbox of unresolved pauses of every session, ``/s/{session}`` is the session's
  view (the same page as ``sessiontree html``), kept live by polling
  ``/api/sessions/{session}/version`` and refetching ``.../data``. The page
  carries the version it was built from (``config.live.built``), so a change
  made before its first poll is still shown; a session that is gone answers 404.
- Read-only by default: every request opens the file read-only. With
  ``allow_decide`` the inbox and the pinned pauses get approve / reject / edit
  buttons that POST to ``/api/pauses/{pause}/decision``; the write goes through
  ``loop.decide``, the same function as ``sessiontree approve``, so one decision
  per pause still holds (a second one is refused with 409). The body is checked
  first (``sessiontree.decisions``, the rules of ``sessiontree edit-call``), at most
  ``MAX_BODY`` bytes (else 413); a malformed decision, an empty one or a call id
  the pause does not have is a 400, and so is an edit whose arguments do not fit the
  schema the pause recorded for the call's tool (``loop.check_decisions``; the page
  shows the message); a node that is not a pause is a 404. The write
  runs in a worker thread, so a writer holding the database never stalls the
  other requests; when it holds it too long the answer is 503 with Retry-After.
- A POST needs the token in the ``X-Sessiontree-Token`` header. A header, not a
  cookie: a browser never adds it by itself, and another site's page cannot set
  it on a request here without a CORS preflight this app never answers. The
  token reaches the page in the URL fragment printed at start (``#token=...``),
  which is never sent to the server or shown to other sites. Requests whose
  ``Host`` is not this server's are refused (DNS rebinding).
- With ``deciders`` (name -> token hash, ``sessiontree.deciders``; it implies
  ``allow_decide``) a decision needs ``Authorization: Bearer <decider token>`` instead
  of the server's token: none is a 401, one matching no decider a 403, and the
  decision records the decider's name as ``by`` (a body whose ``by`` names someone
  else is a 400). A header too, so the cross-site reasoning above holds. Without
  ``deciders`` ``by`` is the free text the body gives (``"sessiontree serve"`` if none).
- A decision's reply says what happens next (``next``): ``"approved; continuing"`` when
  the server carries decided pauses on itself (``work``, ``sessiontree serve --work``),
  else the exact commands that would (``commands(pause)``: resume it, or run a worker).
- An expired pause (its deadline passed, see ``deadlines``) is listed in the inbox
  with ``state: "expired"``; deciding it is a 409 and writes nothing.
- With ``login`` every request needs the token too (reading included): in the
  ``X-Sessiontree-Token`` header, or a login cookie ``/login?token=...`` sets
  (HttpOnly, SameSite=Strict, so another site's page cannot send it). The
  cookie never holds the token: cookies are shared by every port of a host, so
  it holds ``read_secret(token)``, an HMAC that lets a browser read and nothing
  else, under a name with the server's port (``login_cookie(port)``), so two
  servers on one host keep their own. Anything else gets 401 and a line saying
  how to log in. ``sessiontree serve`` turns it on whenever it listens beyond
  loopback.
- ``/api/search?q=...`` takes at most ``SEARCH_MAX_CHARS`` characters and
  ``SEARCH_MAX_TERMS`` words (FTS5's AND/OR/NOT/NEAR not counted), else 400
  naming the limit; on SQLite a search that runs longer than ``SEARCH_SECONDS``
  is interrupted and answered 400 too, so no request holds a thread (or delays a
  shutdown) for longer, whether or not its client is still there.
- Every request opens its own ``Store`` (SQLite connections stay in one thread)
  and closes it; a sessiontree error becomes a one-line JSON ``{"error": ...}``
  reply (``failure``: 404 for what does not exist, 503 with Retry-After for a
  busy or unreachable database, 400 otherwise: an invalid query, a malformed
  id or name). JSON replies are written like the page's embedded data
  (``page.embed_json``): a lone surrogate in a stored payload, which the store
  accepts, is a ``\\u`` escape, not a failed reply.
- One redaction for everything served: every JSON reply (``JSON``) and every
  page (``page.page``) passes each string through ``data.redacted`` as it is
  written, so a credential in a title, a branch name, a snippet, a pause's
  reason or an error message is shown as ``[redacted]`` wherever it appears; a
  search snippet is first scrubbed of the words of its node's credentials
  (``data.scrubbed_snippet``), which it may show cut or marked.
- No response is cached: each carries ``Cache-Control: no-store`` and
  ``Vary: Cookie`` (``_Private``), so what a logged-in browser read is neither
  kept on disk nor answered from a cache to a request without the cookie.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import MutableHeaders
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import deciders as deciders_file
from ..decisions import parse_decisions
from ..errors import (
    Busy,
    Conflict,
    NotFound,
    OutcomeUnknown,
    SessionTreeError,
    ToolArgumentError,
    Unavailable,
)
from ..loop import check_decisions, decide
from ..model import Node
from ..steps import Decision
from ..storage import SQLiteStorage, is_postgres_url
from ..store import Store
from .data import inbox, redacted, scrubbed_snippet, session_data, version
from .page import embed_json, page, render_html

TOKEN_HEADER = "X-Sessiontree-Token"
NOT_LOGGED_IN = (
    "this sessiontree server needs its token: open the /login?token=... address it printed at start"
)
POLL_MS = 1500
SEARCH_LIMIT = 50
SEARCH_MAX_CHARS = 500
SEARCH_MAX_TERMS = 32
"""A query's words: FTS5's cost grows faster than linearly with OR-ed terms (400 of
them took over a minute on a 10,000-node session; 32 take a fraction of a second)."""
SEARCH_SECONDS = 5.0
MAX_BODY = 1 << 20
"""Bytes a decision's body may have: a real one is a few hundred."""
RETRY_AFTER = "5"
"""Seconds a client is told to wait after a 503 (a writer held the database)."""
_READ_LABEL = b"sessiontree serve: login cookie, reading only"
_OPERATORS = {"AND", "OR", "NOT", "NEAR"}
_WORD = re.compile(r"\w+")


class JSON(JSONResponse):
    """A JSON reply that any stored value can travel in, redacted: written by
    ``embed_json``, which falls back to ``\\u`` escapes for a lone surrogate (UTF-8
    cannot carry one, and Starlette's own rendering would fail with UnicodeEncodeError)."""

    def render(self, content: Any) -> bytes:
        return embed_json(redacted(content)).encode("utf-8")


class _Private:
    """ASGI middleware: ``Cache-Control: no-store`` and ``Vary: Cookie`` on every response,
    errors and redirects included (what a page shows depends on the login cookie)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers["Cache-Control"] = "no-store"
                headers.add_vary_header("Cookie")
            await send(message)

        await self.app(scope, receive, sending if scope["type"] == "http" else send)


class _BadRequest(Exception):
    """A decision request that names calls the pause does not have (400, before writing)."""


class _TooLarge(Exception):
    """A request body over ``MAX_BODY`` bytes (413)."""


def read_secret(token: str) -> str:
    """What the login cookie holds for ``token``: derived from it, but not it, and not
    accepted where the token is needed (a decision)."""
    return hmac.new(token.encode(), _READ_LABEL, hashlib.sha256).hexdigest()


def login_cookie(port: int) -> str:
    """The login cookie's name on a server listening on ``port``."""
    return f"sessiontree_read_{port}"


def _port(request: Request) -> int:
    server = request.scope.get("server")  # the socket's own port: stable behind a proxy too
    if server and server[1]:
        return int(server[1])
    return request.url.port or (443 if request.url.scheme == "https" else 80)


def sessions_listing(store: Store) -> list[dict[str, Any]]:
    waiting: dict[str, int] = {}
    for p in store.pending():
        waiting[p.session_id] = waiting.get(p.session_id, 0) + 1
    return [
        {
            "id": s.id,
            "title": s.title or "",
            "nodes": s.node_count,
            "last_activity": s.last_activity,
            "pending": waiting.get(s.id, 0),
        }
        for s in store.sessions()
    ]


def search_problem(query: str) -> str | None:
    """Why ``query`` is refused before it is run (too long, too many words), or None."""
    if len(query) > SEARCH_MAX_CHARS:
        return f"the search query has {len(query)} characters; at most {SEARCH_MAX_CHARS} are searched"
    terms = [w for w in _WORD.findall(query) if w not in _OPERATORS]
    if len(terms) > SEARCH_MAX_TERMS:
        return f"the search query has {len(terms)} words; at most {SEARCH_MAX_TERMS} are searched"
    return None


@contextmanager
def _time_bound(store: Store, seconds: float) -> Iterator[Callable[[], bool]]:
    """Interrupt the SQLite statements run inside after ``seconds`` (they raise
    OperationalError); yields whether that happened. A PostgreSQL store is not bounded."""
    storage = store.storage
    if not isinstance(storage, SQLiteStorage):
        yield lambda: False
        return
    deadline = time.monotonic() + seconds
    tripped = False

    def past_deadline() -> bool:
        nonlocal tripped
        tripped = tripped or time.monotonic() > deadline
        return tripped

    # every 10,000 virtual-machine steps: a clock read each fraction of a millisecond
    storage.conn.set_progress_handler(past_deadline, 10_000)
    try:
        yield lambda: tripped
    finally:
        storage.conn.set_progress_handler(None, 0)


async def _body(request: Request, limit: int) -> bytes:
    """The request's body, refused (``_TooLarge``) as soon as it is known to exceed ``limit``."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _TooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _TooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def failure(e: SessionTreeError) -> Response:
    """The reply to a sessiontree error: 404 for what does not exist (``NotFound``), 503
    with Retry-After for a database that is busy or unreachable, 400 for the rest (an
    ``InvalidQuery``, a malformed ref, ...)."""
    if isinstance(e, NotFound):
        return JSON({"error": str(e)}, 404)
    if isinstance(e, (Busy, Unavailable)):
        return JSON({"error": f"{e}; try again later"}, 503, headers={"Retry-After": RETRY_AFTER})
    return JSON({"error": str(e)}, 400)


def create_app(
    db: str | Path,
    *,
    allow_decide: bool = False,
    token: str | None = None,
    prices: dict[str, dict[str, float]] | None = None,
    hosts: list[str] | None = None,
    login: bool = False,
    deciders: dict[str, str] | None = None,
    work: bool = False,
    commands: Callable[[Node], tuple[str, str]] | None = None,
) -> Starlette:
    """The app (see the module docstring); ``hosts`` are the Host names it answers to.
    ``work`` says a worker beside the app carries decided pauses on; otherwise
    ``commands(pause)`` gives the commands that would (resume it, run a worker), for the
    reply to a decision (default: ``sessiontree resume PAUSE`` and ``sessiontree worker``)."""
    allow_decide = allow_decide or bool(deciders)
    if (allow_decide or login) and not token:
        raise ValueError("allow_decide and login need a token")
    secret = read_secret(token) if token else None

    def matches(given: str | None, expected: str | None) -> bool:
        return bool(expected and given) and hmac.compare_digest(str(given).encode(), str(expected).encode())

    def logged_in(request: Request) -> bool:
        return (
            not login
            or matches(request.headers.get(TOKEN_HEADER), token)
            or matches(request.cookies.get(login_cookie(_port(request))), secret)
        )

    def refused(request: Request) -> Response:
        if request.url.path.startswith("/api/"):
            return JSON({"error": NOT_LOGGED_IN}, 401)
        return Response(NOT_LOGGED_IN + "\n", 401, media_type="text/plain")

    path = str(db)
    decide_config = (
        {"url": "/api/pauses/{pause}/decision", "header": TOKEN_HEADER, "deciders": bool(deciders)}
        if allow_decide
        else None
    )

    # A SQLite file is opened per request (cheap, and always the file's latest state); a
    # server store once, for its connection pool, which is shared by the request threads.
    shared = Store(path, readonly=True) if is_postgres_url(path) else None

    def reading(handler: Callable[[Store, Request], Response]) -> Callable[[Request], Response]:
        def endpoint(request: Request) -> Response:
            if not logged_in(request):
                return refused(request)
            try:
                if shared is not None:
                    return handler(shared, request)
                with Store(path, readonly=True) as store:
                    return handler(store, request)
            except SessionTreeError as e:
                return failure(e)

        return endpoint

    def index(store: Store, request: Request) -> Response:
        data = {"sessions": sessions_listing(store), "inbox": inbox(store)}
        config = {
            "api": {"sessions": "/api/sessions", "inbox": "/api/inbox", "search": "/api/search"},
            "interval": POLL_MS,
        }
        return HTMLResponse(page("index", "sessiontree", data, {**config, "decide": decide_config}))

    def view(store: Store, request: Request) -> Response:
        sid = store.resolve_session_id(request.path_params["session"])
        live = {
            "version": f"/api/sessions/{sid}/version",
            "data": f"/api/sessions/{sid}/data",
            "interval": POLL_MS,
            # Read before the data: a change in between makes the first poll reload
            # (once, needlessly), where read after it would never be shown.
            "built": version(store, sid),
        }
        config = {"live": live, "home": "/", "decide": decide_config}
        return HTMLResponse(render_html(store, sid, prices=prices, config=config))

    def api_sessions(store: Store, request: Request) -> Response:
        return JSON(sessions_listing(store))

    def api_inbox(store: Store, request: Request) -> Response:
        return JSON(inbox(store))

    def api_search(store: Store, request: Request) -> Response:
        query = request.query_params.get("q", "").strip()
        if not query:
            return JSON([])
        problem = search_problem(query)
        if problem:
            return JSON({"error": problem}, 400)
        with _time_bound(store, SEARCH_SECONDS) as interrupted:
            try:
                hits = store.search(query, limit=SEARCH_LIMIT)
                short = store.abbreviations([h.node.id for h in hits])
                titles = {s.id: s.title or "" for s in store.sessions(include_archived=True)}
            except sqlite3.OperationalError:
                if not interrupted():
                    raise
                return JSON(
                    {
                        "error": f"the search took longer than {SEARCH_SECONDS:g} s and was stopped; "
                        "search for fewer or rarer words"
                    },
                    400,
                )
        return JSON(
            [
                {
                    "node": h.node.id,
                    "short": short[h.node.id],
                    "session": h.session_id,
                    "title": titles.get(h.session_id, ""),
                    "kind": h.node.kind,
                    "snippet": scrubbed_snippet(h.snippet, h.node.payload),
                    "branches": h.branches,
                    "checkpoints": h.checkpoints,
                    # the view opens the node on its branch: /s/<session>#node=<id>
                    "href": f"/s/{h.session_id}#node={h.node.id}",
                }
                for h in hits
            ]
        )

    def api_version(store: Store, request: Request) -> Response:
        return JSON({"version": version(store, request.path_params["session"])})

    def api_data(store: Store, request: Request) -> Response:
        return JSON(session_data(store, request.path_params["session"], prices=prices))

    def login_page(request: Request) -> Response:
        """Check the token once, then keep the read secret in a cookie and go to the index
        (with the token in the fragment when decisions are allowed, for the page's POSTs)."""
        if not login:
            return Response("no login here: this server does not need one\n", 404, media_type="text/plain")
        if not matches(request.query_params.get("token"), token):
            return refused(request)
        assert token is not None and secret is not None
        response = RedirectResponse("/" + (f"#token={token}" if allow_decide else ""), status_code=303)
        response.set_cookie(login_cookie(_port(request)), secret, httponly=True, samesite="strict", path="/")
        return response

    def record(ref: str, decisions: dict[str, Decision], by: str | None) -> tuple[Node, str]:
        """Check the decisions against the pause, then write them (in a worker thread);
        the decision node and what happens next."""
        with Store(path) as store:
            pause = store.node(ref)
            if pause.kind != "pause":
                raise NotFound(f"no pause {ref}: node {pause.id} is a {pause.kind} node")
            try:  # naming calls the pause lacks, or an edit the tool's schema refuses: a bad request
                check_decisions(pause, decisions)
            except (Conflict, ToolArgumentError) as e:
                raise _BadRequest(str(e)) from None
            node = decide(store, pause.id, decisions, by=by or "sessiontree serve")
            return node, next_step(pause, decisions)

    def next_step(pause: Node, decisions: dict[str, Decision]) -> str:
        kinds = {type(d).__name__ for d in decisions.values()}
        done = {"Approve": "approved", "Reject": "rejected", "Edit": "approved with edited arguments"}
        said = done[kinds.pop()] if len(kinds) == 1 else "decided"
        if work:
            return f"{said}; continuing"
        resume, worker = (
            commands(pause) if commands else (f"sessiontree resume {pause.id}", "sessiontree worker")
        )
        return f"{said}; nothing runs until it is continued: {resume} (or keep a worker running: {worker})"

    async def api_decide(request: Request) -> Response:
        if not allow_decide:
            return JSON({"error": "this server is read-only (start it with --allow-decide)"}, 403)
        decider = None
        if deciders:  # who decides is who the token says, not what the body says
            scheme, _, given = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not given.strip():
                return JSON(
                    {"error": "a decision here needs 'Authorization: Bearer <your decider token>'"},
                    401,
                    headers={"WWW-Authenticate": 'Bearer realm="sessiontree"'},
                )
            decider = deciders_file.who(deciders, given.strip())
            if decider is None:
                return JSON({"error": "the decider token matches no decider of this server"}, 403)
        # The token itself, never the login cookie's secret: a cookie is sent by any page.
        elif not matches(request.headers.get(TOKEN_HEADER), token):
            return JSON({"error": f"missing or wrong {TOKEN_HEADER} header"}, 403)
        try:
            body = await _body(request, MAX_BODY)
        except _TooLarge:
            return JSON(
                {"error": f"the request body is over {MAX_BODY} bytes; a decision needs far less"}, 413
            )
        try:
            decisions, by = parse_decisions(json.loads(body))
        except RecursionError:
            return JSON({"error": "bad decision: the body is nested too deeply"}, 400)
        except ValueError as e:  # not JSON, not UTF-8, or not a decision
            return JSON({"error": f"bad decision: {e}"}, 400)
        if decider is not None:
            if by not in (None, decider):
                return JSON(
                    {"error": f"bad decision: 'by' is your decider name here ({decider}); leave it out"}, 400
                )
            by = decider
        try:
            # In a worker thread: a write waits for the database's lock, and the event
            # loop must keep answering everyone else meanwhile.
            node, said = await run_in_threadpool(record, request.path_params["pause"], decisions, by)
        except _BadRequest as e:
            return JSON({"error": f"bad decision: {e}"}, 400)
        except OutcomeUnknown as e:  # not "try again": it may be recorded already
            return JSON({"error": str(e), "decision": e.node_id}, 503)
        except Conflict as e:  # a second decision
            return JSON({"error": str(e)}, 409)
        except SessionTreeError as e:
            return failure(e)
        return JSON({"decision": node.id, "pause": node.parent_id, "next": said})

    routes = [
        Route("/", reading(index)),
        Route("/s/{session}", reading(view)),
        Route("/api/sessions", reading(api_sessions)),
        Route("/api/inbox", reading(api_inbox)),
        Route("/api/search", reading(api_search)),
        Route("/api/sessions/{session}/version", reading(api_version)),
        Route("/api/sessions/{session}/data", reading(api_data)),
        Route("/api/pauses/{pause}/decision", api_decide, methods=["POST"]),
        Route("/login", login_page),
    ]
    allowed = hosts or ["127.0.0.1", "localhost"]
    return Starlette(
        routes=routes,
        middleware=[Middleware(_Private), Middleware(TrustedHostMiddleware, allowed_hosts=allowed)],
    )
