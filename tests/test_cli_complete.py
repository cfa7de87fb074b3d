"""Shell completion of session ids, branch and checkpoint names and pause ids,
through click's bash protocol (what `eval "$(_SESSIONTREE_COMPLETE=bash_source sessiontree)"` runs)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from sessiontree import Approve, Pause, Store, decide, run
from sessiontree.cli import cli
from sessiontree.testing import ScriptedModel

from conftest import assistant, user


def complete(*words: str, env: dict[str, str] | None = None) -> list[str]:
    """What bash would offer for the last word of ``sessiontree WORDS...``."""
    result = CliRunner().invoke(
        cli,
        [],
        prog_name="sessiontree",
        env={
            "_SESSIONTREE_COMPLETE": "bash_complete",
            "COMP_WORDS": " ".join(["sessiontree", *words]),
            "COMP_CWORD": str(len(words)),
            **(env or {}),
        },
    )
    assert result.exit_code == 0, result.output
    return [line.split(",", 1)[1] for line in result.output.splitlines() if line]


@pytest.fixture
def stocked(tmp_path):
    """Two sessions: 'older' with a pending and a decided pause, then 'newer' (the latest)."""
    db = tmp_path / "c.db"
    with Store(db) as store:
        older = store.create_session("older")
        older.append(user("Hi"))
        older.fork("waiting", at="main")
        older.checkpoint("start", at="main")
        call = {"id": "c1", "type": "function", "function": {"name": "rm", "arguments": "{}"}}
        pauses = []
        for branch in ("main", "waiting"):
            older.append(assistant(None, [call]), branch=branch)
            steps = list(run(store, older, branch, call=ScriptedModel([]), approve=lambda c: Pause("risky")))
            pauses.append(steps[-1].node.id)
        decide(store, pauses[0], {"c1": Approve()})
        newer = store.create_session("newer")
        newer.append(user("Hello"))
        newer.fork("draft", at="main")
        newer.checkpoint("asked", at="main")
        return {
            "db": str(db),
            "older": older.id,
            "newer": newer.id,
            "decided": pauses[0],
            "pending": pauses[1],
        }


def test_refs_of_the_latest_session_or_of_session(stocked):
    db = stocked["db"]
    assert complete("--db", db, "log", "") == ["draft", "main", "asked"]
    assert complete("--db", db, "log", "d") == ["draft"]
    assert complete("--db", db, "log", "-s", stocked["older"], "") == ["main", "waiting", "start"]
    assert complete("--db", db, "diff", "main", "") == ["draft", "main", "asked"]
    assert complete("--db", db, "fork", "x", "--at", "a") == ["asked"]
    assert complete("--db", db, "run", "-b", "") == ["draft", "main", "asked"]
    assert complete("--db", db, "usage", "main", "--since", "") == ["draft", "main", "asked"]
    assert complete("--db", db, "move-branch", "draft", "") == ["draft", "main", "asked"]
    assert complete("--db", db, "rename-branch", "") == ["draft", "main"]
    assert complete("--db", db, "delete-branch", "") == ["draft", "main"]
    assert complete("--db", db, "delete-checkpoint", "") == ["asked"]
    assert complete("--db", db, "replay", "m") == ["main"]
    assert complete("--db", db, "export", "-b", "") == ["draft", "main"]


def test_session_ids(stocked):
    db = stocked["db"]
    both = sorted([stocked["older"], stocked["newer"]])
    assert sorted(complete("--db", db, "tree", "")) == both
    assert sorted(complete("--db", db, "log", "-s", "")) == both
    assert sorted(complete("--db", db, "delete", "")) == both
    assert complete("--db", db, "archive", stocked["older"][:-1]) == [stocked["older"]]
    assert sorted(complete("--db", db, "run", "--session", "")) == both


def test_pause_ids(stocked):
    db = stocked["db"]
    assert complete("--db", db, "approve", "") == [stocked["pending"]]
    assert complete("--db", db, "reject", "") == [stocked["pending"]]
    assert complete("--db", db, "edit-call", "") == [stocked["pending"]]
    assert complete("--db", db, "resume", "") == [stocked["decided"]]


def test_the_database_comes_from_the_environment_too(stocked):
    assert complete("log", "", env={"SESSIONTREE_DB": stocked["db"]}) == ["draft", "main", "asked"]


def test_no_database_or_a_broken_one_means_no_completions(tmp_path, monkeypatch):
    missing = tmp_path / "missing.db"
    assert complete("--db", str(missing), "log", "") == []
    assert complete("--db", str(missing), "tree", "") == []
    assert not missing.exists()  # never created
    broken = tmp_path / "broken.db"
    broken.write_bytes(b"this is not a database" * 100)
    assert complete("--db", str(broken), "approve", "") == []
    empty = tmp_path / "empty.db"
    Store(empty).close()
    assert complete("--db", str(empty), "log", "") == []  # no session yet
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("SESSIONTREE_DB", raising=False)
    assert complete("log", "") == []
    assert not (tmp_path / "data").exists()  # the default file is not created by completion


def test_completion_does_not_write(stocked):
    from pathlib import Path

    before = Path(stocked["db"]).read_bytes()
    complete("--db", stocked["db"], "resume", "")
    assert Path(stocked["db"]).read_bytes() == before


def test_an_expired_pause_is_not_offered_to_approve(tmp_path):
    db = tmp_path / "e.db"
    with Store(db) as store:
        s = store.create_session("late")
        s.append(user("Hi"))
        call = {"id": "c1", "type": "function", "function": {"name": "rm", "arguments": "{}"}}
        asked = s.append(assistant(None, [call]))
        s.fork("fresh", at=asked)
        waiting = {"reason": "risky", "calls": [{"id": "c1", "name": "rm", "arguments": "{}"}]}
        s.append({**waiting, "expires_at": "2001-01-01T00:00:00.000Z"}, kind="pause")  # long past
        fresh = s.append(waiting, kind="pause", branch="fresh")
    assert complete("--db", str(db), "approve", "") == [fresh.id]
