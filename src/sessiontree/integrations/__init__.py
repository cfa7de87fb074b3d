"""Bridges to other systems, each needing an optional extra; the core never imports them.

``missing_extra(error, package, extra)`` tells an ``ImportError`` of the extra's package
(say so in one line: how to install it) from any other (a bug, to be raised as it is).
"""

from __future__ import annotations


def missing_extra(error: ImportError, package: str, extra: str) -> str | None:
    """``pip install 'sessiontree[EXTRA]'`` when ``error`` is ``package`` missing, else None."""
    name = error.name or ""
    if name == package or name.startswith(package + ".") or (not name and package in str(error)):
        return f"pip install 'sessiontree[{extra}]'"
    return None
