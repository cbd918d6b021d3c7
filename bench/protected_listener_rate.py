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
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from harness.acceptor import start_in_thread
from harness.acceptor.testing import api_versions_frame
from harness.broker import Broker, start_broker

LISTENERS = ("CLIENT", "REPLICATION")
Addresses = Callable[[str], tuple[str, int]]


def served(addr: tuple[str, int]) -> bool:
    with socket.create_connection(addr, timeout=30) as s:
        s.sendall(api_versions_frame())
        return len(s.recv(4)) == 4


def _broker(props: dict[str, str]) -> Broker:
    return start_broker(
        launcher="local",
        workdir=Path(tempfile.mkdtemp(prefix="protected-rate-")),
        properties=props,
        listeners=LISTENERS,
        inter_broker_listener="REPLICATION",
    )


@contextmanager
def kafka(props: dict[str, str], _plain: Broker | None) -> Iterator[Addresses]:
    broker = _broker(props)
    try:
        yield lambda listener: ("127.0.0.1", broker.listener_ports[listener])
    finally:
        broker.stop()


@contextmanager
def acceptor(props: dict[str, str], plain: Broker | None) -> Iterator[Addresses]:
    assert plain is not None
    cfg = {
        "listeners": ",".join(f"{n}://127.0.0.1:0" for n in LISTENERS),
        "inter.broker.listener.name": "REPLICATION",
        "metrics.port": "-1",
        **{f"listener.name.{n.lower()}.upstream": plain.bootstrap for n in LISTENERS},
        **props,
    }
    handle = start_in_thread(cfg, run_id="protected-rate")
    try:
        yield handle.address
    finally:
        handle.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--connections", type=int, default=80)
    ap.add_argument("--rate", type=int, default=5)
    ap.add_argument("--target", choices=("broker", "acceptor", "both"), default="broker")
    args = ap.parse_args()
    overrides = {
        "no listener rate": {},
        "REPLICATION's own rate 100000": {
            "listener.name.replication.max.connection.creation.rate": "100000"
        },
    }
    targets = {"kafka": kafka, "acceptor": acceptor}
    if args.target != "both":
        targets = {k: v for k, v in targets.items() if (k == "kafka") == (args.target == "broker")}
    plain = _broker({}) if "acceptor" in targets else None  # the acceptor's upstream
    try:
        for label, extra in overrides.items():
            props = {"max.connection.creation.rate": str(args.rate), **extra}
            for tname, target in targets.items():
                with target(props, plain) as address:
                    for listener in ("REPLICATION", "CLIENT"):
                        addr = address(listener)
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
    finally:
        if plain is not None:
            plain.stop()
    print("[protected-rate] done (output above; nothing written)")


if __name__ == "__main__":
    main()
