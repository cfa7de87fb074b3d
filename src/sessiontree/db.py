"""``sessiontree.db`` is ``sessiontree.storage.sqlite_db``, under the name it had before it
moved into ``storage/``: the same module object (not a copy), so code and tests that import
or patch ``sessiontree.db`` reach what the SQLite backend uses. Kept for one release; new
code imports ``sessiontree.storage.sqlite_db``."""

import sys

from .storage import sqlite_db

sys.modules[__name__] = sqlite_db
