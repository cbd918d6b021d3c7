"""The acceptor's heartbeat measures loop stalls and nothing else; processor stalls parse.

A blocked loop (a callback that holds it, as a GC pause or descheduling would) must give a
`loop_lag` row at least as late as the block minus one period; a coroutine sleeping
(the over-sleep of a faulty acceptor) must give none.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from acceptor.config import parse_acceptor_config
from acceptor.heartbeat import Heartbeat
from acceptor.stall import STALL_KEY, Stall, parse_stalls
from base.history.rows import FIELDS, Row
from base.quota.config import ConfigError


class Rows:
    """A Recorder stand-in keeping rows in memory."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def write(self, row: Row) -> None:
        self.rows.append({k: v for k, v in zip(FIELDS, row, strict=True) if v is not None})


def _run(body: Any, armed: bool = True) -> list[dict[str, Any]]:
    rec = Rows()

    async def main() -> None:
        hb = Heartbeat(rec)  # type: ignore[arg-type]
        hb.start()
        if armed:
            hb.arm()  # as an admission does while it waits
        await asyncio.sleep(0.05)
        await body()
        if armed:
            hb.disarm()
        assert hb._handle is None  # disarmed: no timer left
        await asyncio.sleep(0.05)
        hb.stop()

    asyncio.run(main())
    return rec.rows


def test_a_blocked_loop_is_measured() -> None:
    async def block() -> None:
        time.sleep(0.12)  # holds the loop: no callback runs

    rows = _run(block)
    assert rows[0]["reason"] == "start" and rows[0]["detail"]["period_ms"] == 10
    stalls = [r for r in rows if r["reason"] == "stall"]
    assert stalls, rows
    longest = max(r["delay_ms"] for r in stalls)
    assert longest >= 120 - 10  # the tick due during the block waited for its end
    r = max(stalls, key=lambda r: r["delay_ms"])
    assert r["detail"]["due_mono_ns"] + r["delay_ms"] * 1e6 == pytest.approx(r["mono_ns"], abs=1)


class StepLoop:
    """A loop and a clock in one, time injected: each callback runs exactly when due as the
    clock steps (a loop that is free), or late when the test holds it (a loop that stalls)."""

    def __init__(self) -> None:
        self.now = 1_000_000_000
        self.timers: list[tuple[int, Any]] = []

    def clock(self) -> int:
        return self.now

    def call_later(self, delay_s: float, callback: Any) -> Any:
        entry = (self.now + round(delay_s * 1e9), callback)
        self.timers.append(entry)
        loop = self

        class Handle:
            def cancel(self) -> None:
                if entry in loop.timers:
                    loop.timers.remove(entry)

        return Handle()

    def run_for(self, ns: int, *, held: bool = False) -> None:
        """``ns`` of time: callbacks at their due instant, or (``held``) all at the end."""
        end = self.now + ns
        while True:
            due = [t for t in self.timers if t[0] <= end]
            if not due:
                break
            entry = min(due, key=lambda t: t[0])
            self.timers.remove(entry)
            self.now = end if held else max(self.now, entry[0])
            entry[1]()
        self.now = end


def test_a_sleeping_coroutine_is_not_a_stall() -> None:
    """An admission that sleeps 120 ms leaves the loop free: every tick runs when due and
    no `loop_lag` row is written; the same 120 ms with the loop held is one stall row, as
    late as the hold less one period."""
    for held, expected in ((False, []), (True, [110.0])):
        rec, loop = Rows(), StepLoop()
        hb = Heartbeat(rec, clock=loop.clock)  # type: ignore[arg-type]
        hb.start(loop)  # type: ignore[arg-type]
        hb.arm()
        loop.run_for(120_000_000, held=held)
        hb.disarm()
        stalls = [r["delay_ms"] for r in rec.rows if r["reason"] == "stall"]
        assert stalls == expected, (held, rec.rows)


def test_unarmed_it_runs_no_timer_and_measures_nothing() -> None:
    """No admission waiting: no timer at all (the production path without waits pays
    nothing), so a block then is not measured; the checker credits stalls only inside
    waits."""

    async def block() -> None:
        time.sleep(0.05)

    rows = _run(block, armed=False)
    assert [r["reason"] for r in rows] == ["start"]


def test_a_stall_that_ends_the_wait_is_counted_at_disarm() -> None:
    """The waiting admission may run before the overdue tick: disarm checks it."""
    rec = Rows()

    async def main() -> None:
        hb = Heartbeat(rec)  # type: ignore[arg-type]
        hb.start()
        hb.arm()
        time.sleep(0.06)  # the loop stands still; the tick due at +10 ms cannot run
        hb.disarm()  # before the loop gets to the timer
        hb.stop()

    asyncio.run(main())
    stalls = [r for r in rec.rows if r["reason"] == "stall"]
    assert len(stalls) == 1 and stalls[0]["delay_ms"] >= 60 - 10, rec.rows


def _cfg(stall: str, threads: str = "3") -> Any:
    return parse_acceptor_config(
        {
            "listeners": "CLIENT://127.0.0.1:0",
            "listener.name.client.upstream": "127.0.0.1:9",
            "num.network.threads": threads,
            STALL_KEY: stall,
        }
    )


def test_processor_stalls_parse_and_bad_ones_name_the_key() -> None:
    assert parse_stalls(_cfg("")) == ()
    assert parse_stalls(_cfg("client/0@10+5, CLIENT/2@1.5+0.5")) == (
        Stall("CLIENT", 0, 10.0, 5.0),
        Stall("CLIENT", 2, 1.5, 0.5),
    )
    with pytest.raises(ConfigError, match=r"harness\.test\.processor\.stall"):
        parse_stalls(_cfg("CLIENT/3@1+1"))  # only processors 0..2
    with pytest.raises(ConfigError, match="no processor 0 on listener OTHER"):
        parse_stalls(_cfg("OTHER/0@1+1"))
    with pytest.raises(ConfigError, match="LISTENER/INDEX@AT\\+FOR"):
        parse_stalls(_cfg("CLIENT/0@1"))


def test_a_stall_between_the_accept_and_the_arm_is_measured_from_the_accept() -> None:
    """The wait began at the accept (t0); a stall before the admission armed the heartbeat
    (a 1 ms rate delay stretched to 80 ms) is measured at disarm, from t0."""
    rec = Rows()

    async def main() -> None:
        hb = Heartbeat(rec)  # type: ignore[arg-type]
        hb.start()
        t0 = time.monotonic_ns()
        time.sleep(0.08)  # the loop is held before the wait starts
        hb.arm(t0)
        await asyncio.sleep(0.001)
        hb.disarm()
        hb.stop()

    asyncio.run(main())
    stalls = [r for r in rec.rows if r["reason"] == "stall"]
    assert stalls and max(r["delay_ms"] for r in stalls) >= 80 - 10, rec.rows


def test_a_callback_that_held_the_loop_is_a_stall_credited_from_its_start() -> None:
    """An admission decided at once from its accept (no await) that took 80 ms: the process
    stood still (descheduled, a GC), recorded as the stall a tick due one period after
    the accept would show, so the checker credits the whole [accept − 1 ms, decision];
    15 ms or less (period + threshold) leaves no row, as a tick late by ≤ threshold."""
    rec = Rows()
    hb = Heartbeat(rec)  # type: ignore[arg-type]
    ms = 1_000_000
    hb.held(1_000 * ms, 1_080 * ms)
    hb.held(2_000 * ms, 2_015 * ms)
    assert len(rec.rows) == 1
    row = rec.rows[0]
    assert (row["reason"], row["mono_ns"], row["delay_ms"]) == ("stall", 1_080 * ms, 70.0)
    period, late = row["detail"]["period_ms"], row["delay_ms"]
    assert row["mono_ns"] - (late + period + 1.0) * ms == 999 * ms  # the credited start
