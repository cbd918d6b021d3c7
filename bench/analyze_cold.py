"""Cold `harness analyze` of one run, this tree against another, interleaved round by round.

Usage: .venv/bin/python -m bench.analyze_cold RUN --before TREE [--rounds 8] [--out FILE]

Each round runs `python -m harness analyze COPY` once from the other tree (``--before``, a
git worktree of the commit to compare with) and once from this one, each a fresh process
(its own driver JVM: cold), each on its own copy of RUN's history and run.json (the run's
own report/ is never touched). Measured per analysis: the **wall** time from the start
until its output closes (the JVM inherits it, so a JVM still exiting is counted, as anyone
capturing the output waits for it too), its CPU seconds (perf's task-clock over the
process and its descendants, when `perf` can count; else none), the seconds the analysis
itself reports and the load average at its end. Printed: each round, the medians, and
after/before as the median of the rounds' paired ratios; the verdicts of the two trees'
last rounds compared check by check (`bench.catalog_verdicts.differences`). Results go to
FILE (default bench/results/analyze-cold-<UTC stamp>.json). Not a test: the numbers depend
on whoever else shares the cores; interleaving puts both trees before the same machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.catalog_verdicts import copy_run, differences

HERE = Path(__file__).resolve().parent.parent
#: the verdict line's own figure (`… 4369 events in 10.94 s)`)
SECONDS = re.compile(r"events in ([0-9.]+) s\)")


def _perf() -> list[str]:
    """perf's prefix that counts task-clock into a file, or [] when perf cannot count."""
    if shutil.which("perf") is None:
        return []
    probe = subprocess.run(
        ["perf", "stat", "-x,", "-e", "task-clock", "true"], capture_output=True, text=True
    )
    return ["perf", "stat", "-x,", "-e", "task-clock", "-o"] if probe.returncode == 0 else []


def analyse_once(tree: Path, run: Path, perf: list[str], scratch: Path) -> dict[str, Any]:
    """One cold `harness analyze` of ``run`` by ``tree``'s analysis."""
    counts = scratch / "perf.txt"
    argv = [*perf, str(counts)] if perf else []
    argv += [sys.executable, "-m", "harness", "analyze", str(run), "--quiet"]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    t0 = time.monotonic()
    proc = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True, timeout=900)
    wall = time.monotonic() - t0  # `run` returns once the output closed: the JVM's exit too
    if proc.returncode != 0:
        raise SystemExit(f"{tree}: harness analyze {run} exited {proc.returncode}:\n{proc.stderr}")
    cpu = None
    if perf and counts.is_file():
        for line in counts.read_text().splitlines():
            if "task-clock" in line:
                cpu = float(line.split(",")[0]) / 1000
    said = SECONDS.search(proc.stdout)
    return {
        "wall_s": round(wall, 2),
        "cpu_s": None if cpu is None else round(cpu, 2),
        "analysis_s": float(said.group(1)) if said else None,
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def _median(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return round(statistics.median(values), 2) if values else None


def summary(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Medians per tree and, per measure, the median of the rounds' after/before ratios."""
    out: dict[str, Any] = {}
    for key in ("wall_s", "cpu_s", "analysis_s"):
        before = _median([r["before"] for r in rounds], key)
        after = _median([r["after"] for r in rounds], key)
        ratios = [
            r["after"][key] / r["before"][key]
            for r in rounds
            if r["after"].get(key) and r["before"].get(key)
        ]
        out[key] = {
            "before": before,
            "after": after,
            "paired_ratio": round(statistics.median(ratios), 3) if ratios else None,
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--before", type=Path, required=True, help="a worktree to compare with")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if not (args.run / "history").is_dir():
        raise SystemExit(f"{args.run}: no history/ (a run directory?)")
    if not (args.before / "analysis" / "__init__.py").is_file():
        raise SystemExit(f"--before {args.before}: no analysis/ there (a worktree of the repo?)")
    if args.rounds < 1:
        raise SystemExit(f"--rounds {args.rounds}: at least one")
    trees = {"before": args.before.resolve(), "after": HERE}
    perf = _perf()
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    out = args.out or HERE / "bench" / "results" / f"analyze-cold-{stamp}.json"
    rounds: list[dict[str, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory(prefix="analyze-cold-") as tmp:
        scratch = Path(tmp)
        copies = {label: copy_run(args.run, scratch / label) for label in trees}
        for i in range(1, args.rounds + 1):
            row = {}
            for label, tree in trees.items():
                row[label] = analyse_once(tree, copies[label], perf, scratch)
                m = row[label]
                print(
                    f"[round {i}/{args.rounds}] {label:<6} wall {m['wall_s']:6.2f} s  cpu "
                    f"{m['cpu_s'] if m['cpu_s'] is not None else '-'} s  analysis "
                    f"{m['analysis_s']} s  load {m['load_avg_1m']}",
                    flush=True,
                )
            rounds.append(row)
        verdicts = {
            label: json.loads((copies[label] / "report" / "verdict.json").read_text())
            for label in trees
        }
        diffs = differences(verdicts["before"], verdicts["after"])
    totals = summary(rounds)
    result: dict[str, Any] = {
        "run": str(args.run),
        "before": str(trees["before"]),
        "after": str(HERE),
        "cpus": os.cpu_count(),
        "rounds": rounds,
        "summary": totals,
        "verdict_differences": diffs,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    for key, s in totals.items():
        print(f"{key:<11} before {s['before']}  after {s['after']}  paired after/before "
              f"{s['paired_ratio']}")  # fmt: skip
    print("verdicts: the same, check by check" if not diffs else "verdicts differ:")
    for line in diffs:
        print(f"  {line}")
    print(f"results: {out}")
    return 0 if not diffs else 1


if __name__ == "__main__":
    raise SystemExit(main())
