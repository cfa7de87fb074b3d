"""SessiontreeSaver against LangGraph's own checkpointer suite, ``langgraph-checkpoint-conformance``:
every base capability and every extended one the saver implements pass whole, on a SQLite
file and on PostgreSQL, with ``cas=True`` (the default) and ``cas=False``."""

import asyncio
import itertools

import pytest

pytest.importorskip("langgraph.checkpoint.conformance")

from langgraph.checkpoint.conformance import checkpointer_test, validate  # noqa: E402
from langgraph.checkpoint.conformance.capabilities import DetectedCapabilities  # noqa: E402

from sessiontree import Store  # noqa: E402
from sessiontree.integrations.langgraph import SessiontreeSaver  # noqa: E402

from conftest import drop_schema, fresh_schema_url, postgres_server  # noqa: E402

pytestmark = pytest.mark.slow  # 81 clauses, a fresh store for each of 8 capabilities: 2 s (SQLite) to 15 s


def targets(backend: str, tmp_path):
    """A fresh store target per capability suite (the suite makes a saver per capability)."""
    counter = itertools.count()
    made = []

    def next_target() -> str:
        if backend == "sqlite":
            return str(tmp_path / f"conformance-{next(counter)}.db")
        url = fresh_schema_url(postgres_server())
        made.append(url)
        return url

    return next_target, made


@pytest.mark.parametrize("cas", [True, False], ids=["cas", "fork"])
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_conformance_suite_passes_whole(backend, cas, tmp_path):
    next_target, made = targets(backend, tmp_path)

    @checkpointer_test(name=f"SessiontreeSaver-{backend}-{cas}")
    async def factory():
        store = Store(next_target())
        try:
            yield SessiontreeSaver(store, cas=cas)
        finally:
            store.close()

    try:
        report = asyncio.run(validate(factory))
    finally:
        for url in made:
            drop_schema(url)
    failures = {
        cap: [f.test_name if hasattr(f, "test_name") else str(f) for f in result.failures]
        for cap, result in report.results.items()
        if result.failures or result.tests_failed
    }
    assert not failures, report.print_report() or failures
    assert report.passed_all_base()
    detected = DetectedCapabilities.from_instance(SessiontreeSaver(Store(":memory:"))).detected
    for cap in detected:
        result = report.results[cap]
        assert result.tests_passed > 0 and result.tests_failed == 0 and not result.tests_skipped, (
            cap,
            result,
        )
