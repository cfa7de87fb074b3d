"""prune --grace takes a number of seconds only; export refuses what it would
silently ignore."""

from __future__ import annotations

import pytest

from sessiontree import Store

from test_cli import db, invoke, small  # noqa: F401 - fixtures


def last_line(result) -> str:
    return result.output.splitlines()[-1]


@pytest.mark.parametrize(
    ("grace", "error"),
    [
        ("nan", "Error: Invalid value for '--grace': 'nan' seconds is not a finite duration"),
        ("inf", "Error: Invalid value for '--grace': 'inf' seconds is not a finite duration"),
        ("1e300", "Error: Invalid value for '--grace': '1e300' seconds is longer than 100 years"),
        ("-1", "Error: Invalid value for '--grace': '-1' seconds is negative"),
    ],
)
def test_prune_grace_is_a_number_of_seconds(invoke, small, db, grace, error):  # noqa: F811
    before = db.read_bytes()
    assert last_line(invoke("prune", "--grace", grace, "--yes", code=2)) == error
    assert db.read_bytes() == before


def test_export_refuses_what_it_would_ignore(invoke, small, db):  # noqa: F811
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
