"""Smoke tests for the benchmarks: they run and report every figure (no timing assertions)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import PGBOUNCER, postgres_server

pytestmark = pytest.mark.slow  # runs the benchmark scripts

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "store.py"


def numbers(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from numbers(v)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield value


def quick_json(script: str, *options: str, timeout: int = 240) -> dict:
    """The figures a benchmark script prints with ``--json`` (``--quick`` unless options
    are given)."""
    out = subprocess.run(
        [sys.executable, str(SCRIPT.with_name(script)), *(options or ("--quick",)), "--json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=timeout,
    ).stdout
    return json.loads(out)


def test_quick_json_run_reports_every_figure():
    result = quick_json("store.py")
    assert result["quick"] is True and result["reps"] >= 5
    assert set(result["append_us"]) == {"single", "batched"}
    assert set(result["path_ms"]) == {"100", "1000", "10000"}
    for figure in [*result["append_us"].values(), *result["path_ms"].values()]:
        assert set(figure) == {"store", "raw", "ratio"}
    assert set(result["fork_us"]) == {"10", "10000", "ratio"}
    for index in ("index_on", "index_off"):
        storage = result["storage"][index]
        assert set(storage["sizes"]) == {"100", "1000", "10000"}
        for size in storage["sizes"].values():
            assert set(size) == {"bytes_per_node", "overhead", "over_payload"}
        assert "slope" in storage
    steps = {"store", "store_index_off", "raw", "raw_4k", "raw_4k_no_id", "floor", "floor_8k"}
    assert set(result["floor_append_us"]) == {"single", "batched", "wal_pages"}
    for figure in (result["floor_append_us"][k] for k in ("single", "batched")):
        assert set(figure) == steps | {f"{s}_ratio" for s in steps - {"floor"}}
    pages = result["floor_append_us"]["wal_pages"]
    assert set(pages) == steps
    # a commit writes at least the node's page, its parent-index page and the head's page
    assert all(p >= 3 for p in pages.values()) and pages["store"] >= pages["floor"]
    # the unique index on the id is the store's fourth page
    assert pages["raw_4k_no_id"] <= pages["raw_4k"] - 0.9
    assert set(result["mixed_storage"]) == {
        "store",
        "store_index_off",
        "floor",
        "floor_8k",
        "average_payload",
    }
    assert set(result["cold_read_ms"]) == {"messages", "store", "floor", "ratio"}
    assert result["cold_read_ms"]["messages"] == 400
    measured = (
        "append_us",
        "floor_append_us",
        "path_ms",
        "fork_us",
        "cold_read_ms",
        "storage",
        "mixed_storage",
    )
    figures = list(numbers({k: result[k] for k in measured}))
    assert len(figures) == 2 * 3 + 2 * 13 + 7 + 3 * 3 + 3 + 4 + 2 * (3 * 3 + 1) + 5
    assert all(x > 0 for x in figures)


def test_parallel_tools_benchmark_quick_json_reports_every_figure():
    result = quick_json("parallel_tools.py")
    assert set(result) == {"quick", "reps", "calls", "sleep_s", "parallel_1_s", "parallel_4_s", "ratio"}
    assert result["calls"] == 3 and result["reps"] >= 3
    # one after another can never take less than the three sleeps (no claim about the ratio)
    assert result["parallel_1_s"] >= 3 * result["sleep_s"] > 0 and result["parallel_4_s"] > 0


def test_loop_benchmark_quick_json_reports_every_figure():
    result = quick_json("loop.py")
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


PEERS = {"sessiontree", "floor", "langgraph", "agents-sqlite", "agents-advanced", "llm"}
NO_FORK = {"agents-sqlite"}


def check_peers(result):
    """Every system is measured or skipped with a note; every figure is there and positive."""
    systems, skipped = result["systems"], result["skipped"]
    assert result["quick"] is True and result["reps"] == 1 and result["messages"] == 4 * result["turns"]
    assert set(systems) | set(skipped) == PEERS and not set(systems) & set(skipped)
    assert {"sessiontree", "floor"} <= set(systems)
    assert all("not installed" in why for why in skipped.values())
    points = {"10", "25", "50"}
    for name, system in systems.items():
        assert system["version"]
        for key in ("turn_ms", "read_ms", "write_ms"):
            assert set(system[key]) == points and all(v > 0 for v in system[key].values()), (name, key)
        assert system["cold_read_ms"] > 0 and system["bytes_per_message"] > 0, name
        assert (system["fork_ms"] is None) if name in NO_FORK else system["fork_ms"] > 0, name
    measures = {f"turn_ms@{p}" for p in points} | {"cold_read_ms", "bytes_per_message", "fork_ms"}
    for table in ("sessiontree_over_peer", "over_floor"):
        assert set(result[table]) == set(systems)
        for name, row in result[table].items():
            assert set(row) == measures
            for key, ratio in row.items():
                assert (ratio is None) if (name in NO_FORK and key == "fork_ms") else ratio > 0, (
                    table,
                    name,
                    key,
                )
    assert result["sessiontree_over_peer"]["sessiontree"]["turn_ms@10"] == 1


def test_peers_benchmark_quick_json_reports_every_figure():
    """Runs whichever peers are installed (the bench extra is optional) and skips the others."""
    check_peers(quick_json("peers.py"))


def test_peers_benchmark_skips_peers_that_are_not_installed():
    hide = "import sys; sys.modules.update(dict.fromkeys(['langgraph', 'agents', 'llm']))"
    run = f"sys.path.insert(0, {str(SCRIPT.parent)!r}); import peers; peers.main(['--quick', '--json'])"
    out = subprocess.run(
        [sys.executable, "-c", f"{hide}; {run}"], capture_output=True, text=True, check=True, timeout=240
    ).stdout
    result = json.loads(out)
    check_peers(result)
    assert set(result["systems"]) == {"sessiontree", "floor"}


def test_agents_sdk_benchmark_quick_json_reports_every_figure():
    pytest.importorskip("agents")
    result = quick_json("agents_sdk.py")
    assert result["quick"] is True and result["items"] == 4 * result["turns"]
    assert set(result["systems"]) == {"sessiontree", "agents-sqlite", "agents-advanced"}
    for name, system in result["systems"].items():
        assert set(system["turn_ms"]) == {"10", "25", "50"} and all(v > 0 for v in system["turn_ms"].values())
        assert system["cold_read_ms"] > 0 and system["bytes_per_message"] > 0, name
        assert (system["fork_ms"] is None) if name == "agents-sqlite" else system["fork_ms"] > 0, name
    assert set(result["sessiontree_over_peer"]) == {"agents-sqlite", "agents-advanced"}
    assert all(r["turn_ms@50"] > 0 for r in result["sessiontree_over_peer"].values())


def test_langgraph_benchmark_quick_json_reports_every_figure():
    pytest.importorskip("langgraph.checkpoint.sqlite")
    result = quick_json("langgraph_graph.py")
    assert result["steps"] == 30
    assert set(result["systems"]) == {"sessiontree", "sqlite", "sessiontree-async", "async-sqlite"}
    for name, system in result["systems"].items():
        assert system["ms_per_step"] > 0 and system["ms_per_step_last_30"] > 0 and system["bytes"] > 0, name
    assert len(result["ratios"]) == 3 and all(r > 0 for r in result["ratios"].values())


def test_import_memory_stays_under_three_times_the_file():
    result = quick_json("import_memory.py", "--mb", "20", timeout=600)
    assert set(result) == {"chatgpt", "librechat", "openwebui", "claude-code", "pi", "native"}
    for fmt, figures in result.items():
        assert figures["file_mb"] >= 20
        assert figures["ratio"] <= 3, (fmt, figures)
        # Issue 30's bar is a peak of 3x the file + 80 MB; the baseline is what is installed
        # (35 MB, or 119 MB when pandas is: sqlite_utils imports it), so the growth is checked.
    # Written as they are read, a record or a conversation at a time: memory does not follow
    # the file. Before, the JSON exports were parsed whole: chatgpt 1.84x, librechat 2.22x,
    # openwebui 1.15x at 20 MB (now about 0.7x: the decoder's buffer and SQLite's cache).
    for fmt in ("pi", "native", "chatgpt", "librechat", "openwebui"):
        assert result[fmt]["ratio"] <= 1, (fmt, result[fmt])


def test_postgres_benchmark_reports_every_figure():
    out = subprocess.run(
        [sys.executable, str(SCRIPT.parent / "postgres.py"), "--repeat", "1", "--seconds", "0.5"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "SESSIONTREE_TEST_POSTGRES": postgres_server()},
    )
    assert out.returncode == 0, out.stderr
    for figure in ("one append", "depth 1,000", "depth 10,000", "fork", "1 writer(s)", "8 writer(s)"):
        assert figure in out.stdout


def test_postgres_round_trips_benchmark_reports_one_round_trip_an_operation():
    out = subprocess.run(
        [sys.executable, str(SCRIPT.parent / "postgres.py"), "--round-trips", "--repeat", "1"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "SESSIONTREE_TEST_POSTGRES": postgres_server()},
    )
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines() if line.startswith(("read", "append", "fork"))]
    one = "3" if PGBOUNCER else "1"  # behind PgBouncer: BEGIN with the settings, the statement, COMMIT
    assert len(rows) == 5 and all(row[-3] == one for row in rows), out.stdout


def postgres_benchmark(*args: str) -> str:
    out = subprocess.run(
        [sys.executable, str(SCRIPT.parent / "postgres.py"), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "SESSIONTREE_TEST_POSTGRES": postgres_server()},
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_postgres_network_benchmark_reports_every_cell_and_two_round_trips_a_turn():
    out = postgres_benchmark("--network", "--turns", "12", "--reps", "1")
    for mode in ("direct", "D=0ms", "D=1ms", "D=2ms"):
        assert f"| {mode} | sessiontree | " in out, out
    assert "calibration" in out and "one-way delay set" in out
    (trips,) = [line for line in out.splitlines() if line.startswith("| sessiontree | ") and ";" in line]
    # behind PgBouncer: BEGIN with the settings, the statement, COMMIT for each of the two
    assert trips.split("|")[2].strip().startswith("6;" if PGBOUNCER else "2;"), trips


def test_postgres_concurrency_benchmark_loses_nothing_and_runs_nothing_twice():
    out = postgres_benchmark("--concurrency", "--seconds", "0.3", "--pauses", "4", "--most", "4")
    rows = [line for line in out.splitlines() if line.endswith("none (asserted) |")]
    assert len(rows) == 2 + 6, out  # 1 and 4 workers; 1, 2 and 4 writers, on one session or each its own


def test_view_benchmark_quick_json_reports_every_figure():
    import os

    if not Path("/usr/bin/chromium").exists():
        if os.environ.get("CI") == "true":
            pytest.fail("benchmarks/view.py needs /usr/bin/chromium, missing under CI")
        pytest.skip("no /usr/bin/chromium (apt-get install chromium)")
    result = quick_json("view.py")
    assert result["quick"] is True and result["reps"] == 3
    assert result["nodes"] == {"big": 2000, "small": 200} and result["html_bytes"] > 100_000
    assert set(result["export_ms"]) == {"html", "jsonl", "ratio"}
    assert set(result["open_ms"]) == {"view", "parse_only", "ratio", "view_200"}
    assert set(result["interact_ms"]) == {"search", "filter", "scroll"}
    assert all(x > 0 for x in numbers({k: result[k] for k in ("export_ms", "open_ms", "interact_ms")}))


def test_search_benchmark_quick_json_reports_every_figure():
    result = quick_json("search.py")
    assert result["quick"] is True and result["messages"] == 10_000
    assert set(result["search"]) == {"rare", "1%", "20%", "phrase"}
    for figure in result["search"].values():
        assert figure["hits"] == figure["like_rows"] > 0
        assert all(figure[k] > 0 for k in ("search_ms", "newest_ms", "like_ms", "ratio", "newest_ratio"))
    assert set(result["append_us"]) == {"single", "batched"}
    assert all(x > 0 for x in numbers({"a": result["append_us"], "s": result["storage"]}))


def test_fts_keys_benchmark_reports_both_spacings():
    result = quick_json("fts_keys.py", timeout=120)
    assert result["documents"] == 1_000 and result["characters"] == 1_000
    sizes = result["bytes_per_document"]
    assert set(sizes) == {"dense", "uuid7"} and all(size > 0 for size in sizes.values())
    # deterministic (seeded documents and keys): spaced keys cost the index more
    assert result["ratio"] == round(sizes["uuid7"] / sizes["dense"], 2) > 1.5
