"""When does an IP-throttled socket close? Kafka 4.3.1 beside the acceptor, in one run.

    .venv/bin/python -m bench.throttle_close [--rounds 3] [--target broker|acceptor|both]

Kafka's acceptor thread parks a socket whose IP is over `connection_creation_rate`
(`ConnectionThrottledException`) and closes it in `closeThrottledConnections`, which runs
only once per turn of its loop: after `select(500)` returned (a new connection, or 500 ms
of nothing) and the ready connection was admitted, and only once `end < now`. So on an
idle listener a socket throttled for ~100 ms is closed at the loop's next 500 ms timeout,
and on a busy one at the first accept after its end. For each target this opens 101
connections from one address under a 10/s per-IP quota (the 101st onwards is throttled
~100 ms: the meter's window is padded to 10 s), then measures, from the client, connect to
EOF of one throttled connection on an idle listener, and of one while another address
connects every 20 ms. Not a test: timings depend on the machine; the shape (idle ≈ the
500 ms select timeout, busy ≈ the throttle) is the finding.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import threading
import time

from acceptor.testing import until_throttled
from base.admin.client import alter_ip_quota
from bench.toolkit.sidebyside import add_target_arg, side_by_side

Address = tuple[str, int]
FLOOD_IP = "127.0.0.41"


def _other_traffic(addr: Address, stop: threading.Event) -> None:
    i = 0
    while not stop.is_set() and i < 2000:
        with socket.create_connection(
            addr, timeout=5, source_address=(f"127.0.0.{60 + i % 50}", 0)
        ):
            pass
        i += 1
        time.sleep(0.02)


def measure(addr: Address, boot: str, rounds: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"idle": [], "busy": []}
    alter_ip_quota(boot, None, 10)  # every address: 10/s (the other traffic is 1/s each)
    time.sleep(1.0)
    for r in range(rounds):
        for m, mode in enumerate(("idle", "busy")):
            ip = f"127.0.1.{10 + 2 * r + m}"
            stop = threading.Event()
            t = threading.Thread(target=_other_traffic, args=(addr, stop))
            if mode == "busy":
                t.start()
            n, dt, _how = until_throttled(addr, ip)
            stop.set()
            if mode == "busy":
                t.join(10)
            print(
                f"[throttle-close] round {r + 1} {mode}: {n} answered, then one closed "
                f"unanswered after {dt * 1000:.0f} ms",
                flush=True,
            )
            out[mode].append(dt)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    add_target_arg(ap)
    args = ap.parse_args()
    with side_by_side(args.target, args.set_acceptor) as targets:
        for name, ends in targets({}, ("CLIENT",), None):
            res = measure(ends.addresses["CLIENT"], ends.admin, args.rounds)
            for mode, values in res.items():
                med = statistics.median(values) * 1000 if values else float("nan")
                print(
                    f"[throttle-close] {name} {mode}: median {med:.0f} ms over {len(values)} "
                    f"(all: {', '.join(f'{v * 1000:.0f}' for v in values)})",
                    flush=True,
                )
    print("[throttle-close] done (output above; nothing written)")


if __name__ == "__main__":
    main()
