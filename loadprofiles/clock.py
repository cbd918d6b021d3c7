"""Clock alignment of distributed load: each worker's offset to the master's clock.

A worker sends ``harness_clock_ping`` (its wall clock ``t0``) over Locust's own
master/worker channel; the master answers ``harness_clock_pong`` with its wall clock
``m``; at receipt ``t1`` the worker estimates ``offset = m − (t0 + t1) / 2`` (NTP's
estimate, error ≤ RTT/2), keeping the sample with the smallest round trip of
``PINGS``. ``master_time ≈ worker_time + offset``: a history row's ``ts`` plus its
process's ``clock_offset_ns`` is on the master's clock. The worker records the
offset and its bound in its history (``connect_invoke.detail.clock_offset_ns`` and
``clock_rtt_ns``, and the Parquet metadata) so an analysis of several hosts can
align them. On one machine the offset is ~0 and says how well that works.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

PINGS = 5
#: tests only: "S0,S1,…" (ns); Locust worker i runs as if on another machine whose clocks,
#: wall and monotonic, read S_(i mod n) later than this one's (its history files then say
#: so under a boot id of their own, base.history.clocks)
SKEW_ENV = "HARNESS_TEST_CLOCK_SKEW_NS"
#: how far ahead of its test start the master puts the common schedule start
START_LEAD_NS = 500_000_000


def estimate(t0_ns: int, master_ns: int, t1_ns: int) -> tuple[int, int]:
    """(offset_ns, rtt_ns) of one exchange (pure; unit-tested)."""
    return master_ns - (t0_ns + t1_ns) // 2, t1_ns - t0_ns


def master_side(environment: Any) -> None:
    """Answer clock pings; at each test start, broadcast the common schedule start.

    All workers start the same schedule at the same instant (the master's wall clock
    ``start_wall_ns``, converted with each worker's offset), so ``k mod N`` splits one
    schedule exactly instead of N schedules shifted by each worker's start-up."""
    runner = environment.runner

    def on_test_start(environment: Any, **_: Any) -> None:
        runner.send_message("harness_start", {"start_wall_ns": time.time_ns() + START_LEAD_NS})

    environment.events.test_start.add_listener(on_test_start)

    from base.history.clocks import boot_id

    boot = boot_id()

    def on_ping(environment: Any, msg: Any, **_: Any) -> None:
        mono, wall = time.monotonic_ns(), time.time_ns()
        runner.send_message(
            "harness_clock_pong",
            {"t0": msg.data["t0"], "m": wall, "boot": boot, "m_wm": wall - mono},
            client_id=msg.node_id,
        )

    runner.register_message("harness_clock_ping", on_ping)


def simulated_skew_ns(worker_index: int) -> int:
    """This worker's simulated clock skew (``SKEW_ENV``; 0 when unset)."""
    text = os.environ.get(SKEW_ENV, "").strip()
    if not text:
        return 0
    values = [int(v) for v in text.split(",")]
    return values[max(0, worker_index) % len(values)]


#: ``on_offset(offset_ns, rtt_ns, sample)``: a better estimate; ``sample`` is what was read in
#: the same exchange, (this process's wall-minus-monotonic, the master's boot id, the master's
#: wall-minus-monotonic), or None from a master that sends no clock of its own
OnOffset = Callable[[int, int, "tuple[int, str, int] | None"], None]


def worker_side(
    environment: Any,
    on_offset: OnOffset,
    on_start: Callable[[int], None],
    skew_ns: int = 0,
) -> None:
    """Ping the master at start-up and at each test start; ``on_offset`` per better sample;
    ``on_start(start_wall_ns)`` (master's clock) when the master announces a schedule
    start."""
    runner = environment.runner

    def on_start_msg(environment: Any, msg: Any, **_: Any) -> None:
        on_start(int(msg.data["start_wall_ns"]))

    runner.register_message("harness_start", on_start_msg)
    best: dict[str, int | None] = {"rtt": None}

    def on_pong(environment: Any, msg: Any, **_: Any) -> None:
        mono, wall = time.monotonic_ns(), time.time_ns()
        offset, rtt = estimate(int(msg.data["t0"]), int(msg.data["m"]), wall + skew_ns)
        prev = best["rtt"]
        if prev is None or rtt < prev:
            best["rtt"] = rtt
            data = msg.data
            sample = (wall - mono, str(data["boot"]), int(data["m_wm"])) if "m_wm" in data else None
            on_offset(offset, rtt, sample)

    def ping(environment: Any, **_: Any) -> None:
        for _i in range(PINGS):
            runner.send_message("harness_clock_ping", {"t0": time.time_ns() + skew_ns})

    runner.register_message("harness_clock_pong", on_pong)
    environment.events.test_start.add_listener(ping)
    import gevent  # only here: the pure estimate above stays importable without gevent

    gevent.spawn_later(0.2, ping, environment)


def local_start_mono_ns(start_wall_ns: int, offset_ns: int, skew_ns: int = 0) -> int:
    """The master's ``start_wall_ns`` as this process's monotonic time."""
    local_wall = start_wall_ns - offset_ns  # master = local + offset
    return time.monotonic_ns() + (local_wall - (time.time_ns() + skew_ns))
