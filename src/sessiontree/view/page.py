"""The HTML pages of the browser view: one self-contained file per page.

Contract:
- ``render_html(store, session_id, prices=None)`` returns the whole view of one
  session as one HTML document: the stylesheet and scripts of ``static/`` are
  inlined, the data is embedded as JSON, nothing is fetched (no CDN, no fonts),
  so the file works offline and can be mailed around. ``write_html`` writes it.
- Escaping: the data sits in a ``<script type="application/json">`` element
  with ``<``, ``>``, ``&`` and U+2028/U+2029 written as ``\\u`` escapes, so no
  payload can close the element or open a comment; the scripts build the page
  with ``textContent`` only, never HTML strings, so a payload holding
  ``<script>`` or ``onerror=`` stays text. A Content-Security-Policy with a
  fresh nonce per page backs this up: only the page's own scripts run.
- ``page(kind, title, data, config)`` assembles any page (the session view or
  the server's index) from the same parts; ``sessiontree serve`` uses it.
  Every string of the title, the data and the config goes through
  ``data.redacted`` here, so no page or file shows a credential the view redacts.
  ``view_page(data, config)`` is the session view of data already read.
"""

from __future__ import annotations

import json
import re
import secrets
from importlib import resources
from pathlib import Path
from typing import Any

from ..store import Store
from .data import redacted, session_data

# Which static files each page inlines, in order (common.js first: the others use it).
SCRIPTS = {
    "view": ["common.js", "view.js"],
    "view+decide": ["common.js", "decide.js", "view.js"],
    "index": ["common.js", "decide.js", "index.js"],
}
_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_UNSAFE = re.compile("[<>&\u2028\u2029]")
_SLOT = re.compile(r"\{\{(\w+)\}\}")


def static(name: str) -> str:
    """The text of one file of the package's ``static/`` directory."""
    return resources.files(__package__).joinpath("static").joinpath(name).read_text("utf-8")


def embed_json(value: Any) -> str:
    """JSON text that is safe inside a ``<script>`` element of an HTML page."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: only \\u escapes can carry it
        text = json.dumps(value, ensure_ascii=True, separators=(",", ":"))
    return _UNSAFE.sub(lambda m: _ESCAPES[m.group()], text)


def _html_text(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def page(kind: str, title: str, data: Any, config: dict[str, Any] | None = None) -> str:
    """One complete HTML document: ``kind`` names the scripts (see ``SCRIPTS``)."""
    nonce = secrets.token_urlsafe(16)
    slots = {
        "title": _html_text(redacted(title)),
        "nonce": nonce,
        "css": static("view.css"),
        "data": embed_json(redacted(data)),
        "config": embed_json(redacted({"page": kind.split("+")[0], **(config or {})})),
        "js": "\n".join(static(name) for name in SCRIPTS[kind]),
    }
    # One pass over the template: a slot's value is never scanned for further slots.
    return _SLOT.sub(lambda m: slots[m.group(1)], static("page.html"))


def render_html(
    store: Store,
    session_id: str,
    *,
    prices: dict[str, dict[str, float]] | None = None,
    config: dict[str, Any] | None = None,
) -> str:
    """The self-contained HTML view of one session (id or unique prefix).

    ``prices`` (``{model: {"input": $, "output": $}}`` per million tokens) adds
    costs; ``config`` is for ``sessiontree serve`` (live updates, decisions).
    """
    return view_page(session_data(store, session_id, prices=prices), config)


def view_page(data: dict[str, Any], config: dict[str, Any] | None = None) -> str:
    """The session view of ``data`` as ``session_data`` returned it (``render_html``
    without reading the store, for a caller that already has the data)."""
    title = data["session"]["title"] or data["session"]["id"]
    return page(
        "view+decide" if (config or {}).get("decide") else "view", f"{title} · sessiontree", data, config
    )


def write_html(
    store: Store, session_id: str, path: str | Path, *, prices: dict[str, dict[str, float]] | None = None
) -> Path:
    """Write ``render_html`` to ``path`` (UTF-8) and return the path."""
    store.check_output(path)
    path = Path(path)
    path.write_text(render_html(store, session_id, prices=prices), "utf-8")
    return path
