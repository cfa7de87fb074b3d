"""Peak memory of importing a large file, per format, as a multiple of its size.

For each format, a file of about ``--mb`` megabytes is made from the real
exports in tests/fixtures/real (the same files as the shared
conversation-fixtures/real): the conversations of the JSON exports (chatgpt,
librechat, openwebui) repeated with fresh ids, so the file holds that many
distinct conversations; the records of the Claude Code and pi sessions repeated
(fresh uuids and message ids for Claude Code; a pi v1 file has no ids), so the
file is ONE long session, the worst case of a format that holds one session per
file (many files are each bounded by their own size); ``native`` is the pi
session imported and exported in sessiontree's own format, repeated with fresh
ids. The file is imported into a new store in a child process, which reports its
peak resident set size (``VmHWM`` from /proc/self/status on Linux: unlike
``ru_maxrss`` it does not inherit the parent's peak across exec; ``ru_maxrss``
elsewhere) before the import (the baseline: the interpreter, sessiontree and an
open store) and after it. "growth" is the peak's growth during the import, "x
file" that divided by the file size; "bar" says whether the peak is within 3x the
file + 80 MB (issue 30).

    python benchmarks/import_memory.py            # 50 MB per format
    python benchmarks/import_memory.py --mb 20,100 --formats chatgpt,claude-code
    python benchmarks/import_memory.py --mb 5 --json
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

REAL = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "real"
SOURCES = {
    "chatgpt": REAL / "chatgpt" / "openwebui-importer-gpt_example.json",
    "librechat": REAL / "librechat" / "librechat-export.json",
    "openwebui": REAL / "openwebui" / "openwebui-importer-claude_output.json",
    "claude-code": REAL / "claude-code" / "spotter-8463c716.jsonl",
    "pi": REAL / "pi" / "pi-mono-large-session.jsonl",
    "native": REAL / "pi" / "pi-mono-large-session.jsonl",  # converted by native_source
}
ZERO = "00000000-0000-0000-0000-000000000000"  # LibreChat's "no parent"
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# Anthropic's message and tool-call ids (msg_..., toolu_...): a copy needs its own too, or
# its records would merge into the first copy's messages.
API_ID = re.compile(r"\b(msg|toolu)_([0-9A-Za-z]+)")


def fresh_ids(text: str, copy: int) -> str:
    """The text with every UUID and API message or call id replaced by one unique to this copy."""

    def new(match: re.Match[str]) -> str:
        old = match.group()
        return old if old == ZERO else str(uuid.uuid5(uuid.NAMESPACE_URL, f"{copy}:{old}"))

    text = UUID.sub(new, text)
    return API_ID.sub(lambda m: f"{m.group(1)}_{copy}x{m.group(2)}", text)


def native_source(directory: Path) -> str:
    """The pi session as a native file (header line first)."""
    from sessiontree import Store
    from sessiontree.formats import export_native, import_file

    with Store(directory / "native-source.db") as store:
        import_file(store, SOURCES["native"], "pi")
        return "".join(export_native(store))


def make_file(fmt: str, size: int, directory: Path) -> Path:
    source = native_source(directory) if fmt == "native" else SOURCES[fmt].read_text(encoding="utf-8")
    out = directory / f"big-{fmt}{SOURCES[fmt].suffix}"
    if fmt in ("claude-code", "pi", "native"):  # the records repeated (with fresh ids)
        lines = source.splitlines(keepends=True)
        header, body = (lines[:1], lines[1:]) if fmt in ("pi", "native") else ([], lines)
        with out.open("w", encoding="utf-8") as f:
            f.writelines(header)
            copy = 0
            while f.tell() < size:  # a pi v1 file has no ids: one long session
                f.write("".join(body) if fmt == "pi" else fresh_ids("".join(body), copy))
                copy += 1
        return out
    data = json.loads(source)
    one = data if isinstance(data, list) else [data]
    if fmt == "openwebui":  # an id of its own, so the copies are distinct chats
        one = [{"id": "00000000-0000-4000-8000-000000000000", "title": "t", "chat": one[0]}]
    text = json.dumps(one)[1:-1]
    with out.open("w", encoding="utf-8") as f:
        f.write("[")
        copy = 0
        while f.tell() < size:
            f.write(("," if copy else "") + fresh_ids(text, copy))
            copy += 1
        f.write("]")
    return out


CHILD = """
import inspect, json, resource, sys
from sessiontree import Store
from sessiontree.formats import import_file

def peak():
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

quiet = {"report": lambda line: None} if "report" in inspect.signature(import_file).parameters else {}
store = Store(sys.argv[2])
before = peak()
import_file(store, sys.argv[1], **quiet)
after = peak()
print(json.dumps({"before_kb": before, "after_kb": after}))
"""


def measure(path: Path, db: Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(db)], capture_output=True, text=True, check=True
    ).stdout
    kb = json.loads(out)
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    grown = (kb["after_kb"] - kb["before_kb"]) * scale
    size = path.stat().st_size
    peak = kb["after_kb"] * scale
    return {
        "file_mb": round(size / 1e6, 1),
        "baseline_mb": round(kb["before_kb"] * scale / 1e6, 1),
        "peak_mb": round(peak / 1e6, 1),
        "peak_growth_mb": round(grown / 1e6, 1),
        "ratio": round(grown / size, 2),
        "bar": peak <= 3 * size + 80e6,  # issue 30: a peak of at most 3x the file + 80 MB
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", default="50", help="file size per format (MB); several: 20,100")
    parser.add_argument("--formats", default=",".join(SOURCES), help="comma-separated")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sizes = [float(m) for m in args.mb.split(",")]
    results: dict[str, dict[str, Any]] = {}  # size -> format -> figures
    if not args.json:
        columns = f"{'baseline MB':>12} {'peak MB':>8} {'growth MB':>10} {'x file':>7}  bar"
        print(f"{'format':<12} {'file MB':>8} {columns}")
    for mb in sizes:
        for fmt in args.formats.split(","):
            with tempfile.TemporaryDirectory() as tmp:  # one file and one database on disk at a time
                path = make_file(fmt, int(mb * 1e6), Path(tmp))
                r = results.setdefault(f"{mb:g}", {})[fmt] = measure(path, Path(tmp) / f"{fmt}.db")
            if not args.json:
                print(
                    f"{fmt:<12} {r['file_mb']:>8} {r['baseline_mb']:>12} {r['peak_mb']:>8}"
                    f" {r['peak_growth_mb']:>10} {r['ratio']:>7}  {'ok' if r['bar'] else 'OVER'}",
                    flush=True,
                )
    if args.json:  # one size: format -> figures; several: size -> format -> figures
        print(json.dumps(results[f"{sizes[0]:g}"] if len(sizes) == 1 else results))


if __name__ == "__main__":
    assert resource  # Unix only: ru_maxrss
    main()
