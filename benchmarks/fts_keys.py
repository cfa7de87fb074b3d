"""What the spacing of row keys costs an FTS5 index: why node keys stay dense.

FTS5 stores each row's key in its index as a delta from the previous key in the same
document list. Node keys today count up by one (``INTEGER PRIMARY KEY``), so the deltas are
small. Keys derived from UUIDv7 ids (milliseconds shifted left by 16 bits, plus a counter)
would space rows tens of millions apart. This indexes the same documents (seeded, about
1,000 characters of words from a 5,000-word vocabulary with a Zipf-like spread) once with
dense keys and once with keys spaced as UUIDv7-derived ones would be (3 seconds apart), in
contentless FTS5 tables like the store's, after an ``optimize`` merge and a ``VACUUM``,
and prints the index bytes per document and the ratio.

Usage: ``python benchmarks/fts_keys.py [--quick] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import sys
import tempfile
from pathlib import Path

UUID7_MS = 1_790_000_000_000  # a millisecond timestamp of 2026


def documents(count: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    vocabulary = [
        "".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 10))) for _ in range(5_000)
    ]
    weights = [1 / (rank + 1) for rank in range(len(vocabulary))]  # a Zipf-like spread
    docs = []
    for _ in range(count):
        words: list[str] = []
        while sum(len(w) + 1 for w in words) < 1_000:
            words.extend(rng.choices(vocabulary, weights, k=20))
        docs.append(" ".join(words)[:1_000])
    return docs


def index_bytes(path: Path, keys: list[int], docs: list[str]) -> int:
    conn = sqlite3.connect(path)
    conn.execute("CREATE VIRTUAL TABLE f USING fts5(text, content='')")
    with conn:
        conn.executemany("INSERT INTO f (rowid, text) VALUES (?, ?)", zip(keys, docs, strict=True))
    conn.execute("INSERT INTO f (f) VALUES ('optimize')")
    conn.commit()
    conn.execute("VACUUM")
    size = conn.execute("SELECT sum(pgsize) FROM dbstat WHERE name LIKE 'f%'").fetchone()[0]
    conn.close()
    return int(size)


def run(quick: bool) -> dict:
    count = 1_000 if quick else 5_000
    docs = documents(count)
    rng = random.Random(11)
    dense = list(range(1, count + 1))
    spaced = [((UUID7_MS + i * 3_000) << 16) | 0x7000 | rng.getrandbits(11) for i in range(count)]
    with tempfile.TemporaryDirectory(prefix="sessiontree-fts-") as d:
        sizes = {
            name: index_bytes(Path(d) / f"{name}.db", keys, docs)
            for name, keys in (("dense", dense), ("uuid7", spaced))
        }
    per_doc = {name: round(size / count, 1) for name, size in sizes.items()}
    return {
        "documents": count,
        "characters": round(sum(map(len, docs)) / count),
        "bytes_per_document": per_doc,
        "ratio": round(per_doc["uuid7"] / per_doc["dense"], 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000 documents instead of 5,000")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    r = run(args.quick)
    if args.json:
        json.dump(r, sys.stdout, indent=2)
        print()
        return 0
    print(f"FTS5 index bytes per document ({r['documents']:,} documents of {r['characters']:,} characters)")
    print(f"{'keys counting up by one (today)':<44}{r['bytes_per_document']['dense']:>10.1f}")
    print(f"{'keys spaced like UUIDv7-derived ones':<44}{r['bytes_per_document']['uuid7']:>10.1f}")
    print(f"{'spaced / dense':<44}{r['ratio']:>9.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
