"""The schema's migration steps, read from the package: the one reader both backends use.

Contract: a step is a ``NNNN_name.sql`` file; the files of the top-level
``migrations/`` folder (shipped inside the wheel as ``sessiontree/migrations``)
are the schema's steps, numbered 1, 2, 3, ... without gaps, and that numbering is
the schema version of either backend (SQLite runs these files;
``migrations/postgres/`` holds PostgreSQL's text of the steps from 3 on, see
``postgres_db.steps``). A folder is read once per process: every store opened
checks its version against the steps, and reading the files cost most of an open.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ..errors import SessionTreeError


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


@functools.cache  # every store opened looks: resolving it cost a tenth of an open
def migrations_dir() -> Path:
    """Where the migration files are: inside the installed package, else the source tree."""
    packaged = resources.files("sessiontree") / "migrations"
    if packaged.is_dir():
        return Path(str(packaged))
    source_tree = Path(__file__).resolve().parents[3] / "migrations"
    if source_tree.is_dir():
        return source_tree
    raise SessionTreeError("sessiontree's migrations folder is missing from this installation")


@functools.cache
def read_folder(folder: Path, shown: str = "") -> tuple[Migration, ...]:
    """The steps in ``folder``, in file-name order (``shown``: how an error names the
    folder); ``SessionTreeError`` for a file not named ``NNNN_name.sql``."""
    steps = []
    for path in sorted(folder.glob("*.sql")):
        match = re.fullmatch(r"(\d{4})_(\w+)\.sql", path.name)
        if not match:
            raise SessionTreeError(f"badly named migration file {shown}{path.name!r}")
        steps.append(Migration(int(match[1]), match[2], path.read_text("utf-8")))
    return tuple(steps)


@functools.cache
def schema_steps() -> tuple[Migration, ...]:
    """The schema's steps (the top-level folder), checked to be numbered without gaps."""
    steps = read_folder(migrations_dir())
    for expected, step in enumerate(steps, 1):
        if step.version != expected:
            raise SessionTreeError(f"migration {expected:04d} is missing (found {step.version:04d})")
    return steps
