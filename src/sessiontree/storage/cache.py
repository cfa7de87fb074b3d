"""An in-process cache of root-to-node paths, safe because nodes never change.

Contract:
- ``PathCache(max_bytes)`` maps a node id to its path (a tuple of ``Node``s,
  root first), least recently used first out once the payload bytes it holds
  pass ``max_bytes``. Paths that share a prefix share its ``Node`` objects (and
  their decoded payloads); bytes are counted per path, so the real memory held
  is at most the bound.
- ``extend(parent_id, nodes)`` records nodes just appended under a cached path
  in O(len(nodes)): the longer path is only built when it is read, so an
  append costs the same at any depth.
- Only nodes and paths are cached, never pointers: a branch head is always
  read fresh from the database, so another process's append or move is seen
  at once. A node id is never given to another node, so a cached path can go
  stale only if its nodes are deleted; ``clear`` runs after every prune and
  session delete of this store, and a fresh head never leads to a deleted
  node (prune keeps every ancestor of a ref).
- ``heads(session_id)`` lists the cached path ends of a session (newest
  first), so the backend can read only the nodes between a new head and the
  nearest cached ancestor.
- Thread-safe: one lock around every read and change.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from ..compaction import project
from ..model import Node

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
MAX_HEADS = 32
"""How many cached path ends of one session a read looks for as its stopping point."""


@dataclass
class _Entry:
    session_id: str
    size: int  # payload bytes of the whole path
    path: tuple[Node, ...] | None  # None until an extension is first read
    base: str | None = None  # an extension: the cached path it continues...
    more: tuple[Node, ...] = ()  # ...and the nodes after it
    messages: tuple[dict[str, Any], ...] | None = None  # the path's message payloads, once asked for


class PathCache:
    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, node_id: str) -> tuple[Node, ...] | None:
        with self._lock:
            entry = self._get(node_id)
            return None if entry is None else entry.path

    def messages(self, node_id: str) -> tuple[dict[str, Any], ...] | None:
        """The projection of a cached path (``compaction.project``: its message payloads,
        summaries standing in for the spans they cover), shared: read-only."""
        with self._lock:
            entry = self._get(node_id)
            if entry is None:
                return None
            if entry.messages is None:
                entry.messages = tuple(project(entry.path or ()))
            return entry.messages

    def _get(self, node_id: str) -> _Entry | None:
        entry = self._entries.get(node_id)
        if entry is None:
            return None
        self._entries.move_to_end(node_id)
        if entry.path is None:  # build it from the chain of extensions down to a built path
            mores = [entry.more]
            below = self._entries.get(entry.base or "")
            while below is not None and below.path is None:
                mores.append(below.more)
                below = self._entries.get(below.base or "")
            if below is None:  # where it starts was evicted: this path cannot be built
                self._drop(node_id)
                return None
            added = tuple(n for more in reversed(mores) for n in more)
            entry.path = (below.path or ()) + added
            # Extend the projection too, O(new nodes), unless a new summary re-shapes it.
            if below.messages is not None and not any(n.kind == "summary" for n in added):
                entry.messages = below.messages + tuple(n.payload for n in added if n.kind == "message")
            entry.base, entry.more = None, ()
        return entry

    def put(self, path: tuple[Node, ...], known: int = 0) -> None:
        """Remember ``path`` (its end is the key). When its first ``known`` nodes are a cached
        path, only the nodes after them are measured."""
        if not path:
            return
        with self._lock:
            below = self._entries.get(path[known - 1].id) if known else None
        known_bytes = below.size if below is not None else sum(len(n.payload_json) for n in path[:known])
        size = known_bytes + sum(len(n.payload_json) for n in path[known:])
        self._add(path[-1].id, _Entry(path[-1].session_id, size, path))

    def extend(self, parent_id: str, nodes: tuple[Node, ...]) -> None:
        """``nodes`` (a chain) were appended under ``parent_id``; cache the longer path if the
        parent's is cached."""
        with self._lock:
            parent = self._entries.get(parent_id)
            if parent is None or not nodes:
                return
            self._entries.move_to_end(parent_id)  # the new path needs it
            size = parent.size + sum(len(n.payload_json) for n in nodes)
        self._add(nodes[-1].id, _Entry(parent.session_id, size, None, parent_id, nodes))

    def _add(self, node_id: str, entry: _Entry) -> None:
        if entry.size > self.max_bytes:
            return
        with self._lock:
            self._drop(node_id)
            self._entries[node_id] = entry
            self.bytes += entry.size
            while self.bytes > self.max_bytes:
                _, evicted = self._entries.popitem(last=False)
                self.bytes -= evicted.size

    def _drop(self, node_id: str) -> None:
        old = self._entries.pop(node_id, None)
        if old is not None:
            self.bytes -= old.size

    def heads(self, session_id: str) -> list[str]:
        """Ids of the cached path ends in a session, most recently used first."""
        with self._lock:
            found = []
            for node_id, entry in reversed(self._entries.items()):
                if entry.session_id == session_id:
                    found.append(node_id)
                    if len(found) == MAX_HEADS:
                        break
            return found

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.bytes = 0
