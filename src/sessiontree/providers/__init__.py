"""Model adapters: callables that turn chat messages into a ``Completion``.

See ``docs/providers.md``.
"""

from .openai import OpenAICompatible, openai_compatible

__all__ = ["OpenAICompatible", "openai_compatible"]
