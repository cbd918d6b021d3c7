"""Make sure the load's topic exists before the load starts.

A produce storm must measure connection limits, not topic auto-creation races, so
the per-request profile creates its topic up front with CreateTopics (kafka-python's
protocol classes over the same client) and waits until it has a leader.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from kafka.protocol.admin.topics import CreateTopicsRequest

from base.history import rows
from loadprofiles.engine import EngineConfig
from loadprofiles.kafka_client import ClientError, KafkaConnection, Recorder
from loadprofiles.options import Settings
from loadprofiles.outcomes import Outcome, classify

TOPIC_ALREADY_EXISTS = 36
_setup_ids = itertools.count(1)


class TopicError(RuntimeError):
    """The topic could not be created or got no leader in time."""


def ensure_topic(
    host: str,
    port: int,
    topic: str,
    *,
    partitions: int = 1,
    replication_factor: int = 1,
    timeout_s: float = 30.0,
    history: Recorder | None = None,
    client_config: Mapping[str, str] | None = None,
    broker: int | None = None,
    listener: str | None = None,
) -> None:
    """Create ``topic`` (idempotent) and wait until its partitions have a leader.

    ``history``: where its connections are recorded (profile ``setup``), as every
    connection the load side makes is: the enforcer sees them too, and the checker
    explains each connection it saw by a client attempt (``client_acceptor_agreement``).

    ``broker``: a cluster's node id at host:port, named in the set-up connection's rows.

    ``client_config``: Kafka's client keys of a secured listener (TLS, SASL login): the
    topic is then made over `base.admin.client.KafkaWire`, which speaks them; its
    connection is recorded step by step (`SetupRows`), so Kafka's authentication counters
    are explained by client rows like every login of the load's.

    ``listener``: the listener's name, in the rows.
    """

    def create(version: int) -> Any:
        return _create(version, topic, partitions, replication_factor, timeout_s)

    def plain() -> str | None:
        config = EngineConfig(
            host=host, port=port, client_id="harness-setup", profile="setup", listener=listener
        )
        with KafkaConnection(config, history=history, broker=broker) as conn:
            conn.connect()
            conn.api_versions()
            version = conn.version_for(CreateTopicsRequest.API_KEY)
            created = conn.request(create(version), "CreateTopics")
            return _not_ready(topic, created, lambda: conn.metadata([topic]))

    def secured(props: Mapping[str, str]) -> str | None:
        from kafka.protocol.metadata import MetadataRequest

        from base.admin.client import KafkaWire

        rows = SetupRows(history, listener, broker)
        try:
            with KafkaWire(
                f"{host}:{port}", client_id="harness-setup", client_config=props, on_step=rows.step
            ) as w:
                created = w.request(create(w.version_for(CreateTopicsRequest)))
                rows.answered()
                why = _not_ready(
                    topic,
                    created,
                    lambda: w.request(
                        MetadataRequest(
                            version=w.version_for(MetadataRequest),
                            topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                            allow_auto_topic_creation=False,
                            include_cluster_authorized_operations=False,
                            include_topic_authorized_operations=False,
                        )
                    ),
                )
        except BaseException as exc:
            rows.closed(exc)
            raise
        rows.closed(None)
        return why

    from base.admin.client import AdminError

    deadline = time.monotonic() + timeout_s
    last: str | None = "no attempt"
    while time.monotonic() < deadline:
        try:
            last = plain() if not client_config else secured(client_config)
        except (ClientError, OSError, AdminError) as exc:
            last = str(exc)
        if last is None:
            return
        time.sleep(0.5)
    raise TopicError(f"topic {topic!r} at {host}:{port} not ready in {timeout_s} s: {last}")


#: the client id of the set-up connections' rows
_ID = "harness-setup"


class SetupRows:
    """The client rows of a set-up connection over `KafkaWire` (a secured listener), from
    the steps it reports: ``connect_invoke`` (its start) and ``connect_ok``, ``tls_start``
    and ``tls_done``, ``sasl_done``, ``ready`` at the first answer, ``closed``. A connection
    that failed before its TCP handshake gets ``connect_invoke``, ``connect_fail`` and
    ``closed`` without an address, as `KafkaConnection` records one."""

    def __init__(self, history: Recorder | None, listener: str | None, broker: int | None):
        self.history = history
        self.listener = listener
        self.broker = broker
        self.conn_id = f"setup-{os.getpid()}-{next(_setup_ids)}"
        self.invoke_ns = self.phase_ns = time.monotonic_ns()
        self.address: tuple[str, int] | None = None
        self.steps: list[str] = []
        self.ready_ms: float | None = None

    def _put(self, row: rows.ClientRow) -> None:
        if self.history is not None:
            self.history.append(row)

    def _ids(self) -> rows.ClientIds:
        """The identity columns of this connection's rows (no address before connected)."""
        ip, port = self.address or (None, None)
        return rows.client_ids(self.conn_id, self.listener, ip, port)

    def _since(self, start_ns: int, now: int) -> float:
        return (now - start_ns) / 1e6

    def step(self, name: str, sock: Any) -> None:
        now = time.monotonic_ns()
        self.steps.append(name)
        if name == "connected":
            ip, port = sock.getsockname()[:2]
            self.address = (str(ip), int(port))
            detail: rows.ClientConnectInvokeDetail = {"profile": "setup"}
            if self.broker is not None:
                detail["broker"] = self.broker
            ids, since = self._ids(), self._since(self.invoke_ns, now)
            self._put(rows.ClientConnectInvoke(self.invoke_ns, *ids, client_id=_ID, detail=detail))
            self._put(rows.ClientConnectOk(now, *ids, client_id=_ID, latency_ms=since))
        elif name == "tls_start":
            since = self._since(self.invoke_ns, now)
            self._put(rows.ClientTlsStart(now, *self._ids(), client_id=_ID, latency_ms=since))
        elif name == "tls_done":
            ms, since = self._since(self.phase_ns, now), self._since(self.invoke_ns, now)
            self._put(
                rows.ClientTlsDone(
                    now,
                    *self._ids(),
                    client_id=_ID,
                    latency_ms=since,
                    detail={"tls_ms": round(ms, 3)},
                )
            )
        elif name == "sasl_done":
            ms, since = self._since(self.phase_ns, now), self._since(self.invoke_ns, now)
            self._put(
                rows.ClientSaslDone(
                    now,
                    *self._ids(),
                    client_id=_ID,
                    latency_ms=since,
                    detail={"sasl_ms": round(ms, 3)},
                )
            )
        self.phase_ns = now

    def answered(self) -> None:
        """The first response (CreateTopics) arrived."""
        if self.ready_ms is None:
            now = time.monotonic_ns()
            self.ready_ms = self._since(self.invoke_ns, now)
            self._put(rows.ClientReady(now, *self._ids(), client_id=_ID, latency_ms=self.ready_ms))

    def closed(self, exc: BaseException | None) -> None:
        """The connection ended: by us (``exc`` None) or by ``exc`` at some step."""
        now = time.monotonic_ns()
        if "connected" not in self.steps:
            ids, since = self._ids(), self._since(self.invoke_ns, now)
            self._put(
                rows.ClientConnectInvoke(
                    self.invoke_ns, *ids, client_id=_ID, detail={"profile": "setup"}
                )
            )
            self._put(
                rows.ClientConnectFail(now, *ids, reason="refused", client_id=_ID, latency_ms=since)
            )
            outcome, reason = Outcome.REFUSED, "refused"
        elif exc is None:
            outcome, reason = Outcome.SERVED, "done"
        elif "tls_start" in self.steps and "tls_done" not in self.steps:
            outcome, reason = Outcome.TLS_FAILED, "tls"
        elif "sasl_fail" in self.steps:
            outcome, reason = Outcome.AUTH_FAILED, "auth"
        else:
            reason = "eof" if isinstance(exc, ConnectionError) else "reset"
            answered = int(self.ready_ms is not None)
            outcome = classify(
                reason, responses=answered, ready_ms=self.ready_ms, delayed_threshold_ms=1e12
            )
        closed: rows.ClientClosedDetail = {"outcome": outcome.value, "profile": "setup"}
        if exc is not None:
            closed["error"] = f"{type(exc).__name__}: {exc}"[:200]
        since = self._since(self.invoke_ns, now)
        self._put(
            rows.ClientClosed(
                now, *self._ids(), reason=reason, client_id=_ID, latency_ms=since, detail=closed
            )
        )


def _not_ready(topic: str, created: Any, metadata: Callable[[], Any]) -> str | None:
    """Why the topic is not usable yet (None: created or there, every partition led)."""
    codes = {t.error_code for t in created.topics}
    if codes - {0, TOPIC_ALREADY_EXISTS}:
        return f"CreateTopics error codes {sorted(codes)}"
    meta = metadata()
    parts = [p for t in meta.topics if t.name == topic for p in t.partitions]
    if parts and all(p.error_code == 0 and p.leader_id >= 0 for p in parts):
        return None
    return "no leader yet"


def _create(version: int, topic: str, partitions: int, rf: int, timeout_s: float) -> Any:
    spec = CreateTopicsRequest.CreatableTopic(
        name=topic, num_partitions=partitions, replication_factor=rf, assignments=[], configs=[]
    )
    return CreateTopicsRequest(
        version=version, topics=[spec], timeout_ms=int(timeout_s * 1000), validate_only=False
    )


def ensure_load_topic(s: Settings, history: Recorder | None) -> None:
    """``--topic`` of a producing profile, created before any load (its connection
    recorded as profile ``setup``); a ValueError naming the option when it cannot be."""
    from pathlib import Path

    from base.security import clientprops

    try:
        props = clientprops.read(Path(s.command_config)) if s.command_config else None
        ensure_topic(
            s.host,
            s.port,
            s.topic,
            replication_factor=s.replication_factor,
            broker=next((n for n, h, p in s.brokers if (h, p) == (s.host, s.port)), None),
            timeout_s=20.0,
            history=history,
            client_config=props,
            listener=s.listener,
        )
    except (TopicError, OSError) as exc:
        raise ValueError(f"--topic: {exc}") from None


def payload(size: int, seed: int) -> bytes:
    """A deterministic record value of ``size`` bytes."""
    base = f"harness-{seed}-".encode()
    return (base * (size // len(base) + 1))[:size]
