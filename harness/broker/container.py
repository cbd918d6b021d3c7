"""The same single-node KRaft broker, but in the official ``apache/kafka`` image via testcontainers.

testcontainers' ``KafkaContainer`` drives Confluent's image through Confluent's start scripts,
which the Apache image does not have; the Apache image is configured entirely by ``KAFKA_*``
environment variables instead, so this launcher uses testcontainers' generic container with the
same server.properties the local launcher computes. Each listener listens inside the container on
the port it is published on, so the advertised address is the real one without a second pass.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from harness.broker.artifacts import KAFKA_VERSION, Progress
from harness.broker.base import Broker
from harness.broker.config import (
    ListenerPlan,
    normalise_listeners,
    server_properties,
)
from harness.broker.errors import BrokerError, tail
from harness.broker.local import cluster_id, free_ports
from harness.broker.probe import ProbeResult

IMAGE = f"apache/kafka:{KAFKA_VERSION}"
DATA_DIR = "/var/lib/kafka/data"


def docker_available(timeout_s: float = 3.0) -> tuple[bool, str]:
    """(True, "") when a Docker engine answers a ping quickly; else (False, why not)."""
    try:
        import docker
    except ImportError:
        return False, "the docker package is not installed (pip install '.[container]')"
    try:
        client = docker.from_env(timeout=int(max(1, timeout_s)))
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:
        return False, f"no Docker engine answers ({type(exc).__name__}: {exc})"
    return True, ""


def env_for(props: Mapping[str, str]) -> dict[str, str]:
    """server.properties -> the Apache image's ``KAFKA_*`` variables.

    The image's own convention: ``.`` becomes ``_``, ``_`` becomes ``__``, ``-`` becomes ``___``.
    """
    return {
        "KAFKA_" + key.replace("_", "__").replace(".", "_").replace("-", "___").upper(): value
        for key, value in props.items()
    }


class ContainerBroker(Broker):
    """A broker in a Docker container; pause/kill/restart act on the container."""

    launcher = "container"

    def __init__(self, container: Any, plan: ListenerPlan, version: str, timeout_s: float) -> None:
        super().__init__(
            bootstrap=f"127.0.0.1:{plan.ports[plan.first]}",
            listener_ports=dict(plan.ports),
            version=version,
        )
        self.container = container
        self._timeout_s = timeout_s
        self._stopped = False

    def _wrapped(self) -> Any:
        return self.container.get_wrapped_container()

    def wait_ready(self, timeout_s: float | None = None) -> ProbeResult:
        try:
            return super().wait_ready(self._timeout_s if timeout_s is None else timeout_s)
        except BrokerError as exc:
            logs = ""
            with contextlib.suppress(Exception):
                logs = self._wrapped().logs(tail=40).decode(errors="replace")
            raise BrokerError(f"{IMAGE}: {exc}; last container log lines:\n{tail(logs)}") from exc

    def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            with contextlib.suppress(Exception):
                self.container.stop()

    def pause(self) -> None:
        self._wrapped().pause()

    def resume(self) -> None:
        self._wrapped().unpause()

    def kill(self) -> None:
        self._wrapped().kill()

    def restart(self) -> None:
        self._wrapped().restart()
        self.wait_ready()


def start_container(
    *,
    properties: Mapping[str, str] | None = None,
    listeners: Sequence[str] = ("PLAINTEXT",),
    advertised: Mapping[str, str] | None = None,
    inter_broker_listener: str | None = None,
    ready_timeout_s: float = 120,
    progress: Progress = print,
) -> ContainerBroker:
    """Start ``apache/kafka`` with testcontainers; needs a Docker engine."""
    ok, why = docker_available()
    if not ok:
        raise BrokerError(
            f"the container launcher needs a Docker engine: {why}; use --launcher local"
        )
    from testcontainers.core.container import DockerContainer

    props = dict(properties or {})
    names, adv, inter = normalise_listeners(listeners, advertised, inter_broker_listener, props)
    props.pop("advertised.listeners", None)
    props.pop("inter.broker.listener.name", None)
    ports = free_ports(len(names))
    plan = ListenerPlan(
        names=names,
        ports=dict(zip(names, ports, strict=True)),
        controller_port=9093,
        advertised=adv,
        inter_broker_listener=inter,
    )
    conf = server_properties(plan, DATA_DIR, props)
    # Inside the container the listeners bind every interface; the controller stays internal.
    conf["listeners"] = ",".join(
        [f"{n}://0.0.0.0:{plan.ports[n]}" for n in names] + ["CONTROLLER://localhost:9093"]
    )
    conf["controller.quorum.voters"] = "1@localhost:9093"
    container = DockerContainer(IMAGE)
    for key, value in env_for(conf).items():
        container.with_env(key, value)
    container.with_env("CLUSTER_ID", cluster_id())
    for port in plan.ports.values():
        container.with_bind_ports(port, port)
    progress(f"starting {IMAGE} with testcontainers…")
    container.start()
    broker = ContainerBroker(container, plan, KAFKA_VERSION, ready_timeout_s)
    try:
        broker.wait_ready()
    except BaseException:
        broker.stop()
        raise
    return broker
