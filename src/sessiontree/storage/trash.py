"""The trash part of the storage interface: the trash, retention and redactions.

Contract: ``storage.trash`` is a ``Trash``, one class per backend in a file of
its own (``sqlite_trash.SQLiteTrash``, ``postgres_trash.PostgresTrash``) that
holds the backend as its connection helper (``hosts``). It marks sessions
trashed or restores them, lists the trash, finds what a retention policy would
touch, keeps the saved policy and records redactions, the only change the
schema lets a node undergo. Which sessions and nodes qualify, and the wording of
markers, are decided in ``retention``; a write that decides from a listing
takes the sessions' locks first with ``Storage.lock_sessions`` (a transaction
concern, so the backend's own, not the trash's).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from ..model import TrashEntry
from .rows import DroppableSession, StrippableResult


class Trash(ABC):
    """Trash, retention policy and redactions of one database."""

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
