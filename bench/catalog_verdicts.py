"""Re-judge the catalog runs into a scratch folder, and compare two such folders check by check.

Usage:
  .venv/bin/python -m bench.catalog_verdicts analyse OUT [--runs runs] [--target acceptor]
  .venv/bin/python -m bench.catalog_verdicts compare BASE NEW
  .venv/bin/python -m bench.catalog_verdicts synth RUNS [--events 5000] [--scale 1.0]

`analyse` copies the history and run.json of the newest `<scenario>-<target>-*` run of every
scenario under --runs into OUT/<run-id>/ (the catalog runs' own report/ is never touched),
analyses each with one SparkSession (no report.html) and writes OUT/<run-id>/report/
verdict.json and OUT/<run-id>/check_seconds.json (each check's verdict and seconds, in the
order judged), plus OUT/timings.json (seconds per run) and OUT/check_seconds.json (each
check's seconds summed over the runs, the most first; and the slowest `n/a` check of each
run, as `na_seconds`). `compare` lists every difference
between two such folders: the run's verdict, and per check the verdict, `judged`,
`exercised`, `peak`, `limit` and the witnesses' identities (conn_id, client_ip,
client_port, mono_ns, why). Exit 0 when they are equal, 1 otherwise. It is how a change
to the analysis shows that it keeps every check's result (issue 17). `synth` writes
synthetic runs into RUNS, named as catalog runs are (`synth-<rule>-acceptor-…`): a
conforming one, one per rule `analysis.synth` can break (each fails a check, with its
witnesses) and one on the broker target, for `analyse --runs RUNS` where no catalog runs
are at hand. A run holds at least one storm cycle (about 12 k events at scale 1); `--scale
0.28` makes that cycle about 4.4 k events.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

RUN_ID = re.compile(r"^(?P<scenario>.+)-(?P<target>acceptor|broker)-(?P<stamp>\d{8}T\d{6}Z)-\w+$")
CHECK_FIELDS = ("verdict", "judged", "exercised", "peak", "limit")
WITNESS_KEYS = ("conn_id", "client_ip", "client_port", "mono_ns", "why")
#: a check's progress line from analysis.verdict (`  name   verdict  (1.2s)`)
CHECK_LINE = re.compile(r"^\s+(?P<name>\w+)\s+\S+\s+\((?P<seconds>[0-9.]+)s\)$")


def copy_run(src: Path, dst: Path) -> Path:
    """A run's inputs (history/ and run.json) copied into a new folder ``dst``, to be judged
    there: the run's own report/ is never touched."""
    dst.mkdir(parents=True)
    shutil.copytree(src / "history", dst / "history")
    if (src / "run.json").exists():
        shutil.copy2(src / "run.json", dst / "run.json")
    return dst


def newest_runs(runs: Path, target: str) -> list[Path]:
    """The newest run folder of every scenario for one target, sorted by scenario."""
    newest: dict[str, tuple[str, Path]] = {}
    for path in runs.iterdir():
        m = RUN_ID.match(path.name)
        if not m or m["target"] != target or not (path / "history").is_dir():
            continue
        if m["scenario"] not in newest or m["stamp"] > newest[m["scenario"]][0]:
            newest[m["scenario"]] = (m["stamp"], path)
    return [newest[s][1] for s in sorted(newest)]


def analyse(out: Path, runs: Path, target: str, spark_master: str | None) -> int:
    from analysis import analyze_run
    from analysis.session import build_session

    out.mkdir(parents=True, exist_ok=True)
    spark = build_session(spark_master)
    timings: dict[str, float] = {}
    #: check -> (seconds over every run, runs); two checks run at a time, so a check's
    #: seconds are its own wall time, and they add up to about twice the runs' check time
    per_check: dict[str, list[float]] = {}
    #: this run's checks: (name, verdict, seconds) in the order judged (views each a line)
    this_run: list[tuple[str, str, float]] = []

    def tally(line: str) -> None:
        m = CHECK_LINE.match(line)
        if m:
            total = per_check.setdefault(m["name"], [0.0, 0])
            total[0] += float(m["seconds"])
            total[1] += 1
            this_run.append((m["name"], line.split()[1], float(m["seconds"])))

    try:
        for src in newest_runs(runs, target):
            dst = out / src.name
            shutil.rmtree(dst, ignore_errors=True)
            copy_run(src, dst)
            t = time.monotonic()
            this_run.clear()
            verdict = analyze_run(dst, spark=spark, report=False, progress=tally)
            timings[src.name] = round(time.monotonic() - t, 2)
            (dst / "check_seconds.json").write_text(
                json.dumps([{"name": n, "verdict": v, "seconds": s} for n, v, s in this_run])
            )
            print(f"{src.name:<60} {verdict['verdict']:<8} {timings[src.name]:>6.1f} s", flush=True)
    finally:
        spark.stop()
    (out / "timings.json").write_text(json.dumps(timings, indent=2))
    ranked = sorted(per_check.items(), key=lambda kv: -kv[1][0])
    (out / "check_seconds.json").write_text(
        json.dumps({k: {"seconds": round(v[0], 1), "runs": v[1]} for k, v in ranked}, indent=2)
    )
    for name, (seconds, n_runs) in ranked[:10]:
        print(f"  {name:<34} {seconds:7.1f} s over {n_runs:.0f} runs")
    slowest = {run: na_seconds(out / run / "check_seconds.json") for run in timings}
    (out / "na_seconds.json").write_text(json.dumps(slowest, indent=2))
    worst = max(slowest.items(), key=lambda kv: kv[1][1], default=None)
    if worst is not None:
        print(f"slowest n/a check: {worst[1][0]} {worst[1][1]:.1f} s ({worst[0]})")
    print(f"verdicts: {out}/*/report/verdict.json; timings: {out / 'timings.json'}")
    return 0


def na_seconds(path: Path) -> tuple[str | None, float]:
    """The slowest `n/a` check of one analysed run (its check_seconds.json) and its
    seconds, as the analysis printed them (a tenth of a second: 0.0 is under 0.05 s)."""
    lines = json.loads(path.read_text())
    na = [(c["name"], float(c["seconds"])) for c in lines if c["verdict"] == "n/a"]
    return max(na, key=lambda c: c[1], default=(None, 0.0))


def _witnesses(check: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [tuple(w.get(k) for k in WITNESS_KEYS) for w in check.get("witnesses") or []]


def differences(base: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Every difference between two verdict.json documents, one line each."""
    diffs: list[str] = []
    if base["verdict"] != new["verdict"]:
        diffs.append(f"run verdict {base['verdict']} -> {new['verdict']}")
    b_checks = {c["name"]: c for c in base["checks"]}
    n_checks = {c["name"]: c for c in new["checks"]}
    for name in sorted(b_checks.keys() | n_checks.keys()):
        b, n = b_checks.get(name), n_checks.get(name)
        if b is None or n is None:
            diffs.append(f"{name}: only in {'new' if b is None else 'base'}")
            continue
        for key in CHECK_FIELDS:
            if b.get(key) != n.get(key):
                diffs.append(f"{name}.{key}: {b.get(key)!r} -> {n.get(key)!r}")
        if _witnesses(b) != _witnesses(n):
            diffs.append(f"{name}.witnesses: {_witnesses(b)} -> {_witnesses(n)}")
    return diffs


def compare(base: Path, new: Path) -> int:
    names = sorted(p.parent.parent.name for p in base.glob("*/report/verdict.json"))
    if not names:
        print(f"no */report/verdict.json under {base}", file=sys.stderr)
        return 2
    n_diff = 0
    for name in names:
        other = new / name / "report" / "verdict.json"
        if not other.exists():
            print(f"{name}: missing in {new}")
            n_diff += 1
            continue
        b = json.loads((base / name / "report" / "verdict.json").read_text())
        n = json.loads(other.read_text())
        diffs = differences(b, n)
        n_diff += len(diffs)
        status = "same" if not diffs else f"{len(diffs)} difference(s)"
        print(f"{name:<60} {b['verdict']:<8} {len(b['checks'])} checks: {status}")
        for d in diffs:
            print(f"    {d}")
    print(f"{len(names)} runs compared, {n_diff} difference(s)")
    return 0 if n_diff == 0 else 1


#: the runner's change a `lost_change` run's enforcer never records: without one, there is
#: nothing to lose and the run conforms
LOST_CHANGE = {"listener.name.client.max.connection.creation.rate": 20}


def synth(runs: Path, events: int, scale: float = 1.0) -> int:
    """A conforming synthetic run, one per broken rule, and one on the broker target."""
    from analysis.synth import BROKEN_FLAGS, SynthSpec, generate

    kinds = [("conforming", "acceptor", frozenset[str]())]
    kinds += [(flag.replace("_", "-"), "acceptor", frozenset({flag})) for flag in BROKEN_FLAGS]
    kinds += [("conforming", "broker", frozenset())]
    runs.mkdir(parents=True, exist_ok=True)
    for name, target, broken in sorted(kinds):
        run_id = f"synth-{name}-{target}-20000101T000000Z-s7"
        shutil.rmtree(runs / run_id, ignore_errors=True)
        spec = SynthSpec(
            run_id=run_id,
            target_events=events,
            scale=scale,
            target=target,
            broken=broken,
            config_change=LOST_CHANGE if "lost_change" in broken else None,
        )
        gen = generate(runs / run_id, spec)
        print(f"{run_id:<60} {int(gen['events']):>7} events", flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("analyse", help="re-judge the newest catalog runs into OUT")
    a.add_argument("out", type=Path)
    a.add_argument("--runs", type=Path, default=Path("runs"))
    a.add_argument("--target", default="acceptor", choices=("acceptor", "broker"))
    a.add_argument("--spark-master", default=None)
    c = sub.add_parser("compare", help="compare two analyse folders check by check")
    c.add_argument("base", type=Path)
    c.add_argument("new", type=Path)
    s = sub.add_parser("synth", help="write synthetic runs to judge into RUNS")
    s.add_argument("runs", type=Path)
    s.add_argument("--events", type=int, default=5000)
    s.add_argument("--scale", type=float, default=1.0, help="storm sizes and rates (x)")
    args = parser.parse_args()
    if args.cmd == "analyse":
        return analyse(args.out, args.runs, args.target, args.spark_master)
    if args.cmd == "synth":
        return synth(args.runs, args.events, args.scale)
    return compare(args.base, args.new)


if __name__ == "__main__":
    raise SystemExit(main())
