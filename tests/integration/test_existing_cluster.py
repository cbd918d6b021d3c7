"""The catalog's gate against a Kafka the harness did not configure.

The cluster here is configured the way an operator configures theirs, not by
`broker`: this test writes its own ``server.properties`` (listeners named its own
way: ``OPS_SASL`` is SASL_SSL with SCRAM-SHA-512, ``OPS_TLS`` SSL, ``REPL`` the PLAINTEXT
inter-broker listener; the Prometheus JMX exporter as a java agent), formats the storage
with Kafka's own ``kafka.tools.StorageTool`` (the SCRAM user made there, its password in a
private JVM argument file) and starts Kafka's own entry point, ``kafka.Kafka``, from the
Maven-resolved jars (the distribution's ``kafka-server-start.sh`` runs the same class; the
resolved jars carry no shell scripts). Only the jars' and the exporter agent's place in the
cache and the certificates (`base.security.certs`) come from the harness.

Then `harness run ci-gate --target broker --bootstrap-server <OPS_SASL> --command-config
<client.properties> --broker-metrics-url <exporter>` must PASS with `accounting` and
`kafka_metric_auth_counts` judged on the cluster's own listener names (read with
DescribeConfigs into run.json's ``cluster_listeners``), and say that it leaves the existing
cluster running.
"""

from __future__ import annotations

import base64
import contextlib
import json
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.integration.offered import assert_short_honestly, fell_short
from tests.integration.test_runner_end_to_end import harness_run, only_run_dir

pytestmark = [pytest.mark.integration, pytest.mark.slow]

READY_TIMEOUT_S = 180.0
SCRAM = "SCRAM-SHA-512"
#: the static keys auth-failure-storm's scenario sets, as this cluster's operators set them
STATIC = {"connection.failed.authentication.delay.ms": "500"}


@dataclass
class OwnKafka:
    """A Kafka started from its own server.properties (not by broker)."""

    folder: Path
    ports: dict[str, int]
    metrics_url: str
    client_configs: dict[str, Path]
    passwords: list[str]
    proc: subprocess.Popen[bytes] | None = None
    log: Path = field(default_factory=Path)

    def address(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self.proc = None


def _cluster_id() -> str:
    while True:  # a leading '-' would read as an option to the storage tool
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def _server_properties(own: OwnKafka, ca: Path, keystore: Path) -> str:
    p = own.ports
    lines = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{p['CONTROLLER']}",
        "controller.listener.names": "CONTROLLER",
        "listeners": ",".join(
            f"{n}://127.0.0.1:{p[n]}" for n in ("REPL", "OPS_SASL", "OPS_TLS", "CONTROLLER")
        ),
        "advertised.listeners": ",".join(
            f"{n}://127.0.0.1:{p[n]}" for n in ("REPL", "OPS_SASL", "OPS_TLS")
        ),
        "listener.security.protocol.map": (
            "REPL:PLAINTEXT,OPS_SASL:SASL_SSL,OPS_TLS:SSL,CONTROLLER:PLAINTEXT"
        ),
        "inter.broker.listener.name": "REPL",
        "sasl.enabled.mechanisms": SCRAM,
        "listener.name.ops_sasl.sasl.enabled.mechanisms": SCRAM,
        f"listener.name.ops_sasl.{SCRAM.lower()}.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        ),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(ca),
        "ssl.client.auth": "none",
        "log.dirs": str(own.folder / "data"),
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        **STATIC,
    }
    return "# written by tests/integration/test_existing_cluster.py\n" + "".join(
        f"{k}={v}\n" for k, v in lines.items()
    )


def _metrics_answer(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return b"kafka_server_socket_server_metrics" in resp.read()
    except OSError:
        return False


def _start(folder: Path) -> OwnKafka:
    from base.localnet import free_ports
    from base.security import clientprops, secrets
    from base.security.certs import issue, make_ca
    from base.security.sasl import new_users
    from broker.artifacts import find_java, jmx_exporter, resolve_artifacts
    from broker.probe import probe

    java = find_java()
    jars = resolve_artifacts().classpath
    exporter = jmx_exporter()
    secrets.private_dir(folder)
    names = ("REPL", "OPS_SASL", "OPS_TLS", "CONTROLLER", "METRICS")
    ports = dict(zip(names, free_ports(len(names)), strict=True))
    (user,) = new_users(["ops"])
    own = OwnKafka(
        folder=folder,
        ports=ports,
        metrics_url=f"http://127.0.0.1:{ports['METRICS']}/metrics",
        client_configs={},
        passwords=[user.password],
        log=folder / "kafka.log",
    )
    ca = make_ca("operators' CA")
    server = issue(ca, "localhost", sans=["localhost", "127.0.0.1"])
    ca_pem = secrets.write_private(folder / "ca.pem", ca.cert_pem)
    keystore = secrets.write_private(folder / "broker.pem", server.keystore_pem(ca))
    config = secrets.write_private(
        folder / "server.properties", _server_properties(own, ca_pem, keystore)
    )
    for name, protocol in (("OPS_SASL", "SASL_SSL"), ("OPS_TLS", "SSL")):
        props = clientprops.client_properties(
            protocol,
            bootstrap=own.address(name),
            mechanism=SCRAM if protocol == "SASL_SSL" else None,
            user=user if protocol == "SASL_SSL" else None,
            truststore=ca_pem,
        )
        own.client_configs[name] = secrets.write_private(
            folder / f"client-{name.lower()}.properties", clientprops.render(props)
        )
    agent_config = folder / "jmx-exporter.yaml"
    agent_config.write_text(exporter.rules)
    jvm = [str(java), "-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-Djava.awt.headless=true"]
    # Kafka's own storage tool; the SCRAM user's password only in a private argument file
    argfile = secrets.write_private(
        folder / "format.args",
        "\n".join(
            [
                "kafka.tools.StorageTool",
                "format",
                "-t",
                _cluster_id(),
                "-c",
                str(config),
                "--add-scram",
                f"{SCRAM}=[name={user.name},password={user.password}]",
            ]
        ),
    )
    with open(folder / "format.log", "wb") as out:  # it prints the SCRAM records: private
        rc = subprocess.run(
            [*jvm, "-cp", jars, f"@{argfile}"],
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=180,
            check=False,
        ).returncode
    argfile.unlink()
    assert rc == 0, (folder / "format.log").read_text(errors="replace")[-3000:]
    agent = exporter.java_agent_option(ports["METRICS"], agent_config)
    with open(own.log, "wb") as log:
        own.proc = subprocess.Popen(
            [*jvm, agent, "-cp", jars, "kafka.Kafka", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=folder,
            start_new_session=True,
        )
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        if own.proc.poll() is not None:
            raise AssertionError(f"Kafka exited: {own.log.read_text(errors='replace')[-3000:]}")
        with contextlib.suppress(Exception):
            if probe("127.0.0.1", ports["REPL"]).brokers and _metrics_answer(own.metrics_url):
                return own
        if time.monotonic() > deadline:
            own.stop()
            raise AssertionError(f"Kafka not ready: {own.log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def own_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OwnKafka]:
    from base.security import secrets

    folder = tmp_path_factory.mktemp("own-kafka") / "kafka"
    own = _start(folder)
    try:
        yield own
    finally:
        own.stop()
        secrets.remove_private(folder)


def _undo_quotas(own: OwnKafka) -> None:
    """What a run set on the cluster (it keeps it, as the run says): removed, so the next
    test's scenario meets the cluster as its operators left it."""
    from base.admin.client import alter_broker_config, alter_ip_quota, describe_ip_quotas

    boot = own.address("REPL")
    for ip in describe_ip_quotas(boot):
        alter_ip_quota(boot, None if ip == "default" else ip, None)
    alter_broker_config(
        boot, {"max.connection.creation.rate": None, "max.connections.per.ip.overrides": None}
    )


def _passed_or_generator_short(res: Any, verdict: dict[str, Any], run_dir: Path) -> None:
    """PASS with exit 0; or, on a machine too busy for the TLS logins' pace, the honest
    UNKNOWN of a generator that measured itself short (`tests.integration.offered`)."""
    short = fell_short(run_dir)
    if short:
        assert_short_honestly(run_dir, res.returncode, short)
        return
    assert (res.returncode, verdict["verdict"]) == (0, "pass"), (
        verdict["reasons"],
        res.stdout[-4000:],
    )


def _run(
    own: OwnKafka, tmp: Path, scenario: str, listener: str, *, metrics: bool = True
) -> tuple[Any, dict[str, Any], Path]:
    """`harness run SCENARIO --target broker --gate` on the cluster's LISTENER with that
    listener's client config (and its metrics URL unless `metrics` is False); the quotas the
    run set are removed afterwards, whatever happened."""
    out = tmp / "runs"
    args = [scenario, "--target", "broker", "--bootstrap-server", own.address(listener),
            "--command-config", str(own.client_configs[listener]), "--gate",
            "--out", str(out)]  # fmt: skip
    if metrics:
        args += ["--broker-metrics-url", own.metrics_url]
    try:
        res = harness_run(args, tmp / "run.log", timeout=800)
    finally:
        _undo_quotas(own)
    run_dir = only_run_dir(out)
    verdict = json.loads((run_dir / "report" / "verdict.json").read_text())
    return res, verdict, run_dir


@pytest.mark.timeout(900)
def test_ci_gate_passes_on_a_cluster_configured_by_its_operators(
    own_kafka: OwnKafka, tmp_path: Path
) -> None:
    from base.security.secrets import leaks

    res, verdict, run_dir = _run(own_kafka, tmp_path, "ci-gate", "OPS_SASL")
    checks = {c["name"]: c for c in verdict["checks"]}
    _passed_or_generator_short(res, verdict, run_dir)
    # judged on the cluster's own listener (OPS_SASL), not the scenario's CLIENT
    for name in ("accounting", "kafka_metric_auth_counts"):
        assert checks[name]["verdict"] == "pass" and checks[name]["judged"] > 0, checks[name]
    assert "client: +" in checks["kafka_metric_auth_counts"]["observed"]
    meta = json.loads((run_dir / "run.json").read_text())
    listeners = meta["cluster_listeners"]
    assert listeners["load"] == {"CLIENT": "OPS_SASL"}, listeners
    assert listeners["read_with"] == "DescribeConfigs"
    assert "OPS_SASL:SASL_SSL" in listeners["listener.security.protocol.map"]
    # honest words for a cluster the run did not start
    assert "leaving the existing cluster running" in res.stdout
    assert "stopping the broker" not in res.stdout
    assert "detected" in res.stdout and "--kafka-version" in res.stdout
    assert "expected a Kafka release like" not in res.stdout
    assert leaks([run_dir, tmp_path / "run.log"], own_kafka.passwords) == []


@pytest.mark.timeout(900)
def test_without_the_metrics_url_every_metrics_hint_names_it(
    own_kafka: OwnKafka, tmp_path: Path
) -> None:
    res, verdict, _run_dir = _run(own_kafka, tmp_path, "ci-gate", "OPS_SASL", metrics=False)
    assert verdict["verdict"] == "unknown", (verdict["reasons"], res.stdout[-3000:])
    about_metrics = [r for r in verdict["reasons"] if "kafka_metric" in r or "accounting" in r]
    assert about_metrics, verdict["reasons"]
    for reason in about_metrics:
        assert "--broker-metrics-url" in reason and "raise the load" not in reason, reason


@pytest.mark.timeout(900)
def test_ssl_storm_passes_on_the_clusters_ssl_listener(own_kafka: OwnKafka, tmp_path: Path) -> None:
    res, verdict, run_dir = _run(own_kafka, tmp_path, "ssl-storm", "OPS_TLS")
    checks = {c["name"]: c for c in verdict["checks"]}
    _passed_or_generator_short(res, verdict, run_dir)
    for name in ("accounting", "kafka_metric_auth_counts"):
        assert checks[name]["verdict"] == "pass" and checks[name]["judged"] > 0, checks[name]
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["cluster_listeners"]["load"] == {"CLIENT": "OPS_TLS"}


@pytest.mark.timeout(900)
def test_auth_failure_storm_passes_where_the_static_keys_are_the_scenarios(
    own_kafka: OwnKafka, tmp_path: Path
) -> None:
    """The cluster's operators set connection.failed.authentication.delay.ms = 500, as the
    scenario does (a static key the run cannot set): the run says they agree, and the
    failed-login delay and Kafka's failed-authentication counter are judged."""
    res, verdict, run_dir = _run(own_kafka, tmp_path, "auth-failure-storm", "OPS_SASL")
    checks = {c["name"]: c for c in verdict["checks"]}
    _passed_or_generator_short(res, verdict, run_dir)
    assert "the cluster's static settings equal the scenario's" in res.stdout
    assert checks["client_failed_login_delay"]["verdict"] == "pass"
    auth = checks["kafka_metric_auth_counts"]
    assert auth["verdict"] == "pass" and "failed (clients" in auth["observed"], auth
    static = json.loads((run_dir / "run.json").read_text())["cluster_listeners"]["static"]
    assert static["connection.failed.authentication.delay.ms"] == {
        "scenario": "500",
        "cluster": "500",
        "same": True,
    }
