"""Sessions the view tests open: the demo plus a pending pause, a hostile one, a big one."""

from __future__ import annotations

import random
from pathlib import Path

from click.testing import CliRunner

from sessiontree import Store, run
from sessiontree.cli import cli
from sessiontree.cli.demo import TOOLS
from sessiontree.testing import ScriptedModel, reply, tool_call

HOSTILE = [
    "<script>window.__pwned = 'script'</script>",
    "<img src=x onerror=\"window.__pwned = 'img'\">",
    "</script><script>window.__pwned = 'close'</script>",
    "<!-- a comment opener",
    "line\u2028separator",
]
SECRET = "sk-live-0123456789abcdef"


def demo_store(path: Path) -> tuple[str, str]:
    """The ``sessiontree demo`` session in a store at ``path``, plus one pending pause on a
    branch ``urgent`` forked at the checkpoint; returns (session id, pause id)."""
    result = CliRunner().invoke(cli, ["--db", str(path), "demo"])
    assert result.exit_code == 0, result.output
    with Store(path) as store:
        (info,) = store.sessions()
        session = store.session(info.id)
        session.fork("urgent", at="weather-known")
        model = ScriptedModel(
            [
                reply(
                    "Sending now.",
                    tool_call("send_email", {"to": "eve@example.com", "subject": "hi", "body": "x"}),
                )
            ],
            model="scripted-c",
        )
        steps = list(run(store, session, "urgent", call=model, tools=TOOLS))
        pause = steps[-1].node
        assert pause is not None and pause.kind == "pause"
        return session.id, pause.id


def hostile_store(path: Path) -> str:
    """A session whose payloads, title and branch hold markup and a bearer key."""
    with Store(path) as store:
        session = store.create_session("<b>title</b><script>window.__pwned = 'title'</script>")
        for text in HOSTILE:
            session.append({"role": "user", "content": text})
        session.append({"role": "assistant", "content": f"use Authorization: Bearer {SECRET} to call it"})
        session.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [tool_call("x<img src=y onerror=alert(1)>", {"a": "<b>"})],
            }
        )
        return session.id


def big_store(path: Path, nodes: int, *, seed: int = 7) -> str:
    """One session of ``nodes`` nodes: long runs of turns with a fork every ~40 nodes, some
    forks with many children, model runs on the assistant turns; written in one batch."""
    rng = random.Random(seed)
    with Store(path) as store:
        session = store.create_session(f"big: {nodes} nodes")
        with store.transaction():
            ids: list[str] = []
            for i in range(nodes):
                if not ids:
                    parent = None
                elif rng.random() < 0.025:  # a fork: a child of some earlier node
                    parent = ids[rng.randrange(len(ids))]
                else:
                    parent = ids[-1]
                run_info = None
                if i % 2:
                    run_info = {
                        "model": rng.choice(["model-a", "model-b"]),
                        "usage": {
                            "prompt_tokens": rng.randint(50, 900),
                            "completion_tokens": rng.randint(5, 200),
                        },
                        "latency_ms": rng.uniform(100, 2000),
                    }
                    payload = {
                        "role": "assistant",
                        "content": f"answer {i}: " + "lorem ipsum " * rng.randint(1, 12),
                    }
                else:
                    payload = {"role": "user", "content": f"question {i}?"}
                if parent is None:
                    node = session.append(payload, branch="main", run=run_info)
                else:
                    node = session.append(payload, parent=parent, branch=None, run=run_info)
                ids.append(node.id)
            session.move("main", to=ids[-1])
        return session.id
