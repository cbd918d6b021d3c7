"""compose/ end to end: a catalog scenario through Kafka, the acceptor and Locust in containers.

    python compose/demo.py [SCENARIO, default ci-gate] [--duration S] [--keep]  (make compose-demo)

1. the local images (``broker.images``; built when missing, no registry);
2. the run itself is `harness run`'s (``harness.runner.orchestrator.Orchestrator``: run.json,
   the runner's ``config``/``run_*``/``phase_*`` rows, the samplers, the shutdown order, the
   analysis), given two parts of this file: `ComposeTarget`, the system under test as the
   stack's containers (Kafka's and the acceptors' configs and compose.env with free 127.0.0.1
   ports, ``docker-compose up`` Kafka + acceptor, the scenario's quotas through the admin API,
   ``docker-compose down`` at the end: the acceptor flushes its history on SIGTERM), and
   `ComposeLoad`, the phase's Locust master and two workers as services (headless, split over
   the workers by Locust's arrival slots) until the master exits;
3. the verdict: exit 0/1/2 like ``harness run --gate``, 3 when the run broke.

Only single-phase scenarios without faults or scheduled changes run here (the orchestrator
of ``harness run`` does the rest); others are refused with the reason. Kafka runs the
launchers' own server.properties for the scenario's listeners, written into the run
directory (``broker/server.properties``); with secured listeners the real one, the
certificates, SASL users and client configurations are in ``broker/private`` (0700), which
every container sees at its own path, and nothing secret is in ``compose.env``
(``broker.secured``; the folder is removed when the stack is down).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
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

    from broker.container import docker_available, sweep
    from broker.images import docker_client, ensure_images
    from harness.runner import catalog
    from harness.runner.acceptor_target import passed_through_request_quotas
    from harness.runner.orchestrator import EXIT_CODES, Orchestrator, RunOptions

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
    opts = RunOptions(
        "acceptor",
        out=(ROOT / "runs").resolve(),
        duration=args.duration,
        analyze=not args.no_analyze,
        placement="off",  # the containers' processes are not the runner's to place
    )
    stack = Stack(compose_cli(), keep=args.keep)
    orch = Orchestrator(
        sc,
        opts,
        say,
        target=lambda plan: ComposeTarget(plan, stack, ContainerGroups(client, stack.project)),
        launcher=ComposeLoad(stack),
        label="compose",
        notes={"launcher": "compose"},
    )
    stack.attach(orch.rd.root, orch.run_id)
    say(f"run {orch.run_id}: scenario {sc.name!r} in compose; output in {orch.rd.root}")
    try:
        result = orch.run()
    finally:
        sweep(client)
        client.close()
    if result.error or not result.started:
        say(f"not analysed: {result.error or 'interrupted'}")
        return 3
    if args.no_analyze:
        return 0
    rc = EXIT_CODES.get(result.verdict, 2)
    say(
        f"compose run {orch.run_id}: verdict {result.verdict} (exit {rc}); "
        f"report in {orch.rd.report}"
    )
    return rc


class Stack:
    """The run's compose project: its CLI, environment file, compose file and log."""

    def __init__(self, cli: list[str], keep: bool = False) -> None:
        self.base_cli, self.keep = cli, keep
        self.project = ""
        self.env: dict[str, Any] = {}
        self.file = COMPOSE_FILE

    def attach(self, run_dir: Path, run_id: str) -> None:
        self.run_dir, self.project = run_dir, run_id.lower().replace(".", "-")
        self.env_file = run_dir / "compose.env"
        self.log = run_dir / "logs" / "compose.log"

    @property
    def cli(self) -> list[str]:
        where = ["-f", str(self.file), "-p", self.project, "--env-file", str(self.env_file)]
        return [*self.base_cli, *where]

    def set_env(self, **values: Any) -> None:
        """compose.env: paths and arguments only, never a secret (`KafkaConfig.env`)."""
        self.env.update(values)
        self.env_file.write_text("".join(f"{k}={v}\n" for k, v in self.env.items()))

    def __call__(self, *a: str, check: bool = True, timeout: float = 300) -> int:
        with open(self.log, "ab") as fh:
            fh.write(f"# {' '.join(a)}\n".encode())
            fh.flush()
            rc = subprocess.run(
                [*self.cli, *a], stdout=fh, stderr=subprocess.STDOUT, timeout=timeout, check=False
            ).returncode
        if check and rc != 0:
            raise RuntimeError(f"docker-compose {a[0]} exited {rc}; see {self.log}")
        return rc

    def down(self) -> None:
        if self.keep:
            say(f"--keep: the stack stays up; `{' '.join(self.cli)} down -v` removes it")
            return
        self("stop", "-t", "30", check=False)
        self("logs", "--no-color", check=False)
        self("down", "-v", check=False)


class ComposeKafka:
    """The Kafka of the stack as the runner's `KafkaSide` holds a broker: its release and
    address (its process is a container's; the stack stops it)."""

    launcher = "compose"
    metrics_url = None

    def __init__(self, version: str, host: str, port: int) -> None:
        self.version, self.host, self.port = version, host, port
        self.bootstrap = f"{host}:{port}"

    def stop(self) -> None:
        pass


class ComposeCluster:
    """A fronted cluster in the stack: every front's metrics are scraped (its brokers have
    no exporter here)."""

    def __init__(self) -> None:
        self.brokers: list[Any] = []

    def stop(self) -> None:
        pass


class ComposeTarget:
    """The `harness.runner.target.Target` of a compose run: Kafka and the acceptor(s) as
    containers of the stack, configured from the run's plan as `harness run` configures
    its own (the launchers' server.properties, `acceptor_target.acceptor_properties`)."""

    name = "acceptor"

    def __init__(self, plan: Any, stack: Stack, groups: Callable[[], dict[str, list[int]]]):
        from harness.runner.fronts import Fronts
        from harness.runner.kafka_side import KafkaSide

        self.plan, self.stack, self.groups = plan, stack, groups
        self.kafka = KafkaSide(plan)
        self.fronts = Fronts(plan.scenario.listeners, 120.0, plan.progress)
        self.client_addresses: dict[str, tuple[str, int]] = {}
        self.broker_addresses: dict[str, list[tuple[int, str, int]]] = {}
        self.metrics_url: str | None = None
        self.limits: dict[str, Any] = {}
        self.kafkas: list[KafkaConfig] = []
        self.changes: Any = None

    def configure(self) -> list[str]:
        """Ports, Kafka's configs, each front's acceptor.properties, compose.env and (a
        cluster) the compose file; the services to bring up."""
        from base import procfs
        from base.localnet import free_ports
        from broker.local import cluster_id
        from harness.runner.acceptor_target import acceptor_properties
        from harness.runner.fronts import Front

        plan, sc = self.plan, self.plan.scenario
        names, n_nodes, root = sc.listeners, sc.brokers, plan.run_dir
        # per node: the scenario's listeners (and, in a cluster, REPLICATION), the
        # acceptor's listeners, its controller
        kafka_names = [*([REPLICATION] if n_nodes > 1 else []), *names]
        per_node = len(kafka_names) + len(names) + 1
        ports = free_ports(per_node * n_nodes)
        kafka_ports: list[dict[str, int]] = []
        acceptor_ports: list[dict[str, int]] = []
        controller_ports: list[int] = []
        for i in range(n_nodes):
            mine = ports[i * per_node : (i + 1) * per_node]
            kafka_ports.append(dict(zip(kafka_names, mine[: len(kafka_names)], strict=True)))
            acceptor_ports.append(dict(zip(names, mine[len(kafka_names) : -1], strict=True)))
            controller_ports.append(mine[-1])
        uuid = cluster_id()
        if n_nodes == 1:
            self.kafkas = [
                _kafka_config(
                    sc, root / "broker", kafka_ports[0], acceptor_ports[0], controller_ports[0]
                )
            ]
        else:
            self.kafkas = _kafka_cluster(
                sc, root / "broker", kafka_ports, acceptor_ports, controller_ports
            )
        kafka = self.kafkas[0]
        self.kafka_port = kafka_ports[0][kafka_names[0]]
        version = _kafka_version()
        self.kafka.broker = ComposeKafka(version, "127.0.0.1", self.kafka_port)
        self.kafka.client_configs = kafka.client_configs
        if n_nodes > 1:
            self.kafka.cluster = ComposeCluster()
        fronts = []  # (node id or None, its config file, its ready file)
        for i in range(n_nodes):
            upstreams = {n: f"127.0.0.1:{kafka_ports[i][n]}" for n in names}
            props = acceptor_properties(plan, acceptor_ports[i], upstreams, kafka.files)
            # the acceptor enforces as the release of the broker it fronts, judged as it
            props.setdefault("kafka.version", version)
            node = None if n_nodes == 1 else i + 1
            suffix = "" if node is None else f"-{node}"
            if node is not None:
                props["node.id"] = str(node)  # per-broker configs: this broker's own
            front = Front(
                node,
                root / f"acceptor{suffix}.properties",
                root / f"acceptor{suffix}.ready.json",
                root / "logs" / f"compose-acceptor{suffix}.log",
            )
            front.config_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
            front.ready_path.unlink(missing_ok=True)
            self.fronts.all.append(front)
            fronts.append((node, front.config_path, front.ready_path))
            self.version = props["kafka.version"]
        self.stack.set_env(
            KAFKA_VERSION=version,
            RUN_DIR=str(root),
            RUN_ID=plan.run_id,
            **(kafka.env(uuid) if n_nodes == 1 else {}),
            CLUSTER_ID=uuid,
            HARNESS_PID=os.getpid(),
            HARNESS_PID_START=procfs.start_time(os.getpid()),
            HARNESS_HOST=socket.gethostname(),
            LOCUST_MASTER_ARGS="",  # the phase's, when it is launched (`ComposeLoad`)
            LOCUST_WORKER_ARGS="",
        )
        if n_nodes == 1:
            return ["kafka", "acceptor"]
        self.stack.file = root / "docker-compose.yaml"
        self.stack.file.write_text(yaml.safe_dump(cluster_services(self.kafkas, fronts, uuid)))
        return [f"{kind}-{i + 1}" for kind in ("kafka", "acceptor") for i in range(n_nodes)]

    def start(self) -> None:
        from harness.runner.admin_changes import Changes, admin_listener
        from harness.runner.fronts import read_ready
        from harness.runner.schedule import initial_limits

        sc = self.plan.scenario
        services = self.configure()
        say(f"up: {', '.join(services)}")
        self.stack("up", "-d", *services)
        deadline = time.monotonic() + 120
        for front in self.fronts:
            while not front.ready_path.exists():
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{front.ready_path.name} not written within 120 s; see {self.stack.log}"
                    )
                time.sleep(0.5)
            front.addresses, front.metrics_url = read_ready(front.ready_path, sc.listeners)
        wait_kafka(self.kafka_port, deadline, sc.brokers)
        say(f"kafka ({sc.brokers} node(s)) and the acceptor(s) are ready")
        first = self.fronts.first
        self.client_addresses, self.metrics_url = dict(first.addresses), first.metrics_url
        if sc.brokers > 1:  # every front, which its broker advertises
            self.broker_addresses = {
                n: [(int(f.node or 0), *f.addresses[n]) for f in self.fronts] for n in sc.listeners
            }
        self.limits = initial_limits(sc, self.client_addresses)
        self.limits["kafka.version"] = self.version
        admin = "{}:{}".format(*self.client_addresses[admin_listener(sc)])
        self.changes = Changes(sc, admin, say, None, self.broker_addresses)
        self.changes.apply_initial_quotas()

    def apply(self, action: Any) -> None:
        self.changes.apply(action)

    def supports_fault(self, kind: str) -> str | None:
        return "compose runs no faults (`harness run` does)"

    def set_upstream_latency(self, ms: float) -> None:
        raise AssertionError("no faults in compose (supports_fault says so)")

    def alive(self) -> str | None:
        return None

    def pids(self) -> dict[str, list[int]]:
        return self.groups()

    def stop(self) -> None:
        try:
            self.stack.down()
        finally:
            if not self.stack.keep:
                for k in self.kafkas:
                    k.remove()


class ComposeLoad:
    """The phase's Locust master and two workers as the stack's services (headless, the
    arrivals split over the workers by Locust's arrival slots); the phase's process is the
    compose CLI that runs them until the master exits."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack

    def __call__(self, launch: Any) -> Any:
        from base.localnet import free_port
        from base.supervisor import ManagedProcess
        from harness.runner.loadgen import locust_argv
        from harness.runner.phases import Launched

        phase = launch.phase
        locust = locust_argv(
            phase,
            locust_bin="locust",
            profile_dir=PROFILE_DIR,
            target=launch.target,
            run_dir=launch.run_dir,
            run_id=launch.run_id,
            seed=launch.seed,
            startup_allowance_s=max(launch.startup_allowance_s, 15.0),
        )[1:]
        master_port = free_port()
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
        self.stack.set_env(LOCUST_MASTER_ARGS=" ".join(master), LOCUST_WORKER_ARGS=" ".join(worker))
        say(f"up: locust master + {WORKERS} workers ({phase.profile} {phase.arrival})")
        workers = [f"locust-worker-{j}" for j in range(1, WORKERS + 1)]
        argv = [*self.stack.cli, "up", "--no-deps", "--exit-code-from", "locust-master"]
        proc = ManagedProcess(
            f"compose-locust-{phase.name}", [*argv, "locust-master", *workers], log_path=launch.log
        )
        # every worker's client history is the phase's (one phase per compose run)
        return Launched(proc, "*.parquet", local=False)


class KafkaConfig:
    """The broker's server.properties in the run directory, as the launchers write it
    (`broker.secured` with secured listeners: the real one in the private folder,
    a masked copy beside it, the SCRAM users' format arguments, the client configs)."""

    def __init__(self, folder: Path, plan: Any, props: dict[str, str], security: Any) -> None:
        from broker.config import render_properties, server_properties
        from broker.container import DATA_DIR
        from broker.secured import PRIVATE_DIR, NodeSecurity

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
    from base.security.sasl import DEFAULT_USERS
    from broker.secured import check_listeners
    from harness.runner.acceptor_target import broker_enforced

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
    from base.security.sasl import DEFAULT_USERS
    from broker.secured import check_listeners
    from harness.runner.acceptor_target import broker_enforced

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


def _kafka_version() -> str:
    from broker.artifacts import KAFKA_VERSION

    return KAFKA_VERSION


def wait_kafka(port: int, deadline: float, brokers: int = 1) -> None:
    """Until the node at ``port`` answers and its Metadata lists ``brokers`` brokers."""
    from broker.probe import probe

    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if (probe("127.0.0.1", port, timeout_s=2.0).brokers or 0) >= brokers:
                return
        except Exception as exc:
            last = exc
        time.sleep(0.5)
    raise RuntimeError(f"kafka did not answer on 127.0.0.1:{port} ({last})")


if __name__ == "__main__":
    sys.exit(main())
