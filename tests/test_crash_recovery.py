"""kill -9 a writer at random moments, many times over one file: after every kill the
store opens, ``verify()`` is clean, every acknowledged write is there, and every batch
(``append_many``) is all or nothing. The writer is ``reliability_workers.crash_writer``.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from sessiontree import Store

from conftest import raw

pytestmark = pytest.mark.slow  # kills writer processes for up to 20 s

TESTS = Path(__file__).parent
ITERATIONS = 40
TIME_BUDGET = 20.0  # seconds of killing at most; at least 10 iterations must fit


def start_writer(db: str, log: Path, seed: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(TESTS / "reliability_workers.py"), "crash-writer", str(db), str(log), str(seed)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(TESTS)},
    )


def acknowledged(log: Path) -> list[dict]:
    lines = log.read_text().splitlines() if log.exists() else []
    records = []
    for number, line in enumerate(lines, 1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:  # only the very last line can be cut by the kill
            assert number == len(lines), f"ack log line {number} is garbled: {line!r}"
    return records


def check(db: str, log: Path) -> dict:
    """Open after a kill; return figures. Fails on any lost or half-written data."""
    records = acknowledged(log)
    with Store(db) as store:
        report = store.verify()
        assert report.ok, report.problems
        node_ids = {r[0] for r in raw(store, "SELECT id FROM nodes")}
        acked = {i for r in records for i in r.get("ids", [])}
        missing = acked - node_ids
        assert not missing, f"{len(missing)} acknowledged node(s) lost"
        sessions = [s.id for s in store.sessions()]
        if not sessions:  # killed before the writer created its session
            assert not records
            return {"nodes": 0}
        (session_id,) = sessions
        session = store.session(session_id)
        refs = {b.name: b.head_id for b in session.branches()}
        checkpoints = {c.name: c.node_id for c in session.checkpoints()}
        for r in records:
            if r["op"] == "fork":
                assert r["name"] in refs, f"acknowledged fork {r['name']} lost"
            elif r["op"] == "checkpoint":
                assert checkpoints.get(r["name"]) == r["at"], f"checkpoint {r['name']} lost or moved"
        # All or nothing: a batch's nodes are all stored, or none is.
        batches: dict[str, list[int]] = {}
        declared = {}
        for payload, depth in raw(store, "SELECT payload, depth FROM nodes"):
            fields = json.loads(payload)
            if "batch" not in fields:
                continue
            batch, n = fields["batch"], fields["n"]
            batches.setdefault(batch, []).append(depth)
            declared[batch] = n
        half = {b: (len(d), declared[b]) for b, d in batches.items() if len(d) != declared[b]}
        assert not half, f"half-written batches: {half}"
        for depths in batches.values():  # and each batch is one chain
            depths.sort()
            assert depths == list(range(depths[0], depths[0] + len(depths)))
        return {"nodes": len(node_ids), "acked": len(acked), "batches": len(batches)}


def test_kill_minus_nine_at_random_moments(tmp_path, db_target):
    db, log = db_target, tmp_path / "acks.log"
    rng = random.Random(20240611)
    began = time.monotonic()
    done = 0
    figures: dict = {}
    for iteration in range(ITERATIONS):
        if time.monotonic() - began > TIME_BUDGET:
            break
        writer = start_writer(db, log, iteration)
        if rng.random() < 0.15:
            time.sleep(rng.uniform(0, 0.4))  # may hit interpreter start, open or migration
        else:
            ready = writer.stdout.readline()
            assert ready == b"ready\n", writer.stderr.read().decode()
            time.sleep(rng.uniform(0.0, 0.25))
        if writer.poll() is not None:  # it must still be writing: it never stops by itself
            raise AssertionError(f"writer exited with {writer.returncode}: {writer.stderr.read()!r}")
        writer.send_signal(signal.SIGKILL)
        writer.wait(30)
        assert writer.returncode == -signal.SIGKILL
        writer.stdout.close()
        writer.stderr.close()
        figures = check(db, log)
        done += 1
    assert done >= 10, f"only {done} kill iterations fit in the time budget"
    ops = Counter(r["op"] for r in acknowledged(log))
    assert ops["batch"] and ops["append"] and ops["agent"]  # every kind of write was exercised
    print(f"\n{done} kills in {time.monotonic() - began:.1f}s; {figures}; acknowledged ops {dict(ops)}")
