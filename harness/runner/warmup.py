"""Kafka's start-up work done before the clock starts: a warm-up, not judged.

Why: a broker that has just started spends its first seconds of traffic compiling (the
JIT), creating its first metadata and log structures and growing its thread pools. In a run
on the acceptor target that work competes with the front for the same two CPUs at exactly
the moment the scenario's first storm arrives, and the front's loop starves (the windows
read saturated: judged by no check). The warm-up makes that work happen before t=0.

What: a few seconds of the scenario's own shape (connect, ApiVersions, Metadata: the storm
engine's ``storm`` shape) straight at the Kafka behind the acceptor (each PLAINTEXT
listener's upstream address), never through the acceptor: the acceptor's meters, counts and
history see none of it, so no quota it enforces is touched. It is bounded in count and time
(`RATE` × `SECONDS` connections, each with the engine's timeouts), writes no history row,
and runs before the runner's metrics scrapes start, so Kafka's counters judged later start
after it. The broker target gets none: there the clients connect to the broker whose own
quotas are judged, and a warm-up would be load against them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

#: connections per second, and for how long, per upstream address
RATE = 100.0
SECONDS = 3.0


def upstreams(props: Mapping[str, str], security: Mapping[str, Any]) -> list[tuple[str, str, int]]:
    """(listener, host, port) of each PLAINTEXT listener's upstream in one front's
    properties (``listener.name.<l>.upstream``); secured listeners are left out (their
    logins would need the run's credentials and count in Kafka's authentication metrics)."""
    out = []
    protocols = {
        str(k).lower(): str((v or {}).get("protocol", "PLAINTEXT")) for k, v in security.items()
    }
    for key, value in sorted(props.items()):
        if not (key.startswith("listener.name.") and key.endswith(".upstream")):
            continue
        listener = key[len("listener.name.") : -len(".upstream")]
        if protocols.get(listener, "PLAINTEXT").upper() != "PLAINTEXT":
            continue
        host, _, port = value.rpartition(":")
        if host and port.isdigit():
            out.append((listener, host, int(port)))
    return out


def warm_up(
    addresses: Iterable[tuple[str, str, int]],
    say: Callable[[str], None],
    *,
    rate: float = RATE,
    seconds: float = SECONDS,
) -> dict[str, Any]:
    """The storm shape at `rate`/s for `seconds` against each address, one after the other;
    what it offered and how it ended (for run.json)."""
    from loadprofiles.engine import EngineConfig, StormEngine

    done: dict[str, Any] = {"rate": rate, "seconds": seconds, "targets": []}
    for listener, host, port in addresses:
        cfg = EngineConfig(
            host=host,
            port=port,
            shape="storm",
            client_id="harness-warmup",
            profile="warmup",
            max_lag_ms=1000.0,
            connect_timeout_s=2.0,
            request_timeout_s=2.0,
        )
        engine = StormEngine(cfg, None, conn_prefix="warmup-")
        n = max(1, int(rate * seconds))
        t0 = time.monotonic()
        stats = engine.run(((k, k / rate) for k in range(n)), time.monotonic_ns())
        wall = time.monotonic() - t0
        say(
            f"warm-up of {listener}'s Kafka at {host}:{port} (not judged, before t=0): "
            f"{stats.offered} connections in {wall:.1f} s, outcomes {dict(stats.outcomes)}"
        )
        done["targets"].append(
            {
                "listener": listener,
                "address": f"{host}:{port}",
                "offered": stats.offered,
                "outcomes": dict(stats.outcomes),
                "wall_s": round(wall, 2),
            }
        )
    return done
