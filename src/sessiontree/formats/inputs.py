"""What an import may be given, each made a file the readers can read.

Contract:
- ``expand(arguments)`` lists the ``Input``s the arguments name, in their order, before
  anything is read: a file as it is; ``-`` standard input; a pattern holding ``*``, ``?``
  or ``[`` that is no existing path, the paths it matches (sorted; ``**`` crosses
  directories); a directory, every importable file under it (``IMPORTABLE`` endings,
  hidden names left out), sorted by path. A missing path, a pattern that matches nothing
  and a directory with nothing importable are a ``FormatError`` naming them.
- ``local(input, stdin)`` gives the path of a file the readers can read (twice: once to
  detect its format, once to read it) and the name their messages use. A plain file is
  used where it is. Standard input, a gzip file and a zip file (a ChatGPT export: its
  ``conversations.json``) are copied, decompressed, chunk by chunk into a temporary
  directory that is removed afterwards, so memory does not grow with them. Compressed
  input is told by its first bytes, whatever its name.
- A decompressed copy holds at most ``MAX_RATIO`` times the compressed bytes plus
  ``ALLOWANCE`` (JSON compresses 5 to 20 times; a zip bomb, a thousand): past that it
  stops with a one-line ``FormatError``, as it does for a zip holding no (or several)
  ``conversations.json``, an encrypted or damaged archive and a truncated gzip stream.
"""

from __future__ import annotations

import errno
import glob
import gzip
import os
import re
import sys
import tempfile
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Protocol

from ..errors import DiskFull, FormatError
from .jsonstream import CHUNK

IMPORTABLE = (".json", ".jsonl", ".gz", ".zip")
"""The endings of the files a directory given to an import contributes."""
STDIN = "-"
CHATGPT_MEMBER = "conversations.json"
MAX_RATIO = 200
ALLOWANCE = 64 * CHUNK
GZIP_MAGIC, ZIP_MAGIC = b"\x1f\x8b", b"PK\x03\x04"
PATTERN = re.compile(r"[*?[]")  # what makes an argument a glob pattern


class _Readable(Protocol):
    def read(self, size: int = ..., /) -> bytes: ...


@dataclass(frozen=True)
class Input:
    """One file to import: where it is (``-``: standard input) and what messages call it."""

    source: str
    name: str


def expand(arguments: list[str] | tuple[str, ...]) -> list[Input]:
    """The files the arguments name (see the module's contract); nothing is read yet."""
    found: list[Input] = []
    for argument in arguments:
        if argument == STDIN:
            found.append(Input(STDIN, "stdin"))
            continue
        path = Path(argument)
        if not path.exists() and PATTERN.search(argument):
            matches = sorted(glob.glob(argument, recursive=True))
            if not matches:
                raise FormatError(f"{argument}: no file matches this pattern")
            for match in matches:
                found += _one(Path(match), argument)
            continue
        if not path.exists():
            raise FormatError(f"{argument}: the file does not exist")
        found += _one(path, argument)
    return found


def _one(path: Path, argument: str) -> list[Input]:
    if not path.is_dir():
        return [Input(str(path), path.name)]
    inside = sorted(_importable(path))
    if not inside:
        raise FormatError(
            f"{argument}: the directory holds no file to import (none ends in {', '.join(IMPORTABLE)})"
        )
    return [Input(str(path / relative), relative) for relative in inside]


def _importable(directory: Path) -> Iterator[str]:
    """Paths (relative, with /) of the importable files under ``directory``; hidden files
    and directories are left out, and links to directories are not followed."""
    for root, dirs, files in os.walk(directory):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for file in files:
            if not file.startswith(".") and file.endswith(IMPORTABLE):
                yield str(PurePosixPath(Path(root, file).relative_to(directory)))


@contextmanager
def local(item: Input, stdin: IO[bytes] | None = None) -> Iterator[tuple[Path, str]]:
    """A readable file holding ``item``'s text, and what messages call it (see the
    module's contract)."""
    with tempfile.TemporaryDirectory(prefix="sessiontree-import-") as scratch:
        path = Path(item.source)
        if item.source == STDIN:
            path = Path(scratch, "stdin")
            _copy(stdin or sys.stdin.buffer, path, item.name, limit=None)
        elif path.is_dir():
            raise FormatError(f"{item.name}: is a directory, not a file")
        name, magic = item.name, _magic(path)
        if magic == GZIP_MAGIC:
            path = _gunzip(path, Path(scratch, "gunzipped"), name)
        elif magic == ZIP_MAGIC:
            path, name = _unzip(path, Path(scratch, CHATGPT_MEMBER), name)
        yield path, name


def _magic(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except FileNotFoundError:
        return b""  # the reader says so, naming the file
    return head[:2] if head[:2] == GZIP_MAGIC else head


def _limit(compressed: int) -> int:
    return MAX_RATIO * compressed + ALLOWANCE


def _gunzip(path: Path, target: Path, name: str) -> Path:
    try:
        with gzip.open(path, "rb") as source:
            _copy(source, target, name, limit=_limit(path.stat().st_size))
    except (gzip.BadGzipFile, EOFError, zlib.error) as e:
        why = "it ends early" if isinstance(e, EOFError) else str(e)
        raise FormatError(f"{name}: not a readable gzip file ({why})") from None
    return target


def _unzip(path: Path, target: Path, name: str) -> tuple[Path, str]:
    try:
        with zipfile.ZipFile(path) as archive:
            members = [
                m
                for m in archive.infolist()
                if not m.is_dir() and PurePosixPath(m.filename).name == CHATGPT_MEMBER
            ]
            if len(members) != 1:
                held = "no" if not members else f"{len(members)} files named"
                raise FormatError(
                    f"{name}: the zip file holds {held} {CHATGPT_MEMBER}; an import reads a ChatGPT"
                    f" export's {CHATGPT_MEMBER} (unzip it and import the file you mean)"
                )
            [member] = members
            if member.flag_bits & 0x1:
                raise FormatError(f"{name}: {member.filename} is encrypted; unzip it and import it")
            inner = f"{name}/{member.filename}"
            with archive.open(member) as source:
                _copy(source, target, inner, limit=_limit(member.compress_size))
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as e:
        raise FormatError(f"{name}: not a readable zip file ({e or 'it ends early'})") from None
    return target, inner


def _copy(source: _Readable, target: Path, name: str, *, limit: int | None) -> None:
    """``source`` into ``target`` chunk by chunk; FormatError past ``limit`` bytes."""
    written = 0
    try:
        with open(target, "wb") as out:
            while chunk := source.read(CHUNK):
                written += len(chunk)
                if limit is not None and written > limit:
                    raise FormatError(
                        f"{name}: decompresses to more than {limit:,} bytes ({MAX_RATIO} times its"
                        " compressed size and more); if that is right, decompress it and import the result"
                    )
                out.write(chunk)
    except OSError as e:
        if e.errno == errno.ENOSPC:
            raise DiskFull(
                f"cannot copy {name} to {target.parent}: the disk is full; nothing was imported"
            ) from None
        raise


__all__ = ["IMPORTABLE", "Input", "expand", "local"]
