"""Launcher choice, CLI settings, container env mapping: the decisions, not the processes."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from broker import BrokerError, choose_launcher
from broker.base import Broker
from broker.cli import parse_settings
from broker.container import env_for
from broker.errors import PortInUse
from broker.local import cluster_id
from broker.probe import ProbeResult


def test_explicit_launchers_are_kept() -> None:
    assert choose_launcher("local", None) == "local"
    assert choose_launcher("container", None) == "container"
    assert choose_launcher("external", "127.0.0.1:9092") == "external"


def test_auto_with_a_bootstrap_server_means_external() -> None:
    assert choose_launcher("auto", "127.0.0.1:9092") == "external"


@pytest.mark.parametrize(
    ("launcher", "bootstrap", "message"),
    [
        ("nope", None, "expected one of"),
        ("external", None, "needs bootstrap_server"),
        ("local", "127.0.0.1:9092", "only used by the external launcher"),
    ],
)
def test_inconsistent_launcher_requests_fail_clearly(
    launcher: str, bootstrap: str | None, message: str
) -> None:
    with pytest.raises(BrokerError, match=message):
        choose_launcher(launcher, bootstrap)


def test_parse_settings_keeps_equals_in_values() -> None:
    got = parse_settings(["max.connections=10", "advertised.listeners=A://h:1", " x = y "])
    assert got == {"max.connections": "10", "advertised.listeners": "A://h:1", "x": "y"}


@pytest.mark.parametrize("bad", ["novalue", "=5"])
def test_parse_settings_refuses_malformed_items(bad: str) -> None:
    with pytest.raises(BrokerError, match="expected key=value"):
        parse_settings([bad])


def test_container_env_follows_the_apache_image_convention() -> None:
    env = env_for({"max.connections.per.ip": "5", "a_b": "1", "x-y.z": "2"})
    assert env == {"KAFKA_MAX_CONNECTIONS_PER_IP": "5", "KAFKA_A__B": "1", "KAFKA_X___Y_Z": "2"}


def test_cluster_ids_are_22_char_and_never_look_like_options() -> None:
    ids = {cluster_id() for _ in range(500)}
    assert len(ids) == 500
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)


def test_a_pause_runc_could_not_freeze_is_tried_again_and_other_errors_are_not() -> None:
    """runc's cgroup-v1 freezer gives up on a busy cgroup now and then: the pause is
    tried again (at most PAUSE_ATTEMPTS times); any other engine error is raised at once."""
    from broker.container import PAUSE_ATTEMPTS, pause_retrying

    class APIError(Exception):  # docker.errors.APIError's message (docker is not imported)
        pass

    freeze = APIError("Cannot pause container f6: OCI runtime pause failed: unable to freeze")
    calls: list[int] = []
    slept: list[float] = []

    def flaky(failures: int, error: Exception = freeze) -> Callable[[], None]:
        def pause() -> None:
            calls.append(1)
            if len(calls) <= failures:
                raise error

        return pause

    assert pause_retrying(flaky(2), slept.append) == 3 and slept == [0.1, 0.2]
    calls.clear()
    with pytest.raises(APIError, match="unable to freeze"):
        pause_retrying(flaky(PAUSE_ATTEMPTS), slept.append)
    assert len(calls) == PAUSE_ATTEMPTS
    calls.clear()
    with pytest.raises(APIError, match="No such container"):
        pause_retrying(flaky(1, APIError("No such container: f6")), slept.append)
    assert len(calls) == 1


class _Dying(Broker):
    """A broker whose process exits while a probe of it waits (no socket: the probe is
    a stand-in that fails as a refused connection does)."""

    def __init__(self) -> None:
        super().__init__(bootstrap="127.0.0.1:9", listener_ports={}, version="4.4.0")
        self.gone = False
        self.asked = 0

    def probe(self, timeout_s: float = 5.0, listener: str | None = None) -> ProbeResult:
        self.gone = True  # it dies while this probe runs
        raise ConnectionRefusedError("refused")

    def _exited(self) -> BrokerError | None:
        self.asked += 1
        return PortInUse("CLIENT 127.0.0.1:9 in use") if self.gone else None


def test_a_broker_that_exits_during_the_last_probe_is_reported_as_exited_not_late() -> None:
    """`wait_ready` asks whether the broker has exited after each failed probe, before the
    deadline: a timeout (`NotReady`) is only for a broker that still runs."""
    broker = _Dying()
    with pytest.raises(PortInUse, match="in use"):
        broker.wait_ready(timeout_s=0)
    assert broker.asked == 1
