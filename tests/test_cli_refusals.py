"""Bad input the commands refuse in one line, writing nothing: messages below an
undecided pause, empty text, durations out of range, huge `~N` counts and names,
malformed PostgreSQL URLs, refs of two sessions; and a database a failed command
created is removed again, while a read never turns an empty file into a store; prune
--grace takes a number of seconds only; export refuses what it would silently ignore."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from sessiontree import Approve, Store
from sessiontree.cli import cli
from sessiontree.loop import decide

from conftest import assistant, user
from test_cli import normalise

MODEL = ["--base-url", "http://127.0.0.1:9/v1", "-m", "m"]


def last_line(result) -> str:
    return result.output.splitlines()[-1]


def verify_ok(invoke) -> None:
    assert invoke("verify").output.startswith("ok:")


# -- no message below a pause nobody decided, or below unanswered tool calls -------------


def test_append_and_run_refuse_a_branch_waiting_at_a_pause(invoke, small, db):
    before = db.read_bytes()
    waiting = (
        f"Error: branch alt is waiting at pause {small['pause']}: approve or reject it first"
        f" (sessiontree --db {db} pending)\n"
    )
    assert invoke("append", "hello", "-b", "alt", code=1).output == waiting
    assert invoke("run", "hello", "-b", "alt", *MODEL, code=1).output == waiting
    assert db.read_bytes() == before
    verify_ok(invoke)


def test_append_refuses_unanswered_tool_calls_and_says_how_to_answer_them(invoke, small, db):
    with Store(db) as store:
        decide(store, small["pause"], {"c1": Approve()})
        s = store.session(small["session"])
        s.fork("calls", at="greeted")
        s.append(
            assistant(
                None, [{"id": "c2", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]
            ),
            branch="calls",
        )
    assert invoke("append", "hello", "-b", "alt", code=1).output == (
        f"Error: branch alt has unanswered tool calls (c1): resume it first"
        f" (sessiontree --db {db} resume {small['pause']} --model MODEL)\n"
    )
    assert invoke("append", "hello", "-b", "calls", "--role", "assistant", code=1).output == (
        "Error: branch calls has unanswered tool calls (c2): let the agent answer them first"
        f" (sessiontree --db {db} run -b calls)\n"
    )
    verify_ok(invoke)
    assert normalise(invoke("append", "go on").stdout) == "branch main -> <id>"  # main is settled


def test_edit_refuses_a_copy_below_an_undecided_pause(invoke, small, db):
    with Store(db) as store:  # a tree the library let through: a message below the pause
        s = store.session(small["session"])
        below = s.append(user("sneaked in"), parent=small["pause"], branch=None)
    assert invoke("edit", below.id, "-b", "again", "--text", "x", code=1).output == (
        f"Error: node {below.id} follows pause {small['pause']}, which nobody has decided:"
        " an edited copy there would leave the model's tool calls unanswered\n"
    )
    with Store(db) as store:
        assert "again" not in [b.name for b in store.session(small["session"]).branches()]


def test_empty_text_is_refused(invoke, small, db):
    before = db.read_bytes()
    assert last_line(invoke("append", "", code=2)) == "Error: TEXT is empty: give the text of the message"
    assert last_line(invoke("append", "  \n", code=2)) == "Error: TEXT is empty: give the text of the message"
    assert last_line(invoke("append", "-", input="", code=2)) == "Error: TEXT is empty: stdin held no text"
    assert last_line(invoke("edit", small["question"], "-b", "e", "--text", "", code=2)) == (
        "Error: --text is empty: give the new text of the message"
    )
    assert db.read_bytes() == before


def test_resume_names_the_kind_of_a_node_that_is_not_a_pause(invoke, small):
    assert invoke("resume", small["question"], *MODEL, code=1).output == (
        f"Error: node {small['question']} is a message node, not a pause\n"
    )


# -- durations ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (
            ["retention", "--save", "--drop-older-than", "9999999999999999999999d"],
            "Error: Invalid value for '--drop-older-than': '9999999999999999999999d' is longer than 100 years",
        ),
        (
            ["retention", "--drop-older-than", "36526d", "--dry-run"],
            "Error: Invalid value for '--drop-older-than': '36526d' is longer than 100 years",
        ),
        (
            ["retention", "--strip-older-than", "99999999999999d", "--dry-run"],
            "Error: Invalid value for '--strip-older-than': '99999999999999d' is longer than 100 years",
        ),
        (
            ["empty-trash", "--older-than", "99999999999999999999d"],
            "Error: Invalid value for '--older-than': '99999999999999999999d' is longer than 100 years",
        ),
        (
            ["retention", "--save", "--dry-run", "--drop-older-than", "3d"],
            "Error: --save stores the policy and --dry-run writes nothing: give one of them",
        ),
        (
            ["worker", "--poll", "nan", *MODEL],
            "Error: Invalid value for '--poll': 'nan' seconds is not a finite duration",
        ),
        (
            ["worker", "--poll", "inf", *MODEL],
            "Error: Invalid value for '--poll': 'inf' seconds is not a finite duration",
        ),
        (
            ["worker", "--poll", "0.01", *MODEL],
            "Error: Invalid value for '--poll': '0.01' seconds is shorter than 0.05 s",
        ),
    ],
)
def test_durations_out_of_range_are_usage_errors(invoke, small, db, args, error):
    before = db.read_bytes()
    assert last_line(invoke(*args, code=2)) == error
    assert db.read_bytes() == before


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (
            ["search", "x", "-n", "99999999999999999999"],
            "Error: Invalid value for '-n' / '--limit': 99999999999999999999 is not in the range"
            " 1<=x<=9007199254740992.",
        ),
        (
            [
                "retention",
                "--strip-older-than",
                "1d",
                "--strip-min-bytes",
                "99999999999999999999",
                "--dry-run",
            ],
            "Error: Invalid value for '--strip-min-bytes': 99999999999999999999 is not in the range"
            " 1<=x<=9007199254740992.",
        ),
    ],
)
def test_counts_beyond_a_database_integer_are_usage_errors(invoke, small, args, error):
    assert last_line(invoke(*args, code=2)) == error


def test_the_longest_age_is_100_years_and_a_saved_policy_beyond_it_is_refused(invoke, small, db):
    assert invoke("retention", "--drop-older-than", "36525d", "--dry-run").output == (
        "would move 0 session(s) to the trash; would strip 0 tool result(s), 0 bytes\n"
    )
    with Store(db) as store, store.transaction():  # saved before ages were bounded
        store.storage.set_retention_policy({"drop_older_than": 8.64e26})
    assert invoke("retention", "--dry-run", code=1).output == (
        "Error: the saved retention policy's --drop-older-than (8.64e+26 s) is longer than 100 years:"
        f" save a new one with `sessiontree --db {db} retention --save --drop-older-than AGE`\n"
    )


# -- refs -----------------------------------------------------------------------------


def test_a_huge_ancestor_count_goes_past_the_root(invoke, small):
    assert invoke("log", "main~99999999999999999999999", code=1).output == (
        "Error: 'main~99999999999999999999999' goes past the root: 'main' is at depth 1\n"
    )
    digits = "9" * 5000
    assert invoke("log", f"main~{digits}", code=1).output == (
        f"Error: 'main~{digits[:55]}'... (5,005 characters) goes past the root: 'main' is at depth 1\n"
    )
    result = invoke("show", f"{small['question']}~{digits}", code=1)
    assert (
        result.output.startswith(f"Error: '{small['question']}~999") and "goes past the root" in result.output
    )


def test_a_huge_name_is_shortened_in_messages(invoke, small):
    name = "x" * 100_000
    assert invoke("fork", name, "--at", "main", code=1).output == (
        f"Error: invalid branch name '{'x' * 60}'... (100,000 characters): use 1-200 characters,"
        " no leading or trailing spaces\n"
    )
    assert invoke("tree", name, code=1).output == f"Error: no session '{'x' * 60}'... (100,000 characters)\n"
    assert invoke("log", name, code=1).output.startswith(
        f"Error: no node, branch or checkpoint '{'x' * 60}'... (100,000 characters) in session "
    )


def test_usage_since_must_be_an_ancestor(invoke, small):
    result = invoke("usage", "main", "--since", "alt", code=1)
    assert normalise(result.output) == (
        "Error: 'alt' (<id>) is not an ancestor of 'main' (<id>): usage counts the calls after a node on the path"
    )
    assert "total" in invoke("usage", "main", "--since", small["question"]).output


@pytest.fixture
def two_sessions(small, db):
    """``small`` and, more recently active, a second session."""
    with Store(db) as store:
        other = store.create_session("other")
        n1 = other.append(user("elsewhere"))
        other.append(assistant("yes"))
    return {**small, "other": other.id, "n1": n1.id}


def test_diff_and_compare_read_names_in_the_session_of_a_node_id(invoke, two_sessions):
    q = two_sessions["question"]  # a node of the older session: main is read there
    assert normalise(invoke("diff", "main", q).output) == (
        "common ancestor: <id> user: Hi?\n--- main: 1 node(s)\n- <id> assistant: Hello!\n+++ <id>: 0 node(s)"
    )
    assert normalise(invoke("compare", "main", q).output).splitlines()[:3] == [
        "BRANCH  STATUS  STEPS  TOOLS  IN  OUT  MS  COST  FINAL",
        "main  completed  1  0  0  0  0  -  Hello!",
        "<id>  in progress  0  0  0  0  0  -",
    ]
    n1 = two_sessions["n1"]
    apart = (
        f"Error: '{q}' and '{n1}' are in different sessions ({two_sessions['session']} and"
        f" {two_sessions['other']}); give refs of one session\n"
    )
    assert invoke("diff", q, n1, code=1).output == apart
    assert invoke("compare", q, n1, code=1).output == apart


# -- experiments ------------------------------------------------------------------------


def test_rerun_refuses_two_variants_of_one_name(invoke, small):
    result = invoke(
        "rerun", "main", "--variant", "a=x", "--variant", "a=y", "--base-url", "http://127.0.0.1:9/v1", code=2
    )
    assert last_line(result) == (
        "Error: Invalid value for --variant: two variants are named 'a': each needs a name of its own"
    )


@pytest.mark.parametrize("price", ["m=nan,inf", "m=1,nan", "m=-1,2", "m=1,-0.5", "m=inf,1"])
def test_compare_prices_are_finite_and_not_negative(invoke, small, price):
    assert last_line(invoke("compare", "main", "alt", "--price", price, "--json", code=2)) == (
        f"Error: Invalid value for --price: '{price}': prices are finite numbers >= 0"
        " (dollars per million tokens)"
    )


# -- databases ----------------------------------------------------------------------------


def run_cli(*args: str, **kwargs):
    return CliRunner().invoke(cli, list(args), **kwargs)


@pytest.mark.parametrize("args", [["append", "hi"], ["checkpoint", "c"], ["fork", "b", "--at", "main"]])
def test_a_failed_command_removes_the_database_it_created(tmp_path, args):
    new = tmp_path / "x" / "y" / "new.db"
    result = run_cli("--db", str(new), *args)
    assert result.exit_code == 1
    assert result.output == "Error: the database has no sessions yet\n"
    assert list(tmp_path.iterdir()) == []  # nor the directories made for it


def test_a_failed_command_removes_the_default_database_it_created(tmp_path, monkeypatch):
    monkeypatch.delenv("SESSIONTREE_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    result = run_cli("append", "hi")
    assert result.output == "Error: the database has no sessions yet\n"
    assert not (tmp_path / "data").exists()


def test_a_database_that_was_there_before_is_never_removed(tmp_path):
    there = tmp_path / "there.db"
    run_cli("--db", str(there), "demo")
    assert run_cli("--db", str(there), "append", "x", "-b", "typo").exit_code == 1
    assert json.loads(run_cli("--db", str(there), "sessions", "--json").output)[0]["node_count"] == 12


def test_copy_removes_a_destination_it_created_when_it_fails(tmp_path, small, db):
    out = tmp_path / "cp.db"
    result = run_cli("copy", str(db), str(out), "-s", "nope")
    assert result.exit_code == 1
    assert last_line(result) == "Error: no session 'nope'"
    assert not out.exists() and not Path(f"{out}-wal").exists()


def test_reads_never_turn_an_empty_file_into_a_store(tmp_path):
    empty = tmp_path / "z0.db"
    empty.touch()
    for args in (["sessions"], ["tree"], ["stats"], ["pending"]):
        result = run_cli("--db", str(empty), *args)
        assert result.exit_code == 1, result.output
        assert result.output == (
            f"Error: no database at {empty}: the file is empty (create one with `sessiontree --db {empty} demo`"
            f" or `sessiontree --db {empty} run`, or check --db / SESSIONTREE_DB)\n"
        )
    assert last_line(run_cli("copy", str(empty), str(tmp_path / "c.db"))) == (
        f"Error: no database at {empty}: the file is empty"
    )
    assert run_cli("--db", str(empty), "append", "hi").output == "Error: the database has no sessions yet\n"
    assert empty.read_bytes() == b"" and sorted(p.name for p in tmp_path.iterdir()) == ["z0.db"]
    assert run_cli("--db", str(empty), "demo").exit_code == 0  # a write command makes a store of it
    assert json.loads(run_cli("--db", str(empty), "sessions", "--json").output)[0]["node_count"] == 12


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("postgresql://[bad", "Error: invalid PostgreSQL URL postgresql://[bad: Invalid IPv6 URL"),
        (
            "postgresql://u:s3cret@[::1/x",
            "Error: invalid PostgreSQL URL postgresql://u:***@[::1/x: Invalid IPv6 URL",
        ),
        (
            "postgresql://u:p%zz@db.invalid/x",
            'Error: invalid PostgreSQL URL postgresql://u:***@db.invalid/x: invalid percent-encoded token: "***"',
        ),
        (
            "postgresql://db.invalid/x?bogus=1",
            'Error: invalid PostgreSQL URL postgresql://db.invalid/x: invalid URI query parameter: "bogus"',
        ),
    ],
)
def test_a_malformed_postgres_url_is_one_clear_line(url, error):
    pytest.importorskip("psycopg")
    result = run_cli("--db", url, "sessions")
    assert result.exit_code == 1
    assert result.output == error + "\n"
    assert "s3cret" not in result.output and "%zz" not in result.output


def test_a_postgres_url_without_a_host_is_read_as_libpq_reads_it():
    pytest.importorskip("psycopg")
    result = run_cli("--db", "postgresql:///x?host=/nonexistent-dir", "sessions")
    assert result.exit_code == 1
    assert result.output.startswith("Error: cannot reach PostgreSQL at postgresql:///x: ")
    assert result.output.count("\n") == 1


@pytest.mark.parametrize(
    ("grace", "error"),
    [
        ("nan", "Error: Invalid value for '--grace': 'nan' seconds is not a finite duration"),
        ("inf", "Error: Invalid value for '--grace': 'inf' seconds is not a finite duration"),
        ("1e300", "Error: Invalid value for '--grace': '1e300' seconds is longer than 100 years"),
        ("-1", "Error: Invalid value for '--grace': '-1' seconds is negative"),
    ],
)
def test_prune_grace_is_a_number_of_seconds(invoke, small, db, grace, error):
    before = db.read_bytes()
    assert last_line(invoke("prune", "--grace", grace, "--yes", code=2)) == error
    assert db.read_bytes() == before


def test_export_refuses_what_it_would_ignore(invoke, small, db):
    with Store(db) as store:
        other = store.create_session("other").id
    assert last_line(invoke("export", "--format", "openai", small["session"], other, code=2)) == (
        "Error: --format openai exports one branch of one session: give one SESSION, not 2"
    )
    assert last_line(invoke("export", "-b", "alt", code=2)) == (
        "Error: -b/--branch only applies with --format openai, yoagent-messages, pi, claude-code,"
        " messages, sharegpt, yieldagent (native exports whole sessions)"
    )
    assert invoke("export", "--format", "openai", "-b", "alt", small["session"]).output.startswith("[")
