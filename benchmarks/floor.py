"""The minimal floor schema the benchmarks compare sessiontree against.

What a competent engineer would write for "messages as a tree with a named head" and
nothing else: ``nodes(id INTEGER PRIMARY KEY, parent_id INTEGER, payload TEXT)`` with one
index (on ``parent_id``, which any tree needs to find children), and
``heads(name TEXT PRIMARY KEY, node_id INTEGER)``, WAL and ``synchronous=NORMAL``. An
append is ``BEGIN IMMEDIATE``, ``max(id)``, one ``executemany`` insert of the chain (ids
counted up from there), a head upsert, ``COMMIT``; the head lives in memory, so there is no
compare-and-set, no validation, no ids beyond SQLite's rowid and no timestamps. A read is
one recursive CTE from the head to the root and ``json.loads`` of each payload. A fork is
one ``heads`` row.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS nodes (id INTEGER PRIMARY KEY, parent_id INTEGER, payload TEXT);
CREATE INDEX IF NOT EXISTS nodes_parent ON nodes(parent_id);
CREATE TABLE IF NOT EXISTS heads (name TEXT PRIMARY KEY, node_id INTEGER);
"""
PATH = """
WITH RECURSIVE path(id, parent_id, payload, depth) AS (
    SELECT id, parent_id, payload, 0 FROM nodes WHERE id = (SELECT node_id FROM heads WHERE name = ?)
    UNION ALL
    SELECT n.id, n.parent_id, n.payload, p.depth + 1 FROM nodes n JOIN path p ON n.id = p.parent_id
)
SELECT payload FROM path ORDER BY depth DESC
"""
INSERT = "INSERT INTO nodes (id, parent_id, payload) VALUES (?, ?, ?)"
UPSERT_HEAD = """
INSERT INTO heads (name, node_id) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET node_id = excluded.node_id
"""


class Floor:
    """One conversation tree in the minimal schema, on its own file."""

    def __init__(self, path: str | Path, branch: str = "main", page_size: int | None = None) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        if page_size is not None:  # SQLite's default is 4 KB; a new file can choose
            self.conn.execute(f"PRAGMA page_size = {page_size:d}")
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = NORMAL")
        self.conn.executescript(SCHEMA)
        self.branch = branch
        row = self.conn.execute("SELECT node_id FROM heads WHERE name = ?", (branch,)).fetchone()
        self.head: int | None = row[0] if row else None

    def append_many(self, payloads: list[dict[str, Any]]) -> int:
        """Append a chain of messages and move the head, in one transaction; return the new head."""
        texts = [json.dumps(p, separators=(",", ":")) for p in payloads]
        execute = self.conn.execute
        execute("BEGIN IMMEDIATE")  # the write lock makes max(id) + 1 ours
        first = execute("SELECT coalesce(max(id), 0) + 1 FROM nodes").fetchone()[0]
        ids = list(range(first, first + len(texts)))
        self.conn.executemany(INSERT, zip(ids, [self.head, *ids[:-1]], texts, strict=True))
        execute(UPSERT_HEAD, (self.branch, ids[-1]))
        execute("COMMIT")
        self.head = ids[-1]
        return ids[-1]

    def append(self, payload: dict[str, Any]) -> int:
        return self.append_many([payload])

    def messages(self, branch: str | None = None) -> list[dict[str, Any]]:
        """The decoded payloads from the root to the branch head."""
        rows = self.conn.execute(PATH, (branch or self.branch,)).fetchall()
        return [json.loads(text) for (text,) in rows]

    def fork(self, name: str, at: int) -> None:
        self.conn.execute("INSERT INTO heads (name, node_id) VALUES (?, ?)", (name, at))

    def close(self) -> None:
        self.conn.close()
