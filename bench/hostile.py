"""Hostile input: what a slowloris storm and an RST flood cost a well-behaved client.

Why a bench and not a test: the bound we state for issue 5 is a latency ratio, and timing
claims belong in one measured run on a named machine, not in assertions that flake on a
loaded CI box. In one run, against a real broker behind the acceptor (its own process, as
in production), a steady client does ApiVersions/Metadata round trips at a fixed pace
through four phases:

  1. baseline      nothing else going on;
  2. slowloris     --slowloris connections (one source IP each) announce a 1000-byte
                   request and dribble it one byte per --dribble-s each, never finishing;
  3. rst-flood     --rst-threads threads connect, send half a request and close with RST
                   (SO_LINGER 0) as fast as they can;
  4. baseline-2    nothing again (drift check: the machine is shared).

The steady client interleaves every round trip through the acceptor with the same request
straight to the broker ("direct"): on a shared machine the direct numbers are the control,
so a storm's cost at the acceptor is its acceptor ratio beyond the direct ratio. The storms
run in a separate process so they do not share the steady client's GIL. It prints p50/p99
per phase and path, the ratios to the quieter of phases 1 and 4 (conservative), the acceptor's CPU
share and its descriptor count before, during and after (leaks would show there).

    .venv/bin/python -m bench.hostile [--seconds 15] [--slowloris 200] [--json FILE]

Results: a table on stdout, JSON in bench/results/hostile-<time>.json (or --json FILE).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from acceptor.testing import api_versions_frame, reset_close
from base import procfs
from base.localnet import free_port
from bench.output import write_results


def _progress(msg: str) -> None:
    print(f"[bench] {msg}", flush=True)


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


# -- storms (run in a child process) -----------------------------------------------------------
def slowloris(
    addr: tuple[str, int], n: int, dribble_s: float, ready: Any, stop: Any, out: Any
) -> None:
    socks = []
    for i in range(n):
        s = socket.create_connection(
            addr, timeout=30, source_address=(f"127.0.30.{i % 250 + 1}", 0)
        )
        s.sendall(struct.pack(">i", 1000))
        socks.append(s)
    ready.set()
    rng = random.Random(1)
    sent = 0
    deadline = time.monotonic() + 600  # bounded even if the parent dies
    while not stop.is_set() and time.monotonic() < deadline and sent < 990 * n:
        for s in socks:
            s.send(bytes([rng.randrange(256)]))
            sent += 1
        stop.wait(dribble_s)
    out.put({"connections": n, "bytes_dribbled": sent})
    for s in socks:
        s.close()


def rst_flood(addr: tuple[str, int], threads: int, ready: Any, stop: Any, out: Any) -> None:
    half = api_versions_frame()[:9]
    counts = [0] * threads
    errors = [0] * threads
    deadline = time.monotonic() + 600

    def loop(k: int) -> None:
        i = 0
        while not stop.is_set() and time.monotonic() < deadline and i < 500_000:
            i += 1
            try:
                s = socket.create_connection(
                    addr, timeout=10, source_address=(f"127.0.{31 + k}.{i % 250 + 1}", 0)
                )
            except OSError:
                errors[k] += 1
                continue
            try:
                s.sendall(half)
            except OSError:
                errors[k] += 1
            reset_close(s)
            counts[k] += 1

    ts = [threading.Thread(target=loop, args=(k,)) for k in range(threads)]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    ready.set()
    for t in ts:
        t.join()
    elapsed = time.monotonic() - t0
    out.put(
        {
            "connections": sum(counts),
            "connect_errors": sum(errors),
            "rate_per_s": sum(counts) / elapsed if elapsed else 0.0,
        }
    )


# -- the steady client ------------------------------------------------------------------------
def steady_phase(
    paths: dict[str, tuple[str, int]], seconds: float, pace_s: float
) -> tuple[dict[str, list[float]], list[str]]:
    """Round-trip latencies (ms) per path, ApiVersions/Metadata alternately, one request
    per path per step (interleaved, so both paths see the same moment of the machine)."""
    from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest

    from base.admin.client import KafkaWire

    lat: dict[str, list[float]] = {name: [] for name in paths}
    errors: list[str] = []
    wires = {
        name: KafkaWire(f"{a[0]}:{a[1]}", source_ip="127.0.0.2", timeout=30)
        for name, a in paths.items()
    }
    try:
        end = time.monotonic() + seconds
        n = 0
        while time.monotonic() < end and n < 200_000 and not errors:
            for name, wire in wires.items():
                req: Any = (
                    MetadataRequest[1](topics=[])
                    if n % 2
                    else ApiVersionsRequest[3](
                        client_software_name="bench", client_software_version="0"
                    )
                )
                t0 = time.perf_counter()
                try:
                    wire.request(req)
                except Exception as exc:
                    errors.append(f"{name}: {exc!r}")
                    break
                lat[name].append((time.perf_counter() - t0) * 1000)
            n += 1
            time.sleep(pace_s)
    finally:
        for wire in wires.values():
            wire.close()
    return lat, errors


def proc_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def proc_cpu_s(pid: int) -> float:
    """utime + stime of a process, in seconds."""
    try:
        return procfs.read_stat(pid).cpu_s
    except OSError:
        return float("nan")


def run_phase(
    name: str,
    paths: dict[str, tuple[str, int]],
    args: argparse.Namespace,
    acc_pid: int,
    storm: Any = None,
) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    ready, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
    proc = None
    if storm is not None:
        target, extra = storm
        addr = paths["acceptor"]
        proc = ctx.Process(target=target, args=(addr, *extra, ready, stop, out), daemon=True)
        proc.start()
        if not ready.wait(120):
            raise SystemExit(f"{name}: the storm did not get going in 120 s")
        time.sleep(1.0)  # let the acceptor register it
    fds_during = proc_fds(acc_pid)
    cpu0, t0 = proc_cpu_s(acc_pid), time.monotonic()
    _progress(f"{name}: steady client for {args.seconds}s (acceptor fds {fds_during})")
    lat, errors = steady_phase(paths, args.seconds, args.pace_ms / 1000)
    cpu = (proc_cpu_s(acc_pid) - cpu0) / (time.monotonic() - t0)
    fds_end = proc_fds(acc_pid)
    res: dict[str, Any] = {
        "errors": errors,
        "acceptor_fds_during": max(fds_during, fds_end),
        "acceptor_cpu_share": cpu,
    }
    for path, all_values in lat.items():
        # the first round trip also waits for the acceptor to accept, admit and register the
        # steady client's new connection (behind a storm's queue): reported on its own
        values = all_values[1:]
        res[path] = {
            "first_ms": all_values[0] if all_values else float("nan"),
            "round_trips": len(values),
            "p50_ms": statistics.median(values) if values else float("nan"),
            "p99_ms": pct(values, 0.99),
            "max_ms": max(values) if values else float("nan"),
        }
    if proc is not None:
        stop.set()
        try:
            res["storm"] = out.get(timeout=120)
        except Exception:
            res["storm"] = {"error": "no report from the storm process"}
        proc.join(60)
    for path in lat:
        r = res[path]
        _progress(
            f"  {path:<8} p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms, "
            f"max {r['max_ms']:.1f} ms over {r['round_trips']} round trips; "
            f"first (new connection) {r['first_ms']:.1f} ms"
        )
    _progress(
        f"  acceptor CPU {cpu:.2f} of a core"
        + (f"; storm {json.dumps(res['storm'])}" if proc is not None else "")
    )
    if errors:
        _progress(f"  steady client errors: {errors}")
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seconds", type=float, default=15.0, help="steady client time per phase")
    ap.add_argument("--pace-ms", type=float, default=5.0, help="pause between round trips")
    ap.add_argument("--slowloris", type=int, default=200, help="slowloris connections")
    ap.add_argument("--dribble-s", type=float, default=0.5, help="seconds between bytes")
    ap.add_argument("--rst-threads", type=int, default=2, help="RST flood threads")
    ap.add_argument("--loop", choices=("auto", "uvloop", "asyncio"), default="auto")
    ap.add_argument("--bootstrap", help="use this broker instead of starting one")
    ap.add_argument(
        "--no-history", action="store_true", help="run the acceptor without a history (A/B)"
    )
    ap.add_argument("--json", type=Path, help="write the numbers here")
    args = ap.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="bench-hostile-"))
    broker = None
    if args.bootstrap:
        upstream = args.bootstrap
    else:
        from broker import start_broker

        _progress(f"starting a Kafka broker; work dir {work}")
        broker = start_broker(launcher="local", workdir=work / "broker", progress=_progress)
        upstream = broker.bootstrap
    port = free_port()
    ready_file = work / "ready.json"
    acc = None
    try:
        acc = subprocess.Popen(
            [sys.executable, "-m", "harness", "acceptor", "--loop", args.loop,
             "--set", f"listeners=CLIENT://127.0.0.1:{port}",
             "--set", f"listener.name.client.upstream={upstream}",
             "--set", "socket.listen.backlog.size=1024",
             "--set", "metrics.port=-1",
             *([] if args.no_history else ["--history", str(work / "history")]),
             "--run-id", "bench-hostile", "--ready-file", str(ready_file)],
            stdout=open(work / "acceptor.log", "w"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while not ready_file.exists():
            if acc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"acceptor did not start; see {work / 'acceptor.log'}")
            time.sleep(0.1)
        host, _, uport = upstream.rpartition(":")
        paths = {"acceptor": ("127.0.0.1", port), "direct": (host, int(uport))}
        _progress(f"acceptor pid {acc.pid} on 127.0.0.1:{port} -> {upstream}")
        steady_phase(paths, 1.0, 0.005)  # warm-up: connections, loop internals, history files
        time.sleep(0.5)
        fds_before = proc_fds(acc.pid)
        res: dict[str, Any] = {
            "cpus": os.cpu_count(),
            "load_avg_start": os.getloadavg(),
            "loop": args.loop,
            "seconds_per_phase": args.seconds,
            "pace_ms": args.pace_ms,
            "acceptor_fds_before": fds_before,
            "history": not args.no_history,
        }
        res["baseline"] = run_phase("baseline", paths, args, acc.pid)
        res["slowloris"] = run_phase(
            f"slowloris ({args.slowloris} connections, 1 byte / {args.dribble_s}s each)",
            paths,
            args,
            acc.pid,
            (slowloris, (args.slowloris, args.dribble_s)),
        )
        res["rst_flood"] = run_phase(
            f"rst-flood ({args.rst_threads} threads)",
            paths,
            args,
            acc.pid,
            (rst_flood, (args.rst_threads,)),
        )
        res["baseline_2"] = run_phase("baseline-2", paths, args, acc.pid)
        # descriptors: give the acceptor time to see every EOF/RST
        end = time.monotonic() + 60
        while proc_fds(acc.pid) > fds_before and time.monotonic() < end:
            time.sleep(0.5)
        res["acceptor_fds_after"] = proc_fds(acc.pid)
        res["load_avg_end"] = os.getloadavg()
        phases = ("baseline", "slowloris", "rst_flood", "baseline_2")
        # the reference is the quieter of the two baselines, per path and quantile: on a
        # shared machine that makes every ratio conservative (larger, never flattered)
        base = {
            path: {
                f"{q}_ms": min(res["baseline"][path][f"{q}_ms"], res["baseline_2"][path][f"{q}_ms"])
                for q in ("p50", "p99")
            }
            for path in ("acceptor", "direct")
        }
        res["reference"] = base
        for phase in phases:
            for path in ("acceptor", "direct"):
                for q in ("p50", "p99"):
                    res[f"ratio_{q}_{phase}_{path}"] = (
                        res[phase][path][f"{q}_ms"] / base[path][f"{q}_ms"]
                    )
        print()
        print(
            "ratios are to the quieter of the two baselines; 'direct' is the same client "
            "straight to the broker, interleaved (the machine's own noise); 'first ms' is the "
            "first round trip of each phase's new connection (not in p50/p99/max)"
        )
        print(f"{'phase':<11} {'path':<9} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
              f"{'trips':>6} {'p50 x':>6} {'p99 x':>6} {'acc fds':>8} {'acc cpu':>8} "
              f"{'first ms':>9}")  # fmt: skip
        for phase in phases:
            for path in ("acceptor", "direct"):
                r = res[phase][path]
                b = base[path]
                print(
                    f"{phase:<11} {path:<9} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} "
                    f"{r['max_ms']:>8.1f} {r['round_trips']:>6} "
                    f"{r['p50_ms'] / b['p50_ms']:>6.2f} {r['p99_ms'] / b['p99_ms']:>6.2f} "
                    f"{res[phase]['acceptor_fds_during']:>8} "
                    f"{res[phase]['acceptor_cpu_share']:>8.2f} {r['first_ms']:>9.1f}"
                )
        print(
            f"acceptor descriptors: {fds_before} before, {res['acceptor_fds_after']} after "
            f"(storms closed); load average {res['load_avg_start'][0]:.1f} -> "
            f"{res['load_avg_end'][0]:.1f} on {res['cpus']} CPUs"
        )
        failed = [
            p for p in ("baseline", "slowloris", "rst_flood", "baseline_2") if res[p]["errors"]
        ]
        if failed:
            print(f"steady client FAILED in: {', '.join(failed)}")
        write_results(res, "hostile", args.json)
        print(f"acceptor log and history in {work}")
        return 1 if failed else 0
    finally:
        if acc is not None and acc.poll() is None:
            acc.send_signal(signal.SIGTERM)
            try:
                acc.wait(30)
            except subprocess.TimeoutExpired:
                acc.kill()
        if broker is not None:
            broker.stop()


if __name__ == "__main__":
    raise SystemExit(main())
