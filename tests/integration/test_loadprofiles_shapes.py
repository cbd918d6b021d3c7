"""Profiles straight at the real broker: arrival shapes, multi-process runs, victims.

The broker is a valid target on its own (DESIGN: target ``broker``), so these need
no acceptor: they check what the generator offers and records.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from base.history import read_history
from loadprofiles.launch import locust_command, run

pytestmark = pytest.mark.timeout(180)


def load(profile: str, host: str, run_dir: Path, seconds: float, **kw: Any) -> str:
    options = kw.pop("options", {})
    options.setdefault("max_lag_ms", 2000)
    argv = locust_command(
        profile, host=host, run_time_s=seconds, run_dir=run_dir, options=options, **kw
    )
    done = run(argv, timeout_s=seconds + 60)
    out = done.stdout + done.stderr
    assert "Traceback" not in out, out[-4000:]
    assert done.returncode == 0, out[-4000:]
    return out


def client_rows(run_dir: Path) -> pd.DataFrame:
    df = read_history(run_dir, "client").to_pandas()
    df["d"] = [json.loads(d) if isinstance(d, str) else {} for d in df["detail"]]
    return df


def test_step_shape_is_offered_on_schedule(kafka_broker: Any, tmp_path: Path) -> None:
    out = load(
        "storm",
        kafka_broker.bootstrap,
        tmp_path,
        seconds=30,
        options={"arrival": "step:rates=10/40,every=2", "max_arrivals": 100},
    )
    rows = client_rows(tmp_path)
    invokes = rows[rows.event == "connect_invoke"]
    assert len(invokes) == 100, out[-2000:]
    intended = pd.Series(sorted(d["intended_mono_ns"] for d in invokes.d))
    offset_s = (intended - intended.iloc[0]) / 1e9
    assert (offset_s < 2).sum() == 20  # 10/s for the first 2 s
    assert abs((offset_s.between(2, 3, inclusive="left")).sum() - 40) <= 1  # then 40/s
    # offered = when the connect really started: never before its intended time
    # (how far behind is a timing question for bench/generator.py, not a test)
    lag_ms = (invokes.mono_ns.to_numpy() - [d["intended_mono_ns"] for d in invokes.d]) / 1e6
    assert (lag_ms >= 0).all()
    assert "arrivals: intended 100, offered 100" in out


def test_two_processes_split_one_schedule(kafka_broker: Any, tmp_path: Path) -> None:
    out = load(
        "storm",
        kafka_broker.bootstrap,
        tmp_path,
        seconds=8,
        users=2,
        processes=2,
        options={"arrival": "constant:rate=20", "max_arrivals": 60},
    )
    files = sorted((tmp_path / "history" / "client").glob("*.parquet"))
    writers = {f.name.rsplit("-", 1)[0] for f in files}
    assert len(writers) == 2, (files, out[-2000:])  # one writer per worker process
    rows = client_rows(tmp_path)
    invokes = rows[rows.event == "connect_invoke"]
    intended = sorted(d["intended_mono_ns"] for d in invokes.d)
    # each worker took every other arrival of the same 60-arrival schedule
    assert len(invokes) == 60 and len(set(intended)) == 60
    assert invokes.conn_id.str.split("-").str[0].nunique() == 2


def test_steady_victims_measure_produce_and_fetch(kafka_broker: Any, tmp_path: Path) -> None:
    out = load(
        "steady",
        kafka_broker.bootstrap,
        tmp_path,
        seconds=10,
        users=2,
        options={"topic": "lp-steady", "steady_rate": 5},
    )
    rows = client_rows(tmp_path)
    # the topic's set-up connection is recorded too (profile setup, client id harness-setup)
    setup = rows[rows.client_id == "harness-setup"]
    invokes = setup[setup.event == "connect_invoke"]
    assert len(invokes) >= 1 and {d["profile"] for d in invokes.d} == {"setup"}
    rows = rows[rows.client_id != "harness-setup"]
    ok = rows[rows.event == "request_ok"]
    assert set(d["profile"] for d in ok.d) == {"steady"}, out[-2000:]
    # the profile's own rows (produce: send → ack; fetch: end to end); its kafka-python
    # sockets' responses are rows of their own clients' ids (steady_conns)
    ok = ok[ok.client_id == "harness-steady"]
    produce, fetch = ok[ok.api_key == 0], ok[ok.api_key == 1]
    assert len(produce) >= 5 and len(fetch) >= 3  # 2 users x 5/s, minus client start-up
    assert produce.latency_ms.between(0, 10_000).all()
    assert (rows.event == "request_fail").sum() == 0


def test_sigterm_stops_an_arrival_profile_with_its_rows_written(tmp_path: Path) -> None:
    """Locust fires `quitting` before it stops the test: a SIGTERM'd storm profile stops its
    engine there, writes what it recorded and exits, instead of running out its schedule
    (it did: the browser test's Locust took its whole 20 s stop timeout)."""
    import signal
    import subprocess
    import time

    from base.localnet import free_port

    argv = locust_command(
        "storm",
        host=f"127.0.0.1:{free_port()}",  # nothing listens: every connect refused
        run_time_s=120,
        run_dir=tmp_path,
        options={"arrival": "constant:rate=30", "source_ips": "127.0.0.7", "max_lag_ms": 2000},
    )
    log = (tmp_path / "locust.log").open("w")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not list((tmp_path / "history").rglob("*.parquet")):
            time.sleep(0.2)  # the engine runs and has written a part
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)  # its schedule had two minutes left
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    text = (tmp_path / "locust.log").read_text()
    assert "Got SIGTERM signal" in text, text[-3000:]
    assert code in (0, 1), text[-3000:]  # 1: Locust's exit code when requests failed
    rows = client_rows(tmp_path)
    assert (rows["event"] == "connect_fail").sum() >= 1, rows["event"].value_counts()
