"""sessiontree on PostgreSQL beside raw psycopg on the same server, in the same run.

The baseline is the floor schema of ``floor.py`` written for PostgreSQL with psycopg 3
and nothing else: ``nodes(id bigserial, parent_id bigint, payload text)`` with an index
on ``parent_id``, ``heads(name primary key, node_id)``; an append is one transaction
(insert, head upsert); a read is one recursive CTE from the head plus ``json.loads``;
a fork is one ``heads`` row. No ids, no compare-and-set, no locks, no validation.

Printed: medians of ``--repeat`` timings and sessiontree ÷ baseline for one append, a
path read at depth 1,000 and 10,000 (with the path cache off, so every read walks the
path), a fork; then appends per second with 1, 4 and 8 writer processes (each its
own session, its own pool over TCP), as a ratio to one writer.

``--plans`` instead fills two fresh schemas alike with 20,000 nodes (one session a
chain of 2,100, autovacuum off), analyzes one, and times cold path reads at depth 2,000
and tree reads of that session in both, interleaved: the ratio is what a store that
fills faster than autovacuum pays for statistics it does not have yet.
``--round-trips`` instead counts the round trips of each operation on the wire, through
``tests/pg_proxy.py``, and times it there with the proxy adding D = 0 and 1 ms to every
round trip (medians of ``--repeat`` × 20; the proxy's own cost is in the D = 0 row).
``--storage`` instead writes 200 turns of ``peers.py``'s shape with prose-like text
(pseudo-words drawn Zipf-like from 5,000, seeded) and prints the bytes on the server
per message (every table, indexes and TOAST included, after VACUUM, less the empty
schema): at schema step 11 (two search indexes), step 12 (one index over two stored
vectors), now (one stored vector), and with the index off.

    python benchmarks/postgres.py [--repeat 5] [--seconds 3]
    python benchmarks/postgres.py --plans [--repeat 15]
    python benchmarks/postgres.py --storage
    python benchmarks/postgres.py --round-trips [--repeat 5]

Uses ``SESSIONTREE_TEST_POSTGRES`` when set, else starts a throwaway cluster
(``tests/pg_cluster.py``).
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import os
import statistics
import sys
import time
import uuid
from importlib import metadata
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import pg_cluster  # noqa: E402
from sessiontree import Store  # noqa: E402

MESSAGE = {"role": "user", "content": "x" * 1000}
CTX = multiprocessing.get_context("spawn")


class RawFloor:
    def __init__(self, server: str) -> None:
        self.schema = f"floor_{uuid.uuid4().hex[:8]}"
        self.conn = psycopg.connect(server, autocommit=True)
        # names qualified with the schema, not a search_path: a pooler in transaction mode keeps none
        self.nodes, self.heads = f"{self.schema}.nodes", f"{self.schema}.heads"
        self.conn.execute(f"CREATE SCHEMA {self.schema}")
        self.conn.execute(
            f"CREATE TABLE {self.nodes} (id bigserial PRIMARY KEY, parent_id bigint, payload text);"
            f" CREATE INDEX nodes_parent ON {self.nodes}(parent_id);"
            f" CREATE TABLE {self.heads} (name text PRIMARY KEY, node_id bigint)"
        )
        self.head: int | None = None

    def append(self, name: str, payload: dict[str, Any]) -> None:
        with self.conn.transaction():
            row = self.conn.execute(
                f"INSERT INTO {self.nodes} (parent_id, payload) VALUES (%s, %s) RETURNING id",
                (self.head, json.dumps(payload)),
            ).fetchone()
            assert row is not None
            self.head = row[0]
            self.conn.execute(
                f"INSERT INTO {self.heads} VALUES (%s, %s)"
                " ON CONFLICT (name) DO UPDATE SET node_id = excluded.node_id",
                (name, self.head),
            )

    def read(self, name: str) -> list[dict[str, Any]]:
        rows = self.conn.execute(
            "WITH RECURSIVE p(id, parent_id, payload, depth) AS ("
            f" SELECT id, parent_id, payload, 0 FROM {self.nodes}"
            f" WHERE id = (SELECT node_id FROM {self.heads} WHERE name = %s)"
            " UNION ALL SELECT n.id, n.parent_id, n.payload, p.depth + 1"
            f" FROM {self.nodes} n JOIN p ON n.id = p.parent_id)"
            " SELECT payload FROM p ORDER BY depth DESC",
            (name,),
        ).fetchall()
        return [json.loads(r[0]) for r in rows]

    def fork(self, name: str, at: str) -> None:
        copy = f"INSERT INTO {self.heads} SELECT %s, node_id FROM {self.heads} WHERE name = %s"
        self.conn.execute(copy, (name, at))

    def close(self) -> None:
        self.conn.execute(f"DROP SCHEMA {self.schema} CASCADE")
        self.conn.close()


def timed(fn: Any, repeat: int, inner: int = 1) -> float:
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        runs.append((time.perf_counter() - start) / inner)
    return statistics.median(runs)


def writer(url: str, seconds: float, start: Any, out: Any) -> None:
    with Store(url) as store:
        session = store.create_session("writer")
        start.wait(60)
        n, deadline = 0, time.monotonic() + seconds
        while time.monotonic() < deadline:
            session.append(MESSAGE, branch="main")
            n += 1
        out.put(n)


def throughput(url: str, processes: int, seconds: float) -> float:
    start, out = CTX.Event(), CTX.Queue()
    procs = [CTX.Process(target=writer, args=(url, seconds, start, out)) for _ in range(processes)]
    for p in procs:
        p.start()
    time.sleep(1.5)  # interpreters up, stores open
    start.set()
    total = sum(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(30)
    return total / seconds


def fill_for_plans(url: str, analyze: bool) -> tuple[Store, str]:
    """A fresh store of 20,000 nodes, one session a chain of 2,100; (store, its id)."""
    store = Store(url, cache_bytes=0)
    with store.storage.pool.connection() as conn:  # type: ignore[attr-defined]
        conn.execute("ALTER TABLE nodes SET (autovacuum_enabled = false)")
    deep = store.create_session("deep")
    deep.append(MESSAGE)
    for _ in range(10):  # long-lived connections prepare their statements while it is tiny
        deep.messages("main")
        deep.tree()
    while len(deep.path("main")) < 2_100:
        deep.append_many([MESSAGE] * 300)
    wide = store.create_session("wide")
    for _ in range(60):
        wide.append_many([MESSAGE] * 300)
    if analyze:
        with store.storage.pool.connection() as conn:  # type: ignore[attr-defined]
            conn.execute("ANALYZE nodes")
    return store, deep.id


def plans(server: str, repeat: int) -> None:
    urls = [f"{server}?schema=bench_{uuid.uuid4().hex[:8]}" for _ in range(2)]
    (bare, bare_id), (analyzed, analyzed_id) = fill_for_plans(urls[0], False), fill_for_plans(urls[1], True)
    cells = {
        "path at depth 2,000 (cache off)": (
            lambda: bare.session(bare_id).messages("main~100"),
            lambda: analyzed.session(analyzed_id).messages("main~100"),
        ),
        "tree of the 2,100-node session": (
            lambda: bare.session(bare_id).tree(),
            lambda: analyzed.session(analyzed_id).tree(),
        ),
    }
    print(f"20,000 nodes, never analyzed vs analyzed; medians of {repeat}, interleaved")
    for name, (without, with_stats) in cells.items():
        a, b = [], []
        for _ in range(repeat):
            a.append(timed(without, 1))
            b.append(timed(with_stats, 1))
        x, y = statistics.median(a), statistics.median(b)
        print(f"{name:34} {x * 1000:8.1f} ms  {y * 1000:8.1f} ms  {x / y:5.2f}x")
    for store, url in ((bare, urls[0]), (analyzed, urls[1])):
        store.close()
        drop(server, url)


def prose(rng: Any, words: list[str], weights: list[float], size: int = 1000) -> str:
    out, length = [], 0
    while length < size:
        word = rng.choices(words, weights)[0]
        out.append(word)
        length += len(word) + 1
    return " ".join(out)[:size]


def prose_texts(turns: int) -> dict[tuple[str, int], str]:
    """Every text of ``turns`` turns of peers.py's workload as prose-like pseudo-words
    (drawn Zipf-like from 5,000, seeded; ~1 KB each): pglz compresses it about 2x, as
    prose, where peers.py's repeated lorem line compresses 50x."""
    import random

    rng = random.Random(15)
    letters = "etaoinshrdlucmfwypvbgkqjxz"
    words = sorted({"".join(rng.choices(letters, k=rng.randint(2, 10))) for _ in range(5_500)})[:5_000]
    rng.shuffle(words)
    weights = [1 / (rank + 1) for rank in range(len(words))]
    return {
        (what, turn): prose(rng, words, weights)
        for turn in range(1, turns + 1)
        for what in ("question", "query", "result", "answer")
    }


def storage_bytes(server: str) -> None:
    """Bytes on the server per message, every system on the same prose-like text."""
    import peers

    from sessiontree import db
    from sessiontree.storage import postgres_db

    turns = 200
    texts = prose_texts(turns)
    lorem, peers.text = peers.text, lambda what, turn: texts[(what, turn)]
    every_step, every_pg_step = db.migrations, postgres_db.steps
    all_steps, all_pg_steps = db.migrations(), postgres_db.steps()

    def per_message(
        label: str, cls: Any, step: int | None = None, index: bool = True, extra: str = ""
    ) -> None:
        schema = f"bench_{uuid.uuid4().hex[:8]}"
        if step is not None:  # a store as that schema step made it
            db.migrations = lambda: all_steps[:step]  # type: ignore[assignment]
            postgres_db.steps = lambda: [s for s in all_pg_steps if s.version <= step]  # type: ignore[assignment]
        try:
            system = cls(server, schema)
            if not index:
                system.store.set_search_index(False)
            system.read()  # a lazy peer creates its tables now
            if extra:
                with psycopg.connect(server, autocommit=True) as conn:
                    conn.execute(extra.format(schema=schema))
            empty = schema_bytes(server, schema, vacuum=False)
            for turn in range(1, turns + 1):  # steps 11 and 12: sessiontree writes without reading
                system.write(system.shape(turn), system.read() if step is None else [])
            full = schema_bytes(server, schema)
            system.close()
            print(f"{label:52} {(full - empty) / (turns * 4):8,.0f} bytes per message")
            if step is None and index and label.startswith("sessiontree"):
                split = search_bytes(server, schema, turns * 4)
                print(f"{'  of which the index; the stored vectors':52} {split}")
        finally:
            db.migrations, postgres_db.steps = every_step, every_pg_step  # type: ignore[assignment]
            drop_schemas(server, [schema])

    print(
        f"{turns} turns of 4 messages, prose-like text (~1 KB a message); after VACUUM, less the empty schema"
    )
    classes = peer_classes()
    try:
        per_message("sessiontree at schema step 11 (two search indexes)", classes["sessiontree"], 11)
        per_message("sessiontree at step 12 (one index, two stored vectors)", classes["sessiontree"], 12)
        per_message("sessiontree now (one index, one stored vector)", classes["sessiontree"])
        per_message("sessiontree now, search index off", classes["sessiontree"], index=False)
        for name in ("langgraph", "agents-sqlalchemy"):
            try:
                per_message(f"{name} ({classes[name].package})", classes[name])
            except ImportError as e:
                print(f"{name}: not installed ({e}): {PEERS_PACKAGES}")
        # what search would add to the Agents SDK's plain table: a GIN index of its items'
        # text, kept as rows come (as ours is), over the whole item JSON
        per_message(
            "agents-sqlalchemy plus a GIN index of its text",
            classes["agents-sqlalchemy"],
            extra="CREATE INDEX agent_messages_search ON {schema}.agent_messages"
            " USING gin (to_tsvector('simple', message_data))",
        )
    finally:
        peers.text = lorem


def round_trips(server: str, repeat: int) -> None:
    from pg_proxy import DroppingProxy

    turn = [{"role": "user", "content": "x" * 1000}, {"role": "assistant", "content": "y" * 1000}] * 2
    print(f"round trips on the wire and ms per operation through a proxy; medians of {repeat} x 20")
    print(f"{'operation':34} {'round trips':>11} {'D = 0':>9} {'D = 1 ms':>9}")
    results: dict[str, list[Any]] = {}
    for delay in (0.0, 0.0005):
        proxy = DroppingProxy(server, delay=delay)
        schema = f"bench_{uuid.uuid4().hex[:8]}"
        url = proxy.url(schema) + "&pool_size=1"
        with Store(url) as store, Store(url, cache_bytes=0) as cold:
            session = store.create_session("trips")
            session.append_many(turn * 25)  # a conversation of 100 messages
            other = cold.session(session.id)
            counter = iter(range(10**6))
            ops = {
                "read, answered by the cache": lambda: session.messages("main"),  # noqa: B023
                "read, cache off (100 messages)": lambda: other.messages("main"),  # noqa: B023
                "append one message": lambda: session.append(MESSAGE),  # noqa: B023
                "append a turn (4 messages)": lambda: session.append_many(turn),  # noqa: B023
                "fork": lambda: session.fork(f"fork{next(counter)}", at="main"),  # noqa: B023
            }
            for name, op in ops.items():
                op()
                op()  # prepared, and the redaction count just looked at
                proxy.counted()
                op()
                trips = proxy.counted()
                results.setdefault(name, [trips]).append(timed(op, repeat, 20))
        proxy.stop()
        drop(server, f"{server}?schema={schema}")
    for name, (trips, at_0, at_1) in results.items():
        print(f"{name:34} {trips:>11} {at_0 * 1000:8.2f}  {at_1 * 1000:8.2f}")


# -- across a network: sessiontree beside LangGraph's PostgresSaver and the Agents SDK ----------

PEERS_PACKAGES = (
    "pip install -e '.[bench]'  (langgraph-checkpoint-postgres, openai-agents[sqlalchemy], asyncpg)"
)
POINTS = (10, 50, 100, 200, 300, 400, 500)
PEER_MODULES = {
    "langgraph": ["langgraph.checkpoint.postgres"],
    "agents-sqlalchemy": ["agents.extensions.memory.sqlalchemy_session", "asyncpg"],
}
NETWORK_DELAYS = (None, 0.0, 1.0, 2.0)  # ms added to a round trip; None: straight to the server


def mode_name(delay: float | None) -> str:
    return "direct" if delay is None else f"D={delay:g}ms"


def make_schema(server: str, schema: str) -> None:
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")


def with_search_path(url: str, schema: str) -> str:
    """A libpq URL whose connections use ``schema`` (the peers take no schema of their own)."""
    return f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{schema}"


def peer_classes() -> dict[str, Any]:
    """The three systems, each on a URL and a schema, through peers.py's classes."""
    import peers

    class SessionTreePg(peers.SessionTree):
        def __init__(self, url: str, schema: str) -> None:
            super().__init__(f"{url}{'&' if '?' in url else '?'}schema={schema}")  # type: ignore[arg-type]

    class LangGraphPg(peers.LangGraph):
        package = "langgraph-checkpoint-postgres"

        def __init__(self, url: str, schema: str) -> None:
            from langgraph.checkpoint.postgres import PostgresSaver

            class Runtime(PostgresSaver):
                """Checkpoints as the LangGraph runtime writes them (format v4): below v4
                ``get_tuple`` runs one more query for the parent's pending sends."""

                def put(self, config, checkpoint, metadata, new_versions):  # type: ignore[no-untyped-def]
                    return super().put(config, {**checkpoint, "v": 4}, metadata, new_versions)

            self.path = url  # type: ignore[assignment]
            make_schema(url.split("?")[0], schema)
            self._opened = Runtime.from_conn_string(with_search_path(url, schema))
            self.saver = self._opened.__enter__()
            self.saver.setup()  # as its docs show
            self.config = {"configurable": {"thread_id": "bench", "checkpoint_ns": ""}}
            self.latest: Any = None
            self.step = 0

        def close(self) -> None:
            self._opened.__exit__(None, None, None)

    class AgentsPg(peers.AgentsSQLite):
        package = "openai-agents"
        caveat = "async API driven from one event loop (as peers.py does); no fork on this backend"

        def __init__(self, url: str, schema: str) -> None:
            self.schema = schema
            make_schema(url.split("?")[0], schema)
            super().__init__(url)  # type: ignore[arg-type]

        def open(self, create: bool) -> Any:
            from agents.extensions.memory import SQLAlchemySession

            parts = str(self.path).split("?")[0].replace("postgresql://", "postgresql+asyncpg://")
            return SQLAlchemySession.from_url(
                "bench",
                url=parts,
                create_tables=create,
                engine_kwargs={"connect_args": {"server_settings": {"search_path": self.schema}}},
            )

        def close(self) -> None:
            peers.wait(self.session._engine.dispose())

    return {"sessiontree": SessionTreePg, "langgraph": LangGraphPg, "agents-sqlalchemy": AgentsPg}


def select_one_ms(url: str, n: int = 300) -> float:
    """The median ms of a ``SELECT 1`` round trip on one connection to ``url``."""
    with psycopg.connect(url, autocommit=True, prepare_threshold=None) as conn:
        for _ in range(20):
            conn.execute("SELECT 1")
        runs = []
        for _ in range(n):
            start = time.perf_counter()
            conn.execute("SELECT 1")
            runs.append(time.perf_counter() - start)
    return statistics.median(runs) * 1000


def calibrate(proxies: Any, index: int, url: str, added_ms: float) -> tuple[float, float]:
    """The one-way delay (s) that makes a round trip ``added_ms`` longer than through the
    proxy at no delay, found by the secant method on listener ``index``; (delay, added)."""
    proxies.call(index, "set_delay", 0.0)
    base = select_one_ms(url)
    guess, previous = added_ms / 2000, None
    for _ in range(5):
        proxies.call(index, "set_delay", guess)
        got = select_one_ms(url) - base
        if abs(got - added_ms) < 0.01:
            break
        if previous is None or previous[1] == got:
            nxt = guess - (got - added_ms) / 2000  # a round trip holds two delays
        else:
            slope = (got - previous[1]) / (guess - previous[0])
            nxt = guess - (got - added_ms) / slope
        previous, guess = (guess, got), max(0.0, nxt)
    proxies.call(index, "set_delay", 0.0)
    return guess, got


def analyze(server: str, schemas: list[str]) -> None:
    """What autovacuum does on a server whose turns take seconds (outside the timing)."""
    with psycopg.connect(server, autocommit=True) as conn:
        for schema in schemas:
            tables = conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)
            ).fetchall()
            for (table,) in tables:
                conn.execute(f"ANALYZE {schema}.{table}")


def search_bytes(server: str, schema: str, messages: int) -> str:
    """Bytes per message of the search index and of the vectors stored in the rows (as
    stored: compressed, TOAST included)."""
    with psycopg.connect(server, autocommit=True) as conn:
        ((index, vectors),) = conn.execute(
            f"SELECT pg_relation_size('{schema}.nodes_search_all'),"
            f" (SELECT sum(pg_column_size(search_vector)) FROM {schema}.nodes)"
        ).fetchall()
    return f"{index / messages:8,.0f}; {vectors / messages:,.0f}"


def schema_bytes(server: str, schema: str, vacuum: bool = True) -> int:
    with psycopg.connect(server, autocommit=True) as conn:
        tables = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)).fetchall()
        if vacuum:
            for (table,) in tables:
                conn.execute(f"VACUUM {schema}.{table}")
        row = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c"
            " JOIN pg_namespace ns ON ns.oid = c.relnamespace WHERE ns.nspname = %s AND c.relkind = 'r'",
            (schema,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def drop_schemas(server: str, schemas: list[str]) -> None:
    with psycopg.connect(server, autocommit=True) as conn:
        for schema in schemas:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


class Cell:
    """One system at one delay, on a schema of its own, through a listener of its own."""

    def __init__(self, name: str, cls: Any, delay: float | None, url: str, listener: int | None) -> None:
        self.name, self.delay, self.listener = name, delay, listener
        self.schema = f"net_{name.replace('-', '_')}_{uuid.uuid4().hex[:8]}"
        self.system = cls(url, self.schema)
        self.key = (name, mode_name(delay))


def network(server: str, turns: int, reps: int, out_json: str | None) -> None:
    import peers

    from pg_proxy import ProxyProcess

    classes, skipped = peer_classes(), []
    for name, modules in PEER_MODULES.items():
        try:
            for module in modules:
                __import__(module)
        except ImportError as e:  # sessiontree runs alone, or with the peer that is there
            del classes[name]
            skipped.append(f"skipped, {name}: {e} ({PEERS_PACKAGES})")
    delays = [d for d in NETWORK_DELAYS if d is not None]
    proxies = ProxyProcess(server, len(classes) * len(delays) + 1)
    calib_index = len(proxies.urls) - 1
    calib_url = proxies.urls[calib_index].split("?")[0]
    try:
        result = _network_run(server, turns, reps, proxies, calib_index, calib_url, classes, delays, peers)
    finally:
        proxies.stop()
    print_network(result)
    print("\n".join(skipped))
    if out_json:
        Path(out_json).write_text(json.dumps(result, indent=1))


def _network_run(server, turns, reps, proxies, calib_index, calib_url, classes, delays, peers) -> dict:  # type: ignore[no-untyped-def]
    samples: dict[tuple[str, str], dict[int, list[tuple[float, float]]]] = {}
    trips: dict[tuple[str, str], list[tuple[int, int]]] = {}
    wire: dict[tuple[str, str], dict[int, tuple[int, int]]] = {}
    forks: dict[tuple[str, str], list[tuple[float, int]]] = {}
    calibration: list[dict[str, float]] = []
    fork_turn = min(100, turns // 2)
    for rep in range(reps):
        direct = select_one_ms(server.split("?")[0])
        at_zero = select_one_ms(calib_url)
        set_to = {d: calibrate(proxies, calib_index, calib_url, d) for d in delays if d}
        calibration.append(
            {"direct": direct, "proxy0": at_zero, **{f"set{d:g}": s for d, (s, _) in set_to.items()}}
            | {f"added{d:g}": a for d, (_, a) in set_to.items()}
        )
        cells: list[Cell] = []
        listener = 0
        for name, cls in classes.items():
            for delay in NETWORK_DELAYS:
                if delay is None:
                    cells.append(Cell(name, cls, None, server.split("?")[0], None))
                    continue
                proxies.call(listener, "set_delay", set_to[delay][0] if delay else 0.0)
                cells.append(Cell(name, cls, delay, proxies.urls[listener].split("?")[0], listener))
                listener += 1
        for cell in cells:
            cell.system.read()  # a lazy peer creates its tables now
            if cell.listener is not None:
                proxies.call(cell.listener, "counted")
                proxies.call(cell.listener, "traffic")
        for turn in range(1, turns + 1):
            shift = turn % len(cells)
            for cell in cells[shift:] + cells[:shift]:
                system = cell.system
                samples.setdefault(cell.key, {}).setdefault(turn, []).append(peers.one_turn(system, turn))
                if cell.delay == 0.0:  # counted outside the timing, on the wire
                    trips.setdefault(cell.key, []).append((turn, proxies.call(cell.listener, "counted")))
                    if turn in POINTS:
                        wire.setdefault(cell.key, {})[turn] = proxies.call(cell.listener, "traffic")
                    elif turn + 1 in POINTS:
                        proxies.call(cell.listener, "traffic")
                if turn == fork_turn - 1:
                    system.mark()
            if turn % 50 == 0:
                analyze(server, [c.schema for c in cells])
        for i in range(5):  # forks from the head after turn fork_turn - 1, once the turns are done
            for cell in cells:
                if not cell.system.can_fork:
                    continue
                if cell.listener is not None:
                    proxies.call(cell.listener, "counted")
                took = peers.timed(lambda c=cell, n=f"fork-{i}": c.system.fork(n))
                counted = proxies.call(cell.listener, "counted") if cell.listener is not None else -1
                forks.setdefault(cell.key, []).append((took, counted))
        calibration[-1] |= {
            f"after{d:g}": select_one_ms_with(proxies, calib_index, calib_url, set_to[d][0]) - at_zero
            for d in delays
            if d
        }
        for cell in cells:
            cell.system.close()
        drop_schemas(server, [c.schema for c in cells])
        print(f"rep {rep + 1} of {reps} done", file=sys.stderr)
    return summarize_network(samples, trips, wire, forks, calibration, turns, reps, classes)


def select_one_ms_with(proxies: Any, index: int, url: str, delay: float) -> float:
    proxies.call(index, "set_delay", delay)
    try:
        return select_one_ms(url)
    finally:
        proxies.call(index, "set_delay", 0.0)


def summarize_network(samples, trips, wire, forks, calibration, turns, reps, classes) -> dict:  # type: ignore[no-untyped-def]
    points = [p for p in POINTS if p <= turns]

    def around(per_turn: dict[int, list[tuple[float, float]]], point: int) -> list[tuple[float, float]]:
        return [t for turn in range(point - 5, point + 6) for t in per_turn.get(turn, [])]

    figures: dict[str, dict[str, Any]] = {}
    for (name, mode), per_turn in samples.items():
        cell: dict[str, Any] = {
            "turn_ms": {p: statistics.median(r + w for r, w in around(per_turn, p)) * 1e3 for p in points},
            "read_ms": {p: statistics.median(r for r, _ in around(per_turn, p)) * 1e3 for p in points},
            "write_ms": {p: statistics.median(w for _, w in around(per_turn, p)) * 1e3 for p in points},
            # a whole conversation of 200 turns (or all of them): each rep's sum, the median of those
            "total_s": statistics.median(
                sum(per_turn[t][rep][0] + per_turn[t][rep][1] for t in range(1, min(200, turns) + 1))
                for rep in range(reps)
            ),
        }
        if (name, mode) in trips:
            counts = [c for t, c in trips[(name, mode)] if t > 5]
            cell["round_trips"] = {
                "median": statistics.median(counts),
                "mean": statistics.fmean(counts),
                "histogram": dict(sorted(collections.Counter(counts).items())),
            }
            cell["wire_kb"] = {p: [b / 1024 for b in v] for p, v in wire[(name, mode)].items()}
        if (name, mode) in forks:
            cell["fork_ms"] = statistics.median(t for t, _ in forks[(name, mode)]) * 1e3
            cell["fork_round_trips"] = statistics.median(c for _, c in forks[(name, mode)])
        figures.setdefault(name, {})[mode] = cell
    versions = {}
    for name, cls in classes.items():
        versions[name] = metadata.version(cls.package) if cls.package else ""
    calib = {k: statistics.median(c[k] for c in calibration) for k in calibration[0]}
    return {
        "turns": turns,
        "reps": reps,
        "points": points,
        "figures": figures,
        "calibration": calib,
        "versions": versions,
        "load": os.getloadavg(),
    }


def ratio_of(ours: dict[str, Any]) -> Any:
    """(per-turn ratios, the whole conversation's ratio) of sessiontree over a peer's cell."""

    def ratios(cell: dict[str, Any], mode: str) -> tuple[dict[int, float], float]:
        mine = ours[mode]
        per_turn = {p: mine["turn_ms"][p] / v for p, v in cell["turn_ms"].items()}
        return per_turn, mine["total_s"] / cell["total_s"]

    return ratios


def print_network(r: dict) -> None:
    figures, points = r["figures"], r["points"]
    modes = [mode_name(d) for d in NETWORK_DELAYS]
    print(
        f"{r['turns']} turns x 4 messages, {r['reps']} reps interleaved; ms per turn (read + append),"
        f" median of turns +-5 around each point, all reps pooled"
    )
    ours = figures["sessiontree"]
    for title, label, shown in (
        ("", "system", lambda cell, _: (cell["turn_ms"], cell["total_s"])),
        ("\nsessiontree ÷ peer (below 1: sessiontree is faster)", "peer", ratio_of(ours)),
    ):
        if title:
            print(title)
        print(f"| mode | {label} | " + " | ".join(f"@{p}" for p in points) + " | 200 turns |")
        print("|---|---|" + "---:|" * (len(points) + 1))
        for mode in modes:
            for name, by_mode in figures.items():
                if label == "peer" and name == "sessiontree":
                    continue
                per_turn, total = shown(by_mode[mode], mode)
                print(
                    f"| {mode} | {name} | "
                    + " | ".join(f"{per_turn[p]:.2f}" for p in points)
                    + f" | {total:.2f} |"
                )
    print("\nthe proxy's own cost: D=0 through it minus direct, ms per turn")
    print("| system | " + " | ".join(f"@{p}" for p in points) + " |")
    print("|---|" + "---:|" * len(points))
    for name, by_mode in figures.items():
        print(
            f"| {name} | "
            + " | ".join(
                f"{by_mode['D=0ms']['turn_ms'][p] - by_mode['direct']['turn_ms'][p]:+.2f}" for p in points
            )
            + " |"
        )
    print("\nround trips per turn and KB on the wire (counted in the proxy at D=0)")
    last = points[-1]
    print(
        f"| system | round trips (median; mean; turns with each count) | KB up @{last}"
        f" | KB down @{last} | fork ms (D=0/1/2) | fork RT |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for name, by_mode in figures.items():
        cell = by_mode["D=0ms"]
        up, down = cell["wire_kb"][last]
        fork = "n/a"
        if "fork_ms" in cell:
            fork = " / ".join(f"{by_mode[m]['fork_ms']:.2f}" for m in modes[1:])
        print(
            f"| {name} | {cell['round_trips']['median']:g}; {cell['round_trips']['mean']:.2f};"
            f" {cell['round_trips']['histogram']} | {up:.1f}"
            f" | {down:.1f} | {fork} | {cell.get('fork_round_trips', 'n/a')} |"
        )
    c = r["calibration"]
    print(
        f"\ncalibration (median of reps): SELECT 1 direct {c['direct']:.3f} ms, through the proxy at D=0"
        f" {c['proxy0']:.3f} ms; "
        + "; ".join(
            f"D={d:g}: one-way delay set {c[f'set{d:g}'] * 1000:.3f} ms, added {c[f'added{d:g}']:.3f} ms"
            f" (after the turns {c[f'after{d:g}']:.3f})"
            for d in NETWORK_DELAYS
            if d
        )
    )
    print("versions: " + ", ".join(f"{n} {v}" for n, v in r["versions"].items()) + f"; load {r['load']}")


# -- many processes: workers carrying decided pauses on, writers appending ------------------


def pause_worker(url: str, out_dir: str, tool_log: str, ready: Any, start: Any) -> None:
    """A ``work`` loop until idle; writes (pause id, s resuming began, s it ended) per pause."""
    import reliability_workers as workers
    from sessiontree import Final, Resuming, work

    os.environ[workers.TOOL_LOG_ENV] = tool_log
    carried: list[tuple[str, float, float]] = []
    with Store(url) as store:
        ready.put(os.getpid())
        start.wait(120)
        began: tuple[str, float] | None = None
        for step in work(
            store,
            poll=0.2,
            until_idle=True,
            call=lambda m, t: workers.reply("done"),
            tools=[workers.transfer],
        ):
            if isinstance(step, Resuming):
                began = (step.pause_id, time.time())
            elif isinstance(step, Final) and began is not None:
                carried.append((began[0], began[1], time.time()))
                began = None
    Path(out_dir, f"{os.getpid()}.json").write_text(json.dumps(carried))


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[98] if len(values) > 1 else values[0]


def carry_pauses(server: str, processes: int, pauses: int) -> dict[str, Any]:
    import tempfile

    from sessiontree import Approve, decide
    from test_pause_races import make_pauses

    url = f"{server}?schema=bench_{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory(prefix="sessiontree-bench-") as out, Store(url) as store:
        tool_log = Path(out, "executions.log")
        tool_log.touch()
        made = make_pauses(store, pauses)
        for pause_id in made:
            decide(store, pause_id, {"e": Approve()}, by="bench")
        ready, start = CTX.Queue(), CTX.Event()
        procs = [
            CTX.Process(target=pause_worker, args=(url, out, str(tool_log), ready, start))
            for _ in range(processes)
        ]
        for proc in procs:
            proc.start()
        for _ in procs:
            ready.get(timeout=120)
        began = time.time()
        start.set()
        for proc in procs:
            proc.join(300)
        assert [proc.exitcode for proc in procs] == [0] * processes
        carried = [c for f in Path(out).glob("*.json") for c in json.loads(f.read_text())]
        # each pause carried on by exactly one worker, its unsafe tool run exactly once
        assert collections.Counter(c[0] for c in carried) == collections.Counter(made), "lost or twice"
        runs = collections.Counter(int(line.split()[1]) for line in tool_log.read_text().splitlines())
        assert runs == collections.Counter(range(pauses)), "a tool ran twice or never"
        assert store.storage.resumable() == [] and store.verify().ok
        took = max(c[2] for c in carried) - began
        latencies = [c[2] - c[1] for c in carried]
    drop(server, url)
    return {
        "per_s": pauses / took,
        "p99_ms": p99(latencies) * 1e3,
        "median_ms": statistics.median(latencies) * 1e3,
    }


def append_writer(url: str, session_id: str | None, seconds: float, ready: Any, start: Any, out: Any) -> None:
    """Appends a turn of 4 messages for ``seconds``; sends (the ids it was told, latencies)."""
    from peers import chat_turn

    with Store(url) as store:
        session = store.session(session_id) if session_id else store.create_session("writer")
        ready.put(session.id)
        start.wait(120)
        ids, latencies, turn = [], [], 0
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            turn += 1
            begun = time.perf_counter()
            nodes = session.append_many(chat_turn(turn))
            latencies.append(time.perf_counter() - begun)
            ids += [n.id for n in nodes]
        out.put((session.id, ids, latencies))


def write_at_once(server: str, processes: int, seconds: float, shared: bool) -> dict[str, Any]:
    url = f"{server}?schema=bench_{uuid.uuid4().hex[:8]}"
    with Store(url) as store:
        one = store.create_session("shared").id if shared else None
        ready, start, out = CTX.Queue(), CTX.Event(), CTX.Queue()
        procs = [
            CTX.Process(target=append_writer, args=(url, one, seconds, ready, start, out))
            for _ in range(processes)
        ]
        for proc in procs:
            proc.start()
        for _ in procs:
            ready.get(timeout=120)
        start.set()
        results = [out.get(timeout=seconds + 120) for _ in procs]
        for proc in procs:
            proc.join(60)
        told: dict[str, list[str]] = {}
        for session_id, ids, _ in results:
            told.setdefault(session_id, []).extend(ids)
        for session_id, ids in told.items():  # every acknowledged append there, once; nothing else
            stored = [n.id for n in store.session(session_id).path("main")]
            assert len(stored) == len(ids) and set(stored) == set(ids), "lost or written twice"
        assert store.verify().ok
    drop(server, url)
    latencies = [t for _, _, ts in results for t in ts]
    return {
        "turns_per_s": len(latencies) / seconds,
        "p99_ms": p99(latencies) * 1e3,
        "median_ms": statistics.median(latencies) * 1e3,
    }


def concurrency(server: str, seconds: float, pauses: int, most: int) -> None:
    print(f"workers carrying {pauses} decided pauses on (each its own process and pool), until idle")
    print("| workers | pauses/s | median ms | p99 ms | lost or run twice |")
    print("|---:|---:|---:|---:|---|")
    for processes in [n for n in (1, 4, 16) if n <= most]:
        r = carry_pauses(server, processes, pauses)
        print(
            f"| {processes} | {r['per_s']:.1f} | {r['median_ms']:.1f} | {r['p99_ms']:.1f} | none (asserted) |"
        )
    print(f"\nwriters appending a turn of 4 messages for {seconds:g} s (each its own process and pool)")
    print("| writers | sessions | turns/s | median ms | p99 ms | lost or twice |")
    print("|---:|---|---:|---:|---:|---|")
    for shared in (False, True):
        for processes in [n for n in (1, 2, 4, 8, 16) if n <= most]:
            r = write_at_once(server, processes, seconds, shared)
            where = "one, one branch" if shared else "one each"
            print(
                f"| {processes} | {where} | {r['turns_per_s']:.0f} | {r['median_ms']:.1f} | {r['p99_ms']:.1f}"
                " | none (asserted) |"
            )


def drop(server: str, url: str) -> None:
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {url.partition('?schema=')[2]} CASCADE")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--plans", action="store_true", help="plans without ANALYZE (see the docstring)")
    parser.add_argument("--storage", action="store_true", help="bytes per message (see the docstring)")
    parser.add_argument("--round-trips", action="store_true", help="round trips per operation")
    parser.add_argument("--network", action="store_true", help="beside the peers across a network")
    parser.add_argument("--turns", type=int, default=500, help="--network: turns per conversation")
    parser.add_argument("--reps", type=int, default=3, help="--network: repetitions, interleaved")
    parser.add_argument("--json", help="--network: also write the figures to this file")
    parser.add_argument("--concurrency", action="store_true", help="workers and writers at once")
    parser.add_argument("--pauses", type=int, default=64, help="--concurrency: decided pauses to carry on")
    parser.add_argument("--most", type=int, default=16, help="--concurrency: at most this many processes")
    args = parser.parse_args()
    server, why = pg_cluster.server_url()
    if server is None:
        raise SystemExit(why)
    if args.plans:
        plans(server, args.repeat)
        return
    if args.storage:
        storage_bytes(server)
        return
    if args.round_trips:
        round_trips(server, args.repeat)
        return
    if args.network:
        network(server, args.turns, args.reps, args.json)
        return
    if args.concurrency:
        concurrency(server, args.seconds, args.pauses, args.most)
        return
    url = f"{server}?schema=bench_{uuid.uuid4().hex[:8]}"
    store, floor = Store(url), RawFloor(server)
    session = store.create_session("bench")
    print(f"PostgreSQL at {server}; medians of {args.repeat}; sessiontree ÷ raw psycopg floor")
    rows = []

    ours = timed(lambda: session.append(MESSAGE, branch="main"), args.repeat, 200)
    theirs = timed(lambda: floor.append("main", MESSAGE), args.repeat, 200)
    rows.append(("one append (1 KB)", ours, theirs))
    for depth in (1_000, 10_000):
        have = len(session.path("main"))
        session.append_many([MESSAGE] * (depth - have), branch="main")
        for _ in range(depth - len(floor.read("main"))):
            floor.append("main", MESSAGE)

        cold = Store(url, cache_bytes=0).session(session.id)  # no cache: every read walks the path

        ours = timed(lambda: cold.messages("main"), args.repeat)  # noqa: B023
        theirs = timed(lambda: floor.read("main"), args.repeat)  # noqa: B023
        rows.append((f"read the path at depth {depth:,}", ours, theirs))
    counter = iter(range(10**6))
    ours = timed(lambda: session.fork(f"fork{next(counter)}", at="main"), args.repeat, 50)
    theirs = timed(lambda: floor.fork(f"fork{next(counter)}", "main"), args.repeat, 50)
    rows.append(("fork", ours, theirs))
    for name, a, b in rows:
        print(f"{name:32} {a * 1000:9.3f} ms  {b * 1000:9.3f} ms  {a / b:5.2f}x")
    store.close()
    floor.close()

    print(f"\nappends per second, each writer its own session and pool ({args.seconds:g} s)")
    one = None
    for processes in (1, 4, 8):
        rate = throughput(url, processes, args.seconds)
        one = one or rate
        print(f"{processes} writer(s): {rate:8.0f}/s  {rate / one:4.2f}x one writer")
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {url.partition('?schema=')[2]} CASCADE")


if __name__ == "__main__":
    main()
