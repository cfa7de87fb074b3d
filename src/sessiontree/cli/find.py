"""Full-text search: ``sessiontree search QUERY`` and ``sessiontree search-index``."""

from __future__ import annotations

import sys

import click

from ..model import KINDS, ROLES
from .common import abbreviations, command, echo_json, open_store
from .inspect import only_session
from .params import MAX_COUNT
from .render import one_line, safe


@click.command()
@click.argument("query")
@only_session()
@click.option("-b", "--branch", help="Only nodes on the path of branches with this name.")
@click.option("--role", type=click.Choice(sorted(ROLES)), help="Only messages with this role.")
@click.option("--kind", type=click.Choice(sorted(KINDS)), help="Only nodes of this kind.")
@click.option("--no-tools", is_flag=True, help="Leave tool names, arguments and results out.")
@click.option(
    "--newest", is_flag=True, help="The newest matches first, not the best (faster for common words)."
)
@click.option("-n", "--limit", type=click.IntRange(min=1, max=MAX_COUNT), default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@click.pass_context
def search(
    ctx: click.Context,
    query: str,
    session: str | None,
    branch: str | None,
    role: str | None,
    kind: str | None,
    no_tools: bool,
    newest: bool,
    limit: int,
    as_json: bool,
) -> None:
    """Find nodes in every session by their words (FTS5 syntax: "a phrase", OR, NOT, pre*).

    Each hit shows its node id (for `show` and `log`), its session, the branches
    and [checkpoints] whose path holds it, and the matched words between « and ».
    """
    store = open_store(ctx)
    hits = store.search(
        query,
        session=session,
        branch=branch,
        role=role,
        kind=kind,
        limit=limit,
        tools=not no_tools,
        newest=newest,
    )
    if as_json:
        echo_json([h.to_dict() for h in hits])
        return
    if not hits:
        click.echo("No matches.")
        return
    short = abbreviations(store, [h.node.id for h in hits] + [h.session_id for h in hits])
    for h in hits:
        refs = ", ".join([safe(b) for b in h.branches] + [f"[{safe(c)}]" for c in h.checkpoints])
        what = h.node.role or h.node.kind
        click.echo(f"{short[h.node.id]}  session {short[h.session_id]}  {what}  {refs or '(no ref)'}")
        click.echo(f"    {one_line(h.snippet, 100)}")


@click.command("search-index")
@click.argument("action", type=click.Choice(["status", "on", "off", "rebuild", "check"]), default="status")
@click.option("--json", "as_json", is_flag=True, help="Output JSON.")
@click.pass_context
def search_index(ctx: click.Context, action: str, as_json: bool) -> None:
    """Show, turn on or off, rebuild or check the full-text index.

    \b
    status   whether it is on, nodes indexed and pending, bytes on disk
    on       index every node (one transaction); new nodes are indexed in batches
    off      empty it: appends and the file no longer pay for it; search refuses
    rebuild  empty it and index every node again (repairs a damaged index)
    check    compare the index with the nodes' text; exit 1 if they disagree
    """
    store = open_store(ctx)  # a store that does not exist yet is an error, not created here
    if action != "status":  # FTS5 runs its check as a write statement
        store.close()
        store = open_store(ctx, write=True)
    if action == "check":
        problem = store.check_search_index()
        if as_json:
            echo_json({"ok": problem is None, "problem": problem})
            ctx.exit(0 if problem is None else 1)
        if problem is not None:
            raise click.ClickException(
                f"the search index disagrees with the nodes ({problem});"
                " repair it with `sessiontree search-index rebuild`"
            )
        click.echo("search index ok")
        return
    if action == "off":
        store.set_search_index(False)
    elif action != "status":
        with click.progressbar(length=1, label="indexing", file=sys.stderr) as bar:

            def progress(done: int, total: int) -> None:
                bar.length = max(total, 1)
                bar.update(done - bar.pos)

            store.set_search_index(True, rebuild=action == "rebuild", progress=progress)
    state = store.search_index()
    if as_json:
        echo_json(state.to_dict())
    elif not state.enabled:
        click.echo(f"search index off (turn it on with `{command(ctx, 'search-index', 'on')}`)")
    else:
        size = "" if state.bytes is None else f", {state.bytes} bytes"
        click.echo(f"search index on: {state.indexed} nodes indexed, {state.pending} pending{size}")


COMMANDS = [search, search_index]
