"""Sync twins of async entry points.

Contract: every async entry point of sessiontree is named ``a<name>`` and has a
sync twin ``<name>`` made by ``iterating`` (for async generators, over ``iterate``) or
``calling`` (for coroutines, over ``call``) from the async function itself, so its
parameters are declared once: the twin has the same signature (``help``, ``inspect``
and type checkers see it) and a docstring that points to the async one. The twins
behave the same wherever they are called:

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
import functools
import inspect
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, ParamSpec, TypeVar

T = TypeVar("T")
P = ParamSpec("P")


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


def iterating(function: Callable[P, AsyncIterator[T]]) -> Callable[P, Iterator[T]]:
    """The sync twin of ``a<name>``, an async generator function (or one returning an
    async iterator): ``<name>``, the same parameters, the steps as a plain iterator."""

    @functools.wraps(function)
    def twin(*args: P.args, **kwargs: P.kwargs) -> Iterator[T]:
        return iterate(function(*args, **kwargs))

    return _named(twin, function, "the same steps, as a plain iterator")


def calling(function: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, T]:
    """The sync twin of ``a<name>``, a coroutine function: ``<name>``, the same
    parameters, its result returned."""

    @functools.wraps(function)
    def twin(*args: P.args, **kwargs: P.kwargs) -> T:
        return call(function(*args, **kwargs))

    return _named(twin, function, "the same result")


def _named(twin: Callable[..., Any], function: Callable[..., Any], gives: str) -> Any:
    """``twin`` named by the rule (``a<name>`` -> ``<name>``), with the signature of
    ``function`` but for what it returns, and a docstring pointing to ``function``."""
    name = function.__name__
    if not name.startswith("a"):
        raise ValueError(f"{name} is not named a<name>: its sync twin has no name")
    twin.__name__ = name[1:]
    twin.__qualname__ = function.__qualname__[: -len(name)] + name[1:]
    twin.__doc__ = f"``{name}`` for callers without asyncio: {gives}."
    returns = function.__annotations__.get("return", inspect.Signature.empty)
    if isinstance(returns, str):  # postponed annotations: the text of a type
        returns = (
            returns.replace("AsyncIterator[", "Iterator[", 1) if returns.startswith("Async") else returns
        )
    elif returns is not inspect.Signature.empty:
        returns = inspect.Signature.empty  # an evaluated async type: not the twin's
    twin.__annotations__ = {**function.__annotations__, "return": returns}
    if returns is inspect.Signature.empty:
        del twin.__annotations__["return"]
    twin.__signature__ = inspect.signature(function).replace(return_annotation=returns)  # type: ignore[attr-defined]
    return twin
