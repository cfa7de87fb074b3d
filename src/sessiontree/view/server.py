"""``sessiontree serve``: the browser view as a small local web app (needs the ``web`` extra).

Contract:
- ``create_app(db, allow_decide=False, token=None, prices=None)`` returns a
  Starlette app over the database file ``db``: ``/`` lists the sessions and the
  inbox of unresolved pauses of every session, ``/s/{session}`` is the session's
  view (the same page as ``sessiontree html``), kept live by polling
  ``/api/sessions/{session}/version`` and refetching ``.../data``.
- Read-only by default: every request opens the file read-only. With
  ``allow_decide`` the inbox and the pinned pauses get approve / reject / edit
  buttons that POST to ``/api/pauses/{pause}/decision``; the write goes through
  ``loop.decide``, the same function as ``sessiontree approve``, so one decision
  per pause still holds (a second one is refused with 409).
- A POST needs the token in the ``X-Sessiontree-Token`` header. A header, not a
  cookie: a browser never adds it by itself, and another site's page cannot set
  it on a request here without a CORS preflight this app never answers. The
  token reaches the page in the URL fragment printed at start (``#token=...``),
  which is never sent to the server or shown to other sites. Requests whose
  ``Host`` is not this server's are refused (DNS rebinding).
- With ``login`` every request needs the token too (reading included): in the
  ``X-Sessiontree-Token`` header, or in the cookie ``/login?token=...`` sets
  (HttpOnly, SameSite=Strict, so another site's page cannot send it). Anything
  else gets 401 and a line saying how to log in. ``sessiontree serve`` turns it
  on whenever it listens beyond loopback.
- Every request opens its own ``Store`` (SQLite connections stay in one thread)
  and closes it; a sessiontree error becomes a JSON ``{"error": ...}`` reply.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from ..errors import Conflict, NotFound, SessionTreeError
from ..loop import decide
from ..steps import decision_from_dict
from ..storage import is_postgres_url
from ..store import Store
from .data import inbox, session_data, version
from .page import page, render_html

TOKEN_HEADER = "X-Sessiontree-Token"
LOGIN_COOKIE = "sessiontree_token"
NOT_LOGGED_IN = (
    "this sessiontree server needs its token: open the /login?token=... address it printed at start"
)
POLL_MS = 1500
SEARCH_LIMIT = 50


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


def create_app(
    db: str | Path,
    *,
    allow_decide: bool = False,
    token: str | None = None,
    prices: dict[str, dict[str, float]] | None = None,
    hosts: list[str] | None = None,
    login: bool = False,
) -> Starlette:
    """The app (see the module docstring); ``hosts`` are the Host names it answers to."""
    if (allow_decide or login) and not token:
        raise ValueError("allow_decide and login need a token")

    def is_token(given: str | None) -> bool:
        return bool(token and given) and hmac.compare_digest(str(given).encode(), str(token).encode())

    def logged_in(request: Request) -> bool:
        return (
            not login
            or is_token(request.headers.get(TOKEN_HEADER))
            or is_token(request.cookies.get(LOGIN_COOKIE))
        )

    def refused(request: Request) -> Response:
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": NOT_LOGGED_IN}, 401)
        return Response(NOT_LOGGED_IN + "\n", 401, media_type="text/plain")

    path = str(db)
    decide_config = {"url": "/api/pauses/{pause}/decision", "header": TOKEN_HEADER} if allow_decide else None

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
            except NotFound as e:
                return JSONResponse({"error": str(e)}, status_code=404)
            except SessionTreeError as e:
                return JSONResponse({"error": str(e)}, status_code=400)

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
        }
        config = {"live": live, "home": "/", "decide": decide_config}
        return HTMLResponse(render_html(store, sid, prices=prices, config=config))

    def api_sessions(store: Store, request: Request) -> Response:
        return JSONResponse(sessions_listing(store))

    def api_inbox(store: Store, request: Request) -> Response:
        return JSONResponse(inbox(store))

    def api_search(store: Store, request: Request) -> Response:
        query = request.query_params.get("q", "").strip()
        if not query:
            return JSONResponse([])
        hits = store.search(query, limit=SEARCH_LIMIT)
        short = store.abbreviations([h.node.id for h in hits])
        titles = {s.id: s.title or "" for s in store.sessions(include_archived=True)}
        return JSONResponse(
            [
                {
                    "node": h.node.id,
                    "short": short[h.node.id],
                    "session": h.session_id,
                    "title": titles.get(h.session_id, ""),
                    "kind": h.node.kind,
                    "snippet": h.snippet,
                    "branches": h.branches,
                    "checkpoints": h.checkpoints,
                    # the view opens the node on its branch: /s/<session>#node=<id>
                    "href": f"/s/{h.session_id}#node={h.node.id}",
                }
                for h in hits
            ]
        )

    def api_version(store: Store, request: Request) -> Response:
        return JSONResponse({"version": version(store, request.path_params["session"])})

    def api_data(store: Store, request: Request) -> Response:
        return JSONResponse(session_data(store, request.path_params["session"], prices=prices))

    def login_page(request: Request) -> Response:
        """Check the token once, then keep it in a cookie and go to the index (with the
        token in the fragment when decisions are allowed, for the page's POSTs)."""
        if not login:
            return Response("no login here: this server does not need one\n", 404, media_type="text/plain")
        if not is_token(request.query_params.get("token")):
            return refused(request)
        assert token is not None
        response = RedirectResponse("/" + (f"#token={token}" if allow_decide else ""), status_code=303)
        response.set_cookie(LOGIN_COOKIE, token, httponly=True, samesite="strict", path="/")
        return response

    async def api_decide(request: Request) -> Response:
        if not allow_decide:
            return JSONResponse({"error": "this server is read-only (start it with --allow-decide)"}, 403)
        if not is_token(request.headers.get(TOKEN_HEADER)):  # a cookie is not enough: see above
            return JSONResponse({"error": f"missing or wrong {TOKEN_HEADER} header"}, 403)
        try:
            body = json.loads(await request.body())
            decisions = {str(k): decision_from_dict(v) for k, v in body["decisions"].items()}
            by = body.get("by") or "sessiontree serve"
            if not isinstance(by, str):
                raise TypeError("'by' must be a string")
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            return JSONResponse({"error": f"bad decision: {e}"}, 400)
        pause = request.path_params["pause"]
        try:
            with Store(path) as store:
                node = decide(store, pause, decisions, by=by)
        except NotFound as e:
            return JSONResponse({"error": str(e)}, 404)
        except Conflict as e:
            return JSONResponse({"error": str(e)}, 409)
        except SessionTreeError as e:
            return JSONResponse({"error": str(e)}, 400)
        return JSONResponse({"decision": node.id, "pause": node.parent_id})

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
    return Starlette(routes=routes, middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=allowed)])
