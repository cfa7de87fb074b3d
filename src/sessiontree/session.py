"""One session tree: append, read paths, and move named pointers.

Contract:
- Nodes are immutable and only ever added. ``append`` adds a child of a
  branch's head (or of an explicit ``parent``) and moves the head, in one
  transaction; ``expect_head`` makes the move a compare-and-set that raises
  ``BranchMoved`` when the head is not what the caller last saw.
- A *ref* is a branch name, a checkpoint name, a node id, a unique id prefix
  (4+ characters) or a ``Node``. Branch and checkpoint names share one
  namespace per session, so a name always means one thing.
- Branches move; checkpoints never do. Forking is one row; nothing is copied.
- ``path`` reads root-to-node in one recursive query, whatever the depth.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .errors import AmbiguousRef, BranchMoved, CheckpointImmutable, Conflict, InvalidPayload, NotFound
from .ids import new_id, now
from .model import (
    Branch,
    Checkpoint,
    Completion,
    Diff,
    ModelUsage,
    Node,
    Usage,
    encode_json,
    encode_payload,
)

if TYPE_CHECKING:
    from .model import PruneReport, VerifyReport
    from .store import Store

NODE_COLUMNS = "id, session_id, parent_id, depth, kind, payload, created_at, run_id"
BRANCH_COLUMNS = "session_id, name, head_id, created_at, updated_at, metadata"
MAX_NAME = 200
MIN_PREFIX = 4
_FULL_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

Ref = str | Node
RunLike = str | Completion | dict[str, Any] | None

_PATH_SQL = f"""
WITH RECURSIVE path({NODE_COLUMNS}) AS (
    SELECT {NODE_COLUMNS} FROM nodes WHERE id = ?
    UNION ALL
    SELECT {", ".join("n." + c.strip() for c in NODE_COLUMNS.split(","))}
    FROM nodes n JOIN path ON n.id = path.parent_id
)
SELECT {NODE_COLUMNS} FROM path ORDER BY depth
"""


def node_from_row(row: tuple) -> Node:
    return Node(*row)


def branch_from_row(row: tuple) -> Branch:
    return Branch(row[0], row[1], row[2], row[3], row[4], json.loads(row[5]))


def resolve_prefix(
    conn: sqlite3.Connection, table: str, what: str, prefix: str, where: str = "", params: tuple = ()
) -> str:
    """The one id in ``table`` starting with ``prefix`` (at least MIN_PREFIX characters)."""
    if len(prefix) < MIN_PREFIX:
        raise NotFound(f"no {what} {prefix!r} (id prefixes need at least {MIN_PREFIX} characters)")
    # A range scan on the primary key: ids are lower-case hex and dashes.
    rows = conn.execute(
        f"SELECT id FROM {table} WHERE id >= ? AND id < ? {where} ORDER BY id LIMIT 2",
        (prefix.lower(), prefix.lower() + "\uffff", *params),
    ).fetchall()
    if not rows:
        raise NotFound(f"no {what} {prefix!r}")
    if len(rows) > 1:
        raise AmbiguousRef(f"{what} prefix {prefix!r} is ambiguous: {rows[0][0]}, {rows[1][0]}, ...")
    return rows[0][0]


def check_text(text: str | None, what: str) -> str | None:
    """Text SQLite can store as UTF-8: no lone surrogates."""
    if isinstance(text, str) and any("\ud800" <= c <= "\udfff" for c in text):
        raise InvalidPayload(f"{what} {text!r} holds a lone surrogate, which is not valid Unicode text")
    return text


def check_name(name: str, what: str = "branch") -> str:
    """Names are 1-200 printable characters without surrounding spaces."""
    if not isinstance(name, str) or not name or name != name.strip() or len(name) > MAX_NAME:
        raise Conflict(
            f"invalid {what} name {name!r}: use 1-{MAX_NAME} characters, no leading or trailing spaces"
        )
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise Conflict(f"invalid {what} name {name!r}: control characters are not allowed")
    if any("\ud800" <= c <= "\udfff" for c in name):
        raise Conflict(f"invalid {what} name {name!r}: lone surrogates are not allowed")
    return name


class Session:
    """A handle on one conversation tree in a ``Store``."""

    def __init__(
        self,
        store: Store,
        id: str,
        title: str | None,
        metadata: dict[str, Any],
        created_at: str,
        archived_at: str | None = None,
    ) -> None:
        self.store = store
        self.id = id
        self.title = title
        self.metadata = metadata
        self.created_at = created_at
        self.archived_at = archived_at

    def __repr__(self) -> str:
        return f"Session(id={self.id!r}, title={self.title!r})"

    @property
    def conn(self) -> sqlite3.Connection:
        return self.store.conn

    # -- resolving refs --------------------------------------------------

    def resolve(self, ref: Ref) -> str:
        """The node id a ref points at (see the module docstring for what a ref is)."""
        if isinstance(ref, Node):
            if ref.session_id != self.id:
                raise Conflict(f"node {ref.id} belongs to session {ref.session_id}, not {self.id}")
            return ref.id
        if not isinstance(ref, str) or not ref:
            raise NotFound(f"no node, branch or checkpoint {ref!r} in session {self.id}")
        row = self.conn.execute(
            "SELECT head_id FROM branches WHERE session_id = ? AND name = ?"
            " UNION ALL SELECT node_id FROM checkpoints WHERE session_id = ? AND name = ?",
            (self.id, ref, self.id, ref),
        ).fetchone()
        if row is not None:
            if row[0] is None:
                raise NotFound(f"branch {ref!r} has no nodes yet")
            return row[0]
        row = self.conn.execute("SELECT session_id FROM nodes WHERE id = ?", (ref,)).fetchone()
        if row is not None:
            if row[0] != self.id:
                raise Conflict(f"node {ref} belongs to session {row[0]}, not {self.id}")
            return ref
        try:
            return resolve_prefix(self.conn, "nodes", "node", ref, "AND session_id = ?", (self.id,))
        except NotFound:
            hint = f" (id prefixes need at least {MIN_PREFIX} characters)" if len(ref) < MIN_PREFIX else ""
            raise NotFound(f"no node, branch or checkpoint {ref!r} in session {self.id}{hint}") from None

    def expected_head(self, expect_head: Ref | None) -> str | None:
        """The node id an ``expect_head=`` argument names (None: no compare-and-set)."""
        if expect_head is None:
            return None
        if isinstance(expect_head, Node):
            return self.resolve(expect_head)
        if isinstance(expect_head, str):
            return expect_head if _FULL_ID.fullmatch(expect_head) else self.resolve(expect_head)
        raise TypeError(f"expect_head must be a Node, a node id or None, not {type(expect_head).__name__}")

    # -- writing nodes ---------------------------------------------------

    def append(
        self,
        payload: dict[str, Any],
        *,
        branch: str | None = "main",
        parent: Ref | None = None,
        kind: str = "message",
        run: RunLike = None,
        expect_head: Ref | None = None,
    ) -> Node:
        """Add one node and move ``branch`` to it.

        The node is a child of ``parent`` if given, else of the branch head (a
        new root when the branch is new). With ``branch=None`` no branch moves.
        Given both, the branch must be new or at ``parent``.
        """
        return self.append_many(
            [payload], branch=branch, parent=parent, kind=kind, run=run, expect_head=expect_head
        )[0]

    def append_many(
        self,
        payloads: Iterable[dict[str, Any]],
        *,
        branch: str | None = "main",
        parent: Ref | None = None,
        kind: str = "message",
        run: RunLike = None,
        expect_head: Ref | None = None,
    ) -> list[Node]:
        """Append a chain of nodes (each the child of the one before) in one transaction."""
        texts = [encode_payload(p, kind) for p in payloads]
        if not texts:
            return []
        if branch is not None:
            check_name(branch)
        with self.store.transaction() as conn:
            parent_id, depth, branch_exists, parent_kind = self._place(
                conn, branch, parent, self.expected_head(expect_head)
            )
            if kind == "decision" and parent_kind != "pause":
                raise Conflict(
                    f"a decision must be the child of a pause, not of "
                    f"{parent_kind or 'nothing'} node {parent_id}"
                )
            run_id = self._record_run(conn, run)
            created = now()
            rows = []
            for text in texts:
                node_id = new_id()
                rows.append((node_id, self.id, parent_id, depth, kind, text, created, run_id))
                parent_id, depth = node_id, depth + 1
            self._insert_nodes(conn, rows)
            if branch is not None:
                self._set_head(conn, branch, parent_id, created, exists=branch_exists)
        return [node_from_row(r) for r in rows]

    def _place(
        self, conn: sqlite3.Connection, branch: str | None, parent: Ref | None, expect_head: str | None
    ) -> tuple[str | None, int, bool, str | None]:
        """Where a new node goes: (parent id, depth, whether the branch exists, parent kind)."""
        head = head_depth = head_kind = None
        exists = False
        if branch is not None:
            row = conn.execute(
                "SELECT b.head_id, n.depth, n.kind FROM branches b LEFT JOIN nodes n ON n.id = b.head_id"
                " WHERE b.session_id = ? AND b.name = ?",
                (self.id, branch),
            ).fetchone()
            if row is not None:
                exists, (head, head_depth, head_kind) = True, row
            if expect_head is not None and expect_head != head:
                raise BranchMoved(branch, expect_head, head)
        elif expect_head is not None:
            raise Conflict("expect_head needs a branch")
        if parent is None:
            if branch is None:
                raise Conflict("append needs a branch or a parent")
            return head, 0 if head is None else head_depth + 1, exists, head_kind
        parent_id = self.resolve(parent)
        parent_depth, parent_kind = conn.execute(
            "SELECT depth, kind FROM nodes WHERE id = ?", (parent_id,)
        ).fetchone()
        if head is not None and head != parent_id:
            raise Conflict(
                f"branch {branch!r} is at {head}, not at the parent {parent_id}: "
                "append with branch=None, fork a new branch, or move this one first"
            )
        return parent_id, parent_depth + 1, exists, parent_kind

    def _insert_nodes(self, conn: sqlite3.Connection, rows: list[tuple]) -> None:
        try:
            conn.executemany(f"INSERT INTO nodes ({NODE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
        except sqlite3.IntegrityError as e:
            parent_id = rows[0][2]
            if "nodes.parent_id" in str(e):
                raise Conflict(f"pause {parent_id} already has a decision") from None
            if "FOREIGN KEY" in str(e):
                run_id = rows[0][7]
                if run_id and not conn.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone():
                    raise NotFound(f"no run {run_id!r}") from None
                raise NotFound(f"parent node {parent_id} is not in session {self.id}") from None
            raise

    def _set_head(
        self,
        conn: sqlite3.Connection,
        branch: str,
        head_id: str | None,
        when: str,
        *,
        exists: bool,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        if exists:
            conn.execute(
                "UPDATE branches SET head_id = ?, updated_at = ? WHERE session_id = ? AND name = ?",
                (head_id, when, self.id, branch),
            )
            return
        self._check_name_free(conn, branch, "branch")
        conn.execute(
            "INSERT INTO branches (session_id, name, head_id, metadata, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (self.id, branch, head_id, encode_json(metadata or {}, "branch metadata"), when, when),
        )

    def _check_name_free(self, conn: sqlite3.Connection, name: str, what: str) -> None:
        check_name(name, what)
        row = conn.execute(
            "SELECT 'branch' FROM branches WHERE session_id = ? AND name = ?"
            " UNION ALL SELECT 'checkpoint' FROM checkpoints WHERE session_id = ? AND name = ?",
            (self.id, name, self.id, name),
        ).fetchone()
        if row is not None:
            raise Conflict(f"a {row[0]} named {name!r} already exists in session {self.id}")

    def record_run(self, run: Completion | dict[str, Any]) -> str:
        """Store a model call's provenance (without its message) and return the run id."""
        with self.store.transaction() as conn:
            return self._record_run(conn, run)

    def _record_run(self, conn: sqlite3.Connection, run: RunLike) -> str | None:
        if run is None or isinstance(run, str):
            return run
        fields = run.__dict__ if isinstance(run, Completion) else run
        run_id = new_id()
        conn.execute(
            "INSERT INTO runs (id, session_id, model, provider, params, usage, latency_ms,"
            " finish_reason, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                run_id,
                self.id,
                fields.get("model"),
                fields.get("provider"),
                encode_json(fields.get("params") or {}, "run params", default=str),
                encode_json(fields.get("usage") or {}, "run usage", default=str),
                fields.get("latency_ms"),
                fields.get("finish_reason"),
                now(),
            ),
        )
        return run_id

    def edit(self, node: Ref, payload: dict[str, Any], *, branch: str) -> Node:
        """A sibling of ``node`` carrying ``payload``, on the new branch ``branch``."""
        original = self.node(node)
        text = encode_payload(payload, original.kind)
        with self.store.transaction() as conn:
            self._check_name_free(conn, branch, "branch")
            created = now()
            row = (new_id(), self.id, original.parent_id, original.depth, original.kind, text, created, None)
            self._insert_nodes(conn, [row])
            self._set_head(conn, branch, row[0], created, exists=False)
        return node_from_row(row)

    # -- reading ---------------------------------------------------------

    def node(self, ref: Ref) -> Node:
        node_id = self.resolve(ref)
        row = self.conn.execute(f"SELECT {NODE_COLUMNS} FROM nodes WHERE id = ?", (node_id,)).fetchone()
        return node_from_row(row)

    def head(self, branch: str = "main") -> Node | None:
        """The node a branch points at, or None for a branch with no node yet."""
        head_id = self.branch(branch).head_id
        return None if head_id is None else self.node(head_id)

    def children(self, ref: Ref) -> list[Node]:
        node_id = self.resolve(ref)
        rows = self.conn.execute(
            f"SELECT {NODE_COLUMNS} FROM nodes WHERE parent_id = ? ORDER BY id", (node_id,)
        ).fetchall()
        return [node_from_row(r) for r in rows]

    def path(self, ref: Ref) -> list[Node]:
        """Root-to-node, in one recursive query."""
        rows = self.conn.execute(_PATH_SQL, (self.resolve(ref),)).fetchall()
        return [node_from_row(r) for r in rows]

    def messages(self, ref: Ref = "main") -> list[dict[str, Any]]:
        """The chat messages on the path to ``ref``: what a chat-completions API takes."""
        return [n.payload for n in self.path(ref) if n.kind == "message"]

    def tree(self) -> list[Node]:
        """Every node of the session, parents before children."""
        rows = self.conn.execute(
            f"SELECT {NODE_COLUMNS} FROM nodes WHERE session_id = ? ORDER BY depth, id", (self.id,)
        ).fetchall()
        return [node_from_row(r) for r in rows]

    def leaves(self) -> list[Node]:
        """Nodes without children."""
        rows = self.conn.execute(
            f"SELECT {NODE_COLUMNS} FROM nodes n WHERE session_id = ? AND NOT EXISTS"
            " (SELECT 1 FROM nodes c WHERE c.parent_id = n.id) ORDER BY id",
            (self.id,),
        ).fetchall()
        return [node_from_row(r) for r in rows]

    def pending(self) -> list[Node]:
        """This session's unresolved pauses."""
        return self.store.pending(self.id)

    def common_ancestor(self, a: Ref, b: Ref) -> Node | None:
        """The deepest node on both paths, or None when they share no root."""
        row = self.conn.execute(
            f"""
            WITH RECURSIVE
              pa(id, parent_id) AS (SELECT id, parent_id FROM nodes WHERE id = :a
                UNION ALL SELECT n.id, n.parent_id FROM nodes n JOIN pa ON n.id = pa.parent_id),
              pb(id, parent_id) AS (SELECT id, parent_id FROM nodes WHERE id = :b
                UNION ALL SELECT n.id, n.parent_id FROM nodes n JOIN pb ON n.id = pb.parent_id)
            SELECT {NODE_COLUMNS} FROM nodes
            WHERE id IN (SELECT id FROM pa INTERSECT SELECT id FROM pb)
            ORDER BY depth DESC LIMIT 1
            """,
            {"a": self.resolve(a), "b": self.resolve(b)},
        ).fetchone()
        return None if row is None else node_from_row(row)

    def diff(self, a: Ref, b: Ref) -> Diff:
        """The common ancestor of two refs and the nodes each adds after it."""
        path_a, path_b = self.path(a), self.path(b)
        shared = 0
        for x, y in zip(path_a, path_b, strict=False):
            if x.id != y.id:
                break
            shared += 1
        return Diff(path_a[shared - 1] if shared else None, path_a[shared:], path_b[shared:])

    # -- usage -------------------------------------------------------------

    def usage(self, ref: Ref = "main", *, since: Ref | None = None) -> Usage:
        """Model calls on the path to ``ref`` (only those after ``since``, if given)."""
        after = -1 if since is None else self.node(since).depth
        return self._usage(
            """WITH RECURSIVE picked(id, parent_id, depth, run_id) AS (
                 SELECT id, parent_id, depth, run_id FROM nodes WHERE id = :start AND depth > :after
                 UNION ALL SELECT n.id, n.parent_id, n.depth, n.run_id
                 FROM nodes n JOIN picked ON n.id = picked.parent_id WHERE n.depth > :after)""",
            {"start": self.resolve(ref), "after": after},
        )

    def subtree_usage(self, ref: Ref) -> Usage:
        """Model calls in ``ref`` and everything below it, on every branch."""
        return self._usage(
            """WITH RECURSIVE picked(id, run_id) AS (
                 SELECT id, run_id FROM nodes WHERE id = :start
                 UNION ALL SELECT n.id, n.run_id FROM nodes n JOIN picked ON n.parent_id = picked.id)""",
            {"start": self.resolve(ref), "after": -1},
        )

    def _usage(self, picked_cte: str, params: dict[str, Any]) -> Usage:
        rows = self.conn.execute(
            picked_cte
            + """
            SELECT coalesce(r.model, '?'), count(*), coalesce(sum(r.input_tokens), 0),
                   coalesce(sum(r.output_tokens), 0), coalesce(sum(r.latency_ms), 0.0)
            FROM (SELECT DISTINCT run_id FROM picked WHERE run_id IS NOT NULL) p
            JOIN runs r ON r.id = p.run_id
            GROUP BY 1 ORDER BY 1""",
            params,
        ).fetchall()
        return Usage(
            {
                model: ModelUsage(calls, tokens_in, tokens_out, latency)
                for model, calls, tokens_in, tokens_out, latency in rows
            }
        )

    # -- branches --------------------------------------------------------

    def branch(self, name: str) -> Branch:
        row = self.conn.execute(
            f"SELECT {BRANCH_COLUMNS} FROM branches WHERE session_id = ? AND name = ?", (self.id, name)
        ).fetchone()
        if row is None:
            raise NotFound(f"no branch {name!r} in session {self.id}")
        return branch_from_row(row)

    def branches(self) -> list[Branch]:
        rows = self.conn.execute(
            f"SELECT {BRANCH_COLUMNS} FROM branches WHERE session_id = ? ORDER BY name", (self.id,)
        ).fetchall()
        return [branch_from_row(r) for r in rows]

    def fork(self, name: str, *, at: Ref, metadata: dict[str, Any] | None = None) -> Branch:
        """A new branch pointing at ``at``. One row; nothing is copied."""
        with self.store.transaction() as conn:
            node_id = self.resolve(at)
            self._set_head(conn, name, node_id, now(), exists=False, metadata=metadata)
        return self.branch(name)

    def move(self, name: str, *, to: Ref, expect_head: Ref | None = None) -> Branch:
        """Point an existing branch somewhere else (compare-and-set with ``expect_head``)."""
        with self.store.transaction() as conn:
            current = self._existing_branch_head(name)
            expected = self.expected_head(expect_head)
            if expected is not None and expected != current:
                raise BranchMoved(name, expected, current)
            self._set_head(conn, name, self.resolve(to), now(), exists=True)
        return self.branch(name)

    def _existing_branch_head(self, name: str, doing: str = "move") -> str | None:
        try:
            return self.branch(name).head_id
        except NotFound:
            if any(c.name == name for c in self.checkpoints()):
                if doing == "move":
                    raise CheckpointImmutable(
                        f"{name!r} is a checkpoint, and checkpoints never move; fork a branch from it"
                    ) from None
                raise Conflict(
                    f"{name!r} is a checkpoint, not a branch"
                    + ("; use delete_checkpoint" if doing == "delete" else "")
                ) from None
            raise

    def rename(self, old: str, new: str) -> Branch:
        with self.store.transaction() as conn:
            self._existing_branch_head(old, "rename")
            if new == old:
                return self.branch(old)
            self._check_name_free(conn, new, "branch")
            conn.execute(
                "UPDATE branches SET name = ?, updated_at = ? WHERE session_id = ? AND name = ?",
                (new, now(), self.id, old),
            )
        return self.branch(new)

    def delete_branch(self, name: str) -> None:
        """Remove the pointer only; its nodes stay until ``prune``."""
        with self.store.transaction() as conn:
            self._existing_branch_head(name, "delete")
            conn.execute("DELETE FROM branches WHERE session_id = ? AND name = ?", (self.id, name))

    # -- checkpoints -----------------------------------------------------

    def checkpoint(self, name: str, *, at: Ref) -> Checkpoint:
        """A named pointer at ``at`` that never moves."""
        with self.store.transaction() as conn:
            self._check_name_free(conn, name, "checkpoint")
            created = now()
            node_id = self.resolve(at)
            conn.execute(
                "INSERT INTO checkpoints (session_id, name, node_id, created_at) VALUES (?, ?, ?, ?)",
                (self.id, name, node_id, created),
            )
        return Checkpoint(self.id, name, node_id, created)

    def checkpoints(self) -> list[Checkpoint]:
        rows = self.conn.execute(
            "SELECT session_id, name, node_id, created_at FROM checkpoints"
            " WHERE session_id = ? ORDER BY name",
            (self.id,),
        ).fetchall()
        return [Checkpoint(*r) for r in rows]

    def delete_checkpoint(self, name: str) -> None:
        with self.store.transaction() as conn:
            deleted = conn.execute(
                "DELETE FROM checkpoints WHERE session_id = ? AND name = ?", (self.id, name)
            ).rowcount
            if not deleted:
                raise NotFound(f"no checkpoint {name!r} in session {self.id}")

    # -- whole-session operations ----------------------------------------

    def archive(self, archived: bool = True) -> None:
        self.store.archive_session(self.id, archived=archived)

    def delete(self) -> int:
        return self.store.delete_session(self.id)

    def prune(self, *, dry_run: bool = True, vacuum: bool = False) -> PruneReport:
        return self.store.prune(dry_run=dry_run, vacuum=vacuum, session_id=self.id)

    def verify(self) -> VerifyReport:
        return self.store.verify(session_id=self.id)
