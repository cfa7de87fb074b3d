"""Smoke tests for the benchmarks: they run and report every figure (no timing assertions)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # runs the benchmark scripts

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "store.py"


def numbers(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from numbers(v)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield value


def test_quick_json_run_reports_every_figure():
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=240,
    ).stdout
    result = json.loads(out)
    assert result["quick"] is True and result["reps"] >= 5
    assert set(result["append_us"]) == {"single", "batched"}
    assert set(result["path_ms"]) == {"100", "1000", "10000"}
    for figure in [*result["append_us"].values(), *result["path_ms"].values()]:
        assert set(figure) == {"store", "raw", "ratio"}
    assert set(result["fork_us"]) == {"10", "10000", "ratio"}
    assert set(result["storage"]["sizes"]) == {"100", "1000", "10000"}
    for size in result["storage"]["sizes"].values():
        assert set(size) == {"bytes_per_node", "overhead"}
    assert "slope" in result["storage"]
    figures = list(numbers({k: result[k] for k in ("append_us", "path_ms", "fork_us", "storage")}))
    assert len(figures) == 2 * 3 + 3 * 3 + 3 + 3 * 2 + 1
    assert all(x > 0 for x in figures)


def test_loop_benchmark_quick_json_reports_every_figure():
    script = SCRIPT.with_name("loop.py")
    out = subprocess.run(
        [sys.executable, str(script), "--quick", "--json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=240,
    ).stdout
    result = json.loads(out)
    expected = {
        f"{what}_depth_{d}"
        for what in ("loop_first_cycle_us", "loop_cycle_us", "store_cycle_us")
        for d in (100, 2000)
    }
    expected |= {
        "loop_over_store_shallow",
        "loop_over_store_deep",
        "loop_deep_over_shallow",
        "reps",
        "cycles",
    }
    assert set(result) == expected
    assert all(value > 0 for value in result.values())


def test_import_memory_stays_under_three_times_the_file():
    script = SCRIPT.parent / "import_memory.py"
    out = subprocess.run(
        [sys.executable, str(script), "--mb", "20", "--json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    ).stdout
    result = json.loads(out)
    assert set(result) == {"chatgpt", "librechat", "openwebui", "claude-code", "pi"}
    for fmt, figures in result.items():
        assert figures["file_mb"] >= 20
        if fmt != "pi":  # pi: see docs/performance.md, not met yet
            assert figures["ratio"] <= 3, (fmt, figures)
