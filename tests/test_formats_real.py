"""The real exports in tests/fixtures/real (see SOURCES.md there): each imports
faithfully. Every expectation is derived from the raw file by the small readers
below, never from what the importer produced."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sessiontree import Store
from sessiontree.errors import ImportConflict
from sessiontree.formats import (
    FormatError,
    detect_format,
    export_native,
    export_openai,
    import_file,
    import_native,
)

REAL = Path(__file__).parent / "fixtures" / "real"
CLAUDE = REAL / "claude-code"


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# -- Claude Code -------------------------------------------------------------


def claude_kept(path: Path) -> list[dict[str, Any]]:
    """The records that carry conversation: user, assistant, system; not the
    sub-agent ones, unless the file is a sub-agent transcript (all of them are)."""
    records = [r for r in jsonl(path) if r.get("uuid")]
    agent = all(r.get("isSidechain") for r in records)
    return [
        r
        for r in records
        if r.get("type") in ("user", "assistant", "system") and (agent or not r.get("isSidechain"))
    ]


def claude_expected_nodes(path: Path) -> int:
    """One node per API message (message.id), per tool result block, per user
    record with other content, per system record."""
    records = claude_kept(path)
    messages = {r["message"]["id"] for r in records if r["type"] == "assistant"}
    count = len(messages) + sum(r["type"] == "system" for r in records)
    for r in records:
        if r["type"] != "user":
            continue
        content = r["message"]["content"]
        blocks = content if isinstance(content, list) else [content]
        results = sum(isinstance(b, dict) and b.get("type") == "tool_result" for b in blocks)
        count += results + (results < len(blocks) or not results)
    return count


def claude_calls(path: Path) -> dict[str, list[str]]:
    """message.id -> its tool_use ids in block order."""
    calls: dict[str, list[str]] = {}
    for r in claude_kept(path):
        if r["type"] == "assistant" and isinstance(r["message"]["content"], list):
            for block in r["message"]["content"]:
                if block.get("type") == "tool_use":
                    calls.setdefault(r["message"]["id"], []).append(block["id"])
    return calls


def chat_completions_valid(messages: list[dict[str, Any]]) -> bool:
    """What chat completions accepts: each assistant's calls are answered by the
    tool messages right after it, and no tool message answers nothing."""
    i = 0
    while i < len(messages):
        message = messages[i]
        i += 1
        if message["role"] == "tool":
            return False
        calls = [c["id"] for c in message.get("tool_calls") or []]
        answered = []
        while i < len(messages) and messages[i]["role"] == "tool":
            answered.append(messages[i]["tool_call_id"])
            i += 1
        if sorted(answered) != sorted(calls):
            return False
    return True


CLAUDE_FILES = [
    "spotter-8463c716.jsonl",
    "spotter-8463c716-subagent-a7be2f0.jsonl",
    "spotter-subagent.jsonl",
    "spotter-short.jsonl",
    "claude-code-log-dag_compact_after_rewind.jsonl",
    "claude-code-log-sidechain_integrated.jsonl",
]


@pytest.mark.parametrize("name", CLAUDE_FILES)
def test_claude_code_one_node_per_message_results_in_call_order(store, name):
    path = CLAUDE / name
    [s] = import_file(store, path)
    tree = s.tree()
    assert len(tree) == claude_expected_nodes(path)
    assert s.verify().ok
    calls = claude_calls(path)
    assistants = [n for n in tree if n.payload.get("role") == "assistant"]
    assert len(assistants) == len({r["message"]["id"] for r in claude_kept(path) if r["type"] == "assistant"})
    wanted = sorted(calls.values())
    assert (
        sorted([c["id"] for c in n.payload["tool_calls"]] for n in assistants if n.payload.get("tool_calls"))
        == wanted
    )
    for branch in s.branches():
        messages = export_openai(s, branch.name)
        assert chat_completions_valid(messages), branch.name
        for i, m in enumerate(messages):  # results follow their message in call order
            ids = [c["id"] for c in m.get("tool_calls") or []]
            following = [x.get("tool_call_id") for x in messages[i + 1 : i + 1 + len(ids)]]
            assert following == ids


# -- token usage ---------------------------------------------------------------


def add(totals: dict[str, list[int]], model: Any, prompt: Any, completion: Any) -> None:
    sums = totals.setdefault(model or "?", [0, 0])
    sums[0] += prompt or 0
    sums[1] += completion or 0


def claude_usage(path: Path) -> dict[str, list[int]]:
    """Per model: input and output tokens of the LAST record of each message.id
    (the first streaming records carry partial output counts)."""
    last = {r["message"]["id"]: r["message"] for r in claude_kept(path) if r["type"] == "assistant"}
    totals: dict[str, list[int]] = {}
    for message in last.values():
        usage = message.get("usage") or {}
        add(totals, message.get("model"), usage.get("input_tokens"), usage.get("output_tokens"))
    return totals


def pi_usage(path: Path) -> dict[str, list[int]]:
    totals: dict[str, list[int]] = {}
    for r in jsonl(path):
        message = r.get("message") or {}
        if r.get("type") == "message" and message.get("role") == "assistant":
            usage = message.get("usage") or {}
            add(totals, message.get("model"), usage.get("input"), usage.get("output"))
    return totals


def librechat_usage(path: Path) -> dict[str, list[int]]:
    data = json.loads(path.read_text())
    totals: dict[str, list[int]] = {}
    stack = list(data.get("messages") or data.get("messagesTree") or [])
    while stack:
        m = stack.pop()
        stack.extend(m.get("children") or [])
        if not m.get("isCreatedByUser") and not m.get("error"):
            add(totals, m.get("model"), m.get("promptTokens"), m.get("tokenCount"))
    return totals


def stored_usage(store) -> dict[str, list[int]]:
    return {m["model"]: [m["input_tokens"], m["output_tokens"]] for m in store.stats()["models"]}


def nonzero(totals: dict[str, list[int]]) -> dict[str, list[int]]:
    return {k: v for k, v in totals.items() if any(v)}


@pytest.mark.parametrize(
    "path, expected",
    [
        (CLAUDE / "spotter-8463c716.jsonl", claude_usage),
        (CLAUDE / "spotter-subagent.jsonl", claude_usage),
        (CLAUDE / "spotter-short.jsonl", claude_usage),
        (REAL / "pi" / "pi-brain-session-forked.jsonl", pi_usage),
        (REAL / "pi" / "pi-mono-large-session.jsonl", pi_usage),
        (REAL / "pi" / "pi-mono-before-compaction.jsonl", pi_usage),
        (REAL / "librechat" / "librechat-opts-nonr-branches.json", librechat_usage),
    ],
    ids=lambda v: v.name if isinstance(v, Path) else "",
)
def test_usage_per_model_is_the_files_own_totals(store, path, expected):
    import_file(store, path)
    want = nonzero(expected(path))
    assert want  # the file does record usage
    assert nonzero(stored_usage(store)) == want


# -- interrupted history -----------------------------------------------------------

PI = REAL / "pi"
NOT_NODES = {"session", "label", "session_info", "custom"}


def pi_unanswered(path: Path) -> list[str]:
    """Calls of a (version 1, linear) pi file left without a result when the
    conversation moves on to its next message: aborted turns, compactions."""
    missing: list[str] = []
    open_calls: list[str] = []
    for r in jsonl(path):
        message = r.get("message") or {}
        role = message.get("role")
        if r.get("type") == "message" and role == "toolResult":
            open_calls = [c for c in open_calls if c != message.get("toolCallId")]
            continue
        moves_on = r.get("type") == "custom_message" or (
            r.get("type") == "message"
            and role not in ("branchSummary", "compactionSummary")
            and not (role == "bashExecution" and message.get("excludeFromContext"))
        )
        if not moves_on:
            continue
        missing += open_calls
        content = message.get("content")
        blocks = content if isinstance(content, list) else []
        open_calls = [b["id"] for b in blocks if role == "assistant" and b.get("type") == "toolCall"]
    return missing


@pytest.mark.parametrize("name", ["pi-mono-large-session.jsonl", "pi-mono-before-compaction.jsonl"])
def test_pi_interrupted_turns_get_an_explicit_no_result(store, name):
    path = PI / name
    entries = [r for r in jsonl(path) if r.get("type") not in NOT_NODES]
    aborted = [r for r in entries if (r.get("message") or {}).get("stopReason") in ("aborted", "error")]
    assert aborted  # the file does hold interrupted turns
    missing = pi_unanswered(path)
    [s] = import_file(store, path)
    tree = s.tree()
    assert len(tree) == len(entries) + len(missing)
    synthesised = [n for n in tree if n.payload.get("synthesised")]
    assert sorted(n.payload["tool_call_id"] for n in synthesised) == sorted(missing)
    assert {n.payload["content"] for n in synthesised} == {"no result was recorded"}
    assert s.verify().ok
    assert chat_completions_valid(export_openai(s))


def chatgpt_conversation(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    return data[0] if isinstance(data, list) else data


def test_chatgpt_orphan_tool_outputs_are_notes_and_replaced_calls_answered(store):
    path = REAL / "chatgpt" / "pionxzh-image-generation.json"
    mapping = chatgpt_conversation(path)["mapping"]
    messages = {k: e["message"] for k, e in mapping.items() if e.get("message")}

    def calls(key: str | None) -> bool:
        m = messages.get(key or "")
        return bool(m) and m["author"]["role"] == "assistant" and m.get("recipient", "all") != "all"

    orphans = [
        k for k, m in messages.items() if m["author"]["role"] == "tool" and not calls(mapping[k]["parent"])
    ]
    answered = {mapping[k]["parent"] for k, m in messages.items() if m["author"]["role"] == "tool"}
    replaced = [k for k in messages if calls(k) and k not in answered]  # a call the next call replaced
    [s] = import_file(store, path)
    tree = s.tree()
    assert len(tree) == len(messages) + len(replaced)
    assert sum(n.kind == "note" and n.payload["type"] == "tool_output" for n in tree) == len(orphans) > 0
    assert sum(bool(n.payload.get("synthesised")) for n in tree) == len(replaced) == 1
    assert s.verify().ok


# -- LibreChat ------------------------------------------------------------------


def librechat_messages(path: Path) -> list[dict[str, Any]]:
    """Every message of the export, depth first, whichever key holds them."""
    data = json.loads(path.read_text())
    out: list[dict[str, Any]] = []
    stack = list(reversed(data.get("messages") or data.get("messagesTree") or []))
    while stack:
        m = stack.pop()
        out.append(m)
        stack.extend(reversed(m.get("children") or []))
    return out


def test_librechat_messages_tree_export(store):
    path = REAL / "librechat" / "librechat-export.json"
    data = json.loads(path.read_text())
    assert "messagesTree" in data and "messages" not in data
    messages = librechat_messages(path)
    [s] = import_file(store, path)
    assert s.id == data["conversationId"] and s.title == data["title"]
    assert len(s.tree()) == len(messages)
    assert [m["content"] for m in s.messages()] == [m["text"] for m in messages]  # one line
    assert [m["role"] for m in s.messages()] == [
        "user" if m["isCreatedByUser"] else "assistant" for m in messages
    ]
    assert s.verify().ok


# -- texts kept ------------------------------------------------------------------


def test_chatgpt_reasoning_is_kept_as_reasoning_content(store, tmp_path):
    path = REAL / "chatgpt" / "pionxzh-image-generation.json"
    conv = chatgpt_conversation(path)
    recaps = {
        k: e["message"]["content"]["content"]
        for k, e in conv["mapping"].items()
        if e.get("message") and e["message"]["content"]["content_type"] == "reasoning_recap"
    }
    # the same conversation with one recap as the fuller "thoughts" content
    first = next(iter(recaps))
    thoughts = {"content_type": "thoughts", "thoughts": [{"summary": "Plan", "content": "Draw it twice."}]}
    conv["mapping"][first]["message"]["content"] = thoughts
    variant = tmp_path / "thoughts.json"
    variant.write_text(json.dumps(conv))
    [s] = import_file(store, variant)
    kept = {n.payload.get("reasoning_content") for n in s.tree() if n.payload.get("reasoning_content")}
    assert kept == {*list(recaps.values())[1:], "Plan\n\nDraw it twice."}
    assert len(recaps) == 4 and s.verify().ok


def openwebui_chats(path: Path) -> list[dict[str, Any]]:
    data = json.loads(path.read_text())
    return [c.get("chat", c) for c in (data if isinstance(data, list) else [data])]


def texts(content: Any) -> str:
    return "\n\n".join(b["text"] for b in content) if isinstance(content, list) else content


def test_openwebui_output_items_keep_calls_results_and_reasoning(store):
    path = REAL / "openwebui" / "librechat-openwebui-export.json"
    chats = openwebui_chats(path)
    items = [i for c in chats for m in c["history"]["messages"].values() for i in m.get("output") or []]
    calls = [(i["call_id"], i["name"], i["arguments"]) for i in items if i["type"] == "function_call"]
    outputs = [(i["call_id"], texts(i["output"])) for i in items if i["type"] == "function_call_output"]
    reasoning = [texts(i["content"]) for i in items if i["type"] == "reasoning"]
    answers = [texts(i["content"]) for i in items if i["type"] == "message"]
    assert calls and outputs and reasoning  # what the file exercises
    sessions = import_file(store, path)
    nodes = [n for s in sessions for n in s.tree()]
    # one node per message, plus one per call (none are consecutive here) and per output
    assert len(nodes) == sum(len(c["history"]["messages"]) for c in chats) + len(calls) + len(outputs)
    payloads = [n.payload for n in nodes]
    assert [
        (c["id"], c["function"]["name"], c["function"]["arguments"])
        for p in payloads
        for c in p.get("tool_calls", [])
    ] == calls
    assert [(p["tool_call_id"], p["content"]) for p in payloads if p["role"] == "tool"] == outputs
    assert [p["reasoning_content"] for p in payloads if p.get("reasoning_content")] == reasoning
    assert all(any(p["content"] == a for p in payloads) for a in answers)
    assert store.verify().ok
    for s in sessions:
        assert chat_completions_valid(export_openai(s))


def test_claude_code_subagent_transcript_is_its_own_session(store):
    parent_path, agent_path = (
        CLAUDE / "spotter-8463c716.jsonl",
        CLAUDE / "spotter-8463c716-subagent-a7be2f0.jsonl",
    )
    records = jsonl(agent_path)
    assert all(r["isSidechain"] for r in records)
    [parent] = import_file(store, parent_path)
    [agent] = import_file(store, agent_path)
    assert agent.id != parent.id
    assert agent.metadata["parent_session"] == records[0]["sessionId"] == parent.id
    assert agent.metadata["agentId"] == records[0]["agentId"]
    assert agent.messages()[0]["content"] == records[0]["message"]["content"]
    assert len(agent.tree()) == claude_expected_nodes(agent_path) > 0
    assert store.verify().ok


# -- errors ----------------------------------------------------------------------


def test_a_conflict_names_its_place_once(store, tmp_path):
    path = REAL / "openwebui" / "librechat-openwebui-export.json"
    import_file(store, path)
    data = json.loads(path.read_text())
    chat = data[1].get("chat", data[1])
    first = next(iter(chat["history"]["messages"]))
    chat["history"]["messages"][first]["content"] = "changed"
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(data))
    with pytest.raises(ImportConflict) as e:
        import_file(store, changed)
    assert str(e.value).count("chat 2") == 1
    assert str(e.value).startswith(f"changed.json: chat 2, message {first!r}: node ")


def test_skip_invalid_imports_the_rest_and_says_what_it_left_out(store):
    path = REAL / "chatgpt" / "librechat-chatgpt-modern-export.json"
    conversations = json.loads(path.read_text())
    bad = [i for i, c in enumerate(conversations, 1) if not isinstance(c.get("mapping"), dict)]
    assert bad == [2]
    with pytest.raises(FormatError) as e:
        import_file(store, path)
    assert str(e.value) == f"{path.name}: conversation 2: expected an object with a 'mapping' object"
    assert store.sessions() == []
    said: list[str] = []
    sessions = import_file(store, path, skip_invalid=True, report=said.append)
    assert len(sessions) == len(conversations) - 1
    assert said == [f"{path.name}: skipped conversation 2: expected an object with a 'mapping' object"]
    good = [c for c in conversations if isinstance(c.get("mapping"), dict)]
    assert [s.title for s in sessions] == [c["title"] for c in good]
    assert store.verify().ok


def test_openwebui_current_id_naming_no_message_is_said(store, tmp_path):
    path = REAL / "openwebui" / "openwebui-importer-chatgpt_output.json"
    data = json.loads(path.read_text())
    chat = data.get("chat", data)
    messages = chat["history"]["messages"]
    chat["history"]["currentId"] = "not-a-message"
    damaged = tmp_path / "current.json"
    damaged.write_text(json.dumps(data))
    said: list[str] = []
    [s] = import_file(store, damaged, report=said.append)
    assert said == ["current.json: chat: currentId 'not-a-message' is not a message; main is the newest leaf"]
    newest = max((m["timestamp"], k) for k, m in messages.items() if not m.get("childrenIds"))[1]
    assert s.path("main")[-1].payload["content"] == messages[newest]["content"]
    with pytest.warns(UserWarning, match="currentId 'not-a-message'"):
        import_file(store, damaged)


def test_two_openwebui_chats_without_ids_sharing_message_ids_are_two_sessions(store):
    paths = [REAL / "openwebui" / f"openwebui-importer-{n}_output.json" for n in ("chatgpt", "claude")]
    chats = [openwebui_chats(p)[0] for p in paths]
    assert chats[0]["id"] == chats[1]["id"] == "" and set(chats[0]["history"]["messages"]) & set(
        chats[1]["history"]["messages"]
    )
    sessions = [import_file(store, p)[0] for p in paths]
    assert sessions[0].id != sessions[1].id
    for s, chat in zip(sessions, chats, strict=True):
        assert len(s.tree()) == len(chat["history"]["messages"])
    assert store.verify().ok
    assert [import_file(store, p)[0].id for p in paths] == [s.id for s in sessions]  # idempotent


# -- every file ----------------------------------------------------------------------

ALL = sorted(p for p in REAL.glob("*/*") if p.name != "claude-code-log-edge_cases.jsonl")


def native(store) -> list[str]:
    return list(export_native(store))


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_every_file_imports_verifies_and_round_trips_natively(store, tmp_path, path):
    sessions = import_file(store, path, skip_invalid=True, report=lambda line: None)
    assert sessions and all(s.tree() for s in sessions)
    assert store.verify().ok
    lines = native(store)
    with Store(tmp_path / "copy.db") as copy:
        import_native(copy, lines)
        assert native(copy) == lines  # row for row
    assert import_file(store, path, skip_invalid=True, report=lambda line: None)  # idempotent
    assert native(store) == lines


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_a_truncated_file_fails_in_one_line_and_changes_nothing(store, tmp_path, path):
    import_file(store, REAL / "pi" / "pi-brain-session-forked.jsonl")
    before = native(store)
    data = path.read_bytes()
    cut = data[: len(data) // 2]
    cut = cut[: len(cut.decode("utf-8", "ignore").encode())]  # whole characters
    damaged = tmp_path / path.name
    damaged.write_bytes(cut)
    with pytest.raises(FormatError) as e:
        import_file(store, damaged, format=detect_format(path))
    assert "\n" not in str(e.value) and str(e.value).startswith(path.name)
    assert native(store) == before


def test_the_broken_claude_code_transcript_is_refused_cleanly(store):
    path = CLAUDE / "claude-code-log-edge_cases.jsonl"
    with pytest.raises(FormatError) as e:
        import_file(store, path)
    assert str(e.value) == f"{path.name} line 12: uuid edge_011 appears twice"
    assert store.sessions() == []


# -- main path and leaves, per format ------------------------------------------------


def chain(parent_of: dict[str, str | None], leaf: str) -> list[str]:
    path = [leaf]
    while parent_of.get(path[-1]) is not None:
        path.append(parent_of[path[-1]])  # type: ignore[arg-type]
    return path[::-1]


def leaves(parent_of: dict[str, str | None]) -> int:
    return len(set(parent_of) - {p for p in parent_of.values() if p is not None})


def test_chatgpt_main_is_the_current_node_path(store):
    path = REAL / "chatgpt" / "openwebui-importer-gpt_example.json"
    conv = chatgpt_conversation(path)
    mapping = conv["mapping"]
    parent_of = {k: e.get("parent") for k, e in mapping.items()}
    kept = [
        k
        for k in chain(parent_of, conv["current_node"])
        if mapping[k].get("message")
        and not (
            mapping[k]["message"]["author"]["role"] == "system"
            and not mapping[k]["message"]["content"].get("parts", [""])[0]
        )
    ]
    [s] = import_file(store, path)
    assert [n.id for n in s.path("main")] == kept  # UUID keys are kept
    assert (
        s.path("main")[-1].payload["content"]
        == mapping[conv["current_node"]]["message"]["content"]["parts"][0]
    )
    assert len(s.branches()) == leaves(parent_of)


@pytest.mark.parametrize(
    "name", ["openwebui-importer-chatgpt_output.json", "openwebui-importer-claude_output.json"]
)
def test_openwebui_main_is_the_current_id_path(store, name):
    path = REAL / "openwebui" / name
    [chat] = openwebui_chats(path)
    messages = chat["history"]["messages"]
    parent_of = {k: m.get("parentId") for k, m in messages.items()}
    [s] = import_file(store, path)
    assert [n.payload["content"] for n in s.path("main")] == [
        messages[k]["content"] for k in chain(parent_of, chat["history"]["currentId"])
    ]
    assert len(s.branches()) == leaves(parent_of)


def test_librechat_flat_export_main_is_the_newest_leaf(store):
    path = REAL / "librechat" / "librechat-opts-nonr-branches.json"
    messages = librechat_messages(path)
    zero = "00000000-0000-0000-0000-000000000000"
    parent_of = {
        m["messageId"]: (None if m["parentMessageId"] == zero else m["parentMessageId"]) for m in messages
    }
    by_id = {m["messageId"]: m for m in messages}
    newest = max(
        (by_id[k]["createdAt"], i, k) for i, k in enumerate(parent_of) if k not in parent_of.values()
    )[2]
    [s] = import_file(store, path)
    assert len(s.tree()) == len(messages)
    assert [n.payload["content"] for n in s.path("main")] == [
        by_id[k]["text"] for k in chain(parent_of, newest)
    ]
    assert len(s.branches()) == leaves(parent_of)


@pytest.mark.parametrize(
    "name", ["pi-brain-session-forked.jsonl", "pi-brain-session-with-branch-summary.jsonl"]
)
def test_pi_main_is_the_last_entry_path(store, name):
    path = PI / name
    entries = [r for r in jsonl(path) if r.get("type") not in NOT_NODES]
    parent_of = {r["id"]: r.get("parentId") for r in entries}
    [s] = import_file(store, path)
    assert len(s.tree()) == len(entries)
    assert len(s.path("main")) == len(chain(parent_of, entries[-1]["id"]))
    assert len(s.branches()) == leaves(parent_of)
    assert s.verify().ok
