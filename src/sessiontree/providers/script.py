"""A model that plays a script file, so every command can be tried with no server:
``--model script:PATH`` on the command line, ``script_model(PATH)`` in Python.

Contract:
- ``script_model(path)`` reads PATH whole before it returns: UTF-8 text, one
  assistant message in the OpenAI chat shape per line (``{"role": "assistant",
  "content": ..., "tool_calls": [...]}``; ``role`` may be left out, a call's
  ``arguments`` may be an object, a call without an ``id`` gets ``call_<line>_<n>``),
  blank lines ignored. A file that cannot be read, holds no reply, or has a line that
  is not such a message raises ``InvalidScript`` naming the file (and the line), so a
  command refuses the script before it writes anything.
- Which reply answers a call depends only on the messages sent, never on what this
  process did before: a run paused in one process continues in another with the same
  script. A call whose messages hold k assistant messages after the last ``user``
  message gets reply k + 1 (the (k+1)-th line that is not blank). So reply 1 answers a
  user message, reply 2 the results of reply 1's tool calls, and so on; every user
  turn starts again at reply 1, and a run from a checkpoint in the middle of a turn
  picks up at the reply that comes next. A summary that compaction put in is sent as
  a user message, so the count starts again after it.
- A compaction's own request (the agent loop's summary prompt is the last message)
  is answered with a fixed summary text and takes no reply.
- A call past the last reply raises ``ScriptExhausted`` naming the file, the reply
  it needed, the user turn (user messages in what was sent) and how many replies the
  file has; the agent loop records it like any failed model call.
- The run records provider ``script``, the path as given as its model, and the
  request parameters it was given (there is no key to keep out).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from ..errors import InvalidScript, ScriptExhausted
from ..loop import SUMMARY_PROMPT
from ..model import Completion, completion_problem
from ..testing import completed, deltas

PREFIX = "script:"
"""How ``--model`` names a script file: ``script:PATH``."""

PROVIDER = "script"


def script_model(
    path: str | Path, *, stream: bool = False, params: dict[str, Any] | None = None
) -> ScriptModel:
    """The model a script file plays (see the module docstring)."""
    name = str(path)
    try:
        text = Path(path).read_bytes()
    except FileNotFoundError:
        raise InvalidScript(f"{name}: the script file does not exist") from None
    except IsADirectoryError:
        raise InvalidScript(f"{name}: is a directory, not a script file") from None
    except OSError as e:
        raise InvalidScript(f"{name}: cannot read the script file: {e.strerror or e}") from None
    try:
        lines = text.decode("utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise InvalidScript(
            f"{name}: not UTF-8 text (byte {text[e.start]:#04x} at offset {e.start})"
        ) from None
    replies = [reply_from_line(name, number, line) for number, line in enumerate(lines, 1) if line.strip()]
    if not replies:
        raise InvalidScript(f"{name}: the script has no reply; write one assistant message per line")
    return ScriptModel(name, replies, stream=stream, params=params)


def reply_from_line(name: str, number: int, line: str) -> dict[str, Any]:
    """One line of a script as the assistant message it stands for, or ``InvalidScript``."""
    where = f"{name} line {number}"
    try:
        message = json.loads(line)
    except ValueError as e:
        raise InvalidScript(f"{where}: not valid JSON ({e})") from None
    if not isinstance(message, dict):
        raise InvalidScript(
            f"{where}: expected an assistant message object, not a JSON {type(message).__name__}"
        )
    role = message.setdefault("role", "assistant")
    if role != "assistant":
        raise InvalidScript(f"{where}: the role is {role!r}; a script holds the model's replies only")
    message.setdefault("content", None)
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        for i, call in enumerate(calls, 1):
            if isinstance(call, dict):
                call.setdefault("id", f"call_{number}_{i}")
                call.setdefault("type", "function")
                function = call.get("function")
                if isinstance(function, dict) and not isinstance(function.get("arguments"), str):
                    function["arguments"] = json.dumps(function.get("arguments") or {}, ensure_ascii=False)
    problem = completion_problem(Completion(message))
    if problem is not None:
        raise InvalidScript(f"{where}: {problem}")
    return message


def assistants_since_last_user(messages: list[dict[str, Any]]) -> int:
    """How many assistant messages follow the last user message (all of them if none)."""
    count = 0
    for message in reversed(messages):
        role = message.get("role")
        if role == "user":
            break
        count += role == "assistant"
    return count


class ScriptModel:
    """A model call that answers from a script file; see the module docstring."""

    provider = PROVIDER  # recorded in a run's recipe

    def __init__(
        self,
        path: str,
        replies: list[dict[str, Any]],
        *,
        stream: bool = False,
        params: dict[str, Any] | None = None,
    ) -> None:
        self.model, self.replies, self.stream = path, replies, stream
        self.params = dict(params or {})

    def with_params(self, **params: Any) -> ScriptModel:
        """The same script, recording other request parameters (rerun's variants)."""
        return ScriptModel(self.model, self.replies, stream=self.stream, params={**self.params, **params})

    def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> Any:
        last = messages[-1] if messages else {}
        if last.get("role") == "user" and last.get("content") == SUMMARY_PROMPT:
            answer: dict[str, Any] | str = f"(scripted summary of {len(messages) - 1} earlier message(s))"
        else:
            n = assistants_since_last_user(messages) + 1
            if n > len(self.replies):
                turn = sum(m.get("role") == "user" for m in messages)
                raise ScriptExhausted(
                    f"{self.model} has no reply {n} for user turn {turn} ({n - 1} assistant "
                    f"message(s) since that user message); the script has {len(self.replies)}"
                )
            answer = copy.deepcopy(self.replies[n - 1])
        completion = completed(answer, messages, model=self.model, provider=PROVIDER, params=self.params)
        return deltas(completion) if self.stream else completion
