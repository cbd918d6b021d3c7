"""Generator accuracy: offered vs intended connection arrivals at increasing rates.

Why: a limit check is only meaningful if the generator really offered the load it
intended; the checks turn ``unknown`` when it did not. This measures, on this
machine, up to which arrival rate the storm profile keeps up (offered within 5 % of
intended, i.e. few arrivals started more than ``--max-lag-ms`` late), in one Locust
process and with ``--processes 2``.

Each step runs the real storm profile (connect → ApiVersions → Metadata → close) as
a Locust subprocess against a real broker for ``--seconds`` and reads the client
history it wrote: intended = connect_invoke + connect_fail(not_offered),
offered = connect_invoke, lag = invoke time − intended time.

    .venv/bin/python -m bench.generator                       # starts its own broker
    .venv/bin/python -m bench.generator --bootstrap 127.0.0.1:9092 --rates 50,100,200

Results: a table on stdout and JSON in bench/results/generator-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from harness.history import read_history
from loadprofiles.launch import locust_command, run

RESULTS = Path(__file__).resolve().parent / "results"


def measure(
    bootstrap: str, rate: int, seconds: float, processes: int, max_lag_ms: float, workdir: Path
) -> dict[str, Any]:
    """One step: run the storm at ``rate``/s and summarise intended vs offered."""
    run_dir = workdir / f"r{rate}-p{processes}"
    argv = locust_command(
        "storm",
        host=bootstrap,
        run_time_s=seconds + 20,
        run_dir=run_dir,
        run_id=run_dir.name,
        users=processes,
        processes=processes if processes > 1 else None,
        options={
            "arrival": f"constant:rate={rate}",
            "max_arrivals": int(rate * seconds),
            "max_lag_ms": max_lag_ms,
            "source_ips": "127.0.0.2-127.0.0.65",
            "request_timeout": 5,
        },
        extra=["--only-summary", "--loglevel", "WARNING"],
    )
    started = time.monotonic()
    done = run(argv, timeout_s=seconds + 120)
    wall = time.monotonic() - started
    client = read_history(run_dir, "client").to_pandas()
    invokes = client[client.event == "connect_invoke"]
    missed = client[(client.event == "connect_fail") & (client.reason == "not_offered")]
    details = [json.loads(d) for d in invokes.detail]
    intended_ns = np.array([d["intended_mono_ns"] for d in details], dtype=np.int64)
    lag_ms = (invokes.mono_ns.to_numpy() - intended_ns) / 1e6 if len(invokes) else np.zeros(1)
    span_s = (invokes.mono_ns.max() - invokes.mono_ns.min()) / 1e9 if len(invokes) > 1 else 0.0
    intended = len(invokes) + len(missed)
    closed = client[client.event == "closed"]
    outcomes = (
        closed.detail.map(lambda d: json.loads(d)["outcome"]).value_counts().to_dict()
        if len(closed)
        else {}
    )
    causes: dict[str, int] = {}
    for d in missed.detail:
        cause = json.loads(d).get("cause", "?")
        causes[cause] = causes.get(cause, 0) + 1
    return {
        "rate": rate,
        "processes": processes,
        "seconds": seconds,
        "scheduled": int(rate * seconds),
        "intended": intended,
        "offered": len(invokes),
        "not_offered": causes,
        "offered_ratio": len(invokes) / intended if intended else 0.0,
        "offered_rate": len(invokes) / span_s if span_s else 0.0,
        "lag_ms_p50": float(np.percentile(lag_ms, 50)),
        "lag_ms_p99": float(np.percentile(lag_ms, 99)),
        "lag_ms_max": float(lag_ms.max()),
        "outcomes": outcomes,
        "locust_exit": done.returncode,
        "wall_s": round(wall, 1),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.generator", description=__doc__)
    p.add_argument("--bootstrap", default="", help="an existing broker (default: start one)")
    p.add_argument("--rates", default="50,100,200,400,800", help="arrivals/s, comma-separated")
    p.add_argument("--seconds", type=float, default=10.0, help="length of each step")
    p.add_argument("--processes", default="1,2", help="Locust process counts to compare")
    p.add_argument("--max-lag-ms", type=float, default=100.0, help="later = not offered")
    a = p.parse_args(argv)
    try:
        rates = [int(r) for r in a.rates.split(",") if r.strip()]
        procs = [int(n) for n in a.processes.split(",") if n.strip()]
    except ValueError:
        print("bench.generator: --rates/--processes: comma-separated integers", file=sys.stderr)
        return 2
    broker = None
    bootstrap = a.bootstrap
    if not bootstrap:
        from harness.broker import start_broker

        print("bench.generator: starting a local Kafka broker…", flush=True)
        broker = start_broker(launcher="local")
        bootstrap = broker.bootstrap
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"generator-{time.strftime('%Y%m%dT%H%M%S')}.json"
    rows: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench-generator-") as tmp:
            for n in procs:
                for rate in rates:
                    print(
                        f"bench.generator: {rate}/s for {a.seconds:.0f} s, {n} process(es)…",
                        flush=True,
                    )
                    row = measure(bootstrap, rate, a.seconds, n, a.max_lag_ms, Path(tmp))
                    rows.append(row)
                    print(
                        f"  intended {row['intended']}, offered {row['offered']} "
                        f"({100 * row['offered_ratio']:.1f} %), {row['offered_rate']:.0f}/s, "
                        f"lag p50 {row['lag_ms_p50']:.1f} ms p99 {row['lag_ms_p99']:.0f} ms, "
                        f"not offered {row['not_offered']}, outcomes {row['outcomes']}",
                        flush=True,
                    )
    finally:
        if broker is not None:
            broker.stop()
    meta = {"cpus": os.cpu_count(), "load_avg": os.getloadavg(), "bootstrap": bootstrap}
    out.write_text(json.dumps({"machine": meta, "steps": rows}, indent=2))
    print(f"\n{'procs':>5} {'rate/s':>7} {'offered %':>9} {'offered/s':>9} {'lag p99 ms':>10}")
    for r in rows:
        print(
            f"{r['processes']:>5} {r['rate']:>7} {100 * r['offered_ratio']:>9.1f} "
            f"{r['offered_rate']:>9.0f} {r['lag_ms_p99']:>10.0f}"
        )
    for n in procs:
        held = [
            r["rate"]
            for r in rows
            if r["processes"] == n
            and r["offered_ratio"] >= 0.95
            and abs(r["offered_rate"] - r["rate"]) <= 0.05 * r["rate"]
        ]
        best = f"{max(held)}/s" if held else "none"
        print(f"highest rate held within 5 % with {n} process(es): {best}")
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
