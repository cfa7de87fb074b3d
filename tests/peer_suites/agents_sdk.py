"""The OpenAI Agents SDK's own runner tests, on its reference session and then on ours.

Contract: ``python tests/peer_suites/agents_sdk.py [--work DIR] [--install]`` takes the
released sdist of ``openai-agents`` (``VERSION``) from ``DIR`` or downloads it there with
pip (``pip download --no-binary :all: --no-deps``: PyPI or the configured index, so pip's
cache serves a second run), unpacks it, and runs every test file of its ``tests/`` that
uses the reference session (``SimpleListSession``, ``CountingSession``,
``IdStrippingSession``) twice, both runs at once: as released (the baseline), and with
that session replaced by ``SessiontreeSession`` (the plugin ``agents_sdk_swap``). Each
run spreads over ``--workers`` pytest-xdist processes (default: half the cores, so the
two runs use them all; 1 means no xdist). It prints both runs' counts and exits non-zero
when a test that passed on the baseline did not pass on sessiontree, when the baseline
passed fewer than ``MIN_BASELINE_PASSES`` (a broken environment proves nothing), or when
the swap built no session (it was not active). The SDK's tests are never copied into this
repository. ``.ci/run`` runs it (``--install --work .ci-peers``).

The interpreter running it needs sessiontree with ``openai-agents==VERSION`` (the
``openai-agents`` extra) and the SDK tests' own needs, ``NEEDS``, which ``--install``
installs (see below); without it::

    pip install -e '.[openai-agents]' && python tests/peer_suites/agents_sdk.py

or, with ``--install``, it makes a virtual environment of its own, ``DIR/venv``, installs
into it this checkout (editable, with that extra), ``openai-agents==VERSION`` (the release
its tests are of) and ``NEEDS``, and runs both runs there: the SDK tests' pytest plugins
never enter the environment that runs sessiontree's own tests.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

VERSION = "0.24.0"
NEEDS = [  # what the SDK's tests import or load as plugins, at the versions verified with VERSION
    "pytest-asyncio==1.5.0",
    "pytest-mock==3.17.0",
    "inline-snapshot==0.36.1",
    "fastapi==0.165.0",
    "websockets==16.1.1",
    "aiosqlite==0.22.1",
    "pytest-xdist>=3.5",
]
MIN_BASELINE_PASSES = 1700
"""VERSION's baseline passes 1,798 of 1,838 tests; far fewer means the environment is broken."""
REFERENCE = re.compile(r"\b(SimpleListSession|CountingSession|IdStrippingSession)\b")
HERE = Path(__file__).resolve().parent


def sdist(work: Path) -> Path:
    """The unpacked sdist under ``work`` (downloaded and unpacked on first use)."""
    unpacked = work / f"openai_agents-{VERSION}"
    if (unpacked / "tests").is_dir():
        return unpacked
    archive = work / f"openai_agents-{VERSION}.tar.gz"
    if not archive.exists():
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:"]
            + [f"openai-agents=={VERSION}", "-d", str(work)],
            check=True,
        )
    with tarfile.open(archive) as tar:
        tar.extractall(work, filter="data")
    return unpacked


def test_files(root: Path) -> list[str]:
    """The SDK's test files that use its reference session, relative to ``root``."""
    found = [p for p in (root / "tests").rglob("test_*.py") if REFERENCE.search(p.read_text())]
    return sorted(str(p.relative_to(root)) for p in found)


def installed(work: Path) -> str:
    """The interpreter of ``work/venv`` (made on first use), with this checkout, the SDK's
    release ``VERSION`` and ``NEEDS`` installed (pip's cache serves a second run)."""
    env = work / "venv"
    python = env / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
    checkout = f"{HERE.parent.parent}[openai-agents]"
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "-e", checkout, f"openai-agents=={VERSION}", *NEEDS], check=True)
    return str(python)


def start(
    root: Path, files: list[str], *, swap: bool, out: Path, workers: int, python: str
) -> subprocess.Popen[bytes]:
    """One run of ``files`` under pytest, started (``finish`` collects it)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "OPENAI_API_KEY": "sk-not-used",  # the tests build clients; none reaches a network
        "AGENTS_SDK_OUTCOMES": str(out),
        "AGENTS_SDK_SWAP": "1" if swap else "0",
    }
    for stale in out.parent.glob(out.name + "*"):
        stale.unlink()
    # Tracing stays on (its tests expect it); the SDK's conftest installs a local processor.
    argv = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "agents_sdk_swap"]
    argv += ["-n", str(workers)] if workers > 1 else ["-p", "no:xdist"]
    log = open(out.with_suffix(".log"), "wb")  # noqa: SIM115 - closed with the process
    return subprocess.Popen([*argv, *files], cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)


def wait_all(processes: dict[bool, subprocess.Popen[bytes]]) -> dict[bool, float]:
    """When each of the processes started together ended (``time.monotonic``)."""
    ended: dict[bool, float] = {}
    while len(ended) < len(processes):
        for key, process in processes.items():
            if key not in ended and process.poll() is not None:
                ended[key] = time.monotonic()
        time.sleep(0.2)
    return ended


def finish(out: Path, seconds: float) -> dict:
    """The outcomes of a run that ended, with its time and the sessiontree sessions its
    processes built (each xdist worker counts its own)."""
    if not out.exists():
        log = out.with_suffix(".log")
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        raise SystemExit(f"pytest wrote no outcomes ({out}); its output ends:\n{tail}")
    found = json.loads(out.read_text())
    for counted in out.parent.glob(out.name + ".*.built"):
        found["sessiontree_sessions"] += json.loads(counted.read_text())
    found["seconds"] = round(seconds, 1)
    return found


def counts(outcomes: dict[str, str]) -> str:
    values = list(outcomes.values())
    return ", ".join(f"{values.count(k)} {k}" for k in ("passed", "failed", "skipped"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--work", type=Path, default=None, help="where the sdist is kept (default: a temp dir)"
    )
    parser.add_argument(
        "--install",
        action="store_true",
        help="run in a virtual environment of its own, DIR/venv, made and filled first",
    )
    parser.add_argument(
        "--workers", type=int, default=max(1, (os.cpu_count() or 2) // 2), help="xdist processes per run"
    )
    args = parser.parse_args()
    work = (args.work or Path(tempfile.mkdtemp(prefix="agents-sdk-peer-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    python = installed(work) if args.install else sys.executable
    root = sdist(work)
    files = test_files(root)
    started = time.monotonic()
    runs = {
        swap: start(root, files, swap=swap, out=work / f"{name}.json", workers=args.workers, python=python)
        for swap, name in ((False, "baseline"), (True, "sessiontree"))
    }
    ended = wait_all(runs)
    base = finish(work / "baseline.json", ended[False] - started)
    ours = finish(work / "sessiontree.json", ended[True] - started)
    print(f"openai-agents {VERSION}: {len(files)} test files using the reference session")
    print(f"baseline (its reference session): {counts(base['outcomes'])} in {base['seconds']} s")
    print(
        f"sessiontree (SessiontreeSession): {counts(ours['outcomes'])} in {ours['seconds']} s;"
        f" {ours['sessiontree_sessions']} sessions built on sessiontree"
    )
    passed = {k for k, v in base["outcomes"].items() if v == "passed"}
    worse = sorted(k for k in passed if ours["outcomes"].get(k) != "passed")
    better = sorted(k for k, v in ours["outcomes"].items() if v == "passed" and k not in passed)
    for name in worse:
        print(f"REGRESSION: {name}: {ours['outcomes'].get(name, 'not run')}")
    if better:
        print(f"{len(better)} test(s) pass on sessiontree only: {', '.join(better[:5])}")
    if len(passed) < MIN_BASELINE_PASSES:
        print(
            f"the baseline passed {len(passed)} tests, fewer than {MIN_BASELINE_PASSES}: see {work}/baseline.log"
        )
        return 1
    if not ours["sessiontree_sessions"]:
        print("the swap built no SessiontreeSession: it was not active")
        return 1
    return 1 if worse else 0


if __name__ == "__main__":
    sys.exit(main())
