"""The named rows a storage backend returns: one type per shape, read by attribute.

Contract: every ``Storage`` method that answers with more than one value answers
with one of these (or with a model type: ``Node``, ``Problem``, ``TrashEntry``,
...), never a bare tuple, so a reader says ``handle.session_id`` where it used to
say ``handle[1]`` and mypy checks it. They are frozen, slotted data classes:
indexing or unpacking one fails, at type-check time and at run time. Two are
``NamedTuple``s, because they were tuples in a public test surface before they had
names (``session_row``: ``Session``'s constructor arguments, in order;
``resumable``: pairs compared with tuples): they read by name like the others.

Row keys (``key`` fields) are the backend's opaque integer handles, valid inside one
transaction or read (see ``base``); ids are the public UUIDv7 text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..model import Node


class SessionRow(NamedTuple):
    """A session's row; its fields are ``Session``'s constructor arguments after the storage."""

    key: int
    id: str
    title: str | None
    metadata: dict[str, Any]
    created_at: str
    archived_at: str | None
    trashed_at: str | None


class ResumablePause(NamedTuple):
    """A decided pause whose decision is a branch head with no child yet."""

    pause_id: str
    session_id: str


@dataclass(frozen=True, slots=True)
class NodeHandle:
    """What the session layer needs of a node looked up by id."""

    key: int
    session_id: str
    depth: int
    kind: str


@dataclass(frozen=True, slots=True)
class NodeKey:
    """A node's row key with its id."""

    key: int
    id: str


@dataclass(frozen=True, slots=True)
class RefTarget:
    """Where a branch or checkpoint name points; ``key`` and ``id`` are None for an empty branch."""

    kind: str
    """``"branch"`` or ``"checkpoint"``."""
    key: int | None
    id: str | None


@dataclass(frozen=True, slots=True)
class BranchHead:
    """A branch's head node (key and id None, depth -1 and kind None while the branch is empty)."""

    key: int | None
    id: str | None
    depth: int
    kind: str | None


@dataclass(frozen=True, slots=True)
class StoredNode:
    """A node already stored, as an import compares it with the one it is given."""

    key: int
    session_id: str
    parent_id: str | None
    kind: str
    payload: str
    """The payload as stored (JSON text)."""
    depth: int


@dataclass(frozen=True, slots=True)
class RunHandle:
    """A run's row key and its session's id."""

    key: int
    session_id: str


@dataclass(frozen=True, slots=True)
class ToolHead:
    """A branch, outside the trash, whose head is a ``tool_start`` or a tool message."""

    session_key: int
    session_id: str
    branch: str
    head_id: str


@dataclass(frozen=True, slots=True)
class Neighbour:
    """An id and one id next to it in sorted order among all node and session ids."""

    id: str
    neighbour: str


@dataclass(frozen=True, slots=True)
class RefsOnPath:
    """The branches and checkpoints of a node's session whose path contains it."""

    branches: list[str]
    checkpoints: list[str]


@dataclass(frozen=True, slots=True)
class SearchMatch:
    """A node a full-text query matched, with its snippet (matches between « and »)."""

    node: Node
    snippet: str


@dataclass(frozen=True, slots=True)
class DroppableSession:
    """A session a drop policy looks at; ``in_flight``: a branch stands at a pause, a
    decision or a ``tool_start`` (the policy leaves those)."""

    session_id: str
    last_activity: str
    in_flight: bool


@dataclass(frozen=True, slots=True)
class StrippableResult:
    """An unredacted tool result a strip policy may redact, and its size in bytes."""

    node_id: str
    session_id: str
    bytes: int


@dataclass(frozen=True, slots=True)
class Unreachable:
    """The nodes and runs nothing keeps (see ``maintenance.prune``)."""

    node_ids: list[str]
    run_ids: list[str]


@dataclass(frozen=True, slots=True)
class BranchTip:
    """A non-empty branch whose head exists, for ``verify`` to walk."""

    session_id: str
    branch: str
    head: NodeKey


@dataclass(frozen=True, slots=True)
class Counts:
    """How many sessions and nodes (in one session, or in the store)."""

    sessions: int
    nodes: int


@dataclass(frozen=True, slots=True)
class AppendedAt:
    """Where a one-statement append went: the head it went under (its id, None for an
    empty branch, and its depth, -1 then)."""

    parent_id: str | None
    parent_depth: int


def refs_on_path(
    node_ids: Sequence[str], read: Callable[[], Iterable[Sequence[str]]]
) -> dict[str, RefsOnPath]:
    """``refs_containing``'s answer from the (node id, "branch" | "checkpoint", name) rows of
    ``shared_sql.REFS_CONTAINING``, which ``read`` runs (not at all for no ids)."""
    found = {id: RefsOnPath([], []) for id in node_ids}
    if not node_ids:
        return found
    for node_id, kind, name in read():
        names = found[node_id].branches if kind == "branch" else found[node_id].checkpoints
        if name not in names:
            names.append(name)
    return found
