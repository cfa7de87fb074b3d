"""Prune and verify: the store's housekeeping.

Contract:
- ``prune`` removes exactly the nodes that nothing keeps, plus the runs only
  they referenced. A node is kept when a branch head, a checkpoint, an
  unresolved pause, a decision no run has carried on from yet, or a node written
  in the last ``grace`` seconds (10 minutes by default: a writer in another
  process may be about to point at it) is that node or below it. A dry run reports the
  same set and writes nothing. The removal is one transaction.
- ``verify`` reads and never writes. It reports each problem with the session,
  the node when there is one, and which check found it: the schema-level
  checks come from the backend, the conversation-level ones (every tool call
  answered exactly once on each branch; every summary covers a contiguous span of
  its own path before it) are made here.
"""

from __future__ import annotations

import math

from . import calls, clock
from .compaction import span_problems
from .errors import Conflict
from .ids import iso
from .model import Node, Problem, PruneReport, VerifyReport
from .storage import Storage

GRACE_SECONDS = 600
"""Nodes younger than this are never pruned: another process may be about to point at them."""


def prune(
    storage: Storage,
    *,
    dry_run: bool = True,
    vacuum: bool = False,
    session_key: int | None = None,
    grace: float = GRACE_SECONDS,
) -> PruneReport:
    """Remove unreachable nodes (and runs only they used); report what goes.

    ``grace`` is a number of seconds >= 0 (``Conflict`` otherwise: NaN would compare as
    no grace at all); one reaching back before 1970 keeps every node.
    """
    if isinstance(grace, bool) or not isinstance(grace, int | float) or not grace >= 0:
        raise Conflict(f"grace must be a number of seconds >= 0, not {grace!r}")
    since = clock.seconds() - grace
    if grace == 0:
        cutoff = ""
    elif since < 0:  # older than every node (and than what gmtime can show): keep them all
        cutoff = "0"
    else:
        cutoff = iso(math.floor(since) + 0.999)  # the last millisecond of that second
    gone = storage.upkeep.unreachable(session_key, delete=not dry_run, cutoff=cutoff)
    freed = storage.upkeep.vacuum() if vacuum and not dry_run else None
    return PruneReport(node_ids=gone.node_ids, run_ids=gone.run_ids, dry_run=dry_run, bytes_freed=freed)


def verify(storage: Storage, *, session_key: int | None = None) -> VerifyReport:
    """Check the tree invariants; see the module docstring."""
    with storage.snapshot():
        problems = storage.upkeep.integrity_problems(session_key)
        for tip in storage.upkeep.branch_heads(session_key):
            path = list(storage.paths.path_to(tip.head.key, tip.head.id, tip.session_id))
            problems.extend(tool_call_problems(tip.session_id, tip.branch, path))
            problems.extend(span_problems(tip.session_id, tip.branch, path))
        counts = storage.upkeep.counts(session_key)
    return VerifyReport(problems=problems, sessions=counts.sessions, nodes=counts.nodes)


def tool_call_problems(session_id: str, branch: str, path: list[Node]) -> list[Problem]:
    """On a branch path, every tool call is answered by exactly one tool message
    before the conversation moves on (the next non-tool message): see ``calls``."""
    problems = []
    for step in calls.follow(path):
        node = step.node
        if step.stray == "orphan":
            call_id = node.payload.get("tool_call_id")
            said = f"tool message {node.id} answers no open call {call_id!r}"
        elif step.stray == "twice":
            said = f"tool call {node.payload.get('tool_call_id')!r} is answered twice"
        elif step.left:
            said = f"tool calls {list(step.left)} are unanswered before node {node.id}"
        else:
            continue
        problems.append(Problem(session_id, "tool-calls", f"on branch {branch!r}, {said}", node.id))
    return problems
