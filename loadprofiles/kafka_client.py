"""A gevent-friendly Kafka connection client that classifies how each connection ended.

Locust's custom-client pattern (``locust/contrib``): one raw socket per connection,
requests framed and parsed by kafka-python's protocol classes, and every request
reported through an ``on_request`` hook with the signature of Locust's
``events.request.fire`` so stats, CSV and HTML reports work. The module imports
neither Locust nor gevent: under Locust the stdlib socket is already cooperative
(monkey-patched), and in unit tests it is a plain blocking socket.

Why a client of our own instead of KafkaProducer: a connection-limit test needs to
see *how* the broker (or the acceptor) refused — TCP refused, reset, EOF right after
accept (count limit, throttle-close), served only after a delay (rate quota) — per
connection and with the exact source address, and KafkaProducer hides all of that
behind retries and a connection pool.
"""

from __future__ import annotations

import errno
import itertools
import os
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from kafka.protocol.admin.topics import CreateTopicsRequest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.parser import KafkaProtocol
from kafka.protocol.producer import ProduceRequest
from kafka.record.memory_records import MemoryRecordsBuilder

from loadprofiles import proxy_header

#: Linux: choose the source port at connect() time (4-tuple unique), not at bind(),
#: so binding a source IP does not cap one IP at ~28k ports in TIME_WAIT
IP_BIND_ADDRESS_NO_PORT = getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24)

#: the highest request versions this client encodes (Produce v13 addresses topics by id)
MAX_VERSIONS = {
    ApiVersionsRequest.API_KEY: 3,
    MetadataRequest.API_KEY: 12,
    ProduceRequest.API_KEY: 12,
    CreateTopicsRequest.API_KEY: 7,
}
_API_NAMES = {ApiVersionsRequest.API_KEY: "ApiVersions", MetadataRequest.API_KEY: "Metadata"}
_API_NAMES[ProduceRequest.API_KEY] = "Produce"

_FDS_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
_PORTS_ERRNOS = {errno.EADDRNOTAVAIL, errno.EADDRINUSE}
_RESET_ERRNOS = {errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED}

_ids = itertools.count(1)


class Outcome(StrEnum):
    """How one connection ended, from the client's side (``closed.detail.outcome``)."""

    SERVED = "served"
    DELAYED_SERVED = "delayed_served"
    EOF_AFTER_ACCEPT = "eof_after_accept"
    REFUSED = "refused"
    RESET = "reset"
    TIMEOUT = "timeout"


class Recorder(Protocol):
    """What the client needs of ``harness.history.HistoryWriter``."""

    def record(
        self,
        event: str,
        *,
        ts_us: int | None = None,
        mono_ns: int | None = None,
        detail: Any = None,
        **fields: Any,
    ) -> int: ...


#: Locust's ``events.request.fire`` keyword signature
RequestHook = Callable[..., None]


class ClientError(Exception):
    """Base of the client's failures; ``reason`` is the history ``reason`` value."""

    reason: str = "error"


class NotOffered(ClientError):
    """The generator could not start the attempt (``connect_fail reason=not_offered``)."""

    reason = "not_offered"

    def __init__(self, cause: str, message: str) -> None:
        super().__init__(f"not offered ({cause}): {message}")
        self.cause = cause


class ConnectFailed(ClientError):
    """TCP connect did not complete: ``refused``, ``timeout`` or ``reset``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"connect {reason}: {message}")
        self.reason = reason


class RequestFailed(ClientError):
    """A request got no response: ``eof`` (closed after accept), ``reset`` or ``timeout``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"request {reason}: {message}")
        self.reason = reason


@dataclass(frozen=True)
class ClientConfig:
    """Where and how to connect; one per profile, shared by all its connections."""

    host: str
    port: int
    connect_timeout_s: float = 5.0
    request_timeout_s: float = 10.0
    #: a first response slower than this (since invoke) counts as delayed then served
    delayed_threshold_ms: float = 250.0
    client_id: str = "harness-load"
    profile: str = ""
    listener: str | None = None
    proxy_protocol: str = "off"
    #: a cluster: the node id of the broker at host:port (each ``connect_invoke`` names it)
    broker: int | None = None

    def __post_init__(self) -> None:
        if self.proxy_protocol not in proxy_header.VERSIONS:
            raise ValueError(
                f"proxy-protocol={self.proxy_protocol!r}: expected one of "
                f"{', '.join(proxy_header.VERSIONS)}"
            )
        for key in ("connect_timeout_s", "request_timeout_s"):
            if getattr(self, key) <= 0:
                raise ValueError(f"{key}={getattr(self, key)!r}: must be > 0")


@dataclass
class ConnectionResult:
    """What happened to one connection; the profile turns it into stats."""

    outcome: Outcome | None = None
    reason: str = ""
    client_ip: str | None = None
    client_port: int | None = None
    sock_ip: str | None = None
    sock_port: int | None = None
    connect_ms: float | None = None
    ready_ms: float | None = None
    eof_ms: float | None = None
    responses: int = 0
    errors: list[str] = field(default_factory=list)


def _ms_since(t0_ns: int) -> float:
    return (time.monotonic_ns() - t0_ns) / 1e6


class KafkaConnection:
    """One Kafka connection: ``connect()``, requests, ``close()``; history rows as it goes.

    ``source_ip`` binds the local address (port chosen by the kernel);
    ``proxy_client_ip`` sends a PROXY header claiming that client address (the
    header's source port is the socket's own port, so (client_ip, client_port)
    stays unique and joins the acceptor's rows).
    """

    def __init__(
        self,
        config: ClientConfig,
        *,
        source_ip: str | None = None,
        proxy_client_ip: str | None = None,
        history: Recorder | None = None,
        on_request: RequestHook | None = None,
        intended_mono_ns: int | None = None,
        conn_id: str | None = None,
    ) -> None:
        self.config = config
        self.source_ip = source_ip
        self.proxy_client_ip = proxy_client_ip
        self.history = history
        self.on_request = on_request
        self.intended_mono_ns = intended_mono_ns
        self.conn_id = conn_id or f"c{os.getpid()}-{next(_ids)}"
        self.result = ConnectionResult()
        self.versions: dict[int, tuple[int, int]] = {}
        self._sock: socket.socket | None = None
        self._proto = KafkaProtocol(client_id=config.client_id)
        self._invoke_ns = 0
        self._closed = False

    # -- history -----------------------------------------------------------------------
    def _row(self, event: str, *, mono_ns: int | None = None, **fields: Any) -> None:
        if self.history is None:
            return
        r = self.result
        self.history.record(
            event,
            mono_ns=mono_ns,
            conn_id=self.conn_id,
            listener=self.config.listener,
            client_ip=r.client_ip,
            client_port=r.client_port,
            sock_ip=r.sock_ip,
            sock_port=r.sock_port,
            client_id=self.config.client_id,
            **fields,
        )

    def _fire(self, name: str, start_ns: int, length: int, exc: BaseException | None) -> None:
        if self.on_request is not None:
            self.on_request(
                request_type="kafka",
                name=name,
                response_time=_ms_since(start_ns),
                response_length=length,
                exception=exc,
                context={"profile": self.config.profile, "conn_id": self.conn_id},
            )

    # -- connect -----------------------------------------------------------------------
    def connect(self) -> None:
        """Open the TCP connection (and send the PROXY header).

        Raises NotOffered (no ``connect_invoke`` row was written: the arrival was
        never offered), or ConnectFailed (``connect_invoke`` + ``connect_fail`` +
        ``closed`` rows written).
        """
        cfg = self.config
        try:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        except OSError as exc:
            raise self._not_offered(exc) from exc
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.source_ip:
                try:
                    sock.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
                except OSError:
                    pass  # not Linux: the kernel picks the port at bind time
                sock.bind((self.source_ip, 0))
        except OSError as exc:
            sock.close()
            raise self._not_offered(exc) from exc
        sock.settimeout(cfg.connect_timeout_s)
        self._invoke_ns = time.monotonic_ns()
        invoke_ts_us = time.time_ns() // 1000
        failure: ConnectFailed | None = None
        try:
            sock.connect((cfg.host, cfg.port))
        except TimeoutError:
            failure = ConnectFailed("timeout", f"no handshake in {cfg.connect_timeout_s} s")
        except ConnectionRefusedError as exc:
            failure = ConnectFailed("refused", str(exc))
        except OSError as exc:
            if exc.errno in _PORTS_ERRNOS or exc.errno in _FDS_ERRNOS:
                sock.close()
                raise self._not_offered(exc) from exc
            reason = "reset" if exc.errno in _RESET_ERRNOS else "refused"
            failure = ConnectFailed(reason, f"{exc.strerror or exc} (errno {exc.errno})")
        r = self.result
        try:
            r.sock_ip, r.sock_port = sock.getsockname()[:2]
        except OSError:
            r.sock_ip, r.sock_port = self.source_ip, None
        if r.sock_port == 0:
            r.sock_port = None
        r.client_ip, r.client_port = (self.proxy_client_ip or r.sock_ip), r.sock_port
        detail: dict[str, Any] = {"profile": cfg.profile}
        if self.intended_mono_ns is not None:
            detail["intended_mono_ns"] = self.intended_mono_ns
        if cfg.proxy_protocol != "off":
            detail["proxy_protocol"] = cfg.proxy_protocol
        if cfg.broker is not None:
            detail["broker"] = cfg.broker
        if self.history is not None:
            self._row_at("connect_invoke", self._invoke_ns, invoke_ts_us, detail)
        if failure is not None:
            sock.close()
            r.reason = failure.reason
            r.outcome = Outcome(failure.reason)
            self._row("connect_fail", reason=failure.reason, latency_ms=_ms_since(self._invoke_ns))
            self._fire("connect", self._invoke_ns, 0, failure)
            self._finish(failure.reason)
            raise failure
        r.connect_ms = _ms_since(self._invoke_ns)
        self._sock = sock
        self._row("connect_ok", latency_ms=r.connect_ms)
        self._fire("connect", self._invoke_ns, 0, None)
        if cfg.proxy_protocol != "off":
            assert r.client_ip is not None and r.client_port is not None
            peer_ip, peer_port = sock.getpeername()[:2]
            header = proxy_header.encode(
                cfg.proxy_protocol, r.client_ip, r.client_port, peer_ip, peer_port
            )
            self._send(header, "PROXY")

    def _row_at(self, event: str, mono_ns: int, ts_us: int, detail: dict[str, Any]) -> None:
        assert self.history is not None
        r = self.result
        self.history.record(
            event,
            ts_us=ts_us,
            mono_ns=mono_ns,
            detail=detail,
            conn_id=self.conn_id,
            listener=self.config.listener,
            client_ip=r.client_ip,
            client_port=r.client_port,
            sock_ip=r.sock_ip,
            sock_port=r.sock_port,
            client_id=self.config.client_id,
        )

    def _not_offered(self, exc: OSError) -> NotOffered:
        if exc.errno in _PORTS_ERRNOS:
            cause = "ports"
        elif exc.errno in _FDS_ERRNOS:
            cause = "fds"
        else:
            cause = "cpu"
        return NotOffered(cause, f"{exc.strerror or exc} (errno {exc.errno})")

    # -- requests ----------------------------------------------------------------------
    def version_for(self, api_key: int) -> int:
        """The highest version both sides speak (before ApiVersions: our maximum)."""
        ours = MAX_VERSIONS[api_key]
        theirs = self.versions.get(api_key)
        if theirs is None:
            return ours
        lo, hi = theirs
        if hi < lo or min(ours, hi) < lo:
            raise RequestFailed(
                "unsupported", f"api {api_key}: broker {lo}..{hi}, client <= {ours}"
            )
        return min(ours, hi)

    def request(self, request: Any, name: str | None = None) -> Any:
        """Send one request, wait for its response; row ``request_ok``/``request_fail``.

        A response carrying a Kafka error code is still ``request_ok`` (the
        connection was served) with ``detail.error_code``; the Locust event fails.
        """
        if self._sock is None:
            raise RuntimeError("request() before a successful connect()")
        api_key = request.API_KEY
        name = name or _API_NAMES.get(api_key, str(api_key))
        start = time.monotonic_ns()
        self._proto.send_request(request)
        data = self._proto.send_bytes()
        try:
            self._send(data, name)
            response, nbytes = self._receive(name, start)
        except RequestFailed as exc:
            self._request_failed(exc, api_key, start)
            self._fire(name, start, 0, exc)
            raise
        r = self.result
        latency = _ms_since(start)
        detail: dict[str, Any] = {}
        error_code = _error_code(response)
        if error_code:
            detail["error_code"] = error_code
        throttle = getattr(response, "throttle_time_ms", 0) or 0
        if throttle:
            detail["throttle_time_ms"] = throttle
        r.responses += 1
        if r.ready_ms is None:
            r.ready_ms = _ms_since(self._invoke_ns)
            self._row("ready", latency_ms=r.ready_ms, api_key=api_key)
        self._row(
            "request_ok",
            api_key=api_key,
            latency_ms=latency,
            bytes=nbytes,
            detail=detail or None,  # only when there is something to say: json costs CPU
        )
        err = None if not error_code else RequestError(name, error_code)
        if err is not None:
            r.errors.append(str(err))
        self._fire(name, start, nbytes, err)
        return response

    def _send(self, data: bytes, name: str) -> None:
        assert self._sock is not None
        try:
            self._sock.settimeout(self.config.request_timeout_s)
            self._sock.sendall(data)
        except TimeoutError:
            raise RequestFailed("timeout", f"{name}: send timed out") from None
        except OSError as exc:
            # the peer closed first: sending into a closed socket resets
            reason = "reset" if exc.errno in _RESET_ERRNOS else "eof"
            raise RequestFailed(reason, f"{name}: send failed: {exc}") from None

    def _receive(self, name: str, start_ns: int) -> tuple[Any, int]:
        assert self._sock is not None
        deadline = start_ns + int(self.config.request_timeout_s * 1e9)
        total = 0
        while True:
            left = (deadline - time.monotonic_ns()) / 1e9
            if left <= 0:
                raise RequestFailed(
                    "timeout", f"{name}: no response in {self.config.request_timeout_s} s"
                )
            self._sock.settimeout(left)
            try:
                chunk = self._sock.recv(65536)
            except TimeoutError:
                continue
            except OSError as exc:
                if exc.errno in _RESET_ERRNOS:
                    raise RequestFailed("reset", f"{name}: {exc}") from None
                raise RequestFailed("reset", f"{name}: recv failed: {exc}") from None
            if not chunk:
                raise RequestFailed("eof", f"{name}: connection closed by the peer")
            total += len(chunk)
            responses = self._proto.receive_bytes(chunk)
            if responses:
                return responses[0][1], total

    def _request_failed(self, exc: RequestFailed, api_key: int, start_ns: int) -> None:
        r = self.result
        r.reason = exc.reason
        if exc.reason in ("eof", "reset") and r.eof_ms is None:  # when the close arrived
            r.eof_ms = _ms_since(self._invoke_ns)
        self._row(
            "request_fail",
            api_key=api_key,
            reason=exc.reason,
            latency_ms=_ms_since(start_ns),
        )

    def api_versions(self) -> Any:
        """ApiVersions (the first request any client sends); learns the broker's ranges."""
        request = ApiVersionsRequest(
            version=self.version_for(ApiVersionsRequest.API_KEY),
            client_software_name="harness-loadprofiles",
            client_software_version="0.1.0",
        )
        response = self.request(request)
        if not _error_code(response):
            self.versions = {v.api_key: (v.min_version, v.max_version) for v in response.api_keys}
        return response

    def metadata(self, topics: Iterable[str] | None = None, *, auto_create: bool = False) -> Any:
        """Metadata for ``topics`` (None: no topics, just brokers and cluster id)."""
        names = list(topics or [])
        request = MetadataRequest(
            version=self.version_for(MetadataRequest.API_KEY),
            topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in names],
            allow_auto_topic_creation=auto_create,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
        return self.request(request)

    def produce(
        self,
        topic: str,
        value: bytes,
        *,
        acks: int = 1,
        partition: int = 0,
        key: bytes | None = None,
    ) -> Any:
        """Produce one record (``acks`` 1 or -1 = all) in a v2 record batch."""
        builder = MemoryRecordsBuilder(2, 0, 1 << 20)
        builder.append(int(time.time() * 1000), key, value, [])
        builder.close()
        topic_data = ProduceRequest.TopicProduceData
        request = ProduceRequest(
            version=self.version_for(ProduceRequest.API_KEY),
            transactional_id=None,
            acks=acks,
            timeout_ms=int(self.config.request_timeout_s * 1000),
            topic_data=[
                topic_data(
                    name=topic,
                    partition_data=[
                        topic_data.PartitionProduceData(index=partition, records=builder.buffer())
                    ],
                )
            ],
        )
        return self.request(request, "Produce acks=all" if acks == -1 else f"Produce acks={acks}")

    # -- close -------------------------------------------------------------------------
    def close(self) -> Outcome:
        """Close (if open), classify the connection and write its ``closed`` row."""
        if self._closed:
            assert self.result.outcome is not None
            return self.result.outcome
        reason = self.result.reason or "done"
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None
        return self._finish(reason)

    def abort(self) -> None:
        """Drop the connection without a ``closed`` row: the run stopped mid-session.

        Its outcome is unknown (Jepsen's indeterminate op), and writing a guess
        would put a false outcome in the history.
        """
        self._closed = True
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    def _finish(self, reason: str) -> Outcome:
        r = self.result
        if r.outcome is None:
            r.outcome = self._classify(reason)
        detail: dict[str, Any] = {"outcome": str(r.outcome), "profile": self.config.profile}
        if r.outcome is Outcome.EOF_AFTER_ACCEPT:
            detail["closed_by"] = "reset" if reason == "reset" else "eof"
        for key in ("connect_ms", "ready_ms", "eof_ms"):
            if getattr(r, key) is not None:
                detail[key] = round(getattr(r, key), 3)
        if r.errors:
            detail["errors"] = r.errors[:3]
        self._closed = True
        close_reason = "done" if reason in ("done", "unsupported") else reason
        if r.outcome in (Outcome.REFUSED,):
            close_reason = "refused"
        self._row(
            "closed",
            reason=close_reason,
            latency_ms=_ms_since(self._invoke_ns) if self._invoke_ns else None,
            detail=detail,
        )
        return r.outcome

    def _classify(self, reason: str) -> Outcome:
        """Outcome of a connection that got past connect().

        Closed by the server before any response = EOF after accept, whether the
        client saw a FIN or a RST: a server that closes a socket holding our unread
        request makes the kernel send RST (Kafka's count-reject and throttle-close do
        exactly that), so the two are one enforcement outcome (``detail.closed_by``
        keeps which). A reset after a response is a reset.
        """
        r = self.result
        if r.responses:
            if reason in ("reset", "timeout"):
                return Outcome(reason)
            slow = r.ready_ms is not None and r.ready_ms > self.config.delayed_threshold_ms
            return Outcome.DELAYED_SERVED if slow else Outcome.SERVED
        if reason in ("eof", "reset"):
            return Outcome.EOF_AFTER_ACCEPT
        if reason == "timeout":
            return Outcome.TIMEOUT
        return Outcome.TIMEOUT  # connected, asked nothing, heard nothing

    def __enter__(self) -> KafkaConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RequestError(Exception):
    """A response with a Kafka error code (served, but the Locust request fails)."""

    def __init__(self, name: str, code: int) -> None:
        super().__init__(f"{name}: Kafka error code {code}")
        self.code = code


def _error_code(response: Any) -> int:
    """The first non-zero error code in a response (top level or per partition)."""
    code = getattr(response, "error_code", 0) or 0
    if code:
        return int(code)
    for topic in getattr(response, "responses", None) or []:
        for part in getattr(topic, "partition_responses", None) or []:
            if getattr(part, "error_code", 0):
                return int(part.error_code)
    return 0
