"""The guard on the ``slow`` marker (tests/conftest.py): a run in which a test not marked
``slow`` takes longer than the limit fails, naming it; a marked one may take its time."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # starts a pytest process

TESTS = """\
import time

import pytest


def test_quick():
    pass


def test_unmarked_and_slow():
    time.sleep(0.5)


@pytest.mark.slow
def test_marked_and_slow():
    time.sleep(0.5)
"""


def run_with_the_guard(tmp_path: Path, limit: str | None) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_timed.py").write_text(TESTS)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "SESSIONTREE_SLOW_LIMIT")}
    env["PYTHONPATH"] = str(Path(__file__).parent)  # tests/conftest.py, loaded as a plugin
    # Only that plugin: the installed ones (hypothesis, langsmith, xdist, ...) took most of
    # each run's start, several seconds on a busy machine, and the guard needs none of them.
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    if limit is not None:
        env["SESSIONTREE_SLOW_LIMIT"] = limit
    command = [sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-q"]
    return subprocess.run(
        [*command, "-o", "markers=slow: x", str(tmp_path / "test_timed.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_unmarked_test_over_the_limit_fails_the_run_and_is_named(tmp_path):
    result = run_with_the_guard(tmp_path, "0.25")
    assert result.returncode == 1, result.stdout
    assert "3 passed" in result.stdout
    assert "test_timed.py::test_unmarked_and_slow" in result.stdout
    assert "test_marked_and_slow" not in result.stdout
    assert "(limit 0.2 s)  test_timed.py::test_unmarked_and_slow" in result.stdout
    assert "1 test(s) took over the limit: mark them @pytest.mark.slow or make them faster" in result.stdout


def test_under_ci_the_limit_grows_with_the_load(monkeypatch):
    import conftest

    monkeypatch.setenv("CI", "true")
    monkeypatch.delenv("SESSIONTREE_SLOW_LIMIT", raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    monkeypatch.setattr("os.getloadavg", lambda: (2.0, 0.0, 0.0))
    assert conftest.slow_limit() == conftest.CI_SLOW_LIMIT  # one job a core: the least limit
    monkeypatch.setattr("os.getloadavg", lambda: (16.0, 0.0, 0.0))
    assert conftest.slow_limit() == 24.0  # 8 jobs a core: 2 x 1.5 s x 8


def test_without_a_limit_nothing_is_timed(tmp_path):
    result = run_with_the_guard(tmp_path, None)
    assert result.returncode == 0 and "slow limit" not in result.stdout, result.stdout
