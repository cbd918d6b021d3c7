"""Kafka 4.3.1 beside the acceptor in one bench run: the same limits on a broker that
enforces them, and on the acceptor in front of a plain broker (started once, for the run).

    with side_by_side("both") as targets:
        for name, ends in targets({"max.connections": "6"}, ("CLIENT", "INTER"), "INTER"):
            ...  # name is "kafka" or "acceptor"; ends.addresses["CLIENT"], ends.admin

Used by bench.throttle_close, bench.eviction_pace and bench.protected_listener_rate.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from acceptor import start_in_thread
from broker import Broker, start_broker
from harness.runner.cli import add_set_acceptor

CHOICES = ("broker", "acceptor", "both")


@dataclass(frozen=True)
class Ends:
    """Where a target listens: each listener's address, and where admin requests go."""

    addresses: dict[str, tuple[str, int]]
    admin: str


Targets = Callable[[Mapping[str, str], Sequence[str], "str | None"], Iterator[tuple[str, Ends]]]


def add_target_arg(ap: argparse.ArgumentParser, default: str = "both") -> None:
    """`--target` and `--set-acceptor KEY=VALUE` (extra acceptor properties, repeatable:
    e.g. `acceptor.process.model=split`)."""
    ap.add_argument("--target", choices=CHOICES, default=default)
    add_set_acceptor(ap, "e.g. acceptor.process.model=split")


def _broker(props: Mapping[str, str], listeners: Sequence[str], inter: str | None) -> Broker:
    return start_broker(
        launcher="local",
        workdir=Path(tempfile.mkdtemp(prefix="sidebyside-")),
        properties=dict(props),
        listeners=tuple(listeners),
        inter_broker_listener=inter,
    )


@contextmanager
def side_by_side(
    choice: str, acceptor: Sequence[tuple[str, str]] | Mapping[str, str] = ()
) -> Iterator[Targets]:
    """`targets(props, listeners, inter_broker)` yields each chosen target, started with
    those limits and stopped after its turn: Kafka first, then the acceptor (with the
    extra properties `acceptor`)."""
    extra = dict(acceptor)
    plain = _broker({}, ("PLAINTEXT",), None) if choice in ("acceptor", "both") else None

    def targets(
        props: Mapping[str, str], listeners: Sequence[str], inter: str | None
    ) -> Iterator[tuple[str, Ends]]:
        if choice in ("broker", "both"):
            b = _broker(props, listeners, inter)
            try:
                addrs = {n: ("127.0.0.1", b.listener_ports[n]) for n in listeners}
                yield "kafka", Ends(addrs, b.bootstrap)
            finally:
                b.stop()
        if plain is not None:
            cfg = {
                "listeners": ",".join(f"{n}://127.0.0.1:0" for n in listeners),
                "metrics.port": "-1",
                **{f"listener.name.{n.lower()}.upstream": plain.bootstrap for n in listeners},
                **({"inter.broker.listener.name": inter} if inter else {}),
                **props,
            }
            for key, value in extra.items():  # as `harness acceptor --set`: KEY= removes it
                if value:
                    cfg[key] = value
                else:
                    cfg.pop(key, None)
            h = start_in_thread(cfg, run_id="sidebyside")
            try:
                addrs = {n: h.address(n) for n in listeners}
                first = addrs[listeners[0]]
                yield "acceptor", Ends(addrs, f"{first[0]}:{first[1]}")
            finally:
                h.stop()

    try:
        yield targets
    finally:
        if plain is not None:
            plain.stop()
