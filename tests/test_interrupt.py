"""Ctrl-C during a tool that never returns: the run records why it stopped, the cancel
is not swallowed, and the process exits instead of waiting for the tool forever."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from sessiontree import Store

pytestmark = pytest.mark.slow  # starts a Python process

SCRIPT = r"""
import sys, threading, time
from sessiontree import Approve, Store, run, tool
from sessiontree.testing import ScriptedModel, reply, tool_call

def loop_awaits_the_tool():
    # the main thread's event loop is idle in its selector's select(): awaiting this tool
    return sys._current_frames()[threading.main_thread().ident].f_code.co_name == "select"

@tool
def hang() -> str:
    '''Never returns.'''
    while not loop_awaits_the_tool():
        time.sleep(0.001)
    print("tool started", flush=True)
    while True:
        time.sleep(1)

with Store(sys.argv[1]) as store:
    session = store.session(sys.argv[2])
    model = ScriptedModel([reply(None, tool_call("hang", {}, id="h"))])
    try:
        for step in run(store, session, call=model, tools=[hang]):
            pass
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        sys.exit(130)
"""


def test_ctrl_c_during_a_hanging_tool_exits_and_records_why(tmp_path):
    db = tmp_path / "s.db"
    with Store(db) as store:
        session = store.create_session()
        session.append({"role": "user", "content": "go"})
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(db), session.id], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "tool started"  # and the run awaits it
    proc.send_signal(signal.SIGINT)
    started = time.monotonic()
    out, _ = proc.communicate(timeout=20)
    assert time.monotonic() - started < 10  # it exits; before, it waited for the tool forever
    assert proc.returncode == 130 and "interrupted" in out
    with Store(db) as store:
        head = store.session(session.id).head()
        assert head is not None and head.kind == "error" and head.payload["error"] == "cancelled"
        assert store.verify().ok
