"""`harness acceptor` as a process: ready file, SIGTERM, flushed history."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from acceptor.testing import connect, ping, wait_until
from base.history import read_history


def test_sigterm_exits_zero_with_flushed_history(kafka_broker: Any, tmp_path: Path) -> None:
    cfg = tmp_path / "acceptor.properties"
    cfg.write_text(
        "listeners=CLIENT://127.0.0.1:0\n"
        f"listener.name.client.upstream={kafka_broker.bootstrap}\n"
        "max.connections.per.ip=10\n",
        encoding="utf-8",
    )
    ready = tmp_path / "ready.json"
    hist = tmp_path / "history"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness",
            "acceptor",
            "--config",
            str(cfg),
            "--history",
            str(hist),
            "--run-id",
            "proc",
            "--ready-file",
            str(ready),
            "--set",
            "history.flush.interval.ms=60000",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until(ready.exists, timeout=60, what="ready file")
        info = json.loads(ready.read_text())
        assert info["pid"] == proc.pid
        addr = (info["listeners"]["CLIENT"]["host"], info["listeners"]["CLIENT"]["port"])
        assert (
            "kafka_server_socket_server_metrics"
            in urllib.request.urlopen(info["metrics_url"], timeout=10).read().decode()
        )
        conn = connect(addr)
        ping(conn)
        time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert "ready" in out and "history written to" in out
    assert "CLIENT: 127.0.0.1:" in out and f"-> {kafka_broker.bootstrap}" in out
    rows = read_history(hist, "acceptor").to_pylist()
    events = [r["event"] for r in rows]
    assert {"accept", "admit", "register", "request", "close"} <= set(events)
    assert [r["reason"] for r in rows if r["event"] == "close"] == ["shutdown"]
    assert not [p for p in (hist / "acceptor").iterdir() if p.name.startswith(".")]
    configs = read_history(hist, "harness").to_pylist()
    assert configs and configs[0]["event"] == "config"
    conn.close()
    assert os.path.exists(hist)


def test_bad_config_is_refused_with_key_value_reason(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "acceptor",
            "--set",
            "listeners=CLIENT://127.0.0.1:0",
            "--set",
            "listener.name.client.upstream=127.0.0.1:9092",
            "--set",
            "max.connections=lots",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "max.connections='lots'" in out.stderr and "integer" in out.stderr
