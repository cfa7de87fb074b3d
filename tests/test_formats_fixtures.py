"""The five third-party fixtures: what each importer derives from a real file.

See tests/fixtures/conversations/README.md for where each file comes from.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from sessiontree import Store
from sessiontree.formats import FormatError, detect_format, import_file

FIXTURES = Path(__file__).parent / "fixtures" / "conversations"
CHATGPT, LIBRECHAT = FIXTURES / "chatgpt-tree.json", FIXTURES / "librechat-tree.json"
OPENWEBUI, CLAUDE = FIXTURES / "openwebui-chat.json", FIXTURES / "claude-code-tool_heavy.jsonl"
PI = FIXTURES / "pi-session-mixed-boundaries.jsonl"


def shape(session) -> dict:
    """Node count, kinds, roots, fork points (short id -> children), refs, main's last node."""
    tree = session.tree()
    children = Counter(n.parent_id for n in tree)
    return {
        "nodes": len(tree),
        "kinds": dict(Counter(n.kind for n in tree)),
        "roots": children[None],
        "forks": {p[:8]: c for p, c in children.items() if p and c > 1},
        "branches": {b.name: b.head_id[:8] for b in session.branches()},
        "checkpoints": {c.name: c.node_id[:8] for c in session.checkpoints()},
    }


@pytest.mark.parametrize(
    "path, name",
    [
        (CHATGPT, "chatgpt"),
        (LIBRECHAT, "librechat"),
        (OPENWEBUI, "openwebui"),
        (CLAUDE, "claude-code"),
        (PI, "pi"),
    ],
)
def test_detect_format(path, name):
    assert detect_format(path) == name


def test_chatgpt(store):
    [s] = import_file(store, CHATGPT)
    assert (s.id, s.title) == ("d5dc5307-6807-41a0-8b04-4acee626eeb7", "Assist user with summary")
    # 13 mapping entries minus the null root and the empty hidden system node.
    assert shape(s) == {
        "nodes": 11,
        "kinds": {"message": 11},
        "roots": 1,
        "forks": {"bda8a275": 2, "aaa20127": 2},
        "branches": {"main": "f63b8e17", "leaf-ada93f81": "ada93f81", "leaf-d0d2a7df": "d0d2a7df"},
        "checkpoints": {},
    }
    mapping = json.loads(CHATGPT.read_text())[0]
    assert s.branch("main").head_id == mapping["current_node"]  # original ids are kept
    assert [m["content"] for m in s.messages()] == [
        "hi there",
        "Hello! How can I assist you today?",
        "hi again",
        "Hey! Welcome back. What's on your mind?",
        "tell me a joke",
        mapping["mapping"][mapping["current_node"]]["message"]["content"]["parts"][0],
    ]
    interrupted = s.node("leaf-ada93f81")
    assert interrupted.payload["content"].endswith("between rolling")
    assert store.run(interrupted.run_id).finish_reason == "interrupted"
    assert store.run(interrupted.run_id).model == "text-davinci-002-render-sha"
    assert s.verify().ok


def test_librechat(store):
    [s] = import_file(store, LIBRECHAT)
    assert s.id == "4a86c40e-e627-4454-b158-889680e23ad3"
    assert shape(s) == {
        "nodes": 9,
        "kinds": {"message": 9},
        "roots": 1,
        "forks": {"4c395510": 2, "6e4c95ca": 2},
        # No current-leaf field: main is the newest leaf, ties broken by file order.
        "branches": {"main": "1f062c99", "leaf-5da2cdce": "5da2cdce", "leaf-ad7b6ec6": "ad7b6ec6"},
        "checkpoints": {},
    }
    assert [m["role"] for m in s.messages("leaf-ad7b6ec6")] == ["user", "assistant"] * 3
    assert s.messages()[-2:] == [{"role": "user", "content": "lol"}, s.messages()[-1]]
    assert s.metadata["options"]["model"] == "gpt-4-turbo"
    assert s.verify().ok


def test_openwebui(store):
    [s] = import_file(store, OPENWEBUI)
    assert shape(s) == {
        "nodes": 2,
        "kinds": {"message": 2},
        "roots": 1,
        "forks": {},
        "branches": {"main": s.branch("main").head_id[:8]},
        "checkpoints": {},
    }
    data = json.loads(OPENWEBUI.read_text())
    current = data["history"]["messages"][data["history"]["currentId"]]
    assert s.path("main")[-1].payload["content"] == current["content"]
    first = s.messages()[0]["content"]
    assert "can''t diagnose" in first  # doubled quotes kept as they are
    assert first == data["history"]["messages"][data["messages"][0]["id"]]["content"]
    assert s.title == data["title"]
    assert store.run(s.head().run_id).usage["total_tokens"] == 336


def test_claude_code(store):
    [s] = import_file(store, CLAUDE)
    assert s.id == "d6e0bada-1959-4eec-a9d2-0bfade768d8f"
    # 13 user + 9 assistant + 2 system records; the records of one message.id
    # merge (9 -> 4 nodes), tool results become tool messages, the rest is skipped.
    assert shape(s) == {
        "nodes": 19,
        "kinds": {"message": 17, "note": 2},
        "roots": 1,
        "forks": {},
        "branches": {"main": "29e6224a"},
        "checkpoints": {},
    }
    roles = Counter(m["role"] for m in s.messages())
    assert roles == {"user": 7, "assistant": 4, "tool": 6}
    parallel = next(m for m in s.messages() if len(m.get("tool_calls") or []) == 2)
    assert [c["function"]["name"] for c in parallel["tool_calls"]] == ["WebSearch", "Glob"]
    assert s.verify().ok  # every tool call answered before the conversation moves on
    assert store.run(s.path("main")[1].run_id).model == "claude-opus-4-6"


def test_pi(store):
    [s] = import_file(store, PI)
    assert s.title == "Complex Session - Phase 1"
    # 16 entries minus label and session_info; the branch_summary is a second root.
    assert shape(s) == {
        "nodes": 14,
        "kinds": {"message": 12, "summary": 2},
        "roots": 2,
        "forks": {},
        "branches": {"main": s.branch("main").head_id[:8], "leaf-00000013": s.node("leaf-00000013").id[:8]},
        "checkpoints": {"checkpoint-1": s.node("checkpoint-1").id[:8]},
    }
    # pi's own SessionManager loads this as branchSummary, user, assistant (leaf 00000016).
    path = s.path("main")
    assert [n.kind for n in path] == ["summary", "message", "message"]
    assert path[0].payload["type"] == "branch_summary"
    assert [m["content"] for m in s.messages()] == ["Continue on main path", "Continuing on the main path..."]
    assert s.node("checkpoint-1").payload["content"] == "Starting complex work..."
    assert [n.payload.get("type") for n in s.path("leaf-00000013") if n.kind == "summary"] == ["compaction"]


@pytest.mark.parametrize("path", [CHATGPT, LIBRECHAT, OPENWEBUI, CLAUDE, PI])
def test_reimporting_a_fixture_changes_nothing(store, path):
    first = [s.id for s in import_file(store, path)]
    before = [
        store.conn.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall()
        for t in ("sessions", "nodes", "branches", "checkpoints", "runs")
    ]
    assert [s.id for s in import_file(store, path)] == first
    after = [
        store.conn.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall()
        for t in ("sessions", "nodes", "branches", "checkpoints", "runs")
    ]
    assert after == before


def test_all_fixtures_in_one_store_verify(tmp_path):
    with Store(tmp_path / "all.db") as store:
        for path in (CHATGPT, LIBRECHAT, OPENWEBUI, CLAUDE, PI):
            import_file(store, path)
        assert len(store.sessions()) == 5
        assert store.verify().ok


def test_foreign_errors_name_file_and_record(store, tmp_path):
    data = json.loads(CHATGPT.read_text())
    second = json.loads(json.dumps(data[0]))
    second["conversation_id"] = second["id"] = "c2"
    key = next(k for k, v in second["mapping"].items() if v["parent"])
    second["mapping"][key]["parent"] = "abc"
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([data[0], second]))
    with pytest.raises(
        FormatError,
        match=rf"^conversations\.json: conversation 2, node '{key}':"
        " parent 'abc' is not in the mapping",
    ):
        import_file(store, path)
    assert store.sessions() == []

    lines = CLAUDE.read_text().splitlines(keepends=True)
    lines[6] = lines[6][:40] + "\n"
    broken = tmp_path / "session.jsonl"
    broken.write_text("".join(lines))
    with pytest.raises(FormatError, match=r"^session\.jsonl line 7: not valid JSON"):
        import_file(store, broken)

    pi = tmp_path / "pi.jsonl"
    pi.write_text(PI.read_text().replace('"version":3', '"version":9'))
    with pytest.raises(FormatError, match="pi.jsonl line 1: unsupported pi session version 9"):
        import_file(store, pi)
    assert store.sessions() == []


@pytest.mark.parametrize(
    "text, match",
    [
        ("", "empty"),
        ("{not json", "unknown format|not valid JSON"),
        ('"a string"', "unknown format"),
        ("42", "unknown format"),
        ('{"something": "else"}', "unknown format"),
    ],
)
def test_unrecognisable_files(store, tmp_path, text, match):
    path = tmp_path / "in.json"
    path.write_text(text)
    with pytest.raises(FormatError, match=match):
        import_file(store, path)


@pytest.mark.parametrize(
    "fmt, data, match",
    [
        ("chatgpt", [1], "conversation 1: expected an object with a 'mapping'"),
        (
            "librechat",
            {"messages": "x"},
            r"conversation: expected an object with a 'messages' \(or 'messagesTree'\) list",
        ),
        ("openwebui", {"history": []}, "chat: expected an object with a 'history.messages'"),
        ("openai", "hi", "expected a list of messages, got str"),
        ("openai", [{"role": "user"}, "x"], "message 2: expected an object"),
    ],
)
def test_wrong_top_level_types(store, tmp_path, fmt, data, match):
    path = tmp_path / "in.json"
    path.write_text(json.dumps(data))
    with pytest.raises(FormatError, match=match):
        import_file(store, path, format=fmt)
    assert store.sessions() == []


def test_cycle_in_a_foreign_tree(store, tmp_path):
    data = json.loads(OPENWEBUI.read_text())
    ids = list(data["history"]["messages"])
    data["history"]["messages"][ids[0]]["parentId"] = ids[1]
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(data))
    with pytest.raises(FormatError, match="cycle"):
        import_file(store, path)
    assert store.sessions() == []


def test_non_utf8_file(store, tmp_path):
    path = tmp_path / "bad.jsonl"
    shutil.copy(PI, path)
    path.write_bytes(path.read_bytes().replace(b"Start", b"\xff\xfe", 1))
    offset = path.read_bytes().index(b"\xff")
    with pytest.raises(
        FormatError, match=rf"^bad\.jsonl line 2: not UTF-8 text \(byte 0xff at offset {offset}\)$"
    ):
        import_file(store, path, format="pi")
