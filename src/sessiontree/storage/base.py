"""The storage interface every backend implements, assembled from its parts.

Contract: a ``Storage`` is one database, as its parts, each an interface of its own:

- the **tree** (``tree.Tree``: sessions, nodes, refs, runs, pauses, tool leases
  and the path walks) and the **trash** (``trash.Trash``: trash, retention policy,
  redactions), which the backend class implements itself: callers reach them as
  ``storage.node(...)``, ``storage.trashed()``;
- ``storage.search`` (``search.Search``) and ``storage.upkeep`` (``upkeep.Upkeep``),
  each one class per backend in a file of its own holding the backend as its
  connection helper (``hosts``); an operation a backend cannot do is None there;
- ``storage.paths`` (``paths.CachedPaths``): root-to-node paths through the path
  cache, the way the session layer reads them; a backend supplies the walks.

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
from .rows import Unreachable
from .search import Search
from .trash import Trash
from .tree import NodeRow, Tree
from .upkeep import Upkeep

__all__ = ["RUN_FIELDS", "SESSION_GONE", "NodeRow", "Storage", "decode_run"]

SESSION_GONE = "the session no longer exists (another writer deleted it); nothing was written"
"""``NotFound`` for a write into a session deleted after the writer looked it up (both backends)."""

RUN_FIELDS = ("model", "provider", "params", "usage", "latency_ms", "finish_reason", "created_at")


class Storage(Tree, Trash):
    """One database: its tree and trash, and its parts. See the module docstring."""

    cache: PathCache
    readonly: bool
    url: str
    """What the store was opened with: a file path, ``:memory:`` or a postgresql:// URL
    (its password hidden)."""

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

    @property
    @abstractmethod
    def schema_version(self) -> int: ...

    def unreachable(self, session_key: int | None, *, delete: bool, cutoff: str = "") -> Unreachable:
        """``upkeep.unreachable``, under the name it had before the parts (for one release)."""
        return self.upkeep.unreachable(session_key, delete=delete, cutoff=cutoff)


def decode_run(row: Sequence[Any]) -> Run:
    """A Run from (id, session id, *RUN_FIELDS) with params and usage as JSON text."""
    return Run(row[0], row[1], row[2], row[3], json.loads(row[4]), json.loads(row[5]), *row[6:])
