"""Model adapters: callables that turn chat messages into a ``Completion``.

``model("PROVIDER/MODEL")`` builds any of them from one name (``providers.naming``).
See ``docs/providers.md``.
"""

from .anthropic import Anthropic, anthropic
from .openai import OpenAICompatible, openai_compatible
from .responses import OpenAIResponses, openai_responses

__all__ = [
    "Anthropic",
    "OpenAICompatible",
    "OpenAIResponses",
    "anthropic",
    "openai_compatible",
    "openai_responses",
]
