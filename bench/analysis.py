"""Analysis time per size, cold and warm, per check and per shared frame; before and after.

Usage: .venv/bin/python -m bench.analysis [--sizes 4000,10000,100000] [--before TREE]
       [--out DIR] [--html] [--spark-master URL] [--regenerate]

Each size is a conforming synthetic run (analysis.synth; one storm cycle scaled down below
~14 k events, up to 100 k at scale 1, larger ones at rates × 10 so that the storm stays
realistic at size), generated once into
DIR/synth-<size>/ (~30 s per million events) and reused while its spec is unchanged.

Each size is measured in a process of its own: **cold** is the first analysis in that
process, its time including the driver JVM's start (the session a run of that size gets,
`analysis.session.build_session`); **warm** is a second analysis of the same run in the same
JVM. Both are timed as a whole (wall and CPU: this process's and the driver JVM's, steadier
than wall time on a shared machine), per check (the seconds `analysis.verdict` prints for
each, two at a time, so they add up to about twice the checks' wall time) and per shared
frame (`[frame]` lines: the tables several checks read, built before the checks; an older
analysis without them pays that inside its first check that reads one).

``--before TREE`` (a git worktree of another commit, e.g. ``git worktree add /tmp/base
HEAD~3``) measures that tree's analysis too, each size's before and after processes one
after the other, so both meet the same machine; the table then shows before → after and
their ratio, and whether every check's verdict, judged count, exercised, peak, limit and
witnesses are the same (`bench.catalog_verdicts.differences`). Results go to
DIR/results.json (default .cache/bench-analysis/). Not a test: numbers depend on whoever
else shares the cores.
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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: a check's line from analysis.verdict (`  name   verdict  (1.2s)`)
CHECK_LINE = re.compile(
    r"^\s+(?P<name>\w+)\s+(?P<verdict>pass|fail|unknown|n/a)\s+\((?P<s>[\d.]+)s\)"
)
#: a shared frame's line (`  [frame] name   (0.4s)`)
FRAME_LINE = re.compile(r"^\s+\[frame\]\s+(?P<name>\w+)\s+\((?P<s>[\d.]+)s\)")
HERE = Path(__file__).resolve().parent.parent


def parse_sizes(values: list[str]) -> list[int]:
    """``--sizes 4000,10000 100000`` → [4000, 10000, 100000]; a size that is not a
    positive whole number is named."""
    sizes = []
    for value in values:
        for part in value.split(","):
            if not part.strip():
                continue
            try:
                size = int(part.replace("_", ""))
            except ValueError:
                raise SystemExit(f"--sizes: {part!r} is not a number of events") from None
            if size <= 0:
                raise SystemExit(f"--sizes: {size} events: a size must be positive")
            sizes.append(size)
    if not sizes:
        raise SystemExit("--sizes: no size given")
    return sorted(set(sizes))


#: a conforming synthetic run's events per storm cycle for each unit of scale (measured:
#: scale 0.28 makes 4,369, scale 1 12,251); a run holds at least one cycle
EVENTS_PER_SCALE = 14_000


def _spec(size: int) -> Any:
    from analysis.synth import SynthSpec

    small = round(size / EVENTS_PER_SCALE, 3)  # below one cycle at scale 1: a smaller storm
    return SynthSpec(
        run_id=f"bench-{size}",
        scale=small if small < 1 else 1 if size <= 100_000 else 10,
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

    from base import procfs

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


@dataclass
class Timings:
    """One analysis's progress lines turned into seconds per check and per shared frame
    (a check judged on several views, an acceptor process each, adds up)."""

    label: str
    checks: dict[str, float] = field(default_factory=dict)
    frames: dict[str, float] = field(default_factory=dict)
    verdicts: dict[str, str] = field(default_factory=dict)

    def __call__(self, msg: str) -> None:
        if m := CHECK_LINE.match(msg):
            self.checks[m["name"]] = self.checks.get(m["name"], 0.0) + float(m["s"])
            self.verdicts[m["name"]] = m["verdict"]
        elif m := FRAME_LINE.match(msg):
            self.frames[m["name"]] = self.frames.get(m["name"], 0.0) + float(m["s"])
        print(f"[{self.label}]   {msg}", flush=True)


def _analyse(run_dir: Path, spark: Any, label: str, args: argparse.Namespace) -> dict[str, Any]:
    from analysis import analyze_run

    clock = Timings(label)
    cpu0, t0 = _cpu_s(), time.monotonic()
    verdict = analyze_run(run_dir, spark=spark, report=args.html, progress=clock)
    return {
        "wall_s": round(time.monotonic() - t0, 2),
        "cpu_s": round(_cpu_s() - cpu0, 1),
        "verdict": verdict,
        "checks_s": {k: round(v, 2) for k, v in clock.checks.items()},
        "frames_s": {k: round(v, 2) for k, v in clock.frames.items()},
    }


def measure(out: Path, size: int, tree: str, args: argparse.Namespace) -> dict[str, Any]:
    # `tree`: which analysis this is ("before", "after"), the one first on sys.path
    """Analyse the cached run of `size` events twice in this fresh process: cold (the JVM
    started for it) and warm (the same JVM again). One result row."""
    from analysis.load import history_rows
    from analysis.session import SMALL_RUN_EVENTS, build_session, ensure_open_files

    run_dir, gen = cached_run(out, size, args.regenerate)
    label = f"{size:,} {tree}"
    print(f"[{label}] {gen['events']:,} events, {gen['connections']:,} connections", flush=True)
    ensure_open_files()
    cpu0, t0 = _cpu_s(), time.monotonic()
    spark = build_session(args.spark_master, small=history_rows(run_dir) < SMALL_RUN_EVENTS)
    start_s, start_cpu = time.monotonic() - t0, _cpu_s() - cpu0
    try:
        cold = _analyse(run_dir, spark, f"{label} cold", args)
        cold["wall_s"] = round(cold["wall_s"] + start_s, 2)
        cold["cpu_s"] = round(cold["cpu_s"] + start_cpu, 1)
        cold["spark_start_s"] = round(start_s, 2)
        warm = _analyse(run_dir, spark, f"{label} warm", args)
    finally:
        spark.stop()
    for mode, row in (("cold", cold), ("warm", warm)):
        print(f"[{label}] {mode}: {row['wall_s']:.1f} s wall, {row['cpu_s']:.1f} CPU-s; "
              f"verdict {row['verdict']['verdict']}", flush=True)  # fmt: skip
    return {
        "target_events": size,
        "tree": tree,
        **gen,
        "cold": cold,
        "warm": warm,
        "cpus": os.cpu_count(),
        "load_avg_1m_at_end": round(os.getloadavg()[0], 2),
    }


def _row(out: Path, size: int, tree: Path, label: str, args: argparse.Namespace) -> dict[str, Any]:
    """One size measured in a fresh process whose `analysis` is ``tree``'s."""
    row_file = out / f"row-{size}-{label}.json"
    row_file.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "bench.analysis", "--sizes", str(size), "--out", str(out),
            "--row", str(row_file), "--tree", str(tree), "--label", label]  # fmt: skip
    argv += ["--html"] * args.html + ["--regenerate"] * args.regenerate
    argv += ["--spark-master", args.spark_master] if args.spark_master else []
    env = {**os.environ, "PYTHONPATH": str(HERE)}  # this bench; the analysis is `tree`'s
    if subprocess.run(argv, check=False, cwd=HERE, env=env).returncode != 0:
        raise SystemExit(f"[{size:,} {label}] the measurement failed (see above)")
    return json.loads(row_file.read_text())  # type: ignore[no-any-return]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["4000,10000,100000"])
    parser.add_argument("--before", type=Path, help="a worktree of the commit to compare with")
    parser.add_argument("--out", type=Path, default=Path(".cache/bench-analysis"))
    parser.add_argument("--html", action="store_true", help="also write report.html")
    parser.add_argument("--regenerate", action="store_true", help="ignore the cached runs")
    parser.add_argument("--spark-master", default=None)
    parser.add_argument("--row", type=Path, help=argparse.SUPPRESS)  # one size, row to file
    parser.add_argument("--tree", type=Path, default=HERE, help=argparse.SUPPRESS)
    parser.add_argument("--label", default="after", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = parse_sizes(args.sizes)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    if args.row:  # the analysis under test is the tree's: first on the path, before any import
        sys.path.insert(0, str(args.tree.resolve()))
        args.row.write_text(json.dumps(measure(out, sizes[0], args.label, args), default=str))
        return 0
    trees = [("after", HERE)]
    if args.before:
        if not (args.before / "analysis" / "__init__.py").is_file():
            raise SystemExit(
                f"--before {args.before}: no analysis/ there (a worktree of the repo?)"
            )
        trees = [("before", args.before.resolve()), *trees]
    results = [_row(out, size, tree, label, args) for size in sizes for label, tree in trees]
    for r in results:  # the verdicts stay in results.json, compared below
        r["verdict"] = {mode: r[mode].pop("verdict") for mode in ("cold", "warm")}
    path = out / "results.json"
    path.write_text(json.dumps(results, indent=2, default=str))
    print(table(results))
    print(f"\nresults: {path}")
    return 0


def same_verdicts(results: list[dict[str, Any]]) -> list[str]:
    """Every difference between the before and after verdicts of one size, and between
    a cold and a warm analysis, one line each (`bench.catalog_verdicts.differences`)."""
    from bench.catalog_verdicts import differences

    lines = []
    by_size: dict[int, dict[str, dict[str, Any]]] = {}
    for r in results:
        by_size.setdefault(r["target_events"], {})[r["tree"]] = r["verdict"]
    for size, trees in sorted(by_size.items()):
        first = trees.get("before", trees["after"])["cold"]
        for tree, modes in trees.items():
            for mode, verdict in modes.items():
                lines += [f"{size:,} {tree} {mode}: {d}" for d in differences(first, verdict)]
    return lines


def _fmt(before: float | None, after: float | None) -> str:
    if before is None:
        return "-" if after is None else f"{after:.2f}"
    if after is None:
        return f"{before:.2f} → -"
    ratio = f" ({after / before:.2f})" if before > 0 else ""
    return f"{before:.2f} → {after:.2f}{ratio}"


def table(results: list[dict[str, Any]]) -> str:
    """Markdown: wall and CPU per size and mode (before → after, the ratio), then seconds
    per shared frame and per check, warm and cold, the largest first."""
    runs: dict[tuple[int, str], dict[str, Any]] = {}
    for r in results:
        runs[(r["target_events"], r["tree"])] = r
    sizes = sorted({size for size, _tree in runs})
    lines = [
        "| events | connections | mode | wall s | CPU s | load avg (1 m) |",
        "|---|---|---|---|---|---|",
    ]
    for size in sizes:
        after, before = runs[(size, "after")], runs.get((size, "before"))
        for mode in ("cold", "warm"):
            b = before[mode] if before else None
            lines.append(
                f"| {after['events']:,} | {after['connections']:,} | {mode} | "
                f"{_fmt(b and b['wall_s'], after[mode]['wall_s'])} | "
                f"{_fmt(b and b['cpu_s'], after[mode]['cpu_s'])} | "
                + (f"{before['load_avg_1m_at_end']} → " if before else "")
                + f"{after['load_avg_1m_at_end']} |"
            )
    for mode in ("warm", "cold"):
        names: dict[str, float] = {}
        for r in runs.values():
            for kind in ("frames_s", "checks_s"):
                for name, s in r[mode][kind].items():
                    key = f"[frame] {name}" if kind == "frames_s" else name
                    names[key] = max(names.get(key, 0.0), s)
        head = " | ".join(f"{runs[(s, 'after')]['events']:,} events" for s in sizes)
        lines += ["", f"| {mode}: s per frame / check | {head} |", "|---" * (len(sizes) + 1) + "|"]
        for key in sorted(names, key=lambda k: (not k.startswith("[frame]"), -names[k])):
            kind, name = ("frames_s", key[8:]) if key.startswith("[frame]") else ("checks_s", key)
            cells = []
            for size in sizes:
                before = runs.get((size, "before"))
                cells.append(
                    _fmt(
                        before[mode][kind].get(name) if before else None,
                        runs[(size, "after")][mode][kind].get(name),
                    )
                )
            lines.append(f"| {key} | " + " | ".join(cells) + " |")
    diffs = same_verdicts(results)
    lines += ["", f"verdicts: {'the same, check by check' if not diffs else 'DIFFERENT'}"]
    lines += [f"  {d}" for d in diffs]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
