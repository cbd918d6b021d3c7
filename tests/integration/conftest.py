"""Real Kafka for integration tests.

Fixtures (names are stable; other test modules depend on them):

``kafka_broker`` (session scope)
    One real single-node KRaft broker (Apache Kafka, the default release, launcher ``local``)
    shared by the whole session; its workdir (data, ``server.properties``, ``broker.log``) is
    under pytest's tmp dir. Use ``kafka_broker.bootstrap`` (``"127.0.0.1:PORT"``),
    ``.listener_ports``, ``.version``, ``.log_path``. Do not pause, kill or reconfigure it:
    tests that need faults or special limits take their own broker from ``broker_factory``.

``fronted_acceptor`` (function scope)
    An acceptor with no limits in front of ``kafka_broker``; history under the test's tmp
    dir.

``broker_factory`` (function scope)
    ``broker_factory(**kwargs) -> Broker``: starts a fresh broker with
    :func:`broker.start_broker`'s keyword arguments (``properties=``, ``listeners=``,
    ``advertised=``, ...); launcher defaults to ``local`` and workdir to a new tmp dir. Every
    broker it started is stopped at teardown. A broker costs 6-20 s of startup (depending on
    machine load) and ~350 MB, so share one where you can (``kafka_broker``, or
    ``module_broker_factory``).

``module_broker_factory`` (module scope)
    The same factory for module-scoped fixtures: its brokers live until the module's tests are
    done, e.g. one broker with ``max.connections.per.ip=5`` shared by a whole test file.

Environment: ``HARNESS_TEST_BOOTSTRAP=host:port`` makes ``kafka_broker`` an external cluster
(nothing is started; tests needing a local process skip); ``HARNESS_TEST_LAUNCHER`` picks the
launcher for all fixtures (default ``local``). Failing to start the session broker fails the
tests that use it with the launcher's explanation (no silent skip: integration means real Kafka).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from acceptor import AcceptorHandle, start_in_thread
from acceptor.testing import nonconformant_rows
from broker import Broker, BrokerError, start_broker


def _progress(message: str) -> None:
    # Past pytest's capture: a first run resolves Kafka from Maven Central for a minute or so.
    stream = sys.__stderr__ or sys.stderr
    print(f"[kafka] {message}", file=stream, flush=True)


def _launcher() -> str:
    return os.environ.get("HARNESS_TEST_LAUNCHER", "local")


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    bootstrap = os.environ.get("HARNESS_TEST_BOOTSTRAP")
    try:
        if bootstrap:
            broker = start_broker(launcher="external", bootstrap_server=bootstrap)
        else:
            broker = start_broker(
                launcher=_launcher(),
                workdir=tmp_path_factory.mktemp("kafka-broker"),
                progress=_progress,
            )
    except BrokerError as exc:
        pytest.fail(f"could not start the session Kafka broker: {exc}", pytrace=False)
    try:
        yield broker
    finally:
        broker.stop()


def _factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Broker]]:
    started: list[Broker] = []

    def factory(**kwargs: Any) -> Broker:
        kwargs.setdefault("launcher", _launcher())
        if kwargs["launcher"] == "local":
            kwargs.setdefault("workdir", tmp_path_factory.mktemp("kafka-broker"))
        kwargs.setdefault("progress", _progress)
        broker = start_broker(**kwargs)
        started.append(broker)
        return broker

    try:
        yield factory
    finally:
        for broker in reversed(started):
            broker.stop()


@pytest.fixture
def broker_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Broker]]:
    yield from _factory(tmp_path_factory)


@pytest.fixture(scope="module")
def module_broker_factory(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[..., Broker]]:
    yield from _factory(tmp_path_factory)


@contextlib.contextmanager
def acceptor_starter(
    upstream: str,
    tmp_path: Path,
    run_id: str,
    defaults: Mapping[str, str] | None = None,
    *,
    check_rows: bool = False,
) -> Iterator[Callable[..., AcceptorHandle]]:
    """`start(**props)`: an acceptor with one CLIENT listener forwarding to `upstream`, no
    metrics endpoint, history in a folder of its own, `defaults` then `props` over that (a
    `__` in a keyword stands for `.`). On leaving, every one started is stopped; with
    `check_rows`, first every history row must be one its event's definition allows."""
    handles: list[AcceptorHandle] = []

    def start(**props: str) -> AcceptorHandle:
        config = {
            "listeners": "CLIENT://127.0.0.1:0",
            "listener.name.client.upstream": upstream,
            "metrics.port": "-1",
            **(defaults or {}),
        }
        config.update({key.replace("__", "."): value for key, value in props.items()})
        history = tmp_path / f"history-{len(handles)}"
        handle = start_in_thread(config, history_dir=history, run_id=run_id)
        handles.append(handle)
        return handle

    yield start
    try:
        if check_rows:
            for handle in handles:
                assert nonconformant_rows(handle) == []
    finally:
        for handle in handles:
            handle.stop()


def acceptor_fronting(upstream: str, run_id: str, tmp_path: Path) -> Iterator[AcceptorHandle]:
    """An acceptor with one CLIENT listener forwarding to `upstream` (host:port), history on;
    at teardown every history row must be one its event's definition allows."""
    handle = start_in_thread(
        {
            "listeners": "CLIENT://127.0.0.1:0",
            "listener.name.client.upstream": upstream,
            "metrics.port": "-1",
        },
        history_dir=tmp_path / "history",
        run_id=run_id,
    )
    yield handle
    try:
        assert nonconformant_rows(handle) == []
    finally:
        handle.stop()


@pytest.fixture
def fronted_acceptor(
    request: pytest.FixtureRequest, kafka_broker: Broker, tmp_path: Path
) -> Iterator[AcceptorHandle]:
    yield from acceptor_fronting(kafka_broker.bootstrap, request.node.name, tmp_path)


def read_until_ready(proc: Any, timeout_s: float) -> str:
    """A `harness broker` CLI's output up to its ``Ctrl-C to stop`` line (or its end, or the
    deadline): the startup lines the tests read addresses and pids from."""
    import time

    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip())
        if line.startswith("Ctrl-C to stop"):
            break
    return "\n".join(lines)


def pgid_gone(pgid: int, timeout_s: float = 10.0) -> bool:
    """Whether process group ``pgid`` (a JVM started in its own session) is gone in time."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False
