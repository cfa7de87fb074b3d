"""Copy sessions between stores, whatever their backends (SQLite file, PostgreSQL).

Contract: ``copy_sessions(source, destination)`` streams each session of the
source, read from one consistent snapshot (``bulk.feed_stored``), into the
destination's tree writer (``bulk_stream``), one transaction per session: memory
holds a writer batch, not the session. The merge rules are an import's: ids,
payload text, times, runs, branches, checkpoints and recorded strips (retention's
redactions) arrive unchanged; a session already there gains only what it lacks
(branches fast-forward; a tool result stripped in the source since the last copy
is stripped at the destination too, and one stripped at the destination stays
so); a copy run twice changes nothing the second time; a destination whose
branch has diverged from the source's is refused with ``ImportConflict`` for
that session, and the sessions before it stay copied.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

from .bulk import feed_stored
from .bulk_stream import write_stream
from .store import Store


def copy_sessions(
    source: Store,
    destination: Store,
    session_ids: Sequence[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[str]:
    """Copy (merge) sessions from ``source`` into ``destination``; their ids, in order.
    ``progress(done, total)`` is called after each session."""
    ids = (
        [source.resolve_session_id(i) for i in session_ids]
        if session_ids is not None
        else source.storage.session_ids()
    )
    for done, session_id in enumerate(ids, 1):
        write_stream(destination.storage, partial(feed_stored, source.storage, session_id))
        if progress is not None:
            progress(done, len(ids))
    return ids
