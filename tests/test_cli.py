"""The command line, through click's CliRunner, on exact (normalised) output."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from sessiontree import Store
from sessiontree.cli import cli
from sessiontree.db import migrations

from conftest import user

ID = re.compile(r"\b[0-9a-f]{8}(?:-[0-9a-f]{1,12}){0,4}\b")
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def normalise(text: str, tmp_path: Path | None = None) -> str:
    if tmp_path is not None:
        text = text.replace(str(tmp_path), "<tmp>")
    text = TIME.sub("<time>", ID.sub("<id>", text))
    return "\n".join(re.sub(r" {2,}", "  ", line).rstrip() for line in text.splitlines())


DEMO = """\
database: <tmp>/cli.db
session <id>
user: What's the weather in Paris? Email the forecast to bob@example.com.

== 1. run: the agent checks the weather, then wants to send an email
assistant -> get_weather({"city": "Paris"})
  running get_weather [call_weather]
  ok get_weather: Sunny in Paris, 21C, light wind
assistant: Paris is sunny. I'll email Bob.
assistant -> send_email({"to": "bob@example.com", "subject": "Paris forecast", "body": "Sunny, 21C, light wind."})
paused: send_email requires approval
  call call_email: send_email({"to": "bob@example.com", "subject": "Paris forecast", "body": "Sunny, 21C, light wind."})
checkpoint weather-known -> <id>

== 2. a human approves (from any process, any time later)
pending pauses: 1
approved call_email

== 3. resume: the email goes out and the agent finishes
  running send_email [call_email]
  ok send_email: email to bob@example.com queued: 'Paris forecast'
assistant: Done: Bob has the Paris forecast (sunny, 21C).

== 4. fork the checkpoint and re-run with another model
assistant: Paris: sunny, 21C. I drafted the email but did not send it.

== 5. the tree
* <id> system: You are a careful assistant with tools.
* <id> user: What's the weather in Paris? Email the forecast to bob@example.com.
* <id> assistant: -> get_weather({"city": "Paris"})
* <id> tool_start: get_weather
* <id> tool: [call_weather] Sunny in Paris, 21C, light wind [weather-known]
|\\
| * <id> assistant: Paris: sunny, 21C. I drafted the email but did not send it. (experiment)
* <id> assistant: Paris is sunny. I'll email Bob. -> send_email({"to": "bob@example.com",…
* <id> pause: send_email (send_email requires approval)
* <id> decision: call_email approve by demo-operator
* <id> tool_start: send_email
* <id> tool: [call_email] email to bob@example.com queued: 'Paris forecast'
* <id> assistant: Done: Bob has the Paris forecast (sunny, 21C). (main)

explore: sessiontree --db <tmp>/cli.db tree <id>  sessiontree --db <tmp>/cli.db log experiment -s <id>  sessiontree --db <tmp>/cli.db diff main experiment -s <id>
see it in a browser: sessiontree --db <tmp>/cli.db html <id> -o demo.html  (or: sessiontree --db <tmp>/cli.db serve)"""


def test_demo(invoke, db, tmp_path):
    result = invoke("demo")
    assert normalise(result.output, tmp_path) == DEMO
    with Store(db) as store:
        assert store.verify().ok and store.pending() == []
        (session,) = store.sessions()
        s = store.session(session.id)
        assert {b.name for b in s.branches()} == {"main", "experiment"}
        assert {store.run(n.run_id).model for n in s.tree() if n.run_id} == {"scripted-a", "scripted-b"}


def test_demo_uses_the_default_database_in_the_data_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("SESSIONTREE_DB", raising=False)
    result = CliRunner().invoke(cli, ["demo"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "data" / "sessiontree" / "sessiontree.db").exists()
    result = CliRunner().invoke(cli, ["sessions"])
    assert "demo: weather report" in result.output


def test_sessions_env_variable_and_json(invoke, db, monkeypatch):
    invoke("demo")
    monkeypatch.setenv("SESSIONTREE_DB", str(db))
    result = CliRunner().invoke(cli, ["sessions"])
    assert normalise(result.output) == (
        "ID  NODES  LAST ACTIVITY  TITLE\n<id>  12  <time>  demo: weather report"
    )
    data = json.loads(invoke("sessions", "--json").output)
    assert [(d["title"], d["node_count"]) for d in data] == [("demo: weather report", 12)]


def test_tree_log_show_branches_diff_pending(invoke, small):
    assert normalise(invoke("tree", small["session"][:13]).output) == textwrap.dedent("""\
        session <id>  small
        * <id> user: Hi?
        |\\
        | * <id> assistant: -> rm({"path": "/"})
        | * <id> pause: rm (risky) (alt) <- waiting for a human
        * <id> assistant: Hello! (main) [greeted]""")
    assert normalise(invoke("log", "alt").output) == textwrap.dedent("""\
        user <id>
          Hi?

        assistant <id>
          -> rm({"path": "/"}) [c1]

        -- pause: rm (risky) (<id>) --""")
    assert normalise(invoke("branches").output) == textwrap.dedent("""\
        KIND  NAME  AT  UPDATED
        branch  alt  <id>  <time>
        branch  main  <id>  <time>
        checkpoint  greeted  <id>  <time>""")
    assert normalise(invoke("diff", "main", "alt").output) == textwrap.dedent("""\
        common ancestor: <id> user: Hi?
        --- main: 1 node(s)
        - <id> assistant: Hello!
        +++ alt: 2 node(s)
        + <id> assistant: -> rm({"path": "/"})
        + <id> pause: rm (risky)""")
    assert normalise(invoke("pending").output) == textwrap.dedent("""\
        pause <id>  session <id>  <time>
          call c1: rm({"path": "/"})  - risky""")
    shown = invoke("show", small["question"][:20]).output
    assert f"node     {small['question']}" in shown and "parent   (root)" in shown
    assert json.loads(invoke("show", "greeted", "--json").output)["payload"]["content"] == "Hello!"
    assert len(json.loads(invoke("pending", "--json").output)) == 1
    assert json.loads(invoke("tree", "--json").output)["pending"] == [small["pause"]]


def test_fork_checkpoint_edit(invoke, small, db, monkeypatch, tmp_path):
    assert normalise(invoke("fork", "again", "--at", "greeted").stdout) == "branch again -> <id>"
    assert (
        normalise(invoke("checkpoint", "start", "--at", small["question"]).stdout)
        == "checkpoint start -> <id>"
    )
    invoke("edit", small["question"], "-b", "polite", "--text", "Hello, please?")
    editor = tmp_path / "editor.sh"
    editor.write_text("#!/bin/sh\nprintf 'Edited in an editor\\n' > \"$1\"\n")
    editor.chmod(0o755)
    monkeypatch.setenv("EDITOR", str(editor))
    invoke("edit", small["question"], "-b", "edited")
    with Store(db) as store:
        s = store.session(small["session"])
        assert s.messages("polite") == [user("Hello, please?")]
        assert s.messages("edited") == [user("Edited in an editor")]
        assert s.branch("again").head_id == s.node("greeted").id
    result = invoke("checkpoint", "start", code=1)
    assert (
        result.output == f"Error: a checkpoint named 'start' already exists in session {small['session']}\n"
    )


def test_approve_reject_and_decision_errors(invoke, small, db):
    out = invoke("reject", small["pause"], "--reason", "never rm /", "--by", "ops").output
    # The fixture's pause was made by a testing.ScriptedModel, which a command cannot rebuild.
    assert normalise(out.replace(str(db), "<db>")) == (
        "decision <id> on pause <id>: c1\nresume with: sessiontree --db <db> resume <id> --model MODEL"
    )
    result = invoke("approve", small["pause"][:20], code=1)
    assert result.output == f"Error: pause {small['pause']} already has a decision\n"
    with Store(db) as store:
        decision = store.session(small["session"]).head("alt")
        assert decision.payload["decisions"] == {"c1": {"action": "reject", "reason": "never rm /"}}
        assert decision.payload["by"] == "ops"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["log", "no-such-branch"], "Error: no node, branch or checkpoint 'no-such-branch' in session"),
        (["show", "ffff"], "Error: no node, branch or checkpoint 'ffff' in session"),
        (["approve", "0000000"], "Error: no node '0000000'"),
        (["tree", "zzzz"], "Error: no session 'zzzz'"),
        (["fork", "x"], "Error: Missing option '--at'"),
        (["prune", "--bogus"], "Error: No such option '--bogus'."),
    ],
)
def test_user_mistakes_are_one_line_errors(db, small, args, message):
    result = CliRunner().invoke(cli, ["--db", str(db), *args])
    assert result.exit_code != 0
    assert message in result.output
    assert isinstance(result.exception, SystemExit)  # no traceback escaped


def test_an_ambiguous_prefix_is_refused(invoke, small):
    shared = small["session"][:8]  # UUIDv7: everything made this minute shares it
    result = invoke("show", shared, code=1)
    assert "use more characters" in result.output and result.output.count("\n") == 1  # session and nodes


def test_missing_database(tmp_path):
    result = CliRunner().invoke(cli, ["--db", str(tmp_path / "nope.db"), "sessions"])
    assert result.exit_code == 1
    assert result.output == (
        f"Error: no database at {tmp_path / 'nope.db'} (create one with `sessiontree --db {tmp_path / 'nope.db'}"
        f" demo` or `sessiontree --db {tmp_path / 'nope.db'} run`, or check --db / SESSIONTREE_DB)\n"
    )
    assert not (tmp_path / "nope.db").exists()


def test_prune_verify_stats_backup_migrate(invoke, small, db, tmp_path):
    invoke("fork", "tmp", "--at", "greeted")
    with Store(db) as store:
        s = store.session(small["session"])
        s.append(user("scratch"), branch="tmp")
        s.delete_branch("tmp")
    assert invoke("prune", "--grace", "0").output == (
        "would remove 1 node(s) and 0 run(s)\nrun again with --yes to delete them\n"
    )
    assert invoke("prune", "--yes", "--grace", "0").output == "removed 1 node(s) and 0 run(s)\n"
    assert invoke("verify").output == "ok: 1 session(s), 4 node(s), 0 problem(s)\n"
    stats = json.loads(invoke("stats", "--json").output)
    assert stats["nodes"] == {"message": 3, "pause": 1} and stats["pending"] == 1
    out = invoke("backup", str(tmp_path / "copy.db")).output
    assert out.startswith(f"backed up {db} to {tmp_path / 'copy.db'}")
    with Store(tmp_path / "copy.db") as copy:
        assert copy.verify().nodes == 4
    assert invoke("migrate", "--list").output == f"0 pending step(s); schema version {len(migrations())}\n"
    with Store(db) as store:  # break it: verify exits 1
        store.conn.execute("PRAGMA foreign_keys = OFF")
        store.conn.execute("DELETE FROM nodes WHERE id = ?", (small["question"],))
    result = invoke("verify", code=1)
    assert "parent: node" in result.output and result.output.endswith("problem(s)\n")


def test_export_then_import_round_trips(invoke, small, db, tmp_path):
    out = tmp_path / "all.jsonl"
    invoke("export", "-o", str(out))
    copy = tmp_path / "copy.db"
    result = CliRunner().invoke(cli, ["--db", str(copy), "import", str(out)])
    assert result.exit_code == 0, result.output
    assert normalise(result.output.splitlines()[-1]) == "imported session <id> (native): small"
    with Store(db) as a, Store(copy) as b:
        sa, sb = a.session(small["session"]), b.session(small["session"])
        assert [n.to_dict() for n in sa.tree()] == [n.to_dict() for n in sb.tree()]
    messages = json.loads(invoke("export", "--format", "openai", "-b", "alt").output)
    assert [m["role"] for m in messages] == ["user", "assistant"]


def test_readonly_commands_do_not_write(invoke, small, db, monkeypatch):
    from sessiontree.cli import common

    opened = []
    monkeypatch.setattr(
        common, "Store", lambda path, readonly: opened.append(readonly) or Store(path, readonly=readonly)
    )
    wal = db.parent / (db.name + "-wal")
    before = db.read_bytes()
    for args in (["sessions"], ["tree"], ["log", "main"], ["pending"], ["verify"], ["stats"], ["prune"]):
        invoke(*args)
    assert db.read_bytes() == before
    assert not wal.exists() or wal.stat().st_size == 0  # a reader may create it, never fill it
    assert opened == [True] * 7


FIXTURES = Path(__file__).parent / "fixtures" / "conversations"


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("chatgpt-tree.json", "chatgpt"),
        ("librechat-tree.json", "librechat"),
        ("openwebui-chat.json", "openwebui"),
        ("claude-code-tool_heavy.jsonl", "claude-code"),
        ("pi-session-mixed-boundaries.jsonl", "pi"),
    ],
)
def test_import_detects_each_format(invoke, name, fmt):
    result = invoke("import", str(FIXTURES / name))
    assert normalise(result.stdout).startswith(f"imported session <id> ({fmt})")
    again = invoke("import", str(FIXTURES / name))  # idempotent: the same session, unchanged
    assert again.stdout == f"{name}: already imported, nothing new (1 session(s), {fmt})\n"
    assert invoke("verify").stdout.startswith("ok: 1 session(s)")


def test_import_of_a_broken_file_is_one_line_and_writes_nothing(invoke, db, tmp_path):
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"format": "sessiontree", "version": 1}\n{"type": "session", "id": "s1"\n')
    result = invoke("import", str(broken), "--format", "native", code=1)
    assert result.stdout == ""
    assert result.output.splitlines()[-1].startswith("Error: broken.jsonl line 2:")
    with Store(db) as store:
        assert store.sessions() == []


@pytest.mark.parametrize("where", ["parse", "write"])
def test_a_failed_import_leaves_no_new_database_behind(tmp_path, where):
    db = tmp_path / "new" / "fresh.db"
    broken = tmp_path / "broken.jsonl"
    if where == "parse":
        broken.write_text('{"format": "sessiontree", "version": 1}\n{"type": "session", "id": "s1"\n')
    else:  # parses, but the tree is refused when written: a declared depth that is wrong
        records = [
            {"format": "sessiontree", "version": 1},
            {
                "type": "session",
                "id": "s1",
                "title": None,
                "metadata": {},
                "created_at": "2026-01-01T00:00:00.000Z",
            },
            {
                "type": "node",
                "session_id": "s1",
                "id": "n1",
                "parent_id": None,
                "depth": 3,
                "kind": "note",
                "payload": {},
                "created_at": "2026-01-01T00:00:00.000Z",
            },
        ]
        broken.write_text("".join(json.dumps(r) + "\n" for r in records))
    result = CliRunner().invoke(cli, ["--db", str(db), "import", str(broken), "--format", "native"])
    assert result.exit_code == 1, result.output
    assert len(result.output.strip().splitlines()[-1:]) == 1 and "Error: broken.jsonl" in result.output
    assert not db.exists() and not Path(f"{db}-wal").exists()


def test_import_skip_invalid_reports_what_it_left_out(invoke):
    path = Path(__file__).parent / "fixtures" / "real" / "chatgpt" / "librechat-chatgpt-modern-export.json"
    refused = invoke("import", str(path), code=1)
    assert refused.output.strip().splitlines()[-1] == (
        f"Error: {path.name}: conversation 2: expected an object with a 'mapping' object"
        " (use --skip-invalid to leave it out)"
    )
    result = invoke("import", str(path), "--skip-invalid")
    assert f"{path.name}: skipped conversation 2: expected an object with a 'mapping' object" in result.stderr
    assert result.stdout.count("imported session") == len(json.loads(path.read_text())) - 1
