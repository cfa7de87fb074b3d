"""Lookups of text no store can hold: a NUL, or a lone surrogate (how Python hands over a
command-line argument that is not UTF-8: byte 0xff arrives as U+DCFF). Each is
``NotFound`` (``InvalidQuery`` for a search) in one line on both backends, through the API
and the CLI, and nothing is written. Before: a bare ``UnicodeEncodeError`` from the driver
(both backends), and on PostgreSQL a bare ``psycopg.DataError`` for a NUL; the CLI said
"internal error"."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from sessiontree import InvalidQuery, NotFound, Store
from sessiontree.cli import cli

from conftest import public_rows_of, user

NUL = ["\x00", "ab\x00cd", "0123\x00", "ma\x00in~1"]
SURROGATE = ["\udcff", "abcd\udcff", "main\udcff", "\udcff~2", "\ud800"]


@pytest.fixture
def filled(any_store):
    s = any_store.create_session("t")
    first = s.append(user("hello"))
    s.append(user("again"))
    s.checkpoint("v1", at="main")
    return any_store, s, first


@pytest.mark.parametrize("bad", NUL + SURROGATE)
def test_a_lookup_of_unstorable_text_is_not_found_and_writes_nothing(filled, bad):
    store, s, first = filled
    before = public_rows_of(store)
    lookups = {
        "Store.node": lambda: store.node(bad),
        "Store.session": lambda: store.session(bad),
        "Store.run": lambda: store.run(bad),
        "Store.restore_session": lambda: store.restore_session(bad),
        "Store.redactions": lambda: store.redactions(bad),
        "Store.pending": lambda: store.pending(bad),
        "Store.search(session=)": lambda: store.search("hello", session=bad),
        "Session.resolve": lambda: s.resolve(bad),
        "Session.node": lambda: s.node(bad),
        "Session.path": lambda: s.path(bad),
        "Session.messages": lambda: s.messages(bad),
        "Session.children": lambda: s.children(bad),
        "Session.diff": lambda: s.diff("main", bad),
        "Session.usage": lambda: s.usage("main", since=bad),
        "Session.branches_at": lambda: s.branches_at(bad),
        "Session.branch": lambda: s.branch(bad),
        "Session.head": lambda: s.head(bad),
        "Session.fork at": lambda: s.fork("forked", at=bad),
        "Session.checkpoint at": lambda: s.checkpoint("cp", at=bad),
        "Session.move": lambda: s.move(bad, to="main"),
        "Session.move to": lambda: s.move("main", to=bad),
        "Session.rename": lambda: s.rename(bad, "renamed"),
        "Session.delete_branch": lambda: s.delete_branch(bad),
        "Session.delete_checkpoint": lambda: s.delete_checkpoint(bad),
        "Session.append parent": lambda: s.append(user("x"), parent=bad, branch=None),
        "Session.append run": lambda: s.append(user("x"), run=bad),
        "Session.append expect_head": lambda: s.append(user("x"), expect_head=bad),
    }
    for name, lookup in lookups.items():
        with pytest.raises(NotFound) as caught:
            lookup()
        message = str(caught.value)
        assert message.startswith("no ") and "\n" not in message, name
        assert ("NUL character" if "\x00" in bad else "lone surrogate") in message, name
    for query in ({"query": bad}, {"query": "hello", "branch": bad}):
        with pytest.raises(InvalidQuery, match="nothing stored holds"):
            store.search(**query)
    assert public_rows_of(store) == before


def test_the_message_names_the_text_and_why(filled):
    store, s, _ = filled
    with pytest.raises(NotFound) as caught:
        store.node("ab\x00cd")
    assert str(caught.value) == "no node 'ab\\x00cd': it holds a NUL character, which nothing stored holds"
    with pytest.raises(NotFound) as caught:
        s.branch("main\udcff")
    assert str(caught.value) == (
        "no branch 'main\\udcff': it holds a lone surrogate (a byte that is not UTF-8, as in a"
        " command-line argument), which nothing stored holds"
    )


SURROGATE_WHY = "a lone surrogate (a byte that is not UTF-8, as in a command-line argument)"
CLI_CASES = [
    (["show", "\udcff"], f"no node, branch or checkpoint '\\udcff': it holds {SURROGATE_WHY}"),
    (["show", "ab\x00cd"], "no node, branch or checkpoint 'ab\\x00cd': it holds a NUL character"),
    (["log", "0123\x00"], "no node, branch or checkpoint '0123\\x00': it holds a NUL character"),
    (["log", "main", "--session", "\udcff"], f"no session '\\udcff': it holds {SURROGATE_WHY}"),
    (["branches", "ab\x00cd"], "no session 'ab\\x00cd': it holds a NUL character"),
    (["tree", "\udcff"], f"no session '\\udcff': it holds {SURROGATE_WHY}"),
    (["export", "\x00"], "no session '\\x00': it holds a NUL character"),
    (["search", "\udcff"], f"no match for search query '\\udcff': it holds {SURROGATE_WHY}"),
    (["search", "hel\x00lo"], "no match for search query 'hel\\x00lo': it holds a NUL character"),
    (["search", "hello", "--branch", "ma\x00in"], "no branch 'ma\\x00in': it holds a NUL character"),
    (["search", "hello", "--session", "\udcff"], f"no session '\\udcff': it holds {SURROGATE_WHY}"),
    (
        ["fork", "forked", "--at", "\udcff"],
        f"no node, branch or checkpoint '\\udcff': it holds {SURROGATE_WHY}",
    ),
    (["move-branch", "\udcff", "main"], f"no branch '\\udcff': it holds {SURROGATE_WHY}"),
    (["delete-branch", "ma\x00in"], "no branch 'ma\\x00in': it holds a NUL character"),
    (["delete-checkpoint", "\udcff"], f"no checkpoint '\\udcff': it holds {SURROGATE_WHY}"),
    (["diff", "main", "\udcff"], f"no node, branch or checkpoint '\\udcff': it holds {SURROGATE_WHY}"),
    (["delete", "\udcff"], f"no session '\\udcff': it holds {SURROGATE_WHY}"),
    (["restore", "ab\x00cd"], "no session 'ab\\x00cd': it holds a NUL character"),
    (["approve", "\udcff"], f"no node '\\udcff': it holds {SURROGATE_WHY}"),
]


@pytest.mark.parametrize(("args", "said"), CLI_CASES, ids=lambda a: repr(a)[:40])
def test_the_cli_says_not_found_in_one_line(db_target, args, said):
    with Store(db_target) as store:
        s = store.create_session("t")
        s.append(user("hello"))
        s.checkpoint("v1", at="main")
        before = public_rows_of(store)
    result = CliRunner().invoke(cli, ["--db", db_target, *args])
    assert result.exit_code == 1, result.output
    assert result.output == f"Error: {said}, which nothing stored holds\n"
    with Store(db_target) as store:
        assert public_rows_of(store) == before


@pytest.mark.slow  # starts a Python process
def test_a_command_line_argument_that_is_not_utf8(tmp_path):
    """The real thing: bytes on argv, decoded by Python with surrogateescape."""
    db = tmp_path / "s.db"
    with Store(db) as store:
        store.create_session("t").append(user("hello"))
    done = subprocess.run(
        [sys.executable, "-c", "from sessiontree.cli import cli; cli()", "--db", str(db), "show", b"\xff"],
        capture_output=True,
        env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"},
    )
    assert done.returncode == 1
    assert done.stdout == b""
    assert done.stderr.decode() == (
        f"Error: no node, branch or checkpoint '\\udcff': it holds {SURROGATE_WHY}, which nothing stored holds\n"
    )
