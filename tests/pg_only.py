"""A pytest plugin that keeps only the tests that use PostgreSQL: ``pytest -p pg_only``.

A test uses it when its module is one of the ``test_postgres*`` files, when it asks for
the ``pg_url`` fixture, when one of its parameters is the ``postgres`` backend
(``db_target``, ``any_store``, ``every_store``), or when its module reaches the test
server itself (``postgres_server()``, listed below). ``.ci/run`` runs them again through
PgBouncer in transaction mode (tests/pg_bouncer.py). The benchmarks' smoke tests are left
out: they check the scripts (minutes of them), not the store, and run directly in CI.
"""

from __future__ import annotations

import pytest

# modules outside the test_postgres* files whose tests open the server by other means
REACHING = {"test_copy_redactions.py", "test_threads.py"}


def uses_postgres(item: pytest.Item) -> bool:
    module = item.path.name
    if module.startswith("test_postgres") or "pg_url" in getattr(item, "fixturenames", ()):
        return True
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "postgres" in callspec.id.split("-"):
        return True
    return module in REACHING and "postgres" in item.name


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    kept = [item for item in items if uses_postgres(item)]
    config.hook.pytest_deselected(items=[item for item in items if item not in kept])
    items[:] = kept
