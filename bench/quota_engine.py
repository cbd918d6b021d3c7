"""Benchmark: quota-engine admission decisions per second on one core.

The acceptor calls the engine once per accepted socket, under its accept loop, so the
engine must stay far below the cost of the accept itself. This drives
``ConnectionQuotas.decide`` over a realistic storm: thousands of loopback source IPs
(a few hot ones behind a "proxy"), two listeners with the inter-broker one protected,
broker/listener rate limits, a default per-IP rate quota plus overrides, per-IP count
caps, and releases of admitted connections after a random lifetime. Simulated time
advances with the arrivals; the wall clock only times the loop.

    .venv/bin/python -m bench.quota_engine [--decisions 300000] [--repeat 3] [--json FILE]

Prints progress per repetition, then the best and median rates and the outcome mix.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import socket
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

from base.quota import ConnectionQuotas, Decision, Outcome, parse_config

PROPS = {
    "listeners": "CLIENT://127.0.0.1:19092,REPLICATION://127.0.0.1:19093",
    "inter.broker.listener.name": "REPLICATION",
    "max.connections": "20000",
    "listener.name.client.max.connections": "18000",
    "max.connections.per.ip": "200",
    "max.connections.per.ip.overrides": "127.0.0.9:600",
    "max.connection.creation.rate": "3000",
    "listener.name.client.max.connection.creation.rate": "2500",
}


def workload(n: int, seed: int, ips: int) -> list[tuple[int, str, str, int]]:
    """(arrival ms, listener, ip, lifetime ms): ~4000 arrivals/s, 10% from one proxy IP."""
    rng = random.Random(seed)
    pool = [f"127.{1 + i // 62500 % 250}.{i // 250 % 250}.{1 + i % 250}" for i in range(ips)]
    out = []
    t = 0.0
    for _ in range(n):
        t += rng.expovariate(4.0)  # 4 per ms
        ip = "127.0.0.9" if rng.random() < 0.1 else rng.choice(pool)
        listener = "REPLICATION" if rng.random() < 0.02 else "CLIENT"
        out.append((int(t), listener, ip, int(rng.expovariate(1 / 2000.0))))
    return out


class NullQuotas:
    """The bench loop's own cost: the same bookkeeping around an engine that does nothing."""

    def __init__(self) -> None:
        self._decision = ConnectionQuotas(parse_config(PROPS)).decide("CLIENT", "127.0.0.1", 0)

    def decide(self, listener: str, ip: str, now_ms: int) -> Decision:
        return self._decision

    def release(self, listener: str, ip: str) -> None:
        return None


def run_once(
    arrivals: list[tuple[int, str, str, int]], *, null: bool = False
) -> tuple[float, Counter[str]]:
    """Seconds of CPU time for the whole arrival list, and the outcome mix."""
    q: ConnectionQuotas | NullQuotas
    if null:
        q = NullQuotas()
    else:
        q = ConnectionQuotas(parse_config(PROPS))
        q.set_ip_quota(None, 50, 0)
        q.set_ip_quota("127.0.0.9", 300, 0)
    mix: Counter[tuple[Outcome | str, bool]] = Counter()
    closing: list[tuple[int, str, str]] = []
    decide, release = q.decide, q.release
    push, pop = heapq.heappush, heapq.heappop
    admitted = Outcome.ADMITTED
    start = time.process_time()
    for now, listener, ip, life in arrivals:
        while closing and closing[0][0] <= now:
            _, lst, addr = pop(closing)
            release(lst, addr)
        d = decide(listener, ip, now)
        adm = d.admission
        if adm is None:
            mix[("waits_for_slot", False)] += 1
            continue
        outcome = adm.outcome
        if outcome is admitted:
            push(closing, (now + d.rate.delay_ms + life, listener, ip))
        mix[(outcome, d.rate.delay_ms > 0)] += 1
    seconds = time.process_time() - start
    named: Counter[str] = Counter()
    for (kind, delayed), count in mix.items():
        named[str(kind) + ("+delayed" if delayed else "")] += count
    return seconds, named


def socketpair_seconds(count: int) -> float:
    """CPU seconds per ``socket.socketpair()`` + two closes: a yardstick from the acceptor's
    own per-connection work (no network traffic), measured in the same run."""
    start = time.process_time()
    for _ in range(count):
        a, b = socket.socketpair()
        a.close()
        b.close()
    return (time.process_time() - start) / count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--decisions", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--ips", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)
    if args.decisions < 1 or args.repeat < 1 or args.ips < 1:
        parser.error("--decisions, --repeat and --ips must be >= 1")
    print(f"quota-engine bench: building {args.decisions} arrivals over {args.ips} IPs", flush=True)
    arrivals = workload(args.decisions, args.seed, args.ips)
    print(f"  machine load average: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    engine: list[float] = []
    loop: list[float] = []
    mix: Counter[str] = Counter()
    for i in range(args.repeat):
        seconds, mix = run_once(arrivals)
        null_seconds, _ = run_once(arrivals, null=True)
        engine.append(seconds)
        loop.append(null_seconds)
        print(
            f"  run {i + 1}/{args.repeat}: {args.decisions / seconds:,.0f} decisions/s "
            f"(bench loop alone {args.decisions / null_seconds:,.0f} /s)",
            flush=True,
        )
    best, best_loop = min(engine), min(loop)
    n = args.decisions
    pair = min(socketpair_seconds(5000) for _ in range(3))
    total = sum(mix.values())
    result = {
        "decisions": n,
        "ips": args.ips,
        "decisions_per_cpu_s": round(n / best),
        "median_decisions_per_cpu_s": round(n / statistics.median(engine)),
        "engine_only_per_cpu_s": round(n / (best - best_loop)) if best > best_loop else None,
        "engine_share_of_loop": round((best - best_loop) / best, 3),
        "us_per_decision": round(best / n * 1e6, 2),
        "us_per_socketpair": round(pair * 1e6, 2),
        "decision_vs_socketpair": round((best / n) / pair, 3),
        "load_average": round(os.getloadavg()[0], 2),
        "outcomes": {k: round(v / total, 4) for k, v in sorted(mix.items())},
        "python": sys.version.split()[0],
    }
    print(
        f"decide() incl. releases and bench bookkeeping: {result['decisions_per_cpu_s']:,} /s "
        f"of one core's CPU time ({result['us_per_decision']} us each; median run "
        f"{result['median_decisions_per_cpu_s']:,} /s)"
    )
    print(
        f"engine alone (bench loop subtracted): {result['engine_only_per_cpu_s']:,} /s; "
        f"the engine is {result['engine_share_of_loop']:.0%} of the loop"
    )
    print(
        f"yardstick: one decision costs {result['decision_vs_socketpair']:.2f}x a "
        f"socketpair()+close() ({result['us_per_socketpair']} us) measured in this run"
    )
    print("outcome mix: " + ", ".join(f"{k} {v:.1%}" for k, v in result["outcomes"].items()))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
        print(f"result written to {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
