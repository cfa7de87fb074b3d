"""A copy carries recorded strips (retention's redactions) across, in every direction
between SQLite and PostgreSQL: a destination that holds the unstripped node gets the
strip applied (the stripped text is gone there too), a fresh copy gets the stripped
payload and the redaction record, and a copy never brings back what a strip removed.
Before: the copy after a strip failed with ImportConflict on every later run, and the
destination kept the text the strip policy removed."""

from __future__ import annotations

import time

import pytest

from sessiontree import ImportConflict, InvalidTree, Store, copy_sessions
from sessiontree.bulk import ImportedRedaction, read_session, write_sessions
from sessiontree.formats import export_native, import_file
from sessiontree.ids import now

from conftest import assistant, drop_schema, fresh_schema_url, postgres_server, public_rows_of, raw, user

SECRET = "walrus-token-7731 " * 100  # 1,800 bytes: above the strip threshold below
STRIP = {"strip_older_than": 0, "strip_min_bytes": 1000, "dry_run": False}
PAIRS = [("sqlite", "sqlite"), ("sqlite", "postgres"), ("postgres", "sqlite")]


@pytest.fixture
def target(tmp_path):
    """``target(kind, name)``: a SQLite file or a fresh PostgreSQL schema (dropped after)."""
    made: list[str] = []

    def make(kind: str, name: str) -> str:
        if kind == "sqlite":
            return str(tmp_path / f"{name}.db")
        made.append(fresh_schema_url(postgres_server()))
        return made[-1]

    yield make
    for url in made:
        drop_schema(url)


def fill(store: Store) -> str:
    s = store.create_session("ops")
    s.append(user("fetch the logs"))
    s.append(
        assistant(None, [{"id": "c1", "type": "function", "function": {"name": "logs", "arguments": "{}"}}])
    )
    s.append({"role": "tool", "tool_call_id": "c1", "content": SECRET})
    s.append(assistant("The logs are fine."))
    return s.id


def strip(store: Store) -> str:
    """Strip the big tool result (once the clock has passed the millisecond it was written
    in: what was written this very millisecond is not older than 0 s); its node id."""
    written = max(n.created_at for info in store.sessions() for n in store.session(info.id).tree())
    while now() <= written:
        time.sleep(0.001)
    (stripped,) = store.retention(**STRIP).stripped
    return stripped.node_id


def holds_secret(store: Store) -> bool:
    """Whether the secret is anywhere in the destination's nodes or its search index."""
    stored = raw(store, "SELECT count(*) FROM nodes WHERE payload LIKE ?", ("%walrus-token-7731%",))
    return stored[0][0] > 0 or bool(store.search("walrus"))


def state(store: Store) -> tuple:
    return public_rows_of(store), store.redactions()


@pytest.mark.parametrize(("source_kind", "destination_kind"), PAIRS)
def test_a_copy_after_a_strip_applies_the_strip_at_the_destination(target, source_kind, destination_kind):
    with Store(target(source_kind, "source")) as source, Store(target(destination_kind, "dest")) as dest:
        session_id = fill(source)
        copy_sessions(source, dest)
        assert holds_secret(dest)
        stripped = strip(source)
        copy_sessions(source, dest)  # before: ImportConflict, on this and every later copy
        assert not holds_secret(dest)
        assert dest.session(session_id).messages()[2] == source.session(session_id).messages()[2]
        assert dest.redactions() == source.redactions()
        (record,) = dest.redactions()
        assert (record["node"], record["bytes"]) == (stripped, len(SECRET))
        assert state(dest) == state(source)
        copy_sessions(source, dest)  # once more: nothing changes
        assert state(dest) == state(source)
        assert dest.verify().ok


@pytest.mark.parametrize(("source_kind", "destination_kind"), PAIRS)
def test_a_fresh_copy_of_a_stripped_session_carries_the_strip_and_its_record(
    target, source_kind, destination_kind
):
    with Store(target(source_kind, "source")) as source, Store(target(destination_kind, "dest")) as dest:
        fill(source)
        strip(source)
        copy_sessions(source, dest)
        assert not holds_secret(dest)
        assert state(dest) == state(source) and len(dest.redactions()) == 1
        copy_sessions(source, dest)
        assert state(dest) == state(source)
        # the destination can strip no further, and its own retention finds nothing left
        assert dest.retention(**STRIP).stripped == []
        assert dest.verify().ok


@pytest.mark.parametrize(("source_kind", "destination_kind"), PAIRS)
def test_a_copy_never_brings_back_what_a_strip_removed(target, source_kind, destination_kind):
    with Store(target(source_kind, "source")) as source, Store(target(destination_kind, "dest")) as dest:
        fill(source)
        copy_sessions(source, dest)
        strip(dest)  # stripped at the destination only
        before = state(dest)
        copy_sessions(source, dest)  # the source still has the text: the strip stands
        assert state(dest) == before and not holds_secret(dest)


def test_a_strip_does_not_excuse_another_difference(tmp_path):
    with Store(tmp_path / "a.db") as source, Store(tmp_path / "b.db") as dest:
        session_id = fill(source)
        copy_sessions(source, dest)
        strip(source)
        copied = read_session(source, session_id)
        tool_node = copied.nodes[2]
        tool_node.payload = {**tool_node.payload, "tool_call_id": "other"}  # and a second change
        before = state(dest)
        with pytest.raises(ImportConflict, match="different parent, kind or payload"):
            write_sessions(dest, [copied])
        assert state(dest) == before


def test_a_redaction_the_input_cannot_back_is_refused(tmp_path):
    with Store(tmp_path / "a.db") as source, Store(tmp_path / "b.db") as dest:
        session_id = fill(source)
        strip(source)
        (record,) = source.redactions()
        copied = read_session(source, session_id)
        copied.redactions = [ImportedRedaction(record["node"], "content", 5, "not the text", "r", "2026")]
        with pytest.raises(InvalidTree, match="its 'content' does not hold the marker"):
            write_sessions(dest, [copied])
        copied.redactions = [ImportedRedaction("nope", "content", 5, "m", "r", "2026")]
        with pytest.raises(InvalidTree, match="a redaction names node nope, which is not in the input"):
            write_sessions(dest, [copied])
        assert dest.sessions() == []


def test_reimporting_an_export_made_before_a_strip_keeps_the_strip(db_target, tmp_path):
    """The same rule for an import (a native file is streamed: ``bulk_stream``)."""
    with Store(db_target) as store:
        fill(store)
        export = tmp_path / "before.jsonl"
        export.write_text("".join(line + "\n" for line in export_native(store)))
        strip(store)
        before = state(store)
        import_file(store, export)  # before: ImportConflict
        import_file(store, export)
        assert state(store) == before and not holds_secret(store)
