"""What every command shares: finding and opening the database, resolving what
the user typed, and printing JSON.

Contract: ``open_store(ctx, write=...)`` opens the database chosen by
``--db``, then ``SESSIONTREE_DB``, then ``default_db_path()`` (a file, or a
``postgresql://`` URL); inspection
commands open it read-only and never create it, except the default file,
which is created on first use. ``target(store, ref, session)`` turns a
user's ``REF`` (+ optional ``--session``) into a session and a ref inside it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click

from ..db import needs_migration
from ..errors import NotFound, SessionTreeError
from ..names import looks_like_id, split_ancestry
from ..session import Session
from ..storage import is_postgres_url
from ..store import Store
from .render import json_safe


def default_db_path() -> Path:
    """The per-user default database: the XDG data directory on Linux."""
    if sys.platform.startswith("linux"):
        base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
        return base / "sessiontree" / "sessiontree.db"
    return Path(click.get_app_dir("sessiontree")) / "sessiontree.db"


def db_path(ctx: click.Context) -> tuple[Path, bool]:
    """(the database path, whether the user chose it); see ``db_url`` for a server."""
    chosen = ctx.find_root().params.get("db") or os.environ.get("SESSIONTREE_DB")
    return (Path(chosen), True) if chosen else (default_db_path(), False)


def db_url(ctx: click.Context) -> str | None:
    """The ``postgresql://`` URL the user chose with ``--db`` or ``SESSIONTREE_DB``, if any."""
    chosen = ctx.find_root().params.get("db") or os.environ.get("SESSIONTREE_DB")
    return chosen if chosen and is_postgres_url(chosen) else None


def open_store(ctx: click.Context, *, write: bool = False) -> Store:
    """Open the store for this command; it is closed when the command ends.

    Commands that only read open it read-only; commands that write create it. A
    ``postgresql://`` URL opens that server's store (created and migrated on first use).
    """
    url = db_url(ctx)
    if url is not None:
        server = Store(url, readonly=not write)
        ctx.call_on_close(server.close)
        return server
    path, chosen = db_path(ctx)
    if not path.exists():
        if chosen and not write:
            raise click.ClickException(
                f"no database at {path} (create one with `sessiontree demo` "
                "or `sessiontree run`, or check --db / SESSIONTREE_DB)"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        write = True  # commands that write create the file; so does first use of the default
    # An older file is opened read-write once, so that its schema can be upgraded.
    store = Store(path, readonly=not write and not needs_migration(path))
    ctx.call_on_close(store.close)
    return store


def latest_session(store: Store) -> Session:
    sessions = store.sessions()
    if not sessions:
        raise click.ClickException("the database has no sessions yet")
    latest = max(sessions, key=lambda s: (s.last_activity or "", s.id))
    return store.session(latest.id)


def pick_session(store: Store, session: str | None) -> Session:
    """``--session`` if given, else the most recently active session."""
    return store.session(session) if session else latest_session(store)


def target(store: Store, ref: str, session: str | None) -> tuple[Session, str]:
    """The session a ref lives in, and the ref.

    ``--session`` wins; otherwise a ref that is a node id (or unique prefix)
    names its own session; otherwise it is a branch or checkpoint name in the
    most recently active session.
    """
    if session:
        return store.session(session), ref
    if looks_like_id(split_ancestry(ref)[0]):
        try:
            node = store.node(ref)
            return store.session(node.session_id), node.id
        except NotFound:
            if split_ancestry(ref)[1]:
                raise  # an id was meant, and the walk up went past the root
    return latest_session(store), ref


def abbreviations(store: Store, ids: list[str]) -> dict[str, str]:
    """Ids shortened to one width at which each is unique in the whole store, so any
    id a listing prints can be pasted back into another command."""
    return store.abbreviations(ids)


def echo_json(data: Any) -> None:
    click.echo(json_safe(json.dumps(data, indent=2, ensure_ascii=False, default=str)))


def echo_result(as_json: bool, data: Any, line: str) -> None:
    """What a write command did: its JSON with ``--json``, else one line."""
    if as_json:
        echo_json(data)
    else:
        click.echo(line)


class SessionTreeGroup(click.Group):
    """Turns sessiontree's errors into one-line messages and a non-zero exit."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SessionTreeError as e:
            raise click.ClickException(str(e)) from None
        except OSError as e:  # a file the user named: missing directory, no permission, full disk
            where = f"{e.filename}: " if e.filename else ""
            raise click.ClickException(f"{where}{e.strerror or e}") from None
        except (click.exceptions.Exit, click.ClickException, click.Abort, KeyboardInterrupt):
            raise
        except Exception as e:
            if os.environ.get("SESSIONTREE_DEBUG"):
                raise
            raise click.ClickException(
                f"internal error: {type(e).__name__}: {e} (set SESSIONTREE_DEBUG=1 for the traceback,"
                " and please report it)"
            ) from None
