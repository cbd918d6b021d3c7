"""The run's faults over time: each started and ended as its kind says
(`fault_kinds.KINDS`), `fault_start` / `fault_end` rows, one process fault at a time (a
kill due while another node is down or restarting waits, then lasts its own `for`), an
end that is not the running fault's own ignored, and the restarts run off the run loop."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from base.history.rows import (
    HarnessFaultEnd,
    HarnessFaultEndDetail,
    HarnessFaultStart,
    HarnessFaultStartDetail,
    Row,
)
from harness.runner.fault_kinds import KINDS, Hit
from harness.runner.plan import TargetError
from harness.runner.target import Target


class Restart:
    """A killed process brought back on a thread of its own (a KRaft broker may take many
    seconds), its fault ended once it answers."""

    def __init__(
        self, kind: str, detail: dict[str, Any], restart: Callable[[], None], name: str
    ) -> None:
        self.kind, self.detail = kind, detail
        self.error: BaseException | None = None
        requested = time.monotonic()

        def run() -> None:
            try:
                restart()
            except BaseException as exc:
                self.error = exc
            detail["restart_s"] = round(time.monotonic() - requested, 3)

        self.thread = threading.Thread(target=run, name=name, daemon=True)
        self.thread.start()

    def done(self) -> bool:
        return not self.thread.is_alive()


class FaultSchedule:
    def __init__(
        self,
        write: Callable[[Row], None],
        say: Callable[[str], None],
        elapsed: Callable[[], float],
        duration: float,
        restart_timeout: float,
    ) -> None:
        self.write, self.say, self.elapsed = write, say, elapsed
        self.duration, self.restart_timeout = duration, restart_timeout
        self.target: Target | None = None
        #: the run's load phases by name (`load_kill` reads them)
        self.phases: Mapping[str, Any] = {}
        #: the kinds in force, from when (elapsed seconds)
        self.active: dict[str, float] = {}
        #: the params of the fault of each kind in force (its end must be its own)
        self.params: dict[str, Any] = {}
        #: what a fault's start did (the pid it killed, the bytes it wrote), for its fault_end
        self.facts: dict[str, dict[str, Any]] = {}
        #: process faults due while another was in force or restarting (one at a time)
        self.deferred_starts: list[Any] = []
        #: ends due later than scheduled (their start was deferred)
        self.deferred_ends: list[tuple[float, Any]] = []
        self.restart: Restart | None = None

    def process_down(self) -> bool:
        """A process is down on purpose (a broker paused or killed, the acceptor killed)."""
        return any(KINDS[k].process for k in self.active)

    def _hit(self, params: Mapping[str, Any]) -> Hit:
        assert self.target is not None
        kind, node = str(params["kind"]), params.get("broker")
        fronts = self.target.fronts
        with_front = kind == "broker_kill" and fronts is not None and fronts.fronted(node)
        return Hit(self.target, params, self.target.kafka.node(node), with_front, self.phases)

    def start(self, params: Any, elapsed: float, delayed: bool = False) -> None:
        assert self.target is not None
        kind = str(params["kind"])
        why_not = self.target.supports_fault(kind)
        if why_not:
            self.say(f"t={elapsed:.1f}s fault {kind} skipped: {why_not}")
            return
        busy = self.process_down() or self.restart is not None
        if KINDS[kind].process and not delayed and busy:
            # one process fault at a time: a broker still down or restarting cannot be
            # paused or killed again yet, and a second node down would be no rolling restart
            self.say(f"t={elapsed:.1f}s {kind} waits until the earlier fault has ended")
            self.deferred_starts.append(params)
            return
        hit = self._hit(params)
        detail: HarnessFaultStartDetail = dict(params)
        if delayed:
            detail["delayed_by_restart"] = True
        self.say(f"t={elapsed:.1f}s fault {kind} starts ({params['for']:g}s)")
        if hit.with_front:
            detail["front_stopped"] = True
        self.write(HarnessFaultStart(time.monotonic_ns(), reason=kind, detail=detail))
        self.active[kind] = self.elapsed()
        self.params[kind] = params
        self.facts[kind] = KINDS[kind].start(hit)

    def end(self, params: Any, elapsed: float) -> None:
        assert self.target is not None
        kind = str(params["kind"])
        if self.target.supports_fault(kind):
            return
        if kind not in self.active or id(self.params.get(kind)) != id(params):
            return  # never started (deferred), or another fault of its kind is in force
        detail = {**params, **self.facts.get(kind, {})}  # what its start did, for fault_end
        due = self.active[kind] + float(params["for"])
        if self.elapsed() < due - 0.05:
            # the start was delayed (a restart in progress): the fault still lasts `for`
            self.deferred_ends.append((due, params))
            return
        hit = self._hit(params)
        restart = KINDS[kind].end(hit, detail)
        if restart is None:
            self.ended(kind, detail)
            return
        what = "acceptor" if kind == "acceptor_kill" else "broker"
        what += " and its acceptor" if hit.with_front else ""
        self.say(f"t={elapsed:.1f}s restarting the {what} (same ports, same state)")
        self.restart = Restart(kind, detail, restart, "broker-restart")

    def ended(self, kind: str, detail: HarnessFaultEndDetail) -> None:
        self.write(HarnessFaultEnd(time.monotonic_ns(), reason=kind, detail=detail))
        self.active.pop(kind, None)
        self.params.pop(kind, None)
        self.say(f"fault {kind} ended")

    def start_deferred(self, elapsed: float) -> None:
        """The first deferred process fault, once none is in force or restarting (a rolling
        restart keeps one node down at a time, however long a restart takes); it lasts its
        `for` from now."""
        if not self.deferred_starts or self.process_down() or self.restart is not None:
            return
        params = self.deferred_starts.pop(0)
        if elapsed >= self.duration:
            self.say(f"fault {params['kind']} never started: the load has ended")
            return
        self.start(params, elapsed, delayed=True)
        self.deferred_ends.append((elapsed + float(params["for"]), params))

    def end_due(self, elapsed: float) -> None:
        """The deferred ends whose time has come."""
        for item in [d for d in self.deferred_ends if d[0] <= elapsed]:
            self.deferred_ends.remove(item)
            self.end(item[1], elapsed)

    def check_restart(self) -> None:
        """The restart's fault ends once it is back; one that did not come back stops the
        run (TargetError)."""
        r = self.restart
        if r is None or not r.done():
            return
        self.restart = None
        if r.error is not None:
            raise TargetError(
                f"the {r.kind.removesuffix('_kill')} did not come back after the kill: {r.error}"
            )
        self.ended(r.kind, r.detail)

    def wait_restart(self) -> None:
        if self.restart is not None:
            self.restart.thread.join(self.restart_timeout)
            self.check_restart()

    def never_started(self) -> None:
        """The load ended: a fault still deferred never starts, and says so."""
        for params in self.deferred_starts:
            self.say(
                f"fault {params['kind']} {dict(params)} never started: the load ended while an "
                "earlier one was still in force or restarting"
            )
        self.deferred_starts.clear()

    def cut_short(self) -> None:
        """The run stops: a paused broker resumed (a stopped JVM cannot shut down cleanly),
        a restart waited for, every fault in force ended, marked cut short."""
        if self.restart is not None:
            self.restart.thread.join(self.restart_timeout)
        broker = self.target.kafka.broker if self.target is not None else None
        if "broker_pause" in self.active and broker is not None:
            try:
                broker.resume()
            except Exception:
                pass
        for kind in list(self.active):
            self.ended(kind, {"kind": kind, "cut_short": True})
