"""Load from many hosts, tried on one machine: ``harness run hosts-ip-rate --workers 3
--worker-netns``.

The run makes three worker "hosts" as network namespaces, each with its own address from
the benchmarking range 198.18.0.0/15 on a veth pair to one bridge, the target (the
acceptor, or the broker itself) listening on the bridge's host side; each phase's Locust
master waits for the three `harness worker`s it starts there, splits the arrivals between
them and takes their histories home over Locust's own channel. Every run removes what it
made; the fixture checks nothing of its index is left and removes leftovers by the run's
name prefix if something was.

* the catalog's ``hosts-ip-rate`` passes, judged per host address (no 127.0.0.x in the
  client rows); with its override ignored (a seeded fault) it fails, witnesses on worker
  host 2's address;
* on the broker target it passes too, Kafka's listener on the bridge, its ip quotas set
  on the hosts' addresses and the per-IP checks judging them (the acceptor's seeded
  fault has no counterpart in Kafka);
* a worker killed mid-phase makes the run UNKNOWN, naming it and the rows it lost;
* a worker whose clocks read 200 ms late has its rows moved back by the offset it measured,
  the verdict unchanged;
* a phase whose workers never join does not start: exit 3, saying why.

Root only (``ip netns``); skipped with the reason otherwise. Each run: a broker, 20 s of
load at 36 arrivals/s, the analysis.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.runner import netns
from tests.integration.offered import assert_short_honestly, fell_short

pytestmark = [pytest.mark.timeout(1500), pytest.mark.slow]

CATALOG = Path(__file__).resolve().parents[2] / "loadprofiles" / "scenarios"
SKEW_NS = 200_000_000


@pytest.fixture(scope="module", autouse=True)
def namespaces_permitted() -> None:
    why = netns.permitted()
    if why:
        pytest.skip(f"worker hosts need network namespaces: {why}")


def run(
    tmp: Path, name: str, *extra: str, env: dict[str, str] | None = None, during: Any = None
) -> tuple[int, Path | None, str]:
    """`harness run` to its end (bounded); ``during(run_dir)`` runs beside it once the run
    folder exists. Afterwards nothing of the run's worker hosts may be left: no namespace,
    link or temporary folder, and no worker's folder in the run's own ``TMPDIR``."""
    out = tmp / name
    log = tmp / f"{name}.log"
    own_tmp = tmp / f"{name}.tmp"
    own_tmp.mkdir()
    argv = [sys.executable, "-m", "harness", "run", *extra, "--out", str(out), "--gate"]
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            argv,
            stdout=fh,
            stderr=subprocess.STDOUT,
            env={**os.environ, "TMPDIR": str(own_tmp), **(env or {})},
        )
        helper = None
        if during is not None:
            helper = threading.Thread(target=during, args=(out, proc), daemon=True)
            helper.start()
        try:
            code = proc.wait(timeout=900)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
        if helper is not None:
            helper.join(60)
    text = log.read_text()
    runs = [p for p in out.iterdir() if p.is_dir()] if out.is_dir() else []
    run_dir = runs[0] if runs else None
    if run_dir is not None:
        workers = json.loads((run_dir / "run.json").read_text()).get("workers") or {}
        for ns in workers.get("namespaces") or []:
            index = int(ns.removeprefix(netns.PREFIX).split("n")[0])
            left = netns.leftovers(index)
            if left:
                netns._remove(index)
            assert not left, f"worker hosts left behind: {left}"
    left = [
        p.name for p in own_tmp.iterdir() if p.name.startswith(("harness-worker-", netns.PREFIX))
    ]
    assert not left, f"worker folders left behind in TMPDIR: {left}"
    return code, run_dir, text


def run_offered(
    tmp: Path, name: str, *extra: str, env: dict[str, str] | None = None, attempts: int = 3
) -> tuple[int, Path | None, str, str | None]:
    """`run` of a scenario expected to pass, once more (up to ``attempts``) while the run
    proves nothing because a busy machine starved its generator (`offered.fell_short`);
    returns the last run and why it fell short (None when it offered its load)."""
    for attempt in range(1, attempts + 1):
        code, run_dir, log = run(tmp, f"{name}-{attempt}", *extra, env=env)
        short = fell_short(run_dir)
        if short is None:
            return code, run_dir, log, None
        print(f"{name} attempt {attempt}: the generator fell short: {short}")
    return code, run_dir, log, short


def verdict(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "report" / "verdict.json").read_text())


def client_rows(run_dir: Path) -> list[dict[str, Any]]:
    from base.history.writer import read_history

    return read_history(run_dir, "client").to_pylist()


def passed_per_host(
    run_dir: Path | None, code: int, log: str, *judged: str, short: str | None = None
) -> dict[str, Any]:
    """The run passed, every attempt from a worker host's own address (each host one
    client, none loopback), the ``judged`` checks passed, the first exercised, and the
    histories came home whole; returns the run's ``workers`` record. A run whose generator
    fell ``short`` on every attempt must say so and claim nothing (no check failed), the
    rest as above."""
    assert run_dir is not None, log[-3000:]
    v = verdict(run_dir)
    if short is not None:
        assert_short_honestly(run_dir, code, short)
    else:
        assert (code, v["verdict"]) == (0, "pass"), (v["reasons"], log[-3000:])
    run_json = json.loads((run_dir / "run.json").read_text())
    hosts = run_json["workers"]["hosts"]
    assert len(hosts) == 3 and all(h.startswith("198.18.") for h in hosts)
    rows = client_rows(run_dir)
    invoked = [r for r in rows if r["event"] == "connect_invoke"]
    assert {r["client_ip"] for r in invoked} == set(hosts), {r["client_ip"] for r in invoked}
    assert not [r for r in rows if (r["client_ip"] or "").startswith("127.")]
    checks = {c["name"]: c for c in v["checks"]}
    for name in judged:
        assert checks[name]["verdict"] in (("pass", "unknown") if short else ("pass",)), checks[
            name
        ]
    assert short or checks[judged[0]].get("exercised"), checks[judged[0]]
    # three workers' files, under the master's pid
    (phase,) = run_json["worker_phases"].values()
    assert sorted(w["index"] for w in phase) == [0, 1, 2]
    assert all(w["rows_received"] == w["rows_reported"] > 0 for w in phase), phase
    return dict(run_json["workers"])


def test_hosts_ip_rate_passes_per_host_and_its_ignored_override_fails(tmp_path: Path) -> None:
    code, run_dir, log, short = run_offered(
        tmp_path, "pass", "hosts-ip-rate", "--workers", "3", "--worker-netns"
    )
    passed_per_host(
        run_dir, code, log, "ip_rate_span", "ip_throttle_within_window", "model_replay",
        short=short,
    )  # fmt: skip

    code, run_dir, log = run(
        tmp_path,
        "fault",
        "hosts-ip-rate",
        "--workers",
        "3",
        "--worker-netns",
        "--set-acceptor",
        "harness.test.fault=ip_rate_override_ignored",
    )
    assert run_dir is not None, log[-3000:]
    v = verdict(run_dir)
    assert (code, v["verdict"]) == (1, "fail"), (v["reasons"], log[-3000:])
    failed = {c["name"]: c for c in v["checks"] if c["verdict"] == "fail"}
    assert {"model_replay", "ip_rate_span"} & set(failed), sorted(failed)
    overridden = json.loads((run_dir / "run.json").read_text())["workers"]["hosts"][1]
    seen = [w.get("client_ip") for c in failed.values() for w in c.get("witnesses") or []]
    assert overridden in seen, (overridden, seen)


def _kill_worker_mid_phase(out: Path, proc: subprocess.Popen[bytes]) -> None:
    """Once the load flows, kill every process in worker host 2's namespace."""
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline and proc.poll() is None:
        for ready in out.glob("*/loadgen/storm/w*.ready"):
            run_json = json.loads((ready.parents[2] / "run.json").read_text())
            ns = run_json["workers"]["namespaces"][1]
            time.sleep(4.0)  # mid-phase: rows recorded, none sent home yet
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
            for pid in pids.stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            (out / "killed").write_text(ns + " " + pids.stdout.replace("\n", " "))
            return
        time.sleep(0.2)


def test_a_worker_killed_mid_phase_makes_the_run_unknown_naming_it(tmp_path: Path) -> None:
    code, run_dir, log = run(
        tmp_path,
        "killed",
        "hosts-ip-rate",
        "--workers",
        "3",
        "--worker-netns",
        during=_kill_worker_mid_phase,
    )
    assert run_dir is not None, log[-3000:]
    assert (tmp_path / "killed" / "killed").is_file(), log[-3000:]
    v = verdict(run_dir)
    assert (code, v["verdict"]) == (2, "unknown"), (v["reasons"], log[-3000:])
    lost = [r for r in v["reasons"] if r.startswith("history incomplete: writer worker")]
    assert len(lost) == 1, v["reasons"]
    assert "went missing mid-phase after its last report of" in lost[0], lost
    assert "rows lost" in lost[0], lost
    assert " 0 rows lost" not in lost[0], lost
    # named by the address of the host it ran on: host 2's, whose namespace was killed
    host2 = json.loads((run_dir / "run.json").read_text())["workers"]["hosts"][1]
    assert f"{host2}," in lost[0], (lost, host2)


def test_a_worker_200_ms_off_has_its_rows_moved_and_the_verdict_holds(tmp_path: Path) -> None:
    skew = {"HARNESS_TEST_CLOCK_SKEW_NS": f"0,{SKEW_NS},0"}
    code, run_dir, log, short = run_offered(
        tmp_path, "skew", "hosts-ip-rate", "--workers", "3", "--worker-netns", env=skew
    )
    assert run_dir is not None, log[-3000:]
    v = verdict(run_dir)
    if short is not None:  # the rows are still moved; the verdict claims nothing
        assert_short_honestly(run_dir, code, short)
    else:
        assert (code, v["verdict"]) == (0, "pass"), (v["reasons"], log[-3000:])
    moved = v.get("clock_alignment") or []
    assert moved, "no worker's rows were moved"
    for m in moved:  # only worker 1's files, back by the offset it measured, within its bound
        assert "-w1-" in m["file"], m
        assert abs(m["shift_ms"] + SKEW_NS / 1e6) <= m["error_ms"] + 1.0, m
    offsets = {
        w["index"]: w["clock_offset_ns"]
        for w in json.loads((run_dir / "run.json").read_text())["worker_phases"]["storm"]
    }
    assert abs(offsets[1] + SKEW_NS) < 50_000_000, offsets


def test_a_phase_whose_workers_never_join_does_not_start(tmp_path: Path) -> None:
    """Two workers expected on this machine's master port, none started: exit 3."""
    spec = yaml.safe_load((CATALOG / "ci-gate.yaml").read_text())
    spec["timeouts"] = {"locust_start": 15}
    path = tmp_path / "never.yaml"
    path.write_text(yaml.safe_dump(spec))
    from base.localnet import free_port

    port = free_port()
    code, run_dir, log = run(
        tmp_path, "never", str(path), "--workers", "2", "--master-bind", f"127.0.0.1:{port}"
    )
    assert code == 3, log[-3000:]
    assert "0 of 2 worker(s) joined its master" in log and "the phase did not start" in log, log[
        -3000:
    ]
    assert run_dir is not None and not (run_dir / "report" / "verdict.json").exists()


@pytest.fixture(autouse=True)
def _no_leftovers() -> Iterator[None]:
    yield
    assert not netns.sweep(), "a run left worker hosts behind"


def test_hosts_ip_rate_passes_per_host_on_the_broker_target(tmp_path: Path) -> None:
    """Kafka's own enforcement, its client listener on the bridge: the broker sees each
    worker host's address, its ip quotas are set on them (worker host 2's override
    lower), and the per-IP checks judge those addresses. (The acceptor's seeded fault,
    the override ignored, has no counterpart in Kafka, so no fault run here.)"""
    code, run_dir, log, short = run_offered(
        tmp_path, "broker", "hosts-ip-rate", "--target", "broker", "--workers", "3",
        "--worker-netns",
    )  # fmt: skip
    workers = passed_per_host(
        run_dir, code, log, "client_ip_rate_span", "kafka_metric_ip_throttle_seen", short=short
    )
    assert run_dir is not None
    from base.history.writer import read_history

    (start,) = [
        json.loads(r["detail"])
        for r in read_history(run_dir, "harness").to_pylist()
        if r["event"] == "config" and r["reason"] == "start"
    ]
    host, hosts = workers["host"], workers["hosts"]
    assert start["listeners"].startswith(f"CLIENT://{host}:"), start["listeners"]
    assert start["ip_quotas"] == {"default": 5, hosts[1]: 2}, start["ip_quotas"]
