"""The Agents SDK's session workload: ``SessiontreeSession`` against the SDK's own sessions.

The workload is ``peers.py``'s (500 turns; ``--quick``: 50): each turn ``await
get_items()`` then ``await add_items([...])`` of the turn's 4 Responses items (user,
function call, its output, assistant message; about 1 KB of text each), all driven from
one event loop, the systems interleaved turn by turn in one process, every system on its
own fresh SQLite file (WAL, ``synchronous=NORMAL``). After the turns, each system that
can branches from turn 250 (``--quick``: 25).

Systems:
- ``sessiontree``: ``SessiontreeSession("bench", Store(path))``
  (``sessiontree.integrations.openai_agents``); the branch is ``session.fork(name,
  at=<the turn's node>)``: one row.
- ``agents-sqlite``: the SDK's ``SQLiteSession`` (no branches).
- ``agents-advanced``: the SDK's ``AdvancedSQLiteSession``; the branch is
  ``create_branch_from_turn``, which copies the rows up to the turn.

Reported per system: ms per turn (read + write, median over turns within +-5 of each
point, across reps) at turns 10, 100, 250 and 500; bytes per item; ms per branch; and
sessiontree / peer ratios. Usage: ``python benchmarks/agents_sdk.py [--quick] [--json]
[--reps N]`` (needs the ``openai-agents`` extra).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import peers
from peers import AgentsAdvanced, AgentsSQLite, wait

from sessiontree import Store


class Sessiontree(AgentsSQLite):
    name, package, can_fork = "sessiontree", "sessiontree", True
    caveat = "SessiontreeSession, the same async API and items; branch = SessiontreeSession.fork (one row)"

    def open(self, create: bool) -> Any:
        from sessiontree.integrations.openai_agents import SessiontreeSession

        return SessiontreeSession("bench", Store(self.path))

    def mark(self) -> None:
        self.anchor = self.session.tree().head("main")

    def fork(self, name: str) -> None:
        self.session.fork(name, at=self.anchor)

    def cold_read(self) -> int:
        session = self.open(create=False)
        try:
            return len(wait(session.get_items()))
        finally:
            session.store.close()

    def close(self) -> None:
        self.session.store.close()


CLASSES = [Sessiontree, AgentsSQLite, AgentsAdvanced]


def run(quick: bool, reps: int | None) -> dict[str, Any]:
    turns = 50 if quick else 500
    reps = reps or (1 if quick else 3)
    points = [10, 25, 50] if quick else [10, 100, 250, 500]
    forks, cold = (3, 3) if quick else (10, 5)
    samples = {c.name: {"turns": {}, "cold_read": [], "bytes_per_message": [], "fork": []} for c in CLASSES}
    for _ in range(reps):
        with tempfile.TemporaryDirectory(prefix="sessiontree-agents-") as d:
            peers.one_rep(CLASSES, Path(d), turns, forks, cold, samples)
    systems = {c.name: peers.summarize(c, samples[c.name], points) for c in CLASSES}
    ours = peers.flatten(systems["sessiontree"])
    ratios = {}
    for name, figures in systems.items():
        if name != "sessiontree":
            theirs = peers.flatten(figures)
            ratios[name] = {k: round(ours[k] / v, 3) if ours[k] and v else None for k, v in theirs.items()}
    return {
        "quick": quick,
        "reps": reps,
        "turns": turns,
        "items": 4 * turns,
        "branch_from_turn": turns // 2,
        "machine": peers.machine(),
        "systems": systems,
        "sessiontree_over_peer": ratios,
    }


def show(result: dict[str, Any]) -> str:
    points = list(next(iter(result["systems"].values()))["turn_ms"])
    names = list(result["systems"])
    lines = [
        f"{result['turns']} turns of 4 items, {result['reps']} rep(s);"
        f" branch from turn {result['branch_from_turn']}",
        "| measure | " + " | ".join(names) + " |",
        "|---" * (len(names) + 1) + "|",
    ]
    for p in points:
        lines.append(
            f"| ms/turn @{p} | " + " | ".join(str(result["systems"][n]["turn_ms"][p]) for n in names) + " |"
        )
    for key, label in (
        ("bytes_per_message", "bytes/item"),
        ("fork_ms", "ms/branch"),
        ("cold_read_ms", "cold read ms"),
    ):
        lines.append(f"| {label} | " + " | ".join(str(result["systems"][n][key]) for n in names) + " |")
    for name, row in result["sessiontree_over_peer"].items():
        last = f"turn_ms@{points[-1]}"
        lines.append(
            f"sessiontree / {name}: {row[last]}x per turn at turn {points[-1]}; branch {row['fork_ms']}x"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="50 turns, one rep")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--reps", type=int, default=None)
    args = parser.parse_args()
    result = run(args.quick, args.reps)
    print(json.dumps(result, indent=2) if args.json else show(result))


if __name__ == "__main__":
    main()
