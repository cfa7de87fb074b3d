"""Run the ```python examples of docs/*.md, so the docs cannot drift from the code.

Each markdown file is one test: its blocks run in order in one fresh namespace,
inside a temporary working directory, which must be empty afterwards (an example
writes its files in a temporary directory, so it can be run twice). A block fenced
as ```python no-run is shown to readers but not run (use it for examples that need
a network or a key). A block fenced as ```python process stands for another
process: it runs alone in a fresh interpreter (same directories), so it must
import what it needs; prose that says "another process" announces such a block.
Files without runnable blocks are not collected at all. A failing block is
reported by file and starting line, and its traceback points at the markdown.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import os
import re
import subprocess
import sys
import tempfile
import traceback
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"

# An opening fence: up to 3 spaces, then 3+ backticks or tildes, then an info string.
_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # 1-based line of the opening fence; the code starts on the next line
    source: str
    process: bool = False  # run alone in a fresh interpreter (```python process)


def python_blocks(path: Path, text: str | None = None) -> list[Block]:
    """The runnable ```python blocks of a markdown file, in order."""
    lines = (path.read_text("utf-8") if text is None else text).splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening or (opening["fence"][0] == "`" and "`" in opening["info"]):
            i += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        words = opening["info"].split()
        runnable = bool(words) and words[0] == "python" and "no-run" not in words[1:]
        start = i + 1
        body: list[str] = []
        i += 1
        # The block ends at a fence of the same character, at least as long, and
        # nothing else on the line (or at the end of the file).
        while i < len(lines):
            stripped = lines[i].strip()
            if (
                len(lines[i]) - len(lines[i].lstrip(" ")) <= 3
                and stripped
                and set(stripped) == {fence[0]}
                and len(stripped) >= len(fence)
            ):
                break
            line = lines[i]
            body.append(line[min(indent, len(line) - len(line.lstrip(" "))) :])
            i += 1
        i += 1
        if runnable:
            blocks.append(Block(path, start, "\n".join(body) + "\n", "process" in words[1:]))
    return blocks


def run_blocks(blocks: list[Block], namespace: dict) -> None:
    """Run blocks in order in ``namespace``; fail naming the file and line of a bad block."""
    for block in blocks:
        # Leading newlines keep the line numbers of tracebacks those of the markdown file.
        source = "\n" * block.line + block.source
        if block.process:
            _run_alone(block, source)
            continue
        try:
            code = compile(source, str(block.path), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            result = eval(code, namespace)  # noqa: S307 - the docs are our own code
            if inspect.iscoroutine(result):  # the block used a top-level await
                asyncio.run(result)
        except Exception:
            details = traceback.format_exc()
            pytest.fail(
                f"{block.path.name}: the python block starting at line {block.line} failed:\n{details}",
                pytrace=False,
            )


def _run_alone(block: Block, source: str) -> None:
    """Run a block in a fresh interpreter, as the other process it stands for."""
    done = subprocess.run(
        [sys.executable, "-c", compile_check(block, source)],
        capture_output=True,
        text=True,
        env={**os.environ, "TMPDIR": tempfile.gettempdir()},
        timeout=120,
    )
    if done.returncode:
        pytest.fail(
            f"{block.path.name}: the python block starting at line {block.line}, run in a"
            f" fresh interpreter, failed:\n{done.stderr}",
            pytrace=False,
        )


def compile_check(block: Block, source: str) -> str:
    """The program that runs ``source`` with tracebacks naming the markdown file."""
    return f"exec(compile({source!r}, {str(block.path)!r}, 'exec'))"


SLOW_DOCS = {"mcp.md"}
"""Pages whose examples start processes (the MCP server and its clients)."""


def _doc_files() -> list:
    files = sorted(DOCS.glob("*.md")) if DOCS.is_dir() else []
    return [
        pytest.param(path, id=path.name, marks=[pytest.mark.slow] if path.name in SLOW_DOCS else [])
        for path in files
        if python_blocks(path)
    ]


@pytest.mark.parametrize("path", _doc_files())
def test_doc_examples(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    here, scratch = tmp_path / "cwd", tmp_path / "tmp"
    here.mkdir()
    scratch.mkdir()
    monkeypatch.chdir(here)
    monkeypatch.setenv("TMPDIR", str(scratch))  # examples' temporary files, and the path
    monkeypatch.setattr(tempfile, "tempdir", None)  # a block and its other process share
    for _ in range(2):  # a reader may run them again: nothing left from the first run stops it
        run_page(path, monkeypatch)
        left = sorted(p.name for p in here.iterdir())
        assert not left, f"{path.name}: the examples wrote {left} into the working directory"


def run_page(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A real module, so that classes and functions defined in examples can be
    # introspected (dataclasses, typing.get_type_hints, pickle) like normal code.
    module = types.ModuleType("docs_example_" + re.sub(r"\W", "_", path.stem))
    module.__file__ = str(path)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    run_blocks(python_blocks(path), module.__dict__)


# -- the collector itself ------------------------------------------------------

SAMPLE = """\
# Title

```python
x = 1
```

```python no-run
raise SystemExit("never runs")
```

````markdown
```python
this is shown inside another fence, not run
```
````

- a list item:

  ```python
  x += 1
  ```

```bash
echo not python
```

```python
assert x == 2
y = 1 / 0
```
"""


def test_collector_finds_runnable_blocks_with_their_lines(tmp_path: Path) -> None:
    blocks = python_blocks(tmp_path / "sample.md", SAMPLE)
    assert [(b.line, b.source) for b in blocks] == [
        (3, "x = 1\n"),
        (19, "x += 1\n"),
        (27, "assert x == 2\ny = 1 / 0\n"),
    ]


def test_a_failing_block_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "sample.md"
    with pytest.raises(pytest.fail.Exception) as info:
        run_blocks(python_blocks(path, SAMPLE), {})
    message = str(info.value)
    assert "sample.md: the python block starting at line 27 failed" in message
    assert f'File "{path}", line 29' in message and "ZeroDivisionError" in message


def test_every_public_name_is_documented_where_the_index_says():
    import sessiontree

    text = (DOCS / "api.md").read_text("utf-8")
    index = text[text.index("## Everything `sessiontree` exports") :]
    listed: dict[str, str] = {}
    for row in index.splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        page = re.search(r"\]\(([\w.]+\.md)", cells[2])
        assert page, f"no page link in {row!r}"
        for name in re.findall(r"`(\w+)`", cells[0]):
            listed[name] = page[1]
    assert sorted(listed) == sorted(sessiontree.__all__)
    for name, page in listed.items():
        body = (DOCS / page).read_text("utf-8")
        assert re.search(rf"\b{name}\b", body), (
            f"{name} is listed under {page} but {page} does not mention it"
        )


def test_the_error_hierarchy_drawn_in_the_docs_is_the_real_one():
    import sessiontree.errors as errors

    text = (DOCS / "api.md").read_text("utf-8")
    drawing = text[text.index("SessionTreeError\n├") : text.index("```", text.index("SessionTreeError\n├"))]
    parents: dict[str, str] = {}
    stack: list[tuple[int, str]] = [(-1, "SessionTreeError")]
    for line in drawing.splitlines()[1:]:
        name = re.search(r"[─] (\w+)", line)[1]
        depth = line.index("─") // 4
        while stack[-1][0] >= depth:
            stack.pop()
        parents[name] = stack[-1][1]
        stack.append((depth, name))
    defined = {
        n: c
        for n, c in vars(errors).items()
        if isinstance(c, type) and issubclass(c, errors.SessionTreeError)
    }
    assert set(parents) == set(defined) - {"SessionTreeError"}
    for name, parent in parents.items():
        assert defined[name].__mro__[1].__name__ == parent or parent in {
            b.__name__ for b in defined[name].__bases__
        }, name


def test_a_process_block_runs_alone_in_a_fresh_interpreter(tmp_path: Path) -> None:
    """A block that stands for another process cannot lean on the blocks before it
    (newcomer friction 10: the tutorial's second block raised NameError on its own)."""
    sample = "```python\nx = 1\n```\n\n```python process\nprint(x)\n```\n"
    blocks = python_blocks(tmp_path / "sample.md", sample)
    assert [b.process for b in blocks] == [False, True]
    with pytest.raises(pytest.fail.Exception) as info:
        run_blocks(blocks, {})
    message = str(info.value)
    assert "line 5, run in a fresh interpreter, failed" in message and "NameError" in message
    alone = "```python process\nimport sys\nassert 'docs_example' not in str(sys.modules)\n```\n"
    run_blocks(python_blocks(tmp_path / "alone.md", alone), {})


def test_prose_that_says_another_process_introduces_a_process_block() -> None:
    """Every python block announced by "another process" runs as one."""
    for path in sorted(DOCS.glob("*.md")):
        lines = path.read_text("utf-8").splitlines()
        for block in python_blocks(path):
            before = " ".join(lines[max(block.line - 4, 0) : block.line - 1]).lower()
            if "another process" in before:
                assert block.process, f"{path.name}:{block.line}: announced as another process"
