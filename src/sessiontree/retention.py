"""Retention that never surprises: the trash, policies with a preview, recorded stripping.

Contract:
- Deleting a session moves it to the trash (``Session.delete``); it keeps every
  node, ref and run, is hidden from ``sessions()`` and search, takes no new nodes
  (a schema trigger; ``Conflict``), and comes back
  with ``restore``. ``empty_trash(older_than=...)`` removes for good the
  sessions trashed longer ago than that; nothing else ever removes a trashed
  session but ``delete(permanently=True)``.
- ``apply`` runs the policies a user chose, each optional, in one transaction:
  *drop* moves to the trash the sessions with no activity for ``drop_older_than``
  seconds, unless a checkpoint marks them or work is in flight in them: a branch
  stands at a pause (waiting for a human), a decision (waiting for a worker) or
  a ``tool_start`` (a run cut off inside a tool, which a worker turns into a
  pause); the report names those it left alone (``kept``); *strip* replaces
  the text of tool results of at least ``strip_min_bytes`` bytes, older than
  ``strip_older_than`` seconds, by a marker that says what was removed, its
  size, when and why; user, assistant
  and system messages are never touched. Each strip is recorded in the
  ``redactions`` table, the only change the schema lets a node undergo, so it is
  never a silent rewrite: the projection, ``log`` and every export show the
  marker. A dry run reports the same and writes nothing.
- ``RetentionPolicy`` holds the chosen policies (``drop_older_than``,
  ``strip_older_than``, ``strip_min_bytes``), checked when built; ``apply`` runs one
  and ``save_policy`` keeps one (its ``to_dict`` form, one per store), which
  ``apply_saved`` runs later, dry run or not. ``Store.retention`` and
  ``Store.save_retention_policy`` take one (``policy=``) or its fields as keywords.
- ``prune`` is unchanged: it removes nodes no branch, checkpoint, unresolved
  pause, pending decision or recent write keeps; a trashed session keeps its
  refs, so prune keeps what they reach until the trash is emptied.
- Other writers may change a session between the moment it is listed and the
  moment it is acted on (on PostgreSQL; SQLite has one writer). So
  ``empty_trash`` and ``apply`` list, lock the listed sessions
  (``Storage.lock_sessions``), list again and act only on what is still
  listed, in the same transaction: a session restored, checkpointed, paused or
  written to meanwhile is left alone. ``restore`` reads the session under its
  lock too: once the trash was emptied of it, ``NotFound``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from . import clock
from .errors import Conflict
from .ids import iso, now
from .model import RetentionReport, Stripped, TrashEntry
from .storage import Storage
from .storage.rows import StrippableResult

DAY = 86_400
DEFAULT_MIN_BYTES = 10_000
"""A tool result smaller than this is never stripped by default."""


def iso_ago(seconds: float) -> str:
    """The UTC time ``seconds`` ago, as the store writes times (to the millisecond; what
    was written in this very millisecond is not older than 0 s)."""
    return iso((clock.time_ns() // 1_000_000 - round(seconds * 1000)) / 1000)


def trash(storage: Storage) -> list[TrashEntry]:
    """The sessions in the trash, longest there first."""
    return storage.trash.trashed()


def restore(storage: Storage, session_id: str) -> None:
    """Take a session out of the trash; ``NotFound`` if the trash was emptied of it first."""
    with storage.transaction():
        storage.lock_sessions([session_id])  # read it as the last writer left it
        row = storage.session_row(session_id)
        if row.trashed_at is None:
            raise Conflict(f"session {session_id} is not in the trash")
        storage.trash.set_trashed(row.key, None)


def empty_trash(storage: Storage, *, older_than: float = 0, dry_run: bool = False) -> list[TrashEntry]:
    """Remove for good the sessions trashed more than ``older_than`` seconds ago (in one
    transaction); the ones removed (or that would be, on a dry run)."""
    before = iso_ago(older_than)
    with storage.snapshot() if dry_run else storage.transaction():
        listed = storage.trash.trashed(before=before)
        if dry_run or not listed:
            return listed
        # Listed again under the sessions' locks: one restored since the first look stays.
        keys = storage.lock_sessions([entry.session_id for entry in listed])
        doomed = [entry for entry in storage.trash.trashed(before=before) if entry.session_id in keys]
        for entry in doomed:
            storage.delete_session(keys[entry.session_id])
    return doomed


def marker(size: int, when: str, reason: str) -> str:
    """The text a stripped tool result holds instead: what went, how big, when, why."""
    return f"[tool result stripped on {when[:10]}: {size:,} bytes removed by retention policy '{reason}']"


@dataclass(frozen=True)
class RetentionPolicy:
    """The policies ``apply`` runs, each optional (see the module docstring): ages in
    seconds, sizes in bytes. Checked when built: a negative age or a minimum size under 1
    is a ``Conflict``."""

    drop_older_than: float | None = None
    strip_older_than: float | None = None
    strip_min_bytes: int = DEFAULT_MIN_BYTES

    def __post_init__(self) -> None:
        for name in ("drop_older_than", "strip_older_than"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise Conflict(f"{name} must be >= 0 seconds, not {value}")
        if self.strip_min_bytes < 1:
            raise Conflict(f"strip_min_bytes must be >= 1, not {self.strip_min_bytes}")

    def to_dict(self) -> dict[str, float]:
        """The policy as the store saves it: the ages given, and the minimum size when
        results are stripped."""
        values = {"drop_older_than": self.drop_older_than, "strip_older_than": self.strip_older_than}
        policy = {k: float(v) for k, v in values.items() if v is not None}
        if self.strip_older_than is not None:
            policy["strip_min_bytes"] = float(self.strip_min_bytes)
        return policy

    @classmethod
    def from_dict(cls, saved: Mapping[str, float]) -> RetentionPolicy:
        """The policy ``to_dict`` saved."""
        size = int(saved.get("strip_min_bytes", DEFAULT_MIN_BYTES))
        return cls(saved.get("drop_older_than"), saved.get("strip_older_than"), size)


def apply(storage: Storage, policy: RetentionPolicy, *, dry_run: bool = True) -> RetentionReport:
    """Run ``policy`` (see the module docstring)."""
    drop_cutoff = None if policy.drop_older_than is None else iso_ago(policy.drop_older_than)
    strip_cutoff, reason, strip_min_bytes = None, "", policy.strip_min_bytes
    if policy.strip_older_than is not None:
        strip_cutoff = iso_ago(policy.strip_older_than)
        reason = (
            f"strip tool results of {strip_min_bytes:,}+ bytes older than {_days(policy.strip_older_than)}"
        )

    def candidates() -> tuple[list[str], list[str], list[StrippableResult]]:
        """(sessions to trash, idle ones left for their work in flight, tool results to
        strip) as the store holds them now."""
        droppable = [] if drop_cutoff is None else storage.trash.droppable_sessions(drop_cutoff)
        strippable = (
            [] if strip_cutoff is None else storage.trash.strippable_results(strip_cutoff, strip_min_bytes)
        )
        going = [idle.session_id for idle in droppable if not idle.in_flight]
        return going, [idle.session_id for idle in droppable if idle.in_flight], strippable

    keys: dict[str, int] = {}
    with storage.snapshot() if dry_run else storage.transaction():
        when = now()
        trashed, kept, strippable = candidates()
        if not dry_run and (trashed or strippable):
            # Listed again under the sessions' locks: a session that got a checkpoint, a
            # pause or a write since the first look is left alone, as the policy says.
            keys = storage.lock_sessions(sorted({*trashed, *(result.session_id for result in strippable)}))
            trashed, kept, strippable = candidates()
            trashed = [session_id for session_id in trashed if session_id in keys]
            strippable = [result for result in strippable if result.session_id in keys]
        going = set(trashed)  # to the trash whole: left as they are
        stripped = [
            Stripped(r.node_id, r.session_id, r.bytes) for r in strippable if r.session_id not in going
        ]
        if not dry_run:
            for item in stripped:
                storage.trash.redact(item.node_id, "content", marker(item.bytes, when, reason), reason, when)
            for session_id in trashed:
                storage.trash.set_trashed(keys[session_id], when)
    return RetentionReport(trashed, stripped, dry_run, kept)


def save_policy(storage: Storage, policy: RetentionPolicy) -> dict[str, float]:
    """Replace the saved policy; the policy saved (``RetentionPolicy.to_dict``)."""
    if policy.drop_older_than is None and policy.strip_older_than is None:
        raise Conflict("a retention policy needs drop_older_than, strip_older_than or both")
    saved = policy.to_dict()
    with storage.transaction():
        storage.trash.set_retention_policy(saved)
    return saved


def saved_policy(storage: Storage) -> dict[str, float]:
    """The saved policy (empty when none was saved)."""
    return storage.trash.retention_policy()


def apply_saved(storage: Storage, *, dry_run: bool = True) -> RetentionReport:
    """Run the saved policy; ``Conflict`` when none was saved."""
    policy = saved_policy(storage)
    if not policy:
        raise Conflict("no retention policy is saved: give one, or save one first")
    return apply(storage, RetentionPolicy.from_dict(policy), dry_run=dry_run)


def _days(seconds: float) -> str:
    return f"{seconds / DAY:g} days" if seconds % DAY == 0 else f"{seconds:g} s"
