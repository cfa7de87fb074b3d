"""An in-process cache of root-to-node paths, safe because nodes never change.

Contract:
- ``PathCache(max_bytes)`` maps a node id to its path (``Node``s, root first),
  least recently used first out once the bytes it holds pass ``max_bytes``:
  the payload bytes of the nodes it keeps, plus ``ENTRY_BYTES`` per cached path
  end. ``0`` turns it off; a path larger than the bound is not cached.
- Paths live in *chains*: one list of nodes shared by every cached path that is
  a prefix of it. ``extend(parent_id, nodes)`` records nodes just appended under
  a cached path in O(len(nodes)): at the end of its chain they are appended in
  place; under a node in the middle (a fork) a new chain starts with the same
  ``Node`` objects. Payload bytes are counted once per chain, so the memory held
  is at most the bound.
- ``messages(node_id)`` hands out a new list of the path's projection (the
  dicts are shared: read-only). The projection lives with the chain and grows
  as it does, so re-reading a branch that grew by k nodes decodes k nodes and
  copies one list of pointers, whatever the depth. A path holding a ``summary``
  (a compaction) is projected whole by ``compaction.project`` on each read.
- Only nodes and paths are cached, never pointers: a branch head is always
  read fresh from the database, so another process's append or move is seen
  at once. A node id is never given to another node, so a cached path can go
  stale only if its nodes are deleted or redacted; ``clear`` runs after every
  prune, session delete and redaction of this store, and when the file's
  redaction count moves (``Storage._drop_stale_paths``: another process
  redacted); a fresh head never leads to a deleted node (prune keeps every
  ancestor of a ref).
- Threads share one cache, and may read from different snapshots (a thread that
  began reading before another committed a redaction). ``clear`` moves the cache to a
  new *generation*; ``agree(redaction_count)`` clears it when the count a read
  sees differs from the one it holds, and returns the generation that read must
  ``put`` under: a path read before a clear (by a slower thread) is not cached after it.
- ``heads(session_id)`` lists the cached path ends of a session (newest
  first), so the backend can read only the nodes between a new head and the
  nearest cached ancestor.
- Thread-safe: one lock around every read and change.
"""

from __future__ import annotations

import threading
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from itertools import accumulate, islice
from typing import Any

from ..compaction import project
from ..model import Node

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
MAX_HEADS = 32
"""How many cached path ends of one session a read looks for as its stopping point."""
ENTRY_BYTES = 128
"""What one cached path end is counted as (its key, its entry, its dict slot)."""


class _Chain:
    """Nodes root first; every entry on it is a prefix of them. Only ever appended to."""

    __slots__ = ("session_id", "nodes", "size", "users", "projected", "payloads", "counts", "summary")

    def __init__(self, session_id: str, nodes: list[Node], size: int) -> None:
        self.session_id = session_id
        self.nodes = nodes
        self.size = size  # payload bytes of ``nodes``
        self.users = 0  # entries on this chain; at 0 it is dropped and its bytes given back
        self.projected = 0  # how many of ``nodes`` the message projection covers
        self.payloads: list[dict[str, Any]] = []  # payloads of the message nodes among them
        self.counts = array("q", [0])  # counts[i]: message nodes among nodes[:i]
        self.summary = -1  # where the first summary node is among the projected nodes

    def messages(self, length: int) -> list[dict[str, Any]]:
        """A new list: the projection of ``nodes[:length]``."""
        if length > self.projected:  # decode only what no earlier read covered
            fresh = self.nodes[self.projected : length]
            kinds = [n.kind for n in fresh]
            if self.summary < 0 and "summary" in kinds:
                self.summary = self.projected + kinds.index("summary")
            is_message = [k == "message" for k in kinds]
            self.payloads += [n.payload for n, wanted in zip(fresh, is_message, strict=True) if wanted]
            self.counts.extend(islice(accumulate(is_message, initial=self.counts[-1]), 1, None))
            self.projected = length
        if 0 <= self.summary < length:  # a compaction re-shapes what is sent
            return project(self.nodes[:length])
        return self.payloads[: self.counts[length]]


class _Entry:
    """One cached path: the first ``length`` nodes of ``chain``, ``size`` payload bytes."""

    __slots__ = ("chain", "length", "size")

    def __init__(self, chain: _Chain, length: int, size: int) -> None:
        self.chain, self.length, self.size = chain, length, size


def _size(nodes: Sequence[Node]) -> int:
    return sum(len(n.payload_json) for n in nodes)


class PathCache:
    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self.generation = 0  # moves at every clear
        self._redactions: int | None = None  # the redaction count the entries were read under

    def get(self, node_id: str) -> tuple[Node, ...] | None:
        with self._lock:
            entry = self._get(node_id)
            return None if entry is None else tuple(entry.chain.nodes[: entry.length])

    def messages(self, node_id: str) -> list[dict[str, Any]] | None:
        """A new list: the projection of a cached path (the dicts are shared: read-only)."""
        with self._lock:
            entry = self._get(node_id)
            return None if entry is None else entry.chain.messages(entry.length)

    def _get(self, node_id: str) -> _Entry | None:
        entry = self._entries.get(node_id)
        if entry is not None:
            self._entries.move_to_end(node_id)
        return entry

    def put(self, path: tuple[Node, ...], known: int = 0, generation: int | None = None) -> None:
        """Remember ``path`` (its end is the key), unless the cache was cleared since
        ``generation`` (when given). When its first ``known`` nodes are a cached path, the
        rest extends that one."""
        if not path:
            return
        if 0 < known < len(path):
            added = _size(path[known:])
            with self._lock:
                if generation is not None and generation != self.generation:
                    return  # read before a clear: it may hold what the clear was for
                if self._extend(path[known - 1].id, path[known:], added):
                    return
        size = _size(path)
        if size + ENTRY_BYTES > self.max_bytes:
            return
        with self._lock:
            if generation is not None and generation != self.generation:
                return
            self._add(path[-1].id, _Entry(_Chain(path[-1].session_id, list(path), size), len(path), size))

    def extend(self, parent_id: str, nodes: Sequence[Node]) -> bool:
        """``nodes`` (a chain) were appended under ``parent_id``: cache the longer path if the
        parent's is cached (whether it was)."""
        if not nodes:
            return False
        added = _size(nodes)
        with self._lock:
            return self._extend(parent_id, nodes, added)

    def _extend(self, parent_id: str, nodes: Sequence[Node], added: int) -> bool:
        """``extend``, holding the lock; ``added`` is the payload bytes of ``nodes``."""
        parent = self._get(parent_id)  # the new path needs it: now the most recent
        if parent is None:
            return False
        chain, size = parent.chain, parent.size + added
        if size + ENTRY_BYTES > self.max_bytes:
            return True  # too big to cache, like any path past the bound
        if parent.length == len(chain.nodes):  # the end of its chain: grow it in place
            chain.nodes.extend(nodes)
            chain.size += added
            self.bytes += added
        else:  # a fork off the middle: a new chain, sharing the nodes above it
            chain = _Chain(chain.session_id, chain.nodes[: parent.length] + list(nodes), size)
        self._add(nodes[-1].id, _Entry(chain, parent.length + len(nodes), size))
        return True

    def _add(self, node_id: str, entry: _Entry) -> None:
        """Add an entry (hold the lock), then evict the least recently used past the bound."""
        self._drop(node_id)
        chain = entry.chain
        if chain.users == 0:
            self.bytes += chain.size
        chain.users += 1
        self._entries[node_id] = entry
        self.bytes += ENTRY_BYTES
        while self.bytes > self.max_bytes and self._entries:
            self._drop(next(iter(self._entries)))

    def _drop(self, node_id: str) -> None:
        old = self._entries.pop(node_id, None)
        if old is not None:
            self.bytes -= ENTRY_BYTES
            old.chain.users -= 1
            if old.chain.users == 0:
                self.bytes -= old.chain.size

    def heads(self, session_id: str) -> list[str]:
        """Ids of the cached path ends in a session, most recently used first."""
        with self._lock:
            found = []
            for node_id, entry in reversed(self._entries.items()):
                if entry.chain.session_id == session_id:
                    found.append(node_id)
                    if len(found) == MAX_HEADS:
                        break
            return found

    def clear(self) -> None:
        with self._lock:
            self._clear()

    def _clear(self) -> None:
        self._entries.clear()
        self.bytes = 0
        self.generation += 1

    def agree(self, redactions: int) -> int:
        """A read sees ``redactions`` recorded: clear the cache if its entries were read
        under another count. The generation that read's ``put`` must name."""
        with self._lock:
            if redactions != self._redactions:
                self._clear()
                self._redactions = redactions
            return self.generation
