"""A local broker's CPU with the JVM's default compilers against C1 only, in one run.

Why: the test suite's brokers live seconds to a minute, and the suite is bound by CPU on two
cores; C2's compilations cost CPU that a short-lived broker never earns back. For each
flavour, alternating, ``--rounds`` times: start a local broker, read its JVM's CPU when it
answers (the start), then ``--probe-s`` seconds of back-to-back probes (a connection each:
ApiVersions, Metadata) and ``--idle-s`` seconds idle, and read it again (the lifetime).

    .venv/bin/python -m bench.broker_jit --rounds 2

CPU is the JVM's user + system time from /proc (clock ticks); the probe count says how much
work each flavour did in the same time (the probe client, one Python thread, is the pace).
"""

from __future__ import annotations

import argparse
import os
import time

from bench.toolkit.trogdor import tree_cpu_s
from broker import start_broker
from broker.probe import probe

FLAVOURS = {"default": "", "c1": "-XX:TieredStopAtLevel=1"}


def one(opts: str, probe_s: float, idle_s: float) -> tuple[float, float, int]:
    os.environ["HARNESS_BROKER_JVM_OPTS"] = opts
    broker = start_broker(launcher="local", progress=lambda m: None)
    try:
        assert broker.pid is not None
        started = tree_cpu_s(broker.pid)
        host, port = broker.bootstrap.rsplit(":", 1)
        probes, end = 0, time.monotonic() + probe_s
        while time.monotonic() < end:
            probe(host, int(port))
            probes += 1
        time.sleep(idle_s)
        return started, tree_cpu_s(broker.pid), probes
    finally:
        broker.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--probe-s", type=float, default=20.0)
    ap.add_argument("--idle-s", type=float, default=10.0)
    args = ap.parse_args()
    totals: dict[str, list[float]] = {name: [0.0, 0.0] for name in FLAVOURS}
    for r in range(1, args.rounds + 1):
        for name, opts in FLAVOURS.items():
            started, lifetime, probes = one(opts, args.probe_s, args.idle_s)
            totals[name][0] += started
            totals[name][1] += lifetime
            print(
                f"round {r} {name:8} start {started:5.2f} CPU-s, lifetime {lifetime:5.2f} CPU-s, "
                f"{probes} probes",
                flush=True,
            )
    (d_start, d_life), (c_start, c_life) = totals["default"], totals["c1"]
    print(f"C1 / default: start {c_start / d_start:.2f}x, lifetime {c_life / d_life:.2f}x")


if __name__ == "__main__":
    main()
