"""The Store: one database holding many session trees.

Contract: ``Store(path)`` opens (creating if needed) and migrates a SQLite file
(or ``:memory:``); ``Store("postgresql://...")`` does the same on a PostgreSQL
server (the ``postgres`` extra), with the same API and guarantees.
``Store(path, readonly=True)`` opens it for inspection and never writes; so does
``Store(path)`` on a file this process cannot write (a read-only file or
directory): reads work, writes raise ``ReadOnly`` saying why. Every multi-row
write happens in one transaction, so a failure leaves nothing half-written. SQL
lives in the storage backend (``storage``); what a ref or a session id names is
``refs``'s; the store holds the rules across sessions and hands the rest to its
feature modules (``retention``, ``search``, ``maintenance``).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from . import keywords, maintenance, refs, retention, search
from .errors import Conflict, SessionTreeError
from .ids import new_id, now
from .model import (
    Node,
    PruneReport,
    RetentionReport,
    Run,
    SearchHit,
    SearchIndex,
    SearchQuery,
    SessionInfo,
    TrashEntry,
    VerifyReport,
    encode_json,
)
from .names import MIN_PREFIX, check_lookup, check_text
from .retention import DEFAULT_MIN_BYTES, RetentionPolicy
from .session import Ref, Session
from .storage import SQLiteStorage, Storage, open_storage
from .storage import sqlite_db as _db
from .storage.cache import DEFAULT_MAX_BYTES

SHORT_ID = 8
"""Fewest characters the CLI shows of an id."""


class Store:
    """A sessiontree database. Use as a context manager to close it when done."""

    def __init__(
        self, path: str | Path = ":memory:", *, readonly: bool = False, cache_bytes: int = DEFAULT_MAX_BYTES
    ) -> None:
        """Open (creating and migrating) a database: a SQLite file path (or ``:memory:``) or
        a ``postgresql://`` URL. ``cache_bytes`` bounds the in-process cache of decoded
        paths (payload bytes; 0 turns it off)."""
        self.storage: Storage = open_storage(path, readonly=readonly, cache_bytes=cache_bytes)
        self.path = self.storage.url
        self.readonly = self.storage.readonly

    @property
    def conn(self) -> sqlite3.Connection:
        """This thread's SQLite connection, for inspection; write through the API. (On
        ``:memory:`` the one connection every thread shares, each statement read whole.)"""
        if not isinstance(self.storage, SQLiteStorage):
            raise SessionTreeError(f"{self.path} is not a SQLite store: it has no SQLite connection")
        return self.storage.conn

    def check_output(self, path: str | Path) -> None:
        """``Conflict`` when writing ``path`` would overwrite this store's own file or its
        companions (``db.COMPANIONS``): an export or a page written there
        would destroy what it was made from."""
        if not isinstance(self.storage, SQLiteStorage) or self.path == ":memory:":
            return
        ours = Path(self.path).resolve()
        target = Path(path).resolve()
        if target in {ours, *_db.companions(ours)}:
            raise Conflict(f"{path} is this store's own database file; choose another file to write")

    # -- lifecycle -------------------------------------------------------

    def close(self) -> None:
        self.storage.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({self.path!r})"

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """Group several writes into one atomic transaction (nesting makes a savepoint)."""
        with self.storage.transaction() as conn:
            yield conn

    @property
    def schema_version(self) -> int:
        return self.storage.schema_version

    # -- sessions --------------------------------------------------------

    def create_session(
        self, title: str | None = None, metadata: dict[str, Any] | None = None, *, id: str | None = None
    ) -> Session:
        """Start a new, empty session tree."""
        session_id = id or new_id()
        created = now()
        meta = encode_json(metadata or {}, "session metadata")
        check_text(title, "session title")
        with self.storage.transaction():
            key = self.storage.insert_session(session_id, title, meta, created)
        return Session(self.storage, key, session_id, title, metadata or {}, created)

    def session(self, id_or_prefix: str) -> Session:
        """The session with this id, or the one session whose id starts with this prefix."""
        return Session.from_row(self.storage, self.storage.session_row(self.resolve_session_id(id_or_prefix)))

    def resolve_session_id(self, id_or_prefix: str) -> str:
        """The id of the session an id or unique prefix names (``refs.session_id``)."""
        return refs.session_id(self.storage, id_or_prefix)

    def sessions(self, *, include_archived: bool = False) -> list[SessionInfo]:
        """All sessions, most recently active first (the last node written; the creation
        for an empty one), with their node counts and last activity."""
        return self.storage.sessions(include_archived=include_archived)

    def archive_session(self, session_id: str, *, archived: bool = True) -> None:
        """Hide a session from ``sessions()`` (its tree is kept); ``archived=False`` undoes it."""
        self.session(session_id).archive(archived)

    def delete_session(self, session_id: str, *, permanently: bool = False) -> int:
        """Move a session to the trash (``permanently=True``: remove it with all its nodes,
        refs and runs at once); return its node count. See ``Session.delete``."""
        return self.session(session_id).delete(permanently=permanently)

    # -- retention -------------------------------------------------------

    def trash(self) -> list[TrashEntry]:
        """The sessions in the trash, longest there first."""
        return retention.trash(self.storage)

    def restore_session(self, session_id: str) -> None:
        """Take a session (id or prefix) out of the trash; ``Conflict`` if it is not there."""
        retention.restore(self.storage, self.resolve_session_id(session_id))

    def empty_trash(self, *, older_than: float = 0, dry_run: bool = False) -> list[TrashEntry]:
        """Remove for good the sessions trashed more than ``older_than`` seconds ago."""
        return retention.empty_trash(self.storage, older_than=older_than, dry_run=dry_run)

    def retention(
        self,
        *,
        drop_older_than: float | None = None,
        strip_older_than: float | None = None,
        strip_min_bytes: int = DEFAULT_MIN_BYTES,
        dry_run: bool = True,
        policy: RetentionPolicy | None = None,
    ) -> RetentionReport:
        """Apply retention policies (ages in seconds; a dry run by default): trash sessions
        idle for ``drop_older_than`` unless a checkpoint marks them or a pause waits in
        them; strip tool results of ``strip_min_bytes``+ bytes older than
        ``strip_older_than``, recording each strip. ``policy`` (a ``RetentionPolicy``)
        gives the three at once. See ``retention``."""
        policy = keywords.options_from(RetentionPolicy, policy, locals())  # first thing: the parameters
        return retention.apply(self.storage, policy, dry_run=dry_run)

    def save_retention_policy(
        self,
        *,
        drop_older_than: float | None = None,
        strip_older_than: float | None = None,
        strip_min_bytes: int = DEFAULT_MIN_BYTES,
        policy: RetentionPolicy | None = None,
    ) -> dict[str, float]:
        """Save a retention policy in the store (replacing any saved before), for
        ``apply_retention_policy`` and ``sessiontree retention`` to run later; ``policy``
        (a ``RetentionPolicy``) gives the three settings at once."""
        policy = keywords.options_from(RetentionPolicy, policy, locals())  # first thing: the parameters
        return retention.save_policy(self.storage, policy)

    def retention_policy(self) -> dict[str, float]:
        """The saved retention policy (setting -> value; empty when none is saved)."""
        return retention.saved_policy(self.storage)

    def apply_retention_policy(self, *, dry_run: bool = True) -> RetentionReport:
        """Run the saved retention policy (a dry run by default); ``Conflict`` if none is saved."""
        return retention.apply_saved(self.storage, dry_run=dry_run)

    def redactions(self, session_id: str | None = None) -> list[dict[str, Any]]:
        """Every recorded strip (node, session, field, bytes, marker, reason, created_at)."""
        key = None if session_id is None else self.session(session_id)._key
        return self.storage.trash.redactions(key)

    # -- lookups across sessions ---------------------------------------

    def node(self, ref: str | Node) -> Node:
        """A node of any session: a ``Node``, an id or unique id prefix, optionally ``~N``
        (``refs.node``)."""
        return refs.node(self.storage, ref)

    def run(self, run_id: str) -> Run:
        """The provenance record of one model call."""
        return self.storage.run(check_lookup(run_id, "run"))

    def pending(self, session_id: str | None = None) -> list[Node]:
        """Pauses a human can decide across all sessions (or one), oldest first: no decision
        yet, a branch stands at it (a pause the branch moved away from cannot be carried on),
        and its session is not in the trash."""
        if session_id is not None:
            return self.session(session_id).pending()
        return self.storage.pending()

    def search(
        self,
        query: str,
        *,
        session: str | None = None,
        branch: str | None = None,
        role: str | None = None,
        kind: str | None = None,
        limit: int = 20,
        tools: bool = True,
        newest: bool = False,
    ) -> list[SearchHit]:
        """Nodes matching a full-text ``query`` (FTS5 syntax: words, "a phrase", AND, OR,
        NOT, prefix*), best first, each with a snippet and the branches and checkpoints
        whose path contains it. Filters: a session (id or prefix), a branch name (in that
        session, or any session), a message role, a node kind. ``tools=False`` leaves
        tool names, arguments and results out; ``newest=True`` returns the newest matches
        instead of the best (much faster for a word in thousands of nodes). See ``search``."""
        session_id = None if session is None else self.resolve_session_id(session)
        asked = SearchQuery(query, session_id, branch, role, kind, limit, tools, newest)
        return search.search(self.storage, asked)

    def search_index(self) -> SearchIndex:
        """The full-text index's state: on or off, nodes indexed, nodes written since it
        last caught up (indexed before the next search), bytes on disk."""
        return self.storage.search.index()

    def set_search_index(
        self,
        enabled: bool,
        *,
        rebuild: bool = False,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Turn the full-text index on (indexing every node, in one transaction) or off
        (emptying it: appends and storage no longer pay for it, and ``search`` raises
        ``SearchIndexOff``); ``rebuild=True`` empties it and indexes every node again.
        ``progress(done, total)`` is called as the nodes are indexed. How many nodes it
        holds after. On PostgreSQL off drops the index and its vector columns, and on
        adds them back (rewriting the nodes table once)."""
        return self.storage.search.set_index(enabled, rebuild=rebuild, progress=progress)

    def check_search_index(self) -> str | None:
        """None when the full-text index holds exactly the text of the nodes it covers,
        else what is wrong; ``set_search_index(True, rebuild=True)`` repairs it."""
        return self.storage.search.check_index()

    def abbreviations(self, ids: Iterable[str], *, minimum: int = SHORT_ID) -> dict[str, str]:
        """Each id shortened to one width at which every one of them is unique in the
        whole store (among all nodes and sessions), so any of them can be pasted back."""
        wanted = sorted(set(ids))
        width = max(minimum, MIN_PREFIX)
        for pair in self.storage.neighbours(wanted):
            width = max(width, len(os.path.commonprefix([pair.id, pair.neighbour])) + 1)
        return {id: id[:width] for id in wanted}

    # -- maintenance -----------------------------------------------------

    def prune(
        self,
        *,
        dry_run: bool = True,
        vacuum: bool = False,
        session_id: str | None = None,
        grace: float = maintenance.GRACE_SECONDS,
    ) -> PruneReport:
        """Remove nodes nothing keeps (no branch, checkpoint, unresolved pause or pending
        decision reaches them, and older than ``grace`` seconds). See ``maintenance``."""
        if session_id is not None:
            return self.session(session_id).prune(dry_run=dry_run, vacuum=vacuum, grace=grace)
        return maintenance.prune(self.storage, dry_run=dry_run, vacuum=vacuum, grace=grace)

    def verify(self, session_id: str | None = None) -> VerifyReport:
        """Check every session's (or one session's) integrity; see ``maintenance.verify``."""
        if session_id is not None:
            return self.session(session_id).verify()
        return maintenance.verify(self.storage)

    def stats(self) -> dict[str, Any]:
        """Counts, sizes, tables and per-model token usage of the whole store."""
        return self.storage.upkeep.stats()

    def backup(self, destination: str | Path) -> int:
        """Write a consistent, compacted copy (VACUUM INTO) to a new file; return its size."""
        upkeep = self.storage.upkeep
        if upkeep.backup is None:  # the backend has none of its own (PostgreSQL: pg_dump)
            raise SessionTreeError(upkeep.no_backup.format(url=self.storage.url, destination=destination))
        return upkeep.backup(str(destination))


def session_of(store: Store, ref: Ref, session: Session | str | None) -> Session:
    """The session a ref belongs to: ``session`` if given, else the node's own."""
    if isinstance(session, Session):
        return session
    if session is not None:
        return store.session(session)
    if isinstance(ref, Node):
        return store.session(ref.session_id)
    try:
        return store.session(store.node(ref).session_id)
    except SessionTreeError:
        raise Conflict(f"{ref!r} is not a node id; say which session it is in (session=...)") from None
