"""Does Kafka rate-limit its protected (inter-broker) listener by `max.connection.creation.rate`?

    .venv/bin/python -m bench.protected_listener_rate [--connections 80] [--rate 5]
        [--target broker|acceptor|both]

Starts a local Kafka 4.3.1 twice with listeners CLIENT and REPLICATION
(`inter.broker.listener.name=REPLICATION`, so REPLICATION is protected) and the broker-wide
rate `max.connection.creation.rate=RATE`: once with no listener-specific rate, once with
`listener.name.replication.max.connection.creation.rate=100000`. On each listener it opens
CONNECTIONS connections one after the other (connect, ApiVersions answered, close) and
prints how long they took. Kafka 4.3.1 gives a listener without its own rate the
broker-wide one (`valuesWithPrefixOverride`, docs/kafka-reference.md 10.4), so the protected
listener is delayed like CLIENT unless it has its own rate. With ``--target acceptor``
(or ``both``) the same sequence goes through the project's acceptor (same limits, in
front of a broker that enforces none), so the two are printed side by side. Not a test:
timings depend on the machine; the contrast (seconds against a tenth of one) is the
finding.
"""

from __future__ import annotations

import argparse
import socket
import time
from collections.abc import Callable

from acceptor.testing import api_versions_frame
from bench.toolkit.sidebyside import add_target_arg, side_by_side

LISTENERS = ("CLIENT", "REPLICATION")
Addresses = Callable[[str], tuple[str, int]]


def served(addr: tuple[str, int]) -> bool:
    with socket.create_connection(addr, timeout=30) as s:
        s.sendall(api_versions_frame())
        return len(s.recv(4)) == 4


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--connections", type=int, default=80)
    ap.add_argument("--rate", type=int, default=5)
    add_target_arg(ap, default="broker")
    args = ap.parse_args()
    overrides = {
        "no listener rate": {},
        "REPLICATION's own rate 100000": {
            "listener.name.replication.max.connection.creation.rate": "100000"
        },
    }
    with side_by_side(args.target, args.set_acceptor) as targets:
        for label, extra in overrides.items():
            props = {"max.connection.creation.rate": str(args.rate), **extra}
            for tname, ends in targets(props, LISTENERS, "REPLICATION"):
                for listener in ("REPLICATION", "CLIENT"):
                    addr = ends.addresses[listener]
                    t0 = time.monotonic()
                    ok = sum(served(addr) for _ in range(args.connections))
                    dt = time.monotonic() - t0
                    print(
                        f"[protected-rate] {tname}: {label}: {listener}: "
                        f"{ok}/{args.connections} served in {dt:.2f} s ({ok / dt:.1f}/s)",
                        flush=True,
                    )
                    # the window (11 × 1 s) ages out before the next listener is measured
                    time.sleep(12)
    print("[protected-rate] done (output above; nothing written)")


if __name__ == "__main__":
    main()
