"""Hostile input: odd payloads, names full of SQL metacharacters, garbled import files and
bad command lines. Each one is either stored and read back exactly, or refused with a
clear sessiontree error; a refusal never leaves anything half-stored (the whole database
is compared before and after)."""

from __future__ import annotations

import json
import math
import sqlite3

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from conformance.sample import SQLISH
from sessiontree import (
    Completion,
    Conflict,
    FormatError,
    ImportConflict,
    InvalidPayload,
    NotFound,
    ReadOnly,
    SessionTreeError,
    Store,
    names,
)
from sessiontree.cli import cli
from sessiontree.formats import export_native, import_file, import_native

from conftest import assistant, public_rows_of, user

ODD = [
    "\ud800",
    "\udfff",
    "\ud83d",
    "\x00",
    "\u202e",
    "\u200f",
    "\u202d",
    "\ufeff",
    "\u0301",
    "💥",
    "𝕏",
    "'",
    '"',
    "%",
    "_",
    "\\",
    "\n",
    "\r",
    "\t",
    "--",
    ";",
    "\u2028",
    "\x7f",
]

odd_text = st.one_of(
    st.text(max_size=30),
    st.sampled_from(ODD + SQLISH),
    st.lists(st.sampled_from(ODD), max_size=12).map("".join),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | odd_text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(odd_text, children, max_size=4),
    max_leaves=25,
)


def dump(conn: sqlite3.Connection) -> list[str]:
    """Every row of every table, as SQL text: equal dumps mean nothing was written."""
    # The search index reads its text through json_extract, which turns a lone
    # surrogate's JSON escape into bytes that are not UTF-8: read them as they are.
    factory = conn.text_factory
    conn.text_factory = lambda raw: raw.decode("utf-8", "surrogateescape")
    try:
        return list(conn.iterdump())
    finally:
        conn.text_factory = factory


def pairs_up(value) -> bool:
    """A lone high surrogate right before a lone low one: JSON's \\u escapes cannot tell
    that from the one astral character they encode, so it reads back as that character."""
    if isinstance(value, str):
        return any(
            "\ud800" <= a <= "\udbff" and "\udc00" <= b <= "\udfff"
            for a, b in zip(value, value[1:], strict=False)
        )
    if isinstance(value, list):
        return any(pairs_up(v) for v in value)
    if isinstance(value, dict):
        return any(pairs_up(k) or pairs_up(v) for k, v in value.items())
    return False


def has_non_finite(value) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, list):
        return any(has_non_finite(v) for v in value)
    if isinstance(value, dict):
        return any(has_non_finite(v) for v in value.values())
    return False


# -- payloads --------------------------------------------------------------------------


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=odd_text, data=json_values)
def test_odd_payloads_round_trip_or_are_refused_whole(store, session, content, data):
    payload = {"role": "user", "content": content, "data": data}
    assume(not pairs_up(payload))  # see test_split_surrogate_pair_is_not_kept_apart
    before = dump(store.conn)
    if has_non_finite(data):
        with pytest.raises(InvalidPayload, match="not valid JSON"):
            session.append_many([user("first of a batch"), payload], branch="odd")
        assert dump(store.conn) == before
        return
    node = session.append(payload, branch="odd")
    again = store.node(node.id)  # read back from the database, not the cache
    assert json.dumps(again.payload, sort_keys=True) == json.dumps(payload, sort_keys=True)
    assert session.verify().ok


def test_odd_payloads_survive_reopening_and_export(tmp_path):
    path = tmp_path / "odd.db"
    payload = {
        "role": "user",
        "content": "".join(ODD[1:]),
        "names": SQLISH,
        "big": "x" * 3_000_000,
        "n": 2**80,
        "neg": -0.0,
        "f": 1e308,
    }
    with Store(path) as store:
        node = store.create_session("odd").append(payload)
        export = list(export_native(store))
    with Store(path) as store:
        assert store.node(node.id).payload == payload
        assert store.verify().ok
    with Store(":memory:") as copy:
        import_native(copy, export)
        assert copy.node(node.id).payload == payload


@pytest.mark.xfail(
    strict=True,
    reason="known limit (model.encode_payload): a lone high surrogate "
    "followed by a lone low one is stored as \\u escapes and reads back as one "
    "astral character; see docs/reliability.md",
)
def test_split_surrogate_pair_is_not_kept_apart(store, session):
    node = session.append(user("\ud800\udfff"))
    assert store.node(node.id).payload["content"] == "\ud800\udfff"


# -- names and ids with SQL metacharacters ----------------------------------------------


# -- garbled import files -------------------------------------------------------------


def sample_export() -> bytes:
    with Store(":memory:") as store:
        s = store.create_session("garble me", metadata={"k": "v"})
        s.append({"role": "system", "content": "be nice"})
        a = s.append(user("héllo \u202e 'quoted' %_"))
        s.append(
            {"role": "assistant", "content": "hi"},
            run=Completion({"role": "assistant"}, model="m", usage={"prompt_tokens": 3}),
        )
        s.fork("alt", at=a)
        s.append({"role": "assistant", "content": "other"}, branch="alt")
        s.checkpoint("cp", at=a)
        return "".join(export_native(store)).encode()


ORIGINAL = sample_export()

mutation = st.one_of(
    st.tuples(st.just("flip"), st.floats(0, 1, exclude_max=True), st.integers(1, 255)),
    st.tuples(st.just("set"), st.floats(0, 1, exclude_max=True), st.sampled_from(b'{}[]":,\\\n0a-')),
    st.tuples(st.just("truncate"), st.floats(0, 1, exclude_max=True), st.just(0)),
    st.tuples(st.just("delete"), st.floats(0, 1, exclude_max=True), st.integers(1, 40)),
    st.tuples(st.just("insert"), st.floats(0, 1, exclude_max=True), st.integers(0, 255)),
)


def garble(data: bytes, mutations) -> bytes:
    out = bytearray(data)
    for kind, where, value in mutations:
        if not out:
            break
        at = int(where * len(out))
        if kind == "flip":
            out[at] ^= value
        elif kind == "set":
            out[at] = value
        elif kind == "truncate":
            del out[at:]
        elif kind == "delete":
            del out[at : at + value]
        else:
            out.insert(at, value)
    return bytes(out)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutations=st.lists(mutation, min_size=1, max_size=3))
def test_garbled_native_files_import_cleanly_or_not_at_all(tmp_path, mutations):
    garbled = garble(ORIGINAL, mutations)
    assume(garbled != ORIGINAL)
    path = tmp_path / "garbled.jsonl"
    path.write_bytes(garbled)
    # Into an empty store, and into a store that already holds the original.
    for preload in (False, True):
        with Store(":memory:") as store:
            if preload:
                import_native(store, ORIGINAL.decode().splitlines(keepends=True))
            before = dump(store.conn)
            try:
                import_file(store, path, "native")
            except (FormatError, ImportConflict) as e:
                assert str(e) and "\n" not in str(e).strip()
                assert dump(store.conn) == before  # nothing written
            else:
                assert store.verify().ok
                if preload:  # what was there is still there, unchanged
                    kept = set(dump(store.conn))
                    assert all(line in kept for line in before if line.startswith('INSERT INTO "nodes"'))


def test_an_unchanged_file_imports_identically_again(tmp_path):
    path = tmp_path / "same.jsonl"
    path.write_bytes(ORIGINAL)
    with Store(":memory:") as store:
        import_file(store, path)
        before = dump(store.conn)
        import_file(store, path)
        assert dump(store.conn) == before
        assert "".join(export_native(store)).encode() == ORIGINAL


def test_importing_into_a_readonly_store_is_refused_as_read_only(tmp_path):
    """Before the fix this raised sqlite3.OperationalError, not ReadOnly."""
    source, target = tmp_path / "a.jsonl", tmp_path / "ro.db"
    source.write_bytes(ORIGINAL)
    Store(target).close()
    before = target.read_bytes()
    with Store(target, readonly=True) as store, pytest.raises(ReadOnly, match="read-only"):
        import_file(store, source)
    assert target.read_bytes() == before


# -- bad command lines -----------------------------------------------------------------


@pytest.fixture
def cli_db(tmp_path):
    path = tmp_path / "cli.db"
    with Store(path) as store:
        s = store.create_session("cli")
        s.append(user("hello"))
        s.append({"role": "assistant", "content": "hi"})
    garbled = tmp_path / "garbled.jsonl"
    garbled.write_bytes(ORIGINAL[: len(ORIGINAL) // 2])
    (tmp_path / "binary.jsonl").write_bytes(b"\xff\xfe\x00garbage")
    return path


BAD_COMMANDS = [
    (["fork", "", "--at", "main"], "invalid branch name"),
    (["fork", "a\x01b", "--at", "main"], "control characters"),
    (["fork", "x", "--at", "'; DROP TABLE nodes; --"], "no node, branch or checkpoint"),
    (["fork", "main", "--at", "main"], "already exists"),
    (["checkpoint", "c", "--at", "%"], "no node, branch or checkpoint '%'"),
    (["log", "_"], "no node, branch or checkpoint '_'"),
    (["show", "____"], "no node, branch or checkpoint '____'"),
    (["tree", "%%%%"], "no session '%%%%'"),
    (["log", "-s", "' OR 1=1 --", "main"], "no session"),
    (["approve", "%%%%"], "no node '%%%%'"),
    (["edit-call", "%%%%", "c", "{bad json"], "not JSON"),
    (["edit-call", "%%%%", "c", "[1, 2]"], "must be a JSON object"),
    (["import", "{tmp}/garbled.jsonl"], "garbled.jsonl"),
    (["import", "{tmp}/binary.jsonl"], "binary.jsonl"),
    (["import", "{tmp}/missing.jsonl"], "does not exist"),
    (["import", "--format", "xml", "{tmp}/garbled.jsonl"], "Invalid value for '--format'"),
    (["export", "--format", "xml"], "Invalid value for '--format'"),
    (["export", "ffffffff"], "no session 'ffffffff'"),
    (["prune", "--session", "nope"], "no session 'nope'"),
    (["rename", "a"], "No such command"),
    (["sessions", "--json", "extra"], "Got unexpected extra argument"),
]


@pytest.mark.parametrize(("args", "message"), BAD_COMMANDS, ids=[" ".join(a) for a, _ in BAD_COMMANDS])
def test_bad_command_lines_are_one_line_errors_and_write_nothing(cli_db, args, message):
    args = [a.replace("{tmp}", str(cli_db.parent)) for a in args]
    conn = sqlite3.connect(cli_db)
    before = dump(conn)
    result = CliRunner().invoke(cli, ["--db", str(cli_db), *args])
    assert result.exit_code != 0
    assert isinstance(result.exception, SystemExit), result.exception  # no traceback escaped
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and message in errors[0], result.output
    assert dump(conn) == before
    conn.close()


def test_sessiontree_errors_all_derive_from_one_class():
    for error in (InvalidPayload, NotFound, Conflict, FormatError, ImportConflict, ReadOnly):
        assert issubclass(error, SessionTreeError)


# -- payloads are checked by kind, so what is stored always reads --------------------------

BAD_BY_KIND = [
    ("message", {"role": "assistant", "content": None, "tool_calls": [1]}, "without a string id"),
    ("message", {"role": "assistant", "tool_calls": [{"id": ["x"], "function": {"name": "f"}}]}, "string id"),
    ("message", {"role": "assistant", "tool_calls": [{"id": "a", "function": {}}]}, "function name"),
    (
        "message",
        {"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "f"}}] * 2},
        "two tool calls with the id 'a'",
    ),
    ("message", {"role": "assistant", "tool_calls": "f()"}, "to be a list"),
    ("message", {"role": "tool", "tool_call_id": 7, "content": "x"}, "string 'tool_call_id'"),
    ("pause", {"calls": "everything"}, "'calls' to be a list"),
    ("pause", {"calls": [{"id": 1, "name": "f"}]}, "'calls' to be a list"),
    ("tool_start", {"calls": [None]}, "'calls' to be a list"),
    ("decision", {"decisions": {"c": {"action": "yolo"}}}, "an action in"),
    ("decision", {"decisions": ["approve"]}, "an action in"),
]


@pytest.mark.parametrize(("kind", "payload", "message"), BAD_BY_KIND)
def test_payloads_that_readers_would_choke_on_are_refused(store, session, kind, payload, message):
    session.append(user("hi"))
    before = dump(store.conn)
    parent = session.append({"reason": "r", "calls": []}, kind="pause") if kind == "decision" else None
    before = dump(store.conn)
    with pytest.raises(InvalidPayload, match=message):
        session.append(payload, kind=kind, parent=parent, branch=None if parent else "main")
    assert dump(store.conn) == before


@pytest.mark.parametrize("latency", [10**30, float("inf"), "fast", True])
def test_a_run_latency_that_cannot_be_stored_is_refused(store, session, latency):
    before = dump(store.conn)
    with pytest.raises(InvalidPayload, match="latency_ms must be a finite number"):
        session.append(user("x"), run={"model": "m", "latency_ms": latency})
    assert dump(store.conn) == before


def test_native_import_of_poisoned_payloads_fails_whole_and_readers_stay_fine(store, session, tmp_path):
    from sessiontree import SessionTreeError
    from sessiontree.formats import export_file, import_file

    session.append(user("hi"))
    session.append(
        assistant(None, [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}])
    )
    path = tmp_path / "s.jsonl"
    export_file(store, path)
    poisoned = path.read_text().replace('"id":"c1"', '"id":["c1"]')
    assert poisoned != path.read_text()
    (tmp_path / "p.jsonl").write_text(poisoned)
    with Store(tmp_path / "other.db") as other:
        with pytest.raises(SessionTreeError, match="string id"):
            import_file(other, tmp_path / "p.jsonl")
        assert other.sessions() == [] and other.verify().ok


# -- values a backend cannot bind or hold: refused naming the field, on both backends --


@pytest.mark.parametrize(
    ("write", "message"),
    [
        (lambda st, s: s.append(user("x"), run={"model": {"a": 1}}), "run model must be text .* not dict"),
        (lambda st, s: s.append(user("x"), run={"provider": 7}), "run provider must be text .* not int"),
        (
            lambda st, s: s.record_run({"finish_reason": ["stop"]}),
            "run finish_reason must be text .* not list",
        ),
        (lambda st, s: st.create_session({"a": 1}), "session title must be text .* not dict"),
        (lambda st, s: st.create_session(42), "session title must be text .* not int"),
    ],
)
def test_a_value_that_is_not_text_where_text_belongs_is_refused(db_target, write, message):
    """Before: sqlite3's "Error binding parameter 3: type 'dict' is not supported" (and on
    PostgreSQL psycopg's "cannot adapt type 'dict'", or a list stored as '{stop}')."""
    with Store(db_target) as store:
        session = store.create_session("values")
        session.append(user("hi"))
        before = public_rows_of(store)
        with pytest.raises(InvalidPayload, match=message):
            write(store, session)
        assert public_rows_of(store) == before


@pytest.mark.parametrize(
    ("write", "field"),
    [
        (lambda st, s, big: s.append(user(big)), "payload"),
        (lambda st, s, big: st.create_session(big), "session title"),
        (lambda st, s, big: st.create_session("t", {"notes": big}), "session metadata"),
        (lambda st, s, big: s.append(user("x"), run={"model": "m", "params": {"p": big}}), "run params"),
        (lambda st, s, big: s.fork("f", at="main", metadata={"m": big}), "branch metadata"),
    ],
)
def test_a_value_over_the_size_limit_is_refused_naming_it(db_target, monkeypatch, write, field):
    """The limit is ``names.MAX_VALUE_BYTES`` (250 MB) on both backends; lowered here so
    the test need not hold a quarter of a gigabyte. Before: SQLite's DataError "string or
    blob too big" past 1 GB, PostgreSQL's "invalid memory alloc request size" past 268 MB."""
    monkeypatch.setattr(names, "MAX_VALUE_BYTES", 1000)
    with Store(db_target) as store:
        session = store.create_session("values")
        session.append(user("hi"))
        before = public_rows_of(store)
        with pytest.raises(InvalidPayload, match=rf"^{field} is 1,\d\d\d bytes; a store keeps at most 1,000"):
            write(store, session, "é" * 600)  # 600 characters, 1,200 bytes
        assert public_rows_of(store) == before


def test_a_value_over_sqlites_own_length_limit_is_invalid_payload(store, session):
    """A connection whose limit is below ``MAX_VALUE_BYTES``: SQLite's own refusal, said
    clearly (before: a raw sqlite3.DataError "string or blob too big")."""
    session.append(user("hi"))
    before = dump(store.conn)
    store.conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 10_000)
    with pytest.raises(InvalidPayload, match="longer than this SQLite database's length limit"):
        session.append(user("x" * 20_000))
    store.conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 1_000_000_000)
    assert dump(store.conn) == before
