"""A pytest plugin for the OpenAI Agents SDK's own test suite (run from its unpacked sdist).

Contract:
- It always records each test's outcome (``passed``, ``failed``, ``skipped``) by node id
  into the JSON file ``$AGENTS_SDK_OUTCOMES``, so two runs can be compared test by test.
- With ``AGENTS_SDK_SWAP=1`` it replaces the SDK's reference session before collection:
  ``SimpleListSession``, ``CountingSession`` and ``IdStrippingSession`` of
  ``tests/utils/simple_session.py`` become subclasses of ``SessiontreeSession`` with the
  same constructors (``session_id="test", history=None``) and the views the tests read
  (``saved_items``, ``_items``, ``pop_calls``, ``_ignore_ids_for_matching``). Every
  session lives in one SQLite ``Store`` of the process, each under its own key, so the
  many sessions called "test" stay apart; its ``session_id`` is still what the test gave.
  The count of sessions built goes into the outcomes file (``sessiontree_sessions``);
  under pytest-xdist the controller writes the outcomes (every worker's reports reach it)
  and each worker its own count, to ``$AGENTS_SDK_OUTCOMES.<worker id>.built``.

Loaded by ``tests/peer_suites/agents_sdk.py``; the SDK's tests themselves are never copied here.
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from typing import Any

_outcomes: dict[str, str] = {}
_built = [0]


def _swap() -> None:
    import tests.utils.simple_session as reference  # the SDK's test package, from its sdist

    from sessiontree import Store
    from sessiontree.integrations.openai_agents import SessiontreeSession, open_session

    store = Store(os.path.join(tempfile.mkdtemp(prefix="agents-sdk-swap-"), "sessions.db"))

    class SimpleListSession(SessiontreeSession):
        def __init__(self, session_id: str = "test", history: list[Any] | None = None) -> None:
            super().__init__(session_id, store)
            self._session = open_session(store, f"{session_id}/{uuid.uuid4()}")  # one tree each
            self._ignore_ids_for_matching = False
            self._saved_override: list[Any] | None = None
            _built[0] += 1
            if history:
                self.add_items_sync(list(history))

        # Subclasses in the SDK's tests assign saved_items a list of their own; then it is theirs.
        @property
        def saved_items(self) -> list[Any]:
            return self._saved_override if self._saved_override is not None else self.get_items_sync()

        @saved_items.setter
        def saved_items(self, value: list[Any]) -> None:
            self._saved_override = value

        @property
        def _items(self) -> list[Any]:
            return self.get_items_sync()

    class CountingSession(SimpleListSession):
        def __init__(self, session_id: str = "test", history: list[Any] | None = None) -> None:
            super().__init__(session_id=session_id, history=history)
            self.pop_calls = 0

        async def pop_item(self) -> Any:
            self.pop_calls += 1
            return await super().pop_item()

    class IdStrippingSession(CountingSession):
        def __init__(self, session_id: str = "test", history: list[Any] | None = None) -> None:
            super().__init__(session_id=session_id, history=history)
            self._ignore_ids_for_matching = True

        async def add_items(self, items: list[Any]) -> None:
            clean = [{k: v for k, v in i.items() if k != "id"} if isinstance(i, dict) else i for i in items]
            await super().add_items(clean)

    reference.SimpleListSession = SimpleListSession  # type: ignore[misc]
    reference.CountingSession = CountingSession  # type: ignore[misc]
    reference.IdStrippingSession = IdStrippingSession  # type: ignore[misc]


def pytest_configure(config: Any) -> None:
    if os.environ.get("AGENTS_SDK_SWAP") == "1":
        _swap()


def pytest_runtest_logreport(report: Any) -> None:
    # a failure in setup or teardown fails the test; a skip in setup skips it
    counts = report.when == "call" or report.outcome != "passed"
    if counts and (report.nodeid not in _outcomes or report.outcome == "failed"):
        _outcomes[report.nodeid] = report.outcome


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    target = os.environ.get("AGENTS_SDK_OUTCOMES")
    if not target:
        return
    worker = getattr(session.config, "workerinput", None)
    if worker is not None:  # an xdist worker: its reports reach the controller, its count does not
        with open(f"{target}.{worker['workerid']}.built", "w") as f:
            json.dump(_built[0], f)
        return
    with open(target, "w") as f:
        json.dump({"outcomes": _outcomes, "sessiontree_sessions": _built[0]}, f)
