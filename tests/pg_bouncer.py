"""Debian's PgBouncer in transaction mode, in front of the test server, for the tests.

``start(server_url, directory)`` writes an ini (trust auth, a free port of 127.0.0.1,
``pool_mode = transaction``; a role the tests create logs in too: PgBouncer looks it up
on the server as ``auth_user``) into ``directory``, starts ``pgbouncer`` as a daemon and
returns (its URL, a function that stops it); ``None`` and why
when ``pgbouncer`` is not installed. It runs as ``nobody`` when started by root (it
refuses to run as root).

Run the PostgreSQL tests through it (``.ci/run`` does)::

    eval "$(python tests/pg_bouncer.py)"   # exports SESSIONTREE_TEST_POSTGRES, SESSIONTREE_PGBOUNCER=true
    PYTHONPATH=tests pytest -p pg_only   # every test that uses PostgreSQL (tests/pg_only.py)
    kill "$(cat "$SESSIONTREE_PGBOUNCER_PIDFILE")"

(the flag comes from the environment: the tests add ``?schema=`` to the server's URL).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

BINARY = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(server_url: str, directory: Path) -> tuple[str, Callable[[], None]] | tuple[None, str]:
    if not os.path.exists(BINARY):
        return None, "pgbouncer is not installed (apt-get install pgbouncer)"
    parts = urlsplit(server_url)
    user = parts.username or "postgres"
    port = _free_port()
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "userlist.txt").write_text(f'"{user}" ""\n')
    (directory / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host={parts.hostname or '127.0.0.1'} port={parts.port or 5432}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {directory}/userlist.txt\nauth_user = {user}\n"
        "pool_mode = transaction\nmax_client_conn = 500\ndefault_pool_size = 20\n"
        f"logfile = {directory}/pgbouncer.log\npidfile = {directory}/pgbouncer.pid\n"
        + ("user = nobody\n" if os.geteuid() == 0 else "")
    )
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        for path in [directory, *directory.iterdir()]:
            os.chown(path, nobody.pw_uid, nobody.pw_gid)
    subprocess.run([BINARY, "-d", str(directory / "pgbouncer.ini")], check=True)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"pgbouncer did not start: see {directory}/pgbouncer.log") from None
            time.sleep(0.05)

    def stop() -> None:
        pid = int((directory / "pgbouncer.pid").read_text())
        os.kill(pid, signal.SIGTERM)

    return f"postgresql://{user}@127.0.0.1:{port}{parts.path or '/postgres'}", stop


if __name__ == "__main__":
    directory = Path(tempfile.mkdtemp(prefix="sessiontree-pgbouncer-"))
    url, stop_or_why = start(
        sys.argv[1] if len(sys.argv) > 1 else os.environ["SESSIONTREE_TEST_POSTGRES"], directory
    )
    if url is None:
        sys.exit(str(stop_or_why))
    print(
        f"export SESSIONTREE_TEST_POSTGRES='{url}' SESSIONTREE_PGBOUNCER=true"
        f" SESSIONTREE_PGBOUNCER_PIDFILE='{directory}/pgbouncer.pid'"
    )
