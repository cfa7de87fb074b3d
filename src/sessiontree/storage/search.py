"""The search part of the storage interface: full-text search and its index.

Contract: ``storage.search`` is a ``Search``, one class per backend in a file of
its own (``sqlite_search.SQLiteSearch``, ``postgres_find.PostgresSearch``) that
holds the backend as its connection helper (``hosts``). It gets a
``SearchQuery`` that ``sessiontree.search`` has checked, unchanged, and returns
named rows (``SearchMatch``, ``RefsOnPath``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

from ..model import SearchIndex, SearchQuery
from .rows import RefsOnPath, SearchMatch

Progress = Callable[[int, int], None]
"""Called with (nodes done, nodes in all) as a long indexing goes."""


class Search(ABC):
    """Full-text search and its index."""

    @abstractmethod
    def find(self, query: SearchQuery) -> list[SearchMatch]:
        """The best ``query.limit`` full-text matches (``newest``: the newest instead)
        outside the trash; ``tools=False`` leaves tool calls and results out;
        ``InvalidQuery`` for a query the backend cannot parse, ``SearchIndexOff`` when
        the index is off. ``search.check`` has checked ``query`` already."""

    @abstractmethod
    def refs_containing(self, node_ids: Sequence[str]) -> dict[str, RefsOnPath]:
        """node id -> the branches and checkpoints of its session whose path contains it."""

    @abstractmethod
    def index(self) -> SearchIndex:
        """Whether the full-text index is on, what it holds, what is pending, its size."""

    @abstractmethod
    def set_index(self, enabled: bool, *, rebuild: bool = False, progress: Progress | None = None) -> int:
        """Turn the index on (indexing every node) or off (emptying it); ``rebuild``
        empties it and indexes every node again, reporting ``progress(done, total)``. How
        many nodes it holds after (one transaction)."""

    @abstractmethod
    def check_index(self) -> str | None:
        """None when the index holds exactly the text of the nodes it covers, else what
        is wrong (``rebuild`` repairs it)."""
