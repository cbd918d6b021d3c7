"""A million connections and nothing lost: the `soak` scenario, then its history per minute.

    .venv/bin/python -m bench.soak [--connections 1000000] [--target acceptor|broker|both]
        [--out runs/soak]

Runs the `soak` scenario (`bench/soak.yaml`, kept out of the catalog: a sawtooth storm
of 600-1000 new connections/s from 60 addresses against a broker-wide creation rate and
a per-IP quota, both reached every minute, with steady clients alongside) for as long as
`--connections` takes at its mean rate (at least 15 minutes), with `harness run --gate`,
then reads the run's history and prints, per minute:

- connections (client attempts) and rows written (all sources);
- the accounting gap: attempts the `accounting` check could not explain (and those the
  kernel's drop counters explained);
- descriptors and RSS of the acceptor (its every process) and of the broker, from the
  runner's `process_stats` rows, and of the load;
- history bytes on disk; the acceptor's event-loop lag p99 (`loop_lag` rows: the
  heartbeat runs while admissions wait); the steady clients' request p99.

Then the pass rule: accounting gap 0; descriptors and RSS of the acceptor and the load,
and the broker's descriptors and heap in use, flat over the last 10 minutes (the
least-squares growth over those minutes within three standard deviations of the
per-second readings' residuals: the noise). The broker's RSS is printed, not judged: a
JVM's RSS grows as it commits heap pages up to its -Xmx whether or not anything leaks;
its heap in use (the exporter's `jvm_memory_used_bytes`) is what shows a leak; history
bytes per connection; the analysis time (< 5 min). Numbers go to
``<out>/soak-<target>.json`` and a markdown table beside it.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from base.history.rows import ClientRequestOk, HarnessKafkaMetrics, HarnessProcessStats

MIN_S = 60
NS = 1_000_000_000
SCENARIO = Path(__file__).resolve().parent / "soak.yaml"
#: the sawtooth's mean rate (its low and high, in soak.yaml)
MEAN_RATE = (600 + 1000) / 2
MIN_DURATION_S = 15 * MIN_S
PERIOD_S = 60  # the sawtooth's period
FLAT_LAST_S = 10 * MIN_S
ANALYSIS_BUDGET_S = 300


def say(msg: str) -> None:
    print(f"[soak] {msg}", flush=True)


def duration_for(connections: int) -> int:
    """Seconds of load for `connections` at the scenario's mean rate, at least 15 minutes,
    and one sawtooth period more (the load's first seconds ramp up; a run of 1112 s at a
    mean of 900/s offered 997,823)."""
    return max(MIN_DURATION_S, math.ceil(connections / MEAN_RATE) + PERIOD_S)


def scenario_file(duration_s: int, folder: Path) -> Path:
    """The soak scenario with its duration set."""
    import yaml

    data = yaml.safe_load(SCENARIO.read_text())
    data["duration"] = duration_s
    out = folder / "soak.yaml"
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def run_scenario(path: Path, target: str, log: Path) -> Path:
    """`harness run` the scenario, its progress lines shown; returns the run folder."""
    argv = [sys.executable, "-m", "harness", "run", str(path), "--target", target, "--gate"]
    say(f"{' '.join(argv[1:])} (log {log})")
    run_dir: Path | None = None
    with (
        log.open("w") as out,
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc,
    ):
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            m = re.search(r"history in (\S+)/history$", line.strip())
            if m and run_dir is None:
                run_dir = Path(m.group(1))
            if re.search(r"t= *\d+\.\d/|VERDICT|verdict:|failed|error", line) and (
                "t=" not in line or re.search(r"t= *\d+0\.\d/", line)  # every 10 s
            ):
                print(f"  {line.rstrip()}", flush=True)
    if run_dir is None:
        raise SystemExit(f"no run folder in {log}")
    return run_dir


def read_rows(run_dir: Path, events: list[str] | None, columns: list[str]) -> list[dict[str, Any]]:
    import pyarrow.dataset as ds

    data = ds.dataset(str(run_dir / "history"), format="parquet", partitioning=None)
    flt = ds.field("event").isin(events) if events else None
    return data.to_table(columns=columns, filter=flt).to_pylist()  # type: ignore[no-any-return]


def p99(values: list[float]) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, math.ceil(0.99 * len(values)) - 1)]


def flatness(points: list[tuple[float, float]]) -> dict[str, float] | None:
    """Least-squares slope of (seconds, value) and the residuals' standard deviation: the
    fitted growth over the points' span, and whether it is within 3 σ of the noise."""
    n = len(points)
    if n < 3:
        return None
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return None
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    resid = [y - (my + slope * (x - mx)) for x, y in points]
    sigma = math.sqrt(sum(r * r for r in resid) / (n - 2))
    span = points[-1][0] - points[0][0]
    growth = slope * span
    return {
        "mean": my,
        "growth": growth,
        "sigma": sigma,
        "flat": float(abs(growth) <= 3 * sigma or growth <= 0),
    }


def per_minute(run_dir: Path) -> dict[str, Any]:
    """The run's history bucketed by minute of the load (from its first phase_start)."""
    harness_rows = read_rows(
        run_dir,
        ["phase_start", "phase_end", "process_stats", "kernel_net", "kafka_metrics"],
        ["event", "mono_ns", "detail"],
    )
    starts = [r["mono_ns"] for r in harness_rows if r["event"] == "phase_start"]
    ends = [r["mono_ns"] for r in harness_rows if r["event"] == "phase_end"]
    t0 = min(starts)
    t_end = max(ends) if ends else max(r["mono_ns"] for r in harness_rows)
    minutes = max(1, math.ceil((t_end - t0) / (MIN_S * NS)))

    def minute(ns: int) -> int | None:
        m = (ns - t0) // (MIN_S * NS)
        return int(m) if 0 <= m < minutes else None

    table: list[dict[str, Any]] = [defaultdict(float) for _ in range(minutes)]
    for r in read_rows(run_dir, None, ["source", "event", "mono_ns"]):
        m = minute(r["mono_ns"])
        if m is None:
            continue
        table[m]["rows"] += 1
        if r["source"] == "client" and r["event"] == "connect_invoke":
            table[m]["connections"] += 1
    series: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for r in harness_rows:
        if r["event"] != "process_stats":
            continue
        d = HarnessProcessStats.parse(r["detail"])
        role = str(d.get("role"))
        x = (r["mono_ns"] - t0) / NS
        m = minute(r["mono_ns"])
        for key in ("fds", "rss_kb", "bytes"):
            if key in d:
                series[(role, key)].append((x, float(d[key])))
                if m is not None:
                    col = f"{role}_{key}"
                    table[m][col] = max(table[m].get(col, 0.0), float(d[key]))
    for r in harness_rows:  # the broker's JVM heap in use (its exporter; target broker)
        if r["event"] != "kafka_metrics" or r["mono_ns"] is None:
            continue
        m = minute(r["mono_ns"])
        scrape = HarnessKafkaMetrics.parse(r["detail"])
        heap = sum(
            float(v or 0)
            for n, labels, v in scrape.get("samples") or []
            if n == "jvm_memory_used_bytes" and labels.get("area") == "heap"
        )
        if heap:
            series[("broker", "heap_bytes")].append(((r["mono_ns"] - t0) / NS, heap))
            if m is not None:
                table[m]["broker_heap_bytes"] = max(table[m].get("broker_heap_bytes", 0.0), heap)
    lags: list[list[float]] = [[] for _ in range(minutes)]
    for r in read_rows(run_dir, ["loop_lag"], ["mono_ns", "delay_ms"]):
        m = minute(r["mono_ns"])
        if m is not None and r["delay_ms"] is not None:
            lags[m].append(float(r["delay_ms"]))
    steady: list[list[float]] = [[] for _ in range(minutes)]
    for r in read_rows(run_dir, ["request_ok"], ["mono_ns", "latency_ms", "detail"]):
        m = minute(r["mono_ns"])
        if m is None or r["latency_ms"] is None:
            continue
        if ClientRequestOk.parse(r["detail"]).get("profile") == "steady":
            steady[m].append(float(r["latency_ms"]))
    for m in range(minutes):
        table[m]["loop_lag_p99_ms"] = p99(lags[m])
        table[m]["loop_lag_n"] = len(lags[m])
        table[m]["steady_p99_ms"] = p99(steady[m])
    return {"t0": t0, "minutes": minutes, "table": [dict(t) for t in table], "series": series}


def verdict_numbers(
    run_dir: Path, t0: int, minutes: int, table: list[dict[str, Any]]
) -> dict[str, Any]:
    verdict = json.loads((run_dir / "report" / "verdict.json").read_text())
    acc: dict[str, Any] = next((c for c in verdict["checks"] if c["name"] == "accounting"), {})
    for key, col in (("unexplained_ns", "gap"), ("kernel_dropped_ns", "kernel_dropped")):
        for ns in (acc.get("series") or {}).get(key, []):
            m = (ns - t0) // (MIN_S * NS)
            if 0 <= m < minutes:
                table[int(m)][col] = table[int(m)].get(col, 0) + 1
    return {
        "verdict": verdict.get("verdict"),
        "accounting": {k: acc.get(k) for k in ("verdict", "observed", "judged")},
        "events": verdict.get("events"),
    }


#: the series the pass rule holds flat (see the module's docstring for the broker's RSS)
JUDGED_FLAT = frozenset(
    {
        "acceptor_fds",
        "acceptor_rss_kb",
        "load_fds",
        "load_rss_kb",
        "broker_fds",
        "broker_heap_bytes",
    }
)


def analysis_seconds(run_dir: Path) -> float | None:
    verdict = json.loads((run_dir / "report" / "verdict.json").read_text())
    seconds = verdict.get("analysis_seconds")
    return None if seconds is None else float(seconds)


def report(target: str, run_dir: Path, log: Path) -> dict[str, Any]:
    pm = per_minute(run_dir)
    table = pm["table"]
    numbers = verdict_numbers(run_dir, pm["t0"], pm["minutes"], table)
    connections = int(sum(t.get("connections", 0) for t in table))
    last = pm["minutes"] * MIN_S - FLAT_LAST_S
    flat = {
        f"{role}_{key}": flatness([(x, y) for x, y in pts if x >= last])
        for (role, key), pts in pm["series"].items()
        if role in ("acceptor", "broker", "load") and key in ("fds", "rss_kb", "heap_bytes")
    }
    hist_bytes = max((y for x, y in pm["series"].get(("history", "bytes"), [])), default=0.0)
    out = {
        "target": target,
        "run": str(run_dir),
        "connections": connections,
        "minutes": pm["minutes"],
        "history_bytes": hist_bytes,
        "bytes_per_connection": hist_bytes / connections if connections else None,
        "analysis_s": analysis_seconds(run_dir),
        "flat_last_10_min": flat,
        "gap": sum(t.get("gap", 0) for t in table),
        **numbers,
        "per_minute": table,
    }
    return out


def markdown(r: dict[str, Any]) -> str:
    roles = ("acceptor", "broker", "load")
    head = (
        "| min | connections | rows | gap | kernel-dropped | "
        + " | ".join(f"{x} fds | {x} RSS MB" for x in roles)
        + " | broker heap MB | history MB | loop lag p99 ms (n) | steady p99 ms |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for m, t in enumerate(r["per_minute"]):

        def cell(key: str, scale: float = 1.0, t: dict[str, Any] = t) -> str:
            v = t.get(key)
            return "–" if v is None else f"{v / scale:.0f}"

        lag = t.get("loop_lag_p99_ms")
        steady = t.get("steady_p99_ms")
        lines.append(
            f"| {m + 1} | {cell('connections')} | {cell('rows')} | {t.get('gap', 0)} | "
            f"{t.get('kernel_dropped', 0)} | "
            + " | ".join(f"{cell(f'{x}_fds')} | {cell(f'{x}_rss_kb', 1024)}" for x in roles)
            + f" | {cell('broker_heap_bytes', 2**20)} | {cell('history_bytes', 2**20)} | "
            + (f"{lag:.1f} ({t['loop_lag_n']})" if lag is not None else "–")
            + f" | {'–' if steady is None else f'{steady:.1f}'} |"
        )
    flat = "; ".join(
        f"{k}: growth {v['growth']:+.0f} vs σ {v['sigma']:.1f} → {'flat' if v['flat'] else 'GROWS'}"
        + ("" if k in JUDGED_FLAT else " (not judged)")
        for k, v in r["flat_last_10_min"].items()
        if v is not None
    )
    bpc = r["bytes_per_connection"]
    lines += [
        "",
        f"{r['connections']} connections in {r['minutes']} min on {r['target']}; verdict "
        f"{r['verdict']}; accounting {r['accounting'].get('verdict')}, gap {r['gap']}",
        f"history {r['history_bytes'] / 2**20:.0f} MB, "
        + (f"{bpc:.0f} bytes per connection" if bpc else "no connections")
        + f"; analysis {r['analysis_s']} s (budget {ANALYSIS_BUDGET_S} s)",
        f"last 10 minutes: {flat}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--connections", type=int, default=1_000_000)
    ap.add_argument("--target", choices=("acceptor", "broker", "both"), default="acceptor")
    ap.add_argument("--out", type=Path, default=Path("runs/soak"))
    ap.add_argument("--reuse", type=Path, help="report on an existing soak run folder")
    ap.add_argument(
        "--seconds", type=int, help="load for this long instead (a trial; not a soak's pass)"
    )
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    targets = ["acceptor", "broker"] if args.target == "both" else [args.target]
    duration = args.seconds or duration_for(args.connections)
    failed = False
    for target in targets:
        log = args.out / f"soak-{target}.log"
        if args.reuse:
            run_dir = args.reuse
        else:
            say(f"{target}: {duration} s of load (~{int(duration * MEAN_RATE)} connections)")
            run_dir = run_scenario(scenario_file(duration, args.out), target, log)
        started = time.monotonic()
        r = report(target, run_dir, log)
        say(f"history read in {time.monotonic() - started:.1f} s")
        text = markdown(r)
        print(text)
        (args.out / f"soak-{target}.json").write_text(json.dumps(r, indent=2, default=str))
        (args.out / f"soak-{target}.md").write_text(text + "\n")
        say(f"numbers: {args.out / f'soak-{target}.json'}, table {args.out / f'soak-{target}.md'}")
        flat_ok = all(
            v is None or v["flat"] for k, v in r["flat_last_10_min"].items() if k in JUDGED_FLAT
        )
        budget_ok = r["analysis_s"] is not None and r["analysis_s"] < ANALYSIS_BUDGET_S
        failed |= not (r["gap"] == 0 and flat_ok and budget_ok and r["verdict"] == "pass")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
