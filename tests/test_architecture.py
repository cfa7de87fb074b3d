"""The shape of the package: no import cycle between sessiontree's own modules.

Every import counts, wherever it is written: at the top of a module, inside a
function, or under ``if TYPE_CHECKING:``. A cycle that is only broken by a lazy or
type-checking-only import is still a cycle between the two modules' designs.
Importing ``a.b`` also runs ``a/__init__.py``; that implicit edge is not counted,
or every package that re-exports its modules would be a cycle.
"""

from __future__ import annotations

import ast
from collections import deque
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "sessiontree"


@dataclass(frozen=True)
class Edge:
    importer: str
    imported: str
    line: int
    where: str  # "top level", "in a function", "under TYPE_CHECKING"

    def __str__(self) -> str:
        return f"{self.importer} -> {self.imported}  (line {self.line}, {self.where})"


def module_names(src: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every module of ``package`` under ``src``."""
    modules = {}
    for path in sorted((src / package).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


class _Imports(ast.NodeVisitor):
    """Collects (target module, line, where) for each import of the package's own modules."""

    def __init__(self, module: str, is_package: bool, modules: dict[str, Path], package: str) -> None:
        self.module = module
        self.here = module if is_package else module.rpartition(".")[0]
        self.modules = modules
        self.package = package
        self.where = ["top level"]
        self.found: list[tuple[str, int, str]] = []

    def _own(self, name: str) -> bool:
        return name == self.package or name.startswith(self.package + ".")

    def _add(self, target: str, line: int) -> None:
        # ``import a.b.c`` where c is a name, not a module: the longest module prefix
        while target and target not in self.modules:
            target = target.rpartition(".")[0]
        edge = (target, line, self.where[-1])
        if target and target != self.module and edge not in self.found:
            self.found.append(edge)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if self._own(alias.name):
                self._add(alias.name, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.here.split(".")
            base = base[: len(base) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        if not self._own(target):
            return
        for alias in node.names:
            submodule = f"{target}.{alias.name}"
            # ``from . import x``: module x when x is a module, else a name from the package
            self._add(submodule if submodule in self.modules else target, node.lineno)

    def visit_If(self, node: ast.If) -> None:
        self.visit(node.test)
        if _is_type_checking(node.test):
            self.where.append("under TYPE_CHECKING")
            for child in node.body:
                self.visit(child)
            self.where.pop()
        else:
            for child in node.body:
                self.visit(child)
        for child in node.orelse:
            self.visit(child)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        self.where.append("in a function" if self.where[-1] == "top level" else self.where[-1])
        self.generic_visit(node)
        self.where.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function


def import_graph(src: Path, package: str) -> dict[str, list[Edge]]:
    """Module -> the edges to the package's other modules that it imports."""
    modules = module_names(src, package)
    graph: dict[str, list[Edge]] = {}
    for name, path in modules.items():
        visitor = _Imports(name, path.name == "__init__.py", modules, package)
        visitor.visit(ast.parse(path.read_text("utf-8"), str(path)))
        graph[name] = [Edge(name, target, line, where) for target, line, where in visitor.found]
    return graph


def strongly_connected(graph: dict[str, list[Edge]]) -> list[list[str]]:
    """Tarjan's algorithm: the groups of modules that all reach each other (size > 1)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted({e.imported for e in graph[v]}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(groups)


def shortest_cycles(graph: dict[str, list[Edge]], group: list[str]) -> list[list[str]]:
    """For each module of a group, the shortest cycle through it (duplicates dropped)."""
    members = set(group)
    found: set[tuple[str, ...]] = set()
    for start in group:
        before: dict[str, str] = {}
        queue = deque([start])
        while queue:
            v = queue.popleft()
            targets = sorted({e.imported for e in graph[v]} & members)
            if start in targets:
                path = [v]
                while path[-1] != start:
                    path.append(before[path[-1]])
                cycle = path[::-1]
                turn = cycle.index(min(cycle))
                found.add(tuple(cycle[turn:] + cycle[:turn]))
                break
            for w in targets:
                if w not in before and w != start:
                    before[w] = v
                    queue.append(w)
    return [list(c) for c in sorted(found, key=lambda c: (len(c), c))]


def describe(graph: dict[str, list[Edge]], groups: list[list[str]]) -> str:
    lines = []
    for group in groups:
        lines.append(f"modules that import each other: {', '.join(group)}")
        for cycle in shortest_cycles(graph, group):
            lines.append("  cycle: " + " -> ".join(cycle + [cycle[0]]))
        members = set(group)
        lines.append("  their imports of each other:")
        for v in group:
            lines.extend(f"    {e}" for e in graph[v] if e.imported in members)
    return "\n".join(lines)


def test_every_module_is_parsed_and_its_imports_found():
    graph = import_graph(SRC, PACKAGE)
    assert set(graph) == set(module_names(SRC, PACKAGE))
    assert {"sessiontree", "sessiontree.store", "sessiontree.cli", "sessiontree.formats"} <= set(graph)
    assert any(e.imported == "sessiontree.store" for e in graph["sessiontree"])  # from .store import Store


def test_the_cycle_finder_counts_every_kind_of_import(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .a import A\n")
    (pkg / "a.py").write_text("from . import b\nA = 1\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.sub import c\n"
    )
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "c.py").write_text("def f():\n    from ..a import A\n    return A\n")
    (pkg / "d.py").write_text("import pkg.a\nfrom pkg import A\n")
    graph = import_graph(tmp_path, "pkg")
    assert {e.imported for e in graph["pkg.d"]} == {"pkg.a", "pkg"}
    assert [(e.imported, e.where) for e in graph["pkg.b"]] == [("pkg.sub.c", "under TYPE_CHECKING")]
    assert [(e.imported, e.where) for e in graph["pkg.sub.c"]] == [("pkg.a", "in a function")]
    groups = strongly_connected(graph)
    assert groups == [["pkg.a", "pkg.b", "pkg.sub.c"]]
    assert shortest_cycles(graph, groups[0]) == [["pkg.a", "pkg.b", "pkg.sub.c"]]
    assert "pkg.a -> pkg.b -> pkg.sub.c -> pkg.a" in describe(graph, groups)


def test_no_import_cycle_between_sessiontree_modules():
    graph = import_graph(SRC, PACKAGE)
    groups = strongly_connected(graph)
    assert not groups, "import cycles between sessiontree modules:\n" + describe(graph, groups)


def test_importing_sessiontree_does_not_import_sqlite_utils_or_pandas():
    """sqlite-utils imports pandas when it is installed (0.4 s and ~80 MB a process): every
    command would pay for it. It is imported where it is used (``stats``, ``sql``)."""
    import subprocess
    import sys

    code = "import sys, sessiontree.cli; print(sorted({'sqlite_utils', 'pandas'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_nothing_imports_a_framework_adapter():
    """A framework adapter imports its framework (an optional extra): the rest of sessiontree,
    the CLI included, must run without it installed, so no module imports one."""
    graph = import_graph(SRC, PACKAGE)
    adapters = {f"{PACKAGE}.integrations.openai_agents"}
    assert adapters <= set(graph)
    found = [
        str(e) for m, edges in graph.items() if m not in adapters for e in edges if e.imported in adapters
    ]
    assert not found, "a module imports a framework adapter:\n" + "\n".join(found)


# -- node-kind payloads are read and written through their records (``kinds``) --------

MARKER_KEYS = frozenset(
    {"calls", "decisions", "assistant_id", "schemas", "expires_at", "covers", "scorer", "summary"}
    | {"recipe", "during", "reason", "by"}
)
"""Keys of pause, decision, tool_start, summary, score and error payloads: only their
records in ``kinds`` subscript them. (A message payload is the chat message a model is
sent, in the API's own shape; its keys are read where it is built or sent.)"""

MARKER_KINDS = frozenset({"pause", "decision", "tool_start", "summary", "note", "error", "score"})

PAYLOAD_ALLOWED = {
    "sessiontree/kinds.py": "the records themselves",
}
"""Modules that may subscript a marker payload directly, and why."""


def _is_payload(node: ast.expr) -> bool:
    """``x.payload``, or a local named ``payload`` or ``p`` (what readers call one)."""
    if isinstance(node, ast.Attribute):
        return node.attr == "payload"
    return isinstance(node, ast.Name) and node.id in ("payload", "p")


def _key(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def marker_payload_uses(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) for each marker key read off a payload, and each marker payload written
    as a dict literal (``append({...}, kind="pause")``, ``ImportedNode(id, parent, "pause", {...})``)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _is_payload(node.value):
            key = _key(node.slice)
            if key in MARKER_KEYS:
                found.append((node.lineno, f"payload[{key!r}]"))
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in ("get", "pop", "setdefault"):
            key = _key(node.args[0]) if node.args else None
            if key in MARKER_KEYS and _is_payload(func.value):
                found.append((node.lineno, f"payload.{func.attr}({key!r})"))
        kind = next((_key(k.value) for k in node.keywords if k.arg == "kind"), None)
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name == "ImportedNode" and len(node.args) >= 4:
            kind, literal = _key(node.args[2]), node.args[3]
        else:
            literal = node.args[0] if node.args else None
        if kind in MARKER_KINDS and isinstance(literal, ast.Dict):
            found.append((node.lineno, f"a {kind} payload written as a dict literal"))
    return found


def test_the_payload_check_finds_each_way_of_reading_a_marker_key():
    code = (
        "a = node.payload['calls']\n"
        "b = node.payload.get('decisions', {})\n"
        "c = p.get('assistant_id')\n"
        "session.append({'reason': 'x', 'calls': []}, kind='pause')\n"
        "ImportedNode(i, parent, 'decision', {'decisions': {}}, at)\n"
        "ok = node.payload.get('role'), message.get('calls'), node.payload['content']\n"
        "fine = session.append({'role': 'user', 'content': 'hi'})\n"
    )
    assert [line for line, _ in marker_payload_uses(ast.parse(code))] == [1, 2, 3, 4, 5]


def test_marker_payloads_are_read_and_written_only_through_their_records():
    found = []
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        relative = path.relative_to(SRC).as_posix()
        if relative in PAYLOAD_ALLOWED:
            continue
        for line, what in marker_payload_uses(ast.parse(path.read_text(), str(path))):
            found.append(f"{relative}:{line}: {what}")
    assert not found, "use the record in sessiontree.kinds instead:\n" + "\n".join(found)


# -- storage results are read by name --------------------------------------------------


def _storage_methods() -> set[str]:
    from sessiontree.storage.base import Storage

    return {name for name in dir(Storage) if not name.startswith("_") and callable(getattr(Storage, name))}


PARTS = ("trash", "search", "upkeep")
"""The storage parts a caller reaches as ``storage.<part>.<method>(...)``."""


def _part_methods() -> set[str]:
    from sessiontree.storage import search, trash, upkeep

    parts = (trash.Trash, search.Search, upkeep.Upkeep)
    return {
        name
        for part in parts
        for name in dir(part)
        if not name.startswith("_") and callable(getattr(part, name))
    }


def _is_storage(node: ast.expr) -> bool:
    """``storage``, ``self.storage``, ``store.storage``: the storage object itself, or one
    of its parts (``storage.trash``, ...)."""
    if isinstance(node, ast.Attribute) and node.attr in PARTS:
        node = node.value
    return (isinstance(node, ast.Name) and node.id == "storage") or (
        isinstance(node, ast.Attribute) and node.attr == "storage"
    )


def _is_storage_call(node: ast.AST, methods: set[str]) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in methods
        and _is_storage(node.func.value)
    )


def _positional(node: ast.Subscript) -> bool:
    index = node.slice
    if isinstance(index, ast.UnaryOp) and isinstance(index.operand, ast.Constant):
        index = index.operand
    return isinstance(index, ast.Slice) or (isinstance(index, ast.Constant) and isinstance(index.value, int))


def positional_storage_reads(source: str, methods: set[str]) -> list[int]:
    """Lines where a storage result is read by position: indexed with a number or a slice,
    unpacked into names or into arguments (``*``), directly or through the name it was
    given (``row = storage.x(...)``, ``for row in storage.x(...)``) in the same function."""
    found: list[int] = []
    for scope in ast.walk(ast.parse(source)):
        if not isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef | ast.Module):
            continue
        nodes = _own_nodes(scope)
        named: set[str] = set()  # names given a storage result (or one row of it)
        for node in nodes:
            if isinstance(node, ast.Assign | ast.AnnAssign):
                value, targets = node.value, node.targets if isinstance(node, ast.Assign) else [node.target]
            elif isinstance(node, ast.For | ast.comprehension):
                value, targets = node.iter, [node.target]
            else:
                continue
            if value is None or not _is_storage_call(value, methods):
                continue
            named.update(target.id for target in targets if isinstance(target, ast.Name))

        found += [line for node in nodes if (line := _read_by_position(node, methods, named))]
    return sorted(set(found))


def _read_by_position(node: ast.AST, methods: set[str], named: set[str]) -> int | None:
    """The line of ``node`` if it reads a storage result (a call, or a name in ``named``)
    by position."""

    def is_result(value: ast.expr) -> bool:
        return _is_storage_call(value, methods) or (isinstance(value, ast.Name) and value.id in named)

    unpacks = (ast.Tuple, ast.List)
    if (isinstance(node, ast.Subscript) and _positional(node) or isinstance(node, ast.Starred)) and is_result(
        node.value
    ):
        return node.lineno
    if (
        isinstance(node, ast.Assign)
        and is_result(node.value)
        and any(isinstance(t, unpacks) for t in node.targets)
    ):
        return node.lineno
    if (
        isinstance(node, ast.For | ast.comprehension)
        and is_result(node.iter)
        and isinstance(node.target, unpacks)
    ):
        return node.iter.lineno
    return None


def _own_nodes(scope: ast.AST) -> list[ast.AST]:
    """The nodes of a function (or module) outside the functions defined inside it."""
    out, todo = [], list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        out.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return out


def test_the_positional_read_finder_sees_every_shape():
    methods = {"handle", "counts", "ref", "trashed", "session_row"}
    source = (
        "def f(storage, store, self):\n"
        "    a = storage.handle(x)[1]\n"  # 2
        "    key, sid = store.storage.counts(None)\n"  # 3
        "    found = self.storage.ref(k, n)\n"
        "    ok = found[0] == 'branch'\n"  # 5
        "    for sid, title, when, n in storage.trashed():\n"  # 6
        "        pass\n"
        "    S(storage, *storage.session_row(i))\n"  # 8
        "    row = storage.session_row(i)\n"
        "    k, *_ = row\n"  # 10
        "    heads = storage.trashed()\n"
        "    keys = {key for key, *_ in heads}\n"  # 12
        "    fine = storage.handle(x).key, found.id, storage.other(y)[0]\n"
        "    d = storage.nodes_by_ids(ids)[some_id]\n"
    )
    assert positional_storage_reads(source, methods) == [2, 3, 5, 6, 8, 10, 12]


def test_no_storage_result_is_read_by_position_outside_storage():
    """Every storage result is a named row (``storage.rows``): ``handle.session_id``, never
    ``handle[1]``, so a reader says what it reads and mypy checks it."""
    methods = _storage_methods() | _part_methods()
    found = []
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        if (SRC / PACKAGE / "storage") in path.parents:
            continue
        found += [
            f"{path.relative_to(SRC)}:{line}" for line in positional_storage_reads(path.read_text(), methods)
        ]
    assert not found, "storage results read by position:\n" + "\n".join(found)


def test_storage_returns_named_rows_not_tuples():
    """No method of the interface answers with a bare tuple, and the row types are frozen,
    slotted data classes (indexing or unpacking one fails), except the two that keep a
    tuple's behaviour for what compared them with tuples before they had names."""
    import dataclasses
    import typing

    from sessiontree.model import Node
    from sessiontree.storage import rows
    from sessiontree.storage.base import Storage

    def bare_tuples(hint: object) -> bool:
        if hint is tuple:
            return True
        if typing.get_origin(hint) is tuple:
            return typing.get_args(hint) != (Node, ...)
        return any(bare_tuples(arg) for arg in typing.get_args(hint))

    namespace = {**vars(rows), **vars(__import__("sessiontree.model", fromlist=["x"]))}
    tuple_results = [
        name
        for name in sorted(_storage_methods())
        if bare_tuples(typing.get_type_hints(getattr(Storage, name), localns=namespace).get("return"))
    ]
    assert not tuple_results, f"storage methods that return tuples: {tuple_results}"
    named_tuples = {"SessionRow", "ResumablePause"}
    for name, row in vars(rows).items():
        if not isinstance(row, type) or row.__module__ != rows.__name__:
            continue
        if name in named_tuples:
            assert issubclass(row, tuple)
            continue
        assert dataclasses.is_dataclass(row) and not issubclass(row, tuple), name
        assert row.__dataclass_params__.frozen and "__slots__" in vars(row), name  # type: ignore[attr-defined]


def test_the_postgres_backend_imports_nothing_of_the_sqlite_backend():
    """What both backends share (SQL text, the migration reader, row types) lives in
    modules of its own; ``storage.postgres*`` never reaches into ``storage.sqlite*``."""
    graph = import_graph(SRC, PACKAGE)
    sqlite = {m for m in graph if m.startswith(f"{PACKAGE}.storage.sqlite") or m == f"{PACKAGE}.db"}
    found = [
        str(e)
        for m, edges in graph.items()
        if m.startswith(f"{PACKAGE}.storage.postgres")
        for e in edges
        if e.imported in sqlite
    ]
    assert sqlite and not found, "the PostgreSQL backend imports the SQLite one:\n" + "\n".join(found)


def test_no_storage_part_redeclares_a_helper_as_a_stub():
    """A part holds its backend (``storage.hosts``) or takes it as a typed ``self``: no
    method in ``storage/`` raises ``NotImplementedError`` in place of its host's."""
    found = []
    for path in sorted((SRC / PACKAGE / "storage").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and node.exc is not None:
                raised = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                if isinstance(raised, ast.Name) and raised.id == "NotImplementedError":
                    found.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert not found, "stubs in storage/:\n" + "\n".join(found)


def test_storage_parts_are_held_not_inherited():
    """The trash, search and upkeep are objects a backend holds (``storage.trash``, ...),
    one class per backend; the backend class is its tree and inherits no part."""
    from sessiontree.storage import search, trash, upkeep
    from sessiontree.storage.base import Storage
    from sessiontree.storage.postgres import PostgresStorage
    from sessiontree.storage.sqlite import SQLiteStorage

    parts = {"trash": trash.Trash, "search": search.Search, "upkeep": upkeep.Upkeep}
    for backend in (SQLiteStorage, PostgresStorage):
        inherited = [part.__name__ for part in parts.values() if issubclass(backend, part)]
        assert not inherited, f"{backend.__name__} inherits {inherited}"
    import typing

    hints = typing.get_type_hints(Storage)
    assert {name: hints[name] for name in parts} == parts


def test_what_a_ref_names_is_worded_only_in_refs():
    """Ref resolution is written once (``refs``): no other module raises ``AmbiguousRef``
    or says how long an id prefix must be."""
    found = []
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        if path == SRC / PACKAGE / "refs.py":
            continue
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Raise) and node.exc is not None:
                raised = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                if isinstance(raised, ast.Name) and raised.id == "AmbiguousRef":
                    found.append(f"{path.relative_to(SRC)}:{node.lineno}")
        if "id prefixes need" in text:
            found.append(f"{path.relative_to(SRC)}: says how long an id prefix must be")
    assert not found, "ref resolution outside refs.py:\n" + "\n".join(found)
