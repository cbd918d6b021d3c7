"""compose/ end to end: a catalog scenario through Kafka, the acceptor and Locust in containers.

    python compose/demo.py [SCENARIO, default ci-gate] [--duration S] [--keep]  (make compose-demo)

1. the local images (``harness.broker.images``; built when missing, no registry);
2. a run directory like ``harness run``'s (run.json with the intended limits, the runner's
   ``config``/``run_*``/``phase_*`` rows, acceptor.properties) and a compose env file with free
   127.0.0.1 ports;
3. ``docker-compose up`` Kafka + acceptor, the scenario's ip quotas through the admin API,
   then the Locust master and two workers (headless, the scenario's one phase, split over the
   workers by Locust's arrival slots) until the master exits;
4. ``docker-compose down`` (the acceptor flushes its history on SIGTERM);
5. ``harness analyze RUN_DIR``: the verdict, exit 0/1/2 like ``harness analyze --gate``.

Only single-phase scenarios without faults or scheduled changes run here (the orchestrator
of ``harness run`` does the rest); others are refused with the reason. Kafka runs the
launchers' own server.properties for the scenario's listeners, written into the run
directory (``broker/server.properties``); with secured listeners the real one, the
certificates, SASL users and client configurations are in ``broker/private`` (0700), which
every container sees at its own path, and nothing secret is in ``compose.env``
(``harness.broker.secured``; the folder is removed when the stack is down).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = ROOT / "compose" / "docker-compose.yaml"
PROFILE_DIR = Path("/opt/harness/loadprofiles")  # inside the harness image
WORKERS = 2
#: a cluster's brokers replicate over a listener of their own (harness.runner.kafka_side)
REPLICATION = "REPLICATION"


def say(message: str) -> None:
    print(f"[compose +{time.monotonic() - T0:6.1f}s] {message}", flush=True)


T0 = time.monotonic()


def compose_cli() -> list[str]:
    docker = shutil.which("docker")
    if docker:
        ok = subprocess.run(
            [docker, "compose", "version"], capture_output=True, timeout=30, check=False
        )
        if ok.returncode == 0:
            return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    if legacy:
        return [legacy]
    raise SystemExit(
        "error: neither `docker compose` nor `docker-compose` is installed "
        "(Debian: apt-get install docker-compose)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", nargs="?", default="ci-gate")
    parser.add_argument("--duration", type=float, help="shorten the load (seconds)")
    parser.add_argument("--keep", action="store_true", help="leave the stack up (debugging)")
    parser.add_argument("--no-analyze", action="store_true")
    args = parser.parse_args(argv)

    from harness import procfs
    from harness.broker.container import docker_available, sweep
    from harness.broker.images import docker_client, ensure_images
    from harness.broker.local import cluster_id
    from harness.localnet import free_ports
    from harness.runner import catalog
    from harness.runner.acceptor_target import acceptor_properties, passed_through_request_quotas
    from harness.runner.admin_changes import admin_listener, apply_ip_quota, apply_request_quota
    from harness.runner.loadgen import LoadTarget, locust_argv
    from harness.runner.phases import phase_client_config
    from harness.runner.plan import RunPlan
    from harness.runner.rundir import (
        RunDir,
        base_run_json,
        listener_security,
        new_run_id,
        utc_now_iso,
    )
    from harness.runner.schedule import initial_limits

    sc = catalog.load(args.scenario)
    if len(sc.load) != 1 or sc.schedule or sc.faults:
        print(
            f"error: scenario {sc.name!r} has {len(sc.load)} phases and {len(sc.schedule)} "
            "scheduled actions; compose runs single-phase scenarios without faults or changes "
            "(try ci-gate, fleet-restart, broker-rate or mutual-tls-quota, or a one-phase "
            "scenario file with brokers: 3; `harness run` runs them all)",
            file=sys.stderr,
        )
        return 3
    refused = passed_through_request_quotas(sc, dict(sc.acceptor))
    if refused:
        print(f"error: scenario {sc.name!r}: {refused}", file=sys.stderr)
        return 3
    ok, why = docker_available()
    if not ok:
        print(f"error: {why}; start dockerd (.ci/run does) or use `make demo`", file=sys.stderr)
        return 3
    for built in ensure_images(progress=say):
        say(built.describe())
    client = docker_client()
    sweep(client, progress=say)

    phase = sc.load[0]
    duration = min(args.duration or sc.duration, sc.duration)
    if phase.stop > duration:
        import dataclasses

        phase = dataclasses.replace(phase, stop=duration)
    run_id = new_run_id(sc.name, "compose")
    rd = RunDir((ROOT / "runs" / run_id).resolve()).create()
    names = sc.listeners
    n_nodes = sc.brokers
    # per node: the scenario's listeners (and, in a cluster, REPLICATION), the acceptor's
    # listeners, its controller; then the Locust master
    kafka_names = [*([REPLICATION] if n_nodes > 1 else []), *names]
    per_node = len(kafka_names) + len(names) + 1
    ports = free_ports(per_node * n_nodes + 1)
    master_port = ports[-1]
    kafka_ports: list[dict[str, int]] = []
    acceptor_ports: list[dict[str, int]] = []
    controller_ports: list[int] = []
    for i in range(n_nodes):
        mine = ports[i * per_node : (i + 1) * per_node]
        kafka_ports.append(dict(zip(kafka_names, mine[: len(kafka_names)], strict=True)))
        acceptor_ports.append(dict(zip(names, mine[len(kafka_names) : -1], strict=True)))
        controller_ports.append(mine[-1])
    addresses = {n: ("127.0.0.1", acceptor_ports[0][n]) for n in names}
    limits = initial_limits(sc, addresses)
    uuid = cluster_id()
    if n_nodes == 1:
        kafkas = [
            _kafka_config(
                sc, rd.root / "broker", kafka_ports[0], acceptor_ports[0], controller_ports[0]
            )
        ]
    else:
        kafkas = _kafka_cluster(
            sc, rd.root / "broker", kafka_ports, acceptor_ports, controller_ports
        )
    kafka = kafkas[0]
    kafka_env = kafka.env(uuid) if n_nodes == 1 else {}

    plan = RunPlan(sc, rd.root, say, run_id=run_id)
    fronts = []  # (node id or None, its config file, its ready file)
    for i in range(n_nodes):
        upstreams = {n: f"127.0.0.1:{kafka_ports[i][n]}" for n in names}
        props = acceptor_properties(plan, acceptor_ports[i], upstreams, kafka.files)
        # the acceptor enforces as the release of the broker it fronts, and is judged as it
        props.setdefault("kafka.version", _kafka_version())
        node = None if n_nodes == 1 else i + 1
        suffix = "" if node is None else f"-{node}"
        if node is not None:
            props["node.id"] = str(node)  # per-broker configs: this broker's own
        config = rd.root / f"acceptor{suffix}.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        fronts.append((node, config, rd.root / f"acceptor{suffix}.ready.json"))
        limits["kafka.version"] = props["kafka.version"]
    run_json = base_run_json(
        run_id=run_id,
        scenario=sc,
        target="acceptor",
        seed=sc.seed,
        duration=duration,
        limits=limits,
        started_at=utc_now_iso(),
    )
    run_json["launcher"] = "compose"
    run_json["listeners"] = {n: f"127.0.0.1:{acceptor_ports[0][n]}" for n in names}
    brokers: tuple[tuple[int, str, int], ...] = ()
    if n_nodes > 1:  # every front, which its broker advertises
        run_json["brokers"] = {
            str(i + 1): {n: f"127.0.0.1:{acceptor_ports[i][n]}" for n in names}
            for i in range(n_nodes)
        }
        brokers = tuple(
            (i + 1, "127.0.0.1", acceptor_ports[i][sc.load[0].listener]) for i in range(n_nodes)
        )
    run_json["listener_security"] = listener_security(kafka.client_configs)
    rd.write_run_json(run_json)

    locust = locust_argv(
        phase,
        locust_bin="locust",
        profile_dir=PROFILE_DIR,
        target=LoadTarget(
            "127.0.0.1",
            acceptor_ports[0][phase.listener],
            None,
            command_config=phase_client_config(kafka.client_configs, phase),
            brokers=brokers,
        ),
        run_dir=rd.root,
        run_id=run_id,
        seed=sc.seed,
        startup_allowance_s=15.0,
    )[1:]
    master = [
        *locust,
        "--master",
        "--master-bind-host",
        "127.0.0.1",
        "--master-bind-port",
        str(master_port),
        "--expect-workers",
        str(WORKERS),
        "--expect-workers-max-wait",
        "60",
    ]
    worker = [
        "-f",
        str(PROFILE_DIR / f"{phase.profile}.py"),
        "--worker",
        "--master-host",
        "127.0.0.1",
        "--master-port",
        str(master_port),
    ]
    env = {
        "KAFKA_VERSION": run_json["versions"].get("kafka") or _kafka_version(),
        "RUN_DIR": str(rd.root),
        "RUN_ID": run_id,
        **kafka_env,
        "CLUSTER_ID": uuid,
        "HARNESS_PID": os.getpid(),
        "HARNESS_PID_START": procfs.start_time(os.getpid()),
        "HARNESS_HOST": socket.gethostname(),
        "LOCUST_MASTER_ARGS": " ".join(master),
        "LOCUST_WORKER_ARGS": " ".join(worker),
    }
    env_file = rd.root / "compose.env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    compose_file = COMPOSE_FILE
    services = ["kafka", "acceptor"]
    if n_nodes > 1:
        compose_file = rd.root / "docker-compose.yaml"
        compose_file.write_text(yaml.safe_dump(cluster_services(kafkas, fronts, uuid)))
        services = [f"{kind}-{i + 1}" for kind in ("kafka", "acceptor") for i in range(n_nodes)]
    project = run_id.lower().replace(".", "-")
    cli = [*compose_cli(), "-f", str(compose_file), "-p", project]
    cli += ["--env-file", str(env_file)]
    logs = rd.logs / "compose.log"

    def compose(*a: str, check: bool = True, timeout: float = 300) -> int:
        with open(logs, "ab") as fh:
            fh.write(f"# {' '.join(a)}\n".encode())
            fh.flush()
            rc = subprocess.run(
                [*cli, *a], stdout=fh, stderr=subprocess.STDOUT, timeout=timeout, check=False
            ).returncode
        if check and rc != 0:
            raise RuntimeError(f"docker-compose {a[0]} exited {rc}; see {logs}")
        return rc

    from harness.history.writer import HistoryWriter

    history = HistoryWriter(rd.history, "harness", run_id, name="compose")
    samplers: list[Any] = []
    scraper = None
    error = None
    verdict_rc = 3
    say(f"run {run_id}: scenario {sc.name!r} in compose; output in {rd.root}")
    try:
        say(f"up: {', '.join(services)} (kafka {kafka_ports}, acceptors {acceptor_ports})")
        applied_from = time.monotonic_ns()
        compose("up", "-d", *services)
        deadline = time.monotonic() + 120
        for _node, _config, ready in fronts:
            while not ready.exists():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{ready.name} not written within 120 s; see {logs}")
                time.sleep(0.5)
        _wait_kafka(kafka_ports[0][kafka_names[0]], deadline, n_nodes)
        say(f"kafka ({n_nodes} node(s)) and the acceptor(s) are ready")
        bootstrap = f"127.0.0.1:{acceptor_ports[0][admin_listener(sc)]}"
        for ip, rate in sc.ip_quotas.items():
            apply_ip_quota(bootstrap, ip, rate)
        for q in sc.request_quotas:
            apply_request_quota(bootstrap, q)
        if sc.ip_quotas or sc.request_quotas:
            say(f"quotas set through the admin API at {bootstrap}: {dict(sc.ip_quotas)}")
        # the runner's testimony, as `harness run` writes it: once the acceptor took it all
        history.record(
            "config",
            reason="start",
            detail={**limits, "origin": "runner", "cause": "start",
                    "applied_from_mono_ns": applied_from},
        )  # fmt: skip
        from harness.runner.kafka_metrics import MetricsScraper, Scrapers, start_scraper

        urls = {
            node: json.loads(ready.read_text()).get("metrics_url") for node, _c, ready in fronts
        }
        if n_nodes == 1:
            scraper = start_scraper(
                SimpleNamespace(
                    name="acceptor",
                    metrics_url=urls[None],
                    kafka=SimpleNamespace(broker=None, cluster=None),
                    fronts=None,
                ),
                history,
                None,
                say,
            )
        else:  # each front's own, its rows naming its broker
            scraper = Scrapers(
                [
                    MetricsScraper(u, history.record, target="acceptor", broker=n).start()
                    for n, u in urls.items()
                    if u
                ]
            )
        # as `harness run` samples its own: the kernel's listen drops (host networking: the
        # runner's namespace is the stack's) and the containers' processes by role
        from harness.runner.kernel_net import start_sampler as start_kernel_net
        from harness.runner.proc_stats import ProcStatsSampler

        samplers.append(start_kernel_net(history, say))
        groups = ContainerGroups(client, project)
        samplers.append(ProcStatsSampler(history.record, groups, None).start())
        history.record(
            "run_start",
            detail={"scenario": sc.name, "target": "acceptor", "duration_s": duration},
        )
        say(f"up: locust master + {WORKERS} workers ({phase.profile} {phase.arrival})")
        launched_ns = time.monotonic_ns()
        rc = compose(
            "up",
            "--no-deps",
            "--exit-code-from",
            "locust-master",
            "locust-master",
            "locust-worker-1",
            "locust-worker-2",
            check=False,
            timeout=duration + 180,
        )
        ended_ns = time.monotonic_ns()
        for sampler in samplers:
            if sampler is not None:
                sampler.stop()
                say(f"{type(sampler).__name__}: {sampler.summary()}")
        samplers.clear()
        if scraper is not None:
            scraper.stop()
            say(f"Kafka metrics: {scraper.summary()}")
        # Like `harness run`: the phase rows bracket the load itself (from the first intended
        # arrival for the phase's duration), not Locust's start-up in the containers.
        first = _first_intended_ns(rd.history / "client")
        start_ns = first if first is not None else launched_ns
        end_ns = min(ended_ns, start_ns + int(phase.duration * 1e9))
        history.record(
            "phase_start", mono_ns=start_ns, ts_us=_wall_us(start_ns), detail=_phase(phase)
        )
        history.record(
            "phase_end",
            mono_ns=end_ns,
            ts_us=_wall_us(end_ns),
            detail={**_phase(phase), "exit_code": rc},
        )
        say(f"locust master exited {rc} (1 = some requests failed: expected under limits)")
    except Exception as exc:  # stop everything, keep what was recorded
        error = f"{type(exc).__name__}: {exc}"
        say(f"run broke: {error}")
    finally:
        for sampler in samplers:  # the run broke while they ran
            if sampler is not None:
                sampler.stop()
        if args.keep:
            say(f"--keep: the stack stays up; `{' '.join(cli)} down -v` removes it")
        else:
            compose("stop", "-t", "30", check=False)
            compose("logs", "--no-color", check=False)
            compose("down", "-v", check=False)
            for k in kafkas:
                k.remove()
        history.record("run_end", reason="error" if error else "done", detail={"error": error})
        history.close()
        run_json["ended_at"] = utc_now_iso()
        if error:
            run_json["error"] = error
        rd.write_run_json(run_json)
        sweep(client)
        client.close()
    if error:
        say(f"not analysed: {error}")
        return 3
    if args.no_analyze:
        say(f"analysis skipped; run `harness analyze {rd.root}`")
        return 0
    say(f"analysing: harness analyze {rd.root} --gate")
    verdict_rc = subprocess.run(
        [sys.executable, "-m", "harness", "analyze", str(rd.root), "--gate"], check=False
    ).returncode
    verdict = _verdict(rd.root)
    say(f"compose run {run_id}: verdict {verdict} (exit {verdict_rc}); report in {rd.report}")
    return verdict_rc


class KafkaConfig:
    """The broker's server.properties in the run directory, as the launchers write it
    (`harness.broker.secured` with secured listeners: the real one in the private folder,
    a masked copy beside it, the SCRAM users' format arguments, the client configs)."""

    def __init__(self, folder: Path, plan: Any, props: dict[str, str], security: Any) -> None:
        from harness.broker.config import render_properties, server_properties
        from harness.broker.container import DATA_DIR
        from harness.broker.secured import PRIVATE_DIR, NodeSecurity

        folder.mkdir(parents=True, exist_ok=True)
        self.plan = plan
        self.secured = None if security is None else NodeSecurity(security, folder / PRIVATE_DIR)
        masked = folder / "server.properties"
        if self.secured is None:
            masked.write_text(render_properties(server_properties(plan, DATA_DIR, props)))
            self.path, self.files = masked, None
            self.client_configs: dict[str, Path] = {}
        else:
            conf = server_properties(plan, DATA_DIR, self.secured.properties(plan, props))
            self.path = self.secured.write_config(conf, masked)
            self.files = self.secured.files
            self.client_configs = self.secured.client_configs(plan, lambda n: plan.advertised[n])

    def env(self, uuid: str) -> dict[str, str]:
        """compose.env's Kafka part: where the config is, and how to format with SCRAM."""
        if self.secured is None:
            return {"HARNESS_SERVER_PROPERTIES": str(self.path)}
        return self.secured.entrypoint_env(uuid, self.plan)

    def remove(self) -> None:
        if self.secured is not None:
            self.secured.remove()


#: a compose service's name prefix -> its role in the run's `process_stats` rows
ROLES = {"acceptor": "acceptor", "kafka": "broker", "locust": "load"}


class ContainerGroups:
    """The stack's processes by role, as process groups, for `ProcStatsSampler`: runc
    starts a container's first process in a session of its own, and with `pid: host` (the
    compose file's) its pid is the host's, so the group is that pid. Asked every reading
    (Locust's containers come and go); each container's pid is inspected once."""

    def __init__(self, client: Any, project: str) -> None:
        self.client = client
        self.label = f"com.docker.compose.project={project}"
        self._pids: dict[str, int] = {}

    def __call__(self) -> dict[str, list[int]]:
        from docker.errors import DockerException

        out: dict[str, list[int]] = {role: [] for role in ROLES.values()}
        try:
            running = self.client.containers.list(
                sparse=True, filters={"label": self.label, "status": "running"}
            )
        except (DockerException, OSError):  # the engine busy or gone: none this second
            return out
        for c in running:
            service = (c.attrs.get("Labels") or {}).get("com.docker.compose.service", "")
            role = next((r for prefix, r in ROLES.items() if service.startswith(prefix)), None)
            if role is None:
                continue
            pid = self._pids.get(c.id)
            if pid is None:
                try:
                    pid = int(self.client.api.inspect_container(c.id)["State"]["Pid"] or 0)
                except (DockerException, OSError, KeyError, ValueError):  # gone meanwhile
                    continue
                if pid:
                    self._pids[c.id] = pid
            if pid:
                out[role].append(pid)
        return out


def _kafka_config(
    sc: Any,
    folder: Path,
    kafka_ports: dict[str, int],
    acceptor_ports: dict[str, int],
    controller_port: int,
) -> KafkaConfig:
    """The scenario's broker: its listeners (every client one advertised at the acceptor,
    so clients that follow metadata stay behind it) and the keys the broker behind the
    acceptor keeps (the failed-login delay)."""
    from harness.broker.secured import check_listeners
    from harness.runner.acceptor_target import broker_enforced
    from harness.security.sasl import DEFAULT_USERS

    advertised = {n: f"127.0.0.1:{p}" for n, p in acceptor_ports.items()}
    props = broker_enforced(sc)
    checked = check_listeners(
        sc.broker_listeners, advertised, sc.inter_broker_listener, props, sasl_users=DEFAULT_USERS
    )
    plan = checked.plan([kafka_ports[n] for n in checked.names], controller_port)
    return KafkaConfig(folder, plan, props, checked.security)


def _kafka_cluster(
    sc: Any,
    folder: Path,
    kafka_ports: list[dict[str, int]],
    acceptor_ports: list[dict[str, int]],
    controller_ports: list[int],
) -> list[KafkaConfig]:
    """The scenario's cluster as `harness run` plans a fronted one: node k's client
    listeners advertised at its acceptor, the brokers replicating over REPLICATION (their
    own listener), one quorum of every node, one set of certificates and users for all."""
    from harness.broker.secured import check_listeners
    from harness.runner.acceptor_target import broker_enforced
    from harness.security.sasl import DEFAULT_USERS

    props = broker_enforced(sc)
    checked = check_listeners(
        (REPLICATION, *sc.broker_listeners), None, REPLICATION, props, sasl_users=DEFAULT_USERS
    )
    voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(controller_ports))
    out = []
    for i, ports in enumerate(kafka_ports):
        plan = checked.plan(
            [ports[n] for n in checked.names],
            controller_ports[i],
            node_id=i + 1,
            voters=voters,
            advertised={n: f"127.0.0.1:{p}" for n, p in acceptor_ports[i].items()},
        )
        out.append(KafkaConfig(folder / f"broker-{i + 1}", plan, dict(props), checked.security))
    return out


def cluster_services(
    kafkas: list[KafkaConfig], fronts: list[tuple[Any, Path, Path]], uuid: str
) -> dict[str, Any]:
    """The compose file of a fronted cluster: the base file's `kafka` and `acceptor`
    services once per node (``kafka-k``, ``acceptor-k``), each Kafka given its own config
    paths (paths only, as compose.env holds for one broker), each acceptor its own."""
    import copy

    base = yaml.safe_load(COMPOSE_FILE.read_text())
    services = base["services"]
    kafka, acceptor = services.pop("kafka"), services.pop("acceptor")
    for (node, config, ready), k in zip(fronts, kafkas, strict=True):
        mine = copy.deepcopy(kafka)
        mine["environment"] = {**mine["environment"], "HARNESS_FORMAT_ARGS": "",
                               "HARNESS_FORMAT_LOG": "", **k.env(uuid)}  # fmt: skip
        services[f"kafka-{node}"] = mine
        front = copy.deepcopy(acceptor)
        front["depends_on"] = [f"kafka-{node}"]
        command = list(front["command"])
        command[command.index("${RUN_DIR}/acceptor.properties")] = str(config)
        command[command.index("${RUN_DIR}/acceptor.ready.json")] = str(ready)
        front["command"] = command
        services[f"acceptor-{node}"] = front
    return {k: v for k, v in base.items() if not str(k).startswith("x-")}


def _wall_us(mono_ns: int) -> int:
    return (time.time_ns() - time.monotonic_ns() + mono_ns) // 1000


def _first_intended_ns(client_dir: Path) -> int | None:
    """The earliest intended arrival in the client history (every worker's files)."""
    import pyarrow.parquet as pq

    from harness.history.readers import intended_arrivals

    first: int | None = None
    for f in sorted(client_dir.glob("*.parquet")):
        for value in intended_arrivals(pq.read_table(f, columns=["event", "detail"])):
            if first is None or value < first:
                first = value
    return first


def _kafka_version() -> str:
    from harness.broker.artifacts import KAFKA_VERSION

    return KAFKA_VERSION


def _phase(phase: Any) -> dict[str, Any]:
    return {
        "name": phase.name,
        "profile": phase.profile,
        "arrival": phase.arrival,
        "intended_rate": phase.intended_rate,
        "source_ips": phase.source_ips,
        "listener": phase.listener,
        "via": phase.via,
        "workers": WORKERS,
    }


def _wait_kafka(port: int, deadline: float, brokers: int = 1) -> None:
    """Until the node at ``port`` answers and its Metadata lists ``brokers`` brokers."""
    from harness.broker.probe import probe

    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if (probe("127.0.0.1", port, timeout_s=2.0).brokers or 0) >= brokers:
                return
        except Exception as exc:
            last = exc
        time.sleep(0.5)
    raise RuntimeError(f"kafka did not answer on 127.0.0.1:{port} ({last})")


def _verdict(run_dir: Path) -> str:
    try:
        return str(json.loads((run_dir / "report" / "verdict.json").read_text())["verdict"])
    except (OSError, ValueError, KeyError):
        return "none"


if __name__ == "__main__":
    sys.exit(main())
