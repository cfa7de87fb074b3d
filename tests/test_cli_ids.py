"""Every id the CLI prints can be pasted back: harvest them from the listings and
the demo, and resolve each one with `show`."""

from __future__ import annotations

import json
import re

import click
import pytest
from click.testing import CliRunner

from sessiontree import Store
from sessiontree.cli import cli
from sessiontree.cli.stepview import echo_step
from sessiontree.model import Node
from sessiontree.steps import Assistant, Final, Paused, Token, ToolCall, ToolStart

from conftest import assistant, user

# A printed id: 8 hex digits, then optional dash groups (full ids and prefixes alike).
PRINTED_ID = re.compile(r"(?<![\w-])[0-9a-f]{8}(?:-[0-9a-f]{1,12}){0,4}(?![\w-])")


@pytest.fixture
def crowded(tmp_path):
    """A store where many ids share long prefixes: two demos, and sessions made in the
    same milliseconds (UUIDv7 ids of one millisecond share their first 13 characters)."""
    db = tmp_path / "ids.db"
    runner = CliRunner()
    outputs = [runner.invoke(cli, ["--db", str(db), "demo"], catch_exceptions=False).output for _ in range(2)]
    with Store(db) as store:
        for i in range(6):
            s = store.create_session(f"crowd {i}")
            s.append_many([user("q"), assistant("a"), user("q2")])
            s.checkpoint("asked", at="main~1")
    return db, outputs


def invoke(db, *args: str) -> str:
    result = CliRunner().invoke(cli, ["--db", str(db), *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_every_printed_id_resolves_with_show(crowded):
    db, outputs = crowded
    latest = invoke(db, "sessions")
    session_ids = PRINTED_ID.findall(latest)
    assert len(session_ids) == 8
    for sid in session_ids:
        outputs += [invoke(db, "tree", sid), invoke(db, "branches", sid), invoke(db, "log", "-s", sid)]
    demo_session = PRINTED_ID.findall(outputs[1])[0]  # "session <id>" of the second demo
    outputs += [
        latest,
        invoke(db, "diff", "main", "experiment", "-s", demo_session),
        invoke(db, "log", "experiment", "-s", demo_session),
        invoke(db, "pending"),
    ]
    harvested = {i for text in outputs for i in PRINTED_ID.findall(text)}
    resolved = set()
    for printed in sorted(harvested):
        shown = CliRunner().invoke(cli, ["--db", str(db), "show", printed])
        assert shown.exit_code == 0, f"{printed}: {shown.output}"
        full = shown.output.split()[1]
        assert full.startswith(printed)  # it shows that node or session, in full
        resolved.add(full)
    # The printed strings vary in width with how crowded the milliseconds were, so the
    # bar is on what they reach: every session, and every node of the crowd sessions.
    with Store(db) as store:
        every_session = {info.id for info in store.sessions()}
        crowd = {
            n.id
            for info in store.sessions()
            if (info.title or "").startswith("crowd")
            for n in store.session(info.id).tree()
        }
    assert every_session <= resolved
    assert len(crowd) == 18 and crowd <= resolved


def test_listings_use_one_width_and_no_printed_prefix_is_ambiguous(crowded):
    db, _ = crowded
    text = invoke(db, "sessions")
    widths = {len(i) for i in PRINTED_ID.findall(text)}
    assert len(widths) == 1
    with Store(db) as store:
        every = [r[0] for r in store.conn.execute("SELECT id FROM nodes UNION ALL SELECT id FROM sessions")]
    for printed in PRINTED_ID.findall(invoke(db, "tree")):
        assert sum(1 for full in every if full.startswith(printed)) == 1


def test_tilde_refs_work_in_the_cli(crowded):
    db, _ = crowded
    head = invoke(db, "show", "main", "--json")
    parent = invoke(db, "show", "main~1", "--json")
    import json

    assert json.loads(head)["parent_id"] == json.loads(parent)["id"]
    node_id = json.loads(head)["id"]
    assert json.loads(invoke(db, "show", f"{node_id}~1", "--json"))["id"] == json.loads(parent)["id"]
    result = CliRunner().invoke(cli, ["--db", str(db), "show", "main~9"])
    assert result.exit_code == 1
    assert result.output == "Error: 'main~9' goes past the root: 'main' is at depth 2\n"


def test_a_name_that_looks_like_an_id_is_refused_in_one_line(crowded):
    db, _ = crowded
    result = CliRunner().invoke(cli, ["--db", str(db), "fork", "cafe", "--at", "main"])
    assert result.exit_code == 1
    assert result.output == (
        "Error: invalid branch name 'cafe': it could be read as a node id prefix; "
        "use a name with a letter beyond a-f\n"
    )


def test_tree_draws_thousands_of_forks_without_recursion(tmp_path):
    """Every turn regenerated once, 1,500 turns deep, continuing on the regenerated side."""
    db = tmp_path / "forks.db"
    with Store(db) as store:
        s = store.create_session("regenerated")
        head = s.append(user("q0"))
        for i in range(1500):
            s.append(assistant(f"first {i}"), parent=head, branch=None)
            head = s.append(assistant(f"second {i}"), parent=head, branch=None)
        s.move("main", to=head)
    out = invoke(db, "tree")
    assert out.count("first ") == 1500 and out.count("second ") == 1500


def test_terminal_escapes_in_stored_text_are_shown_not_run(tmp_path):
    db = tmp_path / "esc.db"
    evil = "hi \x1b[2J\x1b]52;c;cHduZWQ=\x07 there\u202e"
    with Store(db) as store:
        s = store.create_session(f"title {evil}")
        s.append(user(evil))
    for args in (["log"], ["tree"], ["sessions"], ["show", "main"], ["branches"]):
        out = invoke(db, *args)
        assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out, args
    assert "\\x1b[2J" in invoke(db, "log")


EVIL = "a\x1b]52;c;cHduZWQ=\x07b\u202e\nc"  # a clipboard write, a bidi override, a newline


def test_what_a_server_wrote_is_shown_not_run_in_pauses_and_decisions(tmp_path):
    db = tmp_path / "esc.db"
    call = {"id": f"id{EVIL}", "name": f"send{EVIL}", "arguments": '{"to":  "b\x1b[2J"}', "reason": EVIL}
    with Store(db) as store:
        s = store.create_session()
        s.append(user("go"))
        pause = s.append({"reason": EVIL, "calls": [call]}, kind="pause")
    out = invoke(db, "pending")
    assert out.splitlines()[1] == (
        "  call ida\\x1b]52;c;cHduZWQ=\\x07b\\u202e c: senda\\x1b]52;c;cHduZWQ=\\x07b\\u202e c"
        '({"to":  "b\\x1b[2J"})  - a\\x1b]52;c;cHduZWQ=\\x07b\\u202e c'
    )
    out = invoke(db, "approve", pause.id)
    assert out.splitlines()[0].endswith(": ida\\x1b]52;c;cHduZWQ=\\x07b\\u202e c")


def test_run_output_shows_escapes_from_the_model_and_server_as_text():
    def node(payload, kind="message"):
        return Node("n", "s", None, 1, kind, json.dumps(payload), "2026-11-30T00:00:00.000Z")

    call = {"id": f"c{EVIL}", "type": "function", "function": {"name": f"f{EVIL}", "arguments": "{}"}}
    steps = [
        Token(f"tok{EVIL}"),
        Assistant(node({"role": "assistant", "content": f"said{EVIL}", "tool_calls": [call]})),
        ToolStart(ToolCall(f"c{EVIL}", f"f{EVIL}", "{}"), node({})),
        Paused(
            node({"reason": EVIL, "calls": [{"id": f"c{EVIL}", "name": "f", "arguments": "{}"}]}, "pause")
        ),
        Final("error", None, f"ProviderError: bad{EVIL}"),
    ]

    @click.command()
    def show():
        for step in steps:
            echo_step(step)

    result = CliRunner().invoke(show, catch_exceptions=False)
    out = result.output
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "error: ProviderError: bada\\x1b]52;c;cHduZWQ=\\x07b\\u202e c\n" in out  # one line
    assert "  running fa\\x1b]52;c;cHduZWQ=\\x07b\\u202e c [ca\\x1b]52;c;cHduZWQ=\\x07b\\u202e c]" in out
    assert "paused: a\\x1b]52;c;cHduZWQ=\\x07b\\u202e c\n" in out
