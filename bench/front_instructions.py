"""Benchmark: the acceptor's user-space instructions per operation, counted by valgrind's
callgrind, for A/B comparisons that a shared machine's drifting speed cannot blur.

`bench.front_cost` measures CPU time, which is what the speed goals are stated in, but on a
machine shared with other tenants one path's rounds swing by ±15 % within a run, so a cut
of a few per cent cannot be shown. An instruction count does not depend on the machine's
speed: the same code counted twice in one run agrees within about 5 %, and from run to run
the counts move by up to 4 %, so compare paths within one run. What it does not see is the
kernel's work (the system calls: count those with `strace -c`) and the price of each
instruction (cache misses, a system call's entry): it ranks changes to the acceptor's own
code, CPU time still judges them.

The acceptor (`harness acceptor`, history on, metrics off, from this checkout, and with
``--compare-ref GIT_REF`` that commit's `harness/` too) runs under `valgrind
--tool=callgrind`, with instrumentation off until the load starts; the stand-in broker and
the load are `bench.front_cost`'s, one load thread (so that a front running ~50x slower
under valgrind overflows no accept queue). Per phase, the counters are zeroed, the load
runs, the acceptor catches up with it (`settle`), and the counts since are dumped:

  bare  ``--ops`` connections: connect -> close, nothing sent;
  conn  ``--ops`` connections: connect -> ApiVersions -> Metadata -> close (forwarded);
  req   5 x ``--ops`` Produce requests of ``--request-bytes`` on one connection.

Work that goes with time rather than with connections (timers, the history's flushes) is
counted too: each phase runs a few seconds under valgrind, and how long it ran is most of
what moves the counts from one run to the next.

    .venv/bin/python -m bench.front_instructions --compare-ref HEAD~1
    .venv/bin/python -m bench.front_instructions --ops 1000 --response-bytes 1048576

Prints instructions per operation per path and their ratios; JSON in
bench/results/front-instructions-<time>.json (or --json).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from base import procfs
from base.localnet import free_port
from bench.output import args_record, write_results
from bench.toolkit.front_load import (
    BODY,
    MAX_RESPONSE_BYTES,
    PHASES,
    bare_load,
    conn_load,
    req_load,
    run_threads,
    start_stand_in,
)
from bench.toolkit.fronts import ref_checkout, start_acceptor, stop_process

#: how long a dump may take to appear once asked for
DUMP_TIMEOUT_S = 60.0
#: the acceptor has caught up with a phase's load once its CPU time grows by no more than a
#: clock tick over this long: longer than the history writer's flush interval (1 s), so the
#: phase's rows are written inside the phase (idle, the acceptor costs ~0.3 M instructions
#: a second under callgrind: about 1 k per operation of a phase at the default --ops)
QUIET_S = 1.5
#: how long it may take to catch up
SETTLE_TIMEOUT_S = 120.0


def _progress(msg: str) -> None:
    print(f"[front-instructions] {msg}", flush=True)


def dump_total(path: Path) -> int:
    """The instructions a callgrind dump counted (its `totals:` line, else `summary:`)."""
    summary = None
    for line in path.read_text().splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
        if line.startswith("summary:"):
            summary = int(line.split()[1])
    if summary is None:
        raise ValueError(f"{path}: no totals or summary line (not a callgrind dump?)")
    return summary


def _control(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, capture_output=True)


def settle(pid: int) -> None:
    """Wait until `pid` has done the work the load gave it: under valgrind the acceptor
    runs ~50x slower than the load, so when the load's last connect-and-close returns
    the acceptor may still have most of them to accept, admit and close."""
    tick_s = 1 / os.sysconf("SC_CLK_TCK")
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    before = sum(procfs.tree_cpu_times(pid))
    while time.monotonic() < deadline:
        time.sleep(QUIET_S)
        now = sum(procfs.tree_cpu_times(pid))
        if now - before <= tick_s:
            return
        before = now
    raise SystemExit(f"pid {pid} still busy {SETTLE_TIMEOUT_S:.0f} s after the load ended")


def counted(pid: int, prefix: Path, load: Any, *args: Any) -> int:
    """The instructions `pid` executes while `load(*args)` runs in one thread."""
    before = set(prefix.parent.glob(f"{prefix.name}.{pid}*"))
    _control(pid, "--instr=on")
    _control(pid, "--zero")
    run_threads(load, 1, *args)
    settle(pid)  # the load's last connections served, not left to the next phase
    _control(pid, "--dump")
    _control(pid, "--instr=off")
    deadline = time.monotonic() + DUMP_TIMEOUT_S
    while True:
        new = set(prefix.parent.glob(f"{prefix.name}.{pid}*")) - before
        if new:
            (dump,) = new
            time.sleep(0.2)  # written whole before the control command returned; be sure
            return dump_total(dump)
        if time.monotonic() > deadline:
            raise SystemExit(f"no callgrind dump of pid {pid} within {DUMP_TIMEOUT_S:.0f} s")
        time.sleep(0.1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.front_instructions",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--ops", type=int, default=400, help="connections per connection phase")
    ap.add_argument("--request-bytes", type=int, default=16_384)
    ap.add_argument("--response-bytes", type=int, default=len(BODY), help="the stand-in's answer")
    ap.add_argument("--compare-ref", metavar="GIT_REF", help="also this commit's acceptor")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    for name in ("ops", "request_bytes"):
        if not 1 <= getattr(args, name) <= 1_000_000:
            ap.error(f"--{name.replace('_', '-')}={getattr(args, name)}: expected 1..1000000")
    if not 0 <= args.response_bytes <= MAX_RESPONSE_BYTES:
        ap.error(f"--response-bytes={args.response_bytes}: expected 0..{MAX_RESPONSE_BYTES}")
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            ap.error(f"{tool} is not installed (Debian: apt-get install valgrind)")

    # string hashes seeded alike in every acceptor: dict and set layouts, and so the
    # instructions spent probing them, do not change from one process to the next
    os.environ["PYTHONHASHSEED"] = "0"
    work = Path(tempfile.mkdtemp(prefix="bench-front-instructions-"))
    plan: list[tuple[str, Path | None]] = [("acceptor", None)]
    if args.compare_ref:
        plan.append(("ref", ref_checkout(args.compare_ref, work / "ref-src")))
    ops = {"bare": args.ops, "conn": args.ops, "req": 5 * args.ops}
    counts: dict[str, dict[str, float]] = {}
    stand_in_port = free_port()
    stand_in = start_stand_in(stand_in_port, args.response_bytes)
    try:
        for tag, cwd in plan:
            port = free_port()
            prefix = work / f"callgrind-{tag}"
            wrapper = (
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                f"--callgrind-out-file={prefix}.%p",
            )
            proc = start_acceptor(work, tag, port, stand_in_port, "auto", cwd, wrapper=wrapper)
            _progress(f"{tag} under callgrind, pid {proc.pid} on 127.0.0.1:{port}")
            try:
                run_threads(conn_load, 1, port, 20)  # warm: first-use imports and caches
                settle(proc.pid)
                loads = {
                    "bare": (bare_load, (port, ops["bare"])),
                    "conn": (conn_load, (port, ops["conn"])),
                    "req": (req_load, (port, ops["req"], args.request_bytes, 1)),
                }
                counts[tag] = {}
                for phase in PHASES:
                    load, load_args = loads[phase]
                    total = counted(proc.pid, prefix, load, *load_args)
                    counts[tag][phase] = total / ops[phase]
                    _progress(f"{tag} {phase}: {counts[tag][phase]:,.0f} instructions per op")
            finally:
                stop_process(proc)
    finally:
        stop_process(stand_in)
        shutil.rmtree(work, ignore_errors=True)

    print("\nuser-space instructions per operation (callgrind):")
    print("  path          per bare      per conn   per request")
    for tag, c in counts.items():
        print(f"  {tag:9} {c['bare']:12,.0f} {c['conn']:13,.0f} {c['req']:13,.0f}")
    ratios = {}
    if "ref" in counts:
        ratios = {phase: counts["acceptor"][phase] / counts["ref"][phase] for phase in PHASES}
        print(
            f"  acceptor/ref: bare {ratios['bare']:.3f}, conn {ratios['conn']:.3f}, "
            f"req {ratios['req']:.3f}"
        )
    record = {"args": args_record(args), "instructions_per_op": counts, "ratios": ratios}
    write_results(record, "front-instructions", args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
