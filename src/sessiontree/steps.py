"""What the agent loop yields, and what approvers and humans answer.

Contract: steps are plain frozen records. Every step that wrote a node names
it in ``node``; ``Token`` writes nothing (tokens are not stored one by one,
the assistant message that follows holds the text). A run always ends with
exactly one ``Final``, unless it is cancelled (then ``CancelledError`` propagates).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from .decisions import (  # noqa: F401 (their old home: decisions.py owns them now)
    Approve,
    Decision,
    Edit,
    Reject,
    decision_from_dict,
    decision_to_dict,
)
from .kinds import PausePayload, SummaryPayload
from .model import Node

# ``token_budget``, ``time_budget``, ``cost_budget`` and ``repeated_calls``: a ``Limits``
# budget ran out (see ``limits``).
FinalReason = Literal[
    "completed",
    "paused",
    "max_steps",
    "error",
    "token_budget",
    "time_budget",
    "cost_budget",
    "repeated_calls",
]


@dataclass(frozen=True)
class ToolCall:
    """One call of an assistant message: ``arguments`` is the model's JSON text."""

    id: str
    name: str
    arguments: str

    @classmethod
    def from_message(cls, call: dict[str, Any]) -> ToolCall:
        function = call.get("function") or {}
        return cls(call["id"], function.get("name", ""), function.get("arguments") or "")

    def to_dict(self) -> dict[str, str]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    @property
    def signature(self) -> tuple[str, str]:
        """What makes two calls the same call: the name and the arguments as JSON with
        sorted keys (the text itself when it is not JSON)."""
        try:
            arguments = json.dumps(json.loads(self.arguments), sort_keys=True, ensure_ascii=False)
        except (ValueError, TypeError):
            arguments = self.arguments
        return self.name, arguments


@dataclass(frozen=True)
class Token:
    text: str
    node: None = None


@dataclass(frozen=True)
class Assistant:
    node: Node

    @property
    def message(self) -> dict[str, Any]:
        return self.node.payload


@dataclass(frozen=True)
class ToolStart:
    call: ToolCall
    node: Node  # the tool_start marker written before the batch ran


@dataclass(frozen=True)
class ToolEnd:
    call: ToolCall
    node: Node  # the tool message answering the call
    ok: bool


@dataclass(frozen=True)
class Paused:
    node: Node  # the pause node; its id is all a caller needs to keep

    @property
    def calls(self) -> list[dict[str, Any]]:
        return [c.to_payload() for c in PausePayload.from_node(self.node).calls]


@dataclass(frozen=True)
class Compacted:
    """The branch was compacted before a model call (``context_budget``)."""

    node: Node  # the summary node, standing for the span its ``covers`` names

    @property
    def summary(self) -> str:
        return SummaryPayload.from_node(self.node).text


@dataclass(frozen=True)
class Final:
    reason: FinalReason
    node: Node | None = None
    error: str | None = None


Step = Token | Assistant | ToolStart | ToolEnd | Paused | Compacted | Final


# -- answers to an approval question ---------------------------------------


@dataclass(frozen=True)
class Resuming:
    """A worker starts to carry on a decided pause; the run's steps follow."""

    pause_id: str
    session_id: str
    node: None = None


@dataclass(frozen=True)
class Recovering:
    """A worker picks up a run cut off inside a tool (its process died there): the run's
    steps follow, by the loop's own rule (an ``interrupted`` pause for a call that is
    not safe to run twice; an idempotent one runs again)."""

    session_id: str
    branch: str
    head_id: str
    node: None = None


@dataclass(frozen=True)
class Pause:
    """Ask a human: the loop writes a pause node and stops. With ``expires_in``
    (seconds) the pause has a deadline, after which it is ``expired`` (see ``deadlines``)."""

    reason: str = ""
    expires_in: float | None = None
