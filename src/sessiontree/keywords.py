"""An options object, or its fields given one by one as keywords.

Contract: ``options_from(cls, options, locals())``, called first thing in a function that
takes an options dataclass ``cls`` (``options.RunOptions``, ``retention.RetentionPolicy``)
as ``options`` and each of its fields as a keyword too, is the one object the function
passes down: ``options`` when given, else the one its keyword arguments make. Both at
once (a keyword not at its default) is a ``TypeError`` naming what would be ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any, TypeVar

T = TypeVar("T")


def options_from(cls: type[T], options: T | None, arguments: Mapping[str, Any]) -> T:
    """``options``, or the ``cls`` made of the ``arguments`` of its fields' names (see the
    module docstring)."""
    known = fields(cls)  # type: ignore[arg-type]
    keywords = {f.name: arguments[f.name] for f in known if f.name in arguments}
    if options is None:
        return cls(**keywords)
    defaults = {f.name: f.default for f in known}
    clashing = [k for k, v in keywords.items() if v is not defaults[k] and v != defaults[k]]
    if clashing:
        raise TypeError(f"give {', '.join(clashing)} in the options object or as keywords, not both")
    return options
