"""Start real mock LLM servers (fakellm, llmock) as subprocesses on 127.0.0.1.

Importable helpers, not fixtures: ``free_port()``, ``start(...)`` which waits
until the port accepts connections, and ``ServerProcess.stop()``. Output goes
to files, not pipes, so a chatty server can never block on a full pipe; when a
server dies or is not ready in time the failure quotes its stderr.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

HOST = "127.0.0.1"


def free_port() -> int:
    """A port nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def executable(name: str) -> str:
    """The console script installed next to this interpreter (the venv), else on PATH."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if not found:
        raise RuntimeError(f"{name} is not installed in {sys.prefix}")
    return found


@dataclass
class ServerProcess:
    name: str
    proc: subprocess.Popen
    port: int
    log_dir: Path

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def stderr(self) -> str:
        return (self.log_dir / "stderr.log").read_text(errors="replace")

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # uvicorn shuts down cleanly on SIGTERM
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)


def start(
    name: str,
    argv: list[str],
    port: int,
    log_dir: Path,
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    ready_timeout: float = 30.0,
) -> ServerProcess:
    """Run ``argv`` and return once ``port`` accepts connections."""
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / "stdout.log", "wb") as out, open(log_dir / "stderr.log", "wb") as err:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=err, cwd=cwd, env=os.environ.copy() if env is None else env
        )
    server = ServerProcess(name, proc, port, log_dir)
    try:
        wait_for_port(server, ready_timeout)
    except BaseException:
        server.stop()
        raise
    return server


def wait_for_port(server: ServerProcess, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if server.proc.poll() is not None:
            raise RuntimeError(
                f"{server.name} exited with code {server.proc.returncode} before "
                f"listening on {HOST}:{server.port}; stderr:\n{server.stderr()}"
            )
        try:
            with socket.create_connection((HOST, server.port), timeout=0.5):
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{server.name} did not listen on {HOST}:{server.port} within "
                f"{timeout:.0f}s; stderr:\n{server.stderr()}"
            )
        time.sleep(0.05)


# -- the two servers -----------------------------------------------------------------


def start_fakellm(config: Path, log_dir: Path) -> ServerProcess:
    """``fakellm serve`` with a rules file. OpenAI base URL: ``{url}/v1``."""
    port = free_port()
    argv = [executable("fakellm"), "serve", "--host", HOST, "--port", str(port), "--config", str(config)]
    return start("fakellm", argv, port, log_dir, cwd=config.parent)


def start_llmock(log_dir: Path, *extra: str) -> ServerProcess:
    """``llmock serve``; faults are scripted per test over ``POST /_llmock/scenario``."""
    port = free_port()
    argv = [
        executable("llmock"),
        "serve",
        "--host",
        HOST,
        "--port",
        str(port),
        "--log-level",
        "warning",
        *extra,
    ]
    # Settings reach llmock's app through LLMOCK_* variables: drop any inherited ones.
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMOCK_")}
    return start("llmock", argv, port, log_dir, cwd=log_dir, env=env)


@contextmanager
def llmock_static(log_dir: Path) -> Iterator[ServerProcess]:
    """llmock with ``--response-style static`` (the same replies on every run: what the
    frameworks' end-to-end tests read back), stopped afterwards."""
    server = start_llmock(log_dir, "--response-style", "static")
    try:
        yield server
    finally:
        server.stop()


def llmock_script(server: ServerProcess, *behaviors: dict) -> None:
    """Queue behaviours (``{"type": "fail", "status": 429, ...}``) for the next requests."""
    response = httpx.post(f"{server.url}/_llmock/scenario", json={"behaviors": list(behaviors)})
    response.raise_for_status()


def llmock_reset(server: ServerProcess) -> None:
    httpx.post(f"{server.url}/_llmock/reset").raise_for_status()


def llmock_requests(server: ServerProcess) -> list[dict]:
    """Every request llmock served since the last reset, oldest first."""
    return httpx.get(f"{server.url}/_llmock/requests").json()["requests"]


def llmock_verdict(server: ServerProcess) -> dict:
    return httpx.get(f"{server.url}/_llmock/verdict").json()
