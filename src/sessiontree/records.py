"""A session tree as plain records: what parsers build, the tree writer takes and exports read.

Contract:
- ``ImportedSession`` (with ``ImportedNode``, ``ImportedRef``, ``ImportedRun`` and
  ``ImportedRedaction``) is an in-memory tree that format parsers build without
  touching SQL; ``sessiontree.bulk`` re-exports them under the same names.
- Each record has ONE field list (``NODE_FIELDS``, ``RUN_FIELDS``,
  ``BRANCH_FIELDS``, ``CHECKPOINT_FIELDS``, ``REDACTION_FIELDS``, ``SESSION_FIELDS``): the names the
  store's model (``model.Node``, ``Run``, ``Branch``, ``Checkpoint``) and the
  native file both use, in the native file's order. ``fields(record, names)``
  reads them off any of those objects; ``node_from``, ``run_from``, ``branch_from``,
  ``checkpoint_from`` build the records from them (``Branch.head_id`` is a ref's
  ``node_id``).
- ``where(node)`` is how every error message names a node.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Progress = Callable[[int, int], None]

SESSION_FIELDS = ("id", "title", "metadata", "created_at", "archived_at")
NODE_FIELDS = ("id", "parent_id", "depth", "kind", "payload", "created_at", "run_id")
RUN_FIELDS = ("id", "model", "provider", "params", "usage", "latency_ms", "finish_reason", "created_at")
BRANCH_FIELDS = ("name", "head_id", "created_at", "updated_at", "metadata")
CHECKPOINT_FIELDS = ("name", "node_id", "created_at")
REDACTION_FIELDS = ("node_id", "field", "bytes", "marker", "reason", "created_at")


@dataclass(slots=True)  # an import may hold millions: no per-node __dict__
class ImportedNode:
    id: str
    parent_id: str | None
    kind: str
    payload: dict[str, Any]
    created_at: str
    run_id: str | None = None
    depth: int | None = None  # when given (native files), it must match the computed depth
    source: str = ""  # where the node came from, for error messages: "line 7", "node 'abc'"


@dataclass
class ImportedRef:
    """A branch (``node_id`` may be None: an empty branch) or a checkpoint."""

    name: str
    node_id: str | None
    created_at: str | None = None
    updated_at: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def head_id(self) -> str | None:
        """A branch's ``node_id``, under the name ``model.Branch`` and native files give it."""
        return self.node_id


@dataclass
class ImportedRun:
    id: str
    model: str | None = None
    provider: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)
    latency_ms: float | None = None
    finish_reason: str | None = None
    created_at: str | None = None


@dataclass
class ImportedRedaction:
    """A recorded strip: ``field`` of node ``node_id`` holds ``marker`` instead of the
    ``bytes`` bytes of text it had (see ``retention``)."""

    node_id: str
    field: str
    bytes: int
    marker: str
    reason: str
    created_at: str


@dataclass
class ImportedSession:
    id: str
    title: str | None
    metadata: dict[str, Any]
    created_at: str
    nodes: list[ImportedNode] = field(default_factory=list)
    branches: list[ImportedRef] = field(default_factory=list)
    checkpoints: list[ImportedRef] = field(default_factory=list)
    runs: list[ImportedRun] = field(default_factory=list)
    archived_at: str | None = None
    source: str = ""  # e.g. "conversation 2", prefixed to this session's error messages
    notes: list[str] = field(default_factory=list)  # what the import should say (not stored)
    redactions: list[ImportedRedaction] = field(default_factory=list)


def fields(record: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """The named fields of a record (imported, stored or a dict's worth), in list order."""
    return {name: getattr(record, name) for name in names}


def node_from(values: dict[str, Any], source: str = "") -> ImportedNode:
    """An ``ImportedNode`` from ``NODE_FIELDS`` values."""
    return ImportedNode(**values, source=source)


def run_from(values: dict[str, Any]) -> ImportedRun:
    """An ``ImportedRun`` from ``RUN_FIELDS`` values."""
    return ImportedRun(**values)


def branch_from(values: dict[str, Any]) -> ImportedRef:
    """An ``ImportedRef`` from ``BRANCH_FIELDS`` values."""
    return ImportedRef(*values.values())  # the list is in ImportedRef's order, head_id as node_id


def checkpoint_from(values: dict[str, Any]) -> ImportedRef:
    """An ``ImportedRef`` from ``CHECKPOINT_FIELDS`` values."""
    return ImportedRef(*values.values())


def where(node: ImportedNode) -> str:
    """How error messages name a node: its record in the input and its id."""
    return f"{node.source}: node {node.id}" if node.source else f"node {node.id}"
