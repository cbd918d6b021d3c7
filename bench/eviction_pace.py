"""How fast is the excess over `max.connections` shed? Kafka 4.3.1 beside the acceptor.

    .venv/bin/python -m bench.eviction_pace [--rounds 3] [--clients 6] [--target both]

Listeners CLIENT and REPLICATION (inter-broker, so protected; its own maximum is 100), and
`max.connections=CLIENTS`. CLIENTS connections on CLIENT are opened and answered (the
first becomes the least recently used), then CLIENTS more on the protected REPLICATION,
which Kafka admits past the maximum; the CLIENT processors must then evict their least
recently used connections (`closeExcessConnections`, one per processor per loop turn)
until the total is back at the maximum. Printed: how many CLIENT connections were closed
and when each close reached the client, from the last REPLICATION connection's answer.
Not a test: timings depend on the machine.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import time

from acceptor.testing import api_versions_frame, close_times, raw, read_outcome
from bench.toolkit.sidebyside import add_target_arg, side_by_side

Address = tuple[str, int]
LISTENERS = ("CLIENT", "REPLICATION")


def _props(clients: int) -> dict[str, str]:
    return {
        "max.connections": str(clients),
        "listener.name.replication.max.connections": "100",
    }


def _answered(addr: Address, ip: str) -> socket.socket:
    s = raw(addr, ip, 10)
    s.sendall(api_versions_frame())
    if read_outcome(s, 10) != "data":
        raise RuntimeError(f"{addr} from {ip}: not answered")
    return s


def one_round(addrs: dict[str, Address], clients: int) -> tuple[int, list[float]]:
    held = [_answered(addrs["CLIENT"], f"127.0.4.{i + 1}") for i in range(clients)]
    time.sleep(0.7)  # every processor idle in its poll
    extra = [_answered(addrs["REPLICATION"], f"127.0.5.{i + 1}") for i in range(clients)]
    closed = close_times(held, 3.0)
    for s in held + extra:
        s.close()
    time.sleep(0.5)
    return len(closed), sorted(closed.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--clients", type=int, default=6)
    add_target_arg(ap)
    args = ap.parse_args()
    with side_by_side(args.target, args.set_acceptor) as targets:
        for name, ends in targets(_props(args.clients), LISTENERS, "REPLICATION"):
            lasts = []
            for r in range(args.rounds):
                n, times = one_round(ends.addresses, args.clients)
                lasts.append(times[-1] if times else float("nan"))
                print(
                    f"[eviction-pace] {name} round {r + 1}: {n} of {args.clients} CLIENT "
                    f"connections closed at {', '.join(f'{t * 1000:.0f}' for t in times)} ms",
                    flush=True,
                )
            median_ms = statistics.median(lasts) * 1000
            print(f"[eviction-pace] {name}: last close median {median_ms:.0f} ms", flush=True)
    print("[eviction-pace] done (output above; nothing written)")


if __name__ == "__main__":
    main()
