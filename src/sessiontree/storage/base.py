"""The storage interface every backend implements, assembled from its parts.

Contract: a ``Storage`` is one database, as its parts, each an interface of its own:

- the **tree** (``tree.Tree``: sessions, nodes, refs, runs, pauses, tool leases
  and the path walks), which the backend class is itself: callers reach it as
  ``storage.node(...)``;
- ``storage.trash`` (``trash.Trash``: trash, retention policy, redactions),
  ``storage.search`` (``search.Search``) and ``storage.upkeep`` (``upkeep.Upkeep``),
  each one class per backend in a file of its own holding the backend as its
  connection helper (``hosts``); an operation a backend cannot do is None there;
- ``storage.paths`` (``paths.CachedPaths``): root-to-node paths through the path
  cache, the way the session layer reads them; a backend supplies the walks.

Why the tree is not a part of its own: it is what the backend's transaction
state is for. On PostgreSQL the first read or write of a session's refs or
nodes inside a write takes that session's lock (``claim``) and ``insert_nodes``
notes the last node for ``OutcomeUnknown``; on SQLite ``insert_nodes`` counts
what the search index has yet to take in, per connection. A tree held apart
would need all of that exposed through ``hosts``, and each of its 90 calls in
8 modules (``Session``, ``Store``, ``bulk``, ``worker``, ...) would gain a hop
for nothing: the parts are what the backend *holds*, the tree is what it *is*.
``lock_sessions`` is the backend's too, with ``transaction()``: the trash,
retention, pins and metadata writes all take it.

The methods that moved to ``storage.trash`` (``trashed``, ``set_trashed``, ...)
and ``unreachable`` (now ``storage.upkeep.unreachable``) are still reachable on
the storage under their old names for one release (``_OnPart``).

A backend (``SQLiteStorage``, ``PostgresStorage``) implements each with its own
SQL and nothing else. Public ids (UUIDv7 text) and model objects or named rows
(``rows``) go in and come out; row keys (``int``) are opaque handles, valid
inside one transaction or read, never kept across calls. The rules (what may be
written, compare-and-set, error wording) live above. Writes happen inside
``transaction()``; several reads that must agree happen inside ``snapshot()``.

Concurrency is each backend's business, with one promise: inside a write
transaction, a read of a branch head (``branch_head``, ``ref``) sees the head
no other transaction can move until this one ends. SQLite gets that from its
single writer; PostgreSQL from a per-session advisory lock taken by the first
such read. A write that decides from a listing of many sessions (emptying the
trash, a retention policy) calls ``lock_sessions`` on what it listed, then
lists again: only what the second listing still holds may be acted on.
"""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from ..model import Run
from .cache import PathCache
from .paths import CachedPaths
from .search import Search
from .trash import Trash
from .tree import NodeRow, Tree
from .upkeep import Upkeep

__all__ = ["RUN_FIELDS", "SESSION_GONE", "NodeRow", "Storage", "decode_run"]

SESSION_GONE = "the session no longer exists (another writer deleted it); nothing was written"
"""``NotFound`` for a write into a session deleted after the writer looked it up (both backends)."""

RUN_FIELDS = ("model", "provider", "params", "usage", "latency_ms", "finish_reason", "created_at")


class _OnPart:
    """A method of a part under the name it had on the storage before the parts (for one
    release): ``storage.trashed()`` is ``storage.trash.trashed()``. New code calls the part."""

    def __init__(self, part: str) -> None:
        self.part = part
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, storage: object, owner: type | None = None) -> Any:
        if storage is None:
            return self
        return getattr(getattr(storage, self.part), self.name)


class Storage(Tree):
    """One database: its tree, and its parts. See the module docstring."""

    cache: PathCache
    readonly: bool
    url: str
    """What the store was opened with: a file path, ``:memory:`` or a postgresql:// URL
    (its password hidden)."""

    trash: Trash
    """The trash, the saved retention policy and redactions (``trash.Trash``)."""
    search: Search
    """Full-text search and its index (``search.Search``)."""
    upkeep: Upkeep
    """Prune, verify, stats, vacuum, backup (``upkeep.Upkeep``)."""
    paths: CachedPaths
    """Root-to-node paths, through ``cache``: what the session layer reads paths with."""

    # -- lifecycle and transactions ------------------------------------------

    @abstractmethod
    def close(self) -> None: ...

    @abstractmethod
    def transaction(self) -> AbstractContextManager[Any]:
        """One atomic write; nested use joins it (a savepoint)."""

    @abstractmethod
    def snapshot(self) -> AbstractContextManager[None]:
        """Several reads from one consistent state."""

    @abstractmethod
    def lock_sessions(self, session_ids: Sequence[str]) -> dict[str, int]:
        """Inside a write transaction: no other transaction writes these sessions until this
        one ends, and what is read about them from now on is what it wrote last (SQLite: so
        already, its write transaction is the only one). The keys of those of them that
        exist; read again whatever the caller decided from before this call."""

    @property
    @abstractmethod
    def schema_version(self) -> int: ...

    # -- the old names of what moved to a part (for one release) ---------------

    set_trashed = _OnPart("trash")
    trashed = _OnPart("trash")
    droppable_sessions = _OnPart("trash")
    strippable_results = _OnPart("trash")
    redact = _OnPart("trash")
    record_redaction = _OnPart("trash")
    retention_policy = _OnPart("trash")
    set_retention_policy = _OnPart("trash")
    redactions = _OnPart("trash")
    unreachable = _OnPart("upkeep")


def decode_run(row: Sequence[Any]) -> Run:
    """A Run from (id, session id, *RUN_FIELDS) with params and usage as JSON text."""
    return Run(row[0], row[1], row[2], row[3], json.loads(row[4]), json.loads(row[5]), *row[6:])
