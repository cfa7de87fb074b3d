"""Storage backends: the only place sessiontree speaks SQL.

Contract: a backend takes and returns public ids and model objects; it holds
no rules of its own beyond what the schema enforces. ``Session`` and
``Store`` decide what may be written and call the backend to do it. Today
there is one backend, ``sqlite.SQLiteStorage`` (its upkeep queries in
``sqlite_upkeep``), and ``cache.PathCache`` that any backend can use.
"""

from .sqlite import SQLiteStorage

__all__ = ["SQLiteStorage"]
