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
    "KAFKA_PORT": "1",
    "CONTROLLER_PORT": "2",
    "ACCEPTOR_PORT": "3",
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
    # the locally built images (harness.broker.images), never a registry's
    assert services["kafka"]["image"] == "kafka-connection-harness/kafka:${KAFKA_VERSION}"
    env = services["kafka"]["environment"]
    # clients come back through the acceptor
    assert env["KAFKA_ADVERTISED_LISTENERS"] == "CLIENT://127.0.0.1:${ACCEPTOR_PORT}"
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
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
