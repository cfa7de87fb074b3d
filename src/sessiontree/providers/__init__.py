"""Model adapters: callables that turn chat messages into a ``Completion``.

``model("PROVIDER/MODEL")`` builds any of them from one name (``providers.naming``).
See ``docs/providers.md``.
"""

from .anthropic import Anthropic, anthropic
from .naming import model
from .openai import OpenAICompatible, openai_compatible
from .responses import OpenAIResponses, openai_responses

__all__ = [
    "Anthropic",
    "OpenAICompatible",
    "OpenAIResponses",
    "anthropic",
    "model",
    "openai_compatible",
    "openai_responses",
]
