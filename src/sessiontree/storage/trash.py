"""The trash part of the storage interface: the trash, retention and redactions.

Contract: ``Trash`` marks sessions trashed or restores them, lists the trash,
finds what a retention policy would touch and records redactions, the only
change the schema lets a node undergo. A backend class holds its own trash
(``sqlite_retention.SQLiteRetention``, ``postgres_trash.PostgresTrash``, each
taking the backend as a typed ``self``): callers reach these as
``storage.trashed()``. Which sessions and nodes qualify, and the wording of
markers, are decided in ``retention``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from ..model import TrashEntry
from .rows import DroppableSession, StrippableResult


class Trash(ABC):
    """Trash, retention policy and redactions of one database."""

    @abstractmethod
    def lock_sessions(self, session_ids: Sequence[str]) -> dict[str, int]:
        """Inside a write transaction: no other transaction writes these sessions until this
        one ends, and what is read about them from now on is what it wrote last (SQLite: so
        already, its write transaction is the only one). The keys of those of them that
        exist; read again whatever the caller decided from before this call."""

    @abstractmethod
    def set_trashed(self, session_key: int, when: str | None) -> None:
        """Put a session in the trash at ``when`` (keeping an earlier time), or take it out."""

    @abstractmethod
    def trashed(self, before: str | None = None) -> list[TrashEntry]:
        """The sessions in the trash (before ``before``), oldest first."""

    @abstractmethod
    def droppable_sessions(self, cutoff: str) -> list[DroppableSession]:
        """The sessions a drop policy looks at:
        not trashed, no checkpoint, nothing written since ``cutoff``. Work is in flight when a
        branch stands at a pause, a decision or a ``tool_start``; the policy leaves those."""

    @abstractmethod
    def strippable_results(self, cutoff: str, min_bytes: int) -> list[StrippableResult]:
        """The unredacted tool results of at least ``min_bytes``
        written before ``cutoff``, outside the trash."""

    @abstractmethod
    def redact(self, node_id: str, field: str, marker: str, reason: str, when: str) -> int:
        """Replace a payload field by ``marker``, recorded in ``redactions``; bytes removed."""

    @abstractmethod
    def record_redaction(
        self, node_id: str, field: str, size: int, marker: str, reason: str, when: str
    ) -> None:
        """Record that a node written with ``marker`` in its field (a copy of a stripped
        node) had ``size`` bytes there removed; the payload is left as it is."""

    @abstractmethod
    def retention_policy(self) -> dict[str, float]: ...

    @abstractmethod
    def set_retention_policy(self, policy: dict[str, float]) -> None: ...

    @abstractmethod
    def redactions(self, session_key: int | None = None) -> list[dict[str, Any]]:
        """Every recorded redaction (of one session), oldest first."""
