"""Analysis throughput: wall time, events/s and the share of time per check, per size.

Usage: .venv/bin/python -m bench.analysis [--sizes 10000 1000000 10000000] [--out DIR]
       [--html] [--spark-master URL] [--regenerate]
Each size is a conforming synthetic run (analysis.synth; 10 k at scale 1, the larger ones at
rates × 10 so that the storm stays realistic at size). Generated histories are cached in
DIR/synth-<size>/ (the simulation takes ~30 s per million events) and reused while their
spec is unchanged. Each size is analysed by `analyze_run` in a process of its own, so the
wall time includes Spark's (and the JVM's) start. The per-phase times come from
analyze_run's progress lines (Spark start, load, each check, report); a check's time
includes any shared table it was the first to build. CPU s is this process's and the
driver JVM's CPU time (Python workers the JVM has not reaped are missed), steadier than
wall time on a shared machine. Results are printed and written to DIR/results.json
(default .cache/bench-analysis/). Not a test: numbers depend on whoever else shares the
cores.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from harness import procfs

CHECK_LINE = re.compile(r"^\s+(?P<name>\w+)\s+(?P<verdict>pass|fail|unknown|n/a)\s+\(")


def _spec(size: int) -> Any:
    from analysis.synth import SynthSpec

    return SynthSpec(
        run_id=f"bench-{size}",
        scale=1 if size <= 100_000 else 10,
        target_events=size,
        config_change={"listener.name.client.max.connection.creation.rate": 200},
    )


def cached_run(out: Path, size: int, regenerate: bool) -> tuple[Path, dict[str, Any]]:
    """The synthetic run of `size` events, generated once per spec and reused."""
    from analysis.synth import generate

    run_dir = out / f"synth-{size}"
    spec = _spec(size)
    key = json.dumps(asdict(spec), sort_keys=True, default=sorted)
    stamp = run_dir / "bench-spec.json"
    if not regenerate and stamp.exists():
        cached = json.loads(stamp.read_text())
        if cached.get("spec") == key:
            print(f"[{size:,}] reusing the cached synthetic run {run_dir}", flush=True)
            return run_dir, cached["generated"]
    shutil.rmtree(run_dir, ignore_errors=True)
    t = time.monotonic()
    print(f"[{size:,}] generating a conforming synthetic run in {run_dir} …", flush=True)
    gen = generate(run_dir, spec)
    info = {
        "events": int(gen["events"]),
        "connections": int(gen["connections"]),
        "generate_s": round(time.monotonic() - t, 1),
    }
    stamp.write_text(json.dumps({"spec": key, "generated": info}))
    return run_dir, info


def _jvm_cpu_s() -> float:
    """CPU seconds of the Spark driver JVM (user + system, its reaped children included);
    0 before it started. Less sensitive to the shared machine's load than wall time."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None) if gateway is not None else None
    if proc is None:
        return 0.0
    stat = procfs.read_stat(proc.pid)
    return (stat.utime + stat.stime + stat.cutime + stat.cstime) / procfs.CLK_TCK


def _cpu_s() -> float:
    """This process's CPU seconds plus the driver JVM's."""
    t = os.times()
    return t.user + t.system + _jvm_cpu_s()


class PhaseClock:
    """Turns analyze_run's progress lines into per-phase wall times."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.t0 = time.monotonic()
        self.last = self.t0
        self.phase = "spark start"
        self.phases: dict[str, float] = {}

    def __call__(self, msg: str) -> None:
        now = time.monotonic()
        m = CHECK_LINE.match(msg)
        if m:  # a check line ends that check's phase
            self.phases[f"check {m['name']}"] = now - self.last
            self.last = now
            self.phase = "checks (between)"
            return
        self.phases[self.phase] = self.phases.get(self.phase, 0.0) + now - self.last
        self.last = now
        if msg.startswith("loading"):
            self.phase = "load + count"
        elif msg.startswith("report"):
            self.phase = "report.html"
        elif msg.startswith("checks"):
            self.phase = "checks (between)"
        print(f"[{self.size:,}]   {msg}", flush=True)

    def finish(self) -> dict[str, float]:
        now = time.monotonic()
        self.phases[self.phase] = self.phases.get(self.phase, 0.0) + now - self.last
        return self.phases


def measure(out: Path, size: int, args: argparse.Namespace) -> dict[str, Any]:
    """Analyse the cached run of `size` events in this (fresh) process; one result row."""
    from analysis import analyze_run

    run_dir, gen = cached_run(out, size, args.regenerate)
    print(f"[{size:,}] {gen['events']:,} events, {gen['connections']:,} connections; analysing")
    cpu0 = _cpu_s()
    clock = PhaseClock(size)
    verdict = analyze_run(run_dir, spark_master=args.spark_master, report=args.html, progress=clock)
    wall = time.monotonic() - clock.t0
    cpu = _cpu_s() - cpu0
    phases = clock.finish()
    row = {
        "target_events": size,
        **gen,
        "analyze_s": round(wall, 1),
        "events_per_s": round(gen["events"] / wall),
        "cpu_s": round(cpu, 1),
        "verdict": verdict["verdict"],
        "check_verdicts": {c["name"]: c["verdict"] for c in verdict["checks"]},
        "phases_s": {k: round(v, 2) for k, v in phases.items()},
        "html": args.html,
        "cpus": os.cpu_count(),
        "load_avg_1m_at_end": round(os.getloadavg()[0], 2),
    }
    print(
        f"[{size:,}] analysed in {wall:.1f} s = {row['events_per_s']:,} events/s; "
        f"verdict {verdict['verdict']}; load average {row['load_avg_1m_at_end']}",
        flush=True,
    )
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 1_000_000, 10_000_000])
    parser.add_argument("--out", default=".cache/bench-analysis")
    parser.add_argument("--html", action="store_true", help="also write report.html")
    parser.add_argument("--regenerate", action="store_true", help="ignore the cached runs")
    parser.add_argument("--spark-master", default=None)
    parser.add_argument("--row", type=Path, help=argparse.SUPPRESS)  # one size, row to file
    args = parser.parse_args()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.row:
        args.row.write_text(json.dumps(measure(out, args.sizes[0], args)))
        return 0
    results = []
    for size in sorted(args.sizes):
        # one process per size: each pays a JVM start, and a small run's JVM flags
        # (analysis.session.build_session) do not carry over to a large one
        row_file = out / f"row-{size}.json"
        row_file.unlink(missing_ok=True)
        argv = [sys.executable, "-m", "bench.analysis", "--sizes", str(size), "--out", str(out),
                "--row", str(row_file)]  # fmt: skip
        argv += ["--html"] * args.html + ["--regenerate"] * args.regenerate
        argv += ["--spark-master", args.spark_master] if args.spark_master else []
        if subprocess.run(argv, check=False).returncode != 0 or not row_file.exists():
            print(f"[{size:,}] the measurement failed (see above)", flush=True)
            return 1
        results.append(json.loads(row_file.read_text()))
    path = out / "results.json"
    path.write_text(json.dumps(results, indent=2))
    print(table(results))
    print(f"\nresults: {path}")
    return 0


def table(results: list[dict[str, Any]]) -> str:
    """Markdown: one row per size, then the share of the wall time per phase and size."""
    lines = [
        "| events | connections | analyse s | events/s | CPU s | verdict | load avg (1 m, end) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['events']:,} | {r['connections']:,} | {r['analyze_s']} | "
            f"{r['events_per_s']:,} | {r.get('cpu_s', '-')} | {r['verdict']} | "
            f"{r['load_avg_1m_at_end']} |"
        )
    names: list[str] = []
    for r in results:
        names += [k for k in r["phases_s"] if k not in names]
    order = sorted(names, key=lambda k: -max(r["phases_s"].get(k, 0.0) for r in results))
    head = " | ".join(f"{r['events']:,} events" for r in results)
    lines += ["", f"| phase (s, share of wall) | {head} |", "|---" * (len(results) + 1) + "|"]
    for name in order:
        cells = []
        for r in results:
            s = r["phases_s"].get(name)
            cells.append("-" if s is None else f"{s:.1f} ({s / r['analyze_s']:.0%})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
