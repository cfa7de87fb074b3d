"""yoagent's session JSONL and flat message array: in, out byte for byte, refusals.

The fixtures in tests/fixtures/yoagent were written by yoagent's own serde declarations
(0.18.0 for the current files, 0.12.0 for the legacy ones), rebuilt in a scratch Rust
crate against serde_json: see tests/fixtures/yoagent/README.md. yoagent 0.18 loads each
``legacy-0.12-X`` and writes it back as ``X`` byte for byte.
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
FORKED = FIXTURES / "forked.jsonl"
CURRENT = sorted(p for p in FIXTURES.glob("*.jsonl") if not p.name.startswith("legacy-"))
FLAT = sorted(p for p in FIXTURES.glob("*.messages.json") if not p.name.startswith("legacy-"))
MESSAGES = FIXTURES / "forked.messages.json"
LEGACY = FIXTURES / "legacy-0.12-forked.jsonl"
LEGACY_MESSAGES = FIXTURES / "legacy-0.12-forked.messages.json"


def _resaved(legacy: Path) -> Path:
    """What yoagent 0.18 writes after loading a legacy file: its current twin, byte for
    byte (checked with the generator's ``resave``; see the README)."""
    return FIXTURES / legacy.name.removeprefix("legacy-0.12-")


def _entries(session) -> dict[str, object]:
    """Node by yoagent entry id."""
    return {n.payload["raw"]["yoagent"]["id"]: n for n in session.tree()}


def _shape(session) -> list[tuple]:
    """The tree as sessiontree holds it: ids, parents, kinds, payloads, times, refs."""
    nodes = [(n.id, n.parent_id, n.kind, n.payload, n.created_at) for n in session.tree()]
    refs = sorted((b.name, b.head_id) for b in session.branches())
    marks = sorted((c.name, c.node_id) for c in session.checkpoints())
    return [*nodes, refs, marks]


def test_every_generated_fixture_is_tested():
    made = {p.name for p in FIXTURES.iterdir() if p.name != "README.md"}
    assert made == {p.name for p in [*CURRENT, *FLAT, LEGACY, LEGACY_MESSAGES]} and len(made) == 9


@pytest.mark.parametrize("path", CURRENT, ids=lambda p: p.name)
def test_a_file_yoagent_wrote_round_trips_byte_for_byte(any_store, tmp_path, path):
    assert detect_format(path) == "yoagent"
    (s,) = import_file(any_store, path)
    assert any_store.verify().ok
    out = export_file(any_store, tmp_path / "out.jsonl", "yoagent", session_ids=[s.id])
    assert out.read_bytes() == path.read_bytes()


@pytest.mark.parametrize("path", [LEGACY, LEGACY_MESSAGES], ids=lambda p: p.name)
def test_a_legacy_file_comes_back_as_yoagent_now_writes_it(any_store, tmp_path, path):
    fmt = "yoagent" if path.suffix == ".jsonl" else "yoagent-messages"
    assert detect_format(path) == fmt
    (s,) = import_file(any_store, path)
    assert any_store.verify().ok
    out = export_file(any_store, tmp_path / f"out{path.suffix}", fmt, session_ids=[s.id])
    assert out.read_bytes() == _resaved(path).read_bytes()
    with Store(str(tmp_path / "again.db")) as other:
        (again,) = import_file(other, out)
        assert _shape(again) == _shape(s)


def test_a_legacy_file_imports_to_the_tree_of_its_current_twin(any_store, tmp_path):
    (legacy,) = import_file(any_store, LEGACY)
    with Store(str(tmp_path / "current.db")) as other:
        (current,) = import_file(other, FORKED)
        assert _shape(legacy) == _shape(current)


@pytest.mark.parametrize("path", FLAT, ids=lambda p: p.name)
def test_the_flat_message_array_round_trips_byte_for_byte(any_store, tmp_path, path):
    assert detect_format(path) == "yoagent-messages"
    (s,) = import_file(any_store, path)
    assert any_store.verify().ok
    out = export_file(any_store, tmp_path / "out.json", "yoagent-messages", session_ids=[s.id])
    assert out.read_bytes() == path.read_bytes()


def test_the_flat_array_is_the_session_files_main_path(any_store, tmp_path):
    (s,) = import_file(any_store, FORKED)
    out = export_file(any_store, tmp_path / "out.json", "yoagent-messages", session_ids=[s.id])
    assert out.read_bytes() == MESSAGES.read_bytes()


def test_the_same_file_imports_to_the_same_ids(any_store, tmp_path):
    (first,) = import_file(any_store, FORKED)
    (again,) = import_file(any_store, FORKED)
    assert first.id == again.id and len(any_store.sessions()) == 1
    with Store(str(tmp_path / "other.db")) as other:
        (elsewhere,) = import_file(other, FORKED)
        assert elsewhere.id == first.id
        assert _shape(elsewhere) == _shape(first)


def test_the_tree_maps_onto_branches_checkpoints_runs_and_notes(any_store):
    (s,) = import_file(any_store, FORKED)
    e = _entries(s)
    assert len(e) == 15
    # the last line is main's head; the two other leaves get branches
    assert {b.name: b.head_id for b in s.branches()} == {
        "main": e["e15"].id,
        "leaf-e6": e["e6"].id,
        "leaf-e13": e["e13"].id,
    }
    # "reviewed" labels e4 and e12: the checkpoint names the entry created last
    assert {c.name: c.node_id for c in s.checkpoints()} == {"reviewed": e["e12"].id, "done": e["e15"].id}
    assert e["e7"].parent_id == e["e4"].id and e["e13"].parent_id == e["e1"].id  # the forks
    assert e["e11"].kind == "note"  # the extension message
    sent = s.messages("main")
    assert [m["role"] for m in sent] == [
        "user", "assistant", "tool", "assistant", "user", "assistant", "tool", "tool", "assistant", "user", "assistant",
    ]  # fmt: skip
    assert sent[0]["content"].endswith("</script>\n[image]")
    calls = sent[5]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["list_tools", "plot"]
    assert json.loads(calls[0]["function"]["arguments"]) == {}
    assert json.loads(calls[1]["function"]["arguments"])["size"] == {"h": 480, "w": 640}
    failed = {k: v for k, v in sent[7].items() if k != "raw"}
    assert failed == {"role": "tool", "content": "permission denied: /dev/fb0\x07\t\u2028",
                      "tool_call_id": "toolu_03", "name": "plot"}  # fmt: skip
    kept = e["e2"].payload["raw"]["yoagent"]["message"]["content"]
    assert kept[0]["signature"] == "EqQBCkgIARABGAIiQHq1/Zx+k9w=="
    assert kept[2]["providerMetadata"]["thoughtSignature"] == "c2lnbmF0dXJlLzE="
    r = any_store.run(e["e2"].run_id)
    assert (r.model, r.provider, r.finish_reason) == ("gemini-2.5-pro", "google", "toolUse")
    assert (r.usage["input_tokens"], r.usage["output_tokens"], r.usage["cacheRead"]) == (812, 64, 512)
    assert e["e6"].payload["raw"]["yoagent"]["message"]["errorMessage"].startswith("HTTP 529")
    assert any_store.run(e["e13"].run_id).finish_reason == "refusal"


def test_every_stop_reason_becomes_the_runs_finish_reason(any_store):
    (s,) = import_file(any_store, FIXTURES / "stop-reasons.jsonl")
    reasons = [any_store.run(n.run_id).finish_reason for n in s.tree() if n.run_id]
    assert reasons == ["length", "aborted", "stop"]
    assert {c.name for c in s.checkpoints()} == {"start"}


def test_calls_the_file_left_open_are_answered_for_the_model_and_not_exported(any_store):
    (s,) = import_file(any_store, FIXTURES / "open-calls.jsonl")
    sent = [(m["role"], m.get("tool_call_id")) for m in s.messages("main")]
    # c_c was never answered: a made-up answer keeps the history valid for a model; the
    # head's own call (c_d) stays open; the answer to no call (c_zz) is a note
    assert sent == [("user", None), ("assistant", None), ("tool", "c_b"), ("tool", "c_a"),
                    ("tool", "c_c"), ("assistant", None)]  # fmt: skip
    assert [n.kind for n in s.tree()].count("note") == 2  # the extension and c_zz's answer


def test_entries_written_in_one_millisecond_keep_their_order(any_store, tmp_path):
    # append_new after a run writes e2..e4 (and e8..e11) with one timestamp
    (s,) = import_file(any_store, FORKED)
    e = _entries(s)
    assert e["e2"].created_at == e["e3"].created_at == e["e4"].created_at
    out = export_file(any_store, tmp_path / "out.jsonl", "yoagent", session_ids=[s.id]).read_text()
    assert [json.loads(line)["id"] for line in out.split("\n")] == [f"e{i}" for i in range(1, 16)]


def test_missing_cache_fields_are_written_back_as_yoagent_defaults_them(any_store, tmp_path):
    # yoagent's Usage defaults cacheRead, cacheWrite and totalTokens to 0 when absent
    path = tmp_path / "short.jsonl"
    line = json.loads(FORKED.read_text().split("\n")[5])  # e6: an assistant with an error
    line["parent_id"] = None
    line["message"]["usage"] = {"input": 1, "output": 2}
    line["message"]["error_message"] = line["message"].pop("errorMessage")
    path.write_text(json.dumps(line))
    (s,) = import_file(any_store, path)
    out = export_file(any_store, tmp_path / "out.jsonl", "yoagent", session_ids=[s.id])
    out = json.loads(out.read_text())
    zeros = {"cacheRead": 0, "cacheWrite": 0, "totalTokens": 0}
    assert out["message"]["usage"] == {"input": 1, "output": 2, **zeros}
    assert list(out["message"])[-1] == "errorMessage" and "error_message" not in out["message"]


def test_export_refuses_a_main_head_with_children(any_store, tmp_path):
    (s,) = import_file(any_store, FORKED)
    s.move("main", to=_entries(s)["e4"].id)
    with pytest.raises(FormatError, match="main's head .* has children"):
        export_file(any_store, tmp_path / "out.jsonl", "yoagent", session_ids=[s.id])
    assert not (tmp_path / "out.jsonl").exists()


def test_export_refuses_two_checkpoints_on_one_node(any_store, tmp_path):
    (s,) = import_file(any_store, FORKED)
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
    (s,) = import_file(any_store, FORKED)
    model = ScriptedModel(["carried on"])
    s.append({"role": "user", "content": "go on"})
    list(run(any_store, s, call=model))
    sent = json.dumps(model.calls[0]["messages"])
    assert "yoagent" not in sent and '"raw"' not in sent
    assert "yoagent" not in json.dumps(export_openai(s))


def test_a_lone_surrogate_is_refused_as_yoagent_refuses_it(any_store, tmp_path):
    # JSON's \u escapes let an unpaired surrogate in; serde_json (so yoagent) refuses it
    bad = tmp_path / "bad.jsonl"
    message = {"role": "user", "content": [{"type": "text", "text": "a\ud800b"}], "timestamp": 1}
    bad.write_text(_entry() + "\n" + _entry(id="e2", parent_id="e1", message=message))  # dumped as \\ud800
    with pytest.raises(FormatError, match=r"^bad.jsonl line 2: a string holds a lone surrogate"):
        import_file(any_store, bad, "yoagent")
    assert any_store.sessions() == []


@pytest.mark.parametrize(("fmt", "name"), [("yoagent", "out.jsonl"), ("yoagent-messages", "out.json")])
def test_export_refuses_a_lone_surrogate_it_cannot_write(any_store, tmp_path, fmt, name):
    s = any_store.create_session()
    s.append({"role": "user", "content": "a\ud800b"})  # a store keeps it (as a \u escape)
    with pytest.raises(FormatError, match="holds a lone surrogate"):
        export_file(any_store, tmp_path / name, fmt, session_ids=[s.id])
    assert not (tmp_path / name).exists()


def test_the_cli_export_into_a_pipe_is_the_file_byte_for_byte(tmp_path):
    from click.testing import CliRunner

    from sessiontree.cli import cli

    source = FIXTURES / "values.jsonl"
    db = str(tmp_path / "pipe.db")
    runner = CliRunner()
    imported = runner.invoke(cli, ["--db", db, "import", str(source), "--json"], catch_exceptions=False)
    session = json.loads(imported.stdout)[0]["sessions"][0]["id"]
    out = runner.invoke(cli, ["--db", db, "export", session, "--format", "yoagent"], catch_exceptions=False)
    assert out.stdout_bytes == source.read_bytes()
