"""A node of any size is stored whole on both backends, and search finds its words.

A PostgreSQL ``tsvector`` holds at most 1 MB, so the server's search columns index
the longest start of a huge text that fits (``migrations/postgres/0011``); SQLite's
FTS5 indexes it all. Either way the payload is stored and read back byte for byte.
"""

from __future__ import annotations

import sessiontree
from sessiontree import Store, tool
from sessiontree.testing import ScriptedModel, reply, tool_call

from conftest import raw, user

WORD_BYTES = 9  # "w0000042 "


def distinct_words(count: int, prefix: str = "w") -> str:
    """``count`` words that are all different: the worst text for a tsvector."""
    return " ".join(f"{prefix}{i:07d}" for i in range(count))


BIG = distinct_words(150_000)  # 1.35 MB: before step 11, 87,382 of these failed the insert
HUGE = distinct_words(600_000, "h")  # 5.4 MB


def indexed_words(store: Store, node_id: str, column: str = "search_text") -> int | None:
    """How many words the server's column holds for the node (None on SQLite: all)."""
    if not store.path.startswith("postgresql://"):
        return None
    ((count,),) = raw(store, f"SELECT length({column}) FROM nodes WHERE id = ?", (node_id,))
    return int(count)


def hits(store: Store, query: str, **filters) -> list[str]:
    return [hit.node.id for hit in store.search(query, **filters)]


def test_a_message_of_1_3_mb_of_distinct_words_is_stored_and_searchable(any_store):
    s = any_store.create_session("big")
    node = s.append(user(BIG))
    assert s.node(node.id).payload["content"] == BIG
    assert any_store.session(s.id).messages()[-1]["content"] == BIG  # past the cache too
    kept = indexed_words(any_store, node.id)
    if kept is not None:  # the server indexed a start of the text, cut before a word
        assert 50_000 < kept < 150_000
        last, beyond = f"w{kept - 1:07d}", f"w{kept:07d}"
        assert hits(any_store, last) == [node.id] and hits(any_store, beyond) == []
    else:
        assert hits(any_store, "w0149999") == [node.id]
    assert hits(any_store, "w0000000") == [node.id]
    assert hits(any_store, '"w0000001 w0000002"') == [node.id]
    assert hits(any_store, "w0000003", tools=False) == [node.id]
    assert s.verify().ok


def test_many_megabytes_through_append_many_in_one_chain(any_store):
    s = any_store.create_session("chain")
    nodes = s.append_many([user(HUGE), {"role": "assistant", "content": BIG}, user("small")])
    assert [m["content"] for m in any_store.session(s.id).messages()] == [HUGE, BIG, "small"]
    assert hits(any_store, "h0000000") == [nodes[0].id]
    assert hits(any_store, "w0000000", role="assistant") == [nodes[1].id]
    assert hits(any_store, "small") == [nodes[2].id]
    assert s.verify().ok


def test_a_huge_tool_result_and_a_huge_reply_in_the_agent_loop_are_stored(any_store):
    @tool
    def dump() -> str:
        """Returns a very large listing."""
        return HUGE

    s = any_store.create_session("agent")
    s.append(user("dump it"))
    model = ScriptedModel([reply(None, tool_call("dump", {}, id="d")), reply(BIG)])
    steps = list(sessiontree.run(any_store, s, call=model, tools=[dump]))
    assert steps[-1].reason == "completed"
    messages = any_store.session(s.id).messages()
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[2]["content"] == HUGE and messages[3]["content"] == BIG
    assert model.calls[-1]["messages"][2]["content"] == HUGE  # what the model was sent
    (result,) = [n for n in s.path("main") if n.payload.get("role") == "tool"]
    kept = indexed_words(any_store, result.id, "search_tools")
    assert kept is None or 50_000 < kept < 600_000
    assert hits(any_store, "h0000000") == [result.id]
    assert hits(any_store, "h0000000", tools=False) == []
    assert s.verify().ok
