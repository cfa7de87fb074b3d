"""A call's arguments checked against its tool's JSON Schema: the one argument check.

Contract:
- ``problems(value, schema, where)`` lists what is wrong with ``value`` (decoded JSON)
  under ``schema``, each naming its place (``arguments.place.city: expected a string,
  got 1``); an empty list means it fits. ``check`` raises ``ToolArgumentError`` with
  them joined by ``"; "``.
- ``Tool.parse`` checks a model's call with it at run time, and ``loop.decide`` checks a
  human's ``Edit`` with it against the schema recorded on the pause, so a decision is
  refused exactly when the run would refuse its arguments.
- Understood: ``type`` (a name or a list of names), ``enum``, ``const``, ``properties``,
  ``required``, ``additionalProperties`` (``false`` or a schema), ``items``, ``anyOf``,
  ``oneOf``, ``allOf``, ``minimum``, ``maximum``, ``exclusiveMinimum``,
  ``exclusiveMaximum``, ``minLength``, ``maxLength``, ``minItems``, ``maxItems``:
  what ``tools.schema_for`` writes and what a hand-written tool schema usually holds.
  Every other keyword (``description``, ``default``, ``format``, ``$ref``, ...) is
  ignored, so it can only let a value through, never refuse one.
- As in JSON Schema, ``true`` is not a number and ``1`` is not ``true``; ``2.0`` is an
  integer. Values are compared as JSON values (``enum``, ``const``).
"""

from __future__ import annotations

import json
from typing import Any

from .errors import ToolArgumentError

_NAMES = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "array": "an array",
    "object": "an object",
    "null": "null",
}
_NULL = {"type": "null"}
_LENGTHS = {str: ("minLength", "maxLength", "characters"), list: ("minItems", "maxItems", "items")}


def check(value: Any, schema: dict[str, Any], where: str = "arguments") -> None:
    """Raise ``ToolArgumentError`` saying everything that is wrong, if anything is."""
    found = problems(value, schema, where)
    if found:
        raise ToolArgumentError("; ".join(found))


def problems(value: Any, schema: Any, where: str = "arguments") -> list[str]:
    """What is wrong with ``value`` under ``schema`` (see the module docstring)."""
    if not isinstance(schema, dict):  # ``true``, or something no checker could read
        return [f"{where}: never valid"] if schema is False else []
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else list(types) if isinstance(types, list) else []
        known = [n for n in names if n in _NAMES]
        if known and not any(_is(value, n) for n in known):
            return [_wrong(where, " or ".join(_NAMES[n] for n in known), value)]
    enum = schema.get("enum")
    if isinstance(enum, list) and not any(_same(value, option) for option in enum):
        return [_wrong(where, "one of " + ", ".join(json.dumps(option) for option in enum), value)]
    if "const" in schema and not _same(value, schema["const"]):
        return [_wrong(where, json.dumps(schema["const"]), value)]
    found = _bounds(value, schema, where)
    if isinstance(value, dict):
        found += _object(value, schema, where)
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            found += problems(item, schema["items"], f"{where}[{i}]")
    for part in schema.get("allOf") or []:
        found += problems(value, part, where)
    for keyword in ("anyOf", "oneOf"):
        options = schema.get(keyword)
        if isinstance(options, list) and options:
            found += _options(value, options, where, exactly_one=keyword == "oneOf")
    return found


def _object(value: dict[str, Any], schema: dict[str, Any], where: str) -> list[str]:
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    extra = schema.get("additionalProperties", True)
    found = []
    if extra is False:
        unknown = sorted(set(value) - set(properties))
        if unknown:
            found.append(
                f"{where}: unexpected argument(s) {', '.join(unknown)};"
                f" expected {', '.join(properties) or 'none'}"
            )
    required = schema.get("required")
    missing = [n for n in required if n not in value] if isinstance(required, list) else []
    if missing:
        found.append(f"{where}: missing required argument(s) {', '.join(missing)}")
    for name, item in value.items():
        if name in properties:
            found += problems(item, properties[name], f"{where}.{name}")
        elif isinstance(extra, dict):
            found += problems(item, extra, f"{where}.{name}")
    return found


def _options(value: Any, options: list[Any], where: str, *, exactly_one: bool) -> list[str]:
    """``anyOf``/``oneOf``: fine when an option fits (just one, for ``oneOf``); else what
    each option found, joined by "or". An option that only allows null is left out of that
    when the value is not null: "expected a string" says more than "... or expected null"."""
    results = [problems(value, option, where) for option in options]
    fits = sum(not r for r in results)
    if fits == 1 or fits > 1 and not exactly_one:
        return []
    if fits > 1:
        return [f"{where}: fits more than one of the options of a oneOf, got {_shown(value)}"]
    told = [r for option, r in zip(options, results, strict=True) if option != _NULL] or results
    return [" or ".join("; ".join(r) for r in told)]


def _bounds(value: Any, schema: dict[str, Any], where: str) -> list[str]:
    found = []
    if _is(value, "number"):
        for keyword, words, fails in (
            ("minimum", "at least", lambda v, b: v < b),
            ("maximum", "at most", lambda v, b: v > b),
            ("exclusiveMinimum", "more than", lambda v, b: v <= b),
            ("exclusiveMaximum", "less than", lambda v, b: v >= b),
        ):
            bound = schema.get(keyword)
            if _is(bound, "number") and fails(value, bound):
                found.append(_wrong(where, f"a number {words} {json.dumps(bound)}", value))
    for kind, (low, high, unit) in _LENGTHS.items():
        if not isinstance(value, kind):
            continue
        if (least := _count(schema, low)) is not None and len(value) < least:
            found.append(_wrong(where, f"at least {least} {unit}", value))
        if (most := _count(schema, high)) is not None and len(value) > most:
            found.append(_wrong(where, f"at most {most} {unit}", value))
    return found


def _count(schema: dict[str, Any], keyword: str) -> int | None:
    """A length bound of ``schema``, when it has a usable one."""
    bound: Any = schema.get(keyword)
    return int(bound) if _is(bound, "integer") else None


def _is(value: Any, name: str) -> bool:
    """Whether ``value`` is a JSON value of type ``name``."""
    if name == "integer":
        return not isinstance(value, bool) and (
            isinstance(value, int) or isinstance(value, float) and value.is_integer()
        )
    if name == "number":
        return not isinstance(value, bool) and isinstance(value, int | float)
    kinds: dict[str, Any] = {"string": str, "boolean": bool, "array": list, "object": dict}
    return value is None if name == "null" else isinstance(value, kinds[name])


def _same(a: Any, b: Any) -> bool:
    """Equality of JSON values: ``True`` is not ``1``, ``1`` is ``1.0``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if _is(a, "number") and _is(b, "number"):
        return bool(a == b)
    return type(a) is type(b) and a == b


def _wrong(where: str, expected: str, value: Any) -> str:
    return f"{where}: expected {expected}, got {_shown(value)}"


def _shown(value: Any) -> str:
    """``value`` as JSON, cut short; a library caller's edit may hold what JSON cannot."""
    try:
        return json.dumps(value)[:80]
    except (TypeError, ValueError, RecursionError):
        return f"a Python {type(value).__name__}"
