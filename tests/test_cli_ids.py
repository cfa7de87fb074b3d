"""Every id the CLI prints can be pasted back: harvest them from the listings and
the demo, and resolve each one with `show`."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from sessiontree import Store
from sessiontree.cli import cli

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
    assert len(harvested) > 60
    for printed in sorted(harvested):
        shown = CliRunner().invoke(cli, ["--db", str(db), "show", printed])
        assert shown.exit_code == 0, f"{printed}: {shown.output}"
        assert printed in shown.output.split()[1]  # it shows that node or session, in full


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
