"""The connections of one SQLite store, for the threads that share it.

Contract: ``Connections(first, reopen, memory=...)`` gives each thread the ``Slot`` (a
connection and its counters) it uses, ``slot()``, and the context managers a thread
holds around a write transaction (``writing``) and a read snapshot (``reading``).

- A file: every thread has a connection of its own, opened (``reopen``) the first time
  the thread uses the store. Threads are then kept apart by the locking SQLite puts
  between connections, the same that keeps processes apart: in WAL a reader sees one
  committed state and never waits, and there is one writer at a time (``BEGIN
  IMMEDIATE``, the busy timeout). On top of that the writers of one store take turns on
  a lock of their own (``writing``), so a waiting thread starts the moment the one
  before it commits, instead of sleeping in SQLite's busy handler (which backs off up
  to 100 ms a try). Reads take no lock (``reading`` is a no-op).
- When a thread ends, its connection goes back to the store (its thread-local data is
  dropped, and with it the ``_Lease``) for the next new thread: a server that starts a
  thread per request keeps as many connections as it runs threads at once. A
  connection given back inside a transaction (a thread that died in one) is rolled back.
- ``:memory:``: every connection would be a database of its own, so there is one,
  and one re-entrant lock. A thread holds it for a whole transaction or snapshot
  (``writing`` and ``reading`` are both that lock), and each statement run outside
  one is run and fetched whole under it (``Serialised``): no thread ever runs a
  statement inside another thread's transaction, or sees what it has not committed.
- A lock not had within ``LOCK_WAIT_S`` (another thread held the store that long) is
  ``Busy``, as a file held that long by another process is.
- ``close()`` closes every connection, whichever thread has it; using the store after
  that raises sqlite3's "Cannot operate on a closed database."
- A transaction (or snapshot) belongs to the thread that began it: work handed to
  another thread runs outside it (a sync twin called inside a running event loop runs
  on a helper thread: ``bridge``), and a write there waits for it to end.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from typing import Any, cast

from ..errors import Busy
from . import sqlite_db as _db

LOCK_WAIT_S = _db.BUSY_TIMEOUT_MS / 1000 * _db.WRITE_WAIT_ROUNDS
"""How long a thread waits for the store's lock before ``Busy`` (as long as for a file's)."""


_NOTHING: AbstractContextManager[None] = contextlib.nullcontext()


class Slot:
    """One connection, and what its commits count (see ``SQLiteStorage.transaction``)."""

    __slots__ = ("conn", "commits", "unindexed")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.commits = 0
        self.unindexed = 0  # nodes inserted through it since it last moved the search watermark


class _Local(threading.local):
    slot: Slot
    conn: sqlite3.Connection  # ``slot.conn``, one lookup away for every statement
    lease: _Lease


class _Lease:
    """A thread's hold on a file's connection: dropped with the thread's data when it ends."""

    __slots__ = ("owner", "slot")

    def __init__(self, owner: Connections, slot: Slot) -> None:
        self.owner, self.slot = owner, slot

    def __del__(self) -> None:
        self.owner.give_back(self.slot)


class Holding:
    """Holds a lock for a ``with`` block (re-entrant, reusable); ``Busy`` when another thread
    keeps it for ``LOCK_WAIT_S``."""

    __slots__ = ("lock",)

    def __init__(self, lock: threading.RLock) -> None:
        self.lock = lock

    def __enter__(self) -> None:
        if not self.lock.acquire(timeout=LOCK_WAIT_S):
            raise Busy(
                f"another thread has held this store for more than {LOCK_WAIT_S:g} s (a long"
                " import, or an open store.transaction() waiting for this thread?); nothing was"
                " written: try again when it has finished"
            )

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


class Fetched:
    """A statement's cursor read to its end: its rows, and what the cursor said."""

    def __init__(self, cursor: sqlite3.Cursor) -> None:
        self.description = cursor.description
        self._rows = iter(cursor.fetchall())
        self.rowcount, self.lastrowid = cursor.rowcount, cursor.lastrowid

    def fetchone(self) -> Any:
        return next(self._rows, None)

    def fetchall(self) -> list[Any]:
        return list(self._rows)

    def __iter__(self) -> Iterator[Any]:
        return self._rows


class Serialised:
    """The one connection of an in-memory store: ``execute`` and ``executemany`` run and
    fetch under the store's lock; everything else is the connection's own."""

    def __init__(self, conn: sqlite3.Connection, holding: Holding) -> None:
        self._conn, self._holding = conn, holding

    def execute(self, sql: str, parameters: Any = (), /) -> Fetched:
        with self._holding:
            return Fetched(self._conn.execute(sql, parameters))

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> Fetched:
        with self._holding:
            return Fetched(self._conn.executemany(sql, parameters))

    @property
    def in_transaction(self) -> bool:
        return self._conn.in_transaction

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def __setattr__(self, name: str, value: Any) -> None:  # text_factory, row_factory, ...
        if name.startswith("_"):
            object.__setattr__(self, name, value)
        else:
            setattr(self._conn, name, value)


class Connections:
    """Every connection of one store, and which thread has which (see the module docstring)."""

    def __init__(
        self, first: sqlite3.Connection, reopen: Callable[[], sqlite3.Connection], *, memory: bool
    ) -> None:
        self._reopen = reopen
        self._guard = threading.RLock()  # the lists below (re-entrant: a lease may die inside)
        self._closed = False
        self.local = _Local()
        # memory: the one lock of everything; a file: the turns its writers take
        self._holding = Holding(threading.RLock())
        self._idle: list[Slot] = []
        if memory:
            self._shared: Slot | None = Slot(cast(sqlite3.Connection, Serialised(first, self._holding)))
            self._all = [self._shared]
        else:
            self._shared = None
            self._all = [Slot(first)]
            self._lend(self._all[0])

    def writing(self) -> AbstractContextManager[None]:
        """What a thread holds around a write transaction (see the module docstring)."""
        return self._holding

    def reading(self) -> AbstractContextManager[None]:
        """What a thread holds around a read snapshot: nothing, but on ``:memory:``."""
        return _NOTHING if self._shared is None else self._holding

    def slot(self) -> Slot:
        """This thread's slot: a file's connection is opened (or one given back is reused)
        the first time a thread asks."""
        try:
            return self.local.slot
        except AttributeError:
            pass
        if self._shared is not None:
            self.local.slot, self.local.conn = self._shared, self._shared.conn
            return self._shared
        with self._guard:
            self._check_open()
            slot = self._idle.pop() if self._idle else None
        if slot is None:
            slot = Slot(self._reopen())  # outside the guard: opening may wait for the file
            with self._guard:
                if self._closed:
                    slot.conn.close()
                self._check_open()
                self._all.append(slot)
        self._lend(slot)
        return slot

    def _lend(self, slot: Slot) -> None:
        self.local.slot, self.local.conn, self.local.lease = slot, slot.conn, _Lease(self, slot)

    def _check_open(self) -> None:
        if self._closed:
            raise sqlite3.ProgrammingError("Cannot operate on a closed database.")

    def give_back(self, slot: Slot) -> None:
        """A thread that had ``slot`` has ended: keep it for the next new thread."""
        with self._guard:
            if self._closed:
                return
            if slot.conn.in_transaction:  # it ended inside one: nothing of it may commit
                with contextlib.suppress(sqlite3.Error):
                    slot.conn.execute("ROLLBACK")
            self._idle.append(slot)

    def slots(self) -> list[Slot]:
        """Every slot, in use or idle."""
        with self._guard:
            return list(self._all)

    def close(self) -> None:
        """Close every connection (any thread's); the store cannot be used after."""
        with self._guard:
            self._closed = True
            slots, self._idle = list(self._all), []
        for slot in slots:
            slot.conn.close()
