"""Scripted models for tests: canned replies, no network.

Contract: ``ScriptedModel(replies)`` is a ``call`` for the agent loop. Each
call takes the next reply (a string, an assistant message dict, a
``Completion``, an exception to raise, or a function of ``(messages, tools)``
returning one of those) and records what it was sent in ``.calls``. With
``stream=True`` it returns the streaming form: the text in word-sized deltas,
then the reply. Running out of replies raises ``ScriptExhausted``.
``completed`` and ``deltas`` are how it shapes a reply; the CLI's script model
(``providers.script``) shapes its replies the same way.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

from .errors import ScriptExhausted
from .model import Completion

__all__ = ["ScriptExhausted", "ScriptedModel", "completed", "deltas", "reply", "tool_call"]


def tool_call(
    name: str, arguments: dict[str, Any] | str | None = None, *, id: str | None = None
) -> dict[str, Any]:
    """One entry of an assistant message's ``tool_calls``."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    return {"id": id or f"call_{name}", "type": "function", "function": {"name": name, "arguments": text}}


def reply(content: str | None = None, *calls: dict[str, Any]) -> dict[str, Any]:
    """An assistant message with optional text and tool calls."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = list(calls)
    return message


class ScriptedModel:
    """A model that plays back a script."""

    def __init__(
        self,
        replies: list[Any],
        *,
        stream: bool = False,
        model: str = "scripted",
        params: dict[str, Any] | None = None,
    ) -> None:
        self.replies = list(replies)
        self.stream = stream
        self.model = model
        self.params = params or {}
        self.calls: list[dict[str, Any]] = []

    def with_params(self, **params: Any) -> ScriptedModel:
        """A view of this model recording other parameters; it shares the script."""
        other = copy.copy(self)
        other.params = {**self.params, **params}
        return other

    def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> Any:
        self.calls.append({"messages": copy.deepcopy(messages), "tools": copy.deepcopy(tools or [])})
        if not self.replies:
            raise ScriptExhausted(f"{self.model}: no scripted reply left for call {len(self.calls)}")
        answer = self.replies.pop(0)
        if callable(answer) and not isinstance(answer, BaseException):
            answer = answer(messages, tools)
        if isinstance(answer, BaseException):
            raise answer
        completion = completed(answer, messages, model=self.model, provider="scripted", params=self.params)
        return deltas(completion) if self.stream else completion


def completed(
    answer: Completion | dict[str, Any] | str,
    messages: list[dict[str, Any]],
    *,
    model: str,
    provider: str,
    params: dict[str, Any],
) -> Completion:
    """A scripted answer as the ``Completion`` a server would give: what it leaves out
    (model, provider, params, finish reason) filled in, and usage counted in words."""
    completion = (
        answer
        if isinstance(answer, Completion)
        else Completion({"role": "assistant", "content": answer} if isinstance(answer, str) else answer)
    )
    completion.model = completion.model or model
    completion.provider = completion.provider or provider
    completion.params = completion.params or dict(params)
    completion.finish_reason = completion.finish_reason or (
        "tool_calls" if completion.message.get("tool_calls") else "stop"
    )
    if not completion.usage:
        prompt = sum(len(str(m.get("content") or "").split()) for m in messages)
        output = len(str(completion.message.get("content") or "").split())
        completion.usage = {
            "prompt_tokens": prompt,
            "completion_tokens": output,
            "total_tokens": prompt + output,
        }
    return completion


def deltas(completion: Completion) -> Iterator[Any]:
    """The streaming form of a completion: its text in word-sized deltas, then itself."""
    text = completion.message.get("content") or ""
    words = text.split(" ") if text else []
    for i, word in enumerate(words):
        yield word if i == len(words) - 1 else word + " "
    yield completion
