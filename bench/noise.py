"""Verdicts beside neighbours: scenarios on both targets, quiet and with `--noise`, one table.

Usage:
  .venv/bin/python -m bench.noise --scenarios ci-gate,auth-failure-storm \\
      --targets acceptor,broker --noise cpu=2,fork=20,io=1 --rounds 2 [--no-quiet]

Each (round, scenario, target, condition) is one `harness run SCENARIO --target T --gate`
(the user's own command, a process of its own; `--noise SPEC` under noise), one after the
other. The table says per run: the verdict, its cause (the verdict's first reason: for an
UNKNOWN, what was not judged and why, with the measured figures), the run's and the
analysis's seconds, the front's saturated windows, the observations not timed (inside a
stall their observer measured) and the stalls the engines measured. The bench's own
verdict: no FAIL under noise, every UNKNOWN with a cause, and the share of PASS under noise
(the issue's bar: at least 80 %). Numbers go to bench/results/noise-<time>.json; the runs
stay under --out.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.output import args_record, write_results

RUN_LINE = re.compile(r"^scenario \S+ on \S+: \d+s wall, run (?P<dir>\S+)$")
NOT_TIMED = re.compile(r"(\d+) not timed")


def one_run(
    scenario: str, target: str, noise: str | None, out: Path, placement: str, log: Path
) -> dict[str, Any]:
    argv = [sys.executable, "-m", "harness", "run", scenario, "--target", target, "--gate"]
    argv += ["--out", str(out), "--placement", placement]
    if noise:
        argv += ["--noise", noise]
    t0 = time.monotonic()
    with open(log, "w", encoding="utf-8") as f:
        code = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, check=False).returncode
    wall = time.monotonic() - t0
    run_dir = None
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        m = RUN_LINE.match(line.strip())
        if m:
            run_dir = Path(m["dir"])
    row: dict[str, Any] = {
        "scenario": scenario,
        "target": target,
        "noise": noise or "",
        "exit": code,
        "wall_s": round(wall, 1),
        "run_dir": str(run_dir) if run_dir else None,
        "log": str(log),
    }
    verdict_path = run_dir / "report" / "verdict.json" if run_dir else None
    if verdict_path is None or not verdict_path.is_file():
        row.update(verdict="none", cause=f"no verdict (exit {code}; log {log})")
        return row
    v = json.loads(verdict_path.read_text(encoding="utf-8"))
    meta = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))  # type: ignore[operator]
    checks = {c["name"]: c for c in v.get("checks", [])}
    front = checks.get("front_saturation") or {}
    saturated = [w for w in (front.get("data") or {}).get("windows_ns") or []]
    not_timed = sum(
        int(n) for c in checks.values() for n in NOT_TIMED.findall(str(c.get("observed") or ""))
    )
    failing = [n for n, c in checks.items() if c.get("verdict") == "fail"]
    unknown = [n for n, c in checks.items() if c.get("verdict") == "unknown"]
    result = meta.get("result") or {}
    row.update(
        verdict=v.get("verdict"),
        cause="; ".join(str(r) for r in v.get("reasons") or [])[:400],
        failing=failing,
        unknown=unknown,
        run_s=result.get("run_s"),
        analysis_s=result.get("analysis_s"),
        saturated_windows=len(saturated),
        not_timed=not_timed,
        placement=(meta.get("placement") or {}).get("mode"),
    )
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.noise", description=__doc__)
    ap.add_argument("--scenarios", default="ci-gate,auth-failure-storm,ip-count")
    ap.add_argument("--targets", default="acceptor,broker")
    ap.add_argument("--noise", default="cpu=2,fork=20,io=1")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--no-quiet", action="store_true", help="only the runs under noise")
    ap.add_argument("--placement", choices=("auto", "off"), default="auto")
    ap.add_argument("--out", type=Path, default=Path("runs/bench-noise"))
    ap.add_argument("--json", type=Path, default=None, help="where the numbers go")
    a = ap.parse_args(argv)
    scenarios = [s for s in a.scenarios.split(",") if s]
    targets = [t for t in a.targets.split(",") if t]
    conditions = ([] if a.no_quiet else [None]) + [a.noise]
    plan = [
        (r, s, t, c)
        for r in range(a.rounds)
        for s in scenarios
        for t in targets
        for c in conditions
    ]
    a.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    t0 = time.monotonic()
    for i, (rnd, scenario, target, noise) in enumerate(plan, 1):
        label = f"{scenario} on {target}, {'noise ' + noise if noise else 'quiet'}, round {rnd + 1}"
        print(f"[bench.noise +{time.monotonic() - t0:5.0f}s] [{i}/{len(plan)}] {label}", flush=True)
        log = a.out / f"{scenario}-{target}-{'noise' if noise else 'quiet'}-r{rnd + 1}.log"
        row = one_run(scenario, target, noise, a.out, a.placement, log)
        row["round"] = rnd + 1
        rows.append(row)
        print(f"    {row['verdict']}: {row['cause'][:160]}", flush=True)
    print()
    print(
        f"{'scenario':24} {'target':8} {'condition':22} {'rd':>2} {'verdict':8} {'run s':>6} "
        f"{'anl s':>6} {'sat':>3} {'untimed':>7}  cause"
    )
    for r in rows:
        print(
            f"{r['scenario']:24} {r['target']:8} {r['noise'] or 'quiet':22} {r['round']:>2} "
            f"{r['verdict']!s:8} {r.get('run_s') or 0:>6} {r.get('analysis_s') or 0:>6} "
            f"{r.get('saturated_windows', 0):>3} {r.get('not_timed', 0):>7}  {r['cause'][:90]}"
        )
    noisy = [r for r in rows if r["noise"]]
    fails = [r for r in noisy if r["verdict"] == "fail"]
    passes = [r for r in noisy if r["verdict"] == "pass"]
    causeless = [r for r in rows if r["verdict"] == "unknown" and not r["cause"]]
    share = len(passes) / len(noisy) if noisy else 0.0
    ok = not fails and not causeless and share >= 0.8
    print()
    print(
        f"under noise {a.noise}: {len(passes)}/{len(noisy)} PASS ({share:.0%}), "
        f"{len(fails)} FAIL, {len(causeless)} UNKNOWN without a cause; "
        f"{time.monotonic() - t0:.0f} s; bench.noise: {'OK' if ok else 'NOT MET'}"
    )
    write_results(
        {"args": args_record(a), "rows": rows, "pass_share_under_noise": share, "ok": ok},
        "noise",
        a.json,
    )
    print(f"runs under {a.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
