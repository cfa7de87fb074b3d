"""What a storage part needs of the backend that holds it: one protocol per backend.

Contract: a part (``trash.Trash``, ``search.Search``, ``upkeep.Upkeep``) is a class of its
own that holds its backend (``SQLiteStorage`` or ``PostgresStorage``) as its
connection helper and reaches it only through the members listed here, all
public; mypy checks that each backend has them when it builds its parts. No part
re-declares a helper as a stub. ``Part[SQLiteHost]`` (or ``Part[PostgresHost]``) is
the holding, written once: ``self.storage``, typed as the protocol the part uses.
"""

from __future__ import annotations

import sqlite3
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from ..model import Node
from .cache import PathCache

if TYPE_CHECKING:
    import sqlite_utils

    from .postgres_db import Target


class Host(Protocol):
    """What every part may use, on either backend."""

    cache: PathCache
    readonly: bool
    url: str

    def transaction(self) -> AbstractContextManager[Any]: ...

    def snapshot(self) -> AbstractContextManager[None]: ...

    @property
    def schema_version(self) -> int: ...

    def pending(self, session_key: int | None = None) -> list[Node]: ...


class SQLiteHost(Host, Protocol):
    """A ``SQLiteStorage``: this thread's connection and the file it is on."""

    path: str

    @property
    def conn(self) -> sqlite3.Connection: ...

    @property
    def db(self) -> sqlite_utils.Database: ...

    def check_writable(self) -> None: ...


class PostgresHost(Host, Protocol):
    """A ``PostgresStorage``: statements on this thread's transaction (or a pooled
    connection of their own), and the session locks of ``claim``."""

    target: Target
    lock_class: int

    def fetch_all(self, query: Any, params: Any = None) -> list[tuple[Any, ...]]: ...

    def fetch_value(self, query: Any, params: Any = None) -> Any: ...

    def write(self, query: Any, params: Any = None) -> int: ...

    def claim(self, session_key: int) -> None: ...


H = TypeVar("H", bound=Host)


class Part(Generic[H]):
    """A part of a storage, holding the backend it is part of as its connection helper."""

    def __init__(self, storage: H) -> None:
        self.storage = storage


__all__ = ["Host", "Part", "PostgresHost", "SQLiteHost"]
