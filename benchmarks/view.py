"""Benchmark the browser view: how long a 10,000-node export takes to write and to open.

What it measures (medians of several repetitions; the rep count is printed):

1. export: ms for ``write_html`` of a 10,000-node session, against the native JSONL export
   (``export_file``) of the same session: the lossless dump of the same data.
2. open: ms from navigation to the page being drawn (the view sets ``data-ready`` after
   drawing the tree and the path pane; the page's own ``performance.now()`` at that moment
   is the figure), in headless Chromium, against a baseline page holding the same embedded
   data whose script only parses it (so the ratio is the view's own cost over reading the
   data), and against the 1,000-node export (how it scales).
3. interact: ms, seen from Python, for typing a search and jumping to its match, switching
   a filter, and scrolling to the middle of the tree, on the 10,000-node page.

The session is a tree of long chains with a fork every ~40 nodes, half the nodes model
answers with a recorded run. Chromium is /usr/bin/chromium (Debian), driven by Playwright;
reps of the view and of the baseline alternate so machine noise hits both alike.

Usage: ``python benchmarks/view.py [--quick] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from sessiontree import Store, export_file, write_html

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def build(store: Store, nodes: int, seed: int = 7) -> str:
    rng = random.Random(seed)
    session = store.create_session(f"benchmark: {nodes} nodes")
    ids: list[str] = []
    with store.transaction():
        for i in range(nodes):
            parent = None if not ids else ids[rng.randrange(len(ids))] if rng.random() < 0.025 else ids[-1]
            run = None
            if i % 2:
                run = {
                    "model": rng.choice(["model-a", "model-b"]),
                    "usage": {
                        "prompt_tokens": rng.randint(50, 900),
                        "completion_tokens": rng.randint(5, 200),
                    },
                    "latency_ms": rng.uniform(100, 2000),
                }
                text = f"answer {i}: " + "lorem ipsum " * rng.randint(1, 12)
                payload = {"role": "assistant", "content": text}
            else:
                payload = {"role": "user", "content": f"question {i}?"}
            node = (
                session.append(payload, branch="main", run=run)
                if parent is None
                else session.append(payload, parent=parent, branch=None, run=run)
            )
            ids.append(node.id)
        session.move("main", to=ids[-1])
    return session.id


def baseline_page(html: str) -> str:
    """The same page and data, with a script that only parses the data."""
    code = (
        "var d = JSON.parse(document.getElementById('st-data').textContent);"
        "document.body.dataset.ready = String(d.nodes.length); window.__stReady = performance.now();"
    )
    code_element = re.compile(r"(<script nonce=\"[^\"]+\">)(.*?)(</script>)", re.S)
    return code_element.sub(lambda m: m[1] + code + m[3], html)


def median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    reps = 3 if args.quick else 9
    big = 2_000 if args.quick else 10_000
    small = big // 10

    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        with Store(root / "bench.db") as store:
            big_id, small_id = build(store, big), build(store, small, seed=8)
            export_ms, jsonl_ms = [], []
            for _ in range(reps):
                start = time.perf_counter()
                write_html(store, big_id, root / "big.html")
                export_ms.append((time.perf_counter() - start) * 1000)
                start = time.perf_counter()
                export_file(store, root / "big.jsonl", session_ids=[big_id])
                jsonl_ms.append((time.perf_counter() - start) * 1000)
            write_html(store, small_id, root / "small.html")
        html = (root / "big.html").read_text("utf-8")
        (root / "base.html").write_text(baseline_page(html), "utf-8")
        pages = {name: (root / f"{name}.html").as_uri() for name in ("big", "base", "small")}
        opened: dict[str, list[float]] = {name: [] for name in pages}
        interact: dict[str, list[float]] = {"search": [], "filter": [], "scroll": []}
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            for _ in range(reps):
                for name, url in pages.items():
                    page = browser.new_page(viewport={"width": 1280, "height": 720})
                    page.goto(url)
                    page.wait_for_selector("body[data-ready]", timeout=60_000)
                    opened[name].append(page.evaluate("window.__stReady"))
                    if name == "big":
                        start = time.perf_counter()
                        page.fill("#search", f"answer {big - 1}:")
                        page.press("#search", "Enter")
                        page.wait_for_selector("#found:has-text('1 of 1')")
                        interact["search"].append((time.perf_counter() - start) * 1000)
                        start = time.perf_counter()
                        page.select_option("#filter", "conversation")
                        page.inner_text("#count")
                        interact["filter"].append((time.perf_counter() - start) * 1000)
                        start = time.perf_counter()
                        page.eval_on_selector("#tree-scroll", "el => { el.scrollTop = el.scrollHeight / 2; }")
                        page.wait_for_selector("#tree-inner .row")
                        two_frames = "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))"
                        page.evaluate(two_frames)
                        interact["scroll"].append((time.perf_counter() - start) * 1000)
                    page.close()
            browser.close()

    result = {
        "quick": args.quick,
        "reps": reps,
        "nodes": {"big": big, "small": small},
        "html_bytes": len(html.encode()),
        "export_ms": {
            "html": median_ms(export_ms),
            "jsonl": median_ms(jsonl_ms),
            "ratio": round(statistics.median(export_ms) / statistics.median(jsonl_ms), 2),
        },
        "open_ms": {
            "view": median_ms(opened["big"]),
            "parse_only": median_ms(opened["base"]),
            "ratio": round(statistics.median(opened["big"]) / statistics.median(opened["base"]), 2),
            f"view_{small}": median_ms(opened["small"]),
        },
        "interact_ms": {k: median_ms(v) for k, v in interact.items()},
    }
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
        return
    megabytes = result["html_bytes"] / 1e6
    print(f"browser view, {big:,} nodes ({megabytes:.1f} MB of HTML), medians of {reps} reps")
    e, o, i = result["export_ms"], result["open_ms"], result["interact_ms"]
    print(f"  export  html {e['html']:8.1f} ms   native JSONL {e['jsonl']:8.1f} ms   ratio {e['ratio']}")
    print(f"  open    view {o['view']:8.1f} ms   parse only {o['parse_only']:8.1f} ms   ratio {o['ratio']}")
    print(f"          view of {small:,} nodes {o[f'view_{small}']:.1f} ms")
    print(f"  search + jump {i['search']:.1f} ms   filter {i['filter']:.1f} ms   scroll {i['scroll']:.1f} ms")


if __name__ == "__main__":
    main()
