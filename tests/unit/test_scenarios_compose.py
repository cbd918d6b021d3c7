"""compose/: the file is well-formed and wires the parts the way `harness run` does;
`docker compose config` validates it where the compose plugin is installed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.acceptor.config import load_config

COMPOSE = Path(__file__).resolve().parents[2] / "compose"


def _compose() -> dict[str, Any]:
    data = yaml.safe_load((COMPOSE / "docker-compose.yaml").read_text())
    assert isinstance(data, dict)
    return data


def test_services_and_wiring() -> None:
    services = _compose()["services"]
    assert {"kafka", "acceptor", "locust-master", "locust-worker", "analyze"} <= set(services)
    assert services["kafka"]["image"].startswith("apache/kafka:")
    env = services["kafka"]["environment"]
    # clients are sent back through the acceptor, never straight to the broker
    assert "CLIENT://acceptor:9092" in env["KAFKA_ADVERTISED_LISTENERS"]
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert services["locust-worker"]["deploy"]["replicas"] >= 2
    assert "--master" in services["locust-master"]["command"]
    assert "--worker" in services["locust-worker"]["command"]
    assert services["analyze"]["profiles"] == ["analyze"]
    for name, svc in services.items():
        for port in svc.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"


def test_acceptor_properties_are_valid_acceptor_config() -> None:
    cfg = load_config(str(COMPOSE / "acceptor.properties"), [])
    assert cfg is not None
    text = (COMPOSE / "acceptor.properties").read_text()
    assert "listener.name.client.upstream=kafka:19092" in text


def test_dockerfile_installs_the_project_and_its_runtime() -> None:
    text = (COMPOSE / "Dockerfile").read_text()
    assert "pip install" in text and "openjdk-17" in text and "haproxy" in text
    assert 'ENTRYPOINT ["harness"]' in text


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


def test_docker_compose_config_validates() -> None:
    cli = _compose_cli()
    if cli is None:
        pytest.skip("neither the docker compose plugin nor docker-compose is installed")
    res = subprocess.run(
        [*cli, "-f", str(COMPOSE / "docker-compose.yaml"), "config", "-q"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    assert "ignored" not in res.stderr, res.stderr  # nothing silently dropped
