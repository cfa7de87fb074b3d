"""One search index per message on PostgreSQL (schema steps 12 and 13), finding what two did.

Steps 4 to 11 indexed a message's words twice, in a GIN index on its text for
``tools=False`` and again in one on text and tool texts together: with prose-like
text the two took 5.3 KB of the 8.5 KB a message cost. One index now holds both,
the text's words weighted A; ``tools=False`` asks for weight A. Since step 13 the
index is on one stored vector, ``search_vector``, in place of two.
"""

from __future__ import annotations

import pytest

from sessiontree import Store

from conftest import assistant, raw, server_transaction, user

CALL = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"city": "oslo"}'}}

# What steps 4 to 12 stored as search_text and search_tools: the oracle.
TEXT_VECTOR = "to_tsvector('simple', coalesce(sessiontree_node_text(kind, payload), ''))"
TOOLS_VECTOR = "to_tsvector('simple', coalesce(sessiontree_node_tools(kind, payload), ''))"

QUERIES = [
    "paris",
    "oslo",  # in a tool call and a tool result only
    "paris -oslo",  # the text has no oslo, the tools do
    '"rain in paris"',
    '"paris lookup"',  # the text's last word, the tools' first: not a phrase of the text
    "paris OR bergen",
    "-paris",
    "lookup",
    "the",
    "o'brien",
]


def test_text_only_search_finds_what_the_text_vector_alone_finds(pg_url):
    with Store(pg_url) as store:
        s = store.create_session()
        s.append(user("Rain in Paris, said O'Brien"))
        s.append(assistant("paris", [CALL]))
        s.append({"role": "tool", "tool_call_id": "c1", "name": "lookup", "content": "oslo: rain in paris"})
        s.append(assistant("bergen is wet, paris is not"))
        for query in QUERIES:
            for tools in (False, True):
                column = TEXT_VECTOR if not tools else f"{TEXT_VECTOR} || {TOOLS_VECTOR}"
                expected = {
                    r[0]
                    for r in raw(
                        store,
                        f"SELECT id FROM nodes WHERE ({column}) @@ websearch_to_tsquery('simple', ?)",
                        (query,),
                    )
                }
                assert {h.node.id for h in store.search(query, tools=tools)} == expected, (query, tools)


def test_one_index_serves_both_searches(pg_url):
    from sessiontree.storage.postgres_find import ALL_VECTOR

    with Store(pg_url) as store:
        store.create_session().append(user("Rain in Paris"))
        indexes = raw(
            store,
            "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()"
            " AND tablename = 'nodes' AND indexdef LIKE ?",
            ("%USING gin%",),
        )
        assert indexes == [("nodes_search_all",)]
        with server_transaction(store) as conn:
            conn.execute("SET LOCAL enable_seqscan = off")  # a table this small is scanned
            for query in ("'paris'::tsquery", "sessiontree_text_query('paris'::tsquery)"):
                plan = conn.execute(f"EXPLAIN SELECT 1 FROM nodes n WHERE {ALL_VECTOR} @@ {query}")
                assert "nodes_search_all" in " ".join(line for (line,) in plan.fetchall()), query


@pytest.mark.parametrize("lexeme", ["it''s", "a\\\\b", "x\\\\''y"])
def test_the_text_query_restricts_every_lexeme_whatever_it_holds(pg_url, lexeme):
    with Store(pg_url) as store:
        ((restricted,),) = raw(store, f"SELECT sessiontree_text_query($$'{lexeme}' & !'b'$$)::text")
        assert restricted == f"'{lexeme}':A & !'b':A"
