"""Benchmark: the storm engine's CPU per connection attempt, this checkout's against another
commit's, in one run: the load side's hot path must not get slower.

Behind the engine is `bench.front_cost`'s stand-in broker (its own process, uvloop), which
answers every request frame at once (ApiVersions with a real v3 answer, the rest with zero
bytes after the correlation id), so the engine's own work is what is measured: one
engine (a process of its own, history on, written to a temporary folder) runs
``--arrivals`` arrivals at ``--rate`` per second of the ``--shape`` (``storm``: connect,
ApiVersions, Metadata, close; ``connect``: connect, close) against it. Paths: ``here``
(this checkout's ``loadprofiles/`` and ``harness/``) and ``ref`` (``--compare-ref
GIT_REF``'s, by ``git archive``). Per round each path runs once, their order rotating, and
the numbers are CPU per offered attempt: the engine thread's own (``thread``: the loop and
the rows it buffers) and the whole process's (``process``: with the history writer's thread
and the Parquet files). The median of the paired per-round ratios (here / ref) and their
lowest and highest are printed; below 1.0 the checkout is cheaper.

    .venv/bin/python -m bench.engine_cost --compare-ref HEAD~1
    .venv/bin/python -m bench.engine_cost --compare-ref HEAD~1 --shape connect --rounds 7

JSON in bench/results/engine-cost-<time>.json (or --json).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PATHS = ("here", "ref")


def _cpu_s() -> float:
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def worker(port: int, arrivals: int, rate: float, shape: str) -> dict[str, Any]:
    """One engine run in this process (whose `loadprofiles` is the path's): its CPU."""
    from loadprofiles import engine
    from loadprofiles.client_history import ClientHistory

    cfg = engine.EngineConfig(host="127.0.0.1", port=port, shape=shape, max_lag_ms=1e9,
                              connect_timeout_s=10.0, request_timeout_s=10.0)  # fmt: skip
    schedule = [(k, k / rate) for k in range(arrivals)]
    with tempfile.TemporaryDirectory() as tmp:
        hist = ClientHistory(Path(tmp), "bench")
        eng = engine.StormEngine(cfg, hist)
        p0, t0, w0 = _cpu_s(), time.thread_time(), time.monotonic()
        stats = eng.run(schedule, time.monotonic_ns() + 20_000_000)
        thread, wall = time.thread_time() - t0, time.monotonic() - w0
        hist.close()
        process = _cpu_s() - p0
    offered = max(1, stats.offered)
    return {
        "engine": engine.__file__,
        "offered": stats.offered,
        "outcomes": dict(stats.outcomes),
        "thread": {"cpu_us": thread * 1e6 / offered},
        "process": {"cpu_us": process * 1e6 / offered},
        "wall_s": wall,
    }


def ref_tree(ref: str, dest: Path) -> Path:
    """`ref`'s ``loadprofiles/`` and ``harness/`` under `dest` (``git archive``)."""
    dest.mkdir(parents=True)
    tar = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "loadprofiles", "harness"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=tar, check=True)
    return dest


def run_path(src: Path, port: int, args: argparse.Namespace) -> dict[str, Any]:
    """One engine run from `src` (its `loadprofiles` first on the path), in a process."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-m", "bench.engine_cost", "--worker", str(port),
         "--arrivals", str(args.arrivals), "--rate", str(args.rate), "--shape", args.shape],
        cwd=src, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"the engine from {src} failed:\n{done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.engine_cost",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--compare-ref", metavar="GIT_REF", required=False)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--arrivals", type=int, default=3000)
    ap.add_argument("--rate", type=float, default=1000.0, help="arrivals per second")
    ap.add_argument("--shape", choices=("storm", "connect"), default="storm")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--worker", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker is not None:
        print(json.dumps(worker(args.worker, args.arrivals, args.rate, args.shape)), flush=True)
        return 0
    if not args.compare_ref:
        ap.error("--compare-ref GIT_REF: the commit to compare this checkout with")
    if args.rounds < 1 or args.arrivals < 1 or args.rate <= 0:
        ap.error("--rounds, --arrivals and --rate must be > 0")

    from base.localnet import free_port
    from bench.output import args_record, write_results
    from bench.toolkit.front_load import paired_ratios, start_stand_in
    from bench.toolkit.fronts import stop_process

    work = Path(tempfile.mkdtemp(prefix="engine-cost-"))
    srcs = {"here": ROOT, "ref": ref_tree(args.compare_ref, work / "ref")}
    port = free_port()
    stand_in = start_stand_in(port, api_versions=True)
    rows: list[dict[str, Any]] = []
    try:
        for rnd in range(args.rounds):
            order = PATHS if rnd % 2 == 0 else PATHS[::-1]
            for path in order:
                row = {"round": rnd, "path": path, **run_path(srcs[path], port, args)}
                rows.append(row)
                print(
                    f"[engine-cost] round {rnd + 1} {path}: {row['offered']} offered, "
                    f"thread {row['thread']['cpu_us']:.1f} µs, "
                    f"process {row['process']['cpu_us']:.1f} µs per attempt, "
                    f"outcomes {row['outcomes']}",
                    flush=True,
                )
    finally:
        stop_process(stand_in)
    summary: dict[str, Any] = {}
    for what in ("thread", "process"):
        ratio = paired_ratios(rows, "here", "ref", what)
        medians = {
            p: statistics.median(r[what]["cpu_us"] for r in rows if r["path"] == p) for p in PATHS
        }
        summary[what] = {"median_us": medians, "here_over_ref": ratio}
        span = (
            "below a tick"
            if ratio is None
            else f"{ratio['median']:.3f} ({ratio['low']:.3f}-{ratio['high']:.3f})"
        )
        print(
            f"[engine-cost] {what} CPU per attempt: here {medians['here']:.1f} µs, "
            f"ref {medians['ref']:.1f} µs; here/ref paired {span}"
        )
    write_results({"args": args_record(args), "summary": summary, "rows": rows}, "engine-cost",
                  args.json)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
