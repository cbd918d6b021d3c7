"""The steady profile's kafka-python connections, recorded like every other profile's.

The steady victims are real ``KafkaProducer``/``KafkaConsumer`` clients: kafka-python
opens, keeps and closes their sockets (bootstrap, then one per broker). Without rows
for those sockets the client-side checks of a broker target cannot see the long-lived
holders that make up the count pressure of ``listener-max``, ``ip-count``,
``eviction-order``..., nor the ``throttle_time_ms`` Kafka puts in their responses.

``ConnectionRecorder`` writes, per kafka-python connection, the rows
``loadprofiles.kafka_client.KafkaConnection`` writes for its own connections, with the
same fields (conn_id, listener, client_ip/port = the socket's local address, client_id):

- ``connect_invoke`` (``detail.profile``) at the start of the connect, ``connect_ok``
  when the TCP handshake is done (``latency_ms`` since invoke);
- ``ready`` at the first response (``latency_ms`` since invoke, ``api_key``);
- ``request_ok`` for every response: ``detail.in_flight_ms`` (from kafka-python sending
  the request to reading its response: Kafka handles a connection's requests one at a
  time inside that interval, so it bounds what the request can be charged),
  ``detail.throttle_time_ms`` when non-zero, and ``detail.principal``, the user the
  connection logged in as (``ANONYMOUS`` without SASL or a client certificate; absent when
  a certificate names it). ``latency_ms`` stays empty, so the steady latency figures,
  which are the profile's own produce/end-to-end rows, are not changed;
- ``closed`` with ``detail.outcome`` classified as KafkaConnection classifies
  (``eof_after_accept`` when the broker closed before any response, ``reason`` eof /
  reset / timeout / done). ``done`` is our own close, also one kafka-python makes while
  the connection is still initialising (`own_close`): such a connection read nothing, so
  it has no EOF to show whatever the broker did (the checks do not judge it).

A connect that fails before the handshake with an error has nothing the enforcer saw and
is not recorded (kafka-python retries it with backoff; the steady profile's own
``request_fail`` rows say when a produce failed).

A socket is recorded when kafka-python has built its transport on it
(``KafkaConnectionManager._build_transport``), not when a connection takes it: under load
kafka-python may drop a connected socket before any connection takes it (its
connection closed meanwhile), and the enforcer sees that socket like any other. A connect
kafka-python gives up while in progress (its timeout, a cancel) leaves its socket open
with a local port, and the kernel may still complete it: ``connect_invoke`` and
``connect_fail`` for that address (`ConnectionRecorder.abandoned`).

``install()`` wraps seven methods of kafka-python 3.0's connection layer
(``KafkaNetSocket.sock_connect``, ``KafkaConnectionManager._build_transport``, ``_connect``
and ``KafkaConnection.connection_made``,
``data_received``, ``_maybe_throttle``, ``connection_lost``) once per process; the wrappers call the
active recorder, if any, and then the original. Only the steady profile's Locust
process installs them (the other profiles use our own client). No Locust, no gevent
here: unit tests drive the recorder directly.
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from base.history import rows
from loadprofiles.kafka_client import Recorder
from loadprofiles.outcomes import classify, closed_detail

_ids = itertools.count(1)
_RESET_ERRNOS = {errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED}


@dataclass
class _Conn:
    conn_id: str
    invoke_ns: int
    client_ip: str | None = None
    client_port: int | None = None
    client_id: str | None = None
    connect_ms: float | None = None
    ready_ms: float | None = None
    eof_ms: float | None = None
    responses: int = 0
    principal: str | None = None
    #: send instants (monotonic ns) of the requests whose responses the read being handled
    #: carries, oldest first (kafka-python answers in order)
    sent_ns: list[int] = field(default_factory=list)


def own_close(exc: BaseException | None) -> bool:
    """``connection_lost(exc)`` reports our own close: None (a close once the connection
    is set up) or the bare ``KafkaConnectionError()`` (no args) kafka-python 3.0's
    ``KafkaConnection.close(error=None)`` puts in when it is called while the connection
    is still initialising (its ApiVersions or SASL exchange), as a consumer's or
    producer's own ``close()`` at the end of a phase does (kafka/net/connection.py).
    Every failure kafka-python detects itself says what it was: ``socket disconnected``
    (the peer's FIN), the OSError it wraps, a time-out or protocol error by name."""
    if exc is None:
        return True
    return type(exc).__name__ == "KafkaConnectionError" and not exc.args


def close_reason(exc: BaseException | None) -> str:
    """The history ``reason`` of a kafka-python ``connection_lost(exc)``.

    Our own close (`own_close`, during the set-up or after it) is ``done``; kafka-python
    reports a peer's FIN as ``KafkaConnectionError('socket disconnected')`` and a reset as
    a KafkaConnectionError wrapping the OSError; request and setup time-outs by name.
    """
    if exc is None or own_close(exc):
        return "done"
    name = type(exc).__name__
    text = str(exc)
    if "socket disconnected" in text:
        return "eof"
    cause = exc.args[0] if exc.args else None
    if isinstance(cause, OSError) and cause.errno in _RESET_ERRNOS:
        return "reset"
    if isinstance(exc, OSError) and exc.errno in _RESET_ERRNOS:
        return "reset"
    if "Timeout" in name or "TimedOut" in name or "timed out" in text.lower():
        return "timeout"
    if "reset" in text.lower():
        return "reset"
    return "error"


class ConnectionRecorder:
    """History rows for kafka-python connections (keyed by the connection object)."""

    def __init__(
        self,
        history: Recorder,
        *,
        listener: str | None,
        profile: str = "steady",
        delayed_threshold_ms: float = 250.0,
        clock: Callable[[], int] = time.monotonic_ns,
        principal: str | None = None,
        brokers: Mapping[tuple[str, int], int] | None = None,
    ) -> None:
        self.history = history
        #: a cluster's brokers by address: each connection's ``connect_invoke`` names the
        #: node it reached (``detail.broker``), the address kafka-python connected to
        self.brokers = dict(brokers or {})
        #: the user this process's clients log in as (`principal_of` their configuration:
        #: one Locust process runs one phase, one client configuration); None if unknown
        self.principal = principal
        self.listener = listener
        self.profile = profile
        self.delayed_threshold_ms = delayed_threshold_ms
        self.clock = clock
        self._conns: dict[int, _Conn] = {}
        self._pending: dict[int, int] = {}  # id(conn) -> invoke_ns, before the handshake
        #: sockets recorded when made (`socket_made`), until a connection takes them
        self._made: dict[tuple[str, int], _Conn] = {}

    def _ids(self, c: _Conn) -> rows.ClientIds:
        """The identity columns of `c`'s rows."""
        return rows.client_ids(c.conn_id, self.listener, c.client_ip, c.client_port)

    def invoke(self, conn: object) -> None:
        """kafka-python starts connecting ``conn`` (before DNS and the SYN)."""
        self._pending[id(conn)] = self.clock()

    def socket_made(
        self, sockname: Any, peername: Any, invoke_ns: int, client_id: str | None = None
    ) -> None:
        """kafka-python built a transport on a connected socket: ``connect_invoke`` +
        ``connect_ok`` now, whether or not a connection ever takes it (one whose
        connection closed meanwhile is still a connection the enforcer saw). `made` then
        attaches it to its connection."""
        c = self._start(sockname, peername, invoke_ns, client_id)
        if c is not None:
            self._made[(str(c.client_ip), int(c.client_port or 0))] = c

    def abandoned(self, sockname: Any, invoke_ns: int, exc: BaseException) -> None:
        """kafka-python gave up a connect in progress (its timeout, or its task cancelled)
        without closing the socket: the kernel may still complete the handshake, and the
        enforcer then holds a connection no request ever comes on. ``connect_invoke`` and
        ``connect_fail`` (``timeout`` or ``cancelled``) for its address, so the client
        history has every socket the enforcer can see."""
        try:
            ip, port = str(sockname[0]), int(sockname[1])
        except (TypeError, IndexError, ValueError):
            return
        if not port:  # no address was bound: no SYN went out
            return
        now = self.clock()
        c = _Conn(f"s{os.getpid()}-{next(_ids)}", invoke_ns, ip, port, None)
        ids = self._ids(c)
        self.history.append(
            rows.ClientConnectInvoke(invoke_ns, *ids, detail={"profile": self.profile})
        )
        reason = "cancelled" if isinstance(exc, asyncio.CancelledError) else "timeout"
        self.history.append(
            rows.ClientConnectFail(
                now,
                *ids,
                reason=reason,
                latency_ms=(now - invoke_ns) / 1e6,
                detail={
                    "profile": self.profile,
                    "why": f"kafka-python gave up the connect ({type(exc).__name__}) and kept "
                    "the socket open",
                },
            )
        )

    def made(
        self, conn: object, sockname: Any, client_id: str | None, peername: Any = None
    ) -> None:
        """The connection took its socket (its TCP handshake is done): the socket's rows,
        written by `socket_made`, or ``connect_invoke`` + ``connect_ok`` now."""
        invoke_ns = self._pending.pop(id(conn), None)
        try:
            key = (str(sockname[0]), int(sockname[1]))
        except (TypeError, IndexError, ValueError):
            return  # no local address: nothing to join on
        c = self._made.pop(key, None)
        if c is None:
            c = self._start(sockname, peername, invoke_ns, client_id)
        if c is not None:
            c.client_id = client_id
            self._conns[id(conn)] = c

    def _start(
        self, sockname: Any, peername: Any, invoke_ns: int | None, client_id: str | None
    ) -> _Conn | None:
        now = self.clock()
        invoke_ns = now if invoke_ns is None else invoke_ns
        try:
            ip, port = str(sockname[0]), int(sockname[1])
        except (TypeError, IndexError, ValueError):
            return None  # no local address: nothing to join on
        c = _Conn(f"s{os.getpid()}-{next(_ids)}", invoke_ns, ip, port, client_id)
        c.principal = self.principal
        c.connect_ms = (now - invoke_ns) / 1e6
        detail: rows.ClientConnectInvokeDetail = {"profile": self.profile}
        if self.brokers:
            try:
                node = self.brokers.get((str(peername[0]), int(peername[1])))
            except (TypeError, IndexError, ValueError):
                node = None
            if node is not None:
                detail["broker"] = node
        ids, cid = self._ids(c), c.client_id
        self.history.append(rows.ClientConnectInvoke(invoke_ns, *ids, client_id=cid, detail=detail))
        self.history.append(rows.ClientConnectOk(now, *ids, client_id=cid, latency_ms=c.connect_ms))
        return c

    def reading(self, conn: object, sent_ns: list[int]) -> None:
        """``conn`` is about to read responses to requests sent at ``sent_ns`` (oldest
        first; kafka-python's in-flight requests, in order)."""
        c = self._conns.get(id(conn))
        if c is not None:
            c.sent_ns = sent_ns

    def response(self, conn: object, response: Any) -> None:
        """A response arrived on ``conn``: ``ready`` on the first; a ``request_ok`` row."""
        c = self._conns.get(id(conn))
        if c is None:
            return
        now = self.clock()
        api_key = getattr(response, "API_KEY", None)
        c.responses += 1
        if c.ready_ms is None:
            c.ready_ms = (now - c.invoke_ns) / 1e6
            self.history.append(
                rows.ClientReady(
                    now,
                    *self._ids(c),
                    api_key=api_key,
                    client_id=c.client_id,
                    latency_ms=c.ready_ms,
                )
            )
        detail: rows.ClientRequestOkDetail = {"profile": self.profile}
        if c.sent_ns:
            detail["in_flight_ms"] = round((now - c.sent_ns.pop(0)) / 1e6, 3)
        throttle = getattr(response, "throttle_time_ms", 0) or 0
        if throttle:
            detail["throttle_time_ms"] = int(throttle)
        if c.principal is not None:
            detail["principal"] = c.principal
        self.history.append(
            rows.ClientRequestOk(
                now, *self._ids(c), api_key=api_key, client_id=c.client_id, detail=detail
            )
        )

    def lost(self, conn: object, exc: BaseException | None) -> None:
        """``conn`` is closed (by us: `own_close`) or lost: its ``closed`` row."""
        self._pending.pop(id(conn), None)
        c = self._conns.pop(id(conn), None)
        if c is None:
            return
        now = self.clock()
        reason = close_reason(exc)
        if reason in ("eof", "reset"):
            c.eof_ms = (now - c.invoke_ns) / 1e6
        outcome = classify(
            reason,
            responses=c.responses,
            ready_ms=c.ready_ms,
            delayed_threshold_ms=self.delayed_threshold_ms,
        )
        detail = closed_detail(
            outcome, reason, self.profile, c.connect_ms, c.ready_ms, c.eof_ms, None
        )
        if exc is not None and reason == "error":
            detail["error"] = f"{type(exc).__name__}: {exc}"[:200]
        self.history.append(
            rows.ClientClosed(
                now,
                *self._ids(c),
                reason=reason,
                client_id=c.client_id,
                latency_ms=(now - c.invoke_ns) / 1e6,
                detail=detail,
            )
        )

    def open_count(self) -> int:
        return len(self._conns)


def principal_of(config: dict[str, Any]) -> str | None:
    """The user a kafka-python connection with ``config`` logs in as, as Kafka's quota
    callback names it (the principal's name, without ``User:``): the SASL user; for SSL
    with a client certificate its subject in RFC 2253 order (the harness's client configs
    carry a certificate only for listeners that ask for one; None if it cannot be read);
    ``ANONYMOUS`` for PLAINTEXT and for SSL without one."""
    protocol = str(config.get("security_protocol") or "PLAINTEXT").upper()
    if protocol.startswith("SASL_"):
        user = config.get("sasl_plain_username")
        return str(user) if user else None
    certfile = config.get("ssl_certfile")
    if protocol == "SSL" and certfile:
        from base.security.client import certificate_principal

        try:
            principal = certificate_principal(str(certfile))
        except OSError:
            return None
        return None if principal is None else principal.removeprefix("User:")
    return "ANONYMOUS"


# -- kafka-python hooks -------------------------------------------------------------------
_active: ConnectionRecorder | None = None
_installed = False


def activate(recorder: ConnectionRecorder | None) -> None:
    """The recorder the hooks write to (None: hooks do nothing)."""
    global _active
    _active = recorder


def install() -> None:
    """Wrap kafka-python 3.0's connection layer once per process (idempotent)."""
    global _installed
    if _installed:
        return
    from kafka.net.connection import KafkaConnection as KConn
    from kafka.net.inet import KafkaNetSocket
    from kafka.net.manager import KafkaConnectionManager

    orig_build = KafkaConnectionManager._build_transport
    orig_sock_connect = KafkaNetSocket.sock_connect
    orig_connect = KafkaConnectionManager._connect
    orig_made = KConn.connection_made
    orig_throttle = KConn._maybe_throttle
    orig_lost = KConn.connection_lost
    orig_received = KConn.data_received

    async def _build_transport(self: Any, node: Any, *args: Any, **kwargs: Any) -> Any:
        invoke_ns = time.monotonic_ns()
        transport = await orig_build(self, node, *args, **kwargs)
        if _active is not None:
            try:
                sockname, peername = transport.getHost(), transport.getPeer()
            except (AttributeError, OSError):
                return transport
            _active.socket_made(sockname, peername, invoke_ns, self.config.get("client_id"))
        return transport

    async def sock_connect(self: Any, net: Any, sock: Any, *args: Any, **kwargs: Any) -> Any:
        invoke_ns = time.monotonic_ns()
        try:
            return await orig_sock_connect(self, net, sock, *args, **kwargs)
        except BaseException as exc:  # a timeout or a cancel leaves the socket open
            if _active is not None and not isinstance(exc, OSError):
                try:
                    sockname = sock.getsockname()
                except OSError:
                    sockname = None
                _active.abandoned(sockname, invoke_ns, exc)
            raise

    async def _connect(self: Any, node: Any, conn: Any, *args: Any, **kwargs: Any) -> Any:
        if _active is not None:
            _active.invoke(conn)
        return await orig_connect(self, node, conn, *args, **kwargs)

    def connection_made(self: Any, transport: Any) -> Any:
        out = orig_made(self, transport)
        if _active is not None:
            try:
                sockname, peername = transport.getHost(), transport.getPeer()
            except OSError:
                sockname = peername = None
            _active.made(self, sockname, self.config.get("client_id"), peername)
        return out

    def data_received(self: Any, data: Any) -> Any:
        if _active is not None:  # (correlation id, future, sent_time, timeout_at, task)
            sent = [int(entry[2] * 1e9) for entry in self.in_flight_requests]
            _active.reading(self, sent)
        return orig_received(self, data)

    def _maybe_throttle(self: Any, response: Any) -> Any:
        if _active is not None:
            _active.response(self, response)
        return orig_throttle(self, response)

    def connection_lost(self: Any, exc: Any) -> Any:
        if _active is not None:
            _active.lost(self, exc)
        return orig_lost(self, exc)

    KafkaConnectionManager._build_transport = _build_transport
    KafkaNetSocket.sock_connect = sock_connect
    KafkaConnectionManager._connect = _connect
    KConn.connection_made = connection_made
    KConn._maybe_throttle = _maybe_throttle
    KConn.connection_lost = connection_lost
    KConn.data_received = data_received
    _installed = True
