"""The load side's own set-up connection: ApiVersions, Metadata, CreateTopics over one
raw socket, recorded in the client history like every connection the load makes.

Every arrival profile runs on the storm engine (``loadprofiles.engine``) and the steady
profile on kafka-python's clients; this small blocking client is what is left for the
requests made before the load (creating ``--topic``, `loadprofiles.topics`): kafka-python's
protocol classes frame and parse, the connection's rows say how it ended
(`loadprofiles.outcomes`), so the enforcer's view of it is explained like any other
(``client_acceptor_agreement``). Under Locust the stdlib socket is cooperative
(monkey-patched); in unit tests it is a plain blocking socket.
"""

from __future__ import annotations

import errno
import itertools
import os
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kafka.protocol.admin.topics import CreateTopicsRequest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.parser import KafkaProtocol

from base.history import rows
from loadprofiles.engine import EngineConfig
from loadprofiles.outcomes import Outcome, classify, closed_detail

#: the highest request versions this client encodes
MAX_VERSIONS = {
    ApiVersionsRequest.API_KEY: 3,
    MetadataRequest.API_KEY: 12,
    CreateTopicsRequest.API_KEY: 7,
}
_API_NAMES = {ApiVersionsRequest.API_KEY: "ApiVersions", MetadataRequest.API_KEY: "Metadata"}

_RESET_ERRNOS = {errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED}

_ids = itertools.count(1)


class Recorder(Protocol):
    """What the client needs of a history writer (``ClientHistory``, ``HistoryWriter``):
    one typed row (`base.history.rows`) at a time."""

    def append(self, row: rows.ClientRow, /) -> None: ...


class ClientError(Exception):
    """Base of the client's failures; ``reason`` is the history ``reason`` value."""

    reason: str = "error"


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


@dataclass
class ConnectionResult:
    """What happened to one connection."""

    outcome: Outcome | None = None
    reason: str = ""
    client_ip: str | None = None
    client_port: int | None = None
    connect_ms: float | None = None
    ready_ms: float | None = None
    eof_ms: float | None = None
    responses: int = 0
    errors: list[str] = field(default_factory=list)


def _ms_since(t0_ns: int) -> float:
    return (time.monotonic_ns() - t0_ns) / 1e6


class KafkaConnection:
    """One Kafka connection: ``connect()``, requests, ``close()``; history rows as it goes."""

    def __init__(
        self,
        config: EngineConfig,
        *,
        history: Recorder | None = None,
        conn_id: str | None = None,
        broker: int | None = None,
    ) -> None:
        self.config = config
        #: a cluster: the node id of the broker at host:port (``connect_invoke`` names it)
        self.broker = broker
        self.history = history
        self.conn_id = conn_id or f"c{os.getpid()}-{next(_ids)}"
        self.result = ConnectionResult()
        self.versions: dict[int, tuple[int, int]] = {}
        self._sock: socket.socket | None = None
        self._proto = KafkaProtocol(client_id=config.client_id)
        self._invoke_ns = 0
        self._closed = False

    # -- history -----------------------------------------------------------------------
    def _put(self, row: rows.ClientRow) -> None:
        if self.history is not None:
            self.history.append(row)

    def _ids(self) -> rows.ClientIds:
        """The identity columns of this connection's rows."""
        r = self.result
        return rows.client_ids(self.conn_id, self.config.listener, r.client_ip, r.client_port)

    # -- connect -----------------------------------------------------------------------
    def connect(self) -> None:
        """Open the TCP connection; ConnectFailed (with ``connect_invoke``,
        ``connect_fail`` and ``closed`` rows) when it does not complete."""
        cfg = self.config
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(cfg.connect_timeout_s)
        self._invoke_ns = time.monotonic_ns()
        failure: ConnectFailed | None = None
        try:
            sock.connect((cfg.host, cfg.port))
        except TimeoutError:
            failure = ConnectFailed("timeout", f"no handshake in {cfg.connect_timeout_s} s")
        except ConnectionRefusedError as exc:
            failure = ConnectFailed("refused", str(exc))
        except OSError as exc:
            reason = "reset" if exc.errno in _RESET_ERRNOS else "refused"
            failure = ConnectFailed(reason, f"{exc.strerror or exc} (errno {exc.errno})")
        r = self.result
        try:
            r.client_ip, r.client_port = sock.getsockname()[:2]
        except OSError:
            r.client_ip, r.client_port = None, None
        if r.client_port == 0:
            r.client_port = None
        detail: rows.ClientConnectInvokeDetail = {"profile": cfg.profile}
        if self.broker is not None:
            detail["broker"] = self.broker
        cid = cfg.client_id
        self._put(
            rows.ClientConnectInvoke(self._invoke_ns, *self._ids(), client_id=cid, detail=detail)
        )
        if failure is not None:
            sock.close()
            r.reason = failure.reason
            r.outcome = Outcome(failure.reason)
            self._put(
                rows.ClientConnectFail(
                    time.monotonic_ns(),
                    *self._ids(),
                    reason=failure.reason,
                    client_id=cid,
                    latency_ms=_ms_since(self._invoke_ns),
                )
            )
            self._finish(failure.reason)
            raise failure
        r.connect_ms = _ms_since(self._invoke_ns)
        self._sock = sock
        self._put(
            rows.ClientConnectOk(
                time.monotonic_ns(), *self._ids(), client_id=cid, latency_ms=r.connect_ms
            )
        )

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
            raise
        r = self.result
        latency = _ms_since(start)
        detail: rows.ClientRequestOkDetail = {}
        error_code = _error_code(response)
        if error_code:
            detail["error_code"] = error_code
        throttle = getattr(response, "throttle_time_ms", 0) or 0
        if throttle:
            detail["throttle_time_ms"] = throttle
        r.responses += 1
        if r.ready_ms is None:
            r.ready_ms = _ms_since(self._invoke_ns)
            self._put(
                rows.ClientReady(
                    time.monotonic_ns(),
                    *self._ids(),
                    api_key=api_key,
                    client_id=self.config.client_id,
                    latency_ms=r.ready_ms,
                )
            )
        self._put(
            rows.ClientRequestOk(
                time.monotonic_ns(),
                *self._ids(),
                api_key=api_key,
                client_id=self.config.client_id,
                latency_ms=latency,
                bytes=nbytes,
                detail=detail or None,  # only when there is something to say: json costs CPU
            )
        )
        if error_code:
            r.errors.append(f"{name}: Kafka error code {error_code}")
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
        self._put(
            rows.ClientRequestFail(
                time.monotonic_ns(),
                *self._ids(),
                reason=exc.reason,
                api_key=api_key,
                client_id=self.config.client_id,
                latency_ms=_ms_since(start_ns),
            )
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

    def _finish(self, reason: str) -> Outcome:
        r = self.result
        if r.outcome is None:
            r.outcome = self._classify(reason)
        detail = closed_detail(
            r.outcome, reason, self.config.profile, r.connect_ms, r.ready_ms, r.eof_ms, r.errors
        )
        self._closed = True
        close_reason = "done" if reason in ("done", "unsupported") else reason
        if r.outcome in (Outcome.REFUSED,):
            close_reason = "refused"
        self._put(
            rows.ClientClosed(
                time.monotonic_ns(),
                *self._ids(),
                reason=close_reason,
                client_id=self.config.client_id,
                latency_ms=_ms_since(self._invoke_ns) if self._invoke_ns else None,
                detail=detail,
            )
        )
        return r.outcome

    def _classify(self, reason: str) -> Outcome:
        """Outcome of a connection that got past connect() (`outcomes.classify`)."""
        r = self.result
        return classify(
            reason,
            responses=r.responses,
            ready_ms=r.ready_ms,
            delayed_threshold_ms=self.config.delayed_threshold_ms,
        )

    def __enter__(self) -> KafkaConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
