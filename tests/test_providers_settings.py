"""The HTTP settings every adapter takes are declared once (``providers.http.Settings``)
and reach each adapter's endpoint; the adapters' shared part behaves alike."""

from __future__ import annotations

import dataclasses
import inspect

import httpx
import pytest

from sessiontree.providers import anthropic, openai_compatible, openai_responses
from sessiontree.providers.http import Settings

FACTORIES = {
    "openai": lambda **kw: openai_compatible("http://127.0.0.1:9/v1", "m", api_key_env=None, **kw),
    "anthropic": lambda **kw: anthropic("m", base_url="http://127.0.0.1:9", api_key_env=None, **kw),
    "responses": lambda **kw: openai_responses("m", base_url="http://127.0.0.1:9/v1", api_key_env=None, **kw),
}


@pytest.mark.parametrize("factory", [openai_compatible, anthropic, openai_responses])
def test_each_factory_shows_the_settings_as_keywords_before_its_params(factory):
    parameters = list(inspect.signature(factory).parameters.values())
    assert parameters[-1].kind is inspect.Parameter.VAR_KEYWORD
    settings = parameters[-1 - len(dataclasses.fields(Settings)) : -1]
    assert [(p.name, p.default, p.kind) for p in settings] == [
        (f.name, f.default, inspect.Parameter.KEYWORD_ONLY) for f in dataclasses.fields(Settings)
    ]


@pytest.mark.parametrize("name", FACTORIES)
def test_the_settings_reach_the_endpoint_and_are_not_request_parameters(name):
    call = FACTORIES[name](timeout=5, max_retries=1, deadline=7, headers={"X-Test": "1"}, temperature=0.5)
    endpoint = call._endpoint
    assert (endpoint.timeout, endpoint.max_retries, endpoint.deadline) == (httpx.Timeout(5), 1, 7.0)
    assert endpoint.headers["X-Test"] == "1" and call.deadline == 7.0
    assert call.params == {"temperature": 0.5}
    other = call.with_params(seed=1)
    assert type(other) is type(call) and other.params == {"temperature": 0.5, "seed": 1}
    assert call.params == {"temperature": 0.5}  # the original is unchanged
    assert repr(call) == f"{type(call).__name__}(base_url={call.base_url!r}, model='m', stream=False)"
    with pytest.raises(TypeError, match=r"with_params\(\) cannot set \['model'\]"):
        call.with_params(model="other")


@pytest.mark.parametrize("name", FACTORIES)
def test_a_key_or_header_with_a_control_character_is_refused_up_front(name):
    with pytest.raises(
        ValueError, match=r"the API key contains a control character \(U\+000A\) at position 3"
    ):
        FACTORIES[name](api_key="abc\n")
    with pytest.raises(ValueError, match="the X-Bad header contains a control character"):
        FACTORIES[name](headers={"X-Bad": "a\rb"})
