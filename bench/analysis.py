"""Analysis throughput: wall time and events/s of `analyze_run` on synthetic histories.

Usage: .venv/bin/python -m bench.analysis [--sizes 1000000 10000000] [--out DIR] [--no-html]
Generates a conforming synthetic run of each size (analysis.synth, rates × 10 so that the
storm stays realistic at size; the simulation takes ~30 s per million events), then
analyses it with a fresh local[*] SparkSession.
Results are printed and written to DIR/results.json (default .cache/bench-analysis/).
Not a test: numbers depend on the machine and on whoever else shares its cores.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _spec(size: int) -> Any:
    from analysis.synth import SynthSpec

    return SynthSpec(
        run_id=f"bench-{size}",
        scale=10,
        target_events=size,
        config_change={"listener.name.client.max.connection.creation.rate": 200},
    )


def _progress(size: int) -> Callable[[str], None]:
    def say(msg: str) -> None:
        print(f"[{size:,}]   {msg}", flush=True)

    return say


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--out", default=".cache/bench-analysis")
    parser.add_argument("--no-html", action="store_true", help="skip report.html")
    parser.add_argument("--keep", action="store_true", help="keep the generated runs")
    parser.add_argument("--spark-master", default=None)
    args = parser.parse_args()

    from analysis import analyze_run
    from analysis.synth import generate

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for size in args.sizes:
        run_dir = out / f"synth-{size}"
        shutil.rmtree(run_dir, ignore_errors=True)
        t = time.monotonic()
        print(f"[{size:,}] generating a conforming synthetic run in {run_dir} …", flush=True)
        gen = generate(run_dir, _spec(size))
        gen_s = time.monotonic() - t
        events = int(gen["events"])
        print(
            f"[{size:,}] {events:,} events, {gen['connections']:,} connections in {gen_s:.1f} s; "
            "analysing …",
            flush=True,
        )
        t = time.monotonic()
        verdict = analyze_run(
            run_dir,
            spark_master=args.spark_master,
            report=not args.no_html,
            progress=_progress(size),
        )
        wall = time.monotonic() - t
        row = {
            "target_events": size,
            "events": events,
            "connections": gen["connections"],
            "generate_s": round(gen_s, 1),
            "analyze_s": round(wall, 1),
            "events_per_s": round(events / wall),
            "verdict": verdict["verdict"],
            "html": not args.no_html,
            "cpus": os.cpu_count(),
            "load_avg_1m_at_end": round(os.getloadavg()[0], 2),
        }
        results.append(row)
        print(
            f"[{size:,}] analysed in {wall:.1f} s = {row['events_per_s']:,} events/s; "
            f"verdict {verdict['verdict']}",
            flush=True,
        )
        if not args.keep:
            shutil.rmtree(run_dir, ignore_errors=True)
    path = out / "results.json"
    path.write_text(json.dumps(results, indent=2))
    print("\n   events  analyse s   events/s  generate s  verdict  load(1m)")
    for r in results:
        print(
            f"{r['events']:>9,}  {r['analyze_s']:>9}  {r['events_per_s']:>9,}  "
            f"{r['generate_s']:>10}  {r['verdict']:<7}  {r['load_avg_1m_at_end']}"
        )
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
