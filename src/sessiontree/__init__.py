"""sessiontree: LLM-agent conversations as trees in SQLite.

The public API is re-exported here; import from ``sessiontree``, not from its
modules.
"""

from .errors import (
    AmbiguousRef,
    BranchMoved,
    CheckpointImmutable,
    Conflict,
    InvalidPayload,
    NotFound,
    ProviderError,
    SchemaTooNew,
    SessionTreeError,
)
from .ids import new_id
from .model import (
    Branch,
    Checkpoint,
    Completion,
    Diff,
    Node,
    Problem,
    PruneReport,
    Run,
    SessionInfo,
    VerifyReport,
)
from .session import Session
from .store import Store

__version__ = "0.1.0"

__all__ = [
    "AmbiguousRef", "Branch", "BranchMoved", "Checkpoint", "CheckpointImmutable", "Completion",
    "Conflict", "Diff", "InvalidPayload", "Node", "NotFound", "Problem", "ProviderError",
    "PruneReport", "Run", "SchemaTooNew", "Session", "SessionInfo", "SessionTreeError", "Store",
    "VerifyReport", "new_id",
]
