"""Exports other agents resume from (pi, Claude Code) and fine-tuning datasets (messages, ShareGPT).

What is checked: a forked session made by the loop (tool calls, a decided pause, a
pause waiting, a system prompt, a checkpoint) exported as pi or Claude Code and
imported back by sessiontree's own importers has the same messages, parents and tool
pairing; every real pi and Claude Code fixture goes import -> export -> import to the
same tree; a tree a format cannot hold is refused in one line, with no file left; the
dataset lines have one JSON shape, which Hugging Face ``datasets`` loads.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from sessiontree import Approve, Pause, Store, decide, resume, run, tool
from sessiontree.cli import cli
from sessiontree.formats import FormatError, detect_format, export_file, import_file
from sessiontree.testing import ScriptedModel, reply, tool_call

HERE = Path(__file__).parent
REAL = HERE / "fixtures" / "real"
CONVERSATIONS = HERE / "fixtures" / "conversations"
PI_FILES = sorted((REAL / "pi").glob("*.jsonl")) + [CONVERSATIONS / "pi-session-mixed-boundaries.jsonl"]
CLAUDE_FILES = [
    p for p in sorted((REAL / "claude-code").glob("*.jsonl")) if p.name != "claude-code-log-edge_cases.jsonl"
] + [CONVERSATIONS / "claude-code-tool_heavy.jsonl"]  # edge_cases repeats a uuid: refused on import


@tool
def add(a: int, b: int) -> str:
    """Add two numbers."""
    return str(a + b)


@tool(idempotent=False)
def send(to: str) -> str:
    """Send a message (asks a human first)."""
    return f"sent to {to}"


def forked(store: Store):
    """A session the loop made: a system prompt, two parallel calls answered, then a
    fork ``alt`` whose call was paused, approved and run, and a fork ``waiting`` whose
    call waits for a human (its head is a pause)."""
    s = store.create_session("forked")
    s.append({"role": "system", "content": "Be brief."})
    first = s.append({"role": "user", "content": "add 1+2 and 3+4"})
    calls = (tool_call("add", {"a": 1, "b": 2}, id="c1"), tool_call("add", {"a": 3, "b": 4}, id="c2"))
    list(run(store, s, call=ScriptedModel([reply("Adding.", *calls), reply("3 and 7.")]), tools=[add]))
    s.checkpoint("asked", at=first.id)
    ask = lambda call: Pause("check")  # noqa: E731
    for name, to in (("alt", "bob"), ("waiting", "eve")):
        s.fork(name, at=first.id)
        s.append({"role": "user", "content": f"send it to {to}"}, branch=name)
        model = ScriptedModel([reply("Sending.", tool_call("send", {"to": to}, id=f"s-{to}"))])
        (*_, paused) = run(store, s, name, call=model, tools=[send], approve=ask)
        assert paused.reason == "paused"
    pause = s.head("alt")
    decide(store, pause.id, {"s-bob": Approve()}, by="alice")
    list(resume(store, pause.id, call=ScriptedModel([reply("Sent.")]), tools=[send]))
    return s


def messages_of(session) -> dict[str, tuple]:
    """Every message node: (its nearest message ancestor, role, text, calls, answered call)."""
    nodes = {n.id: n for n in session.tree()}
    out = {}
    for n in nodes.values():
        if n.kind != "message":
            continue
        up = n.parent_id
        while up is not None and nodes[up].kind != "message":
            up = nodes[up].parent_id
        p = n.payload
        calls = [
            (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in p.get("tool_calls") or []
        ]
        out[n.id] = (up, p["role"], p.get("content") or "", calls, p.get("tool_call_id"))
    return out


def heads(session) -> tuple[str | None, set[str]]:
    """``main``'s head and the heads of the other branches."""
    branches = session.branches()
    main = next(b.head_id for b in branches if b.name == "main")
    return main, {b.head_id for b in branches if b.name != "main"}


def exported(store: Store, session, fmt: str, tmp_path: Path, **options) -> Path:
    return export_file(store, tmp_path / f"out.{fmt}.jsonl", fmt, session_ids=[session.id], **options)


@pytest.mark.parametrize("fmt", ["pi", "claude-code"])
def test_a_forked_loop_session_comes_back_with_its_messages_parents_and_tool_pairing(
    any_store, tmp_path, fmt
):
    """Before: sessiontree exported only its own JSONL and one flat OpenAI branch."""
    s = forked(any_store)
    path = exported(any_store, s, fmt, tmp_path)
    assert detect_format(path) == fmt
    with Store(str(tmp_path / "again.db")) as other:
        (back,) = import_file(other, path)
        assert back.id == s.id
        assert messages_of(back) == messages_of(s)
        assert heads(back)[0] == s.head("main").id
        # every fork is a leaf of the file, the one waiting at a pause too
        assert heads(back)[1] == {b.head_id for b in s.branches() if b.name != "main"}
        assert other.verify().ok
        assert [p.id for p in back.pending()] == [s.head("waiting").id]
        if fmt == "pi":  # pi keeps every node: markers ride as sessiontree custom entries
            assert {n.id: (n.parent_id, n.kind, n.payload) for n in back.tree()} == {
                n.id: (n.parent_id, n.kind, n.payload) for n in s.tree()
            }
            assert {c.name: c.node_id for c in back.checkpoints()} == {"asked": s.resolve("asked")}
        run_ids = {n.id: n.run_id for n in s.tree() if n.run_id}
        for node in back.tree():
            if node.id in run_ids:
                ran = other.run(node.run_id)
                assert (ran.model, ran.usage["input_tokens"]) == (
                    any_store.run(run_ids[node.id]).model,
                    any_store.run(run_ids[node.id]).usage.get("input_tokens", 0),
                )


@pytest.mark.parametrize("fmt", ["pi", "claude-code"])
def test_one_branch_is_its_path_alone(store, tmp_path, fmt):
    s = forked(store)
    path = exported(store, s, fmt, tmp_path, branch="alt")
    with Store(str(tmp_path / "again.db")) as other:
        (back,) = import_file(other, path)
        assert [b.name for b in back.branches()] == ["main"]
        assert back.messages("main") == s.messages("alt")


def _tree(session):
    nodes = {n.id: (n.parent_id, n.kind, n.payload) for n in session.tree()}
    return nodes, heads(session), session.title


@pytest.mark.parametrize("path", PI_FILES + CLAUDE_FILES, ids=lambda p: p.name)
def test_real_files_go_import_export_import_to_the_same_tree(tmp_path, path):
    fmt = "pi" if path in PI_FILES else "claude-code"
    with Store(str(tmp_path / "first.db")) as first, Store(str(tmp_path / "second.db")) as second:
        for s in import_file(first, path, fmt):
            out = exported(first, s, fmt, tmp_path)
            (back,) = import_file(second, out, fmt)
            assert back.id == s.id
            assert _tree(back) == _tree(s)
            if fmt == "pi":
                assert {c.name: c.node_id for c in back.checkpoints()} == {
                    c.name: c.node_id for c in s.checkpoints()
                }
        assert second.verify().ok


def test_claude_code_refuses_results_out_of_call_order(store, tmp_path):
    s = store.create_session()
    s.append({"role": "user", "content": "go"})
    s.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [tool_call("add", id="a"), tool_call("add", id="b")],
        }
    )
    s.append({"role": "tool", "tool_call_id": "b", "content": "2"})
    s.append({"role": "tool", "tool_call_id": "a", "content": "1"})
    with pytest.raises(
        FormatError, match=r"do not follow it in call order \(tool result .* out of call order\)"
    ):
        exported(store, s, "claude-code", tmp_path)
    assert list(tmp_path.glob("out.*")) == []
    exported(store, s, "pi", tmp_path)  # pi keeps parents as they are


def test_claude_code_refuses_a_main_head_with_children(store, tmp_path):
    s = forked(store)
    s.move("main", to=s.path("main")[1].id)
    with pytest.raises(FormatError, match="main's head .* has children; Claude Code carries on"):
        exported(store, s, "claude-code", tmp_path)
    # pi carries on from its last entry, whatever it is: a marker entry names main's head
    with Store(str(tmp_path / "again.db")) as other:
        (back,) = import_file(other, exported(store, s, "pi", tmp_path))
        assert back.head("main").id == s.head("main").id


@pytest.mark.parametrize("fmt", ["pi", "claude-code"])
def test_a_branch_ending_inside_the_tree_is_refused(store, tmp_path, fmt):
    s = forked(store)
    s.fork("inner", at=s.path("main")[2].id)
    with pytest.raises(
        FormatError, match=rf"branch 'inner' ends at node .* which has children; a {fmt} file"
    ):
        exported(store, s, fmt, tmp_path)
    exported(store, s, fmt, tmp_path, branch="inner")  # its path alone is fine


def test_pi_refuses_two_checkpoints_on_one_node(store, tmp_path):
    s = forked(store)
    s.checkpoint("again", at=s.resolve("asked"))
    with pytest.raises(FormatError, match="two checkpoints .* a pi entry holds one label"):
        exported(store, s, "pi", tmp_path)


PI_HEADER = {"type": "session", "version": 3, "id": "s1", "timestamp": "2026-01-01T00:00:00Z"}
BAD_PI = {
    "type": "custom",
    "customType": "sessiontree",
    "id": "x",
    "parentId": None,
    "data": {"kind": "nope"},
}
BAD_CLAUDE = {"type": "system", "subtype": "sessiontree", "uuid": "u1", "parentUuid": None, "sessiontree": []}


@pytest.mark.parametrize(
    ("fmt", "records", "message"),
    [
        ("pi", [PI_HEADER, BAD_PI], "line 2: a 'sessiontree' custom entry needs data {'kind': one of"),
        (
            "claude-code",
            [BAD_CLAUDE],
            "line 1: a system record of subtype 'sessiontree' needs 'sessiontree':",
        ),
    ],
)
def test_a_bad_sessiontree_record_is_one_located_error(store, tmp_path, fmt, records, message):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(FormatError) as raised:
        import_file(store, bad, fmt)
    assert str(raised.value).startswith(f"bad.jsonl {message}") and "\n" not in str(raised.value)
    assert store.sessions() == []


# -- datasets ----------------------------------------------------------------


def test_messages_has_a_line_per_leaf_with_tool_calls_in_openai_shape(store, tmp_path):
    s = forked(store)
    lines = [json.loads(x) for x in exported(store, s, "messages", tmp_path).read_text().splitlines()]
    assert {x["head"] for x in lines} == {leaf.id for leaf in s.leaves()}
    by_branch = {x["branch"]: x["messages"] for x in lines}
    assert by_branch["main"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "add 1+2 and 3+4"},
        {
            "role": "assistant",
            "content": "Adding.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 3, "b": 4}'},
                },
            ],
        },
        {"role": "tool", "content": "3", "tool_call_id": "c1"},
        {"role": "tool", "content": "7", "tool_call_id": "c2"},
        {"role": "assistant", "content": "3 and 7."},
    ]
    assert by_branch["waiting"][-1]["tool_calls"][0]["function"]["name"] == "send"
    per_branch = exported(store, s, "messages", tmp_path, per="branch").read_text().splitlines()
    assert [json.loads(x)["branch"] for x in per_branch] == [b.name for b in s.branches()]


def test_sharegpt_turns(store, tmp_path):
    s = forked(store)
    (line,) = exported(store, s, "sharegpt", tmp_path, branch="main").read_text().splitlines()
    record = json.loads(line)
    assert record["system"] == "Be brief."
    assert [t["from"] for t in record["conversations"]] == [
        "human",
        "gpt",
        "function_call",
        "observation",
        "observation",
        "gpt",
    ]
    calls = json.loads(record["conversations"][2]["value"])
    assert calls == [
        {"name": "add", "arguments": {"a": 1, "b": 2}},
        {"name": "add", "arguments": {"a": 3, "b": 4}},
    ]


def _json_types(value, path="$"):
    """Every (path, JSON type) of a value, lists collapsed to their elements."""
    if isinstance(value, dict):
        yield path, "object"
        for k, v in value.items():
            yield from _json_types(v, f"{path}.{k}")
    elif isinstance(value, list):
        yield path, "array"
        for v in value:
            yield from _json_types(v, f"{path}[]")
    else:
        yield path, "null" if value is None else type(value).__name__


@pytest.mark.parametrize("fmt", ["messages", "sharegpt"])
def test_every_line_has_the_shape_a_columnar_json_loader_needs(store, tmp_path, fmt):
    """What ``datasets``' JSON builder (pyarrow) requires: one object per line, and each
    column (key path) of one type throughout, null aside."""
    forked(store)
    for path in PI_FILES[:2] + CLAUDE_FILES[-1:]:
        import_file(store, path)
    out = export_file(store, tmp_path / "set.jsonl", fmt)
    seen: dict[str, set[str]] = {}
    for text in out.read_text(encoding="utf-8").splitlines():
        record = json.loads(text)
        assert isinstance(record, dict)
        assert set(record) == ({"messages"} if fmt == "messages" else {"conversations", "system"}) | {
            "session",
            "head",
            "branch",
        }
        for where, kind in _json_types(record):
            seen.setdefault(where, set()).add(kind)
    mixed = {where: kinds - {"null"} for where, kinds in seen.items() if len(kinds - {"null"}) > 1}
    assert mixed == {}


@pytest.mark.parametrize("fmt", ["messages", "sharegpt"])
def test_hugging_face_datasets_loads_the_export(store, tmp_path, fmt, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")  # a local file: nothing to fetch
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import datasets  # in the test extra: the loader the export's users run

    forked(store)
    import_file(store, CONVERSATIONS / "claude-code-tool_heavy.jsonl")
    out = export_file(store, tmp_path / "set.jsonl", fmt)
    loaded = datasets.load_dataset("json", data_files=str(out), split="train", cache_dir=str(tmp_path / "hf"))
    assert loaded.num_rows == len(out.read_text().splitlines())
    column = "messages" if fmt == "messages" else "conversations"
    assert loaded[0][column] and loaded[0]["session"]


def test_cli_exports_a_tree_and_a_dataset(tmp_path):
    db = tmp_path / "cli.db"
    with Store(str(db)) as store:
        s = forked(store)
    runner = CliRunner()
    out = runner.invoke(cli, ["--db", str(db), "export", s.id, "--format", "pi"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout.splitlines()[0])["type"] == "session"
    out = runner.invoke(cli, ["--db", str(db), "export", "--format", "messages", "--per", "branch"])
    assert out.exit_code == 0, out.output
    assert len(out.stdout.splitlines()) == 3
    out = runner.invoke(cli, ["--db", str(db), "export", s.id, "--format", "claude-code", "-b", "nope"])
    assert out.exit_code == 1 and out.stdout == ""
    assert "nope" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    out = runner.invoke(cli, ["--db", str(db), "export", "--format", "native", "--per", "leaf"])
    assert out.exit_code == 2 and "--per only applies" in out.output


def _said(messages):
    """Messages as ShareGPT can say them: no call ids."""
    out = []
    for m in messages:
        calls = [
            (c["function"]["name"], json.loads(c["function"]["arguments"])) for c in m.get("tool_calls") or []
        ]
        out.append((m["role"], m.get("content") or "", calls))
    return out


def test_sharegpt_lines_of_one_tree_import_as_that_tree(store, tmp_path):
    s = forked(store)
    out = exported(store, s, "sharegpt", tmp_path)
    assert detect_format(out) == "sharegpt"
    with Store(str(tmp_path / "again.db")) as other:
        (back,) = import_file(other, out)
        assert len(back.leaves()) == len(s.leaves()) == 3
        assert _said(back.messages("main")) == _said(s.messages("main"))
        assert sorted(_said(back.messages(leaf.id)) for leaf in back.leaves()) == sorted(
            _said(s.messages(leaf.id)) for leaf in s.leaves()
        )
        assert other.verify().ok
        (again,) = import_file(other, out)  # ids come from the content: nothing new
        assert again.id == back.id and len(again.tree()) == len(back.tree())


def test_a_sharegpt_json_array_imports_one_session_per_conversation(store, tmp_path):
    path = tmp_path / "set.json"
    conversations = [
        {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]},
        {
            "conversations": [{"from": "human", "value": "bye"}, {"from": "gpt", "value": "ciao"}],
            "system": "Be nice.",
        },
    ]
    path.write_text(json.dumps(conversations, indent=1))
    assert detect_format(path) == "sharegpt"
    first, second = import_file(store, path)
    assert [m["content"] for m in second.messages()] == ["Be nice.", "bye", "ciao"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"conversations": [{"from": "robot", "value": "x"}]}) + "\n")
    with pytest.raises(FormatError, match=r"^bad.jsonl line 1, turn 1: unknown 'from' 'robot'"):
        import_file(store, bad, "sharegpt")
    assert len(store.sessions()) == 2
