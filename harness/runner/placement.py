"""CPU placement: the acceptor's accepting loop on a CPU of its own, everything else the run
starts on the others.

Why: on a two-core machine the front shares its CPUs with Kafka (start-up, JIT, log work),
the load and the runner's own readers; when they all want a CPU at once the front's loop
waits in the run queue, its accept queue fills and the run's windows read saturated (judged
by no check). Giving the loop a core of its own keeps the harness from starving its own
front. It is a choice about the harness's processes only: neighbours (`--noise`, other
jobs on the machine) are not placed and may use every CPU, as on a shared runner.

How (``sched_setaffinity``, Linux): at the start of the run the runner's own process is
confined to the "other" CPUs, so every child it starts (brokers, the acceptor and its
processor processes, Locust, the analysis) inherits them; once the acceptor answers, its
main thread (the accepting event loop; in the split model, the accepting process's) is
moved to the loop's CPU, and so is a restarted acceptor's. The other threads of the
acceptor (history writer, metrics) stay on the others. The runner's own mask is restored
before the analysis. Recorded in ``run.json`` (``placement``) and the verdict; ``--placement
off`` leaves every process on every CPU, to compare.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

MODES = ("auto", "off")
#: `--placement auto` is read as this variable's value when set: where several runs share
#: the machine at once (the test suite's workers, `harness selftest --jobs N`), each would
#: confine its broker and load to the same other CPU, so they set it to ``off``
PLACEMENT_ENV = "HARNESS_PLACEMENT"


@dataclass
class Placement:
    """The run's CPU sets and the acceptor loops placed so far."""

    mode: str
    loop_cpus: frozenset[int] = frozenset()
    other_cpus: frozenset[int] = frozenset()
    before: frozenset[int] = frozenset()
    placed: set[int] = field(default_factory=set)

    @classmethod
    def plan(cls, mode: str, cpus: Iterable[int] | None = None, *, front: bool = True) -> Placement:
        """The placement for this machine: on (`auto`) with two or more CPUs available to
        this process and a front to place (the acceptor target), the highest-numbered CPU
        for the loop; else off, saying why. Without a front there is nothing to give a CPU
        to: confining the broker and the load to the others would only starve them."""
        if mode not in MODES:
            raise ValueError(f"--placement {mode!r}: expected one of {', '.join(MODES)}")
        have = frozenset(cpus if cpus is not None else os.sched_getaffinity(0))
        if mode == "off":
            return cls("off", before=have)
        if not front:
            return cls("off (no acceptor to place)", before=have)
        if len(have) < 2:
            return cls("off (one CPU)", before=have)
        loop = max(have)
        return cls("on", frozenset({loop}), have - {loop}, have)

    @property
    def on(self) -> bool:
        return self.mode == "on"

    def confine_runner(self) -> None:
        """The runner (and so every child it starts from now on) on the other CPUs."""
        if self.on:
            os.sched_setaffinity(0, self.other_cpus)

    def release_runner(self) -> None:
        """The runner back on every CPU it had (before the analysis)."""
        if self.on:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(0, self.before)

    def place_loops(self, pids: Iterable[int]) -> list[int]:
        """Move each acceptor process's main thread (its event loop) to the loop's CPU, once
        per process; returns the ones moved now (a restarted acceptor is a new pid)."""
        moved: list[int] = []
        if not self.on:
            return moved
        for pid in pids:
            if pid in self.placed:
                continue
            try:
                os.sched_setaffinity(pid, self.loop_cpus)
            except OSError:
                continue  # gone meanwhile: a restart's new pid comes next time
            self.placed.add(pid)
            moved.append(pid)
        return moved

    def record(self) -> dict[str, Any]:
        """What `run.json` and the verdict say of it."""
        if not self.on:
            return {"mode": self.mode, "cpus": {"every process": sorted(self.before)}}
        return {
            "mode": "on",
            "cpus": {
                "acceptor loop": sorted(self.loop_cpus),
                "brokers, load, runner, acceptor's other threads": sorted(self.other_cpus),
            },
            "loops_placed": len(self.placed),
        }
