"""The OpenAI Agents SDK's own runner tests, on its reference session and then on ours.

Contract: ``python tests/peer_suites/agents_sdk.py [--work DIR]`` takes the released sdist of
``openai-agents`` (``VERSION``) from ``DIR`` or downloads it there with pip (``pip
download --no-binary :all: --no-deps``: PyPI or the configured index, so pip's cache
serves a second run), unpacks it, and runs every test file of its ``tests/`` that uses
the reference session (``SimpleListSession``, ``CountingSession``,
``IdStrippingSession``) twice: as released (the baseline), then with that session
replaced by ``SessiontreeSession`` (the plugin ``agents_sdk_swap``). It prints both
runs' counts and exits non-zero when a test that passed on the baseline did not pass on
sessiontree, or when the swap built no session (it would prove nothing). The SDK's tests
are never copied into this repository.

The interpreter running it needs sessiontree, ``openai-agents==VERSION`` and the SDK
tests' own needs::

    pip install -e '.[openai-agents]' pytest pytest-asyncio pytest-mock inline-snapshot \\
        fastapi websockets aiosqlite
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


def run(root: Path, files: list[str], *, swap: bool, out: Path) -> dict:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "OPENAI_API_KEY": "sk-not-used",  # the tests build clients; none reaches a network
        "AGENTS_SDK_OUTCOMES": str(out),
        "AGENTS_SDK_SWAP": "1" if swap else "0",
    }
    # Tracing stays on (its tests expect it); the SDK's conftest installs a local processor.
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "agents_sdk_swap", *files]
    started = time.monotonic()
    subprocess.run(argv, cwd=root, env=env, stdout=subprocess.DEVNULL, check=False)
    found = json.loads(out.read_text())
    found["seconds"] = round(time.monotonic() - started, 1)
    return found


def counts(outcomes: dict[str, str]) -> str:
    values = list(outcomes.values())
    return ", ".join(f"{values.count(k)} {k}" for k in ("passed", "failed", "skipped"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--work", type=Path, default=None, help="where the sdist is kept (default: a temp dir)"
    )
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="agents-sdk-peer-"))
    work.mkdir(parents=True, exist_ok=True)
    root = sdist(work)
    files = test_files(root)
    base = run(root, files, swap=False, out=work / "baseline.json")
    ours = run(root, files, swap=True, out=work / "sessiontree.json")
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
    if not ours["sessiontree_sessions"]:
        print("the swap built no SessiontreeSession: it was not active")
        return 1
    return 1 if worse else 0


if __name__ == "__main__":
    sys.exit(main())
