"""One connection pool per process and PostgreSQL target, shared by its stores, that heals.

Contract:
- ``acquire(target, opening)`` gives the process's pool for ``target`` (its URL, schema,
  pool size, prepare threshold and PgBouncer mode: ``postgres_db.Target``) and what
  ``opening()`` returned when that pool was made: ``opening`` runs once per pool, before
  it, to check or migrate the schema. Every ``Store`` on one URL in a process (``serve``'s
  request threads, ``worker``'s, the MCP server's) thus shares one pool and one schema
  check. ``release(target)`` gives it back; the last release closes the pool. Both are
  thread-safe; a forked child makes pools of its own (a pool's connections are its parent's).
- ``borrow(pool)`` lends a connection the server has not ended while it sat idle. A
  connection the server (a restart, ``pg_terminate_backend``) or a pooler in between
  (its idle timeout) ended has something to read while idle (the server's FATAL message,
  or the end of the stream), so a healthy idle one is told apart without a round trip;
  one that has something to read is checked for real, and a dead one discarded, then the
  next tried, until a live or a new connection comes. A connection that dies between the
  check and the statement is still the caller's error (``PostgresStorage`` runs a read
  again once; a write cannot know whether it ran).
"""

from __future__ import annotations

import os
import select
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from . import postgres_db as pgdb

_lock = threading.Lock()
_pools: dict[tuple[int, pgdb.Target], tuple[ConnectionPool[Any], Any, int]] = {}
"""(process id, target) -> (pool, what ``opening`` returned, how many stores hold it)."""


def acquire(target: pgdb.Target, opening: Callable[[], Any]) -> tuple[ConnectionPool[Any], Any]:
    key = (os.getpid(), target)
    # Held while a pool is made: two stores opening together make one pool, not two.
    with _lock:
        if key in _pools:
            pool, opened, holders = _pools[key]
            _pools[key] = (pool, opened, holders + 1)
            return pool, opened
        opened = opening()
        pool = _new_pool(target)
        _pools[key] = (pool, opened, 1)
        return pool, opened


def release(target: pgdb.Target) -> None:
    key = (os.getpid(), target)
    with _lock:
        if key not in _pools:
            return
        pool, opened, holders = _pools[key]
        if holders > 1:
            _pools[key] = (pool, opened, holders - 1)
            return
        del _pools[key]
    pool.close()


def _new_pool(target: pgdb.Target) -> ConnectionPool[Any]:
    def configure(conn: psycopg.Connection[Any]) -> None:
        if not target.pgbouncer:  # behind PgBouncer, each transaction sets them (pgdb.settings)
            pgdb.configure(conn, target.schema, readonly=False)

    pool: ConnectionPool[Any] = ConnectionPool(
        target.conninfo,
        min_size=1,
        max_size=target.pool_size,
        kwargs={"autocommit": True, "prepare_threshold": target.prepare_threshold},
        configure=configure,
        open=False,
        name=f"sessiontree {target.shown}",
    )
    with pgdb.clear_errors(target.shown):
        pool.open(wait=True, timeout=15)
    return pool


@contextmanager
def borrow(pool: ConnectionPool[Any], timeout: float | None = None) -> Iterator[psycopg.Connection[Any]]:
    """A pooled connection still alive as far as can be told (see the module docstring);
    ``PoolTimeout`` when none is free within ``timeout`` seconds (None: the pool's own)."""
    conn = pool.getconn(timeout)
    # A restart or a pooler's timeout ends every idle connection: try each, then a new one.
    for _ in range(pool.max_size):
        if not _ended(conn):
            break
        pool.putconn(conn)  # broken: closed, and the pool makes another
        conn = pool.getconn()
    try:
        yield conn
    finally:
        pool.putconn(conn)


def _ended(conn: psycopg.Connection[Any]) -> bool:
    if conn.closed or conn.broken:
        return True
    try:
        waiting, _, _ = select.select([conn.fileno()], [], [], 0)
    except (OSError, ValueError):
        return True
    if not waiting:  # an idle connection nobody spoke to: alive, as far as a socket tells
        return False
    try:  # something came: a FATAL or the end of the stream, or (rarely) a notice
        ConnectionPool.check_connection(conn)
    except psycopg.Error:
        return True
    return False
