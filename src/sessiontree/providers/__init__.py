"""Model adapters: callables that turn chat messages into a ``Completion``.

See ``docs/providers.md``.
"""

from .anthropic import Anthropic, anthropic
from .openai import OpenAICompatible, openai_compatible

__all__ = ["Anthropic", "OpenAICompatible", "anthropic", "openai_compatible"]
