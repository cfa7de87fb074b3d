"""The newcomer's frictions with reading the command line (issue 25 item 6, review rows
11, 14-16, 18-20, 23, 24 and the grouped --help), each as a user meets it."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from sessiontree import NotFound, Store
from sessiontree.cli import cli
from sessiontree.cli.help import SECTIONS


def invoke(db: str, *args: str, code: int = 0, input: str | None = None):
    result = CliRunner().invoke(cli, ["--db", db, *args], input=input)
    assert result.exit_code == code, result.output
    return result


def pasted_hint(db: str, *words: str) -> str:
    """A hint as a command run with ``--db db`` prints it: with that --db (a file made absolute)."""
    where = db if "://" in db else str(Path(db).absolute())
    return shlex.join(["sessiontree", "--db", where, *words])


CALL = {"id": "c1", "name": "lookup_order", "arguments": "{}"}


def tool_turns(store: Store, title: str = "orders"):
    """user -> assistant(call) -> tool_start -> tool result -> assistant(call) -> pause."""
    s = store.create_session(title)
    ask = {"id": "c1", "type": "function", "function": {"name": "lookup_order", "arguments": "{}"}}
    nodes = s.append_many([{"role": "user", "content": "where is order 9?"}])
    nodes.append(s.append({"role": "assistant", "content": None, "tool_calls": [ask]}))
    nodes.append(s.append({"calls": [CALL]}, kind="tool_start"))
    nodes.append(s.append({"role": "tool", "tool_call_id": "c1", "content": "shipped"}))
    refund = {"id": "c2", "type": "function", "function": {"name": "refund", "arguments": "{}"}}
    nodes.append(s.append({"role": "assistant", "content": None, "tool_calls": [refund]}))
    nodes.append(s.append({"calls": [{"id": "c2", "name": "refund", "arguments": "{}"}]}, kind="pause"))
    return s, nodes


# -- --help grouped by noun; help COMMAND; python -m sessiontree ------------------------


def test_help_lists_the_commands_by_section_and_every_command_once():
    out = CliRunner().invoke(cli, ["--help"]).output
    titles = [line[:-1] for line in out.splitlines() if line.endswith(":") and not line.startswith(" ")]
    assert titles == [
        "Options",
        "Inspect",
        "Sessions and branches",
        "Runs and approvals",
        "Import/export",
        "Serve",
        "Maintenance",
        "Help",
    ]
    assert "Commands:" not in out
    listed = [
        line.split()[0] for line in out.splitlines() if line.startswith("  ") and not line.startswith("   ")
    ]
    for name in cli.commands:
        assert listed.count(name) == 1, name
    assert out.index("\nInspect:\n  sessions           List sessions") < out.index(
        "\nRuns and approvals:\n  run "
    )
    # one column for the summaries, whatever the section
    commands = out[out.index("\nInspect:\n") :].splitlines()
    columns = {
        len(line) - len(line[2:].split(" ", 1)[1].lstrip()) for line in commands if line.startswith("  ")
    }
    assert len(columns) == 1


def test_every_command_is_in_a_section():
    named = {n for names in SECTIONS.values() for n in names}
    assert set(cli.commands) <= named, set(cli.commands) - named


def test_a_command_no_section_names_is_still_listed():
    import click

    from sessiontree.cli.common import SessionTreeGroup

    @click.group(cls=SessionTreeGroup)
    def group() -> None:
        """A group."""

    @group.command()
    def sessions() -> None:
        """List them."""

    @group.command()
    def brand_new() -> None:
        """Something new."""

    out = CliRunner().invoke(group, ["--help"]).output
    assert "Inspect:\n  sessions   List them.\n\nOther commands:\n  brand-new  Something new.\n" in out


def test_help_command_shows_a_commands_help_and_refuses_an_unknown_one():
    runner = CliRunner()
    assert runner.invoke(cli, ["help"]).output == runner.invoke(cli, ["--help"]).output
    shown = runner.invoke(cli, ["help", "diff"])
    assert shown.exit_code == 0
    assert shown.output == runner.invoke(cli, ["diff", "--help"]).output
    wrong = runner.invoke(cli, ["help", "nope"])
    assert (wrong.exit_code, wrong.output) == (
        1,
        "Error: no command 'nope'; `sessiontree --help` lists them\n",
    )


def test_python_dash_m_sessiontree_is_the_command():
    done = subprocess.run([sys.executable, "-m", "sessiontree", "--version"], capture_output=True, text=True)
    assert (done.returncode, done.stdout.split()[0]) == (0, "sessiontree,")
    done = subprocess.run(
        [sys.executable, "-m", "sessiontree", "help", "tree"], capture_output=True, text=True
    )
    assert done.returncode == 0 and done.stdout.startswith("Usage: sessiontree tree ")


# -- row 11: ~N counts messages, ~N! every node; a checkpoint on a marker warns -----------


def test_tilde_n_steps_over_markers_and_bang_counts_every_node(any_store):
    s, (user, ask, start, result, refund, pause) = tool_turns(any_store)
    assert s.node("main") == pause
    assert s.node("main~1") == refund  # the message before the pause
    assert s.node("main~2") == result  # "the last tool result", not the tool_start
    assert s.node("main~3") == ask
    assert s.node("main~~~") == ask
    assert s.node("main~2~1") == ask
    assert s.node(f"{result.id}~1") == ask
    assert any_store.node(f"{pause.id}~2") == result
    # The old meaning, every node counted, is ~N!
    assert s.node("main~1!") == refund
    assert s.node("main~3!") == start
    assert s.node("main~2~1!") == start
    assert any_store.node(f"{pause.id}~3!") == start
    assert s.checkpoint("looked-up", at="main~2").node_id == result.id
    assert s.node("main~4") == user
    with pytest.raises(NotFound) as caught:
        s.node("main~5")  # five nodes above, but four messages
    assert (
        str(caught.value)
        == "'main~5' goes past the root: 'main' is at depth 5; ~N counts messages, ~N! every node"
    )
    with pytest.raises(NotFound, match=r"^'main~9' goes past the root: 'main' is at depth 5$"):
        s.node("main~9")
    assert s.node("main~5!") == user


def test_cli_tilde_n_and_a_checkpoint_on_a_marker_warns(db_target):
    with Store(db_target) as store:
        s, (_, ask, start, result, _, _) = tool_turns(store)
    done = invoke(db_target, "checkpoint", "looked-up", "--at", "main~2", "-s", s.id)
    assert (done.stdout, done.stderr) == (f"checkpoint looked-up -> {result.id}\n", "")
    done = invoke(db_target, "checkpoint", "started", "--at", "main~3!", "-s", s.id)
    assert done.stdout == f"checkpoint started -> {start.id}\n"
    with Store(db_target) as store:
        short = store.abbreviations([start.id])[start.id]
    assert done.stderr == (
        f"warning: checkpoint started marks a tool_start node, not a message; --at {short}~1 would mark"
        " the message before it\n"
    )
    assert ask.id in invoke(db_target, "show", f"{short}~1").stdout.splitlines()[0]


# -- row 16: show PREFIX of a session and a node says what it matched -----------------


FAR = "ffff0000-0000-7000-8000-000000000000"


def twin(node_id: str) -> str:
    """An id sharing all but its last character with ``node_id``."""
    return node_id[:-1] + ("0" if node_id[-1] != "0" else "1")


def test_show_a_prefix_of_a_session_and_a_node_names_both(db_target):
    with Store(db_target) as store:
        s = store.create_session("first")
        n = s.append({"role": "user", "content": "hi"})
        other = store.create_session("twin", id=twin(n.id))
    prefix = n.id[:-1]
    done = invoke(db_target, "show", prefix, code=1)
    assert done.output == f"Error: {prefix} matches session {other.id} and node {n.id}; use more characters\n"
    # Whole ids, and a prefix of one of them only, still show what they name.
    assert invoke(db_target, "show", other.id).stdout.startswith(f"session  {other.id}  twin\n")
    assert invoke(db_target, "show", n.id).stdout.startswith(f"node     {n.id}\n")
    assert invoke(db_target, "show", s.id).stdout.startswith(f"session  {s.id}  first\n")


def test_show_a_prefix_of_a_session_and_several_nodes_names_them(db_target):
    with Store(db_target) as store:
        s = store.create_session("first", id=FAR)  # an id far from the nodes' ones
        a, b = s.append_many([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}])
        common = len(__import__("os").path.commonprefix([a.id, b.id]))
        other = store.create_session("twin", id=a.id[:common] + "z")  # shares the nodes' prefix
    prefix = a.id[:common]
    done = invoke(db_target, "show", prefix, code=1)
    assert (
        done.output == f"Error: {prefix} matches session {other.id} and several nodes; use more characters\n"
    )


# -- row 20: -s/--session on every verb that takes a session ------------------------------


def two_sessions(db: str) -> tuple[str, str]:
    with Store(db) as store:
        old = store.create_session("old", id="aaaa0000-0000-7000-8000-000000000001")
        old.append({"role": "user", "content": "from the old one"})
        new = store.create_session("new", id="bbbb0000-0000-7000-8000-000000000002")
        new.append({"role": "user", "content": "from the new one"})
        return old.id, new.id


@pytest.mark.parametrize("verb", ["tree", "branches", "export", "html"])
def test_dash_s_names_the_session_where_the_argument_did(db_target, tmp_path, monkeypatch, verb):
    monkeypatch.chdir(tmp_path)
    old, _ = two_sessions(db_target)
    by_position = invoke(db_target, verb, old[:13]).stdout
    by_flag = invoke(db_target, verb, "-s", old[:13]).stdout
    assert by_flag == by_position
    assert by_flag == invoke(db_target, verb, "--session", old).stdout
    assert by_flag != invoke(db_target, verb).stdout  # the latest session, or all of them
    if verb == "html":
        assert by_flag.startswith("wrote sessiontree-aaaa0000.html")


def test_dash_s_and_a_different_argument_is_refused(db_target):
    old, new = two_sessions(db_target)
    done = invoke(db_target, "tree", old, "-s", new, code=2)
    assert done.output.splitlines()[-1] == f"Error: two sessions given, {old} and -s {new}: give one"
    assert invoke(db_target, "tree", old, "-s", old).stdout.startswith(f"session {old}  old\n")


def test_export_takes_several_dash_s(db_target):
    old, new = two_sessions(db_target)
    out = invoke(db_target, "export", "-s", old, "--session", new).stdout
    assert out == invoke(db_target, "export", old, new).stdout
    assert old in out and new in out


def test_archive_delete_restore_take_dash_s(db_target):
    old, _ = two_sessions(db_target)
    assert invoke(db_target, "archive", "-s", old).stdout == f"archived session {old}\n"
    assert invoke(db_target, "delete", "-s", old).stdout == (
        f"moved session {old} (1 node(s)) to the trash; `{pasted_hint(db_target, 'restore', old)}` brings it back\n"
    )
    assert invoke(db_target, "restore", "-s", old).stdout == f"restored session {old}\n"
    missing = invoke(db_target, "delete", code=2)
    assert missing.output.splitlines()[-1] == "Error: Missing argument 'SESSION' (or -s SESSION)."


def test_pending_takes_dash_s(db_target):
    with Store(db_target) as store:
        s, nodes = tool_turns(store, "one")
        tool_turns(store, "two")
    out = invoke(db_target, "pending", "-s", s.id).stdout
    assert out.count("pause ") == 1 and f"pause {nodes[-1].id}  session {s.id}" in out
    assert invoke(db_target, "pending").stdout.count("pause ") == 2


# -- row 18: log and tree take -n; a pager and colour on a terminal only ------------------


def test_log_dash_n_shows_the_newest_nodes(db_target):
    with Store(db_target) as store:
        s, nodes = tool_turns(store)
        short = store.abbreviations([n.id for n in nodes[-2:]])
    out = invoke(db_target, "log", "-n", "2", "-s", s.id).stdout
    assert out == (
        "... 4 earlier nodes (-n sets how many)\n"
        "\n"
        f"assistant {short[nodes[-2].id]}\n"
        "  -> refund({}) [c2]\n"
        "\n"
        f"-- pause: refund () ({short[nodes[-1].id]}) --\n"
    )
    assert invoke(db_target, "log", "--limit", "6", "-s", s.id).stdout == invoke(db_target, "log").stdout
    as_json = json.loads(invoke(db_target, "log", "-n", "1", "--json").stdout)
    assert [n["id"] for n in as_json] == [nodes[-1].id]
    assert (
        invoke(db_target, "log", "-n", "0", code=2).output.splitlines()[-1].startswith("Error: Invalid value")
    )


def test_tree_dash_n_shows_the_first_lines(db_target):
    with Store(db_target) as store:
        s, nodes = tool_turns(store)
        short = store.abbreviations([n.id for n in nodes])
    out = invoke(db_target, "tree", "-n", "2", "--no-pager").stdout
    assert out == (
        f"session {s.id}  orders\n"
        f"* {short[nodes[0].id]} user: where is order 9?\n"
        f"* {short[nodes[1].id]} assistant: -> lookup_order({{}})\n"
        "... 4 more lines (-n sets how many)\n"
    )
    assert "\x1b[" not in invoke(db_target, "tree").stdout  # no colour on a pipe


PAGER = """\
import sys
with open(sys.argv[1], "w") as out:
    out.write(sys.stdin.read())
"""


def on_a_terminal(db: str, tmp_path, *args: str, **env: str) -> tuple[str, str | None]:
    """Run sessiontree with stdin and stdout on a pseudo-terminal of 5 lines and a pager
    that copies what it gets to a file: (what the terminal showed, what the pager got)."""
    import os
    import pty

    (tmp_path / "pager.py").write_text(PAGER)
    paged = tmp_path / "paged.txt"
    paged.unlink(missing_ok=True)
    environ = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "LESS", "TERM")}
    environ.update(PAGER=f"{sys.executable} {tmp_path / 'pager.py'} {paged}", LINES="5", COLUMNS="100")
    environ.update(env)
    leader, follower = pty.openpty()
    done = subprocess.run(
        [sys.executable, "-m", "sessiontree", "--db", db, *args],
        stdin=follower,
        stdout=follower,
        stderr=subprocess.PIPE,
        env=environ,
        timeout=60,
    )
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal is closed and drained
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    assert done.returncode == 0, done.stderr
    return shown.decode().replace("\r\n", "\n"), paged.read_text() if paged.exists() else None


@pytest.mark.slow  # a terminal (pty) and a pager process per case
def test_long_output_on_a_terminal_is_paged_and_coloured(db_target, tmp_path):
    with Store(db_target) as store:
        tool_turns(store)
    plain = invoke(db_target, "log").stdout
    shown, paged = on_a_terminal(db_target, tmp_path, "log")
    assert shown == "" and paged is not None
    assert "\x1b[" in paged  # roles coloured
    assert click_unstyle(paged) == plain
    shown, paged = on_a_terminal(db_target, tmp_path, "tree")
    assert paged is not None and "\x1b[" in paged
    # NO_COLOR keeps the pager and drops the colour; --no-pager prints to the terminal.
    shown, paged = on_a_terminal(db_target, tmp_path, "log", NO_COLOR="1")
    assert paged == plain
    shown, paged = on_a_terminal(db_target, tmp_path, "log", "--no-pager", NO_COLOR="1")
    assert (shown, paged) == (plain, None)
    # What fits on the screen is not paged.
    shown, paged = on_a_terminal(db_target, tmp_path, "log", "-n", "1", NO_COLOR="1")
    assert (shown, paged) == (invoke(db_target, "log", "-n", "1").stdout, None)


def click_unstyle(text: str) -> str:
    import click

    return click.unstyle(text)


# -- row 15: show prints a run in words --------------------------------------------------


def test_show_prints_a_runs_tokens_and_an_unknown_latency_in_words(db_target):
    pi_usage = {
        "input": 3,
        "output": 191,
        "cacheRead": 0,
        "input_tokens": 3,
        "output_tokens": 191,
        "cost": {},
    }
    with Store(db_target) as store:
        s = store.create_session("pi")
        s.append({"role": "user", "content": "hi"})
        imported = s.append(
            {"role": "assistant", "content": "hello"},
            run={
                "model": "claude-sonnet-4-5",
                "provider": "anthropic",
                "usage": pi_usage,
                "finish_reason": "toolUse",
            },
        )
        timed = s.append(
            {"role": "assistant", "content": "again"},
            run={
                "model": "gpt-4o",
                "provider": "openai",
                "latency_ms": 1234.4,
                "finish_reason": "stop",
                "usage": {"prompt_tokens": 12, "completion_tokens": 5},
            },
        )
        silent = s.append({"role": "assistant", "content": "quiet"}, run={"model": "m"})
    lines = invoke(db_target, "show", imported.id).stdout.splitlines()
    assert (
        "run      claude-sonnet-4-5 via anthropic, 3 in → 191 out, latency unknown, finish toolUse" in lines
    )
    lines = invoke(db_target, "show", timed.id).stdout.splitlines()
    assert "run      gpt-4o via openai, 12 in → 5 out, 1,234 ms, finish stop" in lines
    lines = invoke(db_target, "show", silent.id).stdout.splitlines()
    assert "run      m via ?, tokens unknown, latency unknown" in lines


# -- row 19: deleting a session twice ---------------------------------------------------


def test_delete_of_a_session_in_the_trash_says_so_and_keeps_its_time_there(db_target):
    old, _ = two_sessions(db_target)
    invoke(db_target, "delete", old)
    with Store(db_target) as store:
        since = store.session(old).trashed_at
    assert since is not None
    again = invoke(db_target, "delete", old)
    assert again.stdout == (
        f"session {old} is already in the trash (since {since});"
        f" `{pasted_hint(db_target, 'restore', old)}` brings it back\n"
    )
    as_json = json.loads(invoke(db_target, "delete", old, "--json").stdout)
    assert as_json == {"session": old, "trashed": True, "nodes": 1, "already": True, "trashed_at": since}
    with Store(db_target) as store:
        assert store.session(old).trashed_at == since  # the clock of empty-trash --older-than
        assert store.delete_session(old) == 1 and store.session(old).trashed_at == since


# -- row 23: library surprises -------------------------------------------------------


def test_path_defaults_to_main_and_refs_may_be_positional(any_store):
    s, nodes = tool_turns(any_store)
    assert s.path() == s.path("main") == nodes
    assert s.checkpoint("cp", "main~1").node_id == nodes[-2].id
    assert s.fork("other", "main~2").head_id == nodes[-3].id
    assert s.move("other", "cp").head_id == nodes[-2].id
    assert s.fork("kw", at="cp", metadata={"why": "kw"}).head_id == nodes[-2].id


def test_testing_exports_only_its_own_names():
    import sessiontree.testing as testing

    assert sorted(testing.__all__) == [
        "ScriptExhausted",
        "ScriptedModel",
        "completed",
        "deltas",
        "reply",
        "tool_call",
    ]
    namespace: dict = {}
    exec("from sessiontree.testing import *", namespace)
    assert {"Any", "Iterator", "json", "copy"}.isdisjoint(namespace)


def test_cli_decisions_record_by_cli_unless_named(db_target):
    with Store(db_target) as store:
        s, nodes = tool_turns(store, "a")
        t, others = tool_turns(store, "b")
    invoke(db_target, "approve", nodes[-1].id)
    invoke(db_target, "reject", others[-1].id, "--by", "alice", "--reason", "no")
    with Store(db_target) as store:
        (approved,) = store.session(s.id).children(nodes[-1].id)
        (rejected,) = store.session(t.id).children(others[-1].id)
    assert (approved.payload["by"], rejected.payload["by"]) == ("cli", "alice")


# -- row 24: README and docs/index.md read as user pages ---------------------------------


def test_readme_store_claim_is_short_and_its_figures_are_on_the_performance_page():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text()
    start = readme.index("- **The store**")
    bullet = readme[start : readme.index("\n- **", start + 1)].strip().splitlines()
    assert len(bullet) <= 3 and "0.03x" not in "\n".join(bullet)
    performance = (root / "docs" / "performance.md").read_text()
    for figure in ("0.03x", "0.008x", "2.6–2.8x", "233 bytes", "458", "603 bytes"):
        assert figure in performance
    index = (root / "docs" / "index.md").read_text()
    assert "| status |" not in index and "available |" not in index and "<!--" not in index
