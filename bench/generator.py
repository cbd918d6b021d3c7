"""Generator vs Kafka's own load tool: the project's storm next to Trogdor, in one run.

Why: a connection-limit test is only as good as the storm it can raise. This starts a
real local broker and, against it, in one run (so the ratios share the machine's
load):

* Trogdor's ``ConnectionStress`` (``org.apache.kafka:trogdor``, resolved with Maven
  into the project cache like Kafka's jars) with ``CONNECT`` and ``FETCH_METADATA``,
  ``--trogdor-threads`` threads, run as ``trogdor.agent.Agent --exec SPEC``;
* the project's profiles at increasing arrival rates, with full client history:
  ``connect.py`` (TCP connect, close), ``storm.py`` (connect, ApiVersions, Metadata,
  close), ``per_request.py`` (connect, ApiVersions, one Produce, close) and
  ``single_ip_flood.py`` (the storm's bootstrap, every connection from 127.0.0.9),
  each a Locust subprocess on the one storm engine.

Successes are counted on the broker (the JMX exporter's
``kafka_server_socket_server_metrics_connection_creation_total`` before and after
the load window), because Trogdor counts a 500 ms connect timeout as a success; the
project's own history gives the same count per outcome. CPU is each load process's
user+system time over its load window (``/proc/<pid>/stat`` of the process tree,
sampled at the window's edges: the project's ``--ready-dir`` markers, Trogdor's
"Waiting for completion"/"Task succeeded" lines), so JVM and Locust start-up are
not counted.

    .venv/bin/python -m bench.generator                        # ~3 minutes
    .venv/bin/python -m bench.generator --seconds 5 --storm-rates 1600 --connect-rates 2000
    .venv/bin/python -m bench.generator --no-trogdor --connect-rates '' --storm-rates 1600 \
        --per-request-rates 1600 --flood-rates 1600

Results: a table on stdout and JSON in bench/results/generator-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from base.history import read_history
from base.history.rows import ClientConnectInvoke
from bench.toolkit.trogdor import (
    SUCCESS_METRIC,
    accepted_total,
    run_trogdor,
    tree_cpu_s,
    trogdor_classpath,
)
from loadprofiles import readiness
from loadprofiles.launch import locust_command

RESULTS = Path(__file__).resolve().parent / "results"
SOURCE_IPS = "127.0.0.2-127.0.0.65"
#: the single-IP flood's one address (its profile's default)
FLOOD_IP = "127.0.0.9"
#: the per-request profile's topic (created before its first arrival)
BENCH_TOPIC = "bench-per-request"


# -- the project's profiles ------------------------------------------------------------------
def run_profile(
    profile: str,
    bootstrap: str,
    rate: int,
    seconds: float,
    processes: int,
    max_lag_ms: float,
    metrics_url: str | None,
    workdir: Path,
    broker_pid: int | None,
    command_config: Path | None = None,
) -> dict[str, Any]:
    """One step: ``rate``/s for ``seconds`` with full client history; CPU over the load window.
    `command_config`: a secured listener's client.properties (TLS, SASL)."""
    metric = SUCCESS_METRIC["secured" if command_config else "plaintext"]
    run_dir = workdir / f"{profile}-r{rate}-p{processes}"
    ready = run_dir / "ready"
    argv = locust_command(
        profile,
        host=bootstrap,
        run_time_s=seconds + 30,
        run_dir=run_dir,
        run_id=run_dir.name,
        users=processes,
        processes=processes if processes > 1 else None,
        options={
            "arrival": f"constant:rate={rate}",
            "max_arrivals": int(rate * seconds),
            "max_lag_ms": max_lag_ms,
            "source_ips": FLOOD_IP if profile == "single_ip_flood" else SOURCE_IPS,
            "request_timeout": 5,
            "ready_dir": ready,
            **({"topic": BENCH_TOPIC} if profile == "per_request" else {}),
            **({"command_config": str(command_config)} if command_config else {}),
        },
        extra=["--only-summary", "--loglevel", "WARNING"],
    )
    log = (workdir / f"{run_dir.name}.log").open("w")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    started = time.monotonic()
    t0 = c0 = a0 = b0 = None
    t1 = c1 = a1 = b1 = None
    deadline = started + seconds + 60
    while proc.poll() is None and time.monotonic() < deadline:
        n_ready, n_done = readiness.phase_state(ready)
        if t0 is None and n_ready >= processes:
            t0, c0 = time.monotonic(), tree_cpu_s(proc.pid)
            a0, b0 = (
                accepted_total(metrics_url, metric),
                (tree_cpu_s(broker_pid) if broker_pid else 0.0),
            )
        if t0 is not None and n_done >= processes:
            t1, c1 = time.monotonic(), tree_cpu_s(proc.pid)
            a1, b1 = (
                accepted_total(metrics_url, metric),
                (tree_cpu_s(broker_pid) if broker_pid else 0.0),
            )
            if processes > 1:
                os.killpg(proc.pid, signal.SIGTERM)  # workers never quit on their own
            break
        time.sleep(0.05)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    log.close()
    client = read_history(run_dir, "client").to_pandas()
    # the per-request profile's set-up connection (creating its topic) is not an arrival
    setup = client[client.detail.fillna("").str.contains('"profile": "setup"')].conn_id
    client = client[~client.conn_id.isin(setup)]
    invokes = client[client.event == "connect_invoke"]
    missed = client[(client.event == "connect_fail") & (client.reason == "not_offered")]
    intended_ns = np.array(
        [ClientConnectInvoke.parse(d)["intended_mono_ns"] for d in invokes.detail], dtype=np.int64
    )
    lag_ms = (invokes.mono_ns.to_numpy() - intended_ns) / 1e6 if len(invokes) else np.zeros(1)
    intended = len(invokes) + len(missed)
    span_s = (intended_ns.max() - intended_ns.min()) / 1e9 if len(invokes) > 1 else 0.0
    closed = client[client.event == "closed"]
    outcomes: dict[str, int] = {}
    for d in closed.detail:
        o = json.loads(d)["outcome"]
        outcomes[o] = outcomes.get(o, 0) + 1
    good = sum(outcomes.get(o, 0) for o in ("served", "delayed_served", "connected"))
    row: dict[str, Any] = {
        "tool": "project",
        "profile": profile,
        "rate": rate,
        "processes": processes,
        "intended": intended,
        "offered": len(invokes),
        "offered_ratio": len(invokes) / intended if intended else 0.0,
        "offered_per_s": len(invokes) / span_s if span_s else 0.0,
        "successes_per_s": good / span_s if span_s else 0.0,
        "lag_ms_p99": float(np.percentile(lag_ms, 99)),
        "outcomes": outcomes,
        "history_rows": len(client),
        "locust_exit": proc.returncode,
    }
    if t0 is not None and t1 is not None and c0 is not None and c1 is not None:
        window = t1 - t0
        row["window_s"] = round(window, 2)
        row["cpu_pct"] = round(100 * (c1 - c0) / window, 1)
        if broker_pid and b0 is not None and b1 is not None:
            row["broker_cpu_pct"] = round(100 * (b1 - b0) / window, 1)
        if a0 is not None and a1 is not None and span_s:
            row["broker_accepted_per_s"] = round((a1 - a0) / span_s, 1)
    row["held"] = (
        row["offered_ratio"] >= 0.95
        and abs(row["offered_per_s"] - rate) <= 0.05 * rate
        and good >= 0.95 * len(invokes)
    )
    return row


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.generator", description=__doc__)
    p.add_argument("--bootstrap", default="", help="an existing broker (default: start one)")
    p.add_argument("--metrics-url", default="", help="its JMX exporter /metrics (with --bootstrap)")
    p.add_argument("--connect-rates", default="1000,2000,3000", help="connect.py arrivals/s")
    p.add_argument("--storm-rates", default="800,1600,2400", help="storm.py arrivals/s")
    p.add_argument("--per-request-rates", default="800,1600,2400", help="per_request.py arrivals/s")
    p.add_argument("--flood-rates", default="800,1600,2400", help="single_ip_flood.py arrivals/s")
    p.add_argument("--seconds", type=float, default=8.0, help="length of each step")
    p.add_argument("--processes", type=int, default=1, help="Locust processes per step")
    p.add_argument("--max-lag-ms", type=float, default=100.0, help="later = not offered")
    p.add_argument("--trogdor-threads", type=int, default=8)
    p.add_argument("--no-trogdor", action="store_true", help="the project's steps only")
    p.add_argument(
        "--security",
        default="",
        choices=("", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
        help="load a secured listener of the started broker (SASL: SCRAM-SHA-512); both "
        "tools take its client keys, and a success is an authenticated connection "
        "(Kafka's successful-authentication-total)",
    )
    a = p.parse_args(argv)
    try:
        connect_rates, storm_rates = _ints(a.connect_rates), _ints(a.storm_rates)
        per_request_rates, flood_rates = _ints(a.per_request_rates), _ints(a.flood_rates)
    except ValueError:
        print("bench.generator: --*-rates: comma-separated integers", file=sys.stderr)
        return 2
    broker = None
    bootstrap, metrics_url, broker_pid = a.bootstrap, a.metrics_url or None, None
    command_config: Path | None = None
    client_conf: dict[str, str] | None = None
    if a.security and a.bootstrap:
        print("bench.generator: --security starts its own broker (no --bootstrap)", file=sys.stderr)
        return 2
    if not bootstrap:
        from broker import start_broker

        print("bench.generator: starting a local Kafka broker…", flush=True)
        if a.security:
            mech = ":SCRAM-SHA-512" if a.security.startswith("SASL_") else ""
            broker = start_broker(
                launcher="local", listeners=("PLAINTEXT", f"SEC={a.security}{mech}")
            )
            bootstrap = f"127.0.0.1:{broker.listener_ports['SEC']}"
            command_config = Path(broker.client_configs["SEC"])
            from base.security import clientprops

            client_conf = clientprops.read(command_config)
            client_conf.pop("bootstrap.servers", None)
        else:
            broker = start_broker(launcher="local")
            bootstrap = broker.bootstrap
        metrics_url = getattr(broker, "metrics_url", None)
        broker_pid = getattr(broker, "pid", None)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"generator-{time.strftime('%Y%m%dT%H%M%S')}.json"
    rows: list[dict[str, Any]] = []
    load0 = os.getloadavg()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-generator-") as tmp:
            work = Path(tmp)
            if not a.no_trogdor:
                cp = trogdor_classpath()
                for action in ("CONNECT", "FETCH_METADATA"):
                    print(f"bench.generator: Trogdor {action}, {a.seconds:g} s…", flush=True)
                    row = run_trogdor(
                        cp,
                        bootstrap,
                        action,
                        a.seconds,
                        a.trogdor_threads,
                        metrics_url,
                        work,
                        broker_pid,
                        client_conf,
                    )
                    rows.append(row)
                    print(f"  {json.dumps(row)[:400]}", flush=True)
            for profile, rates in (
                ("connect", connect_rates),
                ("storm", storm_rates),
                ("per_request", per_request_rates),
                ("single_ip_flood", flood_rates),
            ):
                for rate in rates:
                    print(f"bench.generator: {profile} {rate}/s for {a.seconds:g} s…", flush=True)
                    row = run_profile(
                        profile,
                        bootstrap,
                        rate,
                        a.seconds,
                        a.processes,
                        a.max_lag_ms,
                        metrics_url,
                        work,
                        broker_pid,
                        command_config,
                    )
                    rows.append(row)
                    print(
                        f"  offered {100 * row['offered_ratio']:.1f} % "
                        f"({row['offered_per_s']:.0f}/s), "
                        f"successes {row['successes_per_s']:.0f}/s, "
                        f"lag p99 {row['lag_ms_p99']:.0f} ms, CPU {row.get('cpu_pct')} %, "
                        f"outcomes {row['outcomes']}",
                        flush=True,
                    )
    finally:
        if broker is not None:
            broker.stop()
    meta = {
        "cpus": os.cpu_count(),
        "load_avg_before": load0,
        "load_avg_after": os.getloadavg(),
        "bootstrap": bootstrap,
        "seconds": a.seconds,
        "processes": a.processes,
        "security": a.security or "PLAINTEXT",
    }
    out.write_text(json.dumps({"machine": meta, "steps": rows}, indent=2, default=str))
    print_table(rows)
    print(f"results: {out}")
    return 0


def print_table(rows: list[dict[str, Any]]) -> None:
    trog = {r["action"]: r for r in rows if r["tool"] == "trogdor"}
    print(
        f"\n{'tool/shape':<24} {'rate/s':>7} {'offered%':>8} {'offered/s':>9} "
        f"{'ok conn/s':>9} {'broker/s':>8} {'lag p99':>7} {'CPU%':>6} {'brkCPU%':>7}"
    )
    for r in rows:
        name = f"trogdor {r['action']}" if r["tool"] == "trogdor" else f"project {r['profile']}"
        print(
            f"{name:<24} {r.get('rate', '-')!s:>7} "
            f"{100 * r['offered_ratio'] if 'offered_ratio' in r else 0:>8.1f} "
            f"{r.get('offered_per_s', r.get('ops_per_s', 0)):>9.0f} "
            f"{r['successes_per_s']:>9.0f} {r.get('broker_accepted_per_s', '-')!s:>8} "
            f"{r.get('lag_ms_p99', 0):>7.0f} {r.get('cpu_pct', '-')!s:>6} "
            f"{r.get('broker_cpu_pct', '-')!s:>7}"
        )
    for profile, action, per_arrival in (
        ("connect", "CONNECT", 1),
        ("storm", "FETCH_METADATA", 1),
        ("per_request", None, 1),
        ("single_ip_flood", "FETCH_METADATA", 1),
    ):
        steps = [r for r in rows if r["tool"] == "project" and r["profile"] == profile]
        if not steps:
            continue
        held = [r["rate"] for r in steps if r["held"]]
        best = max(held) if held else 0
        top = max(r["offered_per_s"] for r in steps)
        line = (
            f"{profile}: highest rate held within 5 %: {best or 'none'}/s, max offered {top:.0f}/s"
        )
        t = trog.get(action) if action else None
        if t and t.get("successes_per_s"):
            line += (
                f"; Trogdor {action} {t['successes_per_s']:.0f} connections/s -> "
                f"held/Trogdor = {best * per_arrival / t['successes_per_s']:.2f}x"
            )
        print(line)


if __name__ == "__main__":
    raise SystemExit(main())
