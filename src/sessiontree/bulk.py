"""Bulk reads and writes of whole session trees: the store side of import, export and copy.

Contract:
- The records (``ImportedSession`` with ``ImportedNode``, ``ImportedRef``,
  ``ImportedRun``, ``ImportedRedaction``) live in ``sessiontree.records`` and are
  importable from here.
- ``write_sessions(store, sessions)`` writes any number of them in ONE write
  transaction, all of it or none of it; ``write_each`` does the same for sessions
  taken one at a time from an iterator (one conversation in memory at once). Both
  are feeds (``feed``) into the one tree writer, ``bulk_stream.StreamWriter``,
  whose docstring states the rules: nodes in any order, depths from parents,
  merge by id, conflicts, recorded strips, refs last, and the messages.
- ``feed_stored(storage, id, sink)`` reports one stored session to a sink from
  one consistent snapshot, its nodes read as they are sent (memory does not grow
  with the session): ``copy`` feeds the writer of another store with it.
  ``read_session(store, id)`` collects the same records into an ``ImportedSession``.
- ``store`` arguments may be a ``Store`` or its ``Storage``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from .bulk_stream import Collector, Sink, storage_of, write_stream
from .errors import ImportConflict, InvalidTree
from .records import (
    BRANCH_FIELDS,
    CHECKPOINT_FIELDS,
    NODE_FIELDS,
    RUN_FIELDS,
    ImportedNode,
    ImportedRedaction,
    ImportedRef,
    ImportedRun,
    ImportedSession,
    Progress,
    branch_from,
    checkpoint_from,
    fields,
    node_from,
    run_from,
    where,
)

if TYPE_CHECKING:
    from .storage import Storage
    from .store import Store

__all__ = [
    "ImportConflict",
    "ImportedNode",
    "ImportedRedaction",
    "ImportedRef",
    "ImportedRun",
    "ImportedSession",
    "InvalidTree",
    "Progress",
    "feed",
    "feed_stored",
    "read_session",
    "session_ids",
    "where",
    "write_each",
    "write_sessions",
]


# -- writing: feeds into the tree writer -------------------------------------------


def feed(sessions: Iterable[ImportedSession], sink: Sink, *, clear: bool = False) -> None:
    """Report whole sessions to ``sink``, each ended before the next is taken; with
    ``clear`` each one's nodes are dropped once reported (the parser's frame may
    still hold the session until the next)."""
    for s in sessions:
        sink.session(s)
        for run in s.runs:
            sink.run(s.id, run)
        for r in s.redactions:
            sink.redaction(s.id, r)
        for node in s.nodes:
            sink.node(s.id, node)
        for ref in s.branches:
            sink.branch(s.id, ref)
        for ref in s.checkpoints:
            sink.checkpoint(s.id, ref)
        sink.end(s.id)
        if clear:
            s.nodes.clear()


def write_sessions(
    store: Store | Storage,
    sessions: Sequence[ImportedSession],
    progress: Progress | None = None,
    *,
    consume: bool = False,
) -> list[str]:
    """Write (or merge) every session in one transaction; return their ids in order.

    With ``consume`` the nodes' payload dicts are dropped as soon as they are
    encoded, so a big import never holds a payload twice (as a dict and as text);
    the caller must not read them afterwards.
    """
    total = sum(len(s.nodes) for s in sessions)
    return write_stream(store, lambda sink: feed(sessions, sink), progress, total=total, consume=consume)


def write_each(
    store: Store | Storage, sessions: Iterable[ImportedSession], progress: Progress | None = None
) -> list[str]:
    """``write_sessions`` for sessions made as they are asked for (a parser reading a
    file one conversation at a time): each is written before the next is taken, all
    in ONE transaction, so memory holds one session, not the file. A session is
    checked only when its turn comes (an error rolls back the ones before it). The
    total is not known until the end: ``progress(done, 0)`` until then, as a
    streamed import. The sessions are consumed: each one's nodes are cleared once written."""
    return write_stream(store, lambda sink: feed(sessions, sink, clear=True), progress)


# -- reading: a feed from a store --------------------------------------------------


def feed_stored(storage: Storage, session_id: str, sink: Sink) -> None:
    """Report one stored session to ``sink`` from one consistent snapshot: header,
    runs, redactions, nodes (parents first, read as they are sent), branches,
    checkpoints, end."""
    with storage.snapshot():
        row = storage.session_row(session_id)
        key, id = row.key, row.id
        sink.session(
            ImportedSession(id, row.title, row.metadata, row.created_at, archived_at=row.archived_at)
        )
        for run in storage.runs_stream(key):
            sink.run(id, run_from(fields(run, RUN_FIELDS)))
        for r in storage.trash.redactions(key):
            values = (r["node"], r["field"], r["bytes"], r["marker"], r["reason"], r["created_at"])
            sink.redaction(id, ImportedRedaction(*values))
        for node in storage.tree_stream(key):
            sink.node(id, node_from(fields(node, NODE_FIELDS)))
        for b in storage.branches(key, id):
            sink.branch(id, branch_from(fields(b, BRANCH_FIELDS)))
        for c in storage.checkpoints(key, id):
            sink.checkpoint(id, checkpoint_from(fields(c, CHECKPOINT_FIELDS)))
        sink.end(id)


def read_session(store: Store | Storage, session_id: str) -> ImportedSession:
    """One session, whole, as a consistent snapshot (``feed_stored`` collected)."""
    sink = Collector()
    feed_stored(storage_of(store), session_id, sink)
    (s,) = sink.sessions
    return s


def session_ids(store: Store | Storage) -> list[str]:
    """Every session id, archived ones too, oldest first."""
    return storage_of(store).session_ids()
