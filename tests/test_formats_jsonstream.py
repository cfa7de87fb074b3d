"""Reading a top-level JSON array one element at a time (formats/jsonstream.py)."""

from __future__ import annotations

import json

import pytest

from sessiontree.formats import FormatError, jsonstream
from sessiontree.formats.common import load_json


def opener(path):
    return open(path, encoding="utf-8")


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    monkeypatch.setattr(jsonstream, "CHUNK", 7)  # element and chunk boundaries everywhere


@pytest.mark.parametrize(
    "text",
    [
        '[{"a": 1}, {"b": [1, 2, 3]}, "x", 12345678901234, null]',
        "[]",
        " \n [ 1 ,\n 2 ] \n",
        '[{"k": "é ü 😀"}]',
    ],
)
def test_elements_are_the_documents_elements(tmp_path, text):
    path = tmp_path / "doc.json"
    path.write_text(text, encoding="utf-8")
    items = jsonstream.read_json(path, opener)
    assert isinstance(items, jsonstream.JsonItems)
    assert list(items) == json.loads(text)
    assert list(items) == json.loads(text)  # a second pass reads the file again


def test_a_document_that_is_not_an_array_is_decoded_whole(tmp_path):
    path = tmp_path / "doc.json"
    path.write_text('{"mapping": {}}')
    assert jsonstream.read_json(path, opener) == {"mapping": {}}


@pytest.mark.parametrize(
    "text",
    ["[1, 2", "[1 2]", '[{"a": 1},\n {"b": }]', "[1,]", "[1] x", '[\n  {"a": "unterminated'],
)
def test_errors_are_worded_as_for_a_whole_document(tmp_path, text):
    path = tmp_path / "doc.json"
    path.write_text(text)
    with pytest.raises(FormatError) as whole:
        load_json(text)
    with pytest.raises(FormatError) as streamed:
        list(jsonstream.read_json(path, opener))
    assert str(streamed.value) == str(whole.value)
