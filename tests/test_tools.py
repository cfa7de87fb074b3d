"""Tool schemas from type hints, and argument checking against the same hints."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Literal, Optional, TypedDict

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessiontree import Tool, ToolArgumentError, ToolContext, tool


class Unit(enum.Enum):
    C = "celsius"
    F = "fahrenheit"


@dataclass
class Place:
    city: str
    country: str = "FR"


class Window(TypedDict):
    days: int
    hourly: bool


@tool
def forecast(
    place: Place,
    window: Window,
    unit: Unit = Unit.C,
    tags: list[str] | None = None,
    mode: Literal["fast", "exact"] = "fast",
    limits: dict[str, float] | None = None,
    verbose: Optional[bool] = None,  # noqa: UP045 (the schema must handle Optional too)
    ctx: ToolContext = None,
) -> str:
    """Forecast the weather.

    Args:
        place: where to look
        unit: the temperature unit
    """
    return f"{place.city}/{place.country} {window['days']}d {unit.name} {tags} {mode} {limits} {verbose}"


def test_schema_from_type_hints_and_docstring():
    spec = forecast.spec()["function"]
    assert spec["name"] == "forecast"
    assert spec["description"] == "Forecast the weather."
    params = spec["parameters"]
    assert params["required"] == ["place", "window"]
    assert "ctx" not in params["properties"]
    props = params["properties"]
    assert props["place"] == {
        "type": "object",
        "description": "where to look",
        "additionalProperties": False,
        "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
        "required": ["city"],
    }
    assert props["window"]["required"] == ["days", "hourly"]
    assert props["unit"] == {"enum": ["celsius", "fahrenheit"], "description": "the temperature unit"}
    assert props["tags"] == {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]}
    assert props["mode"] == {"enum": ["fast", "exact"]}
    assert props["limits"]["anyOf"][0] == {"type": "object", "additionalProperties": {"type": "number"}}
    assert props["verbose"] == {"anyOf": [{"type": "boolean"}, {"type": "null"}]}


def test_arguments_are_converted_to_python_values():
    args = forecast.parse(
        '{"place": {"city": "Nice"}, "window": {"days": 2, "hourly": false},'
        ' "unit": "fahrenheit", "tags": ["a"], "limits": {"max": 3}}'
    )
    assert args["place"] == Place("Nice") and args["unit"] is Unit.F
    assert args["limits"] == {"max": 3.0} and isinstance(args["limits"]["max"], float)
    assert forecast(**args) == "Nice/FR 2d F ['a'] fast {'max': 3.0} None"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ('{"place": {"city": "x"}}', "arguments: missing required argument(s) window"),
        (
            '{"place": {"city": 1}, "window": {"days": 1, "hourly": true}}',
            "arguments.place.city: expected a string, got 1",
        ),
        (
            '{"place": {"city": "x"}, "window": {"days": 1.5, "hourly": true}}',
            "arguments.window.days: expected an integer, got 1.5",
        ),
        (
            '{"place": {"city": "x"}, "window": {"days": 1, "hourly": 1}}',
            "arguments.window.hourly: expected a boolean, got 1",
        ),
        (
            '{"place": {"city": "x"}, "window": {"days": 1, "hourly": true}, "unit": "kelvin"}',
            'arguments.unit: expected one of "celsius", "fahrenheit", got "kelvin"',
        ),
        (
            '{"place": {"city": "x"}, "window": {"days": 1, "hourly": true}, "mode": "slow"}',
            'arguments.mode: expected one of "fast", "exact", got "slow"',
        ),
        (
            '{"place": {"city": "x"}, "window": {"days": 1, "hourly": true}, "tags": ["a", 2]}',
            "arguments.tags[1]: expected a string, got 2",
        ),
        (
            '{"place": {"city": "x"}, "window": {"days": 1, "hourly": true}, "extra": 1}',
            "arguments: unexpected argument(s) extra",
        ),
        ("[1, 2]", "arguments must be a JSON object, got [1, 2]"),
        ('{"place": ', "arguments are not valid JSON"),
    ],
)
def test_bad_arguments_name_the_problem(arguments, message):
    with pytest.raises(ToolArgumentError) as info:
        forecast.parse(arguments)
    assert message in str(info.value)


def test_no_silent_empty_arguments():
    @tool
    def needs(x: int) -> int:
        """Needs x."""
        return x

    with pytest.raises(ToolArgumentError, match="missing required argument\\(s\\) x"):
        needs.parse("")
    assert needs.parse('{"x": 2.0}') == {"x": 2}


def test_plain_functions_and_options():
    def add(a: int, b: int = 1) -> int:
        return a + b

    t = Tool(add, name="plus", description="Adds.", idempotent=False)
    assert (t.name, t.description, t.idempotent) == ("plus", "Adds.", False)
    assert t.spec()["function"]["parameters"]["required"] == ["a"]
    with pytest.raises(TypeError, match=r"\*args"):
        Tool(lambda *a: a)
    with pytest.raises(TypeError, match="no JSON Schema for type"):
        Tool(_typed_set)


def _typed_set(x: set[int]) -> None:
    """Sets are not JSON."""


@given(st.integers(), st.text(), st.booleans(), st.floats(allow_nan=False, allow_infinity=False))
def test_valid_scalars_round_trip(i, s, b, f):
    @tool
    def scalars(i: int, s: str, b: bool, f: float) -> None:
        """Scalars."""

    assert scalars.parse({"i": i, "s": s, "b": b, "f": f}) == {"i": i, "s": s, "b": b, "f": float(f)}


def test_the_same_tool_given_twice_is_one_tool():
    from sessiontree.tools import as_tools

    @tool
    def twice(x: int) -> int:
        return x

    assert list(as_tools([twice, twice])) == ["twice"]
    with pytest.raises(ValueError, match="two tools are named 'twice'"):
        as_tools([twice, tool(twice.fn)])
