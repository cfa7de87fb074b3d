"""Tools: plain Python functions described to a model and called with checked arguments.

Contract:
- ``@tool`` (or ``Tool(fn)``) takes the name from the function, the description
  from its docstring, and a JSON Schema from its type hints: str, int, float,
  bool, list[T], dict / dict[str, T], Literal, Enum, ``X | None`` / Optional,
  dataclasses and TypedDicts. A parameter with a default is optional.
- ``Tool.parse(arguments_json)`` checks arguments against that schema
  (``schema_check``, the check ``decide`` gives a human's edit too) and returns
  Python values (Enum members, dataclass instances); any problem raises
  ``ToolArgumentError`` with a message precise enough for a model to fix its
  call, naming every problem found. Nothing is ever silently defaulted.
- A parameter annotated ``ToolContext`` is not part of the schema; the agent
  loop passes the session, branch and call id in it.
- ``idempotent=False`` marks a tool that must not run twice: if a run dies after
  starting it, the loop pauses for a human instead of running it again.
- ``requires_approval=True`` marks a tool whose calls pause for a human when
  the run has no approver (the library's and the CLI's default). It defaults
  to ``not idempotent``: a tool that is unsafe to repeat is also not run
  without a human's yes, unless it says ``requires_approval=False``.
- ``approval_timeout`` (seconds) is the deadline of a pause for a call to the tool
  (see ``deadlines``): after it the pause is ``expired``, not waiting.
- ``Tool.from_schema(name, description, parameters, call)`` is a tool that arrives as
  JSON Schema (an MCP server's, say): ``call(arguments)`` gets the decoded object,
  checked against that schema by ``schema_check`` as every tool's arguments are;
  whoever owns the schema checks what ``schema_check`` does not understand.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import enum
import inspect
import json
import threading
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints, is_typeddict

from . import schema_check
from .deadlines import validate
from .errors import ToolArgumentError

if typing.TYPE_CHECKING:
    from .session import Session
    from .store import Store


@dataclass(frozen=True)
class ToolContext:
    """What a tool may learn about the call it serves."""

    session: Session
    branch: str
    call_id: str
    store: Store | None = None  # the store the run writes to, to read other sessions


@dataclass(frozen=True)
class ToolOutput:
    """A tool's result with more than the model is told: ``content`` is the tool message's
    text, ``raw`` is kept beside it in the message's ``raw`` field (keyed by where it came
    from, e.g. ``{"mcp": ...}``), which no model is sent."""

    content: str
    raw: dict[str, Any] | None = None


_SCALARS: dict[type, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def schema_for(annotation: Any) -> dict[str, Any]:
    """The JSON Schema of one type hint."""
    origin, args = get_origin(annotation), get_args(annotation)
    if annotation in _SCALARS:
        return {"type": _SCALARS[annotation]}
    if annotation is Any:
        return {}
    if origin in (Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        inner = schema_for(options[0]) if len(options) == 1 else {"anyOf": [schema_for(a) for a in options]}
        return {"anyOf": [inner, {"type": "null"}]} if type(None) in args else inner
    if origin is Literal:
        return {"enum": list(args)}
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return {"enum": [member.value for member in annotation]}
    if annotation is list or origin is list:
        return {"type": "array", "items": schema_for(args[0])} if args else {"type": "array"}
    if annotation is dict or origin is dict:
        if len(args) == 2:
            return {"type": "object", "additionalProperties": schema_for(args[1])}
        return {"type": "object"}
    if dataclasses.is_dataclass(annotation) or is_typeddict(annotation):
        return _object_schema(*_fields(annotation))
    raise TypeError(f"no JSON Schema for type {annotation!r}")


def _fields(cls: type) -> tuple[dict[str, Any], set[str]]:
    """(field -> annotation, required field names) of a dataclass or TypedDict."""
    hints = get_type_hints(cls)
    if is_typeddict(cls):
        return hints, set(typing.cast(Any, cls).__required_keys__)
    required = {
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}, required


def _object_schema(
    fields: dict[str, Any], required: set[str], descriptions: dict[str, str] | None = None
) -> dict[str, Any]:
    properties = {}
    for name, annotation in fields.items():
        properties[name] = schema_for(annotation)
        if descriptions and name in descriptions:
            properties[name]["description"] = descriptions[name]
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": [n for n in fields if n in required],
    }
    schema["additionalProperties"] = False
    return schema


def convert(value: Any, annotation: Any) -> Any:
    """The Python value of ``value`` (decoded JSON that ``schema_check`` found fits the
    schema of ``annotation``): Enum members, dataclass instances, ints and floats."""
    origin, args = get_origin(annotation), get_args(annotation)
    if annotation is int:
        return int(value)
    if annotation is float:
        return float(value)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for option in (a for a in args if a is not type(None)):
            if not schema_check.problems(value, schema_for(option)):
                return convert(value, option)
        raise TypeError(f"{value!r} fits no option of {annotation!r}: check it first")
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return annotation(value)
    if (annotation is list or origin is list) and args:
        return [convert(v, args[0]) for v in value]
    if (annotation is dict or origin is dict) and len(args) == 2:
        return {k: convert(v, args[1]) for k, v in value.items()}
    if dataclasses.is_dataclass(annotation) or is_typeddict(annotation):
        fields, _ = _fields(annotation)
        converted = convert_object(value, fields)
        return converted if is_typeddict(annotation) else annotation(**converted)
    return value  # str, bool, Any, Literal, bare list and dict: as decoded


def convert_object(value: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """``convert`` for each named field of an object."""
    return {name: convert(v, fields[name]) for name, v in value.items()}


def _docstring_parts(fn: Callable) -> tuple[str, dict[str, str]]:
    """The summary of a docstring and the ``name: text`` lines of its Args section."""
    doc = inspect.getdoc(fn) or ""
    summary, _, rest = doc.partition("\nArgs:\n")
    params = {}
    for line in rest.splitlines():
        name, sep, text = line.strip().partition(":")
        if sep and name.isidentifier():
            params[name.strip()] = text.strip()
        elif not line.startswith((" ", "\t")) and line.strip():
            break  # the next section
    return summary.strip(), params


class Tool:
    """A function a model can call, with its schema and argument checking."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        idempotent: bool = True,
        requires_approval: bool | None = None,
        approval_timeout: float | None = None,
        parallel: bool = True,
    ) -> None:
        self.fn = fn
        # False: never run at the same time as another call of its batch (a tool that
        # shares a resource, or whose effects must not interleave with others').
        self.parallel = parallel
        self.approval_timeout = validate(approval_timeout, f"approval_timeout of tool {fn.__name__}")
        self.name = name or fn.__name__
        summary, param_docs = _docstring_parts(fn)
        self.description = description if description is not None else summary
        self.idempotent = idempotent
        self.requires_approval = not idempotent if requires_approval is None else requires_approval
        self.is_async = inspect.iscoroutinefunction(fn)
        hints = get_type_hints(fn)
        self.fields: dict[str, Any] = {}
        self.required: set[str] = set()
        self.context_param: str | None = None
        for param in inspect.signature(fn).parameters.values():
            annotation = hints.get(param.name, Any)
            if annotation is ToolContext or ToolContext in get_args(annotation):
                self.context_param = param.name
                continue
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise TypeError(f"tool {self.name}: *args and **kwargs cannot be described to a model")
            self.fields[param.name] = annotation
            if param.default is param.empty:
                self.required.add(param.name)
        self.parameters = _object_schema(self.fields, self.required, param_docs)

    @classmethod
    def from_schema(
        cls,
        name: str,
        description: str,
        parameters: dict[str, Any],
        call: Callable[[dict[str, Any]], Any],
        *,
        idempotent: bool = True,
        requires_approval: bool | None = None,
        approval_timeout: float | None = None,
        parallel: bool = True,
    ) -> Tool:
        """A tool described by a JSON Schema ``parameters`` object rather than type hints;
        ``call(arguments)`` (sync or async) runs it (see the module docstring)."""
        if not isinstance(parameters, dict) or parameters.get("type", "object") != "object":
            raise TypeError(f"tool {name}: parameters must be a JSON Schema of type object")
        tool = cls.__new__(cls)
        tool.fn = call
        tool.parallel = parallel
        tool.name = name
        tool.description = description
        tool.approval_timeout = validate(approval_timeout, f"approval_timeout of tool {name}")
        tool.idempotent = idempotent
        tool.requires_approval = not idempotent if requires_approval is None else requires_approval
        tool.is_async = inspect.iscoroutinefunction(call)
        tool.fields, tool.required, tool.context_param = {}, set(), None
        tool.parameters = parameters
        tool._schema_call = True
        return tool

    _schema_call = False  # arguments go to ``fn`` as one object, checked by the schema alone

    def spec(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry for this tool."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def parse(self, arguments: str | dict[str, Any] | None) -> dict[str, Any]:
        """Decode and check a call's arguments; raise ToolArgumentError saying what is wrong."""
        if isinstance(arguments, str):
            text = arguments
            try:
                arguments = json.loads(text) if text.strip() else {}
            except json.JSONDecodeError as e:
                raise ToolArgumentError(f"arguments are not valid JSON ({e}): {text[:200]}") from None
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise ToolArgumentError(f"arguments must be a JSON object, got {json.dumps(arguments)[:80]}")
        schema_check.check(arguments, self.parameters, "arguments")
        if self._schema_call:  # the schema is all there is to check against
            return arguments
        return convert_object(arguments, self.fields)

    async def invoke(self, arguments: dict[str, Any], context: ToolContext | None = None) -> Any:
        """Call the function with checked arguments (sync functions run in a thread)."""
        if self._schema_call:
            if self.is_async:
                return await self.fn(dict(arguments))
            return await in_daemon_thread(self.fn, {"arguments": dict(arguments)})
        kwargs = dict(arguments)
        if self.context_param is not None:
            kwargs[self.context_param] = context
        if self.is_async:
            return await self.fn(**kwargs)
        return await in_daemon_thread(self.fn, kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"


async def in_daemon_thread(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    """``fn(**kwargs)`` in a thread of its own, awaited.

    Unlike ``asyncio.to_thread`` the thread is a daemon: a sync tool that never returns
    cannot keep the process alive after its run was cancelled (Ctrl-C): the run records
    why it stopped and the process exits, instead of waiting forever at shutdown.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def settle(result: Any, error: BaseException | None) -> None:
        if not future.done():
            future.set_exception(error) if error is not None else future.set_result(result)

    def work() -> None:
        try:
            result, error = context.run(fn, **kwargs), None
        except BaseException as e:  # handed to the awaiting run, which reports it
            result, error = None, e
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody is waiting
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(
        target=work, name=f"sessiontree-tool-{getattr(fn, '__name__', 'fn')}", daemon=True
    ).start()
    return await future


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    idempotent: bool = True,
    requires_approval: bool | None = None,
    approval_timeout: float | None = None,
    parallel: bool = True,
) -> Any:
    """Make a function a ``Tool``: ``@tool`` or ``@tool(idempotent=False, requires_approval=True)``."""
    settings = {k: v for k, v in locals().items() if k != "fn"}  # first thing: Tool's keywords

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool(f, **settings)

    return wrap(fn) if fn is not None else wrap


def as_tools(tools: typing.Iterable[Tool | Callable[..., Any]]) -> dict[str, Tool]:
    """Tools by name; plain functions are wrapped. The same tool (or function) given twice
    counts once, as a module's ``@tool`` function and its ``TOOLS = [...]`` list are the
    same objects; two different tools of one name are an error."""
    by_name: dict[str, Tool] = {}
    for item in tools:
        t = item if isinstance(item, Tool) else Tool(item)
        if t.name in by_name:
            if by_name[t.name] is item or by_name[t.name].fn is item:
                continue
            raise ValueError(f"two tools are named {t.name!r}")
        by_name[t.name] = t
    return by_name
