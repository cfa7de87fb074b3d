"""A node of any size is stored whole on both backends, and search finds its words.

A PostgreSQL ``tsvector`` holds at most 1 MB, so the server's search columns index
the longest start of a huge text that fits (``migrations/postgres/0011``); SQLite's
FTS5 indexes it all. Either way the payload is stored and read back byte for byte.
"""

from __future__ import annotations

import json

import pytest

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


def indexed_words(store: Store, node_id: str, part: str = "text") -> int | None:
    """How many words of the node's text (or tool texts) the server's vector holds (None
    on SQLite: all). The text's words carry weight A, the tools' the default, D."""
    if not store.path.startswith("postgresql://"):
        return None
    weight = {"text": "a", "tools": "d"}[part]
    sql = f"SELECT length(ts_filter(search_vector, '{{{weight}}}')) FROM nodes WHERE id = ?"
    ((count,),) = raw(store, sql, (node_id,))
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


@pytest.mark.slow  # tens of megabytes written and read back
def test_many_megabytes_through_append_many_in_one_chain(any_store):
    s = any_store.create_session("chain")
    nodes = s.append_many([user(HUGE), {"role": "assistant", "content": BIG}, user("small")])
    assert [m["content"] for m in any_store.session(s.id).messages()] == [HUGE, BIG, "small"]
    assert hits(any_store, "h0000000") == [nodes[0].id]
    assert hits(any_store, "w0000000", role="assistant") == [nodes[1].id]
    assert hits(any_store, "small") == [nodes[2].id]
    assert s.verify().ok


@pytest.mark.slow  # megabytes through the loop: 2.4 s on a server
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
    kept = indexed_words(any_store, result.id, "tools")
    assert kept is None or 50_000 < kept < 600_000
    assert hits(any_store, "h0000000") == [result.id]
    assert hits(any_store, "h0000000", tools=False) == []
    assert s.verify().ok


def test_the_densest_payload_indexed_whole_fits_text_and_tools_together(any_store):
    """One-character words of 3- and 4-byte characters make the largest vector a character
    can: a payload just under the size the server indexes whole without measuring
    (174,000 characters), half text and half tool call, is stored and found."""
    letters = [
        chr(c)
        for start, end in [(0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0x20000, 0x2A6DF)]
        for c in range(start, end)
    ]
    half = len(letters) // 2
    call = tool_call("look", json.dumps({"q": " ".join(letters[half:])}, ensure_ascii=False))
    s = any_store.create_session("dense")
    node = s.append({"role": "assistant", "content": " ".join(letters[:half]), "tool_calls": [call]})
    assert 140_000 < len(node.payload_json) < 174_000
    assert indexed_words(any_store, node.id) in (None, half)
    assert hits(any_store, letters[7]) == [node.id]
    assert hits(any_store, letters[-7]) == [node.id]
    assert hits(any_store, letters[-7], tools=False) == []


def test_a_huge_text_and_huge_tool_calls_in_one_message_share_the_index(any_store):
    s = any_store.create_session("both")
    call = tool_call("grep", {"pattern": distinct_words(150_000, "t")})
    node = s.append({"role": "assistant", "content": BIG, "tool_calls": [call]})
    assert s.node(node.id).payload == {"role": "assistant", "content": BIG, "tool_calls": [call]}
    text, tools = indexed_words(any_store, node.id), indexed_words(any_store, node.id, "tools")
    if text is not None and tools is not None:  # each took about half of what one alone takes
        assert 20_000 < text < 50_000 and 20_000 < tools < 50_000
    assert hits(any_store, "w0000000 t0000000") == [node.id]
    assert hits(any_store, "t0000000", tools=False) == []
