"""Per-check scaling: each check's time at several history sizes and its growth exponent.

Usage: .venv/bin/python -m bench.check_scaling [--sizes 10000,100000[,1000000]]
       [--checks NAME,…| --family delays] [--repeat 2] [--scale 1] [--out DIR] [--regenerate]

Sizes are connections. Each size is a storm history from `analysis.synth` under
`storm_config`'s limits, which give it the shapes a recorded acceptor storm has: bursts
from 50 addresses over the broker and listener rates (rate delays up to the 1 s window),
each storm address over its per-IP rate during a burst (IP-throttled sockets interleaved
with the admissions on the listener, closed at the loop's turn), a flooding address over
its per-IP count (rejects), two steady clients open the whole run, an inter-broker
listener, a dynamic rate change halfway. Every check but the ones with nothing to judge
passes on it (model_replay agrees on every connection). The size is reached with more
storm cycles (1,260 connections each at scale 1), so only the length grows. The generator
makes no evictions: `eviction_rule` is timed on its nothing-to-judge path. Histories are
cached in DIR/synth-<connections>-x<scale>/ (default .cache/check-scaling).

One Spark session for every size (its start is not timed). For each size the shared
per-connection tables (`analysis.frames`) are built and counted first (timed apart, as
"shared tables"); then, after one untimed warm-up pass of every selected check on the
smallest history (JIT), each check runs `--repeat` times and its best wall time and best
task CPU time (the CPU of its Spark tasks, from the status store: not stretched by other
processes' load) are kept, with the check's own cached tables dropped before every run
(a check that builds one pays for it each time; the shared tables stay). The session
keeps one configuration for all sizes (adaptive execution, 4 shuffle partitions: what
`analyze_run` uses above 200 k events), so sizes are comparable.

Printed per check: the time at each size, the growth exponent log(t2/t1)/log(n2/n1)
between consecutive sizes (of wall time, and of task CPU in brackets), and the n·log n
exponent for the same pair (log(n2·ln n2 / n1·ln n1)/log(n2/n1), a little above 1) to
read it against; fixed per-job costs make small sizes look flatter than the asymptote, so
the exponent between the two largest sizes is the one to read. Also printed: any query a
check ran whose plan has a window frame to the end of a partition (from anywhere but its
start) or a window with no partition key (one task over the whole run), from Spark's SQL
status store. Not a test: times depend on whoever else shares the cores
(tests/spark/test_check_scaling.py is the gate for delays.py's checks).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from analysis.checks import Check
    from analysis.load import Run


def shared_keys() -> set[str]:
    """`Run._cache` keys shared by every check (besides the loaded sources): the analysis's
    shared frames and the run's span; everything else a check caches is its own and dropped
    before each timed run."""
    from analysis.frames import SHARED

    return {*SHARED, "span"}


#: synth storm cycle at scale 1: 900 storm + (10 flood + 2 inter-broker)/s × 30 s
_CONNS_PER_CYCLE = (900, 10.0, 2.0, 30.0)


def conns_per_cycle(scale: float) -> float:
    burst, flood, internal, cycle_s = _CONNS_PER_CYCLE
    return burst * scale + (flood * scale + internal) * cycle_s


def storm_config(scale: float) -> dict[str, Any]:
    """Limits under which the synth storm has the shapes of a recorded acceptor storm:
    broker and listener rates the bursts exceed (rate delays up to the 1 s window), a
    per-IP rate each storm address exceeds during a burst (throttle-closes interleaved
    with the admissions on the listener, each closed at the loop's turn), the flooding
    address over its per-IP count (rejects) and rate."""
    from analysis.synth import default_config

    def r(x: float) -> int:
        return max(1, round(x * scale))

    return {
        **default_config(scale),
        "max.connection.creation.rate": r(40),
        "listener.name.client.max.connection.creation.rate": r(45),
        "ip_quotas": {"default": r(3), "127.0.0.9": r(2)},
    }


def spec_for(connections: int, scale: float) -> Any:
    """The synth spec whose run has about `connections` connections at `scale`."""
    from analysis.synth import SynthSpec

    cycles = max(1, round(connections / conns_per_cycle(scale)))
    return SynthSpec(
        run_id=f"scaling-{connections}-x{scale:g}",
        scale=scale,
        cycles=cycles,
        storm_ips=50,
        config=storm_config(scale),
        config_change={"listener.name.client.max.connection.creation.rate": round(36 * scale)},
    )


def history(out: Path, connections: int, scale: float, regenerate: bool = False) -> Path:
    """The cached storm history of about `connections` connections (generated once)."""
    from analysis.synth import generate

    spec = spec_for(connections, scale)
    run_dir = out / f"synth-{connections}-x{scale:g}"
    key = json.dumps(asdict(spec), sort_keys=True, default=sorted)
    stamp = run_dir / "scaling-spec.json"
    if not regenerate and stamp.exists() and json.loads(stamp.read_text()).get("spec") == key:
        return run_dir
    import shutil

    shutil.rmtree(run_dir, ignore_errors=True)
    gen = generate(run_dir, spec)
    stamp.write_text(json.dumps({"spec": key, "connections": int(gen["connections"])}))
    return run_dir


def nlogn_exponent(n1: float, n2: float) -> float:
    """The growth exponent an n·log n cost shows between n1 and n2."""
    return math.log((n2 * math.log(n2)) / (n1 * math.log(n1))) / math.log(n2 / n1)


def exponent(n1: float, t1: float, n2: float, t2: float) -> float:
    return math.log(t2 / t1) / math.log(n2 / n1)


@dataclass
class Sized:
    """One history, loaded: its connection count, events and the run."""

    connections: int
    events: int
    run: Run
    shared_s: float


def load_sized(spark: SparkSession, run_dir: Path) -> Sized:
    """Load a history and build (and count) the tables every check shares: the analysis's
    shared frames (`analysis.frames.SHARED`, as `_judge` builds them) and the run's span."""
    from analysis.frames import SHARED, acceptor_conns, build
    from analysis.load import load_run

    run = load_run(spark, run_dir)
    t = time.monotonic()
    events = run.history.count()
    for name, _s, error in build(run, set(SHARED)):
        if error is not None:
            raise RuntimeError(f"shared frame {name}: {error}")
    connections = acceptor_conns(run).count()
    run.span_ns()
    return Sized(connections, events, run, time.monotonic() - t)


def drop_private(run: Run) -> None:
    """Forget what a check cached for itself (the shared tables stay)."""
    for key in list(run._cache):
        if key in shared_keys() or key.startswith("source-"):
            continue
        value = run._cache.pop(key)
        unpersist = getattr(value, "unpersist", None)
        if callable(unpersist):
            unpersist()


@dataclass
class Timed:
    """A check's best wall and task-CPU seconds over its runs, its verdict, its stages."""

    wall_s: float
    cpu_s: float
    verdict: str
    stages: int


def time_check(check: Check, sized: Sized, repeat: int) -> Timed:
    """Best wall time and best task CPU time of `repeat` runs of one check (its own
    cached tables dropped before each run)."""
    from analysis.checks import run_check

    spark = sized.run.spark
    best = Timed(math.inf, math.inf, "", 0)
    for _ in range(max(1, repeat)):
        drop_private(sized.run)
        mark = last_stage(spark)
        t = time.monotonic()
        verdict = run_check(check, sized.run).verdict
        wall = time.monotonic() - t
        cpu, stages = task_cpu_since(spark, mark)
        best = Timed(min(best.wall_s, wall), min(best.cpu_s, cpu), verdict, stages)
    drop_private(sized.run)
    return best


# ---- plan shapes ---------------------------------------------------------------------


def _executions(spark: SparkSession) -> list[Any]:
    store = spark._jsparkSession.sharedState().statusStore()
    seq = store.executionsList()
    return [seq.apply(i) for i in range(seq.size())]


def last_execution(spark: SparkSession) -> int:
    """The newest SQL execution id in Spark's status store (a mark for `plans_since`)."""
    return max((int(e.executionId()) for e in _executions(spark)), default=-1)


def plans_since(spark: SparkSession, mark: int) -> list[str]:
    """Physical plans of the SQL executions after `mark` (the status store keeps the last
    spark.sql.ui.retainedExecutions, 1000, with or without the UI)."""
    return [
        str(e.physicalPlanDescription()) for e in _executions(spark) if int(e.executionId()) > mark
    ]


_SPEC = "windowspecdefinition("


def _top_level_args(text: str) -> list[str]:
    """`a, f(b, c), d` → [`a`, `f(b, c)`, `d`]: split on the commas outside parentheses."""
    args, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == "," and depth == 0:
            args.append(text[start:i].strip())
            start = i + 1
    args.append(text[start:].strip())
    return args


def bad_windows(plan: str) -> list[str]:
    """The window specifications in a plan's text that are not linear: a frame that runs
    to the end of the partition from anywhere but its start (Spark recomputes it for every
    row: quadratic in the partition), or no partition key (one task over the whole run).

    Reads Spark's `windowspecdefinition(partition…, order…, specifiedwindowframe(type,
    lower, upper))`, as every explain mode prints it."""
    out = set()
    at = plan.find(_SPEC)
    while at >= 0:
        begin = at + len(_SPEC)
        depth, end = 1, begin
        while end < len(plan) and depth:
            depth += {"(": 1, ")": -1}.get(plan[end], 0)
            end += 1
        spec = re.sub(r"#\d+L?", "", plan[begin : end - 1])  # expression ids vary per query
        args = _top_level_args(spec)
        frame = args[-1] if args[-1].startswith("specifiedwindowframe(") else ""
        bounds = _top_level_args(frame[len("specifiedwindowframe(") : -1]) if frame else []
        if len(bounds) == 3 and "unboundedfollowing" in bounds[2].lower():
            if "unboundedpreceding" not in bounds[1].lower():
                out.add(f"frame to the end of the partition: windowspecdefinition({spec})")
        first = args[0]
        if first.startswith("specifiedwindowframe(") or first.endswith(
            ("NULLS FIRST", "NULLS LAST")
        ):
            out.add(
                "no partition key (one task over the run; right only for a rule with no key,"
                f" e.g. broker-wide): windowspecdefinition({spec})"
            )
        at = plan.find(_SPEC, end)
    return sorted(out)


# ---- executor CPU --------------------------------------------------------------------


def _stages(spark: SparkSession) -> dict[int, int]:
    """Every stage Spark's status store holds: id → its tasks' CPU time (ns)."""
    sc = spark.sparkContext
    jsc = sc._jsc.sc()
    jsc.listenerBus().waitUntilEmpty()  # the store is fed by the listener bus
    no_quantiles = sc._gateway.new_array(sc._jvm.double, 0)  # type: ignore[union-attr]
    seq = jsc.statusStore().stageList(None, False, False, no_quantiles, None)
    stages = (seq.apply(i) for i in range(seq.size()))
    return {int(st.stageId()): int(st.executorCpuTime()) for st in stages}


def last_stage(spark: SparkSession) -> int:
    """The newest stage id (a mark for `task_cpu_since`)."""
    return max(_stages(spark), default=-1)


def task_cpu_since(spark: SparkSession, mark: int) -> tuple[float, int]:
    """CPU seconds of the tasks of the stages after `mark`, and how many stages: the
    Spark work of a check, without the driver's planning, scheduling and waiting (and
    without other processes' load, which stretches wall time but not a thread's CPU)."""
    later = [cpu for sid, cpu in _stages(spark).items() if sid > mark]
    return sum(later) / 1e9, len(later)


# ---- the bench -----------------------------------------------------------------------


@dataclass
class CheckRow:
    name: str
    times_s: list[float] = field(default_factory=list)
    task_cpu_s: list[float] = field(default_factory=list)
    verdicts: list[str] = field(default_factory=list)
    plan_issues: list[str] = field(default_factory=list)


def select_checks(names: str | None, family: str | None) -> list[Check]:
    from analysis.checks import ALL_CHECKS

    picked = list(ALL_CHECKS)
    if family:
        picked = [c for c in picked if c.family == family]
    if names:
        wanted = [n.strip() for n in names.split(",") if n.strip()]
        unknown = set(wanted) - {c.name for c in ALL_CHECKS}
        if unknown:
            raise SystemExit(f"unknown check(s): {sorted(unknown)}")
        picked = [c for c in picked if c.name in wanted]
    return picked


def measure(
    spark: SparkSession, runs: list[Path], checks: list[Check], repeat: int, say: Any = print
) -> dict[str, Any]:
    """Time every check on every history (smallest first); the result as a dict."""
    sizes: list[dict[str, Any]] = []
    rows = {c.name: CheckRow(c.name) for c in checks}
    warmed = False
    for run_dir in runs:
        sized = load_sized(spark, run_dir)
        say(
            f"[{sized.connections:,} connections, {sized.events:,} events] shared tables "
            f"{sized.shared_s:.1f} s"
        )
        if not warmed:  # JIT and first-use costs, once, untimed
            for check in checks:
                time_check(check, sized, 1)
            warmed = True
        for check in checks:
            mark = last_execution(spark)
            best = time_check(check, sized, repeat)
            row = rows[check.name]
            row.times_s.append(round(best.wall_s, 3))
            row.task_cpu_s.append(round(best.cpu_s, 3))
            row.verdicts.append(best.verdict)
            for plan in plans_since(spark, mark):
                row.plan_issues = sorted(set(row.plan_issues) | set(bad_windows(plan)))
            say(
                f"  {check.name:<34} {best.wall_s:7.2f} s wall {best.cpu_s:7.2f} s task CPU  "
                f"{best.verdict}"
            )
        sizes.append(
            {
                "connections": sized.connections,
                "events": sized.events,
                "shared_tables_s": round(sized.shared_s, 2),
                "load_avg_1m": round(os.getloadavg()[0], 2),
            }
        )
        sized.run.release()
    return {"sizes": sizes, "checks": [asdict(r) for r in rows.values()], "repeat": repeat}


def _exp(ns: list[int], t: list[float], a: int, b: int) -> str:
    return f"{exponent(ns[a], max(t[a], 1e-3), ns[b], max(t[b], 1e-3)):.2f}"


def table(result: dict[str, Any]) -> str:
    """Markdown: per check the wall time at each size, the wall-time exponent between
    neighbouring sizes and the task-CPU exponent (in brackets)."""
    ns = [s["connections"] for s in result["sizes"]]
    pairs = list(zip(range(len(ns)), range(1, len(ns)), strict=False))
    head = " | ".join(f"{n:,} conns s" for n in ns)
    exps = " | ".join(f"exp {ns[a]:,}→{ns[b]:,} (task CPU)" for a, b in pairs)
    lines = [f"| check | {head} | {exps} |", "|---" * (1 + len(ns) + len(pairs)) + "|"]
    ref = " | ".join(f"{nlogn_exponent(ns[a], ns[b]):.2f}" for a, b in pairs)
    lines.append(f"| *n·log n would be* |{' |' * len(ns)} {ref} |")
    for r in sorted(result["checks"], key=lambda r: -r["times_s"][-1]):
        t, c = r["times_s"], r["task_cpu_s"]
        cells = " | ".join(f"{x:.2f}" for x in t)
        e = " | ".join(f"{_exp(ns, t, a, b)} ({_exp(ns, c, a, b)})" for a, b in pairs)
        lines.append(f"| {r['name']} | {cells} | {e} |")
    shared = " | ".join(f"{s['shared_tables_s']:.2f}" for s in result["sizes"])
    lines.append(f"| (shared tables, built once) | {shared} |{' |' * len(pairs)}")
    flagged = [r for r in result["checks"] if r["plan_issues"]]
    lines.append("")
    if not flagged:
        lines.append("No check ran a window with a frame to the end of a partition or no key.")
    for r in flagged:
        for issue in r["plan_issues"]:
            lines.append(f"- {r['name']}: {issue[:300]}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000", help="connections, comma-separated")
    parser.add_argument("--checks", default=None, help="check names, comma-separated")
    parser.add_argument("--family", default=None, help="only one family (e.g. delays)")
    parser.add_argument("--repeat", type=int, default=2, help="runs per check; the best is kept")
    parser.add_argument("--scale", type=float, default=1.0, help="synth rates × scale")
    parser.add_argument("--out", default=".cache/check-scaling")
    parser.add_argument("--regenerate", action="store_true")
    parser.add_argument("--spark-master", default=None)
    args = parser.parse_args()

    sizes = sorted(int(x) for x in args.sizes.split(",") if x.strip())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    checks = select_checks(args.checks, args.family)
    runs = []
    for n in sizes:
        t = time.monotonic()
        runs.append(history(out, n, args.scale, args.regenerate))
        print(f"[{n:,}] history {runs[-1]} ({time.monotonic() - t:.1f} s)", flush=True)

    from analysis.session import build_session

    spark = build_session(args.spark_master, app_name="check-scaling")
    try:
        result = measure(spark, runs, checks, args.repeat, lambda m: print(m, flush=True))
    finally:
        spark.stop()
    result["argv"] = {k: v for k, v in vars(args).items()}
    path = out / "results.json"
    path.write_text(json.dumps(result, indent=2))
    print(table(result))
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
