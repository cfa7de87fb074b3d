"""Sync twins of async entry points.

Contract: every async entry point of sessiontree is named ``a<name>`` and has a
sync twin ``<name>`` built with ``iterate`` (for async generators) or
``call`` (for coroutines). The twins behave the same wherever they are called:

- with no event loop running in this thread, the work runs on a private loop
  in this thread;
- inside a running loop (Jupyter, an async web handler), where a second loop
  cannot run in the same thread, the work runs on a private loop in a helper
  thread and the caller blocks until each result is ready. Blocking a running
  loop is still the caller's choice to make: in async code, use the ``a``
  function instead.

Leaving early (``break``, an exception, KeyboardInterrupt) cancels the step in
progress and closes the generator, so the agent loop records why it stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


class _Loop:
    """A private event loop, in this thread or, when one is running here, in a helper thread."""

    def __init__(self) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            self.thread = None
        else:
            self.thread = threading.Thread(target=self._serve, name="sessiontree-sync", daemon=True)
        self.loop = asyncio.new_event_loop()
        if self.thread is not None:
            self.thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        if self.thread is None:
            task = self.loop.create_task(coroutine)
            try:
                return self.loop.run_until_complete(task)
            except BaseException:
                self._cancel(task)
                raise
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            with contextlib.suppress(BaseException):
                future.result()  # wait until the cancelled work has unwound
            raise

    def _cancel(self, task: asyncio.Task[Any]) -> None:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                self.loop.run_until_complete(task)

    def close(self) -> None:
        with contextlib.suppress(BaseException):
            self.run(self.loop.shutdown_asyncgens())
        if self.thread is not None:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join()
        self.loop.close()


async def _next(steps: AsyncIterator[T]) -> T:
    return await steps.__anext__()


def iterate(steps: AsyncIterator[T]) -> Iterator[T]:
    """The items of an async iterator, as a plain iterator (see the module docstring)."""
    loop = _Loop()
    try:
        while True:
            try:
                yield loop.run(_next(steps))
            except StopAsyncIteration:
                return
    finally:
        aclose = getattr(steps, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(RuntimeError):  # already closed
                loop.run(aclose())
        loop.close()


def call(coroutine: Coroutine[Any, Any, T]) -> T:
    """The result of a coroutine, from sync code (see the module docstring)."""
    loop = _Loop()
    try:
        return loop.run(coroutine)
    finally:
        loop.close()
