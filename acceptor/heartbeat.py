"""The acceptor's heartbeat: a measure of its own event loop's stalls.

Why: every admission, processor and connection of the acceptor runs on one event loop. When
that loop stands still (a GC pause, the process descheduled on a loaded machine, a long
callback), a rate-delay sleep ends late and the history shows an admission held longer than
its delay. The checker (`admission_wait_explained`) must tell such a stall from an
over-strict acceptor that sleeps longer than the delay; guessing stalls from gaps in the
rows cannot (an over-sleeping acceptor with nothing else to do leaves the same gap). So the
acceptor measures: a timer due every `PERIOD_MS`; when it fires later than due by more than
`THRESHOLD_MS`, a `loop_lag` row says so (`mono_ns` = when it fired, `delay_ms` = how late,
`detail.due_mono_ns`). A deliberate sleep does not delay the timer: only a loop that could
not run its callbacks does.

What the rows prove (the checker's tolerance, docs/analysis.md): a loop stall covering
[a, b] delays the first tick due after `a` to ≥ b, so the stall lies within
[due − PERIOD_MS, fired] of some tick whose lateness is ≥ (b − a) − PERIOD_MS; stalls whose
tick was late by ≤ THRESHOLD_MS leave no row, so an unmeasured stall is shorter than
THRESHOLD_MS + PERIOD_MS (+ the loop's 1 ms timer resolution under uvloop).

When: the checker credits a stall only where it overlaps an admission's wait (a rate
delay or a slot wait) or the stretch in which a parked, IP-throttled socket's close was due
and had not happened yet (`ip_throttle_within_window`: the loop's turn closes it), so the
timer runs only while some admission waits or some throttled socket is parked (`arm` when
the wait begins or the first socket is parked, `disarm` when it ends or the last parked
socket is closed): its first tick is due one period after the wait began, so the credit
interval of any stall row starts no later than the wait. Cost: nothing on a path without
waits or throttles (no timer at all); while armed, one callback per period (100/s) and a
row only when late. A `loop_lag` row of reason `start` records the period and threshold, so
the checker knows the heartbeat ran (absence of stall rows then means no stall).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from acceptor.recorder import Recorder
from base.history.rows import AcceptorLoopLag, AcceptorLoopLagDetail

PERIOD_MS = 10
THRESHOLD_MS = 5


class Heartbeat:
    def __init__(
        self,
        rec: Recorder,
        period_ms: int = PERIOD_MS,
        threshold_ms: int = THRESHOLD_MS,
        clock: Callable[[], int] = time.monotonic_ns,
    ):
        self.rec = rec
        #: the monotonic clock, ns (a test gives its own, with the loop to `start`)
        self.clock = clock
        self.period_ns = period_ms * 1_000_000
        self.threshold_ns = threshold_ms * 1_000_000
        self._detail_start: AcceptorLoopLagDetail = {
            "period_ms": period_ms,
            "threshold_ms": threshold_ms,
            "armed": "while an admission waits or a throttled socket is parked",
        }
        self._due_ns = 0
        self._armed = 0
        self._handle: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: measured stalls (for tests and metrics): count and the longest lateness, ns
        self.stalls = 0
        self.max_late_ns = 0

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Run on ``loop`` (default: the running one)."""
        self._loop = loop or asyncio.get_running_loop()
        self.rec.write(
            AcceptorLoopLag(self.clock(), reason="start", delay_ms=0.0, detail=self._detail_start)
        )

    def arm(self, since_ns: int | None = None) -> None:
        """An admission starts waiting: tick from now on (nested arms count).

        `since_ns`: when the wait began (the accept, Kafka's t0), if before now: the first
        tick is due one period after it, so a stall between the accept and the arm (a GC,
        the process descheduled) is measured at the first tick or at disarm, as one during
        the wait is. The heartbeat's timer itself is still only armed while a wait runs."""
        self._armed += 1
        if self._armed == 1 and self._loop is not None:
            now = self.clock()
            self._schedule(now if since_ns is None else min(now, since_ns))

    def disarm(self) -> None:
        """An admission stopped waiting; the last one stops the timer, its overdue tick
        counted first (a stall that ends the wait is measured, whichever callback runs
        first after it)."""
        self._armed -= 1
        if self._armed == 0 and self._handle is not None:
            self._check(self.clock())
            self._handle.cancel()
            self._handle = None

    def _schedule(self, from_ns: int) -> None:
        assert self._loop is not None
        self._due_ns = from_ns + self.period_ns
        delay_ns = max(0, self._due_ns - self.clock())
        self._handle = self._loop.call_later(delay_ns / 1e9, self._tick)

    def _check(self, now: int) -> None:
        self._late(self._due_ns, now)

    def held(self, start_ns: int, end_ns: int) -> None:
        """The loop ran one callback from `start_ns` to `end_ns` without yielding (an
        admission decided at once, from its accept to its IP step): it ran nothing else
        meanwhile. Written as the stall a tick due one period after `start_ns` would have
        measured (late by the rest), so the checker credits [start, end] as it credits a
        tick's stall, and only when that tick would have been late by more than the
        threshold. Such a stretch is a stall of the process itself (descheduled, a GC): no
        decision of the acceptor waits without yielding. Unarmed heartbeats miss it."""
        self._late(start_ns + self.period_ns, end_ns)

    def _late(self, due_ns: int, now: int) -> None:
        """A tick due at `due_ns` ran at `now`: a `loop_lag` row when later than the
        threshold."""
        late = now - due_ns
        if late > self.threshold_ns:
            self.stalls += 1
            self.max_late_ns = max(self.max_late_ns, late)
            self.rec.write(
                AcceptorLoopLag(
                    now,
                    reason="stall",
                    delay_ms=late / 1e6,
                    detail={"due_mono_ns": due_ns, "period_ms": self.period_ns / 1e6},
                )
            )

    def _tick(self) -> None:
        now = self.clock()
        self._check(now)
        self._schedule(now)

    def stop(self) -> None:
        self._armed = 0
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
