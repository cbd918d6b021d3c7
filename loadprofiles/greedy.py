"""A client that ignores ``throttle_time_ms`` and pipelines: what request quotas exist for.

Kafka's own clients since KIP-219 wait out a response's ``throttle_time_ms`` before
sending to that broker again, so with them a broker that forgot to mute a throttled
channel looks exactly like one that did: the client holds itself back. Clients from
before KIP-219, and hostile ones, do not. Each user here keeps one connection and
``--greedy-in-flight`` Metadata requests outstanding on it at all times, sending the next
the moment a response arrives, whatever its throttle time. Only the broker's mute
(KIP-219: nothing more is read from a throttled channel until its throttle ends) holds
it back, and that is what ``request_throttle_mutes`` judges from these rows.

Rows (``detail.profile = "greedy"`` on the events that carry it): ``connect_invoke``/
``connect_ok``, ``ready`` (the ApiVersions answer), ``request_ok`` per Metadata response
(``latency_ms`` since that request was sent, ``detail.throttle_time_ms`` when non-zero),
``closed`` when the user ends its connection (every ``--greedy-hold-s``, then it
reconnects) or the broker does.
Closed model: ``-u N`` connections, from ``--source-ips`` round-robin.

On a secured listener (``--command-config``, Kafka's client keys) each connection does TLS
and the SASL login first, through the harness's own blocking client
(`base.admin.client.KafkaWire`), recorded as the engine records them (``tls_start``,
``tls_done``/``tls_fail``, ``sasl_done``/``sasl_fail`` with the principal), then pipelines
on the secured socket as on PLAINTEXT.

    locust -f loadprofiles/greedy.py --headless -u 2 -r 2 -t 30s \\
        --host kafka://127.0.0.1:9092 --run-dir runs/x --greedy-in-flight 4
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import time
from collections import deque
from pathlib import Path
from typing import Any

from locust import User, task

from base.admin.client import AdminError, KafkaWire
from base.history import rows
from base.security import clientprops
from base.security.client import SASL_AUTHENTICATE_KEY
from loadprofiles import webui  # noqa: F401  (webui: admission tab)
from loadprofiles.common import closed_model_readiness, history, listen, settings
from loadprofiles.engine_frames import (
    API_VERSIONS_KEY,
    METADATA_KEY,
    METADATA_MAX_VERSION,
    api_versions_frame,
    metadata_frame,
    metadata_max_version,
    with_correlation_id,
)
from loadprofiles.outcomes import Outcome
from loadprofiles.steady_conns import principal_of

PROFILE = "greedy"
CLIENT_ID = "harness-greedy"
log = logging.getLogger("loadprofiles.greedy")


_conn_ids = itertools.count(1)
_users = itertools.count(0)


def _options(parser: Any) -> None:
    parser.add_argument(
        "--greedy-in-flight",
        type=int,
        default=4,
        help="greedy: Metadata requests kept outstanding on each connection",
    )
    parser.add_argument(
        "--greedy-hold-s",
        type=float,
        default=5.0,
        help="greedy: seconds each connection is kept before it is closed and reopened",
    )


listen("init_command_line_parser", _options)


def metadata_throttle_ms(frame: bytes, version: int) -> int:
    """``throttle_time_ms`` of a Metadata response frame (v3+; flexible from v9: the
    response header then carries a tagged-field byte before the body)."""
    at = 9 if version >= 9 else 8
    if len(frame) < at + 4:
        return 0
    return int.from_bytes(frame[at : at + 4], "big", signed=True)


class _Closed(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class GreedyUser(User):
    """One connection at a time, ``--greedy-in-flight`` requests always outstanding."""

    profile = PROFILE

    def wait_time(self) -> float:
        return 0.0

    def on_start(self) -> None:
        o = self.environment.parsed_options
        self.s = settings(self.environment, self.host)
        self.hist = history(self.environment)
        if o.greedy_in_flight < 1:
            raise ValueError(f"--greedy-in-flight: {o.greedy_in_flight!r}: must be >= 1")
        if not o.greedy_hold_s > 0:
            raise ValueError(f"--greedy-hold-s: {o.greedy_hold_s!r}: must be > 0")
        self.in_flight = int(o.greedy_in_flight)
        self.hold_s = float(o.greedy_hold_s)
        pool = self.s.source_ips or ("127.0.0.1",)
        self.source_ip = pool[next(_users) % len(pool)]
        #: a cluster: the node id of the broker it holds its connection to (its --host),
        #: named on every connect_invoke so the per-broker rules can judge it
        self.node = next(
            (n for n, h, p in self.s.brokers if (h, p) == (self.s.host, self.s.port)), None
        )
        #: Kafka's client keys of a secured listener (None: PLAINTEXT), and who it logs in as
        self.security: dict[str, str] | None = None
        self.principal: str | None = None
        if self.s.command_config:
            self.security = clientprops.read(Path(self.s.command_config))
            self.security.pop("bootstrap.servers", None)
            self.principal = principal_of(clientprops.kafka_python_config(self.security))

    def _put(self, row: rows.ClientRow) -> None:
        if self.hist is not None:
            self.hist.append(row)

    def _ids(self, conn: dict[str, Any]) -> rows.ClientIds:
        """The identity columns of `conn`'s rows (a dict: id, ip, port)."""
        return rows.client_ids(conn["id"], self.s.listener, conn["ip"], conn["port"])

    def _invoked(self, conn: dict[str, Any], invoke: int) -> None:
        detail: rows.ClientConnectInvokeDetail = {"profile": PROFILE}
        if self.node is not None:
            detail["broker"] = self.node
        self._put(
            rows.ClientConnectInvoke(invoke, *self._ids(conn), client_id=CLIENT_ID, detail=detail)
        )

    def _connect_failed(self, conn: dict[str, Any], since: float, reason: str, why: str) -> None:
        self._put(
            rows.ClientConnectFail(
                time.monotonic_ns(),
                *self._ids(conn),
                reason=reason,
                client_id=CLIENT_ID,
                latency_ms=since,
                detail={"profile": PROFILE, "why": why},
            )
        )

    def _closed(self, conn: dict[str, Any], since: float, reason: str, outcome: Outcome) -> None:
        self._put(
            rows.ClientClosed(
                time.monotonic_ns(),
                *self._ids(conn),
                reason=reason,
                client_id=CLIENT_ID,
                latency_ms=since,
                detail={"outcome": outcome.value, "profile": PROFILE},
            )
        )

    def _secured(self, conn: dict[str, Any], invoke: int) -> socket.socket | None:
        """Connect, TLS and log in with the listener's client keys (`KafkaWire`), each step
        a row; the ready socket, or None after a failure (its rows written)."""
        steps: dict[str, int] = {}

        def ms(since: int) -> float:
            return (time.monotonic_ns() - since) / 1e6

        def step(name: str, sock: socket.socket) -> None:
            now = time.monotonic_ns()
            steps[name] = now
            ids = self._ids(conn)
            if name == "connected":
                conn["port"] = sock.getsockname()[1]
                self._invoked(conn, invoke)
                self._put(
                    rows.ClientConnectOk(
                        now, *self._ids(conn), client_id=CLIENT_ID, latency_ms=ms(invoke)
                    )
                )
            elif name == "tls_start":
                self._put(
                    rows.ClientTlsStart(now, *ids, client_id=CLIENT_ID, latency_ms=ms(invoke))
                )
            elif name == "tls_done":
                self._put(
                    rows.ClientTlsDone(
                        now,
                        *ids,
                        client_id=CLIENT_ID,
                        latency_ms=ms(invoke),
                        detail={"tls_ms": (now - steps["tls_start"]) / 1e6},
                    )
                )
            elif name == "sasl_done":
                sasl_ms = (now - steps.get("tls_done", steps["connected"])) / 1e6
                self._put(
                    rows.ClientSaslDone(
                        now,
                        *ids,
                        api_key=SASL_AUTHENTICATE_KEY,
                        client_id=CLIENT_ID,
                        latency_ms=ms(invoke),
                        detail={"sasl_ms": sasl_ms, "principal": self.principal},
                    )
                )
            elif name == "sasl_fail":
                sasl_ms = (now - steps.get("tls_done", steps["connected"])) / 1e6
                self._put(
                    rows.ClientSaslFail(
                        now,
                        *ids,
                        reason="auth",
                        api_key=SASL_AUTHENTICATE_KEY,
                        client_id=CLIENT_ID,
                        latency_ms=ms(invoke),
                        detail={"sasl_ms": sasl_ms},
                    )
                )

        try:
            wire = KafkaWire(
                f"{self.s.host}:{self.s.port}",
                source_ip=self.source_ip,
                timeout=self.s.connect_timeout,
                client_id=CLIENT_ID,
                client_config=self.security,
                on_step=step,
            )
        except (OSError, AdminError) as exc:
            if "connected" not in steps:
                conn["port"] = conn["port"] or 0
                self._invoked(conn, invoke)
                reason = "timeout" if isinstance(exc, TimeoutError) else "refused"
                self._connect_failed(conn, ms(invoke), reason, repr(exc))
            elif "tls_start" in steps and "tls_done" not in steps:
                self._put(
                    rows.ClientTlsFail(
                        time.monotonic_ns(),
                        *self._ids(conn),
                        reason="tls",
                        client_id=CLIENT_ID,
                        latency_ms=ms(invoke),
                        detail={"error": str(exc)[:200]},
                    )
                )
            if "connected" in steps:
                self._closed(conn, ms(invoke), "auth", Outcome.EOF_AFTER_ACCEPT)
            time.sleep(0.5)
            return None
        return wire.sock

    @task
    def hold_one_connection(self) -> None:
        conn: dict[str, Any] = {
            "id": f"greedy-{os.getpid()}-{next(_conn_ids)}",
            "ip": self.source_ip,
            "port": None,
        }
        invoke = time.monotonic_ns()
        connect = self._plain if self.security is None else self._secured
        sock = connect(conn, invoke)
        if sock is None:
            return
        try:
            sock.settimeout(self.s.request_timeout)
            reason = self._pipeline(sock, conn, invoke)
        finally:
            sock.close()
        outcome = Outcome.SERVED if reason == "done" else Outcome.EOF_AFTER_ACCEPT
        self._closed(conn, (time.monotonic_ns() - invoke) / 1e6, reason, outcome)

    def _plain(self, conn: dict[str, Any], invoke: int) -> socket.socket | None:
        """Connect from this user's address, each step a row; the socket, or None after a
        refused or timed-out connect (its row written)."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind((self.source_ip, 0))
            conn["port"] = sock.getsockname()[1]
            self._invoked(conn, time.monotonic_ns())
            sock.settimeout(self.s.connect_timeout)
            try:
                sock.connect((self.s.host, self.s.port))
            except OSError as exc:
                reason = "timeout" if isinstance(exc, TimeoutError) else "refused"
                self._connect_failed(conn, (time.monotonic_ns() - invoke) / 1e6, reason, repr(exc))
                sock.close()
                time.sleep(0.5)
                return None
            now = time.monotonic_ns()
            self._put(
                rows.ClientConnectOk(
                    now, *self._ids(conn), client_id=CLIENT_ID, latency_ms=(now - invoke) / 1e6
                )
            )
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except BaseException:
            sock.close()
            raise
        return sock

    def _read_frame(self, sock: socket.socket, buf: bytearray) -> bytes:
        while True:
            if len(buf) >= 4:
                size = int.from_bytes(buf[:4], "big")
                if len(buf) >= 4 + size:
                    frame = bytes(buf[: 4 + size])
                    del buf[: 4 + size]
                    return frame
            try:
                data = sock.recv(65536)
            except TimeoutError:
                raise _Closed("timeout") from None
            except OSError:
                raise _Closed("reset") from None
            if not data:
                raise _Closed("eof")
            buf += data

    def _pipeline(self, sock: socket.socket, conn: dict[str, Any], invoke: int) -> str:
        """ApiVersions, then Metadata requests kept ``in_flight`` deep until the hold ends;
        the close reason."""
        buf = bytearray()
        cid = itertools.count(1)
        try:
            first = next(cid)
            sent = time.monotonic_ns()
            sock.sendall(with_correlation_id(api_versions_frame(CLIENT_ID), first))
            frame = self._read_frame(sock, buf)
            now = time.monotonic_ns()
            self._put(
                rows.ClientReady(
                    now,
                    *self._ids(conn),
                    api_key=API_VERSIONS_KEY,
                    client_id=CLIENT_ID,
                    latency_ms=(now - invoke) / 1e6,
                )
            )
            version = min(metadata_max_version(frame) or METADATA_MAX_VERSION, METADATA_MAX_VERSION)
            meta = metadata_frame(CLIENT_ID, version)
            outstanding: deque[tuple[int, int]] = deque()
            end = now + int(self.hold_s * 1e9)
            while True:
                now = time.monotonic_ns()
                while now < end and len(outstanding) < self.in_flight:
                    c = next(cid)
                    sock.sendall(with_correlation_id(meta, c))
                    outstanding.append((c, time.monotonic_ns()))
                if not outstanding:
                    return "done"
                frame = self._read_frame(sock, buf)
                now = time.monotonic_ns()
                c, sent = outstanding.popleft()
                if int.from_bytes(frame[4:8], "big") != c:
                    return "reset"
                throttle = metadata_throttle_ms(frame, version)
                detail: rows.ClientRequestOkDetail = {"profile": PROFILE}
                if throttle:
                    detail["throttle_time_ms"] = throttle
                self._put(
                    rows.ClientRequestOk(
                        now,
                        *self._ids(conn),
                        api_key=METADATA_KEY,
                        client_id=CLIENT_ID,
                        latency_ms=(now - sent) / 1e6,
                        bytes=len(frame),
                        detail=detail,
                    )
                )
        except _Closed as closed:
            return closed.reason
        except OSError:
            return "reset"


listen("init", closed_model_readiness)
