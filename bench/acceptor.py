"""Benchmark: the acceptor's cost, measured against the same broker reached directly.

One real broker with two listeners: PLAINTEXT (clients reach it directly) and FRONTED
(advertised as the acceptor's address, where the acceptor forwards). The acceptor runs as
its own process (`harness acceptor`), as in production, so it does not share the client's
GIL. In one run, for both paths:

  1. accept rate: connect -> ApiVersions -> close, from --threads client threads;
  2. produce throughput: --records records of --record-size bytes, acks=1, batched;
  3. latency: one producer at half of the direct throughput (linger 0), p50/p99 per record.

    .venv/bin/python -m bench.acceptor [--seconds 5] [--records 50000] [--loop auto] [--json FILE]
        [--compare-ref GIT_REF [--rounds 3] [--accept-only]]

``--compare-ref`` also starts the acceptor of another commit (``git archive`` of its
``harness/`` into a temporary folder) next to the current one, on the same broker, and
compares the two in alternating rounds: accept rate and the acceptor process's CPU time per
connection (utime+stime from /proc), which is the steadier number on a shared machine.
Used to show that the seeded-fault hooks (``harness.test.fault``) cost nothing when off.

Prints progress, then the ratios (goals: forwarding throughput >= 0.8x direct, added p99
latency <= 2 ms at half load, accept rate >= 0.5x the broker's own).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from harness.acceptor.testing import free_port, round_trip


def _progress(msg: str) -> None:
    print(f"[bench] {msg}", flush=True)


def accept_rate(addr: tuple[str, int], threads: int, seconds: float) -> float:
    counts = [0] * threads
    bad: list[str] = []

    def loop(i: int) -> None:
        end = time.monotonic() + seconds
        n = 0
        while time.monotonic() < end and n < 200_000:
            out = round_trip(addr, f"127.0.{10 + i}.{n % 200 + 1}", timeout=10)
            if out == "ok":
                counts[i] += 1
            else:
                bad.append(out)
            n += 1

    ts = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    elapsed = time.monotonic() - t0
    if bad:
        _progress(f"  {len(bad)} failed round trips: {sorted(set(bad))}")
    return sum(counts) / elapsed


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (Linux /proc), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_acceptor(
    work: Path, tag: str, port: int, upstream_port: int, loop: str, cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    """`harness acceptor` as its own process (from `cwd`'s harness/ when given)."""
    ready = work / f"ready-{tag}.json"
    env = dict(os.environ)
    if cwd is not None:
        env["PYTHONPATH"] = str(cwd)
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", "acceptor", "--loop", loop,
         "--set", f"listeners=CLIENT://127.0.0.1:{port}",
         "--set", f"listener.name.client.upstream=127.0.0.1:{upstream_port}",
         "--set", "metrics.port=-1",
         "--history", str(work / f"history-{tag}"), "--run-id", f"bench-{tag}",
         "--ready-file", str(ready)],
        stdout=open(work / f"acceptor-{tag}.log", "w"), stderr=subprocess.STDOUT,
        cwd=str(cwd) if cwd is not None else None, env=env,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"acceptor {tag} did not start; see {work / f'acceptor-{tag}.log'}")
        time.sleep(0.1)
    return proc


def compare_ref(
    work: Path, ref: str, upstream_port: int, args: argparse.Namespace
) -> dict[str, Any]:
    """Current acceptor vs the one at `ref`: accept rate and CPU per connection, A/B rounds."""
    src = work / "ref-src"
    src.mkdir()
    root = Path(__file__).resolve().parent.parent
    archive = subprocess.run(
        ["git", "-C", str(root), "archive", ref, "harness"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    procs: dict[str, subprocess.Popen[bytes]] = {}
    ports: dict[str, int] = {}
    out: dict[str, Any] = {"ref": ref}
    try:
        for tag, cwd in (("ref", src), ("current", None)):
            ports[tag] = free_port()
            procs[tag] = start_acceptor(work, tag, ports[tag], upstream_port, args.loop, cwd)
            _progress(f"acceptor {tag} pid {procs[tag].pid} on 127.0.0.1:{ports[tag]}")
        for tag in procs:  # warm-up: imports, first connections
            accept_rate(("127.0.0.1", ports[tag]), args.threads, 1.0)
        for rnd in range(1, args.rounds + 1):
            for tag in ("ref", "current") if rnd % 2 else ("current", "ref"):
                cpu0 = cpu_seconds(procs[tag].pid)
                t0 = time.monotonic()
                rate = accept_rate(("127.0.0.1", ports[tag]), args.threads, args.seconds)
                conns = rate * (time.monotonic() - t0)
                cpu_ms = (cpu_seconds(procs[tag].pid) - cpu0) * 1000 / max(conns, 1)
                out.setdefault(f"accept_rate_{tag}", []).append(rate)
                out.setdefault(f"cpu_ms_per_conn_{tag}", []).append(cpu_ms)
                _progress(
                    f"  round {rnd} {tag:7}: {rate:.0f} connections/s, "
                    f"{cpu_ms:.3f} ms acceptor CPU per connection"
                )
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
    out["ratio_accept_rate_best"] = max(out["accept_rate_current"]) / max(out["accept_rate_ref"])
    out["ratio_cpu_per_conn_median"] = statistics.median(
        out["cpu_ms_per_conn_current"]
    ) / statistics.median(out["cpu_ms_per_conn_ref"])
    return out


def produce_throughput(boot: str, topic: str, records: int, size: int) -> float:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=boot, acks=1, linger_ms=5, batch_size=256 * 1024)
    value = b"x" * size
    p.send(topic, value).get(30)  # metadata and connection warm-up
    t0 = time.perf_counter()
    for _ in range(records):
        p.send(topic, value)
    p.flush(300)
    elapsed = time.perf_counter() - t0
    p.close()
    return records / elapsed


def produce_latency(boot: str, topic: str, rate: float, seconds: float, size: int) -> list[float]:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=boot, acks=1, linger_ms=0)
    value = b"y" * size
    p.send(topic, value).get(30)
    lat: list[float] = []
    lock = threading.Lock()
    n = int(rate * seconds)
    t0 = time.perf_counter()
    for i in range(n):
        due = t0 + i / rate
        now = time.perf_counter()
        if due > now:
            time.sleep(due - now)
        start = time.perf_counter()

        def done(_: Any, start: float = start) -> None:
            with lock:
                lat.append((time.perf_counter() - start) * 1000)

        p.send(topic, value).add_callback(done)
    p.flush(120)
    p.close()
    return lat


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seconds", type=float, default=5.0, help="per accept-rate / latency phase")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--records", type=int, default=50_000)
    ap.add_argument("--record-size", type=int, default=100)
    ap.add_argument("--latency-rate", type=float, default=200.0, help="cap of the steady rate")
    ap.add_argument("--loop", choices=("auto", "uvloop", "asyncio"), default="auto")
    ap.add_argument("--json", type=Path, help="also write the numbers here")
    ap.add_argument("--compare-ref", metavar="GIT_REF", help="also compare with this commit")
    ap.add_argument("--rounds", type=int, default=3, help="A/B rounds of --compare-ref")
    ap.add_argument(
        "--accept-only", action="store_true", help="with --compare-ref: only that comparison"
    )
    args = ap.parse_args(argv)

    from harness.broker import start_broker

    work = Path(tempfile.mkdtemp(prefix="bench-acceptor-"))
    port = free_port()
    _progress(
        f"starting a Kafka broker (listeners PLAINTEXT + FRONTED -> 127.0.0.1:{port}); "
        f"work dir {work}"
    )
    broker = start_broker(
        launcher="local",
        listeners=("PLAINTEXT", "FRONTED"),
        advertised={"FRONTED": f"127.0.0.1:{port}"},
        workdir=work / "broker",
        progress=_progress,
    )
    proc = None
    try:
        direct_port = broker.listener_ports["PLAINTEXT"]
        fronted_port = broker.listener_ports["FRONTED"]
        if args.compare_ref:
            _progress(
                f"comparing the current acceptor with {args.compare_ref} ({args.rounds} rounds)"
            )
            cmp = compare_ref(work, args.compare_ref, fronted_port, args)
            print()
            print(
                f"current/{args.compare_ref}: accept rate (best) "
                f"{cmp['ratio_accept_rate_best']:.3f}, CPU per connection (median) "
                f"{cmp['ratio_cpu_per_conn_median']:.3f}"
            )
            if args.accept_only:
                if args.json:
                    args.json.write_text(json.dumps(cmp, indent=2), encoding="utf-8")
                    print(f"numbers written to {args.json}")
                print(f"acceptor logs and history: {work}")
                return 0
        ready = work / "ready.json"
        proc = subprocess.Popen(
            [sys.executable, "-m", "harness", "acceptor", "--loop", args.loop,
             "--set", f"listeners=CLIENT://127.0.0.1:{port}",
             "--set", f"listener.name.client.upstream=127.0.0.1:{fronted_port}",
             "--history", str(work / "history"), "--run-id", "bench", "--ready-file", str(ready)],
            stdout=open(work / "acceptor.log", "w"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"acceptor did not start; see {work / 'acceptor.log'}")
            time.sleep(0.1)
        _progress(f"acceptor (loop={args.loop}) pid {proc.pid} on 127.0.0.1:{port}")
        direct = ("127.0.0.1", direct_port)
        front = ("127.0.0.1", port)
        res: dict[str, Any] = {"loop": args.loop, "threads": args.threads, "cpus": os.cpu_count()}

        # A/B/A/B, best of two per path: the machine is shared, so one slow round is noise
        paths = (("direct", direct), ("acceptor", front))
        for rnd in (1, 2):
            for name, addr in paths:
                _progress(
                    f"accept rate via {name}, round {rnd} ({args.threads} threads, {args.seconds}s)"
                )
                r = accept_rate(addr, args.threads, args.seconds)
                res[f"accept_rate_{name}"] = max(r, res.get(f"accept_rate_{name}", 0.0))
                _progress(f"  {r:.0f} connections/s")
        for rnd in (1, 2):
            for name, addr in paths:
                boot = f"{addr[0]}:{addr[1]}"
                _progress(
                    f"produce throughput via {name}, round {rnd} "
                    f"({args.records} x {args.record_size} B)"
                )
                r = produce_throughput(boot, f"bench-tp-{name}", args.records, args.record_size)
                res[f"throughput_{name}"] = max(r, res.get(f"throughput_{name}", 0.0))
                _progress(f"  {r:.0f} records/s")
        # "half load" for a steady unbatched (linger 0) producer: capped so that the Python
        # client itself is not the bottleneck being measured
        half = min(res["throughput_direct"], res["throughput_acceptor"]) / 2
        rate = min(half, args.latency_rate)
        res["latency_rate"] = rate
        for name, addr in (("direct", direct), ("acceptor", front)):
            boot = f"{addr[0]}:{addr[1]}"
            _progress(f"produce latency via {name} at {rate:.0f} records/s for {args.seconds}s")
            lat = produce_latency(boot, f"bench-lat-{name}", rate, args.seconds, args.record_size)
            res[f"p50_ms_{name}"] = statistics.median(lat)
            res[f"p99_ms_{name}"] = pct(lat, 0.99)
            _progress(f"  p50 {res[f'p50_ms_{name}']:.2f} ms, p99 {res[f'p99_ms_{name}']:.2f} ms")

        res["ratio_accept_rate"] = res["accept_rate_acceptor"] / res["accept_rate_direct"]
        res["ratio_throughput"] = res["throughput_acceptor"] / res["throughput_direct"]
        res["added_p50_ms"] = res["p50_ms_acceptor"] - res["p50_ms_direct"]
        res["added_p99_ms"] = res["p99_ms_acceptor"] - res["p99_ms_direct"]
        print()
        print(f"accept rate      acceptor/direct = {res['ratio_accept_rate']:.2f}  (goal >= 0.5)")
        print(f"throughput       acceptor/direct = {res['ratio_throughput']:.2f}  (goal >= 0.8)")
        print(
            f"added latency    p50 {res['added_p50_ms']:+.2f} ms, "
            f"p99 {res['added_p99_ms']:+.2f} ms at {rate:.0f} rec/s  (goal p99 <= 2 ms)"
        )
        if args.json:
            args.json.write_text(json.dumps(res, indent=2), encoding="utf-8")
            print(f"numbers written to {args.json}")
        print(f"acceptor log and history: {work}")
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        broker.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
