"""`threads_stopped`: what `LocalBroker.pause` waits for after SIGSTOP (every thread of the
process stopped, not only the signal sent)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from broker.local import threads_stopped

THREADS = """
import threading, time
for _ in range(3):
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
print("ready", flush=True)
time.sleep(60)
"""


def _until(pid: int, stopped: bool) -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if threads_stopped(pid) is stopped:
            return True
        time.sleep(0.01)
    return False


def test_every_thread_stopped_after_sigstop_and_none_after_sigcont() -> None:
    proc = subprocess.Popen([sys.executable, "-c", THREADS], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        assert len(os.listdir(f"/proc/{proc.pid}/task")) == 4
        assert not threads_stopped(proc.pid)
        os.kill(proc.pid, signal.SIGSTOP)
        assert _until(proc.pid, True)
        os.kill(proc.pid, signal.SIGCONT)
        assert _until(proc.pid, False)
    finally:
        proc.kill()
        proc.wait()
    assert threads_stopped(proc.pid)  # gone: nothing left that could answer
