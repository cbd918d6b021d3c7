"""Benchmark: TLS connections through the acceptor's two TLS modes beside Kafka direct.

One real broker (local launcher) with an SSL listener; per round, the storm engine opens
``--seconds`` x ``--rate`` TLS connections (connect, full TLS handshake, ApiVersions,
close; resumption off, as Kafka's clients) against each path in turn:

  direct        the broker's SSL listener itself;
  pass-through  the acceptor relaying the TLS bytes untouched (connection quotas only);
  terminate     the acceptor ending TLS with its own certificate and opening TLS to the
                broker (every request read; what request quotas per principal need).

Per path: connections served per second over the phase (first start to last outcome),
the served share, p50/p99 time to the first response, and the CPU per served connection
of the acceptor (its process, /proc) and of the broker (its JVM). Rates on this shared
2-core machine move with everything else running; compare paths within one run (the
rounds alternate them).

    .venv/bin/python -m bench.tls_modes --rounds 3 --rate 60 --seconds 8

Prints each round and the medians; JSON in bench/results/tls-modes-<time>.json (or --json).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.output import write_results
from bench.toolkit.fronts import start_acceptor, stop_process
from bench.toolkit.trogdor import tree_cpu_s

PATHS = ("direct", "pass-through", "terminate")


def _phase(port: int, tls: Any, rate: float, seconds: float, tag: str) -> dict[str, Any]:
    import pyarrow.parquet as pq

    from loadprofiles import arrivals
    from loadprofiles.client_history import ClientHistory
    from loadprofiles.engine import EngineConfig, StormEngine

    with tempfile.TemporaryDirectory() as tmp:
        hist = ClientHistory(Path(tmp), tag)
        cfg = EngineConfig(
            host="127.0.0.1", port=port, shape="apiversions", max_lag_ms=5000.0, tls=tls,
            connect_timeout_s=10.0,
        )  # fmt: skip
        spec = arrivals.parse_arrival(f"constant:rate={rate}")
        n = int(rate * seconds)
        schedule = arrivals.split(arrivals.arrival_times(spec, max_arrivals=n), 0, 1)
        t0 = time.monotonic()
        stats = StormEngine(cfg, hist).run(schedule, time.monotonic_ns() + 50_000_000)
        wall = time.monotonic() - t0
        hist.close()
        rows = pq.read_table(Path(tmp) / "client").to_pylist()
    ready = sorted(float(r["latency_ms"]) for r in rows if r["event"] == "ready")
    served = len(ready)
    return {
        "intended": n,
        "served": served,
        "served_per_s": served / wall if wall > 0 else 0.0,
        "ready_p50_ms": ready[len(ready) // 2] if ready else None,
        "ready_p99_ms": ready[min(len(ready) - 1, int(len(ready) * 0.99))] if ready else None,
        "outcomes": dict(stats.outcomes),
        "wall_s": wall,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rate", type=float, default=60.0, help="TLS connections per second")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)

    from base.localnet import free_port
    from base.security import clientprops
    from base.security.client import settings_from_properties
    from broker.local import start_local

    work = Path(tempfile.mkdtemp(prefix="tls-modes-"))
    print(f"starting Kafka with an SSL listener (work {work})", flush=True)
    broker = start_local(
        listeners=("PLAINTEXT", "TLS=SSL"), workdir=work / "broker",
        progress=lambda _m: None, metrics=False,
    )  # fmt: skip
    procs: dict[str, Any] = {}
    results: dict[str, list[dict[str, Any]]] = {p: [] for p in PATHS}
    try:
        files = broker.security_files
        assert files is not None
        props = clientprops.read(broker.client_configs["TLS"])
        props.pop("bootstrap.servers", None)
        _, tls, _ = settings_from_properties(props)
        upstream = int(broker.listener_ports["TLS"])
        ports = {"direct": upstream}
        for mode in ("pass-through", "terminate"):
            ports[mode] = free_port()
            sets = [
                "listener.security.protocol.map=CLIENT:SSL",
                f"listener.name.client.tls.mode={mode}",
                f"listener.name.client.ssl.keystore.location={files.acceptor_keystore}",
                f"listener.name.client.ssl.truststore.location={files.ca}",
            ]
            procs[mode] = start_acceptor(
                work, mode, ports[mode], upstream, "auto", sets=tuple(sets), own_session=True
            )
        assert broker.pid is not None
        broker_pid = broker.pid
        _phase(upstream, tls, args.rate, 2.0, "warm")  # a cold JVM's first handshakes
        for rnd in range(1, args.rounds + 1):
            for path in PATHS:
                front = procs.get(path)
                a0 = tree_cpu_s(front.pid) if front is not None else 0.0
                b0 = tree_cpu_s(broker_pid)
                r = _phase(ports[path], tls, args.rate, args.seconds, path)
                served = max(r["served"], 1)
                r["acceptor_cpu_ms_per_conn"] = (
                    (tree_cpu_s(front.pid) - a0) * 1000 / served if front is not None else None
                )
                r["broker_cpu_ms_per_conn"] = (tree_cpu_s(broker_pid) - b0) * 1000 / served
                results[path].append(r)
                acc = r["acceptor_cpu_ms_per_conn"]
                print(
                    f"round {rnd} {path:>12}: served {r['served']}/{r['intended']} "
                    f"({r['served_per_s']:.1f}/s), ready p50 {r['ready_p50_ms']:.1f} ms "
                    f"p99 {r['ready_p99_ms']:.1f} ms, CPU/conn acceptor "
                    f"{'-' if acc is None else f'{acc:.2f}'} ms, broker "
                    f"{r['broker_cpu_ms_per_conn']:.2f} ms",
                    flush=True,
                )
    finally:
        for proc in procs.values():
            stop_process(proc)
        broker.stop()

    def med(path: str, key: str) -> float | None:
        vals = [r[key] for r in results[path] if r[key] is not None]
        return statistics.median(vals) if vals else None

    summary: dict[str, Any] = {}
    direct_rate = med("direct", "served_per_s") or 0.0
    print(f"medians of {args.rounds} rounds at {args.rate:g}/s offered:")
    for path in PATHS:
        rate = med(path, "served_per_s") or 0.0
        summary[path] = {
            "served_per_s": rate,
            "vs_direct": rate / direct_rate if direct_rate else None,
            "ready_p50_ms": med(path, "ready_p50_ms"),
            "ready_p99_ms": med(path, "ready_p99_ms"),
            "acceptor_cpu_ms_per_conn": med(path, "acceptor_cpu_ms_per_conn"),
            "broker_cpu_ms_per_conn": med(path, "broker_cpu_ms_per_conn"),
        }
        s = summary[path]
        acc = s["acceptor_cpu_ms_per_conn"]
        print(
            f"  {path:>12}: {rate:.1f}/s ({(s['vs_direct'] or 0):.2f}x direct), ready p50 "
            f"{s['ready_p50_ms']:.1f} ms p99 {s['ready_p99_ms']:.1f} ms, CPU/conn acceptor "
            f"{'-' if acc is None else f'{acc:.2f}'} ms, broker "
            f"{s['broker_cpu_ms_per_conn']:.2f} ms"
        )
    write_results(
        {"args": vars(args), "rounds": results, "summary": summary}, "tls-modes", args.json
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
