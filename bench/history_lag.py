"""Benchmark: does recording history stall the acceptor's event loop?

An asyncio loop ticks every millisecond and, each tick, records the rows the acceptor
writes for ``--rate / 1000`` connections (accept, admit, register, close: a constant
string detail, none, an f-string detail, a mapping detail) through the acceptor's
`Recorder` and a background `HistoryWriter` flushing every second, as in production.
Each tick's lateness is the loop's stall. Paths, in alternating rounds of one run:

  none     ``Recorder(None)``: the machine's own noise (no history);
  current  this tree's recorder and writer;
  ref      with ``--compare-ref GIT_REF``: that commit's ``harness/`` (``git archive``).

Each round runs in a fresh process (the writer's imports and ``gc`` state are part of what
is measured). Prints lateness p99 / p99.9 / max and the recorder's CPU per row, with the
load average; JSON in bench/results/history-lag-<time>.json (or --json FILE).

    .venv/bin/python -m bench.history_lag [--rate 3000] [--seconds 6] [--rounds 3]
        [--compare-ref GIT_REF]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.output import write_results

ROOT = Path(__file__).resolve().parent.parent


def child(path: str, rate: int, seconds: float) -> dict[str, Any]:
    """One round in this process: tick lateness (ms) and process CPU per recorded row."""
    from acceptor.recorder import ConnInfo, Recorder
    from base.history import HistoryWriter
    from base.history.rows import AcceptorAccept, AcceptorAdmit, AcceptorClose, AcceptorRegister

    tmp = tempfile.mkdtemp(prefix="bench-history-lag-")
    writer = None if path == "none" else HistoryWriter(tmp, "acceptor", "lag", name="lag")
    rec = Recorder(writer)
    info = ConnInfo("CLIENT-1", "CLIENT", "127.0.0.2", 50000, "127.0.0.2", 50000)
    per_tick = max(1, rate // 1000)
    late: list[float] = []
    rows = 0

    async def run() -> None:
        nonlocal rows
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        due = loop.time()
        i = 0
        while loop.time() < end:
            due += 0.001
            await asyncio.sleep(max(0.0, due - loop.time()))
            now = loop.time()
            late.append((now - due) * 1000)
            due = max(due, now - 0.001)  # a stall is counted once, not as a backlog of ticks
            for _ in range(per_tick):
                mono = time.monotonic_ns()
                rec.write(AcceptorAccept(mono, info, '{"protected": false}'))
                rec.write(AcceptorAdmit(mono, info, delay_ms=0.01))
                rec.write(
                    AcceptorRegister(
                        mono,
                        info,
                        processor=0,
                        delay_ms=0.02,
                        detail=f'{{"in_iteration": 1, "iteration": {i}, "queue_depth": 1}}',
                    )
                )
                rec.write(
                    AcceptorClose(
                        mono,
                        info,
                        processor=0,
                        reason="client_eof",
                        bytes=0,
                        detail={"bytes_in": 0, "bytes_out": 0, "duration_ms": 0.5, "requests": i},
                    )
                )
                rows += 4
                i += 1

    cpu0 = time.process_time()
    asyncio.run(run())
    cpu = time.process_time() - cpu0
    rec.close()
    shutil.rmtree(tmp, ignore_errors=True)
    late.sort()
    return {
        "path": path,
        "ticks": len(late),
        "rows": rows,
        "p99_ms": late[int(0.99 * len(late))],
        "p999_ms": late[int(0.999 * len(late))],
        "max_ms": late[-1],
        "cpu_us_per_row": cpu * 1e6 / max(rows, 1),
    }


def run_round(path: str, src: Path | None, args: argparse.Namespace) -> dict[str, Any]:
    env = dict(os.environ)
    # this tree's bench module; the harness of `src` (the ref) when given
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (src, ROOT) if p is not None)
    cmd = [sys.executable, "-m", "bench.history_lag", "--child", path]
    cmd += ["--rate", str(args.rate), "--seconds", str(args.seconds)]
    load = round(os.getloadavg()[0], 2)
    out = subprocess.run(cmd, env=env, cwd=str(src or ROOT), capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"bench.history_lag: {path} round failed:\n{out.stderr[-2000:]}")
    row: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    row["load_avg"] = load
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.history_lag",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--rate", type=int, default=3000, help="connections recorded per second")
    ap.add_argument("--seconds", type=float, default=6.0, help="per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--compare-ref", metavar="GIT_REF")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--child", choices=("none", "current", "ref"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.rate, args.seconds)))
        return 0
    paths: list[tuple[str, Path | None]] = [("none", None), ("current", None)]
    with tempfile.TemporaryDirectory(prefix="bench-history-lag-ref-") as tmp:
        if args.compare_ref:
            archive = subprocess.run(
                ["git", "-C", str(ROOT), "archive", args.compare_ref, "harness"],
                check=True,
                capture_output=True,
            ).stdout
            subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
            paths.append(("ref", Path(tmp)))
        rows: list[dict[str, Any]] = []
        for rnd in range(args.rounds):
            k = rnd % len(paths)
            for path, src in paths[k:] + paths[:k]:
                row = run_round(path, src, args)
                row["round"] = rnd + 1
                rows.append(row)
                print(
                    f"[bench] round {rnd + 1} {path:<8} tick lateness p99 {row['p99_ms']:6.2f}"
                    f" p99.9 {row['p999_ms']:6.2f} max {row['max_ms']:6.2f} ms, "
                    f"{row['cpu_us_per_row']:.2f} µs CPU per row (load {row['load_avg']})",
                    flush=True,
                )
    summary: dict[str, Any] = {}
    print(f"\n{args.rate} connections/s recorded (4 rows each), {args.seconds:g} s per round:")
    for path, _ in paths:
        rs = [r for r in rows if r["path"] == path]
        summary[path] = {
            key: statistics.median(r[key] for r in rs)
            for key in ("p99_ms", "p999_ms", "max_ms", "cpu_us_per_row")
        }
        summary[path]["worst_max_ms"] = max(r["max_ms"] for r in rs)
        s = summary[path]
        print(
            f"  {path:<8} median of rounds: p99 {s['p99_ms']:.2f}, p99.9 {s['p999_ms']:.2f}, "
            f"max {s['max_ms']:.2f} ms (worst {s['worst_max_ms']:.2f}); "
            f"{s['cpu_us_per_row']:.2f} µs CPU per row incl. the loop's own"
        )
    if "ref" in summary:
        c, r = summary["current"], summary["ref"]
        print(
            f"  current/ref: max lateness {c['max_ms'] / r['max_ms']:.2f}, "
            f"CPU per row {c['cpu_us_per_row'] / r['cpu_us_per_row']:.2f}"
        )
    meta = {"rate": args.rate, "seconds": args.seconds, "compare_ref": args.compare_ref}
    write_results({**meta, "rounds": rows, "summary": summary}, "history-lag", args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
