"""One way to name a model everywhere: ``PROVIDER/MODEL``.

Contract:

- ``parse(name)`` is ``(provider, model)``: ``anthropic/M`` is Anthropic's
  Messages API, ``responses/M`` OpenAI's Responses API, ``openai/M`` chat
  completions, ``script:PATH`` a script file (``providers.script``). Only these
  prefixes name a provider; any other name, slashes and all
  (``meta-llama/Llama-3.3-70B``, ``Qwen/Qwen2.5-7B``), is a chat-completions
  model named as it is (provider ``openai``, ``named=False``), so the names
  used before providers had prefixes keep working. A model that is itself
  called ``anthropic/...`` on an OpenAI-compatible server (OpenRouter) is
  ``openai/anthropic/...``: the first prefix only is read.
- ``model(name, base_url=None, api_key=None, **params)`` returns the call:
  the provider's adapter with ``base_url`` (default: the provider's own,
  ``DEFAULT_BASE_URLS``), the key ``api_key`` or else the provider's usual
  environment variable (``KEY_ENVS``; ``api_key_env=`` names another), and
  ``params`` passed on (adapter settings such as ``stream`` or ``timeout``, and
  request parameters). A name without a provider has no default endpoint: it
  needs ``base_url`` (a local server, most often), which is what it always meant.
  A bad name is a ``ValueError`` saying what is expected.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .anthropic import DEFAULT_BASE_URL as ANTHROPIC_URL
from .anthropic import anthropic
from .openai import openai_compatible
from .responses import DEFAULT_BASE_URL as OPENAI_URL
from .responses import openai_responses
from .script import PREFIX as SCRIPT_PREFIX
from .script import script_model

PROVIDERS = ("openai", "responses", "anthropic")
DEFAULT_BASE_URLS = {"openai": OPENAI_URL, "responses": OPENAI_URL, "anthropic": ANTHROPIC_URL}
KEY_ENVS = {"openai": "OPENAI_API_KEY", "responses": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
FORMS = "anthropic/MODEL, responses/MODEL, openai/MODEL, MODEL (chat completions) or script:PATH"


def parse(name: str) -> tuple[str, str, bool]:
    """``(provider, model, named)``: ``named`` is whether the name gave its provider."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a model name is needed: {FORMS}")
    if name.startswith(SCRIPT_PREFIX):
        path = name[len(SCRIPT_PREFIX) :]
        if not path:
            raise ValueError(f"{SCRIPT_PREFIX} needs a file: {SCRIPT_PREFIX}replies.jsonl")
        return "script", path, True
    head, sep, rest = name.partition("/")
    if sep and head in PROVIDERS:
        if not rest.strip():
            raise ValueError(f"{name!r} names the provider {head} but no model: {head}/MODEL")
        return head, rest, True
    return "openai", name, False


def adapter(provider: str) -> Callable[..., Any]:
    """The function that builds a call of ``provider`` (for its signature, say)."""
    builders: dict[str, Callable[..., Any]] = {
        "openai": openai_compatible,
        "responses": openai_responses,
        "anthropic": anthropic,
        "script": script_model,
    }
    return builders[provider]


def model(name: str, base_url: str | None = None, api_key: str | None = None, **params: Any) -> Any:
    """The model call ``name`` (``PROVIDER/MODEL``) stands for; see the module docstring."""
    provider, model_name, named = parse(name)
    if provider == "script":
        stream = bool(params.pop("stream", False))
        return script_model(model_name, stream=stream, params=params)
    if base_url is None and not named:
        raise ValueError(
            f"{name!r} names no provider, so it needs a base URL (an OpenAI-compatible server);"
            f" or name one: openai/{name} for {OPENAI_URL}"
        )
    url = base_url or DEFAULT_BASE_URLS[provider]
    if provider == "openai":
        return openai_compatible(url, model_name, api_key=api_key, **params)
    return adapter(provider)(model_name, base_url=url, api_key=api_key, **params)
