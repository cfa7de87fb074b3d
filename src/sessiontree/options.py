"""A run's options: how it goes, apart from what it runs and where.

Contract:
- ``RunOptions`` is one frozen record of the options an agent run takes besides its model
  call, tools, branch and recipe: the approver, ``max_steps``, compaction
  (``context_budget``, ``summarize``, ``keep_last``, ``count_tokens``), the pauses' default
  deadline, the run's ``Limits`` and ``parallel_tools`` (each as ``loop.arun`` describes
  it). It is checked when built, so a bad value is refused before a run starts.
- It is built once and passed down unchanged: ``arun``/``run``, ``aresume``/``resume`` and
  ``arerun``/``rerun`` take one as ``options=``, and build one from their keywords of the
  same names when none is given (``RunOptions.given``: both at once is a ``TypeError``);
  the CLI's ``run``, ``resume``, ``worker`` and ``rerun`` build one from their flags
  (``cli.running.options_of``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from . import deadlines, keywords
from .limits import Limits
from .steps import ToolCall

Approver = Callable[[ToolCall], Any]
Summarizer = Callable[[list[dict[str, Any]]], Any]
TokenCounter = Callable[[list[dict[str, Any]]], int]


@dataclass(frozen=True)
class RunOptions:
    """How a run goes (see the module docstring); the defaults are ``arun``'s."""

    approve: Approver | None = None
    max_steps: int = 20
    context_budget: int | None = None
    summarize: Summarizer | None = None
    keep_last: int = 4
    count_tokens: TokenCounter | None = None
    pause_expires: float | None = None
    limits: Limits | None = None
    parallel_tools: int = 4

    def __post_init__(self) -> None:
        object.__setattr__(self, "pause_expires", deadlines.validate(self.pause_expires, "pause_expires"))
        n = self.parallel_tools
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"parallel_tools must be a whole number of at least 1, got {n!r:.40}")

    @classmethod
    def given(cls, options: RunOptions | None, arguments: Mapping[str, Any]) -> RunOptions:
        """``options``, or the options ``arguments`` make (``keywords.options_from``)."""
        return keywords.options_from(cls, options, arguments)

    def replace(self, **changes: Any) -> RunOptions:
        """A copy with ``changes`` (checked again)."""
        return dataclasses.replace(self, **changes)
