"""The upkeep part of the storage interface: prune, verify, stats, vacuum, backup, SQL.

Contract: ``storage.upkeep`` is an ``Upkeep``, one class per backend in a file of
its own (``sqlite_upkeep.SQLiteUpkeep``, ``postgres_upkeep.PostgresUpkeep``)
that holds the backend as its connection helper (``hosts``); ``maintenance``
decides, this runs the queries. An operation a backend cannot do is absent, not
a method that raises: ``backup`` and ``sql`` are None where the backend has
none (PostgreSQL: pg_dump and psql do those), and the caller says so with
``no_backup`` / ``no_sql``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import Any

from ..model import Problem
from .rows import BranchTip, Counts, Unreachable

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
