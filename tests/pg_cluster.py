"""A throwaway PostgreSQL cluster for the tests: its own data directory, a free port on
127.0.0.1, run by an unprivileged user (PostgreSQL refuses to run as root).

``server_url()`` returns the URL of a server to test against: ``SESSIONTREE_TEST_POSTGRES``
when set (``.ci/run`` starts one with ``python tests/pg_cluster.py``), else a cluster
started here from the Debian packages' binaries and stopped at exit; ``None`` with the
reason when neither is possible.
"""

from __future__ import annotations

import atexit
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path


def bindir() -> Path | None:
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if Path(candidate, "initdb").exists():
            return Path(candidate)
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


STOP_SCRIPT: Path | None = None
"""With ``keep``: the shell script that stops the cluster and removes its directory."""


def start_cluster(*, keep: bool = False) -> tuple[str | None, str]:
    """(URL, "") of a new cluster, or (None, why not). It is stopped when this process exits,
    unless ``keep`` (then ``stop_cluster(url)`` stops it)."""
    bin_path = bindir()
    if bin_path is None:
        return None, "PostgreSQL is not installed (no initdb; Debian: apt-get install postgresql-15)"
    root = Path(tempfile.mkdtemp(prefix="sessiontree-pg-"))
    user = None
    if os.geteuid() == 0:  # postgres will not run as root: hand the directory to nobody
        user = "nobody"
        entry = pwd.getpwnam(user)
        os.chown(root, entry.pw_uid, entry.pw_gid)
    data, port = root / "data", free_port()

    def run(*args: str) -> None:
        subprocess.run(args, check=True, capture_output=True, user=user, cwd=root, timeout=120)

    try:
        run(
            str(bin_path / "initdb"),
            "-D",
            str(data),
            "-U",
            "postgres",
            "--auth=trust",
            "--no-sync",
            "-E",
            "UTF8",
        )
        run(
            str(bin_path / "pg_ctl"), "-D", str(data), "-l", str(root / "log"), "-w", "start",
            "-o", f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
            " -c synchronous_commit=off -c full_page_writes=off -c max_connections=200",
        )  # fmt: skip
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        output = getattr(e, "stderr", b"") or b""
        return None, f"could not start a PostgreSQL cluster: {output.decode(errors='replace')[-300:]}"

    def stop() -> None:
        subprocess.run(
            [str(bin_path / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True,
            user=user,
            cwd=root,
        )
        shutil.rmtree(root, ignore_errors=True)

    if keep:  # for .ci/run, which stops it with the command in this file
        global STOP_SCRIPT
        STOP_SCRIPT = root / "stop.sh"
        STOP_SCRIPT.write_text(
            f"{'runuser -u ' + user + ' -- ' if user else ''}{bin_path / 'pg_ctl'} -D {data} -m fast stop"
            f" >/dev/null && rm -rf {root}\n"
        )
    else:
        atexit.register(stop)
    return f"postgresql://postgres@127.0.0.1:{port}/postgres", ""


_started: tuple[str | None, str] | None = None


def server_url() -> tuple[str | None, str]:
    global _started
    if os.environ.get("SESSIONTREE_TEST_POSTGRES"):
        return os.environ["SESSIONTREE_TEST_POSTGRES"], ""
    if _started is None:
        _started = start_cluster()
    return _started


if __name__ == "__main__":  # .ci/run: start one for the whole run, print shell exports
    url, why = start_cluster(keep=True)
    if url is None:
        raise SystemExit(why)
    print(f"export SESSIONTREE_TEST_POSTGRES={url}")
    print(f"export SESSIONTREE_TEST_POSTGRES_STOP={STOP_SCRIPT}")
