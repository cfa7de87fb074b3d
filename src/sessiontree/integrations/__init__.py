"""Bridges to other systems, each needing an optional extra; the core never imports them.

``missing_extra(error, package, extra)`` tells an ``ImportError`` of the extra's package
(say so in one line: how to install it) from any other (a bug, to be raised as it is).

``decision_at(session, pause)`` and ``claim_decision(...)`` are what every framework's resume of a
decided pause shares: find the decision a branch stands at, then take it with a
compare-and-set on it, so that one resume (in any process) carries it on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import BranchMoved, Conflict

if TYPE_CHECKING:
    from ..model import Node
    from ..session import Session


def missing_extra(error: ImportError, package: str, extra: str) -> str | None:
    """``pip install 'sessiontree[EXTRA]'`` when ``error`` is ``package`` missing, else None."""
    name = error.name or ""
    if name == package or name.startswith(package + ".") or (not name and package in str(error)):
        return f"pip install 'sessiontree[{extra}]'"
    return None


def decision_at(session: Session, pause: Node) -> tuple[Node, list[str]]:
    """The decision of ``pause`` and the branches standing at it, oldest first; ``Conflict``
    when it has no decision yet, was resumed already, or no branch stands at it."""
    decision = next((n for n in session.children(pause) if n.kind == "decision"), None)
    if decision is None:
        raise Conflict(f"pause {pause.id} has no decision yet: decide it first")
    branches = session.branches_at(decision)
    if session.children(decision):  # read after the branches: a resume racing ours shows here
        raise Conflict(f"pause {pause.id} was already resumed: its decision {decision.id} has been acted on")
    if not branches:
        raise Conflict(f"pause {pause.id}: no branch stands at its decision {decision.id} any more")
    branches.sort(key=lambda name: session.branch(name).created_at)
    return decision, branches


def claim_decision(session: Session, pause: Node, decision: Node, branch: str, note: dict[str, Any]) -> None:
    """Take ``decision`` for one resume: ``note`` appended at it on ``branch`` with a
    compare-and-set; ``Conflict`` when another resume took it first."""
    try:
        session.append(note, kind="note", branch=branch, expect_head=decision.id)
    except BranchMoved:
        raise Conflict(
            f"pause {pause.id} was already resumed: its decision {decision.id} has been acted on"
        ) from None
