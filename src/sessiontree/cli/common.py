"""What every command shares: finding and opening the database, resolving what
the user typed, and printing JSON.

Contract: ``open_store(ctx, write=...)`` opens the database chosen by
``--db``, then ``SESSIONTREE_DB``, then ``default_db_path()`` (a file, or a
``postgresql://`` URL); inspection
commands open it read-only and never create it (an empty file is no database
either), except the default file, which is created on first use. A database file
a command created is removed again when the command fails before any session is
in it (see ``created``). ``target(store, ref, session)`` turns a
user's ``REF`` (+ optional ``--session``) into a session and a ref inside it.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from .. import recipe as recipes
from ..errors import NotFound, SessionTreeError
from ..integrations import missing_extra
from ..model import Node
from ..names import looks_like_id, shown, split_ancestry
from ..session import Session
from ..storage import is_postgres_url
from ..storage.sqlite_db import needs_migration
from ..store import Store
from .created import is_blank, make_parents, remember_new_database, remove_new_databases
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


def command(ctx: click.Context | None, *words: str) -> str:
    """A ``sessiontree`` command line to print as a hint, one that works when pasted: with
    ``--db`` when this command was given one (a file as an absolute path; a server's URL
    without its password, which libpq then reads from PGPASSWORD or ~/.pgpass). A database
    chosen by SESSIONTREE_DB is left to the variable, as the API key is."""
    line = ["sessiontree"]
    root = ctx.find_root() if ctx is not None else None
    given = root is not None and root.get_parameter_source("db") == click.core.ParameterSource.COMMANDLINE
    chosen = root.params.get("db") if root is not None and given else None
    if chosen:
        if is_postgres_url(chosen):
            chosen = re.sub(r"(://[^:/@]*):[^/@]*@", r"\1@", chosen)
        else:
            chosen = str(Path(chosen).absolute())
        line += ["--db", chosen]
    return shlex.join([*line, *words])


def pasteable(ctx: click.Context | None, message: str) -> str:
    """``message`` with every ``sessiontree ...`` command it quotes in backquotes given this
    command's ``--db`` (see ``command``): the library's messages name commands for the
    default database, and a hint pasted without the ``--db`` would act on another one."""
    prefix = command(ctx)
    if prefix == "sessiontree":
        return message
    return message.replace("`sessiontree ", f"`{prefix} ")


FLAGS_FOR = {"model": ("--model", "MODEL"), "tools": ("--tools", "TOOLS")}
"""The flags that stand for what a recipe cannot rebuild (``Recipe.missing``)."""


def resume_command(ctx: click.Context | None, pause: Node) -> str:
    """The command that continues ``pause`` once decided: with no flags when the pause
    records a recipe that has everything, else with placeholders for what it lacks."""
    recorded = recipes.of(pause)
    lacking = recorded.missing() if recorded is not None else ("model", "tools")
    return command(ctx, "resume", pause.id, *(word for item in lacking for word in FLAGS_FOR[item]))


CREATE_HINT = "create one with `sessiontree demo` or `sessiontree run`, or check --db / SESSIONTREE_DB"


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
            raise click.ClickException(f"no database at {path} ({CREATE_HINT})")
        made = make_parents(path)
        remember_new_database(ctx, path, made)
        write = True  # commands that write create the file; so does first use of the default
    elif is_blank(path):  # an empty file: no database yet, as a missing one
        if chosen and not write:
            raise click.ClickException(f"no database at {path}: the file is empty ({CREATE_HINT})")
        remember_new_database(ctx, path, blank=path.read_bytes())
        write = True  # the default file is made on first use, whatever made it empty
    # An older file is opened read-write once, so that its schema can be upgraded.
    store = Store(path, readonly=not write and not needs_migration(path))
    ctx.call_on_close(store.close)
    return store


def latest_session(store: Store, *, announce: bool = True) -> Session:
    """The session commands use when none is named: the first one `sessions` lists.

    A command that may write to it names it on stderr when it succeeds, so that a write
    never lands in a session the user did not see (``announce=False``: the command names
    it itself).
    """
    sessions = store.sessions()
    if not sessions:
        raise click.ClickException("the database has no sessions yet")
    latest = store.session(sessions[0].id)
    ctx = click.get_current_context(silent=True)
    if announce and not store.readonly and ctx is not None:
        ctx.find_root().meta["sessiontree.implicit"] = latest.id  # named once the command succeeds
    return latest


def pick_session(store: Store, session: str | None, *, announce: bool = True) -> Session:
    """``--session`` if given, else the most recently active session (see ``latest_session``)."""
    return store.session(session) if session else latest_session(store, announce=announce)


def target(store: Store, ref: str, session: str | None) -> tuple[Session, str]:
    """The session a ref lives in, and the ref.

    ``--session`` wins; otherwise a ref that is a node id (or unique prefix)
    names its own session; otherwise it is a branch or checkpoint name in the
    most recently active session.
    """
    s, (resolved,) = targets(store, [ref], session)
    return s, resolved


def open_target(ctx: click.Context, ref: str, session: str | None) -> tuple[Store, Session, str]:
    """The store opened for writing, and the session and ref ``ref`` names (``target``)."""
    store = open_store(ctx, write=True)
    return (store, *target(store, ref, session))


def targets(store: Store, refs: Sequence[str], session: str | None) -> tuple[Session, list[str]]:
    """The one session several refs are read in, and the refs (as ``target``).

    A node id names its own session, and the names among the refs are read in it;
    two ids of different sessions are refused, as nothing compares across sessions.
    """
    if session:
        return store.session(session), list(refs)
    nodes: dict[int, Node] = {}
    for i, ref in enumerate(refs):
        if looks_like_id(split_ancestry(ref)[0]):
            try:
                nodes[i] = store.node(ref)
            except NotFound:
                if split_ancestry(ref)[1]:
                    raise  # an id was meant, and the walk up went past the root
    owners: dict[str, int] = {}
    for i, node in nodes.items():
        owners.setdefault(node.session_id, i)
    if len(owners) > 1:
        (a, first), (b, second) = list(owners.items())[:2]
        raise click.ClickException(
            f"{shown(refs[first])} and {shown(refs[second])} are in different sessions ({a} and {b});"
            " give refs of one session"
        )
    s = store.session(next(iter(owners))) if owners else latest_session(store)
    return s, [nodes[i].id if i in nodes else ref for i, ref in enumerate(refs)]


def abbreviations(store: Store, ids: list[str]) -> dict[str, str]:
    """Ids shortened to one width at which each is unique in the whole store, so any
    id a listing prints can be pasted back into another command."""
    return store.abbreviations(ids)


def colour_wanted() -> bool:
    """Colour only on a terminal, and never with ``NO_COLOR`` set (https://no-color.org)
    or on a dumb terminal; piped output stays plain text."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def echo_lines(lines: Sequence[str], *, page: bool = True, colour: bool = False) -> None:
    """Print lines; on a terminal, through a pager (``$PAGER``, else ``less``) when they
    fill more than the screen and ``page`` (``--no-pager`` turns it off). A pipe, a file
    or a test always gets the plain lines."""
    if page and sys.stdout.isatty() and len(lines) >= shutil.get_terminal_size().lines:
        if colour and "LESS" not in os.environ:
            os.environ["LESS"] = "FRX"  # as git: keep colours, quit at the end, leave the screen
        click.echo_via_pager("\n".join(lines), color=colour)
        return
    for line in lines:
        click.echo(line)


def echo_json(data: Any) -> None:
    click.echo(json_safe(json.dumps(data, indent=2, ensure_ascii=False, default=str)))


def listed(rows: Sequence[Any], as_json: bool, empty: str) -> bool:
    """Whether a listing is done already: printed as JSON (``--json``, each row's fields),
    or said to be ``empty``; else the caller prints its table."""
    if as_json:
        echo_json([r.__dict__ for r in rows])
        return True
    if not rows:
        click.echo(empty)
        return True
    return False


def import_extra(module: str, name: str, extra: str, needs: str) -> Any:
    """``name`` from ``module`` (relative to ``sessiontree.cli``), which needs the ``extra``
    installed; without it, a one-line ClickException saying ``needs`` it and how to get it."""
    try:
        return getattr(importlib.import_module(module, __package__), name)
    except ImportError as e:
        hint = missing_extra(e, extra, extra)
        if hint is None:
            raise
        raise click.ClickException(f"{needs} needs the {extra} extra: {hint}") from None


def echo_result(as_json: bool, data: Any, line: str) -> None:
    """What a write command did: its JSON with ``--json``, else one line."""
    if as_json:
        echo_json(data)
    else:
        click.echo(line)


# -- errors ---------------------------------------------------------------------------

LONG_MESSAGE = 1_000
"""An error message longer than this has its long quoted values shortened."""
_LONG_QUOTED = re.compile("'[^'\\n]{200,}'|\"[^\"\\n]{200,}\"")
_LONG_WORD = re.compile(r"\S{200,}")


def clip(message: str) -> str:
    """``message`` with each very long quoted value (or word: a path) cut to its start and
    its length: a message may quote a 100 KB name a user typed."""
    if len(message) <= LONG_MESSAGE:
        return message
    message = _LONG_QUOTED.sub(lambda m: f"{m[0][:61]}{m[0][0]}... ({len(m[0]) - 2:,} characters)", message)
    return _LONG_WORD.sub(_clip_word, message)


def _clip_word(match: re.Match[str]) -> str:
    word = match[0]
    end = word[-1] if word[-1] in ".,:;" else ""  # punctuation after it stays
    word = word[: len(word) - len(end)]
    return f"{word[:60]}... ({len(word):,} characters){end}"


class SessionTreeGroup(click.Group):
    """Turns sessiontree's errors into one-line messages and a non-zero exit, and removes
    a database a failed command created (see ``remember_new_database``). Its help lists
    the commands in sections (see ``help``)."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from .help import format_sections

        format_sections(self, ctx, formatter)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            result = self._invoke(ctx)
            if "sessiontree.implicit" in ctx.meta:
                implicit = ctx.meta["sessiontree.implicit"]
                click.echo(
                    f"in session {implicit} (the most recently active; -s SESSION picks another)", err=True
                )
            return result
        except click.exceptions.Exit as e:
            if e.exit_code:
                remove_new_databases(ctx)
            raise
        except BaseException:
            remove_new_databases(ctx)
            raise

    def _invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SessionTreeError as e:
            raise click.ClickException(clip(pasteable(ctx, str(e)))) from None
        except BrokenPipeError:
            # The reader went away (`log | head`): stop quietly, as git does. stdout is
            # pointed at /dev/null so that Python's flush at exit does not complain again.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise click.exceptions.Exit(0) from None
        except OSError as e:  # a file the user named: missing directory, no permission, full disk
            where = f"{e.filename}: " if e.filename else ""
            raise click.ClickException(clip(f"{where}{e.strerror or e}")) from None
        except click.ClickException as e:
            e.message = clip(pasteable(ctx, e.message))  # type: ignore[misc]  # click declares it Final
            raise
        except (click.exceptions.Exit, click.Abort, KeyboardInterrupt):
            raise
        except Exception as e:
            if os.environ.get("SESSIONTREE_DEBUG"):
                raise
            raise click.ClickException(
                clip(
                    f"internal error: {type(e).__name__}: {e} (set SESSIONTREE_DEBUG=1 for the traceback,"
                    " and please report it)"
                )
            ) from None
