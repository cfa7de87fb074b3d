"""Read-only commands: sessions, tree, log, show, branches, diff, pending, usage."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

import click

from .. import deadlines
from ..errors import AmbiguousRef, NotFound
from ..kinds import PausePayload
from ..model import Diff, Usage
from ..names import looks_like_id
from ..session import Session
from ..store import Store
from . import complete
from .common import (
    abbreviations,
    colour_wanted,
    echo_json,
    echo_lines,
    listed,
    open_store,
    pick_session,
    target,
    targets,
)
from .params import MAX_COUNT, PRICE_HELP, parse_price
from .render import call_line, run_line, safe, summary, table, transcript, tree_lines

F = TypeVar("F", bound=Callable[..., Any])

json_option = click.option("--json", "as_json", is_flag=True, help="Output JSON.")
session_option = click.option(
    "-s", "--session", help="Session id or prefix (default: the latest).", shell_complete=complete.sessions
)


def only_session(help: str = "Only this session (id or prefix).") -> Callable[[F], F]:
    """``-s/--session`` as a filter: a command over every session, or only this one."""
    return click.option("-s", "--session", help=help, shell_complete=complete.sessions)


def only_session_json(help: str) -> Callable[[F], F]:
    """``only_session`` then ``--json``, the context passed first (``verify``, ``pending``)."""

    def decorate(function: F) -> F:
        return cast(F, only_session(help)(json_option(click.pass_context(function))))

    return decorate


def session_json(function: F) -> F:
    """``-s/--session`` then ``--json`` (their order in --help), the context passed first:
    the options of most commands that read or change one session."""
    return cast(F, session_option(json_option(click.pass_context(function))))


def session_argument(*, required: bool = False, many: bool = False) -> Callable[[F], F]:
    """SESSION as an argument, as the command always took it, or as ``-s/--session``, the
    spelling of every other command: the command gets ``session`` (``sessions``, a tuple,
    when ``many``). Both at once must name the same session."""
    name = "sessions" if many else "session"

    def decorate(command: F) -> F:
        @functools.wraps(command)
        def merged(*args: Any, **kwargs: Any) -> Any:
            given, flagged = kwargs.pop(name), kwargs.pop("session_flag")
            if many:
                kwargs[name] = tuple(given) + tuple(flagged)
            elif given and flagged and given != flagged:
                raise click.UsageError(f"two sessions given, {given} and -s {flagged}: give one")
            else:
                kwargs[name] = given or flagged
            if required and not kwargs[name]:
                raise click.UsageError("Missing argument 'SESSION' (or -s SESSION).")
            return command(*args, **kwargs)

        more = " (repeatable)" if many else ""
        merged = click.option(
            "-s",
            "--session",
            "session_flag",
            metavar="SESSION",
            multiple=many,
            help=f"The same as the SESSION argument{more}.",
            shell_complete=complete.sessions,
        )(merged)
        argument = click.argument(
            name, nargs=-1 if many else 1, required=False, shell_complete=complete.sessions
        )
        return argument(merged)  # type: ignore[return-value]

    return decorate


@click.command()
@click.option("--all", "include_archived", is_flag=True, help="Include archived sessions.")
@json_option
@click.pass_context
def sessions(ctx: click.Context, include_archived: bool, as_json: bool) -> None:
    """List sessions, most recent first."""
    store = open_store(ctx)
    rows = store.sessions(include_archived=include_archived)
    if listed(rows, as_json, "No sessions."):
        return
    short = abbreviations(store, [r.id for r in rows])
    for line in table(
        [
            [
                short[r.id],
                r.node_count,
                r.last_activity,
                (r.title or "") + (" (archived)" if r.archived_at else ""),
            ]
            for r in rows
        ],
        ["ID", "NODES", "LAST ACTIVITY", "TITLE"],
    ):
        click.echo(line)


limit_option = click.option(
    "-n", "--limit", type=click.IntRange(min=1, max=MAX_COUNT), help="Print at most this many."
)
pager_option = click.option(
    "--no-pager", "no_pager", is_flag=True, help="Never page (output longer than a terminal is paged there)."
)


@click.command()
@session_argument()
@limit_option
@pager_option
@json_option
@click.pass_context
def tree(ctx: click.Context, session: str | None, limit: int | None, no_pager: bool, as_json: bool) -> None:
    """Draw a session's tree: branches (in parentheses), checkpoints [in brackets], pauses.

    -n N prints the first N lines of the graph (--json always gives every node).
    """
    store = open_store(ctx)
    s = pick_session(store, session)
    nodes, branches, checkpoints = s.tree(), s.branches(), s.checkpoints()
    pending = {n.id for n in s.pending()}
    if as_json:
        echo_json(
            {
                "session": s.id,
                "nodes": [n.to_dict() for n in nodes],
                "branches": [b.__dict__ for b in branches],
                "checkpoints": [c.__dict__ for c in checkpoints],
                "pending": sorted(pending),
            }
        )
        return
    colour = colour_wanted()
    lines = [f"session {s.id}" + (f"  {safe(s.title)}" if s.title else "")]
    lines += tree_lines(
        nodes, branches, checkpoints, pending, abbreviations(store, [n.id for n in nodes]), colour
    )
    if limit is not None and len(lines) > limit + 1:
        left = len(lines) - limit - 1
        lines = [*lines[: limit + 1], f"... {left:,} more line{'s' if left > 1 else ''} (-n sets how many)"]
    echo_lines(lines, page=not no_pager, colour=colour)


@click.command()
@click.argument("ref", default="main", shell_complete=complete.refs)
@session_option
@limit_option
@pager_option
@json_option
@click.pass_context
def log(
    ctx: click.Context, ref: str, session: str | None, limit: int | None, no_pager: bool, as_json: bool
) -> None:
    """Show a branch (or the path to any node) as a transcript.

    -n N shows only the last N nodes (the newest), as `git log -n` does.
    """
    store = open_store(ctx)
    s, ref = target(store, ref, session)
    path = s.path(ref)
    earlier = max(0, len(path) - limit) if limit is not None else 0
    path = path[earlier:]
    if as_json:
        echo_json([n.to_dict() for n in path])
        return
    colour = colour_wanted()
    lines = transcript(path, abbreviations(store, [n.id for n in path]), colour)
    if earlier:
        lines = [f"... {earlier:,} earlier node{'s' if earlier > 1 else ''} (-n sets how many)", "", *lines]
    echo_lines(lines, page=not no_pager, colour=colour)


@click.command()
@click.argument("node", shell_complete=complete.refs)
@session_json
def show(ctx: click.Context, node: str, session: str | None, as_json: bool) -> None:
    """Show one node in full (payload, parent, children, provenance), or a session by its id."""
    store = open_store(ctx)
    if session is None and looks_like_id(node):
        meant = _session_meant(store, node)
        if meant is not None:
            show_session(meant, as_json)
            return
    s, ref = target(store, node, session)
    n = s.node(ref)
    children = s.children(n)
    run = store.run(n.run_id) if n.run_id else None
    data = {**n.to_dict(), "children": [c.id for c in children], "run": run.__dict__ if run else None}
    if n.kind == "pause":
        data["state"] = deadlines.pause_state(s, n)
    if as_json:
        echo_json(data)
        return
    click.echo(f"node     {n.id}")
    click.echo(f"session  {n.session_id}")
    click.echo(f"kind     {n.kind}    depth {n.depth}    created {n.created_at}")
    click.echo(f"parent   {n.parent_id or '(root)'}")
    click.echo(f"children {', '.join(c.id for c in children) or '(none)'}")
    if n.kind == "pause":
        click.echo(f"state    {pause_line(data['state'], deadlines.expires_at(n))}")
    if run:
        click.echo(f"run      {run_line(run)}")
    click.echo(summary(n))
    echo_json(n.payload)


def pause_line(state: str, expires_at: str | None) -> str:
    """A pause's state as ``show`` and ``pending`` print it, with its deadline."""
    if state == "expired":
        return f"expired at {expires_at}: it can no longer be decided"
    return state + (f" (expires {expires_at})" if expires_at else "")


def _session_meant(store: Store, prefix: str) -> Session | None:
    """The session ``show PREFIX`` names, or None when it names a node (or nothing: the
    node lookup then says so). A prefix of both a session and a node is refused, naming
    both, rather than silently showing one of them (whole ids never are: ids are unique)."""
    sessions = _matches(lambda: [store.resolve_session_id(prefix)])
    nodes = _matches(lambda: [store.node(prefix).id])
    if prefix in sessions or not nodes:
        return store.session(prefix) if sessions else None  # an ambiguous prefix says so
    if prefix in nodes or not sessions:
        return None
    short = abbreviations(store, [id for id in (*sessions, *nodes) if id])
    said = [
        f"session {short[sessions[0]]}" if sessions[0] else "several sessions",
        f"node {short[nodes[0]]}" if nodes[0] else "several nodes",
    ]
    raise click.ClickException(f"{prefix} matches {said[0]} and {said[1]}; use more characters")


def _matches(lookup: Callable[[], list[str]]) -> list[str]:
    """The one id ``lookup`` finds, [""] when it finds several, [] when none."""
    try:
        return lookup()
    except AmbiguousRef:
        return [""]
    except NotFound:
        return []


def show_session(s: Session, as_json: bool) -> None:
    """A session's header: id, title, times, size, and its refs."""
    nodes, branches, checkpoints = s.tree(), s.branches(), s.checkpoints()
    if as_json:
        echo_json(
            {
                "id": s.id,
                "title": s.title,
                "metadata": s.metadata,
                "created_at": s.created_at,
                "archived_at": s.archived_at,
                "nodes": len(nodes),
                "branches": {b.name: b.head_id for b in branches},
                "checkpoints": {c.name: c.node_id for c in checkpoints},
            }
        )
        return
    click.echo(f"session  {s.id}" + (f"  {safe(s.title)}" if s.title else ""))
    click.echo(f"created  {s.created_at}" + (f"    archived {s.archived_at}" if s.archived_at else ""))
    click.echo(f"nodes    {len(nodes)}")
    click.echo(f"branches {', '.join(b.name for b in branches) or '(none)'}")
    if checkpoints:
        click.echo(f"checkpoints {', '.join(c.name for c in checkpoints)}")


@click.command()
@session_argument()
@json_option
@click.pass_context
def branches(ctx: click.Context, session: str | None, as_json: bool) -> None:
    """List a session's branches and checkpoints."""
    store = open_store(ctx)
    s = pick_session(store, session)
    bs, cps = s.branches(), s.checkpoints()
    if as_json:
        echo_json(
            {"session": s.id, "branches": [b.__dict__ for b in bs], "checkpoints": [c.__dict__ for c in cps]}
        )
        return
    short = abbreviations(store, [b.head_id for b in bs if b.head_id] + [c.node_id for c in cps])
    rows = [["branch", b.name, short.get(b.head_id or "", "-"), b.updated_at] for b in bs]
    rows += [["checkpoint", c.name, short[c.node_id], c.created_at] for c in cps]
    for line in table(rows, ["KIND", "NAME", "AT", "UPDATED"]):
        click.echo(line)


@click.command()
@click.argument("a", shell_complete=complete.refs)
@click.argument("b", shell_complete=complete.refs)
@session_json
def diff(ctx: click.Context, a: str, b: str, session: str | None, as_json: bool) -> None:
    """Compare two refs from their common ancestor.

    A node id names its own session, and a branch or checkpoint name is read in that
    session (else in --session, else in the latest).
    """
    store = open_store(ctx)
    s, (a_ref, b_ref) = targets(store, [a, b], session)
    d = s.diff(a_ref, b_ref)
    if as_json:
        echo_json(
            {
                "ancestor": d.ancestor.to_dict() if d.ancestor else None,
                "only_a": [n.to_dict() for n in d.only_a],
                "only_b": [n.to_dict() for n in d.only_b],
            }
        )
        return
    for line in diff_lines(store, d, a, b):
        click.echo(line)


def diff_lines(store: Store, d: Diff, a: str, b: str) -> list[str]:
    short = abbreviations(
        store, [n.id for n in [*d.only_a, *d.only_b]] + ([d.ancestor.id] if d.ancestor else [])
    )
    ancestor = f"{short[d.ancestor.id]} {summary(d.ancestor)}" if d.ancestor else "(none)"
    lines = [f"common ancestor: {ancestor}"]
    for sign, name, nodes in (("-", a, d.only_a), ("+", b, d.only_b)):
        lines.append(f"{sign}{sign}{sign} {name}: {len(nodes)} node(s)")
        lines += [f"{sign} {short[n.id]} {summary(n)}" for n in nodes]
    return lines


@click.command()
@only_session_json("Only this session (id or prefix).")
def pending(ctx: click.Context, session: str | None, as_json: bool) -> None:
    """List pauses waiting for a human, across sessions (or in one)."""
    store = open_store(ctx)
    pauses = store.pending(session and store.resolve_session_id(session))
    if as_json:
        echo_json([{**p.to_dict(), **deadlines.about(p)} for p in pauses])
        return
    if not pauses:
        click.echo("Nothing is waiting for a human.")
        return
    for p in pauses:
        state = deadlines.about(p)
        said = "" if state["expires_at"] is None else f"  {pause_line(state['state'], state['expires_at'])}"
        click.echo(f"pause {p.id}  session {p.session_id}  {p.created_at}{said}")
        for call in PausePayload.from_node(p).call_payloads():
            click.echo(call_line(call))


@click.command()
@click.argument("ref", default="main", shell_complete=complete.refs)
@click.option(
    "--since", help="Count only the calls after this ref (an ancestor of REF).", shell_complete=complete.refs
)
@click.option("--price", "prices", multiple=True, help=PRICE_HELP)
@session_json
def usage(
    ctx: click.Context,
    ref: str,
    since: str | None,
    prices: tuple[str, ...],
    session: str | None,
    as_json: bool,
) -> None:
    """Model calls, tokens, latency and cost per model on the path to REF.

    Cache writes and reads show when a provider reported them (Anthropic, OpenAI
    Responses); the cost column needs a --price for each model.
    """
    price_table = dict(parse_price(p) for p in prices) or None
    store = open_store(ctx)
    s, ref = target(store, ref, session)
    used = s.usage(ref, since=since)
    each = {model: Usage({model: m}) for model, m in used.by_model.items()}
    if as_json:
        data = {"session": s.id, "ref": ref, "since": since, **used.to_dict()}
        if price_table is not None:  # None for a model (or a total) that has no price
            data["cost"] = used.cost(price_table)
            for model, one in each.items():
                data["by_model"][model]["cost"] = one.cost(price_table)
        echo_json(data)
        return
    cached = bool(used.cache_creation_input_tokens or used.cache_read_input_tokens)
    headers = ["MODEL", "CALLS", "IN", "OUT", *(["CACHE-W", "CACHE-R"] if cached else []), "MS"]
    rows: list[list[object]] = []
    for name, one in [*each.items(), ("total", used)]:
        row: list[object] = [name, one.calls, one.input_tokens, one.output_tokens]
        if cached:
            row += [one.cache_creation_input_tokens, one.cache_read_input_tokens]
        row.append(f"{one.latency_ms:.0f}")
        if price_table is not None:
            cost = one.cost(price_table)
            row.append("-" if cost is None else f"{cost:.6f}")
        rows.append(row)
    for line in table(rows, [*headers, *(["COST"] if price_table is not None else [])]):
        click.echo(line)


COMMANDS = [sessions, tree, log, show, branches, diff, pending, usage]
