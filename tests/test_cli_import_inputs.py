"""What `sessiontree import` takes (newcomer frictions 9 and 22): a ChatGPT export .zip,
.gz files, several files, quoted patterns, directories and - (stdin); each file its own
transaction; a file imported twice says so.

The files are the real fixtures of tests/fixtures/real (licences in SOURCES.md there):
the zip and gzip files are made from them here.
"""

from __future__ import annotations

import gzip
import json
import shutil
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from sessiontree import Store
from sessiontree.cli import cli
from sessiontree.formats import inputs

REAL = Path(__file__).parent / "fixtures" / "real"
EXPORT = REAL / "chatgpt" / "openwebui-importer-gpt_example.json"  # a real conversations.json
SIDECHAIN = REAL / "claude-code" / "claude-code-log-sidechain_integrated.jsonl"
SHORT = REAL / "claude-code" / "spotter-short.jsonl"
INVALID = REAL / "chatgpt" / "librechat-chatgpt-modern-export.json"  # conversation 2 is broken

EXPORT_LINE = "imported session 6857150a-cd20-800f-a5f7-d2404f94b935 (chatgpt): How photosynthesis works"
SIDECHAIN_SESSION = "88a8d761-7b9a-4bf1-a8ca-c1febe6bf358"
SHORT_SESSION = "55604662-cf2a-4331-851a-ec234028f8ca"
SHORT_TITLE = "mix phx.server doesnt seem to start"


def run(db: str, *args: str, code: int = 0, input: bytes | None = None) -> Result:
    result = CliRunner().invoke(cli, ["--db", db, "import", *args], input=input)
    assert result.exit_code == code, result.output
    return result


def error(result: Result) -> str:
    """The one line a refused import ends with."""
    return result.output.strip().splitlines()[-1]


def chatgpt_zip(path: Path, member: str = "conversations.json") -> Path:
    """A zip shaped as ChatGPT's data export: conversations.json among other files."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("chat.html", "<html></html>")
        z.writestr("user.json", json.dumps({"id": "user-1"}))
        z.write(EXPORT, member)
    return path


def session_ids(db: str) -> list[str]:
    with Store(db) as store:
        return sorted(s.id for s in store.sessions())


def test_a_chatgpt_export_zip_is_read_from_its_conversations_json(db_target, tmp_path):
    """Before: `Error: export.zip line 1: not UTF-8 text (byte 0x96 at offset 11)`."""
    result = run(db_target, str(chatgpt_zip(tmp_path / "export.zip")))
    assert result.stdout == EXPORT_LINE + "\n"
    again = run(db_target, str(tmp_path / "export.zip"))
    assert again.stdout == "export.zip: already imported, nothing new (1 session(s), chatgpt)\n"
    with Store(db_target) as store:
        assert store.verify().ok


def test_a_zip_without_conversations_json_is_one_line_naming_what_was_expected(tmp_path):
    db = tmp_path / "s.db"
    archive = chatgpt_zip(tmp_path / "other.zip", member="something.json")
    result = run(str(db), str(archive), code=1)
    assert error(result) == (
        "Error: other.zip: the zip file holds no conversations.json; an import reads a ChatGPT"
        " export's conversations.json (unzip it and import the file you mean)"
    )
    assert not db.exists()


def test_a_damaged_zip_is_one_line(tmp_path):
    archive = chatgpt_zip(tmp_path / "export.zip")
    data = bytearray(archive.read_bytes())
    start = data.index(b"PK\x03\x04", 10)  # the conversations.json entry (the last one)
    data[start + 40 : start + 400] = b"\x00" * 360  # its compressed bytes
    archive.write_bytes(bytes(data))
    result = run(str(tmp_path / "s.db"), str(archive), code=1)
    assert error(result).startswith("Error: export.zip: not a readable zip file (")
    assert not (tmp_path / "s.db").exists()


def test_a_zip_bomb_stops_at_the_bound_with_one_line(tmp_path, monkeypatch):
    """40 MB of one byte deflates to some 40 KB, a thousand times: refused once the copy
    passes MAX_RATIO times the compressed size (plus the allowance, made small here)."""
    monkeypatch.setattr(inputs, "ALLOWANCE", 1_000_000)
    archive = tmp_path / "bomb.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("conversations.json", "[" + " " * 40_000_000 + "]")
    compressed = zipfile.ZipFile(archive).getinfo("conversations.json").compress_size
    limit = inputs.MAX_RATIO * compressed + 1_000_000
    result = run(str(tmp_path / "s.db"), str(archive), code=1)
    assert error(result) == (
        f"Error: bomb.zip/conversations.json: decompresses to more than {limit:,} bytes"
        f" ({inputs.MAX_RATIO} times its compressed size and more); if that is right, decompress"
        " it and import the result"
    )
    assert not (tmp_path / "s.db").exists()


def test_a_gz_file_is_decompressed_and_its_format_detected(db_target, tmp_path):
    """Before: `Error: s.jsonl.gz line 1: not UTF-8 text (byte 0x8b at offset 1)`."""
    packed = tmp_path / "session.jsonl.gz"
    packed.write_bytes(gzip.compress(SHORT.read_bytes()))
    result = run(db_target, str(packed))
    assert result.stdout == f"imported session {SHORT_SESSION} (claude-code): {SHORT_TITLE}\n"
    export = tmp_path / "export.json.gz"  # any format inside: a ChatGPT export too
    export.write_bytes(gzip.compress(EXPORT.read_bytes()))
    assert run(db_target, str(export)).stdout == EXPORT_LINE + "\n"


def test_a_truncated_gz_file_is_one_line(tmp_path):
    packed = tmp_path / "session.jsonl.gz"
    packed.write_bytes(gzip.compress(SHORT.read_bytes())[:500])
    result = run(str(tmp_path / "s.db"), str(packed), code=1)
    assert error(result) == "Error: session.jsonl.gz: not a readable gzip file (it ends early)"
    assert not (tmp_path / "s.db").exists()


def test_several_files_each_report_their_line(db_target):
    """Before: `Got unexpected extra argument`, exit code 2."""
    result = run(db_target, str(SIDECHAIN), str(SHORT))
    assert result.stdout == (
        f"{SIDECHAIN.name}: imported session {SIDECHAIN_SESSION} (claude-code)\n"
        f"{SHORT.name}: imported session {SHORT_SESSION} (claude-code): {SHORT_TITLE}\n"
        "2 files: 2 imported, 0 already imported\n"
    )
    assert "importing [1/2] " + SIDECHAIN.name in result.stderr  # progress names each file
    assert "importing [2/2] " + SHORT.name in result.stderr


def test_a_quoted_pattern_imports_what_it_matches_sorted(db_target, tmp_path):
    for source in (SHORT, SIDECHAIN):
        shutil.copy(source, tmp_path / source.name)
    (tmp_path / "notes.txt").write_text("not matched")
    result = run(db_target, str(tmp_path / "*.jsonl"))
    assert result.stdout == (
        f"{SIDECHAIN.name}: imported session {SIDECHAIN_SESSION} (claude-code)\n"
        f"{SHORT.name}: imported session {SHORT_SESSION} (claude-code): {SHORT_TITLE}\n"
        "2 files: 2 imported, 0 already imported\n"
    )


def test_a_pattern_matching_nothing_is_one_line_and_makes_no_database(tmp_path):
    db = tmp_path / "s.db"
    result = run(str(db), str(tmp_path / "*.jsonl"), code=1)
    assert result.output == f"Error: {tmp_path / '*.jsonl'}: no file matches this pattern\n"
    assert not db.exists()


def test_a_directory_imports_every_importable_file_under_it(db_target, tmp_path):
    """A Claude Code projects folder: one directory per project, one file per session.
    Before: `is a directory, not a file`."""
    projects = tmp_path / "projects"
    for project, source in (("-home-a-app", SHORT), ("-home-b-lib", SIDECHAIN)):
        (projects / project).mkdir(parents=True)
        shutil.copy(source, projects / project / source.name)
    (projects / "-home-a-app" / "notes.txt").write_text("left out")
    (projects / ".cache").mkdir()
    shutil.copy(SHORT, projects / ".cache" / "hidden.jsonl")  # hidden: left out
    result = run(db_target, str(projects))
    assert result.stdout == (
        f"-home-a-app/{SHORT.name}: imported session {SHORT_SESSION} (claude-code): {SHORT_TITLE}\n"
        f"-home-b-lib/{SIDECHAIN.name}: imported session {SIDECHAIN_SESSION} (claude-code)\n"
        "2 files: 2 imported, 0 already imported\n"
    )
    assert session_ids(db_target) == sorted([SHORT_SESSION, SIDECHAIN_SESSION])


def test_stdin_is_read_when_the_file_is_a_dash(db_target):
    """Before: `-: the file does not exist`."""
    result = run(db_target, "-", input=EXPORT.read_bytes())
    assert result.stdout == EXPORT_LINE + "\n"
    packed = run(db_target, "-", input=gzip.compress(SHORT.read_bytes()))  # compressed too
    assert packed.stdout == f"imported session {SHORT_SESSION} (claude-code): {SHORT_TITLE}\n"


def test_a_file_imported_twice_says_already_imported(db_target):
    """Before: the second import printed `imported session ...` again."""
    assert run(db_target, str(SHORT)).stdout.startswith("imported session ")
    assert run(db_target, str(SHORT)).stdout == (
        f"{SHORT.name}: already imported, nothing new (1 session(s), claude-code)\n"
    )
    both = run(db_target, str(SHORT), str(SIDECHAIN))
    assert both.stdout == (
        f"{SHORT.name}: already imported, nothing new (1 session(s), claude-code)\n"
        f"{SIDECHAIN.name}: imported session {SIDECHAIN_SESSION} (claude-code)\n"
        "2 files: 1 imported, 1 already imported\n"
    )


def test_a_bad_file_among_several_names_it_and_what_became_of_the_others(db_target, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "user", "uuid": "u1"\n')
    result = run(db_target, str(SHORT), str(bad), str(SIDECHAIN), code=1)
    assert result.stdout == f"{SHORT.name}: imported session {SHORT_SESSION} (claude-code): {SHORT_TITLE}\n"
    assert error(result) == (
        "Error: bad.jsonl line 2: not valid JSON (Expecting ',' delimiter at column 1)"
        " (nothing of it was written; the 1 file(s) before it stay imported, the 1 after it were not read)"
    )
    assert session_ids(db_target) == [SHORT_SESSION]


def test_a_first_file_refused_leaves_no_new_database(tmp_path):
    db = tmp_path / "new.db"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "user", "uuid": "u1"\n')
    run(str(db), str(bad), str(SHORT), code=1)
    assert not db.exists()


def test_an_invalid_conversation_names_skip_invalid(tmp_path):
    result = run(str(tmp_path / "s.db"), str(INVALID), code=1)
    assert error(result) == (
        f"Error: {INVALID.name}: conversation 2: expected an object with a 'mapping' object"
        " (use --skip-invalid to leave it out)"
    )


def test_json_lists_every_file(db_target, tmp_path):
    run(db_target, str(SHORT))
    result = run(db_target, "--json", str(SHORT), str(chatgpt_zip(tmp_path / "export.zip")))
    assert json.loads(result.stdout) == [
        {
            "file": SHORT.name,
            "format": "claude-code",
            "new": False,
            "sessions": [{"id": SHORT_SESSION, "title": SHORT_TITLE}],
        },
        {
            "file": "export.zip",
            "format": "chatgpt",
            "new": True,
            "sessions": [{"id": "6857150a-cd20-800f-a5f7-d2404f94b935", "title": "How photosynthesis works"}],
        },
    ]


@pytest.mark.parametrize("suffix", [".jsonl", ".zip"])
def test_the_temporary_copy_is_removed(tmp_path, monkeypatch, suffix):
    """A zip member or stdin is copied to a temporary directory; nothing stays behind."""
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    source = chatgpt_zip(tmp_path / "export.zip") if suffix == ".zip" else SHORT
    run(str(tmp_path / "s.db"), "-", input=source.read_bytes())
    assert list((tmp_path / "tmp").iterdir()) == []


def test_a_full_disk_while_decompressing_is_one_line_and_imports_nothing(tmp_path, monkeypatch):
    """The temporary copy fills a 1 MB file system: DiskFull, naming the file."""
    import tempfile

    from conftest import tmpfs

    big = SHORT.read_bytes() * 200  # some 2 MB of text: the copy cannot fit
    packed = tmp_path / "big.jsonl.gz"
    packed.write_bytes(gzip.compress(big))
    db = tmp_path / "s.db"
    with tmpfs(tmp_path / "small", "1m") as small:
        monkeypatch.setenv("TMPDIR", str(small))
        monkeypatch.setattr(tempfile, "tempdir", None)
        result = run(str(db), str(packed), code=1)
        assert error(result).startswith("Error: cannot copy big.jsonl.gz to ")
        assert error(result).endswith(": the disk is full; nothing was imported")
        assert list(small.iterdir()) == []
    assert not db.exists()
