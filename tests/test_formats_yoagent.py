"""yoagent's session JSONL and flat message array: in, out byte for byte, refusals.

The fixtures in tests/fixtures/yoagent were written by hand from yoagent 0.18's serde
declarations (src/session.rs, src/types.rs): struct fields in declaration order, keys
inside JSON values sorted, lines joined by newlines with none after the last.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sessiontree import Store, run
from sessiontree.formats import FormatError, detect_format, export_file, import_file
from sessiontree.formats.openai import export_openai
from sessiontree.testing import ScriptedModel

FIXTURES = Path(__file__).parent / "fixtures" / "yoagent"
CURRENT, LEGACY, MESSAGES = FIXTURES / "current.jsonl", FIXTURES / "legacy.jsonl", FIXTURES / "messages.json"


def test_current_file_round_trips_byte_for_byte(any_store, tmp_path):
    assert detect_format(CURRENT) == "yoagent"
    (s,) = import_file(any_store, CURRENT)
    assert any_store.verify().ok
    out = export_file(any_store, tmp_path / "out.jsonl", "yoagent", session_ids=[s.id])
    assert out.read_bytes() == CURRENT.read_bytes()


def test_the_same_file_imports_to_the_same_ids(any_store, tmp_path):
    (first,) = import_file(any_store, CURRENT)
    (again,) = import_file(any_store, CURRENT)
    assert first.id == again.id and len(any_store.sessions()) == 1
    with Store(str(tmp_path / "other.db")) as other:
        (elsewhere,) = import_file(other, CURRENT)
        assert elsewhere.id == first.id
        assert [n.id for n in elsewhere.tree()] == [n.id for n in first.tree()]


def test_the_tree_maps_onto_branches_checkpoints_runs_and_notes(any_store):
    (s,) = import_file(any_store, CURRENT)
    nodes = {n.payload["raw"]["yoagent"]["id"]: n for n in s.tree()}
    assert s.branch("main").head_id == nodes["e6"].id
    assert {b.name: b.head_id for b in s.branches()}["leaf-e4"] == nodes["e4"].id
    # "start" labels e1 and e3; the checkpoint names the entry created last
    assert {c.name: c.node_id for c in s.checkpoints()} == {"start": nodes["e3"].id, "done": nodes["e6"].id}
    assert nodes["e5"].kind == "note"  # the extension message
    sent = s.messages("main")
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "assistant"]
    call = sent[1]["tool_calls"][0]
    assert json.loads(call["function"]["arguments"])["path"] == "x.txt"
    run = any_store.run(nodes["e2"].run_id)
    assert (run.model, run.provider, run.finish_reason) == ("gpt-x", "openai", "toolUse")
    assert run.usage["input_tokens"] == 12 and run.usage["cacheRead"] == 3


def test_legacy_keys_are_read_and_written_back_as_yoagent_writes_them_now(any_store, tmp_path):
    (s,) = import_file(any_store, LEGACY)
    assert any_store.verify().ok
    out = export_file(any_store, tmp_path / "out.jsonl", "yoagent", session_ids=[s.id]).read_text()
    second = json.loads(out.split("\n")[1])["message"]
    assert second["usage"] == {"input": 1, "output": 2, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 3}
    assert second["errorMessage"] == "boom" and "error_message" not in second
    assert second["content"][0]["providerMetadata"] == {"k": "v"}


def test_flat_message_array_round_trips(any_store, tmp_path):
    assert detect_format(MESSAGES) == "yoagent-messages"
    (s,) = import_file(any_store, MESSAGES)
    out = export_file(any_store, tmp_path / "out.json", "yoagent-messages", session_ids=[s.id])
    assert out.read_bytes() == MESSAGES.read_bytes()


def test_export_refuses_a_main_head_with_children(any_store, tmp_path):
    (s,) = import_file(any_store, CURRENT)
    nodes = {n.payload["raw"]["yoagent"]["id"]: n for n in s.tree()}
    s.move("main", to=nodes["e3"].id)
    with pytest.raises(FormatError, match="main's head .* has children"):
        export_file(any_store, tmp_path / "out.jsonl", "yoagent", session_ids=[s.id])
    assert not (tmp_path / "out.jsonl").exists()


def test_export_refuses_two_checkpoints_on_one_node(any_store, tmp_path):
    (s,) = import_file(any_store, CURRENT)
    s.checkpoint("again", at=s.branch("main").head_id)
    with pytest.raises(FormatError, match="two checkpoints"):
        export_file(any_store, tmp_path / "out.jsonl", "yoagent", session_ids=[s.id])


def _entry(**fields):
    entry = {"id": "e1", "parent_id": None, "message": {"role": "user", "content": [], "timestamp": 1}}
    entry["timestamp"] = 1
    entry.update(fields)
    return json.dumps(entry)


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ([_entry(), _entry()], "line 2: entry id 'e1' appears twice"),
        ([_entry(parent_id="e9")], "line 1: parent 'e9' has not appeared before this entry"),
        ([_entry(id=["e1"])], "line 1: 'id' should be a string, got an array"),
        ([_entry(timestamp="soon")], "line 1: 'timestamp' should be a whole number"),
        ([_entry(label=3)], "line 1: 'label' should be a string, got an integer"),
        ([_entry(), "[" * 100_000 + "]" * 100_000], "line 2: JSON nested too deeply"),
    ],
)
def test_hostile_lines_are_one_located_error_and_nothing_is_written(any_store, tmp_path, lines, message):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines))
    with pytest.raises(FormatError) as raised:
        import_file(any_store, bad, "yoagent")
    assert str(raised.value).startswith(f"bad.jsonl {message}")
    assert "\n" not in str(raised.value)
    assert any_store.sessions() == []


def test_bad_utf8_is_located(any_store, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(_entry().encode() + b"\n" + _entry(id="e2").encode().replace(b"e2", b"e\xff"))
    with pytest.raises(FormatError, match=r"bad.jsonl line 2: not UTF-8"):
        import_file(any_store, bad, "yoagent")
    assert any_store.sessions() == []


def test_what_the_import_keeps_is_never_sent_to_a_model(any_store):
    (s,) = import_file(any_store, CURRENT)
    model = ScriptedModel(["carried on"])
    s.append({"role": "user", "content": "go on"})
    list(run(any_store, s, call=model))
    sent = json.dumps(model.calls[0]["messages"])
    assert "yoagent" not in sent and '"raw"' not in sent
    assert "yoagent" not in json.dumps(export_openai(s))
