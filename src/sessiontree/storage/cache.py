"""An in-process cache of root-to-node paths, safe because nodes never change.

Contract:
- ``PathCache(max_bytes)`` maps a node id to its path (a tuple of ``Node``s,
  root first), least recently used first out once the payload bytes it holds
  pass ``max_bytes``. A path that is a prefix of another shares its ``Node``
  objects (and their decoded payloads); the bytes are counted per path, so the
  real memory held is at most the bound.
- Only nodes and paths are cached, never pointers: a branch head is always
  read fresh from the database, so another process's append or move is seen
  at once. A node id is never given to another node, so a cached path can go
  stale only if its nodes are deleted; ``clear`` runs after every prune and
  session delete of this store, and a path through a deleted node is never
  asked for by a fresh head (prune keeps every ancestor of a ref).
- ``heads(session_id)`` lists the cached path ends of a session (newest
  first), so the backend can read only the nodes between a new head and the
  nearest cached ancestor.
- Thread-safe: one lock around every change.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from ..model import Node

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
MAX_HEADS = 32
"""How many cached path ends of one session a read looks for as its stopping point."""


class PathCache:
    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._paths: OrderedDict[str, tuple[tuple[Node, ...], int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, node_id: str) -> tuple[Node, ...] | None:
        with self._lock:
            entry = self._paths.get(node_id)
            if entry is None:
                return None
            self._paths.move_to_end(node_id)
            return entry[0]

    def put(self, path: tuple[Node, ...], known: int = 0, known_bytes: int = 0) -> None:
        """Remember ``path`` (its end is the key). When its first ``known`` nodes are a cached
        path of ``known_bytes`` payload bytes, only the nodes after them are measured."""
        if not path or self.max_bytes <= 0:
            return
        size = known_bytes + sum(len(n.payload_json) for n in path[known:])
        if size > self.max_bytes:
            return
        with self._lock:
            old = self._paths.pop(path[-1].id, None)
            if old is not None:
                self.bytes -= old[1]
            self._paths[path[-1].id] = (path, size)
            self.bytes += size
            while self.bytes > self.max_bytes:
                _, (_, evicted) = self._paths.popitem(last=False)
                self.bytes -= evicted

    def size_of(self, node_id: str) -> int:
        with self._lock:
            entry = self._paths.get(node_id)
            return 0 if entry is None else entry[1]

    def heads(self, session_id: str) -> list[str]:
        """Ids of the cached path ends in a session, most recently used first."""
        with self._lock:
            found = []
            for node_id, (path, _) in reversed(self._paths.items()):
                if path[-1].session_id == session_id:
                    found.append(node_id)
                    if len(found) == MAX_HEADS:
                        break
            return found

    def clear(self) -> None:
        with self._lock:
            self._paths.clear()
            self.bytes = 0
