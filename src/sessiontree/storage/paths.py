"""Root-to-node paths read through the path cache: the one way the session layer reads them.

Contract: ``CachedPaths(storage)`` answers ``path_to`` and ``messages`` (and, where
the backend has the one statement, ``path_at_ref`` and ``messages_at_ref``) from
the backend's ``cache`` (a ``PathCache``), reading only the nodes below the
nearest cached ancestor, and ``remember`` extends what is cached by nodes just
written. A backend supplies the walks (``Storage._path_rows``, and optionally
``Storage._ref_walk``), ``redaction_count`` and ``redaction_check_every``; this
module holds the policy: a redaction recorded by any process since the last look
clears the cache (it is the one change a node may undergo), and what a read
puts in the cache names the cache generation it read under (``PathCache.agree``),
so a clear during the read voids it. The paths are shared with the cache:
read-only.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Protocol

from ..compaction import project
from ..model import Node
from .cache import PathCache

PathRow = tuple[str, int, str, str, str, "str | None", int]
"""One step of a walk up a path: (id, depth, kind, payload, created_at, run id, is a cached
stop); the flag is any true value (SQLite gives 1, PostgreSQL True)."""
_IS_STOP = 6


class PathSource(Protocol):
    """What the wrapper reads from: a backend (``base.Storage`` declares each of these)."""

    cache: PathCache
    one_statement: bool
    redaction_check_every: float

    def redaction_count(self) -> int: ...

    def _path_rows(self, key: int, stops: list[str]) -> list[PathRow]: ...

    def _ref_walk(
        self, session_key: int, name: str, stops: list[str], redactions: bool
    ) -> tuple[int, str, int | None, list[PathRow]] | None: ...


class CachedPaths:
    """Paths of one backend through its cache; see the module docstring."""

    def __init__(self, storage: PathSource) -> None:
        self.storage = storage
        self.cache = storage.cache  # a backend keeps its cache for its life
        self._next_redaction_check = 0.0

    def _drop_stale_paths(self) -> int:
        """Clear the cache if a redaction was recorded (by any process) since the last
        look; the cache generation what this read puts must name."""
        cache = self.cache
        generation = cache.generation  # before the look: a clear after it voids this read
        now = time.monotonic()
        if now < self._next_redaction_check:
            return generation
        self._next_redaction_check = now + self.storage.redaction_check_every
        return cache.agree(self.storage.redaction_count())

    def path_to(self, key: int, node_id: str, session_id: str) -> tuple[Node, ...]:
        """Root-to-node: from the cache, or reading only the nodes after the nearest
        cached ancestor."""
        return self._cached_path(key, node_id, session_id, self._drop_stale_paths())

    def messages(self, key: int, node_id: str, session_id: str) -> list[dict[str, Any]]:
        """The projection of the path to a node (``compaction.project``), root first (the
        dicts are shared with the cache: read-only). Re-reading a grown path costs O(new
        nodes)."""
        generation = self._drop_stale_paths()
        return self._messages(key, node_id, session_id, generation)

    def path_at_ref(self, session_key: int, session_id: str, name: str) -> tuple[Node, ...] | None:
        """The path to the node a branch or checkpoint named ``name`` points at, in the one
        statement of ``Storage._ref_walk``; None when that gives nothing (no such name, no
        node yet, or no such statement)."""
        found = self._walk_ref(session_key, session_id, name)
        return None if found is None else self._cached_path(*found)

    def messages_at_ref(self, session_key: int, session_id: str, name: str) -> list[dict[str, Any]] | None:
        """``messages`` of the node a branch or checkpoint named ``name`` points at, as
        ``path_at_ref``."""
        found = self._walk_ref(session_key, session_id, name)
        return None if found is None else self._messages(*found)

    def remember(self, parent_id: str | None, nodes: Sequence[Node]) -> None:
        """Nodes just written under ``parent_id``: extend its cached path, if any."""
        if parent_id is None:
            self.cache.put(tuple(nodes))
        else:
            self.cache.extend(parent_id, tuple(nodes))

    def _messages(
        self, key: int, node_id: str, session_id: str, generation: int, rows: list[PathRow] | None = None
    ) -> list[dict[str, Any]]:
        cache = self.cache
        found = cache.messages(node_id)  # a new list
        if found is None:
            path = self._cached_path(key, node_id, session_id, generation, rows)
            found = cache.messages(node_id)
            if found is None:  # not cacheable (too big, or the cache is off)
                return project(path)
        return found

    def _walk_ref(
        self, session_key: int, session_id: str, name: str
    ) -> tuple[int, str, str, int, list[PathRow]] | None:
        """``_cached_path``'s arguments from one ``_ref_walk``, the redaction count looked
        at when due."""
        storage = self.storage
        if not storage.one_statement:
            return None
        # Taken before the statement: a clear after it (by another thread that saw a
        # redaction, or by this look at the count) voids what this read would put.
        generation = self.cache.generation
        now = time.monotonic()
        due = now >= self._next_redaction_check
        found = storage._ref_walk(session_key, name, self.cache.heads(session_id), due)
        if found is None:
            return None
        key, node_id, count, rows = found
        if due:
            self._next_redaction_check = now + storage.redaction_check_every
            self.cache.agree(count or 0)
        return key, node_id, session_id, generation, rows

    def _cached_path(
        self, key: int, node_id: str, session_id: str, generation: int, rows: list[PathRow] | None = None
    ) -> tuple[Node, ...]:
        cache = self.cache
        cached = cache.get(node_id)
        if cached is not None:
            return cached
        if rows is None:
            rows = self.storage._path_rows(key, cache.heads(session_id))
        base: tuple[Node, ...] = ()
        if rows[-1][_IS_STOP]:  # stopped at a cached ancestor
            base = cache.get(rows[-1][0]) or ()
            if not base:  # evicted meanwhile: read the whole path
                rows = self.storage._path_rows(key, [])
            else:
                rows.pop()
        rows.reverse()  # root first; each row's parent is the one before it
        ids = [base[-1].id if base else None, *(r[0] for r in rows)]
        path = (
            *base,
            *[
                Node(r[0], session_id, parent, r[1], r[2], r[3], r[4], r[5])
                for r, parent in zip(rows, ids[:-1], strict=True)
            ],
        )
        cache.put(path, len(base), generation)
        return path
