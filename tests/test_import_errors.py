"""Hostile import files: every bad input is one located line, never an internal error,
and an import is all or nothing.

Each file here is one of the real fixtures (tests/fixtures/conversations, see the
README there) with one thing broken, as the audit of imports found them: a field of
the wrong type, JSON nested too deeply, a native file without its header, an
orphan tool result, a title holding a NUL, a byte that is not UTF-8 past the
first megabyte, pi labels that are no valid names, a wrong declared depth.
"""

from __future__ import annotations

import json
import shutil
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessiontree import SessionTreeError, Store
from sessiontree.cli import cli
from sessiontree.formats import (
    FormatError,
    detect_format,
    export_native,
    import_file,
    parse_file,
)
from sessiontree.formats.jsonstream import CHUNK

FIXTURES = Path(__file__).parent / "fixtures" / "conversations"
CHATGPT, LIBRECHAT = FIXTURES / "chatgpt-tree.json", FIXTURES / "librechat-tree.json"
OPENWEBUI, CLAUDE = FIXTURES / "openwebui-chat.json", FIXTURES / "claude-code-tool_heavy.jsonl"
PI = FIXTURES / "pi-session-mixed-boundaries.jsonl"

Edit = Callable[[Any], None]


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def jsonl(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    return path


def edited(source: Path, target: Path, edit: Edit) -> Path:
    """A copy of a fixture (a JSON document, or JSONL as a list of records) after ``edit``."""
    if source.suffix == ".jsonl":
        lines = records(source)
        edit(lines)
        return jsonl(target, lines)
    data = json.loads(source.read_text(encoding="utf-8"))
    edit(data)
    target.write_text(json.dumps(data), encoding="utf-8")
    return target


def refused(store: Store, path: Path, message: str, format: str = "auto") -> None:
    """The import fails with exactly ``message`` and writes nothing."""
    with pytest.raises(SessionTreeError) as e:
        import_file(store, path, format, report=lambda line: None)
    assert str(e.value) == message
    assert store.sessions() == []


# -- 1. a field of the wrong type is a located error -------------------------------

CG_KEY = "aaa297ba-e2da-440e-84f4-e62e7be8b003"  # the first user message of chatgpt-tree.json
OW_KEY = "a9436447-add3-4bd8-a25f-6ce54b73903c"
LC_KEY = "9501f99d-9bbb-40cb-bbb2-16d79aeceb72"


def cg_message(data: Any) -> dict[str, Any]:
    return data[0]["mapping"][CG_KEY]["message"]


def ow_message(data: Any) -> dict[str, Any]:
    return data["history"]["messages"][OW_KEY]


CG_NODE = f"conversation 1, node {CG_KEY!r}"
WRONG_TYPES = [
    (
        CHATGPT,
        lambda d: cg_message(d).update(author="user"),
        f"{CG_NODE}: 'author' should be an object, got a string",
    ),
    (
        CHATGPT,
        lambda d: cg_message(d).update(author=5),
        f"{CG_NODE}: 'author' should be an object, got an integer",
    ),
    (
        CHATGPT,
        lambda d: cg_message(d).update(metadata=[1]),
        f"{CG_NODE}: 'metadata' should be an object, got an array",
    ),
    (
        CHATGPT,
        lambda d: cg_message(d).update(metadata="x"),
        f"{CG_NODE}: 'metadata' should be an object, got a string",
    ),
    (
        CHATGPT,
        lambda d: cg_message(d).update(metadata={"finish_details": "stop"}),
        f"{CG_NODE}, metadata: 'finish_details' should be an object, got a string",
    ),
    (
        CHATGPT,
        lambda d: cg_message(d).update(content={"content_type": "thoughts", "thoughts": 5}),
        f"{CG_NODE}, content: 'thoughts' should be an array, got an integer",
    ),
    (
        CHATGPT,
        lambda d: cg_message(d)["author"].update(role=["user"]),
        f"{CG_NODE}, author: 'role' should be a string, got an array",
    ),
    (
        CHATGPT,
        lambda d: d[0].update(current_node=["x"]),
        "conversation 1: 'current_node' should be a string, got an array",
    ),
    (
        OPENWEBUI,
        lambda d: ow_message(d).update(parentId=["x"]),
        f"chat, message {OW_KEY!r}: 'parentId' should be a string, got an array",
    ),
    (
        OPENWEBUI,
        lambda d: ow_message(d).update(role=["user"]),
        f"chat, message {OW_KEY!r}: 'role' should be a string, got an array",
    ),
    (
        LIBRECHAT,
        lambda d: d["messages"][0].update(parentMessageId=["x"]),
        f"conversation, message {LC_KEY!r}: 'parentMessageId' should be a string, got an array",
    ),
]


@pytest.mark.parametrize(("source", "edit", "message"), WRONG_TYPES, ids=[m for _, _, m in WRONG_TYPES])
def test_a_field_of_the_wrong_type_is_named_with_its_place(store, tmp_path, source, edit, message):
    """Before: AttributeError or "unhashable type", reported as an internal error."""
    path = edited(source, tmp_path / source.name, edit)
    refused(store, path, f"{source.name}: {message}")


def paths(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a decoded JSON document, the document itself included."""
    found = [at]
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths(item, (*at, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += paths(item, (*at, i))
    return found


def replaced(document: Any, at: tuple[Any, ...], value: Any) -> Any:
    if not at:
        return value
    parent = document
    for key in at[:-1]:
        parent = parent[key]
    parent[at[-1]] = value
    return document


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(
        ["", "x", "cafe", "user", "a\x00b", "\ud800", "a\nb", "00000000-0000-0000-0000-000000000000"]
    ),
    lambda inner: (
        st.lists(inner, max_size=2) | st.dictionaries(st.sampled_from(["", "a", "id"]), inner, max_size=2)
    ),
    max_leaves=4,
)
FUZZED = [CHATGPT, LIBRECHAT, OPENWEBUI, CLAUDE, PI]


@pytest.mark.parametrize("source", FUZZED, ids=lambda p: p.name)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_value_anywhere_imports_or_is_one_located_line(tmp_path, source, data):
    """Any field of a real file replaced by any JSON value: the import succeeds and the
    store verifies, or it fails with one line naming the file and writes nothing."""
    if source.suffix == ".jsonl":
        document: Any = records(source)
    else:
        document = json.loads(source.read_text(encoding="utf-8"))
    for _ in range(data.draw(st.integers(1, 2))):
        at = data.draw(st.sampled_from(paths(document)))
        document = replaced(document, at, data.draw(json_values))
    path = tmp_path / source.name
    if source.suffix == ".jsonl" and isinstance(document, list):
        path.write_text("".join(json.dumps(r) + "\n" for r in document), encoding="utf-8")
    else:
        path.write_text(json.dumps(document), encoding="utf-8")
    with Store(tmp_path / "fuzz.db") as store:
        before = store.verify().nodes
        try:
            import_file(store, path, report=lambda line: None)
        except SessionTreeError as e:
            message = str(e)
            assert "\n" not in message and message.startswith(path.name), message
            assert len(message) < 500, message
            assert store.verify().nodes == before
        assert store.verify().ok


# -- 2, 3. detection: nesting, and errors that name the file -------------------------


@pytest.mark.parametrize(
    "text",
    ['{"mapping": ' + "[" * 5000 + "]" * 5000 + "}", "[" * 5000 + "]" * 5000],
    ids=["one-line object", "array"],
)
def test_deep_nesting_found_while_detecting_is_one_line_naming_the_file(store, tmp_path, text):
    """Before: RecursionError (an internal error) for the object, and no file name for the array."""
    path = tmp_path / "deep.json"
    path.write_text(text)
    with pytest.raises(FormatError) as e:
        detect_format(path)
    assert str(e.value) == "deep.json: JSON nested too deeply"
    refused(store, path, "deep.json: JSON nested too deeply")


def test_a_truncated_file_named_when_found_while_detecting(store, tmp_path):
    """Before: "line 38: not valid JSON (...)", without the file."""
    path = tmp_path / "conversations.json"
    text = json.dumps(json.loads(CHATGPT.read_text()), indent=2)
    path.write_text(text[: text.index('"mapping"') + 40])
    with pytest.raises(FormatError, match=r"^conversations\.json line \d+: not valid JSON \(.*\)$"):
        detect_format(path)


def test_a_bad_byte_in_a_streamed_array_names_the_file_once(store, tmp_path):
    """Before: "conversations.json: conversations.json: not UTF-8 text (byte N)"."""
    conversation = json.loads(CHATGPT.read_text())[0]
    data = json.dumps([conversation] * (2 * CHUNK // len(json.dumps(conversation)) + 2)).encode()
    at = len(data) - 100
    path = tmp_path / "conversations.json"
    path.write_bytes(data[:at] + b"\xff" + data[at:])
    refused(store, path, f"conversations.json line 1: not UTF-8 text (byte 0xff at offset {at})")


# -- 4. a native file without its header line ---------------------------------------


@pytest.fixture
def native_lines(tmp_path) -> list[str]:
    """A native export of two real sessions (made in a store of its own)."""
    with Store(tmp_path / "source.db") as source:
        import_file(source, PI)
        import_file(source, OPENWEBUI)
        return list(export_native(source))


def test_a_native_file_without_its_header_is_refused_not_an_empty_pi_session(tmp_path, native_lines):
    """Before: detected as pi, imported as one empty session, exit code 0."""
    path = tmp_path / "export.jsonl"
    path.write_text("".join(native_lines[1:]))
    with Store(tmp_path / "fresh.db") as fresh:
        refused(
            fresh,
            path,
            'export.jsonl line 1: the header line {"format":"sessiontree","version":1} is missing',
        )
        refused(
            fresh,
            path,
            "export.jsonl line 1: not a pi session header (expected type 'session' with an 'id' and a 'timestamp')",
            "pi",
        )
        header = json.dumps(records(PI)[0]) + "\n"  # a real pi header, then native records
        path.write_text(header + "".join(native_lines[2:]))
        refused(
            fresh,
            path,
            "export.jsonl line 2: a sessiontree 'run' record, not a pi entry"
            ' (a native file needs its header line, {"format": "sessiontree", "version": 1})',
        )


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ({"version": True}, "line 1: unsupported pi session version True (versions 1 to 3 are supported)"),
        ({"version": 0}, "line 1: unsupported pi session version 0 (versions 1 to 3 are supported)"),
        ({"id": ["x"]}, "line 1: 'id' should be a string, got an array"),
    ],
)
def test_a_pi_header_with_a_wrong_version_or_id_is_refused(store, tmp_path, header, message):
    path = edited(PI, tmp_path / "pi.jsonl", lambda lines: lines[0].update(header))
    refused(store, path, f"pi.jsonl {message}")


# -- 5. Claude Code tool results that answer no call ---------------------------------


def tool_result_line(lines: list[dict[str, Any]]) -> dict[str, Any]:
    return next(
        block
        for r in lines
        if r.get("type") == "user" and isinstance(r["message"]["content"], list)
        for block in r["message"]["content"]
        if block.get("type") == "tool_result"
    )


def test_an_orphan_claude_code_tool_result_becomes_a_note_and_verify_passes(store, tmp_path):
    """Before: kept as a tool message, so `verify` failed ("answers no open call")."""
    path = edited(
        CLAUDE, tmp_path / "s.jsonl", lambda lines: tool_result_line(lines).update(tool_use_id="toolu_gone")
    )
    [session] = import_file(store, path)
    assert store.verify().ok
    [note] = [n for n in session.tree() if n.payload.get("tool_call_id") == "toolu_gone"]
    assert note.kind == "note"
    assert (note.payload["source"], note.payload["type"], note.payload["role"]) == (
        "claude-code",
        "tool_output",
        "tool",
    )


def test_a_claude_code_tool_use_id_that_is_not_a_string_is_refused(store, tmp_path):
    """Before: str([None]) made the call id '[None]'."""
    lines = records(CLAUDE)
    number = next(
        i
        for i, r in enumerate(lines, 1)
        if r.get("type") == "user"
        and isinstance(r["message"]["content"], list)
        and any(b.get("type") == "tool_result" for b in r["message"]["content"])
    )
    tool_result_line(lines).update(tool_use_id=[None])
    path = jsonl(tmp_path / "s.jsonl", lines)
    refused(
        store,
        path,
        f"s.jsonl line {number}, tool_result block: 'tool_use_id' should be a string, got an array",
    )


# -- 6. a title that cannot be stored -------------------------------------------------


def test_a_title_with_a_nul_names_file_and_line_and_is_cut_short(store, tmp_path):
    """Before: no file, no line, and the whole title echoed (a 300 KB title gave a
    300,084-character line)."""
    title = "t\x00" + "x" * 300_000
    path = edited(PI, tmp_path / "pi.jsonl", lambda lines: lines[6].update(name=title))
    shown = repr(title[:60])
    refused(
        store,
        path,
        f"pi.jsonl line 7: 'name' {shown}... (300,002 characters) holds a NUL character,"
        " which a store cannot keep in text",
    )


def test_a_native_title_with_a_nul_names_the_line(tmp_path, native_lines):
    lines = [json.loads(x) for x in native_lines]
    lines[1]["title"] = "t\x00x"
    path = jsonl(tmp_path / "export.jsonl", lines)
    with Store(tmp_path / "fresh.db") as fresh:
        refused(
            fresh,
            path,
            "export.jsonl line 2: 'title' 't\\x00x' holds a NUL character, which a store cannot keep in text",
        )


def test_a_chatgpt_title_with_a_nul_names_the_file_and_conversation(store, tmp_path):
    path = edited(CHATGPT, tmp_path / "c.json", lambda d: d[0].update(title="t\x00x"))
    refused(
        store,
        path,
        "c.json: conversation 1: session title 't\\x00x' holds a NUL character, which a store cannot keep in text",
    )


# -- 7. where a byte that is not UTF-8 is ----------------------------------------------


def test_the_offset_of_a_bad_byte_counts_from_the_start_of_the_file(store, tmp_path):
    """Before: the position in the decoder's chunk (offset 700000 reported as 3680)."""
    lines = records(PI)
    lines[1]["message"]["content"] = "y" * (3 * CHUNK // 2)  # the bad byte comes after a megabyte
    data = "".join(json.dumps(r) + "\n" for r in lines).encode()
    at = data.index(b"Keep going")
    path = tmp_path / "pi.jsonl"
    path.write_bytes(data[:at] + b"\xff" + data[at:])
    line = data[:at].count(b"\n") + 1
    refused(store, path, f"pi.jsonl line {line}: not UTF-8 text (byte 0xff at offset {at})")
    path.write_bytes(data + b"\xe2\x82")  # a character cut short at the very end
    refused(store, path, f"pi.jsonl line {len(lines) + 1}: not UTF-8 text (byte 0xe2 at offset {len(data)})")


# -- 8. memory -----------------------------------------------------------------------


def traced_peak(action: Callable[[], Any]) -> int:
    tracemalloc.start()
    try:
        action()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.slow
def test_a_huge_native_line_is_not_held_while_its_record_is_written(tmp_path):
    """Before: the line, a stripped copy of it, its record and its encoded payload at
    once: 4.2 times the payload. Now the line is dropped once decoded."""
    payload = 20_000_000
    lines = [
        '{"format":"sessiontree","version":1}',
        json.dumps(
            {
                "type": "session",
                "id": "s",
                "title": None,
                "metadata": {},
                "created_at": "2025-01-01T00:00:00Z",
            }
        ),
        json.dumps(
            {
                "type": "node",
                "session_id": "s",
                "id": "n",
                "parent_id": None,
                "depth": 0,
                "kind": "message",
                "payload": {"role": "user", "content": "b" * payload},
                "created_at": "2025-01-01T00:00:00Z",
            }
        ),
    ]
    path = tmp_path / "big.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with Store(tmp_path / "s.db") as store:
        peak = traced_peak(lambda: import_file(store, path))
    assert peak < 3.5 * payload, peak


@pytest.mark.slow
def test_an_openai_file_is_not_copied_message_by_message(tmp_path):
    """Before: every decoded message was deep-copied (23x the file, and half the time)."""
    message = {"role": "user", "content": "hello world"}
    path = tmp_path / "many.json"
    path.write_text(json.dumps([message] * 20_000))
    peak = traced_peak(lambda: parse_file(path, "openai"))
    assert peak < 20 * path.stat().st_size, (peak, path.stat().st_size)


# -- 9. pi labels that are no valid names ---------------------------------------------


def test_pi_labels_that_are_not_valid_names_get_derived_names(store, tmp_path):
    """Before: a label like "cafe" (it reads as an id prefix) failed the whole import."""

    labels = {"00000001": "cafe", "00000004": "a\nb", "00000005": "back~1", "00000007": "main"}

    def label(lines: list[dict[str, Any]]) -> None:
        last, base = lines[-1]["id"], lines[3]  # hung from the last entry: main stays where it was
        for i, (target, text) in enumerate(labels.items()):
            lines.append({**base, "id": f"lab{i}", "parentId": last, "targetId": target, "label": text})

    path = edited(PI, tmp_path / "pi.jsonl", label)
    [session] = import_file(store, path)
    assert sorted(c.name for c in session.checkpoints()) == [
        "checkpoint-1",  # the file's own label, a valid name: kept as it is
        "label-00000001-cafe",  # could be read as an id prefix
        "label-00000004-a_b",  # a line break
        "label-00000005-back_1",  # ~ means an ancestor
        "label-00000007-main",  # the name of a branch
    ]
    assert store.verify().ok


# -- 10. a declared depth checked against a node already stored -------------------------


def test_a_wrong_depth_is_refused_on_a_store_that_holds_the_node(store, tmp_path):
    """Before: a node already stored was merged without looking at its declared depth."""
    import_file(store, PI)
    lines = [json.loads(x) for x in export_native(store)]
    node = next(r for r in lines if r.get("type") == "node" and r["depth"] == 2)
    number = lines.index(node) + 1
    node["depth"] = 5
    path = jsonl(tmp_path / "export.jsonl", lines)
    before = list(export_native(store))
    with pytest.raises(FormatError) as e:
        import_file(store, path)
    assert str(e.value) == (
        f"export.jsonl line {number}: node {node['id']} declares depth 5, but its parents put it at depth 2"
    )
    assert list(export_native(store)) == before


# -- 11. the command line: a directory or a missing file --------------------------------


@pytest.mark.parametrize("what", ["directory", "missing"])
def test_import_of_a_directory_or_a_missing_file_is_one_line(tmp_path, what):
    """Before: click's three-line usage error, exit code 2. A directory is read for the
    files it holds (tests/test_cli_import_inputs.py); one holding none is refused."""
    target = tmp_path / ("dir" if what == "directory" else "missing.json")
    if what == "directory":
        target.mkdir()
    db = tmp_path / "s.db"
    result = CliRunner().invoke(cli, ["--db", str(db), "import", str(target)])
    reason = (
        "the directory holds no file to import (none ends in .json, .jsonl, .gz, .zip)"
        if what == "directory"
        else "the file does not exist"
    )
    assert (result.exit_code, result.output) == (1, f"Error: {target}: {reason}\n")
    assert not db.exists()


def test_a_copied_fixture_still_imports(store, tmp_path):
    """The edits above start from files that import cleanly."""
    for source in FUZZED:
        shutil.copy(source, tmp_path / source.name)
        assert import_file(store, tmp_path / source.name, report=lambda line: None)
    assert store.verify().ok
