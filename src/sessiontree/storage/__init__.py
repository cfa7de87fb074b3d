"""Storage backends: the only place sessiontree speaks SQL.

Contract: a backend takes and returns public ids and model objects; it holds
no rules of its own beyond what the schema enforces. ``Session`` and
``Store`` decide what may be written and call the backend to do it. Today
there is one backend, ``sqlite.SQLiteStorage``.
"""

from .sqlite import MIN_PREFIX, SQLiteStorage

__all__ = ["MIN_PREFIX", "SQLiteStorage"]
