"""What a ref means in a store: the one place a ref is turned into a node or a session.

Contract: a *ref* is a branch name, a checkpoint name, a node id, a unique id prefix
(``names.MIN_PREFIX``+ characters, any case) or a ``Node``, optionally followed
git-style by ``~N``: the Nth ancestor *message* (markers are stepped over), or with
``~N!`` the Nth ancestor node. ``names`` parses a ref's text (``split_ancestry``,
``counts_every_node``) and keeps names from ever looking like ids; this module
says what a ref points at, and every message about a ref that points at nothing,
or at more than one thing:

- ``locate``: the node a ref points at in one session. A whole id is looked up as a
  node first (no name can be one), then as a branch or checkpoint name, then as a
  node id of another shape (an import's), then as a unique prefix of one of the
  session's nodes; ``~N`` then walks up, and says so when it goes past the root.
- ``node``: a node of any session, by ``Node``, id or unique prefix (``~N`` walks
  up in the node's own session, as ``locate`` does).
- ``resolve_id`` / ``session_id``: the one id in a table ("nodes", "sessions")
  equal to a ref or starting with it; ``NotFound`` / ``AmbiguousRef`` otherwise.
- ``expected_head``: the node id an ``expect_head=`` argument names.

The backends only look ids up (``Tree.has_id``, ``Tree.ids_starting_with``,
``handle``, ``ref``, ``ancestor``); ``locate`` runs inside the caller's snapshot or
transaction, so what it finds is what the caller then acts on.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, TypeGuard

from .errors import AmbiguousRef, Conflict, NotFound
from .model import Node
from .names import FULL_ID, MIN_PREFIX, check_lookup, counts_every_node, shown, split_ancestry, unstorable

if TYPE_CHECKING:
    from .storage import Storage

Ref = str | Node

AMBIGUOUS_SHOWN = 2
"""How many of the ids a prefix starts an ambiguity message names (and so looks up)."""


def resolve_id(storage: Storage, table: str, what: str, ref: str, session_key: int | None = None) -> str:
    """The id in ``table`` ("nodes" or "sessions") equal to ``ref``, or the one starting
    with it (``MIN_PREFIX``+ characters; ids are lower-case, so the prefix is read in any
    case); with ``session_key``, among that session's nodes only. ``NotFound`` naming
    ``what`` when there is none, ``AmbiguousRef`` naming two when there are more."""
    if storage.has_id(table, ref, session_key):
        return ref
    if len(ref) < MIN_PREFIX:
        raise NotFound(f"no {what} {ref!r} (id prefixes need at least {MIN_PREFIX} characters)")
    found = storage.ids_starting_with(table, ref.lower(), session_key, AMBIGUOUS_SHOWN)
    if not found:
        raise NotFound(f"no {what} {ref!r}")
    if len(found) > 1:  # the first ones it starts, then "...": there may be more
        raise AmbiguousRef(f"{what} prefix {ref!r} is ambiguous: {', '.join(found)}, ...")
    return found.pop()


def session_id(storage: Storage, id_or_prefix: str) -> str:
    """The id of the session ``id_or_prefix`` names (its id, or a unique prefix of it)."""
    if not isinstance(id_or_prefix, str) or not id_or_prefix:
        raise NotFound(f"no session {id_or_prefix!r}")
    return resolve_id(storage, "sessions", "session", check_lookup(id_or_prefix, "session"))


def locate(storage: Storage, session_key: int, session_id: str, ref: Ref) -> tuple[int, str]:
    """(row key, id) of the node ``ref`` points at in the session (``session_key``,
    ``session_id``); call inside a snapshot or transaction."""
    if isinstance(ref, Node):
        if ref.session_id != session_id:
            raise Conflict(f"node {ref.id} belongs to session {ref.session_id}, not {session_id}")
        ref = ref.id
    if not isinstance(ref, str) or not ref:
        raise NotFound(f"no node, branch or checkpoint {ref!r} in session {session_id}")
    base, generations = split_ancestry(check_lookup(ref, "node, branch or checkpoint"))
    key, node_id = _locate_base(storage, session_key, session_id, base)
    if not generations:
        return key, node_id
    # The walk stops at the root, so even a huge count (capped by split_ancestry to fit
    # a 64-bit integer) costs at most the depth.
    every = counts_every_node(ref)
    ancestor = storage.ancestor(key, generations, messages_only=not every)
    if ancestor is None:
        depth = storage.node(node_id).depth
        # Deep enough, but not in messages: say why, and how to count every node.
        why = "" if every or depth < generations else "; ~N counts messages, ~N! every node"
        raise NotFound(f"{shown(ref)} goes past the root: {shown(base)} is at depth {depth}{why}")
    return ancestor.key, ancestor.id


def _locate_base(storage: Storage, session_key: int, session_id: str, ref: str) -> tuple[int, str]:
    """``locate`` for a ref without ``~N``."""
    # A whole id is never a name (new names cannot look like ids): the node is looked up first.
    whole_id = FULL_ID.fullmatch(ref) is not None
    handle = storage.handle(ref) if whole_id else None
    if handle is None:
        found = storage.ref(session_key, ref)
        if found is not None:
            if found.key is None or found.id is None:
                raise NotFound(f"branch {shown(ref)} has no nodes yet")
            return found.key, found.id
        if not whole_id:  # an imported id of another shape
            handle = storage.handle(ref)
    if handle is not None:
        if handle.session_id != session_id:
            raise Conflict(f"node {ref} belongs to session {handle.session_id}, not {session_id}")
        return handle.key, ref
    try:
        node_id = resolve_id(storage, "nodes", "node", ref, session_key)
    except NotFound:
        hint = f" (id prefixes need at least {MIN_PREFIX} characters)" if len(ref) < MIN_PREFIX else ""
        raise NotFound(f"no node, branch or checkpoint {shown(ref)} in session {session_id}{hint}") from None
    handle = storage.handle(node_id)
    assert handle is not None
    return handle.key, node_id


def node(storage: Storage, ref: Ref) -> Node:
    """A node of any session: a ``Node``, an id or unique id prefix, optionally ``~N``."""
    if isinstance(ref, Node):
        return storage.node(ref.id)
    if not isinstance(ref, str) or not ref:
        raise NotFound(f"no node {ref!r}")
    base, generations = split_ancestry(check_lookup(ref, "node"))
    found = None
    if FULL_ID.fullmatch(base):  # a whole id: read it at once (on a server, one round trip less)
        with contextlib.suppress(NotFound):
            found = storage.node(base)
    if found is None:
        found = storage.node(resolve_id(storage, "nodes", "node", base))
    if not generations:
        return found
    # Walked up in its own session, named by its whole id (as messages then say).
    row = storage.session_row(found.session_id)
    with storage.snapshot():
        return storage.node(locate(storage, row.key, row.id, f"{found.id}{ref[len(base) :]}")[1])


def expected_head(storage: Storage, session_key: int, session_id: str, expect_head: Ref | None) -> str | None:
    """The node id an ``expect_head=`` argument names in the session (None: no
    compare-and-set). A whole id is taken as it is: the compare-and-set compares it."""
    if expect_head is None:
        return None
    if isinstance(expect_head, Node):
        if expect_head.session_id != session_id:
            raise Conflict(
                f"node {expect_head.id} belongs to session {expect_head.session_id}, not {session_id}"
            )
        return expect_head.id
    if isinstance(expect_head, str):
        if FULL_ID.fullmatch(expect_head):
            return expect_head
        with storage.snapshot():
            return locate(storage, session_key, session_id, expect_head)[1]
    raise TypeError(f"expect_head must be a Node, a node id or None, not {type(expect_head).__name__}")


def plain_name(ref: Ref) -> TypeGuard[str]:
    """Whether ``ref`` may be a branch or checkpoint name as written (no ``~N``, not a
    whole id): what ``locate`` looks up first as a name, so finding it as one gives the
    node ``locate`` would. Anything else, or a name not found, goes the general way."""
    return (
        isinstance(ref, str)
        and bool(ref)
        and "~" not in ref
        and FULL_ID.fullmatch(ref) is None
        and unstorable(ref) is None
    )


def ref_text(ref: Ref) -> str:
    """A ref as a message quotes it."""
    return ref.id if isinstance(ref, Node) else shown(ref)


__all__ = ["Ref", "expected_head", "locate", "node", "plain_name", "ref_text", "resolve_id", "session_id"]
