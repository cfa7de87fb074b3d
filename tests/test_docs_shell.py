"""Run the shell examples of README.md and docs/*.md that call `sessiontree`.

Every ```bash, ```sh, ```shell or ```console block that calls `sessiontree` runs,
in order, in one temporary directory per markdown file, with ``bash -euo pipefail``
(a ```console block runs its ``$ `` lines). Each file starts from a database that
``sessiontree demo`` filled, on its own ``SESSIONTREE_DB``. No model server runs and
no ``SESSIONTREE_BASE_URL``, ``SESSIONTREE_MODEL`` or API key is set: an example that
calls a model plays a script file it writes itself (``--model script:PATH``), as a
reader without a server would. Nothing leaves the machine.

A block that genuinely cannot run here is marked in the markdown with
``<!-- not run: REASON -->`` on the line before its fence; it is never skipped
silently. The only other exception is README.md's first block (install and test
commands), excluded by name below.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELLS = {"bash", "sh", "shell", "console"}
CALLS = re.compile(r"(?<![\w./-])sessiontree(?![\w./-])")
NOT_RUN = re.compile(r"^<!-- not run: (?P<reason>\S.*?) -->$")
FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
INSTALL_BLOCK = ("README.md", 3)  # pip install ... && pytest: it would install and test recursively


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    language: str
    source: str
    not_run: str | None  # the reason given by a <!-- not run: ... --> marker

    @property
    def where(self) -> str:
        return f"{self.path.name}:{self.line}"

    def script(self) -> str:
        if self.language != "console":
            return self.source
        commands, continued = [], False
        for line in self.source.splitlines():
            if line.startswith("$ ") or continued:
                commands.append(line[2:] if line.startswith("$ ") and not continued else line)
                continued = line.endswith("\\")
        return "\n".join(commands) + "\n"


def shell_blocks(path: Path, text: str | None = None) -> list[Block]:
    """Every fenced shell block of a markdown file that calls sessiontree, in order."""
    lines = (path.read_text("utf-8") if text is None else text).splitlines()
    blocks, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, start = opening["fence"], i + 1
        language = (opening["info"].split() or [""])[0]
        i += 1
        body = []
        while i < len(lines) and not (
            lines[i].strip() and set(lines[i].strip()) == {fence[0]} and len(lines[i].strip()) >= len(fence)
        ):
            body.append(lines[i][len(opening["indent"]) :])
            i += 1
        i += 1
        source = "\n".join(body) + "\n"
        if language in SHELLS and CALLS.search(source):
            before = next((line.strip() for line in reversed(lines[: start - 1]) if line.strip()), "")
            marker = NOT_RUN.match(before)
            blocks.append(Block(path, start, language, source, marker["reason"] if marker else None))
    return blocks


def runnable(path: Path) -> list[Block]:
    return [b for b in shell_blocks(path) if b.not_run is None and (path.name, b.line) != INSTALL_BLOCK]


def shell_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SESSIONTREE_", "OPENAI_"))}
    bin_dir = str(Path(sys.executable).parent)  # the sessiontree script of this environment
    (tmp_path / "home").mkdir()
    env.update(
        PATH=bin_dir + os.pathsep + env.get("PATH", ""),
        HOME=str(tmp_path / "home"),
        XDG_DATA_HOME=str(tmp_path / "data"),
        SESSIONTREE_DB=str(tmp_path / "docs.db"),
    )
    return env


def run_shell(script: str, cwd: Path, env: dict[str, str], where: str) -> None:
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if result.returncode != 0:
        pytest.fail(
            f"{where}: the shell block exited {result.returncode}\n--- block\n{script}"
            f"--- stdout\n{result.stdout[-4000:]}\n--- stderr\n{result.stderr[-4000:]}",
            pytrace=False,
        )


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory) -> Path:
    """A store ``sessiontree demo`` filled, made once: each file's test starts from a copy
    (the demo writes the same tree every time; running it for every file was a CLI
    session per file)."""
    where = tmp_path_factory.mktemp("demo")
    run_shell("sessiontree demo > /dev/null\n", where, shell_env(where), "sessiontree demo")
    return where / "docs.db"


@pytest.mark.slow  # runs whole CLI sessions, a process per command
@pytest.mark.parametrize("path", [pytest.param(p, id=p.name) for p in FILES if runnable(p)])
def test_shell_examples_run(path: Path, tmp_path: Path, demo_store: Path) -> None:
    env = shell_env(tmp_path)
    for made in demo_store.parent.glob(demo_store.name + "*"):  # the file, and the -tools file beside it
        shutil.copyfile(made, tmp_path / made.name)
    for block in runnable(path):
        run_shell(block.script(), tmp_path, env, block.where)


def test_every_block_that_calls_sessiontree_runs_or_says_why_not() -> None:
    blocks = [b for path in FILES for b in shell_blocks(path)]
    assert (blocks[0].path.name, blocks[0].line) == INSTALL_BLOCK
    assert "pip install" in blocks[0].source  # the excluded block is still the install block
    ran = [b for b in blocks if b.not_run is None and (b.path.name, b.line) != INSTALL_BLOCK]
    assert len(ran) >= 3, "the README, experiments and completion examples should all run"
    for block in blocks:
        if block.not_run is not None:
            assert len(block.not_run) > 5, f"{block.where}: say why the block cannot run"


MODEL_VERBS = re.compile(r"sessiontree (run|resume|worker|rerun)\b")


def test_the_blocks_that_call_a_model_play_a_script_file() -> None:
    """The README's walkthrough and the experiments page call a model, offline."""
    calling = [b for path in FILES for b in runnable(path) if MODEL_VERBS.search(b.source)]
    assert {b.path.name for b in calling} >= {"README.md", "experiments.md", "agent.md"}
    for block in calling:
        assert "script:" in block.source, f"{block.where}: a model call with no script file needs a server"


def test_markers_sit_right_before_a_block_that_calls_sessiontree() -> None:
    for path in FILES:
        lines = path.read_text("utf-8").splitlines()
        marked = {b.line for b in shell_blocks(path) if b.not_run is not None}
        for number, line in enumerate(lines, 1):
            if NOT_RUN.match(line.strip()):
                following = next(n for n in range(number + 1, len(lines) + 1) if lines[n - 1].strip())
                assert following in marked, (
                    f"{path.name}:{number}: a not-run marker with no shell block after it"
                )


# -- the collector itself ------------------------------------------------------

SAMPLE = textwrap.dedent("""\
    # Title

    ```bash
    sessiontree tree
    ```

    <!-- not run: needs a model server -->

    ```sh
    sessiontree run "hi"
    ```

    ```bash
    echo no sessiontree.db here
    ```

    ```text
    sessiontree log
    ```

    ```console
    $ sessiontree log \\
        main
    user 01a2
      Hi
    $ sessiontree diff main alt
    ```
    """)


def test_collector_finds_shell_blocks_markers_and_console_commands(tmp_path: Path) -> None:
    blocks = shell_blocks(tmp_path / "sample.md", SAMPLE)
    assert [(b.line, b.language, b.not_run) for b in blocks] == [
        (3, "bash", None),
        (9, "sh", "needs a model server"),
        (21, "console", None),
    ]
    assert blocks[2].script() == "sessiontree log \\\n    main\nsessiontree diff main alt\n"
