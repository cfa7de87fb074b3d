"""sessiontree: LLM-agent conversations as trees in SQLite.

The public API is re-exported here; import from ``sessiontree``, not from its
modules.
"""

from .bulk import ImportConflict
from .errors import (
    AmbiguousRef,
    BranchMoved,
    CheckpointImmutable,
    Conflict,
    InvalidPayload,
    NotFound,
    ProviderError,
    ReadOnly,
    SchemaTooNew,
    SessionTreeError,
)
from .experiments import (
    BranchSummary,
    Comparison,
    ReplayReport,
    RerunResult,
    Variant,
    areplay,
    arerun,
    compare,
    replay,
    rerun,
)
from .formats import FormatError, detect_format, export_file, import_file
from .ids import new_id
from .loop import ModelOutputError, aresume, arun, decide, resume, run
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
    Usage,
    VerifyReport,
)
from .session import Session
from .steps import (
    Approve,
    Assistant,
    Edit,
    Final,
    Pause,
    Paused,
    Reject,
    Step,
    Token,
    ToolCall,
    ToolEnd,
    ToolStart,
)
from .store import Store
from .tools import Tool, ToolArgumentError, ToolContext, tool

__version__ = "0.1.0"

__all__ = [
    "AmbiguousRef",
    "Approve",
    "Assistant",
    "Branch",
    "BranchMoved",
    "BranchSummary",
    "Checkpoint",
    "CheckpointImmutable",
    "Comparison",
    "Completion",
    "Conflict",
    "Diff",
    "Edit",
    "Final",
    "FormatError",
    "ImportConflict",
    "InvalidPayload",
    "ModelOutputError",
    "Node",
    "NotFound",
    "Pause",
    "Paused",
    "Problem",
    "ProviderError",
    "PruneReport",
    "ReadOnly",
    "Reject",
    "ReplayReport",
    "RerunResult",
    "Run",
    "SchemaTooNew",
    "Session",
    "SessionInfo",
    "SessionTreeError",
    "Step",
    "Store",
    "Token",
    "Tool",
    "ToolArgumentError",
    "ToolCall",
    "ToolContext",
    "ToolEnd",
    "ToolStart",
    "Usage",
    "Variant",
    "VerifyReport",
    "aresume",
    "arun",
    "areplay",
    "arerun",
    "compare",
    "decide",
    "detect_format",
    "export_file",
    "import_file",
    "new_id",
    "replay",
    "rerun",
    "resume",
    "run",
    "tool",
]
