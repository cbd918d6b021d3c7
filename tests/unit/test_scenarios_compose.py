"""compose/: the file is well-formed and wires the parts the way `harness run` does;
`docker compose config` validates it (with a demo env file) where compose is installed.
The stack itself runs in tests/integration/test_compose.py and `make compose-demo`."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

COMPOSE = Path(__file__).resolve().parents[2] / "compose"

pytestmark = pytest.mark.unit

ENV = {
    "KAFKA_VERSION": "4.3.1",
    "RUN_DIR": "/tmp/run",
    "RUN_ID": "r",
    "HARNESS_SERVER_PROPERTIES": "/tmp/run/broker/server.properties",
    "CLUSTER_ID": "c",
    "HARNESS_PID": "4",
    "HARNESS_PID_START": "5",
    "HARNESS_HOST": "h",
    "LOCUST_MASTER_ARGS": "-f /opt/harness/loadprofiles/storm.py --headless --master",
    "LOCUST_WORKER_ARGS": "-f /opt/harness/loadprofiles/storm.py --worker",
}


def _compose() -> dict[str, Any]:
    data = yaml.safe_load((COMPOSE / "docker-compose.yaml").read_text())
    assert isinstance(data, dict)
    return data


def test_services_and_wiring() -> None:
    services = _compose()["services"]
    assert {"kafka", "acceptor", "locust-master", "locust-worker-1", "locust-worker-2"} <= set(
        services
    )
    # the locally built images (broker.images), never a registry's
    assert services["kafka"]["image"] == "kafka-connection-harness/kafka:${KAFKA_VERSION}"
    env = services["kafka"]["environment"]
    # the launchers' own server.properties, written by demo.py into the run directory (which
    # the broker sees at its own path); nothing secret in the environment
    assert env["HARNESS_SERVER_PROPERTIES"] == "${HARNESS_SERVER_PROPERTIES}"
    assert "${RUN_DIR}:${RUN_DIR}" in services["kafka"]["volumes"]
    assert not [k for k in env if k.startswith("KAFKA_") and k != "KAFKA_HEAP_OPTS"]
    for name, svc in services.items():
        # host networking: the broker and the acceptor see the load's 127.0.0.x addresses
        assert svc["network_mode"] == "host", name
        assert "ports" not in svc, f"{name} publishes ports"
        assert svc["labels"]["org.kafka-connection-harness.owner"] == "kafka-connection-harness"
        if name != "kafka":
            assert svc["image"] == "kafka-connection-harness/harness:${KAFKA_VERSION}"
    assert "acceptor" in services["acceptor"]["command"]


def _compose_cli() -> list[str] | None:
    """`docker compose` (v2 plugin) if present, else Debian's `docker-compose` (v1)."""
    docker = shutil.which("docker")
    if docker is not None:
        probe = subprocess.run(
            [docker, "compose", "version"], capture_output=True, text=True, timeout=30
        )
        if probe.returncode == 0:
            return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    return [legacy] if legacy else None


def test_docker_compose_config_validates(tmp_path: Path) -> None:
    cli = _compose_cli()
    if cli is None:
        pytest.skip("neither the docker compose plugin nor docker-compose is installed")
    env_file = tmp_path / "compose.env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in ENV.items()))
    res = subprocess.run(
        [*cli, "-f", str(COMPOSE / "docker-compose.yaml"), "--env-file", str(env_file), "config"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    assert "ignored" not in res.stderr, res.stderr  # nothing silently dropped
    assert "is not set" not in res.stderr, res.stderr  # every variable comes from demo.py
    rendered = yaml.safe_load(res.stdout)
    master = rendered["services"]["locust-master"]
    command = master["command"]  # compose splits the args string (v1 renders it unsplit)
    assert (command if isinstance(command, str) else " ".join(command)).endswith("--master")


def test_demo_writes_the_launchers_server_properties_advertising_the_acceptor(
    tmp_path: Path,
) -> None:
    """compose/demo.py's Kafka config: every scenario listener on its own port, advertised
    at the acceptor; a secured scenario's real config in its private folder (the env names
    paths only) with the SCRAM users' format arguments beside it."""
    import sys

    sys.path.insert(0, str(COMPOSE))
    try:
        import demo
    finally:
        sys.path.remove(str(COMPOSE))
    from harness.runner import catalog

    plain = demo._kafka_config(
        catalog.load("ci-gate"), tmp_path / "a", {"CLIENT": 1}, {"CLIENT": 3}, 2
    )
    text = plain.path.read_text()
    assert "advertised.listeners=CLIENT://127.0.0.1:3" in text
    assert plain.env("cid") == {"HARNESS_SERVER_PROPERTIES": str(plain.path)}
    sc = catalog.load("sasl-scram-storm")
    ports = {"REPLICATION": 11, "CLIENT": 12}
    secured = demo._kafka_config(sc, tmp_path / "b", ports, {"REPLICATION": 21, "CLIENT": 22}, 13)
    try:
        env = secured.env("cid")
        assert secured.path.parent.name == "private"
        assert set(env) == {
            "HARNESS_SERVER_PROPERTIES",
            "HARNESS_FORMAT_ARGS",
            "HARNESS_FORMAT_LOG",
        }
        assert "--add-scram" in Path(env["HARNESS_FORMAT_ARGS"]).read_text()
        assert "CLIENT:SASL_SSL" in secured.path.read_text()
        assert secured.client_configs["CLIENT"].read_text().count("127.0.0.1:22") == 1
        masked = (tmp_path / "b" / "server.properties").read_text()
        assert not any(u.password in masked for u in secured.secured.security.users)
    finally:
        secured.remove()
    assert not (tmp_path / "b" / "private").exists()


def test_a_cluster_gets_a_kafka_and_an_acceptor_service_per_broker(tmp_path: Path) -> None:
    """compose/demo.py's compose file for a fronted cluster: the base file's `kafka` and
    `acceptor` once per node, each Kafka with its own config path (paths only), each
    acceptor with its own properties and ready file and waiting for its own Kafka."""
    import sys
    from types import SimpleNamespace

    sys.path.insert(0, str(COMPOSE))
    try:
        import demo
    finally:
        sys.path.remove(str(COMPOSE))

    kafkas = [
        SimpleNamespace(env=lambda _u, k=k: {"HARNESS_SERVER_PROPERTIES": f"/r/broker-{k}/s"})
        for k in (1, 2, 3)
    ]
    fronts = [(k, Path(f"/r/acceptor-{k}.properties"), Path(f"/r/a-{k}.json")) for k in (1, 2, 3)]
    data = demo.cluster_services(kafkas, fronts, "cid")  # type: ignore[arg-type]
    services = data["services"]
    assert {f"kafka-{k}" for k in (1, 2, 3)} | {f"acceptor-{k}" for k in (1, 2, 3)} <= set(services)
    assert "kafka" not in services and "acceptor" not in services
    assert not any(str(k).startswith("x-") for k in data)
    for k in (1, 2, 3):
        env = services[f"kafka-{k}"]["environment"]
        assert env["HARNESS_SERVER_PROPERTIES"] == f"/r/broker-{k}/s"
        assert env["CLUSTER_ID"] == "${CLUSTER_ID}"  # shared: one quorum
        front = services[f"acceptor-{k}"]
        assert front["depends_on"] == [f"kafka-{k}"]
        assert f"/r/acceptor-{k}.properties" in front["command"]
        assert f"/r/a-{k}.json" in front["command"]
        assert front["network_mode"] == "host"
