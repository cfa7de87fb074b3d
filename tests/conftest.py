"""Shared fixtures: stores live in real files under pytest's tmp_path."""

from __future__ import annotations

import pytest

from sessiontree import Store


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "store.db") as s:
        yield s


@pytest.fixture
def session(store):
    return store.create_session("test")


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def assistant(text: str | None = None, tool_calls: list | None = None) -> dict:
    message: dict = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return message
