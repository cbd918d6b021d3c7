"""Well-behaved victims: long-lived KafkaProducer + KafkaConsumer that measure latency.

A storm is only half the story: the limits exist to keep *these* clients healthy.
Each user keeps one kafka-python producer and one consumer for the whole run (the
client pattern Kafka is built for), produces at a steady pace (acks from
``--acks``) and reads its own records back. Rows: ``request_ok``/``request_fail``
with ``latency_ms`` and ``detail.profile = "steady"`` — api_key 0 for produce
(send → ack), 1 for fetch (produce → consumed, end to end). Closed model: ``-u N``
victims, ``--steady-rate`` produces per second each.

kafka-python's own sockets (bootstrap, then one per broker, for each producer and
consumer) are recorded as every profile's connections (``connect_invoke`` …
``closed``, and responses carrying ``throttle_time_ms``) by
``loadprofiles.steady_conns``, so the client-side checks of a broker target see the
long-lived holders and the request throttles.

    locust -f loadprofiles/steady.py --headless -u 2 -r 2 -t 30s \
        --host kafka://127.0.0.1:9092 --topic harness-steady --run-dir runs/x
"""

from __future__ import annotations

import logging
import time
from typing import Any

from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import KafkaError, KafkaTimeoutError
from locust import User, task

from base.history.rows import ClientRequestFail, ClientRequestOk, ClientRequestOkDetail
from loadprofiles import steady_conns, webui  # noqa: F401  (webui: admission tab)
from loadprofiles.common import (
    closed_model_readiness,
    history,
    listen,
    prepare_topic,
    settings,
)
from loadprofiles.topics import payload

PRODUCE, FETCH = 0, 1
logging.getLogger("kafka").setLevel(logging.WARNING)  # its INFO lines drown Locust's output


def _options(parser: Any) -> None:
    parser.add_argument(
        "--steady-rate", type=float, default=5.0, help="produces per second per steady user"
    )


listen("init_command_line_parser", _options)


def security_kwargs(command_config: str) -> dict[str, Any]:
    """kafka-python's security keywords from ``--command-config`` (Kafka's client keys:
    ``security.protocol``, SASL JAAS, PEM stores); none for PLAINTEXT. Its bootstrap and
    client id are not taken: the phase's listener and the profile's client ids are."""
    if not command_config:
        return {}
    from pathlib import Path

    from base.security import clientprops

    kw = clientprops.kafka_python_config(clientprops.read(Path(command_config)))
    kw.pop("bootstrap_servers", None)
    kw.pop("client_id", None)
    return kw


#: the client id of the steady profile's rows
_ID = "harness-steady"


class SteadyUser(User):
    """One long-lived producer + consumer pair."""

    profile = "steady"
    _interval_s = 0.2
    _next_at = 0.0

    def wait_time(self) -> float:
        """Constant pacing at ``--steady-rate`` (a slow request shortens the next wait)."""
        now = time.monotonic()
        self._next_at = max(self._next_at + self._interval_s, now)
        return self._next_at - now

    def on_start(self) -> None:
        s = settings(self.environment, self.host)
        rate = self.environment.parsed_options.steady_rate
        if rate <= 0:
            raise ValueError(f"--steady-rate: {rate!r}: must be > 0")
        self._interval_s = 1.0 / rate
        self._next_at = time.monotonic()
        self.s = s
        self.hist = history(self.environment)
        secured = security_kwargs(s.command_config)
        if self.hist is not None and steady_conns._active is None:
            # one recorder per process (the history writer is per process)
            steady_conns.install()
            steady_conns.activate(
                steady_conns.ConnectionRecorder(
                    self.hist,
                    listener=s.listener,
                    principal=steady_conns.principal_of(secured),
                    brokers={(h, p): n for n, h, p in s.brokers},
                )
            )
        bootstrap = f"{s.host}:{s.port}"
        self.value = payload(s.payload_bytes, s.seed)
        self.producer = KafkaProducer(
            **secured,
            bootstrap_servers=bootstrap,
            acks="all" if s.acks == -1 else s.acks,
            linger_ms=0,
            client_id="harness-steady-producer",
            request_timeout_ms=int(s.request_timeout * 1000),
            max_block_ms=int(s.request_timeout * 1000),
        )
        self.consumer = KafkaConsumer(
            s.topic,
            **secured,
            bootstrap_servers=bootstrap,
            client_id="harness-steady-consumer",
            group_id=None,
            auto_offset_reset="latest",
            fetch_max_wait_ms=100,
            request_timeout_ms=int(max(s.request_timeout, 1.0) * 1000) + 1000,
        )

    def on_stop(self) -> None:
        for client in (getattr(self, "producer", None), getattr(self, "consumer", None)):
            if client is not None:
                try:
                    client.close(timeout=2) if isinstance(client, KafkaProducer) else client.close()
                except Exception:  # closing must not mask the run's result
                    pass

    def _row(
        self,
        ok: bool,
        api_key: int,
        latency_ms: float,
        reason: str = "",
        offset: int | None = None,
        error: str | None = None,
    ) -> None:
        if self.hist is None:
            return
        now, listener = time.monotonic_ns(), self.s.listener
        if ok:
            detail: ClientRequestOkDetail = {"profile": "steady", "offset": offset}
            self.hist.append(
                ClientRequestOk(
                    now,
                    listener=listener,
                    api_key=api_key,
                    client_id=_ID,
                    latency_ms=latency_ms,
                    detail=detail,
                )
            )
        else:
            self.hist.append(
                ClientRequestFail(
                    now,
                    listener=listener,
                    reason=reason or None,
                    api_key=api_key,
                    client_id=_ID,
                    latency_ms=latency_ms,
                    detail={"profile": "steady", "error": error},
                )
            )

    @task
    def produce_and_consume(self) -> None:
        start = time.monotonic_ns()
        name = "steady produce"
        try:
            meta = self.producer.send(self.s.topic, self.value).get(timeout=self.s.request_timeout)
            latency = (time.monotonic_ns() - start) / 1e6
            self._row(True, PRODUCE, latency, offset=meta.offset)
            self._fire(name, latency, None)
        except (KafkaError, KafkaTimeoutError) as exc:
            latency = (time.monotonic_ns() - start) / 1e6
            reason = "timeout" if isinstance(exc, KafkaTimeoutError) else "error"
            self._row(False, PRODUCE, latency, reason, error=type(exc).__name__)
            self._fire(name, latency, exc)
        start = time.monotonic_ns()
        try:
            batches = self.consumer.poll(timeout_ms=200)
        except KafkaError as exc:
            self._fire("steady fetch", (time.monotonic_ns() - start) / 1e6, exc)
            return
        now_ms = time.time() * 1000
        for records in batches.values():
            for record in records:
                e2e = max(0.0, now_ms - record.timestamp)
                self._row(True, FETCH, e2e, offset=record.offset)
                self._fire("steady end-to-end", e2e, None)

    def _fire(self, name: str, latency_ms: float, exc: BaseException | None) -> None:
        self.environment.events.request.fire(
            request_type="kafka",
            name=name,
            response_time=latency_ms,
            response_length=0,
            exception=exc,
            context={"profile": "steady"},
        )


listen("test_start", prepare_topic)


listen("init", closed_model_readiness)
