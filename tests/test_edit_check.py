"""A human's edit of a paused call is checked when it is decided, not when it is resumed
(issue 25 item 2): the pause records the schema of each paused call's tool, and
``decide`` (the library, ``sessiontree edit-call``, the ``serve`` inbox) refuses an edit
that does not fit it with the message the run would have given, writing nothing; the
pause still takes a good decision afterwards. The check is ``schema_check``, the one
``Tool.parse`` makes at run time."""

from __future__ import annotations

import enum
import json
import shlex
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from sessiontree import (
    Approve,
    Edit,
    Pause,
    Reject,
    Store,
    ToolArgumentError,
    decide,
    resume,
    run,
    schema_check,
    tool,
)
from sessiontree.cli import cli
from sessiontree.loop import check_decisions
from sessiontree.testing import ScriptedModel, reply, tool_call

from conftest import public_rows_of

REFUNDS: list[tuple[int, float]] = []


@tool(idempotent=False)
def refund(order_id: int, amount: float) -> str:
    """Refund part of an order (not safe to repeat)."""
    REFUNDS.append((order_id, amount))
    return f"refunded {amount} on order {order_id}"


@tool
def lookup(order_id: int) -> str:
    """Look an order up."""
    return f"order {order_id}: shipped"


BAD = {"order_id": "nine"}
WRONG = 'arguments: missing required argument(s) amount; arguments.order_id: expected an integer, got "nine"'
REFUSAL = f"edit of call r3 (refund): {WRONG} (nothing was written)"


def paused(store: Store, *calls: dict, approve: Any = None, tools: Any = (refund, lookup)):
    """A session whose run paused on ``calls`` (by default one call r3 to refund)."""
    session = store.create_session("refunds")
    session.append({"role": "user", "content": "refund order 9"})
    calls = calls or (tool_call("refund", {"order_id": 9, "amount": 5}, id="r3"),)
    model = ScriptedModel([reply(None, *calls), "Done."])
    steps = list(run(store, session, call=model, tools=tools, approve=approve))
    assert steps[-1].reason == "paused"
    return session, steps[-1].node, model


def test_a_bad_edit_is_refused_at_decide_time_and_a_good_one_runs_once(any_store):
    session, pause, model = paused(any_store)
    before = public_rows_of(any_store)
    nodes = len(session.tree())
    with pytest.raises(ToolArgumentError) as refused:
        decide(any_store, pause.id, {"r3": Edit(BAD)}, by="ana")
    assert str(refused.value) == REFUSAL
    assert len(session.tree()) == nodes and public_rows_of(any_store) == before
    assert [p.id for p in any_store.pending()] == [pause.id]  # still waiting for a decision
    decide(any_store, pause.id, {"r3": Edit({"order_id": 9, "amount": 2.5})}, by="ana")
    REFUNDS.clear()
    steps = list(resume(any_store, pause.id, call=model, tools=[refund, lookup]))
    assert steps[-1].reason == "completed"
    assert REFUNDS == [(9, 2.5)]
    assert any_store.verify().ok


def test_the_pause_records_the_schemas_of_its_calls_tools_only(any_store):
    calls = (
        tool_call("refund", {"order_id": 9, "amount": 5}, id="r3"),
        tool_call("lookup", {"order_id": 9}, id="l1"),
        tool_call("nosuchtool", {}, id="n1"),
    )
    # refund pauses by its own rule; lookup runs; a tool the run lacks is asked about
    _, pause, _ = paused(
        any_store, *calls, approve=lambda c: Pause("asked") if c.name != "lookup" else Approve()
    )
    assert [c["id"] for c in pause.payload["calls"]] == ["r3", "n1"]
    stored = any_store.node(pause.id).payload["schemas"]
    assert stored == {"refund": refund.parameters}  # no lookup (not paused), none for nosuchtool
    # an edit of the call whose tool was unknown has nothing to be checked against
    decide(any_store, pause.id, {"n1": Edit({"anything": True}), "r3": Approve()})


def test_every_edit_of_a_pause_is_checked_before_anything_is_written(any_store):
    calls = (
        tool_call("refund", {"order_id": 9, "amount": 5}, id="r3"),
        tool_call("refund", {"order_id": 8, "amount": 1}, id="r4"),
    )
    session, pause, _ = paused(any_store, *calls)
    nodes = len(session.tree())
    with pytest.raises(ToolArgumentError, match=r"^edit of call r4 \(refund\): arguments: unexpected"):
        decide(any_store, pause.id, {"r3": Edit({"order_id": 9, "amount": 1}), "r4": Edit({"oops": 1})})
    assert len(session.tree()) == nodes
    with pytest.raises(ToolArgumentError, match=r"arguments\.amount: expected a number, got true"):
        decide(any_store, pause.id, {"r3": Edit({"order_id": 9, "amount": True})})
    assert len(session.tree()) == nodes
    decide(any_store, pause.id, {"r3": Reject("no"), "r4": Edit({"order_id": 8, "amount": 0.5})})


def test_a_pause_written_before_schemas_were_recorded_takes_any_edit_as_before(any_store):
    session, pause, model = paused(any_store)
    old = {k: v for k, v in pause.payload.items() if k != "schemas"}
    # the same pause as an older sessiontree wrote it: no "schemas"
    session.move("main", to=pause.parent_id)
    old_pause = session.append(old, kind="pause", branch="main")
    decide(any_store, old_pause.id, {"r3": Edit(BAD)})  # nothing to check it against here
    REFUNDS.clear()
    steps = list(resume(any_store, old_pause.id, call=model, tools=[refund]))
    told = [s.node.payload["content"] for s in steps if type(s).__name__ == "ToolEnd"]
    assert told == [f"Error: invalid arguments for refund: {WRONG}"]  # what the run says of it
    assert REFUNDS == []


# -- the CLI and the web inbox --------------------------------------------------------


def test_edit_call_refuses_a_bad_edit_in_one_line_and_writes_nothing(db_target):
    with Store(db_target) as store:
        session, pause, _ = paused(store)
        before = public_rows_of(store)
    runner = CliRunner()
    result = runner.invoke(
        cli, ["--db", db_target, "edit-call", pause.id, "r3", json.dumps(BAD)], prog_name="sessiontree"
    )
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr == (
        "Usage: sessiontree edit-call [OPTIONS] PAUSE CALL ARGUMENTS\n"
        "Try 'sessiontree edit-call --help' for help.\n"
        "\n"
        f"Error: Invalid value for ARGUMENTS: {REFUSAL}\n"
    )
    with Store(db_target) as store:
        assert public_rows_of(store) == before
    good = runner.invoke(
        cli, ["--db", db_target, "edit-call", pause.id, "r3", '{"order_id": 9, "amount": 1}']
    )
    assert good.exit_code == 0, good.output
    with Store(db_target) as store:
        (decision,) = store.session(session.id).children(pause.id)
    assert good.stdout == (
        # (the pause was made by a testing.ScriptedModel, which a command cannot rebuild)
        f"decision {decision.id} on pause {pause.id}: r3\nresume with: "
        f"{shlex.join(['sessiontree', '--db', db_target, 'resume', pause.id])} --model MODEL\n"
    )
    assert decision.payload["decisions"] == {
        "r3": {"action": "edit", "arguments": {"order_id": 9, "amount": 1}}
    }


def test_the_inbox_refuses_a_bad_edit_with_the_message_and_writes_nothing(db_target, app_client):
    pytest.importorskip("starlette", reason="the web extra is not installed")
    from sessiontree.view import server

    with Store(db_target) as store:
        session, pause, _ = paused(store)
        before = public_rows_of(store)
    c = app_client(server.create_app(db_target, allow_decide=True, token="t0k"))
    url, auth = f"/api/pauses/{pause.id}/decision", {"X-Sessiontree-Token": "t0k"}
    bad = c.post(url, json={"decisions": {"r3": {"action": "edit", "arguments": BAD}}}, headers=auth)
    assert bad.status_code == 400
    assert bad.json() == {"error": f"bad decision: {REFUSAL}"}
    with Store(db_target) as store:
        assert public_rows_of(store) == before
    edit = {"action": "edit", "arguments": {"order_id": 9, "amount": 1}}
    ok = c.post(url, json={"decisions": {"r3": edit}}, headers=auth)
    assert ok.status_code == 200, ok.text
    with Store(db_target) as store:
        assert store.node(ok.json()["decision"]).payload["decisions"] == {"r3": edit}


# -- the decide-time check is the run-time check ---------------------------------------


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
    mode: Literal["fast", "exact", 3] = "fast",
    limits: dict[str, float] | None = None,
    key: int | str = 0,
) -> str:
    """Forecast the weather."""
    return "ok"


@tool
def plain(n: int, x: float, flag: bool, text: str, anything: Any = None) -> str:
    """Scalars."""
    return "ok"


TOOLS = {"forecast": forecast, "plain": plain}
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.floats(-3, 3)
    | st.sampled_from(["", "x", "celsius", "fast"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["city", "days", "hourly", "z"]), inner, max_size=3)
    ),
    max_leaves=6,
)


def conforms(value: Any, annotation: Any) -> bool:
    """Whether a parsed value has the Python type its annotation promises."""
    kinds = {int: int, float: float, bool: bool, str: str, Unit: Unit, Place: Place}
    if annotation in kinds:
        return isinstance(value, kinds[annotation]) and not (
            annotation in (int, float) and isinstance(value, bool)
        )
    return True


def valid(annotation: Any) -> st.SearchStrategy[Any]:
    """JSON values that fit a type hint of the tools above, by the type hint alone."""
    scalars = {
        int: st.integers() | st.integers(-3, 3).map(float),
        float: st.integers() | st.floats(allow_nan=False, allow_infinity=False),
        bool: st.booleans(),
        str: st.text(max_size=3),
        Any: JSON,
    }
    if annotation in scalars:
        return scalars[annotation]
    if annotation is Unit:
        return st.sampled_from([u.value for u in Unit])
    if annotation is Place:
        return st.fixed_dictionaries({"city": valid(str)}, optional={"country": valid(str)})
    if annotation is Window:
        return st.fixed_dictionaries({"days": valid(int), "hourly": valid(bool)})
    options = {
        forecast.fields["tags"]: st.none() | st.lists(valid(str), max_size=3),
        forecast.fields["mode"]: st.sampled_from(["fast", "exact", 3, 3.0]),
        forecast.fields["limits"]: st.none() | st.dictionaries(valid(str), valid(float), max_size=2),
        forecast.fields["key"]: valid(int) | valid(str),
    }
    return options[annotation]


def valid_arguments(t) -> st.SearchStrategy[dict[str, Any]]:
    required = {k: valid(a) for k, a in t.fields.items() if k in t.required}
    return st.fixed_dictionaries(
        required, optional={k: valid(a) for k, a in t.fields.items() if k not in required}
    )


@st.composite
def arguments(draw, t) -> dict[str, Any]:
    """Argument objects for tool ``t``: fitting ones, and fitting ones spoilt in a few
    places (a field left out, or given any JSON value, or one the tool does not take)."""
    args = draw(valid_arguments(t))
    if draw(st.booleans()):
        for name in draw(st.lists(st.sampled_from([*t.fields, "extra"]), min_size=1, max_size=3)):
            if draw(st.booleans()):
                args.pop(name, None)
            else:
                args[name] = draw(JSON)
    return args


def test_the_check_at_decide_time_is_the_check_at_run_time(tmp_path):
    with Store(tmp_path / "agree.db") as store:
        pauses = {}
        for name, t in TOOLS.items():
            _, pause, _ = paused(
                store, tool_call(name, {}, id="c1"), approve=lambda c: Pause("ask"), tools=[t]
            )
            pauses[name] = store.node(pause.id)  # the schema as stored and read back

    @settings(max_examples=100, deadline=None)
    @given(st.sampled_from(sorted(TOOLS)).flatmap(lambda n: st.tuples(st.just(n), arguments(TOOLS[n]))))
    def agree(case):
        name, args = case
        t = TOOLS[name]
        try:
            parsed = t.parse(json.dumps(args))
        except ToolArgumentError as e:
            at_run = str(e)
        else:
            at_run = None
            assert all(conforms(parsed[k], t.fields[k]) for k in parsed)
        try:
            check_decisions(pauses[name], {"c1": Edit(args)})
        except ToolArgumentError as e:
            assert at_run is not None, f"decide refused what the run accepts: {e}"
            assert str(e) == f"edit of call c1 ({name}): {at_run} (nothing was written)"
        else:
            assert at_run is None, f"decide accepted what the run refuses: {at_run}"

    agree()


@settings(max_examples=100, deadline=None)
@given(st.sampled_from([forecast, plain]).flatmap(lambda t: st.tuples(st.just(t), valid_arguments(t))))
def test_arguments_that_fit_the_type_hints_pass_the_check(case):
    t, args = case
    assert schema_check.problems(args, json.loads(json.dumps(t.parameters))) == []
    parsed = t.parse(json.dumps(args))
    assert all(conforms(parsed[k], t.fields[k]) for k in parsed)


@pytest.mark.parametrize(
    ("value", "schema", "found"),
    [
        (3, {"type": ["string", "null"]}, ["a: expected a string or null, got 3"]),
        ("x", {"const": "y"}, ['a: expected "y", got "x"']),
        (True, {"enum": [1]}, ["a: expected one of 1, got true"]),
        (1.0, {"enum": [1]}, []),
        (0, {"minimum": 1, "maximum": 0}, ["a: expected a number at least 1, got 0"]),
        (5, {"exclusiveMaximum": 5}, ["a: expected a number less than 5, got 5"]),
        (
            "abc",
            {"minLength": 4, "maxLength": 2},
            ['a: expected at least 4 characters, got "abc"', 'a: expected at most 2 characters, got "abc"'],
        ),
        ([1], {"minItems": 2}, ["a: expected at least 2 items, got [1]"]),
        (
            2,
            {"oneOf": [{"type": "integer"}, {"type": "number"}]},
            ["a: fits more than one of the options of a oneOf, got 2"],
        ),
        (2.5, {"oneOf": [{"type": "integer"}, {"type": "number"}]}, []),
        ({"q": 1}, {"additionalProperties": {"type": "string"}}, ["a.q: expected a string, got 1"]),
        ({}, {"type": "object", "properties": {}, "additionalProperties": False, "required": []}, []),
        ("x", {"format": "email", "pattern": "^$", "$ref": "#/nowhere"}, []),  # not understood: ignored
        (
            "x",
            {"allOf": [{"type": "string"}, {"maxLength": 0}]},
            ['a: expected at most 0 characters, got "x"'],
        ),
        (None, {"anyOf": [{"type": "integer"}, {"type": "null"}]}, []),
        ("x", {"anyOf": [{"type": "integer"}, {"type": "null"}]}, ['a: expected an integer, got "x"']),
        ("x", {"anyOf": [{"type": "null"}]}, ['a: expected null, got "x"']),
    ],
)
def test_schema_keywords(value, schema, found):
    assert schema_check.problems(value, schema, "a") == found
