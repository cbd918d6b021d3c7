"""A run's Locust workers on other hosts, as the orchestrator handles them: the worker
hosts made as network namespaces (`--worker-netns`) or reached at `--master-bind`, each
engine phase's master (`Workers`), the `harness worker` processes a namespace runs, what
came home judged per phase, the hosts removed at the end (harness.runner.workers,
harness.runner.netns)."""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from base.localnet import free_port
from base.supervisor import ManagedProcess
from harness.runner.loadgen import Workers, ready_dir
from harness.runner.plan import TargetError
from harness.runner.scenario import ENGINE_PROFILES, PER_WORKER, Phase, Scenario


@dataclasses.dataclass(frozen=True)
class WorkerOptions:
    #: Locust workers per engine phase (0: none)
    count: int
    #: make the worker hosts as network namespaces (`--worker-netns`)
    netns: bool = False
    #: where the phases' masters listen for workers on other machines (`--master-bind`)
    master_bind: tuple[str, int] = ("127.0.0.1", 5557)
    #: the workers write their histories into the run folder (`--shared-run-dir`)
    shared_run_dir: bool = False


class RunWorkers:
    def __init__(
        self,
        opts: WorkerOptions,
        run_dir: Path,
        wait: float,
        say: Callable[[str], None],
        save: Callable[[str, Any], None],
    ) -> None:
        self.opts, self.run_dir, self.wait, self.say = opts, run_dir, wait, say
        #: run.json's entry ``key`` set to a value and written
        self.save = save
        #: the worker hosts when the run made them (runner.netns.WorkerHosts)
        self.hosts: Any = None
        #: run.json's ``workers`` and ``worker_phases``
        self.info: dict[str, Any] = {}
        self.phase_summaries: dict[str, Any] = {}

    def make(self, sc: Scenario) -> tuple[Scenario, str | None]:
        """`--worker-netns`: the worker hosts as namespaces (before the target, which
        listens on their bridge); `worker:J` ip quota entities become their addresses.
        Returns the scenario (its ip quotas on those addresses) and where the target
        listens (None: loopback)."""
        from harness.runner.workers import named_workers, resolve_entities

        n, opts = self.opts.count, self.opts
        per_worker = [p.name for p in sc.load if p.source_ips == PER_WORKER]
        if per_worker and not n:
            raise TargetError(
                f"phase(s) {', '.join(per_worker)}: source_ips {PER_WORKER} needs worker hosts "
                "(--workers N, or the scenario's workers)"
            )
        named = named_workers(sc.ip_quotas)
        if named and not opts.netns:
            raise TargetError(
                f"ip_quotas {named}: a worker's address is known before the run only with "
                "--worker-netns (name the address itself for workers on other machines)"
            )
        if not n:
            return sc, None
        self.info = {"count": n, "netns": opts.netns}
        if not opts.netns:
            # one master port for every phase: workers on other machines join one at a time
            on_workers = sorted(
                (p.start, p.stop, p.name) for p in sc.load if p.profile in ENGINE_PROFILES
            )
            for (_a, end, first), (start, _b, second) in itertools.pairwise(on_workers):
                if start < end:
                    raise TargetError(
                        f"phases {first} and {second} overlap: workers on other machines "
                        f"join one phase's master at a time on {opts.master_bind[1]} "
                        "(--worker-netns gives each phase its own)"
                    )
            self.info["master_bind"] = "{}:{}".format(*opts.master_bind)
            self.save("workers", self.info)
            return sc, None
        from harness.runner import netns

        why_not = netns.permitted()
        if why_not:
            raise TargetError(f"--worker-netns: {why_not}")
        hosts = self.hosts = netns.WorkerHosts.create(n)
        self.say(
            f"worker hosts: {n} network namespace(s) {hosts.namespace(1)}..{hosts.namespace(n)} "
            f"at {', '.join(hosts.addresses)}; the target listens on {hosts.host}"
        )
        try:
            quotas = resolve_entities(sc.ip_quotas, hosts.addresses)
        except ValueError as exc:
            raise TargetError(str(exc)) from None
        if quotas != dict(sc.ip_quotas):
            sc = dataclasses.replace(sc, ip_quotas=quotas)
            self.say(f"ip quotas on the worker hosts' addresses: {quotas}")
        self.info.update(
            {"host": hosts.host, "hosts": hosts.addresses, "namespaces": [
                hosts.namespace(j) for j in range(1, n + 1)]}
        )  # fmt: skip
        self.save("workers", self.info)
        return sc, str(hosts.host)

    def for_phase(self, phase: Phase) -> Workers | None:
        """The phase's master for workers (engine profiles only; None: a lone process)."""
        n = self.opts.count
        if not n or phase.profile not in ENGINE_PROFILES:
            return None
        home = "local" if self.opts.shared_run_dir else "channel"
        if self.hosts is not None:  # each phase its own master, its own workers
            return Workers(n, self.hosts.host, free_port(), self.wait, home)
        host, port = self.opts.master_bind
        return Workers(n, host, port, self.wait, home)

    def start_netns(self, phase: Phase, workers: Workers, logs: Path) -> list[ManagedProcess]:
        """The `harness worker` processes of a phase, one in each namespace the run made."""
        from harness.runner.workers import worker_argv

        hosts = self.hosts
        if hosts is None:
            return []
        out = []
        env = {**os.environ, "TMPDIR": hosts.tmp}  # a killed worker's folder goes with them
        for j in range(1, workers.count + 1):
            argv = [*hosts.exec_prefix(j), *worker_argv(workers.address), "--phases", "1"]
            log = logs / f"worker-{phase.name}-{j}.log"
            out.append(ManagedProcess(f"worker-{phase.name}-{j}", argv, log_path=log, env=env))
        return out

    def addresses(self, phase: Phase | None = None) -> list[str]:
        """The worker hosts' addresses: the namespaces' (the run made them), else what
        the phase's workers said."""
        if self.hosts is not None:
            return list(self.hosts.addresses)
        if phase is None:
            return []
        from loadprofiles.workers import read_roster

        roster = read_roster(ready_dir(self.run_dir, phase))
        return sorted({a for w in roster["workers"].values() for a in w.get("addresses") or []})

    def not_joined(self, phase: Phase, count: int) -> str:
        """Why a phase's workers did not all join before its start."""
        from harness.runner.workers import problems_before_start

        return str(problems_before_start(ready_dir(self.run_dir, phase), count, self.addresses()))

    def judge(self, phase: Phase, count: int, client_dir: Path) -> dict[str, Any]:
        """What the phase's workers sent home, judged: a missing piece is named (and marked
        where the analysis reads it: the run is `unknown`)."""
        from harness.runner.workers import judge, worker_line

        hosts = self.addresses() if self.hosts is not None else []
        found, summary = judge(ready_dir(self.run_dir, phase), count, hosts, client_dir)
        for w in summary:
            self.say(f"phase {phase.name}: {worker_line(w)}")
        for p in found:
            self.say(f"phase {phase.name}: {p.text()}")
        self.phase_summaries[phase.name] = summary
        self.save("worker_phases", self.phase_summaries)
        out: dict[str, Any] = {"workers": summary}
        if found:
            out["workers_lost"] = [p.text() for p in found]
        return out

    def remove(self, worker_procs: list[ManagedProcess]) -> None:
        hosts = self.hosts
        if hosts is None:
            return
        for worker in worker_procs:
            worker.stop(timeout=5)
        try:
            left = hosts.remove()
        except Exception as exc:  # `ip` hung or broke: say so, the next run sweeps them
            left = [f"{hosts.bridge} and its namespaces ({exc!r})"]
        self.hosts = None
        if left:
            self.say(f"worker hosts: could not remove {left}")
            self.info["left"] = left
            self.save("workers", self.info)
        else:
            self.say("worker hosts removed")
