"""Benchmark: a front's CPU per forwarded connection and per request, with no broker or JVM
in the way: the quick A/B loop for the acceptor's own cost (a minute, where
`bench.acceptor`'s Trogdor rounds take ten).

Behind every front is one stand-in broker (its own process, uvloop) that answers each
request frame at once with ``[size][correlation id][64 zero bytes]`` (``--response-bytes N``:
N zero bytes, e.g. 1048576 for a fetch's answer, which reaches the front in several reads);
the load comes from this process's threads:

  bare  connect -> close, nothing sent (Trogdor's CONNECT: the acceptor accepts, admits,
        registers and closes; no upstream), from ``--conn-threads`` threads, ``--conns``
        each (a burst that overflows the listen queue of 50 costs a thread a SYN resent
        after 1 s, not CPU: the numbers stay CPU per connection);
  conn  connect -> ApiVersions -> Metadata -> close (the shape of Trogdor's FETCH_METADATA
        connections: both requests forwarded, the upstream opened and closed), from
        ``--conn-threads`` threads, ``--conns`` each;
  req   one connection per thread (``--req-threads``) sending ``--requests`` Produce v3
        requests (acks=1, ``--request-bytes`` of records), ``--in-flight`` at a time (a
        producer's max.in.flight.requests.per.connection; Kafka's and the acceptor's one
        request in flight per connection hold the others unread).

Per phase, the front's user and kernel CPU (/proc) divided by the connections or requests
it carried. Paths: ``acceptor`` (``harness acceptor`` from this checkout, history on,
metrics off), ``ref`` with ``--compare-ref GIT_REF`` (that commit's ``harness/``),
``split`` with ``--split-path N`` (this checkout's acceptor with
``acceptor.process.model=split`` and N processor processes; CPU counted over the whole
process tree; with ``--compare-ref`` also ``refsplit``, the other commit's in that model),
``haproxy`` with ``--haproxy-path`` (Debian's HAProxy as a plain relay: one thread, no
PROXY header, splice, Kafka's accept queue of 50), ``floor`` with ``--floor-path`` (the least
a Python front on uvloop does per connection: a relay of two Protocols and nothing else, no
quota, no history, no frame read; the upstream opened at the client's first bytes, as the
acceptor opens it; a lower bound on the acceptor's cost in this stack), ``no-history`` with
``--no-history-path`` (this checkout's acceptor with history off: what the history costs,
and with ``--compare-ref`` how near the other commit the acceptor comes without it). In
each round every phase runs on the paths one after the other (their order rotating from
round to round), so each round gives a ratio per phase taken on the same stretch of the
machine's speed, which on a shared machine drifts more between rounds than within one: the
median of those paired ratios and their lowest and highest are printed beside the ratio of
the medians.
``--stages`` then runs the ``conn`` phase once more on the acceptor (and the floor, with
``--floor-path``) under ``py-spy record --native`` (not counted in the rounds) and splits
each path's median CPU per forwarded connection over the stages of a connection (accept and
admission, hand-off and registration, the connection's task, bytes and requests, the
transports' callbacks, the loop's own work) by the share of the event loop's samples in
each: where the acceptor spends more than a bare relay. With
``--cpus split`` (the default on a machine of 2 or more CPUs) the fronts run alone on the
last CPU, the stand-in and the load on the others, so a front's CPU time is its own work and
not time spent waiting behind its peers. The numbers are CPU per operation, not rates: they
hold on a busy machine better than rates do, but compare paths within one run.

    .venv/bin/python -m bench.front_cost --haproxy-path
    .venv/bin/python -m bench.front_cost --compare-ref HEAD~1 --rounds 5
    .venv/bin/python -m bench.front_cost --split-path 3
    .venv/bin/python -m bench.front_cost --floor-path
    .venv/bin/python -m bench.front_cost --floor-path --stages
    .venv/bin/python -m bench.front_cost --no-history-path --compare-ref HEAD~1
    .venv/bin/python -m bench.front_cost --compare-ref HEAD~1 --response-bytes 1048576 \
        --request-bytes 100 --requests 500

Prints each round and the medians; JSON in bench/results/front-cost-<time>.json (or --json).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from acceptor.config import DEFAULTS as ACCEPTOR_DEFAULTS
from base import procfs
from base.localnet import free_port
from bench.output import args_record, write_results
from bench.toolkit.front_load import (
    BODY,
    MAX_RESPONSE_BYTES,
    PHASES,
    bare_load,
    conn_load,
    paired_ratios,
    req_load,
    run_threads,
    start_floor,
    start_stand_in,
)
from bench.toolkit.fronts import ref_checkout, start_acceptor, stop_process
from bench.toolkit.profiling import collapsed_stacks, py_spy, sampling
from loadprofiles.haproxy import start_haproxy


def _progress(msg: str) -> None:
    print(f"[front-cost] {msg}", flush=True)


# -- the stand-in broker -----------------------------------------------------------------------


# -- the floor: a relay of two Protocols on uvloop ---------------------------------------------


# -- where a forwarded connection's CPU goes (--stages) -----------------------------------------
#: a connection's stages, each named by the frames that run it (the acceptor's and the floor's,
#: and uvloop's own for what it does in C); a sample goes to the first stage with a frame in its
#: stack, else to the loop's own work (polling, callbacks' dispatch). The frames' names are kept
#: by tests/unit/test_bench_front_cost.py.
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "accept and admission",
        ("ListenerAcceptor._turn", "ListenerAcceptor._stalled", "uv__server_io"),
    ),
    ("hand-off and registration", ("Processor._run",)),
    ("the connection's task", ("AsyncioWire.run", "_FloorClient._open")),
    ("bytes and requests", ("data_received",)),
    ("transports made", ("connection_made",)),
    ("end of stream", ("eof_received",)),
    ("transports lost", ("connection_lost", "UVStream__close", "uv_close")),
)
LOOP_OWN = "the loop's own work"
#: a frame of the event loop's thread (py-spy --native): samples of other threads (history's
#: writer, the metrics server) are left out
_LOOP_FRAME = "Loop__run"


def stage_shares(raw: str) -> dict[str, float]:
    """py-spy's raw (collapsed) stacks -> the share of the event loop's samples per stage
    (`STAGES`, then `LOOP_OWN`); empty when no sample is the loop's."""
    counts = dict.fromkeys([name for name, _ in STAGES] + [LOOP_OWN], 0)
    total = 0
    for frames, n in collapsed_stacks(raw):
        if not any(_LOOP_FRAME in f for f in frames):
            continue
        total += n
        counts[_stage(frames)] += n
    return {name: c / total for name, c in counts.items()} if total else {}


def _stage(frames: list[str]) -> str:
    for name, keys in STAGES:
        if any(key in frame for frame in frames for key in keys):
            return name
    return LOOP_OWN


def profile_stages(
    work: Path, targets: dict[str, tuple[int, int]], paths: list[str], load_args: tuple[int, int]
) -> dict[str, dict[str, float]]:
    """The conn phase once more per path under py-spy (--native: uvloop's C frames too): each
    path's stage shares. Paths whose profile could not be taken are left out, with a line."""
    spy = py_spy()
    if spy is None:
        _progress("--stages: py-spy not found (pip install -e '.[dev]'); skipped")
        return {}
    shares: dict[str, dict[str, float]] = {}
    for name in paths:
        port, pid = targets[name]
        raw = work / f"stages-{name}.txt"
        cmd = [spy, "record", "--native", "-r", "1000", "-f", "raw", "-o", str(raw), "-p", str(pid)]
        with sampling(cmd):
            time.sleep(1.0)  # py-spy attached before the load starts
            threads, conns = load_args
            run_threads(conn_load, threads, port, conns)
        got = stage_shares(raw.read_text()) if raw.exists() else {}
        if not got:
            _progress(f"--stages: no samples of {name}'s event loop; left out")
            continue
        shares[name] = got
    return shares


# -- load --------------------------------------------------------------------------------------


def _span(ratio: dict[str, float] | None) -> str:
    if ratio is None:
        return "below a tick"
    return f"{ratio['median']:.3f} ({ratio['low']:.3f}-{ratio['high']:.3f})"


def measure(pid: int, ops: int, load: Any, *args: Any) -> dict[str, float]:
    """The front's CPU per operation over one load run: user and kernel, in µs."""
    u0, s0 = procfs.tree_cpu_times(pid)
    seconds = run_threads(load, *args)
    u1, s1 = procfs.tree_cpu_times(pid)
    user, kernel = (u1 - u0) * 1e6 / ops, (s1 - s0) * 1e6 / ops
    return {"user_us": user, "kernel_us": kernel, "cpu_us": user + kernel, "seconds": seconds}


# -- the run -----------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.front_cost",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--conns", type=int, default=1000, help="connections per conn thread")
    ap.add_argument("--conn-threads", type=int, default=4)
    ap.add_argument("--requests", type=int, default=5000, help="requests per req thread")
    ap.add_argument("--req-threads", type=int, default=2)
    ap.add_argument("--request-bytes", type=int, default=16_384)
    ap.add_argument(
        "--response-bytes",
        type=int,
        default=len(BODY),
        help="what the stand-in answers after the correlation id (a fetch's answer: 1048576)",
    )
    ap.add_argument(
        "--in-flight", type=int, default=1, help="requests sent before their answers are read"
    )
    ap.add_argument("--compare-ref", metavar="GIT_REF", help="also this commit's acceptor")
    ap.add_argument("--haproxy-path", action="store_true", help="also HAProxy as a plain relay")
    ap.add_argument(
        "--floor-path", action="store_true", help="also a bare relay of two uvloop Protocols"
    )
    ap.add_argument(
        "--no-history-path",
        action="store_true",
        help="also this checkout's acceptor with history off (path 'no-history')",
    )
    ap.add_argument(
        "--split-path",
        type=int,
        metavar="N",
        help="also this checkout's acceptor with acceptor.process.model=split and N processor "
        "processes (path 'split')",
    )
    ap.add_argument(
        "--stages",
        action="store_true",
        help="then split the acceptor's (and the floor's) CPU per forwarded connection over "
        "its stages (py-spy --native)",
    )
    ap.add_argument("--cpus", choices=("split", "shared"), default=None)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    numbers = ("rounds", "conns", "conn_threads", "requests", "req_threads", "request_bytes")
    for name in (*numbers, "in_flight"):
        if not 1 <= getattr(args, name) <= 1_000_000:
            ap.error(f"--{name.replace('_', '-')}={getattr(args, name)}: expected 1..1000000")
    if not 0 <= args.response_bytes <= MAX_RESPONSE_BYTES:
        ap.error(f"--response-bytes={args.response_bytes}: expected 0..{MAX_RESPONSE_BYTES}")
    cpus = sorted(os.sched_getaffinity(0))
    layout = args.cpus or ("split" if len(cpus) >= 2 else "shared")
    if layout == "split" and len(cpus) < 2:
        ap.error("--cpus split needs two CPUs")
    fronts_cpu, rest_cpus = ({cpus[-1]}, set(cpus[:-1])) if layout == "split" else (None, None)

    work = Path(tempfile.mkdtemp(prefix="bench-front-cost-"))
    procs: list[subprocess.Popen[Any]] = []
    stand_in_port = free_port()
    targets: dict[str, tuple[int, int]] = {}  # path -> (listen port, pid)
    relays = []
    shares: dict[str, dict[str, float]] = {}  # --stages: path -> stage -> share of its loop
    try:
        if rest_cpus:
            os.sched_setaffinity(0, rest_cpus)
        procs.append(start_stand_in(stand_in_port, args.response_bytes))
        _progress(
            f"stand-in broker on 127.0.0.1:{stand_in_port} (answers {args.response_bytes} bytes "
            "after the correlation id)"
        )
        if fronts_cpu:
            os.sched_setaffinity(0, fronts_cpu)  # the fronts inherit it
        plan: list[tuple[str, Path | None, tuple[str, ...]]] = [("acceptor", None, ())]
        ref_src = ref_checkout(args.compare_ref, work / "ref-src") if args.compare_ref else None
        if ref_src:
            plan.append(("ref", ref_src, ()))
        if args.split_path:
            split_sets = (
                "acceptor.process.model=split",
                f"acceptor.processor.processes={args.split_path}",
            )
            plan.append(("split", None, split_sets))
            if ref_src:
                plan.append(("refsplit", ref_src, split_sets))
        if args.no_history_path:
            plan.append(("no-history", None, ()))
        for tag, cwd, sets in plan:
            port = free_port()
            history = tag != "no-history"
            proc = start_acceptor(
                work, tag, port, stand_in_port, "auto", cwd, sets=sets, history=history
            )
            procs.append(proc)
            targets[tag] = (port, proc.pid)
            _progress(
                f"{tag} pid {proc.pid} on 127.0.0.1:{port} (history {'on' if history else 'off'})"
            )
        if args.haproxy_path:
            relay = start_haproxy(
                upstream=("127.0.0.1", stand_in_port),
                send_proxy="off",
                source_ip="127.0.0.1",
                maxconn=4_000,
                threads=1,
                splice=True,
                backlog=int(ACCEPTOR_DEFAULTS["socket.listen.backlog.size"]),
                workdir=work / "haproxy",
            )
            relays.append(relay)
            targets["haproxy"] = (relay.address[1], relay.process.pid)
            _progress(f"haproxy pid {relay.process.pid} on 127.0.0.1:{relay.address[1]}")
        if args.floor_path:
            port = free_port()
            floor = start_floor(port, stand_in_port)
            procs.append(floor)
            targets["floor"] = (port, floor.pid)
            _progress(f"floor pid {floor.pid} on 127.0.0.1:{port} (two uvloop Protocols)")
        if rest_cpus:
            os.sched_setaffinity(0, rest_cpus)
        _progress(
            f"layout {layout}: fronts on CPU {sorted(fronts_cpu or cpus)}, stand-in and load on "
            f"{sorted(rest_cpus or cpus)}; {args.rounds} rounds"
        )
        rows: list[dict[str, Any]] = []
        names = list(targets)
        conns = args.conns * args.conn_threads
        reqs = args.requests * args.req_threads
        loads: dict[str, tuple[int, Any, tuple[Any, ...]]] = {
            "bare": (conns, bare_load, (args.conn_threads, args.conns)),
            "conn": (conns, conn_load, (args.conn_threads, args.conns)),
            "req": (
                reqs,
                req_load,
                (args.req_threads, args.requests, args.request_bytes, args.in_flight),
            ),
        }
        for r in range(args.rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            got: dict[str, dict[str, Any]] = {
                name: {"round": r + 1, "path": name} for name in order
            }
            for phase, (ops, load, load_args) in loads.items():
                for name in order:  # the paths one after the other in each phase: pairs
                    port, pid = targets[name]
                    threads, *rest = load_args
                    got[name][phase] = measure(pid, ops, load, threads, port, *rest)
            for name in order:
                rows.append(got[name])
                b, c, q = got[name]["bare"], got[name]["conn"], got[name]["req"]
                _progress(
                    f"round {r + 1} {name:9} per bare connection {b['cpu_us']:6.1f} µs; "
                    f"per connection {c['cpu_us']:6.1f} µs (user "
                    f"{c['user_us']:5.1f}, kernel {c['kernel_us']:5.1f}); per request "
                    f"{q['cpu_us']:5.1f} µs (user {q['user_us']:4.1f}, kernel "
                    f"{q['kernel_us']:4.1f}); load {os.getloadavg()[0]:.2f}"
                )
        if args.stages:
            stage_paths: list[str] = [p for p in ("acceptor", "floor") if p in targets]
            _progress(f"--stages: the conn phase once more under py-spy: {', '.join(stage_paths)}")
            shares = profile_stages(work, targets, stage_paths, (args.conn_threads, args.conns))
    finally:
        for relay in relays:
            relay.stop()
        for proc in reversed(procs):
            stop_process(proc)
        shutil.rmtree(work, ignore_errors=True)

    summary: dict[str, dict[str, float]] = {}
    for name in names:
        mine = [row for row in rows if row["path"] == name]
        summary[name] = {
            f"{phase}_{key}": statistics.median(row[phase][key] for row in mine)
            for phase in PHASES
            for key in ("cpu_us", "user_us", "kernel_us")
        }
    tick_us = 1e6 / os.sysconf("SC_CLK_TCK")  # /proc counts CPU time in clock ticks
    resolution = {"conn_us": tick_us / conns, "req_us": tick_us / reqs}
    print(f"\nmedians of {args.rounds} rounds (CPU of the front, µs; layout {layout}):")
    print(
        "  path       per bare   user  kernel   per conn   user  kernel   per request   user  "
        "kernel"
    )
    for name, m in summary.items():
        print(
            f"  {name:9} {m['bare_cpu_us']:9.1f} {m['bare_user_us']:6.1f} "
            f"{m['bare_kernel_us']:7.1f} {m['conn_cpu_us']:9.1f} {m['conn_user_us']:6.1f} "
            f"{m['conn_kernel_us']:7.1f} {m['req_cpu_us']:13.1f} {m['req_user_us']:6.1f} "
            f"{m['req_kernel_us']:7.1f}"
        )
    ratios: dict[str, dict[str, float | None]] = {}
    paired: dict[str, dict[str, dict[str, float] | None]] = {}
    compared = [("acceptor", o) for o in ("ref", "split", "haproxy", "floor", "no-history")]
    for path, other in [*compared, ("no-history", "ref"), ("split", "refsplit")]:
        if path in summary and other in summary:
            a, o = summary[path], summary[other]
            ratio = {  # None: the other path spent less than a clock tick in the phase
                phase: a[f"{phase}_cpu_us"] / o[f"{phase}_cpu_us"] if o[f"{phase}_cpu_us"] else None
                for phase in ("bare", "conn", "req")
            }
            ratios[f"{path}/{other}"] = ratio
            shown = {k: "below a tick" if v is None else f"{v:.3f}" for k, v in ratio.items()}
            print(
                f"  {path}/{other}: CPU per bare connection {shown['bare']}, per "
                f"connection {shown['conn']}, per request {shown['req']}"
            )
            pairs = {phase: paired_ratios(rows, path, other, phase) for phase in PHASES}
            paired[f"{path}/{other}"] = pairs
            print(
                "    paired, each round's ratio (median, lowest-highest): "
                + "; ".join(f"{phase} {_span(pairs[phase])}" for phase in PHASES)
            )
    print(
        f"  resolution (one clock tick over a phase): {resolution['conn_us']:.2f} µs per "
        f"connection, {resolution['req_us']:.2f} µs per request"
    )
    stages = {  # µs of each path's median CPU per forwarded connection, by stage
        name: {stage: share * summary[name]["conn_cpu_us"] for stage, share in got.items()}
        for name, got in shares.items()
    }
    if stages:
        print(
            "\n  CPU per forwarded connection by stage (µs: the median above, split by the "
            "share of the event loop's py-spy samples):"
        )
        print("  stage                        " + "".join(f"{name:>10}" for name in stages))
        for stage in [name for name, _ in STAGES] + [LOOP_OWN]:
            print(f"  {stage:28} " + "".join(f"{got[stage]:10.0f}" for got in stages.values()))
        print(
            "  total                        "
            + "".join(f"{summary[name]['conn_cpu_us']:10.0f}" for name in stages)
        )
    result = {
        "layout": layout,
        "args": args_record(args),
        "rounds": rows,
        "medians": summary,
        "ratios": ratios,
        "paired_ratios": paired,
        "resolution": resolution,
        "stages_us": stages,
    }
    write_results(result, "front-cost", args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
