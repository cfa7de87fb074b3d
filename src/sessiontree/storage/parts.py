"""The storage parts a backend is assembled from, each an interface of its own.

Contract: a backend (``base.Storage``) is its tree (sessions, nodes, refs, runs,
the walks ``paths`` reads) and the trash, which callers reach as methods of the
backend itself, plus two parts it holds as attributes, each one class per
backend in a file of its own that holds the backend as its connection helper
(``hosts``):

- ``storage.search``, a ``Search``: full-text queries and the index behind them
  (``sqlite_search.SQLiteSearch``, ``postgres_find.PostgresSearch``);
- ``storage.upkeep``, an ``Upkeep``: prune, verify, stats, vacuum, backup and
  read-only SQL (``sqlite_upkeep.SQLiteUpkeep``, ``postgres_upkeep.PostgresUpkeep``).

An operation a backend cannot do is absent, not a method that raises:
``upkeep.backup`` and ``upkeep.sql`` are None where the backend has none
(PostgreSQL: pg_dump and psql do those), and the caller says so. Public ids and
model objects or named rows (``rows``) in and out, as everywhere in ``storage``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..model import Problem, SearchIndex, SearchQuery
from .rows import BranchTip, Counts, RefsOnPath, SearchMatch, Unreachable

Progress = Callable[[int, int], None]
"""Called with (nodes done, nodes in all) as a long indexing goes."""


class Search(ABC):
    """Full-text search and its index."""

    @abstractmethod
    def find(self, query: SearchQuery) -> list[SearchMatch]:
        """The best ``query.limit`` full-text matches (``newest``: the newest instead)
        outside the trash; ``tools=False`` leaves tool calls and results out;
        ``InvalidQuery`` for a query the backend cannot parse, ``SearchIndexOff`` when
        the index is off. ``search.check`` has checked ``query`` already."""

    @abstractmethod
    def refs_containing(self, node_ids: Sequence[str]) -> dict[str, RefsOnPath]:
        """node id -> the branches and checkpoints of its session whose path contains it."""

    @abstractmethod
    def index(self) -> SearchIndex:
        """Whether the full-text index is on, what it holds, what is pending, its size."""

    @abstractmethod
    def set_index(self, enabled: bool, *, rebuild: bool = False, progress: Progress | None = None) -> int:
        """Turn the index on (indexing every node) or off (emptying it); ``rebuild``
        empties it and indexes every node again, reporting ``progress(done, total)``. How
        many nodes it holds after (one transaction)."""

    @abstractmethod
    def check_index(self) -> str | None:
        """None when the index holds exactly the text of the nodes it covers, else what
        is wrong (``rebuild`` repairs it)."""


Backup = Callable[[str], int]
"""Write a consistent, compacted copy of the store to a new file; its size in bytes."""
ReadOnlySQL = Callable[[str, dict[str, Any]], tuple[list[str], Iterator[tuple[Any, ...]]]]
"""(column names, rows) of one statement that only reads, with its parameters."""


class Upkeep(ABC):
    """Housekeeping: what ``maintenance``, ``stats`` and ``backup`` ask of a store."""

    backup: Backup | None = None
    """None where the backend has no backup of its own (``no_backup`` says what to use)."""
    no_backup: str = ""
    """Why there is no ``backup``, and what to do instead: ``{url}`` and ``{destination}``
    are filled in by the caller."""
    sql: ReadOnlySQL | None = None
    """None where the backend runs no SQL of the user's (``no_sql`` says what to use)."""
    no_sql: str = ""

    @abstractmethod
    def unreachable(self, session_key: int | None, *, delete: bool, cutoff: str = "") -> Unreachable:
        """The nodes and runs nothing keeps (see ``maintenance.prune``), in one session or
        in all; nodes created after ``cutoff`` (an ISO time) are kept. With ``delete``,
        remove them (in one transaction)."""

    @abstractmethod
    def vacuum(self) -> int | None:
        """Give free space back; the bytes freed, when known."""

    @abstractmethod
    def integrity_problems(self, session_key: int | None) -> list[Problem]:
        """A problem for every row that breaks a tree invariant."""

    @abstractmethod
    def branch_heads(self, session_key: int | None) -> list[BranchTip]:
        """Every non-empty branch whose head exists."""

    @abstractmethod
    def counts(self, session_key: int | None) -> Counts:
        """Sessions and nodes, in one session or in all."""

    @abstractmethod
    def stats(self) -> dict[str, Any]:
        """Counts, sizes, tables and per-model token usage of the whole store."""
