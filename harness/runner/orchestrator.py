"""One scenario run, start to verdict: the only place that owns processes and the clock.

Everything is bounded: the target has start timeouts, each Locust phase has ``-t``
and a drain deadline, the analysis a timeout; whatever happens (a child dies, an
admin call fails, Ctrl-C, SIGTERM) the ``finally`` stops load, acceptor and broker in
that order, records ``run_end`` and rewrites run.json, so the run stays analysable.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from harness.history import HistoryWriter
from harness.history.readers import intended_arrivals
from harness.localnet import free_port
from harness.runner.kafka_side import metadata_mode
from harness.runner.loadgen import LoadTarget, Workers, locust_argv, max_arrivals, ready_dir
from harness.runner.plan import LOOPBACK_HOST, RunPlan, TargetError
from harness.runner.rundir import RunDir, base_run_json, new_run_id, utc_now_iso
from harness.runner.scenario import (
    CLOSED_PROFILES,
    ENGINE_PROFILES,
    PER_WORKER,
    Action,
    Phase,
    Scenario,
)
from harness.runner.schedule import Cursor, TimelineEvent, apply_change, build_timeline
from harness.runner.target import Target
from harness.runner.targets import make_target
from harness.supervisor import ManagedProcess
from loadprofiles.readiness import phase_state

EXIT_CODES = {"pass": 0, "fail": 1, "unknown": 2}


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


def _protocol(client_config: Path) -> str:
    from harness.security import clientprops

    return clientprops.read(client_config).get("security.protocol", "PLAINTEXT").upper()


def listener_security(client_configs: Mapping[str, Path]) -> dict[str, dict[str, Any]]:
    """run.json's ``listener_security``: each secured listener's protocol and where its
    client configuration is (and each SASL user's); never a file's contents (secrets)."""
    security: dict[str, dict[str, Any]] = {
        n: {"protocol": _protocol(path), "client_config": str(path)}
        for n, path in client_configs.items()
        if "@" not in n
    }
    for key, path in client_configs.items():
        name, at, user = key.partition("@")
        if at and name in security:  # a SASL user's own configuration
            security[name].setdefault("users", {})[user] = str(path)
    return security


#: faults that kill a process the runner then restarts (the fault ends once it answers)
KILLS = ("broker_kill", "acceptor_kill", "broker_disk_full")


@dataclass
class RunOptions:
    target: str
    out: Path = Path("runs")
    launcher: str = "auto"
    bootstrap_server: str | None = None
    seed: int | None = None
    duration: float | None = None
    set_acceptor: dict[str, str] = field(default_factory=dict)
    web: bool = False
    analyze: bool = True
    spark_master: str | None = None
    progress_every: float = 5.0
    #: Kafka's metrics endpoint (default: the target's), or one per broker id of a cluster
    broker_metrics_url: str | dict[int, str] | None = None
    #: an existing cluster's client properties (`--command-config`): its secured listener
    command_config: Path | None = None
    #: the Kafka release of the broker the run starts (`--kafka-version`; None: the default)
    kafka_version: str | None = None
    #: the started broker in ZooKeeper mode (`--zookeeper`; None: the release's default)
    zookeeper: bool | None = None
    #: neighbours made on purpose (`--noise`, harness.runner.noise.NoiseSpec)
    noise: Any = None
    #: CPU placement (`--placement auto|off`, harness.runner.placement)
    placement: str = "auto"
    #: Locust workers each engine phase waits for (`--workers`; None: the scenario's)
    workers: int | None = None
    #: make the worker hosts as network namespaces (`--worker-netns`, runner.netns)
    worker_netns: bool = False
    #: where the phases' masters listen for workers on other machines (`--master-bind`)
    master_bind: tuple[str, int] = ("127.0.0.1", 5557)
    #: the workers write their histories into the run folder on shared storage
    #: (`--shared-run-dir`) instead of sending them home over the channel
    shared_run_dir: bool = False


@dataclass
class RunResult:
    run_dir: Path
    verdict: str  # pass | fail | unknown
    checks: list[dict[str, Any]]
    interrupted: bool
    error: str | None
    report: Path | None
    wall_s: float
    started: bool = True  # the target came up (a run that broke later did run)


class _Progress:
    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def __call__(self, msg: str) -> None:
        print(f"[runner +{time.monotonic() - self.t0:6.1f}s] {msg}", flush=True)


@dataclass
class _RunningPhase:
    phase: Phase
    proc: ManagedProcess
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


class Orchestrator:
    def __init__(
        self, scenario: Scenario, opts: RunOptions, progress: Callable[[str], None] | None = None
    ) -> None:
        self.sc = scenario
        self.opts = opts
        self.say = progress or _Progress()
        self.duration = (
            min(opts.duration, scenario.duration) if opts.duration else scenario.duration
        )
        self.seed = scenario.seed if opts.seed is None else opts.seed
        self.run_id = new_run_id(scenario.name, opts.target)
        self.rd = RunDir(opts.out / self.run_id)
        self.history: HistoryWriter | None = None
        self.target: Target | None = None
        self.phases: dict[str, _RunningPhase] = {}
        self.limits: dict[str, Any] = {}
        #: per broker of a cluster, the dynamic keys set on its own layer (BROKER "<id>")
        self.node_layers: dict[int, dict[str, Any]] = {}
        self.interrupted = False
        self.error: str | None = None
        self.run_json: dict[str, Any] = {}
        self.active_faults: dict[str, float] = {}
        self._restart_thread: threading.Thread | None = None
        self._restart_error: list[BaseException] = []
        self._restart_kind = "broker_kill"
        #: what a fault's start did (the pid it killed, the bytes it wrote), for its fault_end
        self._fault_facts: dict[str, dict[str, Any]] = {}
        self._web_ports: list[int] = []
        #: `--noise`: the neighbours made on purpose (harness.runner.noise.Noise), or None
        self.noise: Any = None
        #: `--placement`: the acceptor loop's CPU and the others' (runner.placement)
        self.placement: Any = None
        self.lead = 0.0
        self._t0: float | None = None
        self._deferred_ends: list[tuple[float, Any]] = []
        #: process faults due while another was in force or restarting (one at a time)
        self._deferred_starts: list[Any] = []
        #: the params of the fault of each kind in force (its end must be its own)
        self._fault_params: dict[str, Any] = {}
        #: Locust workers per engine phase, and their hosts when the run made them
        self.n_workers = scenario.workers if opts.workers is None else opts.workers
        self.worker_hosts: Any = None
        #: why the load never started (a worker that never joined): nothing is judged
        self.load_never_started: str | None = None
        #: where the target's client listeners listen (the worker hosts' bridge, if any)
        self.listen_host = LOOPBACK_HOST

    # -- recording ------------------------------------------------------------------------------
    def record(self, event: str, **fields: Any) -> None:
        if self.history is not None:
            self.history.record(event, **fields)

    def record_config(self, why: str, applied_from_ns: int | None = None) -> None:
        """The runner's own testimony: the limits it intended, once the target acknowledged
        them. The checker judges by these rows (`detail.origin = "runner"`), never by the
        enforcer's; `applied_from_mono_ns` is when the runner started applying the change,
        so the enforcer's own record of it must fall in [applied_from, this row]."""
        assert self.target is not None
        detail: dict[str, Any] = {**self.limits, "origin": "runner", "cause": why}
        if applied_from_ns is not None:
            detail["applied_from_mono_ns"] = applied_from_ns
        self.record("config", reason=why, detail=detail)
        # a broker with a per-broker change of its own: its limits, in a row of its own
        # (analysis.load.for_node), for this and every later change
        for node, layer in sorted(self.node_layers.items()):
            own = apply_change(self.limits, Action(0, "broker_config", layer))
            self.record("config", reason=why, detail={**detail, **own, "node.id": node})

    # -- main ------------------------------------------------------------------------------------
    def run(self) -> RunResult:
        """The whole run; SIGTERM acts like Ctrl-C throughout (analysis included)."""
        old_term = signal.signal(signal.SIGTERM, _sigterm_to_interrupt)
        try:
            return self._run()
        finally:
            signal.signal(signal.SIGTERM, old_term)

    def _run(self) -> RunResult:
        t_start = time.monotonic()
        self.rd.create()
        self.say(
            f"run {self.run_id}: scenario {self.sc.name!r} against the {self.opts.target}; "
            f"{self.duration:g}s of load; output in {self.rd.root}"
        )
        self.history = HistoryWriter(self.rd.history, "harness", self.run_id, name="runner")
        self.run_json = base_run_json(
            run_id=self.run_id,
            scenario=self.sc,
            target=self.opts.target,
            seed=self.seed,
            duration=self.duration,
            limits={},
            started_at=utc_now_iso(),
        )
        self.noise = self._start_noise()
        from harness.runner.placement import PLACEMENT_ENV, Placement  # the loop's own CPU

        mode = self.opts.placement
        if mode == "auto":  # a machine running several runs at once says so (the test suite)
            mode = os.environ.get(PLACEMENT_ENV, "auto")
        self.placement = Placement.plan(mode, front=self.opts.target == "acceptor")
        self.placement.confine_runner()
        self.run_json["placement"] = self.placement.record()
        self.rd.write_run_json(self.run_json)
        started = False  # a run whose broker or acceptor never started is not analysed
        try:
            self._make_worker_hosts()
            self._start_target()
            started = True
            self._drive()
        except KeyboardInterrupt:
            self.interrupted = True
            self.say("interrupted: stopping everything; the run stays analysable")
        except Exception as exc:  # any failure: stop cleanly, keep what was recorded
            self.error = f"{type(exc).__name__}: {exc}"
            self.say(f"run broke: {self.error}")
            if not isinstance(exc, TargetError):
                (self.rd.logs / "runner-error.txt").write_text(traceback.format_exc())
                self.say(f"traceback in {self.rd.logs / 'runner-error.txt'}")
        finally:
            self._shutdown()
        self.placement.release_runner()  # the analysis may use every CPU
        verdict, report = "unknown", None
        checks: list[dict[str, Any]] = []
        run_s = time.monotonic() - t_start
        t_analysis = time.monotonic()
        if self.opts.analyze and not started:
            why = self.error or "interrupted"
            self.say(f"not analysed: the target never started, so nothing ran ({why})")
        elif self.opts.analyze and self.load_never_started:
            self.say(f"not analysed: the load never started ({self.load_never_started})")
        elif self.opts.analyze and self._has_history():
            try:
                verdict, checks, report = self._analyze()
            except KeyboardInterrupt:
                self.say(
                    "analysis interrupted; run `harness analyze " + str(self.rd.root) + "` later"
                )
        elif not self.opts.analyze:
            self.say(f"analysis skipped (--no-analyze); run `harness analyze {self.rd.root}`")
        if self.error and verdict == "pass":
            verdict = "unknown"  # a broken run cannot certify anything
        if self.opts.analyze:
            # for the catalog table: how long the run and its analysis took, and the outcome
            self.run_json["result"] = {
                "verdict": verdict,
                "run_s": round(run_s, 1),
                "analysis_s": round(time.monotonic() - t_analysis, 1),
                "wall_s": round(time.monotonic() - t_start, 1),
            }
            self.rd.write_run_json(self.run_json)
        return RunResult(
            self.rd.root,
            verdict,
            checks,
            self.interrupted,
            self.error,
            report,
            time.monotonic() - t_start,
            started,
        )

    def _start_noise(self) -> Any:
        """`--noise`: the neighbours start before the target and the clock (recorded in
        run.json); they stop with the run, before the analysis."""
        from harness.runner.noise import NOISE_BESIDE_ENV, Noise

        spec = self.opts.noise
        beside = os.environ.get(NOISE_BESIDE_ENV)
        if beside and not spec:  # a selftest's one group, beside this run too
            self.run_json["noise"] = {"spec": beside, "by": "harness selftest"}
            self.say(f"noise: {beside} beside this run (the selftest's)")
            return None
        if not spec:
            return None

        t = self.sc.timeouts
        planned = t.broker_start + t.acceptor_start + t.locust_start + self.duration + t.drain
        noise = Noise(spec, self.rd.root / ".noise", planned + 120.0, self.rd.logs / "noise.log")
        noise.start()
        self.run_json["noise"] = noise.record()
        self.say(f"noise: {spec} in a process group of its own (log {noise.log_path})")
        return noise

    def plan(self) -> RunPlan:
        """The one value the target is made from and started with."""
        t, opts = self.sc.timeouts, self.opts
        return RunPlan(
            self.sc,
            self.rd.root,
            self.say,
            run_id=self.run_id,
            launcher=opts.launcher,
            bootstrap_server=opts.bootstrap_server,
            command_config=opts.command_config,
            set_acceptor=dict(opts.set_acceptor) if opts.target == "acceptor" else {},
            kafka_version=opts.kafka_version,
            zookeeper=opts.zookeeper,
            listen_host=self.listen_host,
            latency_proxy=any(
                a.params["kind"] == "upstream_latency" and a.at < self.duration
                for a in self.sc.faults
            ),
            broker_timeout=t.broker_start,
            acceptor_timeout=t.acceptor_start,
        )

    def _start_target(self) -> None:
        started_ns = time.monotonic_ns()
        if self.opts.set_acceptor and self.opts.target != "acceptor":
            self.say("note: --set-acceptor is ignored for --target broker")
        self.target = make_target(self.opts.target, self.plan())
        self.target.start()
        self._place_loops()
        self.limits = dict(self.target.limits)
        broker = self.target.kafka.broker
        self.run_json["versions"]["kafka"] = getattr(broker, "version", None)
        # where the broker keeps its metadata (a started broker; None for an existing cluster)
        mode = metadata_mode(broker)
        if mode is not None:
            self.run_json["versions"]["metadata"] = mode
        # the release whose semantics the enforcer is judged by (docs/kafka-versions.md)
        self.run_json["versions"]["kafka_semantics"] = self.limits.get("kafka.version")
        self.run_json["limits"] = self.limits
        self.run_json["listeners"] = {
            n: f"{h}:{p}" for n, (h, p) in self.target.client_addresses.items()
        }
        if self.target.broker_addresses:  # a cluster: every broker's address per listener
            brokers: dict[str, dict[str, str]] = {}
            for listener, nodes in self.target.broker_addresses.items():
                for node, host, port in nodes:
                    brokers.setdefault(str(node), {})[listener] = f"{host}:{port}"
            self.run_json["brokers"] = brokers
        self.run_json["listener_security"] = listener_security(self.target.kafka.client_configs)
        from harness.runner.kafka_metrics import cluster_listeners  # an existing cluster's

        found = cluster_listeners(self.target, self.say)
        if found is not None:
            self.run_json["cluster_listeners"] = found
        if self.opts.set_acceptor:
            self.run_json["acceptor_overrides"] = dict(self.opts.set_acceptor)
        self.rd.write_run_json(self.run_json)
        self._warm_up()
        self.record_config("start", started_ns)
        from harness.runner.kafka_metrics import start_scraper  # Kafka's metrics, every second

        self.scraper = start_scraper(self.target, self.history, self.opts, self.say)
        from harness.runner.kernel_net import start_sampler  # the kernel's listen drops

        self.kernel_net = start_sampler(self.history, self.say)
        from harness.runner.proc_stats import ProcStatsSampler  # descriptors, memory, CPU

        self.proc_stats = (
            ProcStatsSampler(
                self.history.record, self._process_groups, self.rd.root / "history", own=True
            ).start()
            if self.history is not None
            else None
        )

    # -- the schedule loop ---------------------------------------------------------------------
    def _drive(self) -> None:
        """Launch the first phases, start the clock when their load flows, then follow
        the timeline. Later phases launch early by the measured Locust start-up lag."""
        assert self.target is not None
        cursor = Cursor(build_timeline(self.sc, self.duration))
        self.record(
            "run_start",
            detail={
                "scenario": self.sc.name,
                "target": self.opts.target,
                "duration_s": self.duration,
                "seed": self.seed,
            },
        )
        first = [p for p in self.sc.load if p.start == 0]
        self.say(
            f"load: {len(self.sc.load)} phase(s), {len(self.sc.schedule)} scheduled action(s); "
            f"launching {', '.join(p.name for p in first) or 'nothing yet'}"
        )
        launched = time.monotonic()
        for p in first:
            self._start_phase(p)
        self.lead = self._await_flowing(launched)
        t0 = self._t0 = time.monotonic()
        self.say(f"load flowing after {self.lead:.1f}s of Locust start-up: the clock starts (t=0)")
        last_progress = t0
        while True:
            now = time.monotonic()
            elapsed = now - t0
            for p in self.sc.load:
                if p.name not in self.phases and p.start < self.duration:
                    if elapsed >= p.start - self.lead:
                        self._start_phase(p)
            for ev in cursor.due(elapsed):
                self._execute(ev, elapsed)
            for item in [d for d in self._deferred_ends if d[0] <= elapsed]:
                self._deferred_ends.remove(item)
                self._fault(item[1], start=False, elapsed=elapsed)
            self._start_deferred(elapsed)
            self._reap_phases(now)
            self._place_loops()  # a restarted acceptor's loop too
            self._check_restart()
            dead = self.target.alive()
            if dead and not self._broker_fault_active():
                raise TargetError(dead)
            if now - last_progress >= self.opts.progress_every:
                last_progress = now
                self.say(self._status(elapsed, cursor))
            if (
                cursor.done()
                and not self._deferred_ends
                and elapsed >= self.duration
                and all(p.ended for p in self.phases.values())
            ):
                break
            if elapsed > self.duration + self.sc.timeouts.drain + 30:
                self.say("load did not finish in time; stopping it")
                break
            time.sleep(0.1)
        for params in self._deferred_starts:
            self.say(
                f"fault {params['kind']} {dict(params)} never started: the load ended while an "
                "earlier one was still in force or restarting"
            )
        self._deferred_starts.clear()
        self._wait_restart()

    def _await_flowing(self, launched: float) -> float:
        """Seconds until every first phase drives load (bounded by timeouts.locust_start)."""
        deadline = launched + self.sc.timeouts.locust_start
        while time.monotonic() < deadline:
            self._reap_phases(time.monotonic())
            if all(rp.flowing or rp.ended for rp in self.phases.values()):
                break
            time.sleep(0.05)
        else:
            slow = [rp.phase.name for rp in self.phases.values() if not rp.flowing]
            self.say(
                f"phase(s) {', '.join(slow)} not flowing after "
                f"{self.sc.timeouts.locust_start:g}s; going on"
            )
        self._workers_joined()
        return min(time.monotonic() - launched, 10.0)

    def _workers_joined(self) -> None:
        """A first phase waiting for workers that never came does not start: the run
        stops before its clock and says which did not join (`harness run` exits 3)."""
        from harness.runner.workers import problems_before_start

        for rp in self.phases.values():
            if rp.workers and not rp.flowing:
                why = problems_before_start(
                    ready_dir(self.rd.root, rp.phase), rp.workers, self._worker_addresses()
                )
                self.load_never_started = f"phase {rp.phase.name}: {why}"
                raise TargetError(self.load_never_started)

    def _elapsed(self) -> float:
        return 0.0 if self._t0 is None else time.monotonic() - self._t0

    def _status(self, elapsed: float, cursor: Cursor) -> str:
        running = [p.phase.name for p in self.phases.values() if not p.ended]
        nxt = cursor.next_at
        parts = [f"t={elapsed:5.1f}/{self.duration:g}s", f"load: {', '.join(running) or 'none'}"]
        if self.active_faults:
            parts.append("faults: " + ", ".join(self.active_faults))
        if nxt is not None:
            parts.append(f"next event at {nxt:g}s")
        return "; ".join(parts)

    def _execute(self, ev: TimelineEvent, elapsed: float) -> None:
        assert self.target is not None
        if ev.kind == "phase_start":
            return  # launched ahead of time by the loop (Locust start-up lag)
        if ev.kind == "phase_stop":
            assert ev.phase is not None
            rp = self.phases.get(ev.phase.name)
            if rp is not None and rp.stop_deadline is None:
                rp.stop_deadline = time.monotonic() + self.sc.timeouts.drain
        elif ev.kind == "change":
            assert ev.action is not None
            self.say(f"t={elapsed:.1f}s change: {ev.action.kind} {dict(ev.action.params)}")
            applied_from = time.monotonic_ns()
            self.target.apply(ev.action)
            if ev.action.node is None:
                self.limits = apply_change(self.limits, ev.action)
            else:  # one broker's own layer: per key, its value wins over the cluster's
                layer = {**self.node_layers.get(ev.action.node, {}), **ev.action.params}
                self.node_layers[ev.action.node] = {k: v for k, v in layer.items() if v is not None}
            self.record_config(f"schedule@{ev.action.at:g}", applied_from)
        elif ev.kind == "fault_start":
            assert ev.action is not None
            self._fault(ev.action.params, start=True, elapsed=elapsed)
        elif ev.kind == "fault_end":
            assert ev.action is not None
            self._fault(ev.action.params, start=False, elapsed=elapsed)

    def _start_phase(self, phase: Phase) -> None:
        assert self.target is not None
        if phase.stop > self.duration:  # --duration shortened the run
            phase = dataclasses.replace(phase, stop=self.duration)
        host, port = self.target.client_addresses[phase.listener]
        web_port = None
        if self.opts.web:
            web_port = free_port()
            self._web_ports.append(web_port)
        index = [p.name for p in self.sc.load].index(phase.name)
        workers = self._phase_workers(phase)
        argv = locust_argv(
            phase,
            locust_bin=str(Path(sys.executable).with_name("locust")),
            profile_dir=_profile_dir(),
            target=LoadTarget(
                host,
                port,
                self.target.metrics_url,
                phase_client_config(self.target.kafka.client_configs, phase),
                tuple(self.target.broker_addresses.get(phase.listener, ())),
                self.target.kafka.spread_all,
            ),
            run_dir=self.rd.root,
            run_id=self.run_id,
            seed=self.seed + index,
            web_port=web_port,
            startup_allowance_s=max(self.lead, 3.0) + 2.0,
            workers=workers,
        )
        log = self.rd.logs / f"locust-{phase.name}.log"
        proc = ManagedProcess(f"locust-{phase.name}", argv, log_path=log)
        rp = self.phases[phase.name] = _RunningPhase(phase, proc)
        if workers is not None:
            rp.workers = workers.count
            rp.worker_procs = self._start_netns_workers(phase, workers)
            self.say(
                f"phase {phase.name}: its Locust master waits for {workers.count} worker(s) at "
                f"{workers.address} (`harness worker --master {workers.address}`)"
            )
        where = f"web UI http://127.0.0.1:{web_port}/" if web_port else f"log {log}"
        self.say(
            f"phase {phase.name} launched: {phase.profile} {phase.shape} from {phase.source_ips} "
            f"-> {host}:{port} ({where})"
        )

    def _warm_up(self) -> None:
        """Kafka's start-up work before t=0 and before the scrapes (runner.warmup): the
        acceptor target's upstream Kafka only, never through the acceptor."""
        fronts = self.target.fronts if self.target is not None else None
        if not fronts or self.opts.bootstrap_server:
            return
        from harness.runner.warmup import upstreams, warm_up

        security = self.run_json.get("listener_security") or {}
        addresses = [a for f in fronts for a in upstreams(f.props, security)]
        if addresses:
            self.run_json["warmup"] = warm_up(addresses, self.say)
            self.rd.write_run_json(self.run_json)

    # -- workers on other hosts (harness.runner.workers) -----------------------------------------
    def _make_worker_hosts(self) -> None:
        """`--worker-netns`: the worker hosts as namespaces (before the target, which
        listens on their bridge); `worker:J` ip quota entities become their addresses."""
        from harness.runner.workers import named_workers, resolve_entities

        n = self.n_workers
        per_worker = [p.name for p in self.sc.load if p.source_ips == PER_WORKER]
        if per_worker and not n:
            raise TargetError(
                f"phase(s) {', '.join(per_worker)}: source_ips {PER_WORKER} needs worker hosts "
                "(--workers N, or the scenario's workers)"
            )
        named = named_workers(self.sc.ip_quotas)
        if named and not self.opts.worker_netns:
            raise TargetError(
                f"ip_quotas {named}: a worker's address is known before the run only with "
                "--worker-netns (name the address itself for workers on other machines)"
            )
        if not n:
            return
        self.run_json["workers"] = {"count": n, "netns": self.opts.worker_netns}
        if not self.opts.worker_netns:
            # one master port for every phase: workers on other machines join one at a time
            on_workers = sorted(
                (p.start, p.stop, p.name) for p in self.sc.load if p.profile in ENGINE_PROFILES
            )
            for (_a, end, first), (start, _b, second) in itertools.pairwise(on_workers):
                if start < end:
                    raise TargetError(
                        f"phases {first} and {second} overlap: workers on other machines "
                        f"join one phase's master at a time on {self.opts.master_bind[1]} "
                        "(--worker-netns gives each phase its own)"
                    )
            self.run_json["workers"]["master_bind"] = "{}:{}".format(*self.opts.master_bind)
            return
        from harness.runner import netns

        why_not = netns.permitted()
        if why_not:
            raise TargetError(f"--worker-netns: {why_not}")
        hosts = self.worker_hosts = netns.WorkerHosts.create(n)
        self.say(
            f"worker hosts: {n} network namespace(s) {hosts.namespace(1)}..{hosts.namespace(n)} "
            f"at {', '.join(hosts.addresses)}; the target listens on {hosts.host}"
        )
        self.listen_host = hosts.host
        try:
            quotas = resolve_entities(self.sc.ip_quotas, hosts.addresses)
        except ValueError as exc:
            raise TargetError(str(exc)) from None
        if quotas != dict(self.sc.ip_quotas):
            self.sc = dataclasses.replace(self.sc, ip_quotas=quotas)
            self.say(f"ip quotas on the worker hosts' addresses: {quotas}")
        self.run_json["workers"].update(
            {"host": hosts.host, "hosts": hosts.addresses, "namespaces": [
                hosts.namespace(j) for j in range(1, n + 1)]}
        )  # fmt: skip
        self.rd.write_run_json(self.run_json)

    def _phase_workers(self, phase: Phase) -> Workers | None:
        """The phase's master for workers (engine profiles only; None: a lone process)."""
        if not self.n_workers or phase.profile not in ENGINE_PROFILES:
            return None
        wait = self.sc.timeouts.locust_start
        home = "local" if self.opts.shared_run_dir else "channel"
        if self.worker_hosts is not None:  # each phase its own master, its own workers
            return Workers(self.n_workers, self.worker_hosts.host, free_port(), wait, home)
        host, port = self.opts.master_bind
        return Workers(self.n_workers, host, port, wait, home)

    def _start_netns_workers(self, phase: Phase, workers: Workers) -> list[ManagedProcess]:
        from harness.runner.workers import worker_argv

        hosts = self.worker_hosts
        if hosts is None:
            return []
        out = []
        for j in range(1, workers.count + 1):
            argv = [*hosts.exec_prefix(j), *worker_argv(workers.address), "--phases", "1"]
            log = self.rd.logs / f"worker-{phase.name}-{j}.log"
            out.append(ManagedProcess(f"worker-{phase.name}-{j}", argv, log_path=log))
        return out

    def _worker_addresses(self, rp: _RunningPhase | None = None) -> list[str]:
        """The worker hosts' addresses: the namespaces' (the run made them), else what
        the phase's workers said."""
        if self.worker_hosts is not None:
            return list(self.worker_hosts.addresses)
        if rp is None:
            return []
        from loadprofiles.workers import read_roster

        roster = read_roster(ready_dir(self.rd.root, rp.phase))
        return sorted({a for w in roster["workers"].values() for a in w.get("addresses") or []})

    def _judge_workers(self, rp: _RunningPhase) -> dict[str, Any]:
        """What the phase's workers sent home, judged: a missing piece is named (and marked
        where the analysis reads it: the run is `unknown`)."""
        from harness.runner.workers import judge, worker_line

        hosts = self._worker_addresses() if self.worker_hosts is not None else []
        found, summary = judge(
            ready_dir(self.rd.root, rp.phase), rp.workers, hosts, self.rd.history / "client"
        )
        for w in summary:
            self.say(f"phase {rp.phase.name}: {worker_line(w)}")
        for p in found:
            self.say(f"phase {rp.phase.name}: {p.text()}")
        self.run_json.setdefault("worker_phases", {})[rp.phase.name] = summary
        self.rd.write_run_json(self.run_json)
        out: dict[str, Any] = {"workers": summary}
        if found:
            out["workers_lost"] = [p.text() for p in found]
        return out

    def _remove_worker_hosts(self) -> None:
        hosts = self.worker_hosts
        if hosts is None:
            return
        for rp in self.phases.values():
            for worker in rp.worker_procs:
                worker.stop(timeout=5)
        try:
            left = hosts.remove()
        except Exception as exc:  # `ip` hung or broke: say so, the next run sweeps them
            left = [f"{hosts.bridge} and its namespaces ({exc!r})"]
        self.worker_hosts = None
        if left:
            self.say(f"worker hosts: could not remove {left}")
            self.run_json["workers"]["left"] = left
        else:
            self.say("worker hosts removed")

    def _place_loops(self) -> None:
        placement = self.placement
        if placement is None or not placement.on:
            return
        fronts = self._process_groups()["acceptor"]
        for pid in placement.place_loops(fronts):
            self.say(f"placement: acceptor loop (pid {pid}) on CPU {sorted(placement.loop_cpus)}")
            self.run_json["placement"] = placement.record()

    def _process_groups(self) -> dict[str, list[int]]:
        """The run's processes by role, as process groups (each was started in a session
        of its own): the acceptor, the local brokers, the running load phases."""
        target = self.target
        out: dict[str, list[int]] = {"acceptor": [], "broker": [], "load": []}
        if target is not None:
            out["acceptor"] = target.fronts.pids() if target.fronts is not None else []
            out["broker"] = target.kafka.pids()
        running = [rp for rp in list(self.phases.values()) if not rp.ended]
        out["load"] = [rp.proc.pid for rp in running]
        out["load"] += [w.pid for rp in running for w in rp.worker_procs if w.poll() is None]
        noise = getattr(self, "noise", None)
        if noise is not None and noise.pgid is not None:
            out["noise"] = [noise.pgid]
        return out

    def _phase_detail(self, rp: _RunningPhase, **extra: Any) -> dict[str, Any]:
        p = rp.phase
        sources = p.source_ips
        if sources == PER_WORKER:  # the addresses the checks expect: the workers' own
            sources = ",".join(self._worker_addresses(rp)) or sources
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

    def _reap_phases(self, now: float) -> None:
        """phase_start when the Locust log says load flows, phase_end when its run time is up
        or it exits: the rows bracket the load itself, not Locust's start-up and stop."""
        for rp in self.phases.values():
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
                self._phase_ended(rp, code)

    def _phase_ended(self, rp: _RunningPhase, code: int | None, **extra: Any) -> None:
        rp.ended = True
        if rp.killed:  # its history ends at its last flush: phase_end is placed there
            extra["killed"] = True
        rp.proc.stop(timeout=1)
        for worker in rp.worker_procs:  # each leaves when its master quits
            worker.stop(timeout=10)
        if rp.workers:
            extra.update(self._judge_workers(rp))
        self._record_phase_rows(rp, code, **extra)
        # Locust exits 1 when requests failed: expected when limits refuse connections
        note = {0: "", 1: " (Locust saw failed requests)"}.get(
            code if code is not None else -1, f" (exit {code}; see {rp.proc.log_path})"
        )
        self.say(f"phase {rp.phase.name} ended{note}")

    def _record_phase_rows(self, rp: _RunningPhase, code: int | None, **extra: Any) -> None:
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
            intended = _intended_arrivals(self.rd.history / "client", rp.proc.pid)
            if intended:
                source = "client_history"
                start = intended[0]
                full = len(intended) >= max_arrivals(rp.phase)
                end = start + int(rp.phase.duration * 1e9) if full else intended[-1] + 1
        start = start if start is not None else now
        end = end if end is not None and end >= start else max(now, start)
        detail = self._phase_detail(rp, timing=source)
        if not rp.flowing:
            detail["never_flowed"] = True
        self.record("phase_start", mono_ns=start, ts_us=_wall_us(start), detail=detail)
        self.record(
            "phase_end",
            mono_ns=end,
            ts_us=_wall_us(end),
            detail={**detail, "exit_code": code, **extra},
        )

    # -- faults ------------------------------------------------------------------------------------
    def _broker_fault_active(self) -> bool:
        """A process is down on purpose (a broker paused or killed, the acceptor killed)."""
        return any(k in self.active_faults for k in (*KILLS, "broker_pause"))

    def _start_deferred(self, elapsed: float) -> None:
        """The first deferred process fault, once none is in force or restarting (a rolling
        restart keeps one node down at a time, however long a restart takes); it lasts its
        `for` from now."""
        if not self._deferred_starts or self._broker_fault_active() or self._restart_thread:
            return
        params = self._deferred_starts.pop(0)
        if elapsed >= self.duration:
            self.say(f"fault {params['kind']} never started: the load has ended")
            return
        self._fault(params, start=True, elapsed=elapsed, delayed=True)
        self._deferred_ends.append((elapsed + float(params["for"]), params))

    def _fault(self, params: Any, *, start: bool, elapsed: float, delayed: bool = False) -> None:
        assert self.target is not None
        kind = str(params["kind"])
        why_not = self.target.supports_fault(kind)
        if why_not:
            if start:
                self.say(f"t={elapsed:.1f}s fault {kind} skipped: {why_not}")
            return
        broker = self.target.kafka.node(params.get("broker"))
        detail = {k: v for k, v in params.items()}
        process_fault = kind in (*KILLS, "broker_pause")
        if (
            start
            and process_fault
            and not delayed
            and (self._broker_fault_active() or self._restart_thread is not None)
        ):
            # one process fault at a time: a broker still down or restarting cannot be
            # paused or killed again yet, and a second node down would be no rolling restart
            self.say(f"t={elapsed:.1f}s {kind} waits until the earlier fault has ended")
            self._deferred_starts.append(params)
            return
        if delayed:
            detail["delayed_by_restart"] = True
        # on a fronted cluster a broker's front is its listener: the node goes down whole
        fronts = self.target.fronts
        with_front = (
            kind == "broker_kill" and fronts is not None and fronts.fronted(params.get("broker"))
        )
        if start:
            self.say(f"t={elapsed:.1f}s fault {kind} starts ({params['for']:g}s)")
            if with_front:
                detail["front_stopped"] = True
            self.record("fault_start", reason=kind, detail=detail)
            self.active_faults[kind] = self._elapsed()
            self._fault_params[kind] = params
            if kind == "broker_pause":
                broker.pause()
            elif kind == "broker_kill":
                if with_front:  # first, so no front accepts for a dead broker
                    assert fronts is not None
                    pid = fronts.stop_node(int(params["broker"]))
                    self._fault_facts[kind] = {"front_stopped_pid": pid}
                broker.kill()
            elif kind == "load_kill":
                # the phase's Locust processes die; its unflushed rows die with them, and
                # its phase_end falls at its last recorded arrival (`_record_phase_rows`)
                rp = self.phases.get(str(params["phase"]))
                if rp is not None and not rp.ended:
                    self._fault_facts[kind] = {"killed_pid": rp.proc.pid}
                    rp.killed = True
                    rp.proc.signal_group(signal.SIGKILL)
            elif kind == "acceptor_kill":
                # what it had not flushed is lost: its history ends at its last part file
                assert fronts is not None
                self._fault_facts[kind] = {"killed_pid": fronts.kill(params.get("broker"))}
            elif kind == "broker_disk_full":
                # Kafka fails its next write to the full log directory (and, every log
                # directory failed, stops itself); in fault_end's detail
                self._fault_facts[kind] = {"ballast_bytes": broker.fill_log_dir()}
            else:
                self.target.set_upstream_latency(float(params["latency_ms"]))
            return
        if kind not in self.active_faults or id(self._fault_params.get(kind)) != id(params):
            return  # never started (deferred), or another fault of its kind is in force
        detail.update(self._fault_facts.get(kind, {}))  # what its start did, for fault_end
        due = self.active_faults[kind] + float(params["for"])
        if self._elapsed() < due - 0.05:
            # the start was delayed (a restart in progress): the fault still lasts `for`
            self._deferred_ends.append((due, params))
            return
        if kind == "broker_pause":
            broker.resume()
            self._end_fault(kind, detail)
        elif kind == "upstream_latency":
            self.target.set_upstream_latency(0.0)
            self._end_fault(kind, detail)
        elif kind == "load_kill":  # a killed load stays dead
            self._end_fault(kind, detail)
        elif kind == "broker_disk_full" and self._disk_freed(broker, detail):
            self._end_fault(kind, detail)  # Kafka kept running: nothing to restart
        else:
            what = "acceptor" if kind == "acceptor_kill" else "broker"
            what += " and its acceptor" if with_front else ""
            self.say(f"t={elapsed:.1f}s restarting the {what} (same ports, same state)")
            requested = time.monotonic()
            node = params.get("broker")

            def restart() -> None:
                try:
                    if kind == "acceptor_kill":
                        assert fronts is not None
                        fronts.restart(node)
                    else:
                        broker.restart()
                        if with_front:  # the broker first: its front's upstream
                            assert fronts is not None
                            fronts.restart(node)
                except BaseException as exc:
                    self._restart_error.append(exc)
                detail["restart_s"] = round(time.monotonic() - requested, 3)

            self._restart_detail = detail
            self._restart_kind = kind
            self._restart_thread = threading.Thread(
                target=restart, name="broker-restart", daemon=True
            )
            self._restart_thread.start()

    def _disk_freed(self, broker: Any, detail: dict[str, Any]) -> bool:
        """The full log directory gets its room back; True if Kafka is still running (else
        what it said and how it exited go in `detail`, and it is restarted)."""
        broker.free_log_dir()
        detail["broker_said"] = broker.log_dir_failure()
        if broker.running:
            return True
        detail["broker_exit_code"] = broker.returncode
        return False

    def _end_fault(self, kind: str, detail: dict[str, Any]) -> None:
        self.record("fault_end", reason=kind, detail=detail)
        self.active_faults.pop(kind, None)
        self._fault_params.pop(kind, None)
        self.say(f"fault {kind} ended")

    def _check_restart(self) -> None:
        t = self._restart_thread
        if t is not None and not t.is_alive():
            self._restart_thread = None
            if self._restart_error:
                raise TargetError(
                    f"the {self._restart_kind.removesuffix('_kill')} did not come back after "
                    f"the kill: {self._restart_error[0]}"
                )
            self._end_fault(self._restart_kind, self._restart_detail)

    def _wait_restart(self) -> None:
        if self._restart_thread is not None:
            self._restart_thread.join(self.sc.timeouts.broker_start)
            self._check_restart()

    # -- shutdown and analysis -----------------------------------------------------------------
    def _shutdown(self) -> None:
        for rp in self.phases.values():
            if not rp.ended:
                self._phase_ended(rp, rp.proc.stop(timeout=10), stopped=True)
        if self._restart_thread is not None:
            self._restart_thread.join(self.sc.timeouts.broker_start)
        target = self.target
        broker = target.kafka.broker if target is not None else None
        if "broker_pause" in self.active_faults and broker is not None:
            try:
                broker.resume()  # a stopped JVM cannot shut down cleanly
            except Exception:
                pass
        for kind in list(self.active_faults):
            self._end_fault(kind, {"kind": kind, "cut_short": True})
        scraper = getattr(self, "scraper", None)
        if scraper is not None:  # before the target stops: its last counters are kept
            scraper.stop()
            self.say(f"Kafka metrics: {scraper.summary()}")
        proc_stats = getattr(self, "proc_stats", None)
        if proc_stats is not None:
            proc_stats.stop()
            self.say(f"processes: {proc_stats.summary()}")
        kernel_net = getattr(self, "kernel_net", None)
        if kernel_net is not None:
            kernel_net.stop()
            self.say(f"kernel: {kernel_net.summary()}")
        try:
            if target is not None:
                target.stop()
        except Exception as exc:  # still write what we have
            self.say(f"stopping the target failed: {exc!r}")
        self.record(
            "run_end",
            reason="interrupted" if self.interrupted else ("error" if self.error else "done"),
            detail={"scenario": self.sc.name, "target": self.opts.target, "error": self.error},
        )
        if self.history is not None:
            self.history.close()
            if self.history.failure is not None:
                self.say(
                    f"the runner's history stopped: {self.history.failure}; "
                    f"{self.history.rows_lost} rows lost (the analysis will say incomplete)"
                )
        self._remove_worker_hosts()
        noise = getattr(self, "noise", None)
        if noise is not None:
            noise.stop()
            self.say("noise stopped")
        self.run_json["ended_at"] = utc_now_iso()
        self.run_json["interrupted"] = self.interrupted
        if self.error:
            self.run_json["error"] = self.error
        self.rd.write_run_json(self.run_json)
        self.say(f"run stopped; history in {self.rd.history}")

    def _has_history(self) -> bool:
        return any(self.rd.history.glob("*/*.parquet"))

    def _analyze(self) -> tuple[str, list[dict[str, Any]], Path | None]:
        argv = [sys.executable, "-m", "harness", "analyze", str(self.rd.root), "--gate"]
        if self.opts.spark_master:
            argv += ["--spark-master", self.opts.spark_master]
        self.say(
            f"analysing with PySpark: {' '.join(argv[2:])} (log {self.rd.logs / 'analysis.log'})"
        )
        log = self.rd.logs / "analysis.log"
        with open(log, "wb") as fh:
            proc = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
            )
            assert proc.stdout is not None
            deadline = time.monotonic() + self.sc.timeouts.analysis
            killer = threading.Timer(self.sc.timeouts.analysis, _killpg, (proc.pid,))
            killer.start()
            try:
                for line in proc.stdout:
                    fh.write(line)
                    print("  | " + line.decode(errors="replace").rstrip(), flush=True)
                proc.wait(max(1.0, deadline - time.monotonic()))
            finally:
                killer.cancel()
                _killpg(proc.pid)  # the Spark JVM is a child of the analysis: never orphan it
                proc.wait(10)
        verdict_path = self.rd.report / "verdict.json"
        if not verdict_path.is_file():
            self.say(f"the analysis wrote no verdict (exit {proc.returncode}); see {log}")
            return "unknown", [], None
        data = json.loads(verdict_path.read_text())
        report = self.rd.report / "report.html"
        return (
            str(data.get("verdict", "unknown")),
            list(data.get("checks", [])),
            report if report.exists() else None,
        )


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _wall_us(mono_ns: int) -> int:
    """A monotonic instant as wall-clock microseconds (the `ts` column)."""
    return (time.time_ns() - time.monotonic_ns() + mono_ns) // 1000


def _intended_arrivals(client_dir: Path, pid: int) -> list[int]:
    """Sorted intended_mono_ns of one Locust process's arrivals (invoked or not offered)."""
    import pyarrow.parquet as pq

    out: list[int] = []
    for f in sorted(client_dir.glob(f"client-*-{pid}-*.parquet")):
        out.extend(intended_arrivals(pq.read_table(f, columns=["event", "detail"])))
    return sorted(set(out))  # connect_fail after an invoke repeats its intended time


def _sigterm_to_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _profile_dir() -> Path:
    import loadprofiles

    return Path(loadprofiles.__file__).resolve().parent
