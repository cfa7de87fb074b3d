"""The sessions the search and trash modules of the conformance suite read: two
sessions, a fork, a checkpoint, a tool call and its result, and text PostgreSQL's
parser refuses (a NUL, a lone surrogate)."""

from __future__ import annotations

from sessiontree import Store

from conftest import assistant, user

CALL = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}


def fill(store: Store):
    a = store.create_session("weather")
    a.append_many([user("What is the weather in Paris?"), assistant("Sunny in Paris, 21C.")])
    a.checkpoint("answered", at="main")
    a.fork("other", at="main~1")
    a.append(assistant(None, [CALL]), branch="other")
    a.append(
        {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "Rain in Oslo"},
        branch="other",
    )
    b = store.create_session("cooking")
    b.append(user("A recipe with paris mushrooms, please"))
    b.append(
        {"role": "user", "content": "before\x00after and \ud800 odd"}
    )  # what PostgreSQL's parser refuses
    return a, b


def found(store: Store, query: str, **filters) -> list[str]:
    return sorted(hit.node.payload.get("content") or "" for hit in store.search(query, **filters))


# Names and texts full of SQL metacharacters and wildcards: each is just a name.
SQLISH = [
    "'; DROP TABLE nodes; --",
    "%",
    "_",
    "%%",
    "__",
    "a%b_c",
    "it's",
    'say "hi"',
    "Robert'); DROP TABLE sessions;--",
    "\\",
    "main%",
    "ma_n",
    "🌳 tree",
    "x' OR '1'='1",
]
