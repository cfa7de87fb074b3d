"""Budgets for one run of the agent loop: tokens, wall time, cost, and a model stuck in a loop.

Contract: ``Limits`` names the budgets of one ``arun`` (a resume is a new run with a
budget of its own). Each is checked before the step it would pay for:

- ``tokens``: input plus output tokens of this run's model calls (prompt-cache reads and
  writes count as input), checked before each model call;
- ``seconds``: wall time since the run started, checked before each model call and
  before each batch of tools (a tool already running is not interrupted);
- ``cost``: dollars, priced with ``prices`` (``{model: {"input": per_million, ...}}``,
  as ``Usage.cost`` takes them), checked before each model call; a model call whose model
  has no price stops the run, since its cost can no longer be kept;
- ``repeats``: how many times in a row the model may ask for the same tool calls (same
  names, same arguments): the batch that would be one more is not run.

A run that hits one ends with ``Final`` of that budget's reason (``token_budget``,
``time_budget``, ``cost_budget``, ``repeated_calls``) after appending a ``note`` node to
the branch, ``{"type": "limit", "limit": <reason>, "message": <what was spent>}``. The
note is a marker: running the branch again (with a larger budget) carries on from where
this run stopped.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from .model import Completion, ModelUsage, Node, Usage
from .steps import FinalReason, ToolCall


@dataclass(frozen=True)
class Limits:
    tokens: int | None = None
    seconds: float | None = None
    cost: float | None = None
    prices: dict[str, dict[str, float]] | None = None
    repeats: int | None = None

    def __post_init__(self) -> None:
        for name in ("tokens", "seconds", "cost", "repeats"):
            value = getattr(self, name)
            if value is None:
                continue
            whole = name in ("tokens", "repeats")
            if (
                isinstance(value, bool)
                or not isinstance(value, int if whole else int | float)
                or not math.isfinite(value)
                or value <= 0
            ):
                kind = "a whole number" if whole else "a number"
                raise ValueError(f"Limits({name}=...) must be {kind} above 0, got {value!r:.40}")
        if self.cost is not None and not self.prices:
            raise ValueError("Limits(cost=...) needs prices={model: {'input': ..., 'output': ...}}")


def _clock() -> float:
    """Seconds on a clock that only goes forward (a seam: tests set time, never sleep)."""
    return time.monotonic()


@dataclass
class Budget:
    """What one run has spent against its ``Limits``."""

    limits: Limits
    started: float = field(init=False)
    used: dict[str, ModelUsage] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.started = _clock()

    def spend(self, completion: Completion) -> None:
        """Count a model call this run made (its reply or a compaction's summary)."""
        usage = completion.usage or {}
        tokens_in = _number(usage, "prompt_tokens", "input_tokens")
        tokens_out = _number(usage, "completion_tokens", "output_tokens")
        written = _number(usage, "cache_creation_input_tokens")
        read = _number(usage, "cache_read_input_tokens")
        model = completion.model or "?"
        was = self.used.get(model, ModelUsage())
        self.used[model] = ModelUsage(
            was.calls + 1,
            was.input_tokens + tokens_in,
            was.output_tokens + tokens_out,
            was.latency_ms + (completion.latency_ms or 0.0),
            was.cache_creation_input_tokens + written,
            was.cache_read_input_tokens + read,
        )

    def before_model_call(self) -> tuple[FinalReason, str] | None:
        """(reason, message) when a budget forbids another model call, else None."""
        over = self._time()
        if over:
            return over
        usage = Usage(dict(self.used))
        limit = self.limits
        spent = usage.input_tokens + usage.output_tokens
        spent += usage.cache_creation_input_tokens + usage.cache_read_input_tokens
        if limit.tokens is not None and spent >= limit.tokens:
            return "token_budget", f"this run used {spent} tokens of its budget of {limit.tokens}"
        if limit.cost is not None and limit.prices and usage.calls:
            cost = usage.cost(limit.prices)
            if cost is None:
                unpriced = sorted(set(self.used) - set(limit.prices))
                return "cost_budget", (
                    f"no price for model {', '.join(unpriced)}, so the cost budget of ${limit.cost:g}"
                    " cannot be kept"
                )
            if cost >= limit.cost:
                return "cost_budget", f"this run cost ${cost:.6f} of its budget of ${limit.cost:g}"
        return None

    def before_tools(self, path: list[Node]) -> tuple[FinalReason, str] | None:
        """(reason, message) when a budget forbids running the calls of the latest
        assistant message on ``path``, else None."""
        over = self._time()
        if over or self.limits.repeats is None:
            return over
        same, names = _repeats(path)
        if same > self.limits.repeats:
            return "repeated_calls", (
                f"the model asked for the same call(s) to {names} {same} times in a row"
                f" (at most {self.limits.repeats} allowed)"
            )
        return None

    def _time(self) -> tuple[FinalReason, str] | None:
        if self.limits.seconds is None:
            return None
        took = _clock() - self.started
        if took >= self.limits.seconds:
            return "time_budget", f"this run took {took:.1f} s of its budget of {self.limits.seconds:g} s"
        return None


def _number(usage: dict[str, Any], *names: str) -> int:
    for name in names:
        value = usage.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return 0


def _repeats(path: list[Node]) -> tuple[int, str]:
    """How many assistant messages in a row, ending with the latest on ``path``, asked for
    the same tool calls (names and arguments), and the names of those tools."""
    count, wanted, names = 0, None, ""
    for node in reversed(path):
        if node.kind != "message" or node.payload.get("role") != "assistant":
            continue  # the tool results and markers between the asks
        calls = [ToolCall.from_message(c) for c in node.payload.get("tool_calls") or []]
        asked = sorted(c.signature for c in calls)
        if wanted is None:
            wanted, names = asked, ", ".join(sorted({c.name for c in calls}))
        if not asked or asked != wanted:
            break
        count += 1
    return count, names
