"""Tool leases on a SQLite file: how a live run inside a tool is told from one cut off.

Contract:
- ``hold(db_path, session_key)`` is a context manager a run holds while it is
  inside tool calls of a session, from before its ``tool_start`` is written
  until the last result is. Any number of runs, in any processes, hold one
  session's lease at once (it is shared).
- ``free(db_path, session_keys)`` returns the keys of the sessions no live run
  holds the lease of, in this process or any other. A process that dies, however
  it dies (SIGKILL, a power cut of the machine it runs on), holds nothing: the
  operating system drops its locks.
- The lease of a session is a POSIX record lock on the byte at offset
  ``session_key`` of the file ``<db_path>-tools`` (created next to the database,
  like its ``-wal``). A ``:memory:`` database, or a directory where that file
  cannot be made, has leases only within this process; ``free`` then answers
  from them alone for ``:memory:`` (no other process can see it) and with nothing
  for a file (it cannot tell: a run it cannot see may be alive).

Record locks belong to the process, not to a descriptor, and closing any descriptor
of the file drops all of them; a lock this process takes on a byte it already holds
converts its own lock instead of waiting. Hence one descriptor per file for the life
of the process, shared by every store that opens the file, and a count of the leases
held here, consulted before the file is.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from .sqlite_db import TOOLS_SUFFIX

MEMORY = ":memory:"


class _LockFile:
    def __init__(self, path: str) -> None:
        self.fd: int | None = None
        self.held: Counter[int] = Counter()  # leases this process holds, per session key
        if path != MEMORY:
            # Where it cannot be made: leases within this process only (``free`` cannot tell).
            with contextlib.suppress(OSError):  # the mode less the umask, as SQLite makes -wal
                self.fd = os.open(path + TOOLS_SUFFIX, os.O_RDWR | os.O_CREAT, 0o666)


_files: dict[str, _LockFile] = {}
_guard = threading.Lock()


def _reset_after_fork() -> None:
    """A forked child inherits no record lock: it starts with none held."""
    global _guard
    _files.clear()
    _guard = threading.Lock()


os.register_at_fork(after_in_child=_reset_after_fork)


def _file(db_path: str) -> _LockFile:
    key = db_path if db_path == MEMORY else os.path.realpath(db_path)
    found = _files.get(key)
    if found is None:
        found = _files[key] = _LockFile(key)
    return found


@contextmanager
def hold(db_path: str, session_key: int) -> Iterator[None]:
    """Hold the session's lease while the block runs (see the module docstring)."""
    with _guard:
        lock = _file(db_path)
        if lock.fd is not None and not lock.held[session_key]:
            # Waits only while another process looks at this byte (``free``): a moment. A
            # file system without record locks (ENOLCK) must not stop the run: it runs unleased.
            with contextlib.suppress(OSError):
                fcntl.lockf(lock.fd, fcntl.LOCK_SH, 1, session_key)
        lock.held[session_key] += 1
    try:
        yield
    finally:
        with _guard:
            lock.held[session_key] -= 1
            if not lock.held[session_key]:
                del lock.held[session_key]
                if lock.fd is not None:
                    with contextlib.suppress(OSError):
                        fcntl.lockf(lock.fd, fcntl.LOCK_UN, 1, session_key)


def free(db_path: str, session_keys: Iterable[int]) -> set[int]:
    """The keys of the sessions whose lease no live run holds (see the module docstring)."""
    with _guard:
        lock = _file(db_path)
        if lock.fd is None:
            return set() if db_path != MEMORY else {k for k in session_keys if not lock.held[k]}
        found = set()
        for key in session_keys:
            if lock.held[key]:
                continue
            try:  # taken at once only when no other process holds the byte, shared or not
                fcntl.lockf(lock.fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, key)
            except OSError:
                continue
            fcntl.lockf(lock.fd, fcntl.LOCK_UN, 1, key)
            found.add(key)
        return found
