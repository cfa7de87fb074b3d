"""Node-kind records (``sessiontree.kinds``): every payload reads into its record and writes
back byte for byte, and what the code writes through the records is what it always wrote.

The round trip is checked three ways: on payloads hypothesis builds in every shape the
code writes (optional keys present or not, keys of adapters and imports beside them, any
key order), on every payload the fixture files import to, and on every node of the stored
test databases (tests/fixtures/schema_v*.db).
"""

from __future__ import annotations

import json
import math
import shutil
import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessiontree import Approve, Edit, Reject, Store, decide, ids, kinds, run, tool
from sessiontree.decisions import decision_from_dict, decision_to_dict
from sessiontree.errors import Conflict, InvalidPayload
from sessiontree.formats import import_file
from sessiontree.model import encode_payload
from sessiontree.testing import ScriptedModel, reply, tool_call

FIXTURES = Path(__file__).parent / "fixtures"


def assert_round_trip(kind: str, payload: dict) -> None:
    record = kinds.RECORDS[kind].from_payload(payload)
    back = record.to_payload()
    assert back == payload
    assert list(back) == list(payload)  # key order: the stored text is the same bytes
    assert encode_payload(back, kind) == encode_payload(payload, kind)


# -- payloads in every shape the code writes ------------------------------------------

text = st.text(max_size=12)
ident = st.text(st.characters(codec="ascii", categories=["L", "N"]), min_size=1, max_size=10)
json_value = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)
stamp = st.floats(0, 4e9).map(ids.iso)
extras = st.dictionaries(st.sampled_from(["raw", "source", "_id", "synthesised", "x-extra"]), json_value)


@st.composite
def shaped(draw, required: dict, optional: dict):
    """A payload with every ``required`` key, any of the ``optional`` ones, some extra keys
    (an adapter's ``raw``, an import's ``source``) and its keys in any order."""
    payload = {k: draw(v) for k, v in required.items()}
    for k, v in optional.items():
        if draw(st.booleans()):
            payload[k] = draw(v)
    for k, v in draw(extras).items():
        payload.setdefault(k, v)
    keys = draw(st.permutations(list(payload)))
    return {k: payload[k] for k in keys}


call = shaped({"id": ident}, {"name": ident, "arguments": text, "reason": text})
recipe = st.dictionaries(ident, json_value, max_size=4)
schemas = st.dictionaries(ident, st.dictionaries(ident, json_value, max_size=2), max_size=2)
entry = st.one_of(
    shaped({"action": st.just("approve")}, {}),
    shaped({"action": st.just("reject")}, {"reason": text}),
    shaped({"action": st.just("edit")}, {"arguments": st.dictionaries(ident, json_value, max_size=2)}),
)
covers = st.fixed_dictionaries({"first": ident, "last": ident, "nodes": st.integers(1, 99)})
tool_calls = st.lists(ident, min_size=1, max_size=3, unique=True).map(
    lambda names: [tool_call(n, {}, id=n) for n in names]
)

SHAPES = {
    "message": shaped(
        {"role": st.sampled_from(sorted(kinds.ROLES)), "content": st.none() | text},
        {"tool_calls": tool_calls, "tool_call_id": ident, "name": ident},
    ),
    "pause": shaped(
        {"reason": text, "assistant_id": st.none() | ident, "calls": st.lists(call, max_size=3)},
        {"schemas": schemas, "expires_at": stamp, "recipe": recipe},
    ),
    "tool_start": shaped({"calls": st.lists(call, max_size=3)}, {"recipe": recipe}),
    "decision": shaped(
        {"decisions": st.dictionaries(ident, entry, max_size=3), "by": st.none() | text},
        {"reason": st.just("expired"), "at": stamp},
    ),
    "error": shaped(
        {"error": ident, "message": text},
        {"during": text, "at": stamp, "status": st.integers(100, 599), "raw": text},
    ),
    "note": shaped({}, {"type": ident, "limit": ident, "message": text, "text": text, "decision": ident}),
    "summary": shaped({"summary": text}, {"covers": covers, "role": st.sampled_from(["user", "system"])}),
    "score": shaped(
        {"value": st.integers(-5, 5) | st.floats(-1e6, 1e6), "scorer": ident}, {"note": st.none() | text}
    ),
}


@pytest.mark.parametrize("kind", sorted(SHAPES))
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_every_written_shape_round_trips_byte_for_byte(kind, data):
    assert_round_trip(kind, data.draw(SHAPES[kind]))


def test_every_kind_has_a_record():
    assert {"message", "pause", "decision", "error", "tool_start", "note", "summary", "score"} == kinds.KINDS
    assert {k: r.KIND for k, r in kinds.RECORDS.items()} == {k: k for k in kinds.KINDS}


# -- what the code writes through the records ------------------------------------------


@tool(requires_approval=True, approval_timeout=60)
def send(to: str) -> str:
    """Send something."""
    return f"sent to {to}"


@tool
def look(q: str) -> str:
    """Look something up."""
    return q


def test_the_loop_writes_the_keys_it_always_wrote_in_the_same_order(tmp_path):
    store = Store(tmp_path / "t.db")
    s = store.create_session()
    s.append({"role": "user", "content": "go"})
    model = ScriptedModel(
        [
            reply(None, tool_call("look", {"q": "x"}, id="c1")),
            reply(None, tool_call("send", {"to": "bob"}, id="c2")),
            reply("done"),
        ]
    )
    steps = list(run(store, s, call=model, tools=[look, send]))
    pause = steps[-1].node
    started = next(n for n in s.path("main") if n.kind == "tool_start")
    assert list(started.payload) == ["calls", "recipe"]
    assert started.payload["calls"] == [{"id": "c1", "name": "look", "arguments": '{"q": "x"}'}]
    assert list(pause.payload) == ["reason", "assistant_id", "calls", "schemas", "expires_at", "recipe"]
    assert pause.payload["calls"] == [
        {"id": "c2", "name": "send", "arguments": '{"to": "bob"}', "reason": "send requires approval"}
    ]
    decision = decide(store, pause.id, {"c2": Reject("no")}, by="ann")
    assert list(decision.payload) == ["decisions", "by", "at"]
    assert decision.payload["decisions"] == {"c2": {"action": "reject", "reason": "no"}}
    for node in s.tree():
        assert_round_trip(node.kind, node.payload)
        assert encode_payload(kinds.read(node).to_payload(), node.kind) == node.payload_json


def test_decisions_encode_as_they_always_did():
    assert decision_to_dict(Approve()) == {"action": "approve"}
    assert decision_to_dict(Reject("why")) == {"action": "reject", "reason": "why"}
    assert decision_to_dict(Edit({"a": 1})) == {"action": "edit", "arguments": {"a": 1}}
    assert decision_from_dict({"action": "reject"}) == Reject("")
    assert decision_from_dict({"action": "edit"}) == Edit({})
    with pytest.raises(ValueError, match="unknown decision action 'maybe'"):
        decision_from_dict({"action": "maybe"})


def test_each_record_checks_its_own_shape_with_a_one_line_error():
    cases = {
        "pause": ({"calls": [{"name": "x"}]}, "a pause payload needs 'calls' to be a list of objects"),
        "tool_start": ({"calls": "c1"}, "a tool_start payload needs 'calls'"),
        "decision": ({"decisions": {"c1": {"action": "maybe"}}}, "a decision payload needs 'decisions'"),
        "score": ({"value": math.nan, "scorer": "j"}, "a score payload needs 'value' to be a finite"),
        "message": ({"role": "robot"}, "a message payload needs 'role'"),
    }
    for kind, (payload, said) in cases.items():
        with pytest.raises(InvalidPayload, match=said):
            kinds.RECORDS[kind].from_payload(payload)
        with pytest.raises(InvalidPayload, match=said):
            encode_payload(payload, kind)
    with pytest.raises(InvalidPayload, match="unknown node kind 'thought'"):
        encode_payload({}, "thought")


def test_from_node_names_a_node_of_another_kind(tmp_path):
    store = Store(tmp_path / "t.db")
    node = store.create_session().append({"role": "user", "content": "hi"})
    with pytest.raises(Conflict, match=f"node {node.id} is a message node, not a pause"):
        kinds.PausePayload.from_node(node)


# -- every payload of the fixtures and the stored test databases ------------------------

IMPORTS = sorted(
    p
    for folder in ("conversations", "real", "yoagent")
    for p in (FIXTURES / folder).rglob("*")
    if p.suffix in (".json", ".jsonl")
    and not p.name.endswith(".messages.json")
    # refused whole, by design: a uuid twice (tests/test_formats_real.py)
    and p.name != "claude-code-log-edge_cases.jsonl"
)


@pytest.mark.parametrize("path", IMPORTS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_every_imported_fixture_payload_round_trips(tmp_path, path):
    store = Store(tmp_path / "t.db")
    sessions = import_file(store, path, skip_invalid=True, report=lambda line: None)
    nodes = [n for s in sessions for n in s.tree()]
    assert nodes
    for node in nodes:
        assert_round_trip(node.kind, node.payload)
        assert encode_payload(kinds.read(node).to_payload(), node.kind) == node.payload_json


@pytest.mark.parametrize("name", ["schema_v1.db", "schema_v2.db"])
def test_every_payload_of_the_stored_test_databases_round_trips(tmp_path, name):
    copy = tmp_path / name
    shutil.copy(FIXTURES / name, copy)
    with sqlite3.connect(copy) as db:
        rows = db.execute("SELECT kind, payload FROM nodes").fetchall()
    assert {kind for kind, _ in rows} >= {"message", "pause", "decision"}
    for kind, text_ in rows:
        payload = json.loads(text_)
        assert_round_trip(kind, payload)
        assert json.dumps(kinds.RECORDS[kind].from_payload(payload).to_payload(), **COMPACT) == json.dumps(
            payload, **COMPACT
        )


COMPACT: dict = {"ensure_ascii": False, "separators": (",", ":")}


# -- one time formatter and one call-id recipe ------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.floats(0, 253402300799.999))
def test_iso_writes_what_each_old_formatter_wrote(t):
    whole, ms = divmod(round(t * 1000), 1000)
    if whole > 253402300799:
        return
    old = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{ms:03d}Z"  # ids, deadlines
    assert ids.iso(t) == old
    cutoff = time.strftime("%Y-%m-%dT%H:%M:%S.999Z", time.gmtime(t))  # prune's cutoff
    assert ids.iso(math.floor(t) + 0.999) == cutoff
    assert ids.is_stamp(ids.iso(t))


@settings(max_examples=300, deadline=None)
@given(st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)))
def test_imported_times_are_cut_to_the_millisecond_as_before(moment):
    from sessiontree.formats.common import iso

    old = moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    assert iso(moment.isoformat()) == old


def test_one_call_id_recipe():
    made = {ids.new_call_id() for _ in range(100)}
    assert len(made) == 100 and all(len(c) == 21 and c.startswith("call_") for c in made)
    node = "0190a3b4-c5d6-7e8f-9a0b-1c2d3e4f5a6b"
    assert ids.new_call_id(of=node) == "call_0190a3b4c5d67e8f9a0b1c2d" == ids.new_call_id(of=node)
