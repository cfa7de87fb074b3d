"""No traceback ever reaches a user: a battery of bad invocations over the commands,
each answered by a non-zero exit and exactly one `Error:` line, and nothing hangs."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from sessiontree.cli import cli

MODEL = ["--base-url", "http://127.0.0.1:9/v1", "-m", "m"]
BAD = [
    ["run", "-o", "model", "x", *MODEL, "hi"],
    ["run", "-o", "stream", "true", *MODEL, "hi"],
    ["run", "-o", "api_key", "sk-x", *MODEL, "hi"],
    ["run", "--max-steps", "-1", *MODEL, "hi"],
    ["run", "-o", "timeout", "5", *MODEL, "hi"],
    ["run", "--tools", "os:missing", *MODEL, "hi"],
    ["run", "--tools", "no_such_module_here", *MODEL, "hi"],
    ["run", "--tools", "{tmp}/missing.py", *MODEL, "hi"],
    ["export", "-o", "{tmp}/missing-dir/x.jsonl"],
    ["export", "-o", "/proc/version"],
    ["export", "nosuchsession"],
    ["backup", "{tmp}/missing-dir/b.db"],
    ["rerun", "main", "--variant", "a=m", "-n", "-1", "--base-url", "http://127.0.0.1:9/v1"],
    ["rerun", "main", "--variant", "a=m", "--concurrency", "0", "--base-url", "http://127.0.0.1:9/v1"],
    ["rerun", "main", "--variant", "nomodel", "--base-url", "http://127.0.0.1:9/v1"],
    ["show", "abc"],
    ["show", "main~99"],
    ["show", "ffffffff"],
    ["log", "nosuchbranch"],
    ["diff", "main", "nosuchbranch"],
    ["fork", "main", "--at", "main"],
    ["fork", "x y\u202e", "--at", "main"],
    ["checkpoint", "cafe", "--at", "main"],
    ["move-branch", "weather-known", "main"],
    ["delete-branch", "nosuch"],
    ["delete-checkpoint", "nosuch"],
    ["approve", "nosuchpause"],
    ["edit-call", "nosuchpause", "c", "{not json"],
    ["resume", "nosuchpause", *MODEL],
    ["import", "{tmp}/garbage.json"],
    ["import", "{tmp}/garbage.json", "--format", "chatgpt"],
    ["compare", "main", "nosuch"],
    ["replay", "nosuch"],
    ["usage", "nosuch"],
    ["tree", "nosuchsession"],
    ["branches", "nosuchsession"],
    ["append", "hi", "-b", "nosuchbranch"],
    ["delete", "nosuchsession"],
    ["archive", "nosuchsession"],
    ["prune", "-s", "nosuchsession"],
    ["verify", "-s", "nosuchsession"],
    ["edit", "nosuchnode", "-b", "x", "--text", "t"],
    ["edit", "main", "-b", "main", "--text", "t"],
    ["reject", "nosuchpause"],
    ["rename-branch", "nosuch", "other"],
    ["rename-branch", "main", "bad\u0085name"],
    ["usage", "main", "--since", "nosuch"],
    ["sessions", "--bogus"],
    ["stats", "extra"],
    ["pending", "extra"],
    ["demo", "extra"],
    ["migrate", "extra"],
    ["copy", "{tmp}/missing.db", "{tmp}/out.db"],
    ["copy", "{tmp}/garbage.json", "{tmp}/out.db"],
    ["copy", "{tmp}/b.db", "postgresql://127.0.0.1:9/nowhere"],
    ["worker", "--poll", "0", *MODEL],
    ["worker", "--tools", "no_such_module_here", *MODEL],
    ["html", "nosuchsession"],
    ["html", "-o", "{tmp}/missing-dir/x.html"],
    ["serve", "--port", "-5"],
    ["search", 'unbalanced "quote'],
    ["search", "x", "--no-tools", "-s", "nosuchsession"],
    ["search-index", "sideways"],
    ["retention", "--drop-older-than", "soon"],
    ["retention", "--strip-min-bytes", "0", "--strip-older-than", "1d"],
    ["empty-trash", "--older-than", "-3d"],
    ["restore", "nosuchsession"],
    ["trash", "extra"],
    ["append", ""],
    ["append", "-"],
    ["edit", "main", "-b", "x", "--text", ""],
    ["log", "main~99999999999999999999999"],
    ["log", "main~" + "9" * 5000],
    ["fork", "x" * 100_000, "--at", "main"],
    ["usage", "main", "--since", "experiment"],
    ["delete-checkpoint", "main"],
    ["diff", "main", "ffffffff-ffff"],
    ["compare", "main", "experiment", "--price", "m=nan,inf"],
    ["compare", "main", "experiment", "--price", "m=-1,1"],
    ["rerun", "main", "--variant", "a=m", "--variant", "a=n", "--base-url", "http://127.0.0.1:9/v1"],
    ["worker", "--poll", "nan", *MODEL],
    ["retention", "--save", "--dry-run", "--drop-older-than", "1d"],
    ["retention", "--save", "--drop-older-than", "9999999999999999999999d"],
    ["retention", "--strip-older-than", "99999999999999d", "--dry-run"],
    ["empty-trash", "--older-than", "99999999999999999999d"],
    ["decider-token", "two words"],
    ["decider-token", "alice", "--file", "{tmp}/missing-dir/deciders"],
    ["serve", "--deciders", "{tmp}/garbage.json"],
    ["run", "--pause-expires", "-1h", *MODEL, "hi"],
    ["run", "--webhook", "ftp://example.com/x", *MODEL, "hi"],
    ["worker", "--on-expiry", "approve", *MODEL],
    ["score", "main", "nan"],
    ["score", "nosuchbranch", "1"],
    ["promote", "main"],
    ["promote", "nosuchbranch"],
    ["sql", "DELETE FROM nodes"],
    ["sql", "SELECT :missing"],
    ["help", "nosuchcommand"],
    ["mcp", "--http", "0.0.0.0:0"],
    ["mcp", "--http", "127.0.0.1:notaport"],
    ["mcp", "--poll", "0"],
    ["run", "--mcp", "/no/such/mcp-server", *MODEL, "hi"],
    ["resume", "nope", "--mcp", "python 'unclosed", *MODEL],
    ["run", "--max-tokens-total", "0", *MODEL, "hi"],
    ["run", "--max-seconds", "nan", *MODEL, "hi"],
    ["run", "--max-seconds", "0", *MODEL, "hi"],
    ["run", "--max-cost", "inf", "--price", "m=1,2", *MODEL, "hi"],
    ["run", "--max-cost", "-1", "--price", "m=1,2", *MODEL, "hi"],
    ["run", "--max-cost", "0.5", *MODEL, "hi"],
    ["run", "--price", "m=1", *MODEL, "hi"],
    ["run", "--max-repeats", "0", *MODEL, "hi"],
    ["run", "--parallel-tools", "0", *MODEL, "hi"],
    ["run", "--parallel-tools", "many", *MODEL, "hi"],
    ["worker", "--max-cost", "1", *MODEL],
    ["rerun", "main", "--variant", "a=m", "--max-cost", "1", "--base-url", "http://127.0.0.1:9/v1"],
    ["rerun", "main", "--variant", "a=m", "--price", "m=a,b", "--base-url", "http://127.0.0.1:9/v1"],
]


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("battery") / "b.db"
    result = CliRunner().invoke(cli, ["--db", str(path), "demo"], catch_exceptions=False)
    assert result.exit_code == 0
    return path


@pytest.mark.parametrize("args", BAD, ids=lambda a: " ".join(a)[:60])
def test_a_bad_invocation_is_one_error_line(db, tmp_path, args):
    (tmp_path / "garbage.json").write_text("{ this is not json")
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    result = CliRunner().invoke(cli, ["--db", str(db), *args], catch_exceptions=True)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code != 0, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.output


def test_the_battery_covers_every_command():
    assert set(cli.commands) - {args[0] for args in BAD} == set()
