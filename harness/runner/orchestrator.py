"""One scenario run, start to verdict: the only place that owns processes and the clock.

Everything is bounded: the target has start timeouts, each Locust phase has ``-t``
and a drain deadline, the analysis a timeout; whatever happens (a child dies, an
admin call fails, Ctrl-C, SIGTERM) the ``finally`` stops load, acceptor and broker in
that order, records ``run_end`` and rewrites run.json, so the run stays analysable.

The orchestrator wires the parts and owns the run's life: the plan and the target
(`plan`, `targets`), the worker hosts (`worker_hosts`), the load phases (`phases`), the
faults (`fault_schedule`, `fault_kinds`), the clock and loop (`timeline`), the samplers,
and the analysis (`analysis_step`).
"""

from __future__ import annotations

import functools
import os
import signal
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from base.history import HistoryWriter
from base.history.rows import (
    HarnessRunEnd,
    HarnessRunEndDetail,
    HarnessRunStart,
    HarnessRunStartDetail,
    Row,
)
from harness.runner.analysis_step import analyse
from harness.runner.fault_schedule import FaultSchedule
from harness.runner.kafka_side import metadata_mode
from harness.runner.phases import LoadLauncher, Phases, local_locust
from harness.runner.plan import LOOPBACK_HOST, RunPlan, TargetError
from harness.runner.rundir import RunDir, base_run_json, listener_security, new_run_id, utc_now_iso
from harness.runner.scenario import Scenario
from harness.runner.target import Target
from harness.runner.targets import make_target
from harness.runner.timeline import Testimony, Timeline
from harness.runner.worker_hosts import RunWorkers, WorkerOptions

EXIT_CODES = {"pass": 0, "fail": 1, "unknown": 2}


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


class Orchestrator:
    def __init__(
        self,
        scenario: Scenario,
        opts: RunOptions,
        progress: Callable[[str], None] | None = None,
        *,
        target: Callable[[RunPlan], Target] | None = None,
        launcher: LoadLauncher = local_locust,
        label: str | None = None,
        notes: Mapping[str, Any] | None = None,
    ) -> None:
        """``target``: makes the system under test from the plan (default `make_target`
        for ``opts.target``); ``launcher``: starts each phase's Locust (default a local
        process); ``label``: the run id's (default the target's); ``notes``: run.json
        entries of the caller's (compose/demo.py: its launcher)."""
        self.sc = scenario
        self.opts = opts
        self.say = progress or _Progress()
        self.duration = (
            min(opts.duration, scenario.duration) if opts.duration else scenario.duration
        )
        self.seed = scenario.seed if opts.seed is None else opts.seed
        self.run_id = new_run_id(scenario.name, label or opts.target)
        self.make_target = target or functools.partial(make_target, opts.target)
        self.notes = dict(notes or {})
        self.rd = RunDir(opts.out / self.run_id)
        self.history: HistoryWriter | None = None
        self.target: Target | None = None
        self.interrupted = False
        self.error: str | None = None
        self.run_json: dict[str, Any] = {}
        #: `--noise`: the neighbours made on purpose (harness.runner.noise.Noise), or None
        self.noise: Any = None
        #: `--placement`: the acceptor loop's CPU and the others' (runner.placement)
        self.placement: Any = None
        #: where the target's client listeners listen (the worker hosts' bridge, if any)
        self.listen_host = LOOPBACK_HOST
        self.timeline: Timeline | None = None
        self.testimony = Testimony(self.write)
        count = scenario.workers if opts.workers is None else opts.workers
        self.workers = RunWorkers(
            WorkerOptions(count, opts.worker_netns, opts.master_bind, opts.shared_run_dir),
            self.rd.root,
            scenario.timeouts.locust_start,
            self.say,
            self._save,
        )
        self.phases = Phases(
            scenario,
            self.duration,
            self.rd,
            self.run_id,
            self.seed,
            self.workers,
            self.write,
            self.say,
            web=opts.web,
            launcher=launcher,
        )
        self.faults = FaultSchedule(
            self.write,
            self.say,
            self._elapsed,
            self.duration,
            scenario.timeouts.broker_start,
        )
        self.faults.phases = self.phases.running

    def write(self, row: Row) -> None:
        """One row of the runner's history; none before the history exists."""
        if self.history is not None:
            self.history.append(row)

    def _save(self, key: str, value: Any) -> None:
        """One entry of run.json, written at once once the run directory exists."""
        self.run_json[key] = value
        if self.rd.root.is_dir():
            self.rd.write_run_json(self.run_json)

    def _elapsed(self) -> float:
        return self.timeline.elapsed() if self.timeline is not None else 0.0

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
        self.run_json.update(self.notes)
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
        elif self.opts.analyze and self.phases.never_started:
            self.say(f"not analysed: the load never started ({self.phases.never_started})")
        elif self.opts.analyze and self._has_history():
            try:
                verdict, checks, report = analyse(
                    self.rd, self.sc.timeouts.analysis, self.say, self.opts.spark_master
                )
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

    def _make_worker_hosts(self) -> None:
        """The worker hosts before the target (which listens on their bridge); the
        scenario's `worker:J` ip quotas on their addresses."""
        self.sc, host = self.workers.make(self.sc)
        if host is not None:
            self.listen_host = host

    def _start_target(self) -> None:
        started_ns = time.monotonic_ns()
        if self.opts.set_acceptor and self.opts.target != "acceptor":
            self.say("note: --set-acceptor is ignored for --target broker")
        self.target = self.make_target(self.plan())
        self.phases.target = self.faults.target = self.target
        self.target.start()
        self._place_loops()
        self.testimony.limits = dict(self.target.limits)
        broker = self.target.kafka.broker
        self.run_json["versions"]["kafka"] = getattr(broker, "version", None)
        # where the broker keeps its metadata (a started broker; None for an existing cluster)
        mode = metadata_mode(broker)
        if mode is not None:
            self.run_json["versions"]["metadata"] = mode
        # the release whose semantics the enforcer is judged by (docs/kafka-versions.md)
        self.run_json["versions"]["kafka_semantics"] = self.testimony.limits.get("kafka.version")
        self.run_json["limits"] = self.testimony.limits
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
        self.testimony.testify("start", started_ns)
        from harness.runner.kafka_metrics import start_scraper  # Kafka's metrics, every second

        self.scraper = start_scraper(self.target, self.write, self.opts, self.say)
        from harness.runner.kernel_net import start_sampler  # the kernel's listen drops

        self.kernel_net = start_sampler(self.write, self.say)
        from harness.runner.proc_stats import ProcStatsSampler  # descriptors, memory, CPU

        self.proc_stats = ProcStatsSampler(
            self.write, self._process_groups, self.rd.root / "history", own=True
        ).start()

    def _drive(self) -> None:
        assert self.target is not None
        started: HarnessRunStartDetail = {
            "scenario": self.sc.name,
            "target": self.opts.target,
            "duration_s": self.duration,
            "seed": self.seed,
        }
        self.write(HarnessRunStart(time.monotonic_ns(), detail=started))
        self.timeline = Timeline(
            self.sc,
            self.duration,
            self.target,
            self.phases,
            self.faults,
            self.testimony,
            self.say,
            self._place_loops,
            self.opts.progress_every,
        )
        self.timeline.drive()

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
        out: dict[str, list[int]] = {"acceptor": [], "broker": [], "load": []}
        if self.target is not None:
            for role, pids in self.target.pids().items():
                out[role] = out.get(role, []) + pids
        out["load"] += self.phases.pids()
        noise = getattr(self, "noise", None)
        if noise is not None and noise.pgid is not None:
            out["noise"] = [noise.pgid]
        return out

    def _shutdown(self) -> None:
        self.phases.stop_all()
        self.faults.cut_short()
        target = self.target
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
        ended: HarnessRunEndDetail = {
            "scenario": self.sc.name,
            "target": self.opts.target,
            "error": self.error,
        }
        why = "interrupted" if self.interrupted else ("error" if self.error else "done")
        self.write(HarnessRunEnd(time.monotonic_ns(), reason=why, detail=ended))
        if self.history is not None:
            self.history.close()
            if self.history.failure is not None:
                self.say(
                    f"the runner's history stopped: {self.history.failure}; "
                    f"{self.history.rows_lost} rows lost (the analysis will say incomplete)"
                )
        self.workers.remove(self.phases.worker_procs())
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


def _sigterm_to_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt
