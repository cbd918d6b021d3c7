"""The run's clock and loop: the first phases launched, t=0 when their load flows, then the
scenario's timeline followed (phases launched ahead by Locust's start-up lag and stopped,
limits changed, faults started and ended) until the load has ended or overran; and the
runner's own testimony of the limits it intended (`Testimony`, the `config` rows the
checker judges by)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from base.history.rows import HarnessConfig, HarnessConfigDetail, Row
from harness.runner.fault_schedule import FaultSchedule
from harness.runner.phases import Phases
from harness.runner.plan import TargetError
from harness.runner.scenario import Action, Scenario
from harness.runner.schedule import Cursor, TimelineEvent, apply_change, build_timeline
from harness.runner.target import Target


class Testimony:
    """The limits the runner intended, written once the target acknowledged them. The
    checker judges by these rows (`detail.origin = "runner"`), never by the enforcer's;
    `applied_from_mono_ns` is when the runner started applying a change, so the enforcer's
    own record of it must fall in [applied_from, this row]."""

    def __init__(self, write: Callable[[Row], None]) -> None:
        self.write = write
        self.limits: dict[str, Any] = {}
        #: per broker of a cluster, the dynamic keys set on its own layer (BROKER "<id>")
        self.node_layers: dict[int, dict[str, Any]] = {}

    def change(self, action: Action) -> None:
        if action.node is None:
            self.limits = apply_change(self.limits, action)
        else:  # one broker's own layer: per key, its value wins over the cluster's
            layer = {**self.node_layers.get(action.node, {}), **action.params}
            self.node_layers[action.node] = {k: v for k, v in layer.items() if v is not None}

    def testify(self, why: str, applied_from_ns: int | None = None) -> None:
        detail: HarnessConfigDetail = {**self.limits, "origin": "runner", "cause": why}
        if applied_from_ns is not None:
            detail["applied_from_mono_ns"] = applied_from_ns
        self.write(HarnessConfig(time.monotonic_ns(), reason=why, detail=detail))
        # a broker with a per-broker change of its own: its limits, in a row of its own
        # (analysis.load.for_node), for this and every later change
        for node, layer in sorted(self.node_layers.items()):
            own = apply_change(self.limits, Action(0, "broker_config", layer))
            mine: HarnessConfigDetail = {**detail, **own, "node.id": node}
            self.write(HarnessConfig(time.monotonic_ns(), reason=why, detail=mine))


class Timeline:
    def __init__(
        self,
        sc: Scenario,
        duration: float,
        target: Target,
        phases: Phases,
        faults: FaultSchedule,
        testimony: Testimony,
        say: Callable[[str], None],
        every_turn: Callable[[], None],
        progress_every: float = 5.0,
    ) -> None:
        self.sc, self.duration, self.target = sc, duration, target
        self.phases, self.faults, self.testimony = phases, faults, testimony
        self.say, self.every_turn, self.progress_every = say, every_turn, progress_every
        self.t0: float | None = None

    def elapsed(self) -> float:
        return 0.0 if self.t0 is None else time.monotonic() - self.t0

    def drive(self) -> None:
        """Launch the first phases, start the clock when their load flows, then follow
        the timeline. Later phases launch early by the measured Locust start-up lag."""
        cursor = Cursor(build_timeline(self.sc, self.duration))
        first = [p for p in self.sc.load if p.start == 0]
        self.say(
            f"load: {len(self.sc.load)} phase(s), {len(self.sc.schedule)} scheduled action(s); "
            f"launching {', '.join(p.name for p in first) or 'nothing yet'}"
        )
        launched = time.monotonic()
        for p in first:
            self.phases.launch(p)
        self.phases.await_flowing(launched)
        t0 = self.t0 = time.monotonic()
        lead = self.phases.lead
        self.say(f"load flowing after {lead:.1f}s of Locust start-up: the clock starts (t=0)")
        last_progress = t0
        while True:
            now = time.monotonic()
            elapsed = now - t0
            self.phases.launch_due(elapsed)
            for ev in cursor.due(elapsed):
                self.execute(ev, elapsed)
            self.faults.end_due(elapsed)
            self.faults.start_deferred(elapsed)
            self.phases.reap(now)
            self.every_turn()  # e.g. a restarted acceptor's loop placed too
            self.faults.check_restart()
            dead = self.target.alive()
            if dead and not self.faults.process_down():
                raise TargetError(dead)
            if now - last_progress >= self.progress_every:
                last_progress = now
                self.say(self.status(elapsed, cursor))
            if (
                cursor.done()
                and not self.faults.deferred_ends
                and elapsed >= self.duration
                and self.phases.all_ended()
            ):
                break
            if elapsed > self.duration + self.sc.timeouts.drain + 30:
                self.say("load did not finish in time; stopping it")
                break
            time.sleep(0.1)
        self.faults.never_started()
        self.faults.wait_restart()

    def status(self, elapsed: float, cursor: Cursor) -> str:
        running = self.phases.names_running()
        nxt = cursor.next_at
        parts = [f"t={elapsed:5.1f}/{self.duration:g}s", f"load: {', '.join(running) or 'none'}"]
        if self.faults.active:
            parts.append("faults: " + ", ".join(self.faults.active))
        if nxt is not None:
            parts.append(f"next event at {nxt:g}s")
        return "; ".join(parts)

    def execute(self, ev: TimelineEvent, elapsed: float) -> None:
        if ev.kind == "phase_start":
            return  # launched ahead of time by the loop (Locust start-up lag)
        if ev.kind == "phase_stop":
            assert ev.phase is not None
            self.phases.stop(ev.phase.name)
        elif ev.kind == "change":
            assert ev.action is not None
            self.say(f"t={elapsed:.1f}s change: {ev.action.kind} {dict(ev.action.params)}")
            applied_from = time.monotonic_ns()
            self.target.apply(ev.action)
            self.testimony.change(ev.action)
            self.testimony.testify(f"schedule@{ev.action.at:g}", applied_from)
        elif ev.kind == "fault_start":
            assert ev.action is not None
            self.faults.start(ev.action.params, elapsed)
        elif ev.kind == "fault_end":
            assert ev.action is not None
            self.faults.end(ev.action.params, elapsed)
