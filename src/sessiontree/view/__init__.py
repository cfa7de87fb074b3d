"""The browser view of a session tree: a self-contained HTML export, and the pages
``sessiontree serve`` builds from the same parts.

Contract: ``render_html(store, session_id)`` returns one HTML file that works
offline and escapes everything (see ``page``); ``write_html`` writes it;
``session_data`` is the JSON the page shows (see ``data``). The web server
lives in ``view.server`` (its connection limits in ``view.guard``) and needs the
``web`` extra; nothing here does.
"""

from .data import inbox, session_data
from .page import render_html, write_html

__all__ = ["inbox", "render_html", "session_data", "write_html"]
