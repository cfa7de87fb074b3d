"""Native JSONL: lossless round trips, idempotent merges, refused conflicts, bad input."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessiontree import Completion, Conflict, Store
from sessiontree.formats import (
    FormatError,
    ImportConflict,
    export_file,
    export_native,
    import_file,
    import_native,
)

from conftest import assistant, public_rows, user


def dump(store: Store) -> dict[str, list[tuple]]:
    return public_rows(store.conn)


def lines_of(store: Store) -> list[str]:
    return list(export_native(store))


def build(session, with_run: bool = True) -> dict:
    q = session.append(user("q"))
    a = session.append(
        assistant("a"), run=Completion(assistant("a"), model="m", usage={"t": 1}) if with_run else None
    )
    session.fork("alt", at=q)
    session.append(assistant("b"), branch="alt")
    session.checkpoint("v1", at=a)
    session.append({"why": "marker"}, kind="note")
    return {"q": q, "a": a}


# -- round trips -------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
payloads = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["system", "user", "assistant", "tool", "developer"]),
        "content": st.one_of(st.none(), st.text(max_size=40)),
    },
    optional={"extra": json_values},
)
steps = st.lists(
    st.tuples(
        st.integers(0, 10_000), st.sampled_from(["append", "fork", "marker", "checkpoint", "run"]), payloads
    ),
    min_size=1,
    max_size=25,
)


def grow(s, plan) -> None:
    """Apply random steps through the public Session API: appends anywhere, forks, markers,
    checkpoints and appends with a recorded run."""
    nodes = []
    for step, (pick, op, payload) in enumerate(plan):
        at = nodes[pick % len(nodes)] if nodes else None
        name = f"b{step}"
        if op == "fork" and at is not None:
            s.fork(name, at=at)
        elif op == "checkpoint" and at is not None:
            s.checkpoint(name, at=at)
        else:
            kind = "note" if op == "marker" else "message"
            body = {"note": payload.get("extra")} if op == "marker" else payload
            run = Completion(payload, model="m", usage={"n": pick}) if op == "run" else None
            where = {"branch": None, "parent": at} if at else {"branch": name}
            nodes.append(s.append(body, kind=kind, run=run, **where))


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    trees=st.lists(steps, min_size=1, max_size=3),
    # No NUL nor lone surrogate: create_session refuses them (a store cannot keep them as text).
    titles=st.lists(
        st.text(st.characters(exclude_characters="\x00", exclude_categories=("Cs",)), max_size=10)
    ),
)
def test_random_trees_survive_export_and_import(trees, titles):
    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "a.db") as a, Store(Path(tmp) / "b.db") as b:
        for i, plan in enumerate(trees):
            grow(a.create_session(titles[i] if i < len(titles) else None, {"i": i}), plan)
        a.archive_session(a.sessions()[0].id)
        exported = lines_of(a)
        import_native(b, exported)
        assert dump(b) == dump(a)
        assert lines_of(b) == exported
        import_native(b, exported)  # idempotent
        assert dump(b) == dump(a)


def test_export_file_then_import_file(store, tmp_path):
    s = store.create_session("t", {"k": [1, 2]})
    build(s)
    path = export_file(store, tmp_path / "out.jsonl")
    header = json.loads(path.read_text().splitlines()[0])
    assert header == {"format": "sessiontree", "version": 1}
    with Store(tmp_path / "other.db") as other:
        calls = []
        [copy] = import_file(other, path, progress=lambda done, total: calls.append((done, total)))
        assert dump(other) == dump(store)
        assert calls[-1] == (len(s.tree()), len(s.tree()))
        assert copy.messages("alt") == s.messages("alt")


def test_export_selected_sessions_by_prefix(store):
    a, b = store.create_session("a"), store.create_session("b")
    a.append(user("x"))
    b.append(user("y"))
    records = [json.loads(line) for line in export_native(store, [b.id[:-2]])]
    assert {r.get("session_id", r.get("id")) for r in records[1:]} == {b.id}


# -- merging -----------------------------------------------------------------


def test_reimport_is_idempotent_and_merges_new_nodes(store, tmp_path):
    s = store.create_session("t")
    build(s)
    old = lines_of(store)
    s.append(user("more"))  # the store is now ahead of `old` on main
    before = dump(store)
    import_native(store, old)
    assert dump(store) == before  # nothing changes, main stays ahead

    with Store(tmp_path / "b.db") as b:
        import_native(b, old)
        import_native(b, lines_of(store))  # fast-forward main, add the new node
        assert dump(b) == dump(store)


def edited(lines: list[str], pred, change) -> list[str]:
    out = []
    for line in lines:
        record = json.loads(line)
        if pred(record):
            change(record)
        out.append(json.dumps(record) + "\n")
    return out


def test_conflicting_payload_is_refused_with_nothing_written(store):
    s = store.create_session("t")
    nodes = build(s)
    lines = lines_of(store)
    s.append(user("later"))  # not in the file
    before = dump(store)
    bad = edited(
        lines, lambda r: r.get("id") == nodes["a"].id, lambda r: r["payload"].update(content="changed")
    )
    extra = {
        "type": "node",
        "session_id": s.id,
        "id": "0" * 8 + "-0000-7000-8000-" + "0" * 12,
        "parent_id": nodes["q"].id,
        "depth": 1,
        "kind": "message",
        "payload": user("new"),
        "created_at": "2026-01-01T00:00:00.000Z",
        "run_id": None,
    }
    with pytest.raises(ImportConflict, match=nodes["a"].id) as info:
        import_native(store, [*bad, json.dumps(extra)])
    assert isinstance(info.value, Conflict)
    assert dump(store) == before


def test_conflicting_parent_kind_and_refs_are_refused(store):
    s = store.create_session("t")
    nodes = build(s)
    lines = lines_of(store)
    before = dump(store)
    cases = [
        (lambda r: r.get("id") == nodes["a"].id, lambda r: r.update(kind="note"), nodes["a"].id),
        (lambda r: r.get("name") == "v1", lambda r: r.update(node_id=nodes["q"].id), "'v1'"),
        (
            lambda r: r.get("name") == "alt",
            lambda r: r.update(type="checkpoint", node_id=r["head_id"]),
            "'alt'",
        ),
    ]
    for pred, change, named in cases:
        with pytest.raises(ImportConflict, match=named):
            import_native(store, edited(lines, pred, change))
        assert dump(store) == before


def test_diverged_branch_is_refused(store, tmp_path):
    s = store.create_session("t")
    build(s)
    with Store(tmp_path / "b.db") as b:
        import_native(b, lines_of(store))
        b.session(s.id).append(user("there"), branch="alt")
        s.append(user("here"), branch="alt")
        before = dump(store)
        with pytest.raises(ImportConflict, match="branch 'alt' has diverged"):
            import_native(store, lines_of(b))
        assert dump(store) == before


def test_node_id_in_another_session_is_refused(store):
    s = store.create_session("t")
    build(s)
    lines = lines_of(store)
    other = store.create_session("other").id
    moved = [line.replace(s.id, other) for line in lines[1:] if '"type":"session"' not in line]
    with pytest.raises(ImportConflict, match="another session"):
        import_native(
            store,
            [
                lines[0],
                json.dumps(
                    {"type": "session", "id": other, "title": None, "metadata": {}, "created_at": "x"}
                ),
                *moved,
            ],
        )


# -- malformed input ---------------------------------------------------------


@pytest.fixture
def exported(store, tmp_path) -> list[str]:
    s = store.create_session("t")
    build(s)
    return lines_of(store)


def fails(tmp_path, lines: list[str] | str, match: str, format: str = "native") -> None:
    path = tmp_path / "chat.jsonl"
    path.write_text(
        lines
        if isinstance(lines, str)
        else "".join(line if line.endswith("\n") else line + "\n" for line in lines)
    )
    with Store(tmp_path / "fresh.db") as fresh:
        with pytest.raises(FormatError, match=match):
            import_file(fresh, path, format=format)
        assert all(rows == [] for rows in dump(fresh).values())


def test_truncated_line(exported, tmp_path):
    text = "".join(exported)
    fails(tmp_path, text[: len(text) - 30], rf"^chat\.jsonl line {len(exported)}: not valid JSON")


def test_wrong_header_and_version(exported, tmp_path):
    fails(
        tmp_path,
        ['{"format": "sessiontree", "version": 2}', *exported[1:]],
        "line 1: unsupported sessiontree format version 2",
    )
    fails(tmp_path, ['{"format": "other", "version": 1}', *exported[1:]], "line 1: not a sessiontree file")
    fails(
        tmp_path,
        exported[1:],
        '^chat\\.jsonl line 1: the header line {"format":"sessiontree","version":1} is missing$',
    )
    for version in ("true", "1.0", '"1"'):  # equal to 1 in Python, not the version 1
        fails(
            tmp_path,
            [f'{{"format": "sessiontree", "version": {version}}}', *exported[1:]],
            f"line 1: unsupported sessiontree format version {json.loads(version)!r}",
        )


def test_missing_parent(exported, tmp_path):
    ghost = "11111111-2222-7333-8444-555555555555"
    lines = edited(
        exported, lambda r: r.get("type") == "node" and r["depth"] == 1, lambda r: r.update(parent_id=ghost)
    )
    fails(tmp_path, lines, rf"chat\.jsonl line \d+: node .*: parent {ghost} is neither")


def test_cycle(exported, tmp_path):
    nodes = [json.loads(x) for x in exported if '"type":"node"' in x]
    root, child = nodes[0], next(n for n in nodes if n["parent_id"] == nodes[0]["id"])
    lines = edited(
        exported, lambda r: r.get("id") == root["id"], lambda r: r.update(parent_id=child["id"], depth=None)
    )
    fails(tmp_path, lines, "cycle")


def test_wrong_depth_and_duplicates(exported, tmp_path):
    lines = edited(
        exported, lambda r: r.get("type") == "node" and r["depth"] == 1, lambda r: r.update(depth=5)
    )
    fails(tmp_path, lines, "declares depth 5")
    node = next(x for x in exported if '"type":"node"' in x)
    fails(tmp_path, [*exported, node], "appears twice")


def test_bad_records(exported, tmp_path):
    fails(tmp_path, "not json at all\n", "chat.jsonl line 1: not valid JSON")
    fails(tmp_path, [exported[0], "[1, 2]"], "line 2: expected a JSON object, got list")
    fails(tmp_path, [exported[0], '{"type": "widget"}'], "line 2: unknown record type 'widget'")
    fails(
        tmp_path,
        [*exported[:2], '{"type": "node", "session_id": "nope"}'],
        "line 3: node of session nope, which no earlier session record introduced",
    )
    bad_payload = edited(exported, lambda r: r.get("type") == "node", lambda r: r.update(payload="text"))
    fails(tmp_path, bad_payload, "'payload' should be an object, got a string")
    no_role = edited(
        exported,
        lambda r: r.get("type") == "node" and r["kind"] == "message",
        lambda r: r["payload"].pop("role"),
    )
    fails(tmp_path, no_role, "needs 'role'")
    fails(tmp_path, "", "empty")


def test_second_session_broken_writes_neither(exported, tmp_path):
    with Store(tmp_path / "other.db") as other:
        build(other.create_session("second"))
        second = edited(
            lines_of(other)[1:],
            lambda r: r.get("parent_id") is not None,
            lambda r: r.update(parent_id="ghost"),
        )
    fails(tmp_path, [*exported, *second], "parent ghost is neither")


def test_pause_and_decision_round_trip_and_decision_rules(store, tmp_path):
    s = store.create_session("t")
    s.append(
        assistant(None, [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}])
    )
    pause = s.append({"calls": [{"id": "c1"}], "why": "risky"}, kind="pause")
    s.append({"c1": {"action": "approve"}}, kind="decision")
    lines = lines_of(store)
    with Store(tmp_path / "b.db") as b:
        import_native(b, lines)
        assert dump(b) == dump(store)
    under_message = edited(
        lines, lambda r: r.get("kind") == "decision", lambda r: r.update(parent_id=pause.parent_id, depth=1)
    )
    fails(tmp_path, under_message, "a decision must be the child of a pause")
    second = edited(
        lines, lambda r: r.get("kind") == "decision", lambda r: r.update(id=r["id"][:-4] + "ffff")
    )
    fails(tmp_path, [*lines, second[-2]], "second decision")
