"""An MCP server on a store (the ``mcp`` extra; ``sessiontree mcp`` runs it).

Contract:
- ``build_server(store, *, allow_decide=False, by=None, poll=1.0, resume_hint=None)`` returns an
  ``MCPServer`` (the official SDK's) whose tools read the store: ``list_sessions``,
  ``list_branches``, ``transcript``, ``show_node``, ``search``, ``diff`` and ``pending``,
  each annotated ``readOnlyHint: true, openWorldHint: false`` and answering with
  structured content. Every list is bounded (``limit``, at most ``MAX_LIMIT``) and
  pages with ``offset``/``next_offset``; text longer than ``max_chars`` in a payload is
  cut, and says so.
- ``decide`` exists only with ``allow_decide``: one call of one pause approved,
  rejected or edited through ``loop.decide``, the rules of ``sessiontree approve`` and
  the inbox (a second decision of a pause is refused), recorded as decided by ``by``
  (the server's configuration, never the client's say). Its answer's ``next`` is the
  command that continues the pause: ``resume_hint(pause)`` (``sessiontree mcp`` gives
  the one its CLI prints, with the store's ``--db``), else ``sessiontree resume PAUSE``.
- Resources: ``sessiontree://sessions`` and the template
  ``sessiontree://session/{session}/branch/{branch}`` (the branch's last messages, as
  JSON). A client that listens for updates of one of them (``subscriptions/listen``) is
  told when it changes: the server looks at the heads of the watched branches (and at
  the session list, when watched) every ``poll`` seconds.
- Every failure is a tool error of one line; nothing a client sends writes anything
  but a decision, or names a file to read or write (the store is the server's choice).
"""

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.server.subscriptions import InMemorySubscriptionBus, ResourcesListChanged, ResourceUpdated
from mcp_types import ToolAnnotations

from .. import __version__, deadlines
from ..decisions import parse_decision
from ..errors import Conflict, NotFound, SessionTreeError
from ..kinds import DecisionPayload, PausePayload
from ..loop import check_decisions, decide
from ..model import Node
from ..session import Session
from ..store import Store

MAX_LIMIT = 200
"""The most items one call returns; more come with ``offset``."""
MAX_CHARS = 100_000
SESSIONS_URI = "sessiontree://sessions"
BRANCH_URI = "sessiontree://session/{session}/branch/{branch}"
MAX_WATCHED = 1_000
"""Resources one server watches for changes at most (the oldest go first)."""

READ_ONLY = ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
DECIDING = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)


@contextlib.contextmanager
def _one_line() -> Iterator[None]:
    """What goes wrong becomes a tool error of one line."""
    try:
        yield
    except ToolError:
        raise
    except (SessionTreeError, ValueError, KeyError, TypeError) as e:
        text = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
        raise ToolError(" ".join(text.split())[:1000] or type(e).__name__) from None
    except Exception as e:  # never a traceback to the client
        raise ToolError(f"internal error: {type(e).__name__}: {' '.join(str(e).split())[:500]}") from None


def _bounded(limit: int, what: str = "limit") -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"{what} must be a whole number from 1 to {MAX_LIMIT}, not {limit!r}")
    return limit


def _offset(offset: int) -> int:
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValueError(f"offset must be a whole number >= 0, not {offset!r}")
    return offset


def _clip(value: Any, max_chars: int) -> tuple[Any, bool]:
    """``value`` with every string over ``max_chars`` cut; whether anything was."""
    if isinstance(value, str):
        if len(value) > max_chars:
            return f"{value[:max_chars]}... [{len(value) - max_chars:,} more characters]", True
        return value, False
    if isinstance(value, list):
        items = [_clip(v, max_chars) for v in value]
        return [v for v, _ in items], any(c for _, c in items)
    if isinstance(value, dict):
        pairs = {k: _clip(v, max_chars) for k, v in value.items()}
        return {k: v for k, (v, _) in pairs.items()}, any(c for _, c in pairs.values())
    return value, False


def node_data(node: Node, max_chars: int = 4_000) -> dict[str, Any]:
    """A node as a client sees it: its fields, its payload with long text cut."""
    payload, cut = _clip(node.payload, max_chars)
    data = {
        "id": node.id,
        "session": node.session_id,
        "parent": node.parent_id,
        "depth": node.depth,
        "kind": node.kind,
        "role": node.role,
        "created_at": node.created_at,
        "run": node.run_id,
        "payload": payload,
    }
    if cut:
        data["truncated"] = True
    return data


def _chars(max_chars: int) -> int:
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or not 100 <= max_chars <= MAX_CHARS:
        raise ValueError(f"max_chars must be a whole number from 100 to {MAX_CHARS}, not {max_chars!r}")
    return max_chars


def _session_of(store: Store, session: str | None, ref: str) -> Session:
    """``session`` if given, else the session of the node ``ref`` names."""
    if session:
        return store.session(session)
    try:
        return store.session(store.node(ref).session_id)
    except NotFound:
        raise NotFound(f"no node {ref!r}: give session= to read a branch or checkpoint by name") from None


def pause_data(store: Store, pause: Node) -> dict[str, Any]:
    """A pause waiting for a human: its calls, deadline, state and where it stands."""
    session = store.session(pause.session_id)
    record = PausePayload.from_node(pause)
    calls, _ = _clip(record.call_payloads(), 4_000)
    return {
        "pause": pause.id,
        "session": pause.session_id,
        "created_at": pause.created_at,
        "reason": record.reason,
        "calls": calls,
        "state": deadlines.pause_state(session, pause),
        "expires_at": deadlines.expires_at(pause),
        "branches": session.branches_at(pause),
    }


def build_server(
    store: Store,
    *,
    allow_decide: bool = False,
    by: str | None = None,
    poll: float = 1.0,
    resume_hint: Callable[[Node], str] | None = None,
) -> MCPServer:
    """The MCP server on ``store``; see the module docstring."""
    bus = InMemorySubscriptionBus()
    watched: dict[str, Any] = {}  # resource URI -> what it was when last looked at

    @contextlib.asynccontextmanager
    async def lifespan(_: MCPServer) -> AsyncIterator[dict[str, Any]]:
        task = asyncio.create_task(_watch(store, bus, watched, poll))
        try:
            yield {}
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    server: MCPServer = MCPServer(
        "sessiontree",
        instructions="Agent conversations stored as trees: sessions, branches, transcripts, search and "
        "pauses waiting for a human." + (" decide answers one call of a pause." if allow_decide else ""),
        version=__version__,
        lifespan=lifespan,
        subscriptions=bus,
        log_level="WARNING",  # stderr is the client's log: a refused call is not news there
    )

    async def remember_listens(ctx: Any, call_next: Any) -> Any:
        """Note which resources a client listens to, so that the watcher looks at them."""
        if ctx.method == "subscriptions/listen" and isinstance(ctx.params, Mapping):
            asked = ctx.params.get("notifications")
            wanted = (asked.get("resourceSubscriptions") if isinstance(asked, Mapping) else None) or []
            for uri in wanted[:MAX_WATCHED] if isinstance(wanted, list) else []:
                if isinstance(uri, str) and uri not in watched:
                    watched[uri] = await asyncio.to_thread(_look, store, uri)
                    while len(watched) > MAX_WATCHED:
                        del watched[next(iter(watched))]
        return await call_next(ctx)

    server.middleware.append(remember_listens)

    @server.tool(annotations=READ_ONLY)
    def list_sessions(limit: int = 50, offset: int = 0, include_archived: bool = False) -> dict[str, Any]:
        """Sessions, most recently active first: id, title, node count, last activity."""
        with _one_line():
            limit, offset = _bounded(limit), _offset(offset)
            sessions = store.sessions(include_archived=include_archived)
            page = sessions[offset : offset + limit]
            return {
                "sessions": [
                    {
                        "id": s.id,
                        "title": s.title,
                        "nodes": s.node_count,
                        "created_at": s.created_at,
                        "last_activity": s.last_activity,
                        "archived_at": s.archived_at,
                    }
                    for s in page
                ],
                "total": len(sessions),
                "next_offset": offset + limit if offset + limit < len(sessions) else None,
            }

    @server.tool(annotations=READ_ONLY)
    def list_branches(session: str, limit: int = 100, offset: int = 0) -> dict[str, Any]:
        """The branches (name, head node) and checkpoints of a session (an id or unique
        prefix), LIMIT of each at a time from OFFSET."""
        with _one_line():
            limit, offset = _bounded(limit), _offset(offset)
            s = store.session(session)
            branches, checkpoints = s.branches(), s.checkpoints()
            longest = max(len(branches), len(checkpoints))
            return {
                "session": s.id,
                "title": s.title,
                "branches": [
                    {
                        "name": b.name,
                        "head": b.head_id,
                        "created_at": b.created_at,
                        "updated_at": b.updated_at,
                    }
                    for b in branches[offset : offset + limit]
                ],
                "checkpoints": [
                    {"name": c.name, "node": c.node_id} for c in checkpoints[offset : offset + limit]
                ],
                "branches_total": len(branches),
                "checkpoints_total": len(checkpoints),
                "next_offset": offset + limit if offset + limit < longest else None,
            }

    @server.tool(annotations=READ_ONLY)
    def transcript(
        ref: str = "main",
        session: str | None = None,
        offset: int = 0,
        limit: int = 50,
        max_chars: int = 4_000,
    ) -> dict[str, Any]:
        """The nodes from the root to REF (a branch, checkpoint or node id, optionally ~N),
        oldest first, LIMIT at a time from OFFSET. A name is read in SESSION; a node id
        names its own session."""
        with _one_line():
            limit, offset, max_chars = _bounded(limit), _offset(offset), _chars(max_chars)
            s = _session_of(store, session, ref)
            path = s.path(ref)
            page = path[offset : offset + limit]
            return {
                "session": s.id,
                "ref": ref,
                "head": path[-1].id if path else None,
                "total": len(path),
                "offset": offset,
                "next_offset": offset + limit if offset + limit < len(path) else None,
                "messages": [node_data(n, max_chars) for n in page],
            }

    @server.tool(annotations=READ_ONLY)
    def show_node(node: str, max_chars: int = 4_000) -> dict[str, Any]:
        """One node (an id or unique prefix, optionally ~N): its payload, children and the
        branches standing at it."""
        with _one_line():
            found = store.node(node)
            s = store.session(found.session_id)
            return {
                **node_data(found, _chars(max_chars)),
                "children": [c.id for c in s.children(found)[:MAX_LIMIT]],
                "branches_here": s.branches_at(found),
            }

    @server.tool(annotations=READ_ONLY)
    def search(
        query: str,
        session: str | None = None,
        branch: str | None = None,
        role: str | None = None,
        limit: int = 20,
    ) -> dict[str, Any]:
        """Full-text search (words, "a phrase", AND, OR, NOT, prefix*), best first: each hit
        names its node, session and the branches and checkpoints whose path holds it."""
        with _one_line():
            hits = store.search(query, session=session, branch=branch, role=role, limit=_bounded(limit))
            return {"hits": [h.to_dict() for h in hits]}

    @server.tool(annotations=READ_ONLY)
    def diff(a: str, b: str, session: str | None = None, limit: int = 50) -> dict[str, Any]:
        """Two refs compared from their common ancestor: the nodes only on each side."""
        with _one_line():
            limit = _bounded(limit)
            s = _session_of(store, session, a)
            d = s.diff(a, b)
            return {
                "session": s.id,
                "ancestor": d.ancestor.id if d.ancestor else None,
                "only_a": [node_data(n, 1_000) for n in d.only_a[:limit]],
                "only_b": [node_data(n, 1_000) for n in d.only_b[:limit]],
                "only_a_total": len(d.only_a),
                "only_b_total": len(d.only_b),
            }

    @server.tool(annotations=READ_ONLY)
    def pending(session: str | None = None, limit: int = 50, offset: int = 0) -> dict[str, Any]:
        """Pauses waiting for a human, oldest first: their calls, deadline and state."""
        with _one_line():
            limit, offset = _bounded(limit), _offset(offset)
            pauses = store.pending(session)
            return {
                "pauses": [pause_data(store, p) for p in pauses[offset : offset + limit]],
                "total": len(pauses),
                "next_offset": offset + limit if offset + limit < len(pauses) else None,
                "can_decide": allow_decide,
            }

    if allow_decide:

        @server.tool(name="decide", annotations=DECIDING)
        def decide_call(
            pause: str,
            call: str,
            action: Literal["approve", "reject", "edit"],
            reason: str = "",
            arguments: dict[str, Any] | None = None,
        ) -> dict[str, Any]:
            """Decide one call of a pause: approve it, reject it (REASON is told to the model),
            or edit it (run with ARGUMENTS instead). A pause takes one decision; resume it
            with `sessiontree resume PAUSE`."""
            with _one_line():
                data: dict[str, Any] = {"action": action}
                if action == "reject":
                    data["reason"] = reason
                elif reason:
                    raise ValueError(f"reason is for a rejection, not for {action!r}")
                if action == "edit":
                    data["arguments"] = arguments
                elif arguments is not None:
                    raise ValueError(f"arguments are for an edit, not for {action!r}")
                decision = parse_decision(call, data)
                node = store.node(pause)
                if node.kind != "pause":
                    raise Conflict(f"node {node.id} is a {node.kind} node, not a pause")
                check_decisions(node, {call: decision})
                written = decide(store, node.id, {call: decision}, by=by or "sessiontree mcp")
                return {
                    "decision": written.id,
                    "pause": node.id,
                    "call": call,
                    "action": action,
                    "by": DecisionPayload.from_node(written).by,
                    "next": resume_hint(node) if resume_hint else f"sessiontree resume {node.id}",
                }

    @server.resource(SESSIONS_URI, name="sessions", mime_type="application/json")
    def sessions_resource() -> str:
        """The sessions, most recently active first (as list_sessions)."""
        with _resource_errors():
            return json.dumps(list_sessions(limit=MAX_LIMIT), ensure_ascii=False)

    @server.resource(BRANCH_URI, name="branch", mime_type="application/json")
    def branch_resource(session: str, branch: str) -> str:
        """A branch's last messages (up to 200), oldest first, as JSON."""
        with _resource_errors():
            s = store.session(session)
            head = s.branch(branch).head_id
            path = s.path(head) if head else []
            tail = path[-MAX_LIMIT:]
            return json.dumps(
                {
                    "session": s.id,
                    "branch": branch,
                    "head": path[-1].id if path else None,
                    "total": len(path),
                    "messages": [node_data(n) for n in tail],
                },
                ensure_ascii=False,
            )

    return server


@contextlib.contextmanager
def _resource_errors() -> Iterator[None]:
    try:
        with _one_line():
            yield
    except ToolError as e:
        raise ResourceError(str(e)) from None


def _look(store: Store, uri: str) -> Any:
    """What a watched resource is now: a branch's head, the session list's activity."""
    try:
        if uri == SESSIONS_URI:
            return [(s.id, s.node_count, s.last_activity) for s in store.sessions()]
        prefix = "sessiontree://session/"
        if uri.startswith(prefix) and "/branch/" in uri:
            session, _, branch = uri[len(prefix) :].partition("/branch/")
            return store.session(session).branch(branch).head_id
    except SessionTreeError as e:
        return f"error: {e}"
    return None


async def _watch(store: Store, bus: InMemorySubscriptionBus, watched: dict[str, Any], poll: float) -> None:
    """Every ``poll`` seconds, tell listeners of each watched resource that changed."""
    while True:
        await asyncio.sleep(poll)
        for uri, before in list(watched.items()):
            now = await asyncio.to_thread(_look, store, uri)
            if now != before:
                watched[uri] = now
                await bus.publish(ResourceUpdated(uri=uri))
                if uri == SESSIONS_URI:
                    await bus.publish(ResourcesListChanged())
