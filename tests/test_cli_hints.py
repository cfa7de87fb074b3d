"""Every command the CLI prints as a hint works when pasted: in another directory too, and
on the database the command was given with --db (issue 25 item 2: "every hint the CLI
prints is a command that works when pasted")."""

from __future__ import annotations

import re
import shlex

import pytest
from click.testing import CliRunner

from sessiontree.cli import cli

QUOTED = re.compile(r"`(sessiontree [^`]+)`")


def pasted(line: str, code: int = 0) -> str:
    """Run a hint as a user pasting it would (in process); its output."""
    words = shlex.split(line)
    assert words[0] == "sessiontree", line
    result = CliRunner().invoke(cli, words[1:], catch_exceptions=False)
    assert result.exit_code == code, f"{line}\n{result.output}"
    return result.output


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """Run in tmp_path/here with --db here.db (relative); the hints are pasted in tmp_path/there,
    with no SESSIONTREE_DB and an empty data directory, so a hint missing its --db fails."""
    monkeypatch.delenv("SESSIONTREE_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    (tmp_path / "here").mkdir()
    (tmp_path / "there").mkdir()
    monkeypatch.chdir(tmp_path / "here")

    def invoke(*args: str, code: int = 0) -> str:
        monkeypatch.chdir(tmp_path / "here")
        result = CliRunner().invoke(cli, ["--db", "here.db", *args], catch_exceptions=False)
        assert result.exit_code == code, result.output
        monkeypatch.chdir(tmp_path / "there")  # where the hints are pasted
        return result.output

    return invoke


def test_the_demos_closing_hints_name_its_db_and_work_when_pasted(elsewhere):
    out = elsewhere("demo")
    tail = [line for line in out.splitlines() if line.startswith(("explore: ", "see it in a browser: "))]
    hints = [h.strip() for line in tail for h in re.split(r" {3}", line.split(": ", 1)[1])]
    hints = [h.removeprefix("(or: ").removesuffix(")") for h in hints]
    assert len(hints) == 5 and all(h.startswith("sessiontree --db ") for h in hints), hints
    for hint in hints:
        if " serve" not in hint:  # it runs until Ctrl-C
            assert pasted(hint).strip()


def test_the_restore_hint_of_delete_works_when_pasted(elsewhere):
    out = elsewhere("demo")
    session = re.search(r" tree ([0-9a-f-]+)", out)[1]
    out = elsewhere("delete", session)
    [hint] = QUOTED.findall(out)
    assert pasted(hint).startswith("restored session")


def test_the_search_index_hints_work_when_pasted(elsewhere):
    elsewhere("demo")
    out = elsewhere("search-index", "off")
    [turn_on] = QUOTED.findall(out)
    assert "search index on" in pasted(turn_on)
    elsewhere("search-index", "off")
    refused = elsewhere("search", "Paris", code=1)
    [hint] = QUOTED.findall(refused)  # a library error's hint gets the command's --db too
    pasted(hint)
    assert "Paris" in pasted(shlex.join([*shlex.split(hint)[:3], "search", "Paris"]))


def test_a_hint_without_db_stays_as_it_was(tmp_path, monkeypatch):
    """Through SESSIONTREE_DB the hint is pasted where the variable is set: no --db added."""
    monkeypatch.setenv("SESSIONTREE_DB", str(tmp_path / "env.db"))
    CliRunner().invoke(cli, ["demo"], catch_exceptions=False)
    out = CliRunner().invoke(cli, ["search-index", "off"], catch_exceptions=False).output
    assert QUOTED.findall(out) == ["sessiontree search-index on"]
