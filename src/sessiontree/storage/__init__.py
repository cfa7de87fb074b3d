"""Storage backends: the only place sessiontree speaks SQL.

Contract: ``base.Storage`` is the interface, assembled from its parts (``tree``,
``trash``, ``search``, ``upkeep``, and ``paths`` for cached path reads; see
``base``), each answering with named rows (``rows``); ``sqlite.SQLiteStorage`` (a
file or ``:memory:``, the default) and ``postgres.PostgresStorage`` (a
``postgresql://`` URL, needing the ``postgres`` extra) implement it, and
``open_storage`` picks one from what the user gave. A backend takes and returns
public ids and model objects and holds no rules of its own beyond what its
schema enforces; ``Session`` and ``Store`` decide what may be written.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import SessionTreeError
from .base import Storage
from .cache import DEFAULT_MAX_BYTES
from .sqlite import SQLiteStorage

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def is_postgres_url(target: str | Path) -> bool:
    return isinstance(target, str) and target.startswith(POSTGRES_SCHEMES)


def open_storage(
    target: str | Path, *, readonly: bool = False, cache_bytes: int = DEFAULT_MAX_BYTES
) -> Storage:
    """A SQLite file (or ``:memory:``), or a PostgreSQL server for a ``postgresql://`` URL."""
    if is_postgres_url(target):
        try:
            from .postgres import PostgresStorage  # psycopg is imported only here
        except ImportError as e:
            raise SessionTreeError(
                f"a postgresql:// store needs the postgres extra ({e}): pip install 'sessiontree[postgres]'"
            ) from None
        return PostgresStorage(str(target), readonly=readonly, cache_bytes=cache_bytes)
    return SQLiteStorage(target, readonly=readonly, cache_bytes=cache_bytes)


__all__ = ["SQLiteStorage", "Storage", "is_postgres_url", "open_storage"]
