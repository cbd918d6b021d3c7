"""A run's load phases: each launched as a Locust process (with its workers' master when
it waits for workers), followed through its readiness markers, stopped at its end or its
drain deadline, and bracketed by `phase_start` / `phase_end` rows at the instants its load
really began and ended."""

from __future__ import annotations

import dataclasses
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from base.history.readers import intended_arrivals
from base.history.rows import (
    HarnessPhaseEnd,
    HarnessPhaseEndDetail,
    HarnessPhaseStart,
    HarnessPhaseStartDetail,
    Row,
)
from base.localnet import free_port
from base.supervisor import ManagedProcess
from harness.runner.loadgen import LoadTarget, Workers, locust_argv, max_arrivals, ready_dir
from harness.runner.plan import TargetError
from harness.runner.rundir import RunDir
from harness.runner.scenario import CLOSED_PROFILES, PER_WORKER, Phase, Scenario
from harness.runner.target import Target
from harness.runner.worker_hosts import RunWorkers
from loadprofiles.readiness import phase_state


def phase_client_config(client_configs: Mapping[str, Path], phase: Phase) -> str | None:
    """The client configuration a phase on a secured listener connects with (its SASL
    user's, `Phase.sasl_user`, when it names one)."""
    key = phase.listener if phase.sasl_user is None else f"{phase.listener}@{phase.sasl_user}"
    path = client_configs.get(key)
    if path is None and phase.sasl_user is not None:
        raise TargetError(
            f"phase {phase.name}: no client configuration for SASL user {phase.sasl_user} "
            f"on listener {phase.listener} (an existing cluster's --command-config logs in "
            "as one user)"
        )
    return str(path) if path is not None else None


@dataclass(frozen=True)
class Launch:
    """One phase's Locust, as a launcher is asked to start it."""

    phase: Phase
    target: LoadTarget
    run_dir: Path
    run_id: str
    seed: int
    web_port: int | None
    startup_allowance_s: float
    workers: Workers | None
    log: Path


@dataclass(frozen=True)
class Launched:
    proc: ManagedProcess
    #: its client history files (glob in history/client): its arrivals place its rows
    history_glob: str
    #: its processes run on this machine as the run's load (process_stats role "load")
    local: bool = True


class LoadLauncher(Protocol):
    def __call__(self, launch: Launch) -> Launched: ...


def local_locust(launch: Launch) -> Launched:
    """The phase's Locust as a process of this machine (the run's own Python's)."""
    argv = locust_argv(
        launch.phase,
        locust_bin=str(Path(sys.executable).with_name("locust")),
        profile_dir=_profile_dir(),
        target=launch.target,
        run_dir=launch.run_dir,
        run_id=launch.run_id,
        seed=launch.seed,
        web_port=launch.web_port,
        startup_allowance_s=launch.startup_allowance_s,
        workers=launch.workers,
    )
    proc = ManagedProcess(f"locust-{launch.phase.name}", argv, log_path=launch.log)
    return Launched(proc, f"client-*-{proc.pid}-*.parquet")


@dataclass
class RunningPhase:
    phase: Phase
    proc: ManagedProcess
    #: its client history files (`Launched.history_glob`)
    history_glob: str = "*.parquet"
    local: bool = True
    stop_deadline: float | None = None
    ended: bool = False
    flowing: bool = False
    start_mono_ns: int | None = None
    end_mono_ns: int | None = None
    #: killed by a `load_kill` fault
    killed: bool = False
    #: the workers it waits for (0: a lone Locust process) and, with `--worker-netns`,
    #: the `harness worker` processes the run started for it
    workers: int = 0
    worker_procs: list[ManagedProcess] = field(default_factory=list)


class Phases:
    def __init__(
        self,
        sc: Scenario,
        duration: float,
        rd: RunDir,
        run_id: str,
        seed: int,
        workers: RunWorkers,
        write: Callable[[Row], None],
        say: Callable[[str], None],
        web: bool = False,
        launcher: LoadLauncher = local_locust,
    ) -> None:
        self.sc, self.duration, self.rd, self.run_id, self.seed = sc, duration, rd, run_id, seed
        self.workers, self.write, self.say, self.web = workers, write, say, web
        self.launcher = launcher
        self.target: Target | None = None
        self.running: dict[str, RunningPhase] = {}
        #: Locust's measured start-up lag: later phases launch this much early
        self.lead = 0.0
        self.web_ports: list[int] = []
        #: why the load never started (a worker that never joined): nothing is judged
        self.never_started: str | None = None

    def all_ended(self) -> bool:
        return all(rp.ended for rp in self.running.values())

    def names_running(self) -> list[str]:
        return [rp.phase.name for rp in self.running.values() if not rp.ended]

    def pids(self) -> list[int]:
        """The running phases' Locust processes and their netns workers (process groups)."""
        running = [rp for rp in list(self.running.values()) if not rp.ended and rp.local]
        out = [rp.proc.pid for rp in running]
        return out + [w.pid for rp in running for w in rp.worker_procs if w.poll() is None]

    def worker_procs(self) -> list[ManagedProcess]:
        return [w for rp in self.running.values() for w in rp.worker_procs]

    def launch_due(self, elapsed: float) -> None:
        """Every phase whose start is due (ahead by the Locust start-up lag)."""
        for p in self.sc.load:
            if p.name not in self.running and p.start < self.duration:
                if elapsed >= p.start - self.lead:
                    self.launch(p)

    def launch(self, phase: Phase) -> None:
        target = self.target
        assert target is not None
        if phase.stop > self.duration:  # --duration shortened the run
            phase = dataclasses.replace(phase, stop=self.duration)
        host, port = target.client_addresses[phase.listener]
        web_port = None
        if self.web:
            web_port = free_port()
            self.web_ports.append(web_port)
        index = [p.name for p in self.sc.load].index(phase.name)
        workers = self.workers.for_phase(phase)
        log = self.rd.logs / f"locust-{phase.name}.log"
        launch = Launch(
            phase,
            LoadTarget(
                host,
                port,
                target.metrics_url,
                phase_client_config(target.kafka.client_configs, phase),
                tuple(target.broker_addresses.get(phase.listener, ())),
                target.kafka.spread_all,
            ),
            self.rd.root,
            self.run_id,
            self.seed + index,
            web_port,
            max(self.lead, 3.0) + 2.0,
            workers,
            log,
        )
        launched = self.launcher(launch)
        rp = RunningPhase(phase, launched.proc, launched.history_glob, launched.local)
        self.running[phase.name] = rp
        if workers is not None:
            rp.workers = workers.count
            rp.worker_procs = self.workers.start_netns(phase, workers, self.rd.logs)
            self.say(
                f"phase {phase.name}: its Locust master waits for {workers.count} worker(s) at "
                f"{workers.address} (`harness worker --master {workers.address}`)"
            )
        where = f"web UI http://127.0.0.1:{web_port}/" if web_port else f"log {log}"
        self.say(
            f"phase {phase.name} launched: {phase.profile} {phase.shape} from {phase.source_ips} "
            f"-> {host}:{port} ({where})"
        )

    def await_flowing(self, launched: float) -> None:
        """Until every first phase drives load (bounded by timeouts.locust_start); the lead
        is the start-up lag measured. A first phase waiting for workers that never came
        does not start: the run stops before its clock and says which did not join."""
        deadline = launched + self.sc.timeouts.locust_start
        while time.monotonic() < deadline:
            self.reap(time.monotonic())
            if all(rp.flowing or rp.ended for rp in self.running.values()):
                break
            time.sleep(0.05)
        else:
            slow = [rp.phase.name for rp in self.running.values() if not rp.flowing]
            self.say(
                f"phase(s) {', '.join(slow)} not flowing after "
                f"{self.sc.timeouts.locust_start:g}s; going on"
            )
        for rp in self.running.values():
            if rp.workers and not rp.flowing:
                why = self.workers.not_joined(rp.phase, rp.workers)
                self.never_started = f"phase {rp.phase.name}: {why}"
                raise TargetError(self.never_started)
        self.lead = min(time.monotonic() - launched, 10.0)

    def stop(self, name: str) -> None:
        """The timeline's end of a phase: it has the drain to finish."""
        rp = self.running.get(name)
        if rp is not None and rp.stop_deadline is None:
            rp.stop_deadline = time.monotonic() + self.sc.timeouts.drain

    def stop_all(self) -> None:
        for rp in self.running.values():
            if not rp.ended:
                self.ended(rp, rp.proc.stop(timeout=10), stopped=True)

    def detail(self, rp: RunningPhase, **extra: Any) -> dict[str, Any]:
        p = rp.phase
        sources = p.source_ips
        if sources == PER_WORKER:  # the addresses the checks expect: the workers' own
            sources = ",".join(self.workers.addresses(rp.phase)) or sources
        return {
            "name": p.name,
            "profile": p.profile,
            "arrival": p.arrival,
            "intended_rate": p.intended_rate,
            "source_ips": sources,
            "listener": p.listener,
            "via": p.via,
            "pid": rp.proc.pid,
            **extra,
        }

    def reap(self, now: float) -> None:
        """phase_start when the Locust log says load flows, phase_end when its run time is up
        or it exits: the rows bracket the load itself, not Locust's start-up and stop."""
        for rp in self.running.values():
            if rp.ended:
                continue
            # explicit readiness (loadprofiles.readiness markers), never Locust's log text
            n_ready, n_done = phase_state(ready_dir(self.rd.root, rp.phase))
            if not rp.flowing and n_ready:
                rp.flowing = True
                rp.start_mono_ns = time.monotonic_ns()
                self.say(f"phase {rp.phase.name} flowing")
            if rp.flowing and rp.end_mono_ns is None and n_done >= max(n_ready, rp.workers) > 0:
                rp.end_mono_ns = time.monotonic_ns()
                if rp.phase.profile not in CLOSED_PROFILES:
                    # schedule done: let Locust write its reports and exit now
                    rp.proc.signal_group(signal.SIGTERM)
                    rp.stop_deadline = now + self.sc.timeouts.drain
            code = rp.proc.poll()
            if code is None and rp.stop_deadline is not None and now > rp.stop_deadline:
                self.say(
                    f"phase {rp.phase.name} overran its end by "
                    f"{self.sc.timeouts.drain:g}s: stopping it"
                )
                code = rp.proc.stop(timeout=10)
            if code is not None:
                self.ended(rp, code)

    def ended(self, rp: RunningPhase, code: int | None, **extra: Any) -> None:
        rp.ended = True
        if rp.killed:  # its history ends at its last flush: phase_end is placed there
            extra["killed"] = True
        rp.proc.stop(timeout=1)
        for worker in rp.worker_procs:  # each leaves when its master quits
            worker.stop(timeout=10)
        if rp.workers:
            extra.update(self.workers.judge(rp.phase, rp.workers, self.rd.history / "client"))
        self.record_rows(rp, code, **extra)
        # Locust exits 1 when requests failed: expected when limits refuse connections
        note = {0: "", 1: " (Locust saw failed requests)"}.get(
            code if code is not None else -1, f" (exit {code}; see {rp.proc.log_path})"
        )
        self.say(f"phase {rp.phase.name} ended{note}")

    def record_rows(self, rp: RunningPhase, code: int | None, **extra: Any) -> None:
        """phase_start/phase_end at the instants the load really began and ended.

        For arrival profiles these come from the phase's own client history (the Locust
        process writes ``client-<host>-<pid>-*.parquet``): the first intended arrival,
        and the intended end (first + duration) when the whole schedule was offered.
        Locust's start-up, the profile's warm-up and the drain of in-flight connections
        are then outside the phase, so offered-vs-intended rates are measured fairly.
        Steady phases use the log markers (spawned, run time up) or the exit."""
        now = time.monotonic_ns()
        start, end = rp.start_mono_ns, rp.end_mono_ns
        source = "log"
        if rp.phase.profile not in CLOSED_PROFILES:
            intended = intended_arrivals_in(self.rd.history / "client", rp.history_glob)
            if intended:
                source = "client_history"
                start = intended[0]
                full = len(intended) >= max_arrivals(rp.phase)
                end = start + int(rp.phase.duration * 1e9) if full else intended[-1] + 1
        start = start if start is not None else now
        end = end if end is not None and end >= start else max(now, start)
        detail: HarnessPhaseStartDetail = self.detail(rp, timing=source)
        if not rp.flowing:
            detail["never_flowed"] = True
        self.write(HarnessPhaseStart(start, detail=detail, ts_ns=wall_ns(start)))
        ended: HarnessPhaseEndDetail = {**detail, "exit_code": code, **extra}
        self.write(HarnessPhaseEnd(end, detail=ended, ts_ns=wall_ns(end)))


def wall_ns(mono_ns: int) -> int:
    """A monotonic instant as wall-clock nanoseconds, whole microseconds (the `ts`
    column's precision)."""
    return (time.time_ns() - time.monotonic_ns() + mono_ns) // 1000 * 1000


def intended_arrivals_in(client_dir: Path, pattern: str) -> list[int]:
    """Sorted intended_mono_ns of the arrivals (invoked or not offered) in the client
    history files matching ``pattern`` (one Locust process's: `local_locust`)."""
    import pyarrow.parquet as pq

    out: list[int] = []
    for f in sorted(client_dir.glob(pattern)):
        out.extend(intended_arrivals(pq.read_table(f, columns=["event", "detail"])))
    return sorted(set(out))  # connect_fail after an invoke repeats its intended time


def _profile_dir() -> Path:
    import loadprofiles

    return Path(loadprofiles.__file__).resolve().parent
