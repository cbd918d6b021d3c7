"""`auto` never crashes: an engine without a usable image falls back to the local launcher.

No engine and no JVM here: the launchers are replaced by stand-ins that record the call, so what
is tested is the choice and the one-line reason, not Kafka.
"""

from __future__ import annotations

from typing import Any

import pytest

import broker.container as container
import broker.local as local
from broker import BrokerError, start_broker
from broker.container import ContainerUnavailable, env_for

pytestmark = pytest.mark.unit


class _Sentinel:
    launcher = "local"


def _engine_up_without_image(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(container, "docker_available", lambda timeout_s=3.0: (True, ""))

    def no_image(**kwargs: Any) -> Any:
        raise ContainerUnavailable("no usable Kafka image: mmdebstrap is not installed")

    monkeypatch.setattr(container, "start_container", no_image)


def test_auto_falls_back_to_local_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    _engine_up_without_image(monkeypatch)
    calls: list[dict[str, Any]] = []

    def fake_local(**kwargs: Any) -> Any:
        calls.append(kwargs)
        return _Sentinel()

    monkeypatch.setattr(local, "start_local", fake_local)
    said: list[str] = []
    broker = start_broker(launcher="auto", progress=said.append)
    assert isinstance(broker, _Sentinel)
    assert len(calls) == 1
    assert said == [
        "using the local launcher instead of a container: "
        "no usable Kafka image: mmdebstrap is not installed"
    ]


def test_an_explicit_container_launcher_reports_the_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _engine_up_without_image(monkeypatch)
    monkeypatch.setattr(local, "start_local", lambda **kw: pytest.fail("must not fall back"))
    with pytest.raises(BrokerError, match="mmdebstrap is not installed"):
        start_broker(launcher="container", progress=lambda _: None)


def test_no_engine_means_local_without_trying_a_container(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(container, "docker_available", lambda timeout_s=3.0: (False, "no socket"))
    monkeypatch.setattr(
        container, "start_container", lambda **kw: pytest.fail("no engine: no container")
    )
    monkeypatch.setattr(local, "start_local", lambda **kw: _Sentinel())
    assert isinstance(start_broker(launcher="auto", progress=lambda _: None), _Sentinel)


@pytest.mark.parametrize(
    ("key", "variable"),
    [
        ("max.connections.per.ip", "KAFKA_MAX_CONNECTIONS_PER_IP"),
        (
            "listener.name.client.max.connection.creation.rate",
            "KAFKA_LISTENER_NAME_CLIENT_MAX_CONNECTION_CREATION_RATE",
        ),
        ("some_key.with-dash", "KAFKA_SOME__KEY_WITH___DASH"),
    ],
)
def test_kafka_variables_follow_the_official_image(key: str, variable: str) -> None:
    assert env_for({key: "1"}) == {variable: "1"}
