"""The write commands' --json, and the verbs that change pointers and sessions:
rename-branch, move-branch, delete-branch, delete-checkpoint, append, delete, usage."""

from __future__ import annotations

import json
import re
import textwrap

from sessiontree import Store

from test_cli import normalise


def test_write_commands_print_what_they_made_as_json(invoke, small, db):
    forked = json.loads(invoke("fork", "again", "--at", "greeted", "--json").stdout)
    with Store(db) as store:
        greeted = store.session(small["session"]).node("greeted").id
    assert forked["name"] == "again" and forked["head_id"] == greeted
    assert forked["session_id"] == small["session"]
    cp = json.loads(invoke("checkpoint", "start", "--at", small["question"], "--json").stdout)
    assert (cp["name"], cp["node_id"], cp["session_id"]) == ("start", small["question"], small["session"])
    edited = json.loads(
        invoke("edit", small["question"], "-b", "polite", "--text", "Hi, please?", "--json").stdout
    )
    assert edited["node"]["payload"] == {"role": "user", "content": "Hi, please?"}
    assert edited["node"]["parent_id"] is None  # a sibling of the root question
    assert edited["branch"]["name"] == "polite" and edited["branch"]["head_id"] == edited["node"]["id"]
    call = json.loads(invoke("edit-call", small["pause"], "c1", '{"path": "/tmp"}', "--json").output)
    assert call["kind"] == "decision" and call["parent_id"] == small["pause"]
    assert call["payload"]["decisions"] == {"c1": {"action": "edit", "arguments": {"path": "/tmp"}}}
    archived = json.loads(invoke("archive", small["session"][:13], "--json").output)
    assert archived["session"] == small["session"] and archived["archived_at"]
    restored = json.loads(invoke("archive", small["session"], "--undo", "--json").output)
    assert restored == {"session": small["session"], "title": "small", "archived_at": None}


def test_rename_move_and_delete_branches_and_checkpoints(invoke, small, db):
    s, q = small["session"], small["question"]
    assert normalise(invoke("rename-branch", "alt", "risky").stdout) == "renamed branch alt to risky -> <id>"
    assert invoke("rename-branch", "main", "greeted", code=1).output == (
        f"Error: a checkpoint named 'greeted' already exists in session {s}\n"
    )
    assert invoke("rename-branch", "alt", "x", code=1).output == f"Error: no branch 'alt' in session {s}\n"

    assert invoke("move-branch", "main", q[:20]).stdout == f"branch main -> {q}\n"
    with Store(db) as store:
        greeted = store.session(s).node("greeted").id
    assert invoke("move-branch", "main", "greeted", "--expect", greeted, code=1).output == (
        f"Error: branch 'main' moved: expected head {greeted}, found {q}\n"
    )
    moved = json.loads(invoke("move-branch", "main", "greeted", "--expect", q, "--json").stdout)
    assert (moved["name"], moved["head_id"]) == ("main", greeted)
    assert invoke("move-branch", "greeted", "main", code=1).output == (
        "Error: 'greeted' is a checkpoint, and checkpoints never move; fork a branch from it\n"
    )

    assert invoke("delete-branch", "greeted", code=1).output == (
        f"Error: 'greeted' is a checkpoint, not a branch; use `sessiontree --db {db} delete-checkpoint`\n"
    )
    assert invoke("delete-branch", "risky").stdout == (
        "deleted branch risky (prune removes nodes nothing reaches any more)\n"
    )
    assert json.loads(invoke("delete-checkpoint", "greeted", "--json").stdout) == {
        "session": s,
        "deleted_checkpoint": "greeted",
    }
    assert invoke("delete-checkpoint", "greeted", code=1).output == (
        f"Error: no checkpoint 'greeted' in session {s}\n"
    )
    assert invoke("delete-checkpoint", "main", code=1).output == (
        f"Error: 'main' is a branch, not a checkpoint; use `sessiontree --db {db} delete-branch`\n"
    )
    with Store(db) as store:
        session = store.session(s)
        assert [b.name for b in session.branches()] == ["main"] and session.checkpoints() == []
        # the pause risky stood at is kept (prune keeps an unresolved pause) but no longer
        # pending: no branch stands at it, so nothing could carry a decision on
        assert store.pending() == []


def test_append(invoke, small, db):
    assert normalise(invoke("append", "Thanks!").stdout) == "branch main -> <id>"
    invoke("fork", "side", "--at", small["question"])
    invoke("append", "-", "--role", "system", "-b", "side", input="From stdin\n")
    added = json.loads(
        invoke("append", "Sure.", "--role", "assistant", "-s", small["session"][:13], "--json").stdout
    )
    assert added["node"]["payload"] == {"role": "assistant", "content": "Sure."}
    assert added["branch"]["head_id"] == added["node"]["id"]
    with Store(db) as store:
        session = store.session(small["session"])
        assert [m["content"] for m in session.messages("main")] == ["Hi?", "Hello!", "Thanks!", "Sure."]
        assert session.head("side").payload == {"role": "system", "content": "From stdin"}
    assert invoke("append", "x", "-b", "typo", code=1).output == (
        f"Error: no branch 'typo' in session {small['session']}\n"
    )
    assert (
        "'tool' is not one of 'user', 'system', 'assistant'"
        in invoke("append", "x", "--role", "tool", code=2).output
    )


def test_delete_trashes_and_deleting_permanently_needs_yes(invoke, small, db):
    s = small["session"]
    before = db.read_bytes()
    assert invoke("delete", s[:13], "--permanently", code=1).output == (
        f"Error: session {s} has 4 node(s); add --yes to delete it for good "
        "(or leave out --permanently to move it to the trash)\n"
    )
    assert db.read_bytes() == before
    assert invoke("delete", s[:13]).output == (
        f"moved session {s} (4 node(s)) to the trash; `sessiontree --db {db} restore {s}` brings it back\n"
    )
    assert invoke("sessions").output == "No sessions.\n"
    assert invoke("restore", s[:13]).output == f"restored session {s}\n"
    assert json.loads(invoke("delete", s[:13], "--permanently", "--yes", "--json").output) == {
        "session": s,
        "nodes_removed": 4,
    }
    assert invoke("sessions").output == "No sessions.\n"
    assert invoke("trash").output == "The trash is empty.\n"
    assert invoke("delete", s, "--yes", code=1).output == f"Error: no session '{s}'\n"
    assert invoke("verify").output == "ok: 0 session(s), 0 node(s), 0 problem(s)\n"


def test_usage_per_model_on_a_path(invoke, db):
    invoke("demo")
    latency = re.compile(r"\d+$", re.M)  # milliseconds vary; tokens of scripted models do not
    assert latency.sub("<ms>", normalise(invoke("usage").output)) == textwrap.dedent("""\
        MODEL  CALLS  IN  OUT  MS
        scripted-a  3  75  14  <ms>
        total  3  75  14  <ms>""")
    data = json.loads(invoke("usage", "experiment", "--json").output)
    assert data["ref"] == "experiment" and data["since"] is None
    assert {m: u["calls"] for m, u in data["by_model"].items()} == {"scripted-a": 1, "scripted-b": 1}
    since = json.loads(invoke("usage", "experiment", "--since", "weather-known", "--json").output)
    assert since["calls"] == 1 and list(since["by_model"]) == ["scripted-b"]
    assert invoke("usage", "nope", code=1).output.startswith("Error: no node, branch or checkpoint 'nope'")
