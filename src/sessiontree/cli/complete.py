"""Shell completion of what is in the database: session ids, branch and
checkpoint names, pause ids.

Contract: every callback has click's ``shell_complete`` signature, opens the
database that ``--db`` / ``SESSIONTREE_DB`` / the default names read-only (never
creating or upgrading it), and never raises: no database, or any error, means
no completions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import click
from click.shell_completion import CompletionItem

from .. import deadlines
from ..kinds import PausePayload
from ..model import Node
from ..session import Session
from ..store import Store
from .common import db_path, db_url

Complete = Callable[[click.Context, click.Parameter, str], list[CompletionItem]]


def _items(store_reader: Callable[[Store, click.Context], Iterable[tuple[str, str | None]]]) -> Complete:
    """A completion callback from a function yielding (value, help) pairs."""

    def complete(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
        try:
            path, _ = db_path(ctx)
            target = db_url(ctx) or path
            if target == path and not path.is_file():
                return []
            with Store(target, readonly=True) as store:
                return [
                    CompletionItem(value, help=help)
                    for value, help in store_reader(store, ctx)
                    if value.startswith(incomplete)
                ]
        except Exception:  # completion must never break the user's shell
            return []

    return complete


def _session(store: Store, ctx: click.Context) -> Session:
    """The session a command will use: its ``--session``, else the latest."""
    chosen = ctx.params.get("session")
    if isinstance(chosen, str) and chosen:
        return store.session(chosen)
    latest = max(store.sessions(), key=lambda s: (s.last_activity or "", s.id))
    return store.session(latest.id)


def _sessions(store: Store, ctx: click.Context) -> Iterable[tuple[str, str | None]]:
    return [(s.id, s.title) for s in store.sessions(include_archived=True)]


def _branches(store: Store, ctx: click.Context) -> Iterable[tuple[str, str | None]]:
    return [(b.name, "branch") for b in _session(store, ctx).branches()]


def _checkpoints(store: Store, ctx: click.Context) -> Iterable[tuple[str, str | None]]:
    return [(c.name, "checkpoint") for c in _session(store, ctx).checkpoints()]


def _refs(store: Store, ctx: click.Context) -> Iterable[tuple[str, str | None]]:
    return [*_branches(store, ctx), *_checkpoints(store, ctx)]


def _pending(store: Store, ctx: click.Context) -> Iterable[tuple[str, str | None]]:
    # An expired pause cannot be decided (a worker's --on-expiry reject continues it).
    return [(p.id, _calls(p)) for p in store.pending() if not deadlines.is_expired(p)]


def _resumable(store: Store, ctx: click.Context) -> Iterable[tuple[str, str | None]]:
    """Decided pauses whose branch still waits at the decision."""
    found = []
    for info in store.sessions():
        for branch in store.session(info.id).branches():
            head = store.node(branch.head_id) if branch.head_id else None
            if head is not None and head.kind == "decision" and head.parent_id:
                pause = store.node(head.parent_id)
                found.append((pause.id, f"{branch.name}: {_calls(pause)}"))
    return found


def _calls(pause: Node) -> str:
    return ", ".join(str(c.name) for c in PausePayload.from_node(pause).calls)


sessions = _items(_sessions)
branches = _items(_branches)
checkpoints = _items(_checkpoints)
refs = _items(_refs)
pending = _items(_pending)
resumable = _items(_resumable)
