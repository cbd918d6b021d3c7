"""The storm engine: open-model connection arrivals at wire speed, one epoll loop.

Why not a greenlet per connection: profiling the gevent client at 400 arrivals/s
(docs/loadprofiles.md, "Profile") put most of the CPU into kafka-python's response
decoding, request encoding, gevent's socket wrappers and per-row dicts. Here:

* requests are encoded **once** with kafka-python's own classes and reused as bytes;
  only the correlation id (bytes 8..12 of the frame) is patched per connection;
* responses are checked at fixed offsets (correlation id, error code, throttle
  time); only the first ApiVersions response of a run is decoded in full, to pick
  the Metadata version both sides speak;
* raw non-blocking ``_socket`` sockets (never gevent's) in one ``epoll`` loop, one
  ``__slots__`` record per connection (``engine_conn.Conn``), no greenlet, no exception
  per outcome;
* each connection moves by one table, ``engine_conn.TRANSITIONS``: a step is a lookup of
  (state, input) that gives the next state and the rows the step may write; the frames
  (``engine_frames``), the SASL step's outcome and the rows' details
  (``engine_conn``) are pure pieces, tested alone;
* history rows, each built by its event's row class, go into ``ClientHistory``'s
  buffer, sealed every ``seal_interval_s`` and written by another thread (off this loop);
* arrival ``k`` is due at ``start_ns + offset_k`` (absolute times from
  ``arrivals.arrival_times``): a late wake-up never shifts later arrivals, so the
  schedule cannot drift; an arrival started more than ``max_lag_ms`` late is
  recorded ``not_offered`` (cause ``cpu``), never silently moved;
* a heartbeat: the loop never sleeps in ``epoll`` longer than ``PERIOD_NS`` (5 ms), so
  an iteration that ends more than ``THRESHOLD_NS`` (10 ms) after its poll promised to
  return is a stall the engine measured itself (descheduled on a busy machine, a GC, a
  burst of work): a ``loop_lag`` row (``start`` once, with period and threshold; then one
  per stall) names the stretch in which anything it observed may have been observed late.
  Outside such rows an observation is at most 2 × (period + threshold) = 30 ms late (an
  event arriving just after a poll returned waits for that iteration and the next poll);
  the checks' "not timed" rule (``analysis/checks/stalls.py``) rests on these rows;
* timeouts sit in three FIFO queues (connect, request, hold): each has one fixed
  duration, so deadlines are appended in order and expire from the head, O(1).

Shapes: ``connect`` (TCP connect, close), ``apiversions`` (connect, ApiVersions,
close), ``storm`` (connect, ApiVersions, Metadata, close), ``produce`` (connect,
ApiVersions, one Produce of one record, close: a client that opens a connection per
message). Every arrival profile is a shape and its options: source addresses, a PROXY
header claiming a client address (``proxy_protocol``, sent right after the TCP connect,
before TLS), a hold time. No gevent or Locust import: the engine runs in a native thread
under Locust and directly in tests.

Secured listeners (``EngineConfig.tls``, ``EngineConfig.sasl``; ``base.security.client``):
after the TCP connect, TLS runs over memory BIOs under the same loop (state
HANDSHAKING, bounded by the connect timeout from its start), then SaslHandshake v1 and
the first SaslAuthenticate v2 are pipelined in one write (PLAIN: one round trip; SCRAM:
two), and only then does the shape's first request go out. Rows ``tls_start``,
``tls_done``/``tls_fail``, ``sasl_done``/``sasl_fail`` split each connection's time to
ready into TCP, TLS, SASL and first response (also in ``closed``: ``connect_ms``,
``tls_ms``, ``sasl_ms``, ``ready_ms``). No password, proof or key reaches a row.
The ``connect`` shape over TLS ends as Kafka's own client closes a channel: a close_notify
alert, then the close. Over TLS 1.3 it first waits for the server's first post-handshake
record (its session ticket; state SETTLING, bounded by the request timeout), since a TLS 1.3
client finishes before the server has read its Finished (under TLS 1.2 the server's Finished
comes last). Kafka's broker marks a TLS channel ready (and counts it in
``successful-authentication-total``) one poll after it sent its last handshake record, and a
socket at EOF in that poll fails the handshake instead: the alert's bytes are what that poll
reads, so every such connect is counted (`SslTransportLayer.handshake`, Kafka 4.3.1).
"""

from __future__ import annotations

import _socket
import contextlib
import errno
import select
import ssl
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from base.history import events
from base.history.rows import (
    ClientClosed,
    ClientConnectFail,
    ClientConnectInvoke,
    ClientConnectOk,
    ClientLoopLag,
    ClientReady,
    ClientRequestFail,
    ClientRequestOk,
    ClientRow,
    ClientSaslDone,
    ClientSaslFail,
    ClientTlsDone,
    ClientTlsFail,
    ClientTlsStart,
    client_ids,
)
from base.security.client import (
    SASL_AUTHENTICATE_KEY,
    SASL_HANDSHAKE_KEY,
    SaslSettings,
    TlsLink,
    TlsSettings,
    tls_error,
)
from loadprofiles import proxy_header
from loadprofiles.addresses import BrokerTarget, broker_for
from loadprofiles.client_history import ClientHistory
from loadprofiles.engine_conn import (
    NEXT,
    Conn,
    Input,
    State,
    TransitionError,
    closed_fields,
    sasl_step,
    tls_fail_fields,
)
from loadprofiles.engine_frames import (
    API_NAMES,
    API_VERSIONS_KEY,
    METADATA_KEY,
    METADATA_MAX_VERSION,
    PRODUCE_KEY,
    PRODUCE_MAX_VERSION,
    api_versions_frame,
    compile_produce,
    frame_end,
    max_versions,
    metadata_frame,
    produce_frame,
    response_fields,
    warm_up,
    with_correlation_id,
)
from loadprofiles.outcomes import classify

SHAPES = ("connect", "apiversions", "storm", "produce")
IP_BIND_ADDRESS_NO_PORT = getattr(_socket, "IP_BIND_ADDRESS_NO_PORT", 24)
_FDS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_PORTS = frozenset({errno.EADDRNOTAVAIL, errno.EADDRINUSE})
_RESET = frozenset({errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED})
_IN, _OUT = select.EPOLLIN, select.EPOLLOUT

#: the heartbeat: the loop never sleeps in epoll longer than PERIOD_NS, and an iteration
#: that ends more than THRESHOLD_NS after the poll's promised return is a measured stall
PERIOD_NS = 5_000_000
THRESHOLD_NS = 10_000_000

#: the states and inputs a step reads, as module names: an enum member read through its
#: class is an attribute lookup (~50 ns on CPython 3.11, several per connection); `is`
#: against a module name costs what an int compare did
_NEW, _CONNECTING, _SENDING = State.NEW, State.CONNECTING, State.SENDING
_AWAITING, _HOLDING, _DONE = State.AWAITING, State.HOLDING, State.DONE
_HANDSHAKING, _SETTLING = State.HANDSHAKING, State.SETTLING
_INVOKED, _CONNECTED, _CONNECT_FAILED = Input.INVOKED, Input.CONNECTED, Input.CONNECT_FAILED
_TLS_START, _HANDSHAKE_DONE, _TLS_FAILED = Input.TLS_START, Input.HANDSHAKE_DONE, Input.TLS_FAILED
_SENT, _SENT_PART, _ANSWERED = Input.SENT, Input.SENT_PART, Input.ANSWERED
_SASL_PENDING, _SASL_ROUND, _SASL_DONE = Input.SASL_PENDING, Input.SASL_ROUND, Input.SASL_DONE
_FAILED, _TIMEOUT, _PEER_CLOSED = Input.FAILED, Input.TIMEOUT, Input.PEER_CLOSED
_SETTLE, _SETTLED, _HOLD = Input.SETTLE, Input.SETTLED, Input.HOLD
_FINISH, _ABORT = Input.FINISH, Input.ABORT
_NEXT = NEXT


@dataclass
class EngineConfig:
    """Where and how the load connects: one per profile process, shared by all its
    connections (the engine's, and the set-up connection's, `kafka_client`)."""

    host: str
    port: int
    shape: str = "storm"
    source_ips: tuple[str, ...] = ()
    connect_timeout_s: float = 5.0
    request_timeout_s: float = 10.0
    delayed_threshold_ms: float = 250.0
    max_lag_ms: float = 100.0
    max_in_flight: int = 2000
    hold_ms: float = 0.0
    client_id: str = "harness-storm"
    profile: str = "storm"
    listener: str | None = None
    seal_interval_s: float = 0.25
    #: TLS after the connect (SSL, SASL_SSL); ``tls.fault="stall"``: a partial ClientHello
    tls: TlsSettings | None = None
    #: SASL after TLS (SASL_PLAINTEXT, SASL_SSL); ``sasl.fault``: wrong password, unknown user
    sasl: SaslSettings | None = None
    #: the name checked against the broker's certificate (default: ``host``)
    tls_server_name: str | None = None
    #: a cluster's brokers the arrivals spread over (node id, host, port), instead of
    #: ``host:port``; each ``connect_invoke`` then names its broker (``detail.broker``)
    brokers: tuple[BrokerTarget, ...] = ()
    #: a share of the arrivals pinned to one of them (node id, share; `broker_for`)
    hot_broker: tuple[int, float] | None = None
    #: a PROXY header (``v1``/``v2``) right after the TCP connect, claiming arrival k's
    #: client address ``proxy_client_ips[k mod n]`` (default: the socket's own address)
    proxy_protocol: str = "off"
    proxy_client_ips: tuple[str, ...] = ()
    #: the ``produce`` shape's record: topic (partition 0), value and acks (1 or -1)
    topic: str = "harness-load"
    value: bytes = b""
    acks: int = 1

    def __post_init__(self) -> None:
        for key in ("connect_timeout_s", "request_timeout_s"):
            if getattr(self, key) <= 0:
                raise ValueError(f"{key}={getattr(self, key)!r}: must be > 0")
        if self.shape not in SHAPES:
            raise ValueError(f"--shape: {self.shape!r}: expected one of {', '.join(SHAPES)}")
        if self.proxy_protocol not in proxy_header.VERSIONS:
            raise ValueError(
                f"--proxy-protocol: {self.proxy_protocol!r}: expected one of "
                f"{', '.join(proxy_header.VERSIONS)}"
            )
        if self.shape == "produce" and self.acks not in (1, -1):
            raise ValueError(
                f"--acks: {self.acks}: the produce shape judges the broker's answer, and "
                "acks=0 gets none; use 1 or all"
            )


@dataclass
class EngineStats:
    """Intended vs offered for one engine; ``summary()`` is what the process prints."""

    intended: int = 0
    offered: int = 0
    not_offered: dict[str, int] = field(default_factory=dict)
    max_lag_ms: float = 0.0
    outcomes: dict[str, int] = field(default_factory=dict)
    first_ns: int = 0
    last_ns: int = 0
    aborted: int = 0
    #: iterations its heartbeat measured as stalls (`loop_lag` rows)
    stalls: int = 0

    def summary(self) -> str:
        span = (self.last_ns - self.first_ns) / 1e9
        rate = f", offered {self.offered / span:.1f}/s over {span:.1f} s" if span > 0 else ""
        return (
            f"intended {self.intended}, offered {self.offered}, "
            f"not offered {sum(self.not_offered.values())} {self.not_offered or ''}, "
            f"max lag {self.max_lag_ms:.1f} ms{rate}; "
            f"outcomes {dict(sorted(self.outcomes.items()))}"
            + (f", {self.aborted} in flight at stop (no outcome)" if self.aborted else "")
            + (f", {self.stalls} loop stalls measured" if self.stalls else "")
        )


#: how long a broker that refused a connection is passed over (Kafka's client default
#: `reconnect.backoff.max.ms`, 1 s, the longest it waits before trying a node again)
RECONNECT_BACKOFF_NS = 1_000_000_000


def _epoll() -> Any:
    """The real epoll, also when gevent has patched ``select`` away."""
    monkey = sys.modules.get("gevent.monkey")
    if monkey is not None and monkey.is_module_patched("select"):
        return monkey.get_original("select", "epoll")()
    return select.epoll()


def _drop(row: ClientRow) -> None:
    """No history: the row is not kept."""


def _new_socket() -> Any:
    return _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM | _socket.SOCK_NONBLOCK)


class StormEngine:
    """Drives one slot of an arrival schedule; ``run()`` returns when it is done or stopped.

    Every connection moves by `engine_conn.TRANSITIONS` (`_go`); `trace`, when a test sets
    it to a list, records each step as (conn id, state, input, next state). ``new_socket``
    and ``epoll`` are the kernel's, or a test's fakes."""

    def __init__(
        self,
        config: EngineConfig,
        history: ClientHistory | None,
        *,
        conn_prefix: str = "",
        clock: Callable[[], int] = time.monotonic_ns,
        new_socket: Callable[[], Any] = _new_socket,
        epoll: Callable[[], Any] = _epoll,
    ) -> None:
        self.cfg = config
        self.hist = history
        #: the hot path's writer: the history's buffer append (a row built without a history
        #: is dropped)
        self._put: Callable[[ClientRow], None] = history.append if history is not None else _drop
        self._client_id = config.client_id
        self.stats = EngineStats()
        self._clock = clock
        self._new_socket = new_socket
        self._stop = False
        self._prefix = conn_prefix or f"e{id(self) & 0xFFFF:x}-"
        self._conns: dict[int, Conn] = {}
        self._ep = epoll()
        self._apiv = api_versions_frame(config.client_id)
        self._meta = metadata_frame(config.client_id)
        self._produce_version = PRODUCE_MAX_VERSION
        self._produce = b""
        if config.shape == "produce":
            self._produce = self._produce_frame()
            compile_produce(self._produce_version)
        self._learned = False
        self._proxy = config.proxy_protocol
        warm_up()
        self._cid = 0
        self._q_connect: deque[tuple[int, Conn, int]] = deque()
        self._q_request: deque[tuple[int, Conn, int]] = deque()
        self._q_hold: deque[tuple[int, Conn, int]] = deque()
        self._q_tls: deque[tuple[int, Conn, int]] = deque()
        self._tls = config.tls
        self._sasl = config.sasl
        self._sni = config.tls_server_name or config.host
        self._tls_session: Any = None
        self._max_lag_ns = int(config.max_lag_ms * 1e6)
        self._ct_ns = int(config.connect_timeout_s * 1e9)
        self._rt_ns = int(config.request_timeout_s * 1e9)
        self._hold_ns = int(config.hold_ms * 1e6)
        self._delayed_ms = config.delayed_threshold_ms
        self._invoke_detail = self._detail_template({})
        #: a cluster's brokers that refused a connection, and until when they are passed over
        self._down: dict[int, int] = {}
        #: every step taken, when a test asks for it (`trace = []`)
        self.trace: list[tuple[str, State, Input, State]] | None = None

    def set_clock_offset(self, offset_ns: int, rtt_ns: int) -> None:
        """Distributed runs: this process's offset to the master's clock (``clock.py``),
        recorded in every ``connect_invoke`` from now on."""
        self._invoke_detail = self._detail_template(
            {"clock_offset_ns": offset_ns, "clock_rtt_ns": rtt_ns}
        )

    def _detail_template(self, clock: dict[str, int]) -> str:
        """``connect_invoke``'s detail with ``%d`` for the broker's node id (a cluster's
        brokers only) and the intended instant, in that (sorted) order."""
        cfg = self.cfg
        extra: dict[str, Any] = dict(clock)
        if cfg.proxy_protocol != "off":
            extra["proxy_protocol"] = cfg.proxy_protocol
        slots = ("broker", "intended_mono_ns") if cfg.brokers else ("intended_mono_ns",)
        return events.detail_template(
            "client", "connect_invoke", slots=slots, profile=cfg.profile, **extra
        )

    def _produce_frame(self) -> bytes:
        cfg = self.cfg
        return produce_frame(
            cfg.client_id,
            cfg.topic,
            cfg.value,
            acks=cfg.acks,
            timeout_ms=int(cfg.request_timeout_s * 1000),
            version=self._produce_version,
        )

    def stop(self) -> None:
        """Any thread: end the schedule; open connections are dropped without an outcome."""
        self._stop = True

    # -- the table ----------------------------------------------------------------------------
    def _go(self, c: Conn, inp: Input) -> None:
        """One step of `c`: its state's row for `inp` in `engine_conn.TRANSITIONS` gives the
        next state (an input its state has no row for is a `TransitionError`)."""
        before = c.state
        try:
            c.state = _NEXT[(before, inp)]
        except KeyError as err:
            # chained (not `from None`): stopped by another error mid-step, `_abort_all`
            # finds the state it left, and that error must still show
            raise TransitionError(f"{c.conn_id}: no step for {inp.name} in {before.name}") from err
        if self.trace is not None:
            self.trace.append((c.conn_id, before, inp, c.state))

    # -- history ----------------------------------------------------------------------------
    def _not_offered(self, intended: int, cause: str, why: str) -> None:
        n = self.stats.not_offered
        n[cause] = n.get(cause, 0) + 1
        if self.hist is not None:
            detail = events.detail(
                "client",
                "connect_fail",
                cause=cause,
                intended_mono_ns=intended,
                profile=self.cfg.profile,
                why=why,
            )
            self._put(
                ClientConnectFail(
                    self._clock(),
                    listener=self.cfg.listener,
                    reason="not_offered",
                    client_id=self._client_id,
                    detail=detail,
                )
            )

    # -- the heartbeat ----------------------------------------------------------------------
    def _heartbeat_start(self) -> None:
        if self.hist is not None:
            detail = events.detail(
                "client",
                "loop_lag",
                engine=self._prefix,
                period_ms=PERIOD_NS / 1e6,
                threshold_ms=THRESHOLD_NS / 1e6,
            )
            self._put(
                ClientLoopLag(
                    self._clock(),
                    listener=self.cfg.listener,
                    reason="start",
                    client_id=self._client_id,
                    latency_ms=0.0,
                    detail=detail,
                )
            )

    def _stalled(self, since: int, now: int, late: int) -> None:
        """The loop is back at its poll at ``now``, ``late`` ns after its last poll promised
        to return: whatever it observed since the poll before that returned (``since``: an
        event arriving after it was first seen by the last poll), and in the next
        iteration (which ends by ``now + PERIOD + THRESHOLD`` or is a stall of its own), may
        have been seen late."""
        self.stats.stalls += 1
        if self.hist is not None:
            detail = events.detail(
                "client",
                "loop_lag",
                engine=self._prefix,
                from_mono_ns=since,
                until_mono_ns=now + PERIOD_NS + THRESHOLD_NS,
            )
            self._put(
                ClientLoopLag(
                    now,
                    listener=self.cfg.listener,
                    reason="stall",
                    client_id=self._client_id,
                    latency_ms=late / 1e6,
                    detail=detail,
                )
            )

    # -- the loop ---------------------------------------------------------------------------
    def run(
        self,
        schedule: Iterable[tuple[int, float]],
        start_ns: int,
        on_start: Callable[[], None] | None = None,
    ) -> EngineStats:
        """Start arrival ``(k, offset_s)`` at ``start_ns + offset_s``; wait for the last one."""
        clock = self._clock
        poll = self._ep.poll
        conns = self._conns
        hist = self.hist
        seal_ns = int(self.cfg.seal_interval_s * 1e9)
        next_seal = clock() + seal_ns
        it: Iterator[tuple[int, float]] = iter(schedule)
        nxt = next(it, None)
        due = start_ns + int(nxt[1] * 1e9) if nxt is not None else 0
        self.stats.first_ns = start_ns
        if on_start is not None:
            on_start()
        self._heartbeat_start()
        # the heartbeat (module docstring, "Heartbeat"): the latest the loop promised to be
        # back from its last poll, when that poll returned and when the one before it did
        promised = returned = prior = clock()
        try:
            while not self._stop:
                now = clock()
                while nxt is not None and due <= now:
                    self._arrive(nxt[0], due)
                    nxt = next(it, None)
                    if nxt is not None:
                        due = start_ns + int(nxt[1] * 1e9)
                    now = clock()
                if nxt is None and not conns:
                    break
                wait_ns = PERIOD_NS if nxt is None else min(due - now, PERIOD_NS)
                if now - promised > THRESHOLD_NS:
                    self._stalled(prior, now, now - promised)
                promised = now + max(0, wait_ns)
                for fd, ev in poll(max(0.0, wait_ns / 1e9)):
                    c = conns.get(fd)
                    if c is not None:
                        self._io(c, ev)
                now = clock()
                prior, returned = returned, now
                if self._q_connect or self._q_request or self._q_hold or self._q_tls:
                    self._expire(now)
                if hist is not None and now >= next_seal:
                    hist.seal()
                    next_seal = now + seal_ns
        finally:
            self._abort_all()
            if hist is not None:
                hist.seal()
            self._ep.close()
        return self.stats

    # -- TCP ----------------------------------------------------------------------------------
    def _arrive(self, k: int, intended: int) -> None:
        st = self.stats
        st.intended += 1
        now = self._clock()
        st.last_ns = now
        lag = now - intended
        if lag > st.max_lag_ms * 1e6:
            st.max_lag_ms = lag / 1e6
        if lag > self._max_lag_ns:
            self._not_offered(intended, "cpu", f"started {lag / 1e6:.0f} ms late")
            return
        cfg = self.cfg
        if len(self._conns) >= cfg.max_in_flight:
            self._not_offered(intended, "cpu", f"{cfg.max_in_flight} in flight")
            return
        try:
            s = self._new_socket()
        except OSError as exc:
            self._not_offered(intended, _cause(exc.errno), str(exc))
            return
        src = cfg.source_ips[k % len(cfg.source_ips)] if cfg.source_ips else None
        try:
            s.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
            if src is not None:
                s.setsockopt(_socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
                s.bind((src, 0))
        except OSError as exc:
            s.close()
            self._not_offered(intended, _cause(exc.errno), str(exc))
            return
        node: int | None = None
        if cfg.brokers:
            node, host, port = self._pick(k)
            detail = self._invoke_detail % (node, intended)
        else:
            host, port, detail = cfg.host, cfg.port, self._invoke_detail % intended
        invoke = self._clock()
        err = s.connect_ex((host, port))
        if err in _PORTS or err in _FDS:
            s.close()
            self._not_offered(intended, _cause(err), f"{errno.errorcode.get(err, err)}")
            return
        c = Conn()
        c.sock = s
        c.fd = s.fileno()
        try:
            c.ip, c.port = s.getsockname()
        except OSError:
            c.ip, c.port = src, 0
        if not c.port:
            c.port = None
        c.sip = None
        if self._proxy != "off" and cfg.proxy_client_ips:
            c.sip, c.ip = c.ip, cfg.proxy_client_ips[k % len(cfg.proxy_client_ips)]
        self._cid += 1
        c.cid = self._cid
        c.conn_id = f"{self._prefix}{k}"
        # its rows' identity columns: a PROXY header's claimed address is the client's
        c.ids = client_ids(c.conn_id, cfg.listener, c.ip, c.port, c.sip)
        c.broker = node
        c.invoke_ns = invoke
        c.gen = 0
        c.buf = b""
        c.out = b""
        c.responses = 0
        c.connect_ms = c.ready_ms = c.eof_ms = None
        c.errors = None
        c.api = 0
        c.req_ns = 0
        c.fail = None
        c.tls = c.sasl = None
        c.tls_ms = c.sasl_ms = None
        c.phase_ns = 0
        c.state = _NEW
        st.offered += 1
        self._go(c, _INVOKED)
        self._put(ClientConnectInvoke(invoke, *c.ids, client_id=self._client_id, detail=detail))
        if err == 0:
            self._connected(c)
        elif err == errno.EINPROGRESS:
            self._conns[c.fd] = c
            self._ep.register(c.fd, _OUT)
            self._q_connect.append((invoke + self._ct_ns, c, c.gen))
        else:
            self._connect_failed(c, err)

    def _pick(self, k: int) -> BrokerTarget:
        """Arrival ``k``'s broker (`broker_for`); one that refused a connection within the
        last `RECONNECT_BACKOFF_NS` is passed over for the next one up, as a Kafka client
        backs off a node it could not reach and bootstraps on another: a killed broker's
        share of the arrivals goes to the survivors."""
        cfg = self.cfg
        target = broker_for(k, cfg.brokers, cfg.hot_broker)
        if not self._down:
            return target
        now = self._clock()
        up = [b for b in cfg.brokers if self._down.get(b[0], 0) <= now]
        if target in up or not up:
            return target
        return up[k % len(up)]

    def _connect_failed(self, c: Conn, err: int) -> None:
        self._go(c, _TIMEOUT if err == errno.ETIMEDOUT else _CONNECT_FAILED)
        reason = "timeout" if err == errno.ETIMEDOUT else "reset" if err in _RESET else "refused"
        now = self._clock()
        if reason == "refused" and c.broker is not None:
            self._down[c.broker] = now + RECONNECT_BACKOFF_NS
        self._put(
            ClientConnectFail(
                now,
                *c.ids,
                reason=reason,
                client_id=self._client_id,
                latency_ms=(now - c.invoke_ns) / 1e6,
            )
        )
        self._close(c, reason, now, outcome=reason)

    def _connected(self, c: Conn) -> None:
        now = self._clock()
        self._go(c, _CONNECTED)
        c.connect_ms = (now - c.invoke_ns) / 1e6
        self._put(ClientConnectOk(now, *c.ids, client_id=self._client_id, latency_ms=c.connect_ms))
        if self._proxy != "off" and not self._send_proxy_header(c, now):
            return
        if self._tls is not None:
            self._tls_start(c, now)
            return
        self._secured(c, now)

    # -- PROXY ----------------------------------------------------------------------------------
    def _send_proxy_header(self, c: Conn, now: int) -> bool:
        """The PROXY header, in one send: a socket that has just connected has its whole
        send buffer free for its ≤ 107 bytes. False when it could not go (the connection
        is then ended as a request failure)."""
        try:
            peer_ip, peer_port = c.sock.getpeername()[:2]
            header = proxy_header.encode(self._proxy, c.ip or "", c.port or 0, peer_ip, peer_port)
            sent = c.sock.send(header)
        except proxy_header.ProxyHeaderError as exc:  # an address the header cannot carry
            self._request_failed(c, "reset", now, f"PROXY header: {exc}")
            return False
        except OSError as exc:
            self._request_failed(c, "reset" if exc.errno in _RESET else "eof", now, "PROXY header")
            return False
        if sent < len(header):  # the kernel took part of an empty buffer: not seen here
            c.out = header[sent:]
        return True

    # -- requests ---------------------------------------------------------------------------
    def _secured(self, c: Conn, now: int) -> None:
        """TLS (if any) is done: log in (if SASL), else the shape's first request."""
        if self._sasl is not None and c.sasl is None:
            c.sasl = self._sasl.exchange()
            c.phase_ns = now
            c.api = SASL_HANDSHAKE_KEY
            self._request(c, c.sasl.start(c.cid))
            return
        if self.cfg.shape == "connect":
            if c.tls is not None and c.sasl is None and c.tls.obj.version() == "TLSv1.3":
                self._go(c, _SETTLE)  # until the server's first record: it read our Finished
                c.gen += 1
                self._watch(c, _IN | _OUT if c.out else _IN)
                self._q_request.append((now + self._rt_ns, c, c.gen))
                return
            self._connected_done(c, now)
            return
        self._send(c, API_VERSIONS_KEY, self._apiv)

    def _send(self, c: Conn, api: int, template: bytes) -> None:
        c.api = api
        self._request(c, with_correlation_id(template, c.cid))

    def _request(self, c: Conn, data: bytes) -> None:
        """Send one request (or pipelined requests) and await the answer."""
        c.gen += 1
        now = self._clock()
        c.req_ns = now
        c.buf = b""
        if c.tls is not None:
            try:
                data = c.tls.write(data)
            except ssl.SSLError as exc:
                self._request_failed(c, "reset", now, f"TLS: {tls_error(exc)}")
                return
        if c.out:
            data = c.out + data
        try:
            n = c.sock.send(data)
        except BlockingIOError:
            n = 0
        except OSError as exc:
            self._request_failed(c, "reset" if exc.errno in _RESET else "eof", now)
            return
        if n < len(data):
            self._go(c, _SENT_PART)
            c.out = data[n:]
            self._watch(c, _OUT)
        else:
            self._go(c, _SENT)
            c.out = b""
            self._watch(c, _IN)
        self._q_request.append((now + self._rt_ns, c, c.gen))

    def _watch(self, c: Conn, events: int) -> None:
        if c.fd in self._conns:
            self._ep.modify(c.fd, events)
        else:
            self._conns[c.fd] = c
            self._ep.register(c.fd, events)

    # -- TLS --------------------------------------------------------------------------------
    def _tls_start(self, c: Conn, now: int) -> None:
        t = self._tls
        assert t is not None
        self._go(c, _TLS_START)
        c.phase_ns = now
        c.gen += 1
        try:
            c.tls = TlsLink(t.context, self._sni, self._tls_session if t.resume else None)
        except (ssl.SSLError, ValueError) as exc:
            self._tls_start_row(c, now)
            self._tls_failed(c, now, tls_error(exc))
            return
        self._tls_start_row(c, now)
        if t.fault == "stall":
            # a partial ClientHello, then silence: the broker waits for the rest (it has no
            # handshake timeout) and the slot stays held until the hold time
            c.tls.handshake()
            hello = c.tls.outgoing()
            try:
                c.sock.send(hello[: max(1, len(hello) // 2)])
            except OSError:
                pass
            c.fail = "tls_stalled"
            self._hold(c, now, self._hold_ns or self._ct_ns)
            return
        self._q_tls.append((now + self._ct_ns, c, c.gen))
        self._tls_step(c, now)

    def _tls_step(self, c: Conn, now: int) -> None:
        link = c.tls
        assert link is not None
        try:
            done = link.handshake()
        except ssl.SSLError as exc:
            self._tls_failed(c, now, tls_error(exc))
            return
        out = link.outgoing()
        if out:
            c.out = c.out + out if c.out else out
        if c.out and not self._send_tls_out(c, now):
            return
        if done:
            self._go(c, _HANDSHAKE_DONE)
            c.tls_ms = (now - c.phase_ns) / 1e6
            info = link.info()
            info["tls_ms"] = round(c.tls_ms, 3)
            if self._tls is not None and self._tls.principal is not None:
                info["principal"] = self._tls.principal
            self._put(
                ClientTlsDone(
                    now,
                    *c.ids,
                    client_id=self._client_id,
                    latency_ms=(now - c.invoke_ns) / 1e6,
                    detail=events.detail("client", "tls_done", **info),
                )
            )
            self._secured(c, now)
        else:
            self._watch(c, _IN | _OUT if c.out else _IN)

    def _tls_start_row(self, c: Conn, now: int) -> None:
        latency_ms = (now - c.invoke_ns) / 1e6
        self._put(ClientTlsStart(now, *c.ids, client_id=self._client_id, latency_ms=latency_ms))

    def _send_tls_out(self, c: Conn, now: int) -> bool:
        """Send what the TLS link has queued as far as the socket takes it; False when the
        send failed (the connection is then ended as a TLS failure)."""
        try:
            n = c.sock.send(c.out)
        except BlockingIOError:
            n = 0
        except OSError as exc:
            self._tls_failed(c, now, errno.errorcode.get(exc.errno or 0, "send failed"))
            return False
        c.out = c.out[n:]
        return True

    def _tls_flush(self, c: Conn, ev: int, now: int) -> bool:
        """On a writable socket, send what the TLS link queued (watching for input alone
        once it is all out); True when the socket is readable too."""
        if ev & _OUT and c.out:
            if not self._send_tls_out(c, now):
                return False
            if not c.out:
                self._ep.modify(c.fd, _IN)
        return bool(ev & ~_OUT)

    def _tls_io(self, c: Conn, ev: int) -> None:
        now = self._clock()
        if not self._tls_flush(c, ev, now):
            return
        link = c.tls
        assert link is not None
        try:
            data = c.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError as exc:
            self._tls_peer_closed(c, now, "reset", errno.errorcode.get(exc.errno or 0, "reset"))
            return
        if not data:
            self._tls_peer_closed(c, now, "eof", "EOF during the handshake")
            return
        link.feed(data)
        self._tls_step(c, now)

    def _settling_io(self, c: Conn, ev: int) -> None:
        """A TLS 1.3 ``connect``: the rest of our handshake out, then the server's first
        record in (its session ticket) ends the connection as done; a close first is an
        ``eof`` (or ``reset``) after the handshake."""
        now = self._clock()
        if not self._tls_flush(c, ev, now):
            return
        try:
            data = c.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = None
        if data:
            self._go(c, _SETTLED)
            self._connected_done(c, now)
            return
        self._go(c, _PEER_CLOSED)
        c.eof_ms = (now - c.invoke_ns) / 1e6
        self._close(c, "eof" if data is not None else "reset", now)

    def _connected_done(self, c: Conn, now: int) -> None:
        """A ``connect`` that got through: held, or over TLS closed with a close_notify
        first (best effort: the alert is a few dozen bytes into an empty send buffer)."""
        if c.tls is not None and self._hold_ns <= 0:
            with contextlib.suppress(OSError):
                c.sock.send(c.out + c.tls.close_notify())
        self._done_or_hold(c, now)

    def _tls_peer_closed(self, c: Conn, now: int, reason: str, error: str) -> None:
        """The server closed during the handshake without a TLS alert: on Kafka, a
        connection quota's close (quotas run on the acceptor thread before any TLS byte is
        read), so it ends as a plaintext connection dropped after accept does: an ``eof``
        (or ``reset``), outcome ``eof_after_accept``, not a TLS failure. An alert the server
        sent before closing is read first and fails the handshake as ``tls``."""
        self._go(c, _PEER_CLOSED)
        c.eof_ms = (now - c.invoke_ns) / 1e6
        self._tls_fail_row(c, now, reason, error)
        self._close(c, reason, now)

    def _tls_fail_row(self, c: Conn, now: int, reason: str, error: str) -> None:
        self._put(
            ClientTlsFail(
                now,
                *c.ids,
                reason=reason,
                client_id=self._client_id,
                latency_ms=(now - c.invoke_ns) / 1e6,
                detail=events.detail(
                    "client", "tls_fail", **tls_fail_fields(error, c.phase_ns, now)
                ),
            )
        )

    def _tls_failed(
        self, c: Conn, now: int, error: str, outcome: str = "tls_failed", inp: Input = _TLS_FAILED
    ) -> None:
        self._go(c, inp)
        self._tls_fail_row(c, now, "tls", error)
        c.fail = outcome
        c.errors = (c.errors or []) + [f"TLS: {error}"]
        self._close(c, "timeout" if outcome == "timeout" else "tls", now)

    # -- SASL -------------------------------------------------------------------------------
    def _sasl_response(self, c: Conn, frame: bytes, now: int) -> None:
        ex = c.sasl
        settings = self._sasl
        assert ex is not None and settings is not None
        c.gen += 1
        inp, got = sasl_step(ex, frame, c.cid, c, now, settings.principal)
        self._go(c, inp)
        if inp is _SASL_PENDING:  # the pipelined SaslAuthenticate's answer is next
            c.api = SASL_AUTHENTICATE_KEY
            self._q_request.append((now + self._rt_ns, c, c.gen))
        elif inp is _SASL_ROUND:
            c.api = SASL_AUTHENTICATE_KEY
            self._request(c, got)
        elif inp is _SASL_DONE:
            c.sasl_ms = (now - c.phase_ns) / 1e6
            self._put(
                ClientSaslDone(
                    now,
                    *c.ids,
                    api_key=SASL_AUTHENTICATE_KEY,
                    client_id=self._client_id,
                    latency_ms=(now - c.invoke_ns) / 1e6,
                    detail=events.detail("client", "sasl_done", **got),
                )
            )
            self._secured(c, now)
        else:
            fields, error = got
            self._put(
                ClientSaslFail(
                    now,
                    *c.ids,
                    reason="auth",
                    api_key=c.api,
                    client_id=self._client_id,
                    latency_ms=(now - c.invoke_ns) / 1e6,
                    detail=events.detail("client", "sasl_fail", **fields),
                )
            )
            c.fail = "auth_failed"
            c.errors = (c.errors or []) + [error]
            self._close(c, "auth", now)

    # -- the socket's events ------------------------------------------------------------------
    def _io(self, c: Conn, ev: int) -> None:
        state = c.state
        if state is _AWAITING:
            self._readable(c)
        elif state is _HANDSHAKING:
            self._tls_io(c, ev)
        elif state is _SETTLING:
            self._settling_io(c, ev)
        elif state is _CONNECTING:
            err = c.sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_ERROR)
            c.gen += 1
            if err:
                del self._conns[c.fd]
                self._connect_failed(c, err)
            else:
                self._connected(c)
        elif state is _SENDING:
            try:
                n = c.sock.send(c.out)
            except BlockingIOError:
                return
            except OSError as exc:
                self._request_failed(c, "reset" if exc.errno in _RESET else "eof", self._clock())
                return
            c.out = c.out[n:]
            if not c.out:
                self._go(c, _SENT)
                self._ep.modify(c.fd, _IN)
        elif state is _HOLDING:
            # the server spoke or closed during the hold: note it, keep holding
            try:
                if c.sock.recv(65536):
                    return
            except BlockingIOError:
                return
            except OSError:
                pass
            self._go(c, _PEER_CLOSED)
            self._ep.unregister(c.fd)

    def _readable(self, c: Conn) -> None:
        try:
            data = c.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            self._request_failed(c, "reset", self._clock())
            return
        link = c.tls
        if link is not None:
            if data:
                link.feed(data)
            else:
                link.feed_eof()
            try:
                plain = link.read()
            except ssl.SSLError as exc:
                self._request_failed(c, "reset", self._clock(), f"TLS: {tls_error(exc)}")
                return
            if not plain:
                if data and not link.closed:
                    return  # a partial record, or a post-handshake message (session ticket)
                self._request_failed(c, "eof", self._clock())
                return
            data = plain
        elif not data:
            self._request_failed(c, "eof", self._clock())
            return
        buf = c.buf + data if c.buf else data
        while True:
            end = frame_end(buf)
            if not end:
                c.buf = buf
                return
            c.buf = b""
            if len(buf) == end:
                self._response(c, buf, self._clock())
                return
            frame, buf = buf[:end], buf[end:]
            self._response(c, frame, self._clock())
            if c.state is not _AWAITING:
                return

    def _response(self, c: Conn, frame: bytes, now: int) -> None:
        api = c.api
        if int.from_bytes(frame[4:8], "big") != c.cid:
            c.gen += 1
            self._request_failed(c, "reset", now, "correlation id mismatch")
            return
        if c.sasl is not None and c.sasl_ms is None:
            self._sasl_response(c, frame, now)
            return
        c.gen += 1
        self._go(c, _ANSWERED)
        nbytes = len(frame)
        detail = None
        error, throttle = response_fields(api, frame, self._produce_version)
        if api == API_VERSIONS_KEY and not self._learned and not error:
            self._learned = True
            self._learn(frame)
        if error or throttle:
            parts = {}
            if error:
                parts["error_code"] = error
                if c.errors is None:
                    c.errors = []
                c.errors.append(f"{API_NAMES[api]}: Kafka error code {error}")
            if throttle:
                parts["throttle_time_ms"] = throttle
            detail = events.detail("client", "request_ok", **parts)
        c.responses += 1
        if c.ready_ms is None:
            c.ready_ms = (now - c.invoke_ns) / 1e6
            self._put(
                ClientReady(
                    now, *c.ids, api_key=api, client_id=self._client_id, latency_ms=c.ready_ms
                )
            )
        self._put(
            ClientRequestOk(
                now,
                *c.ids,
                api_key=api,
                client_id=self._client_id,
                latency_ms=(now - c.req_ns) / 1e6,
                bytes=nbytes,
                detail=detail,
            )
        )
        shape = self.cfg.shape
        if api == API_VERSIONS_KEY and shape == "storm":
            self._send(c, METADATA_KEY, self._meta)
        elif api == API_VERSIONS_KEY and shape == "produce":
            self._send(c, PRODUCE_KEY, self._produce)
        else:
            self._done_or_hold(c, now)

    def _learn(self, frame: bytes) -> None:
        """The first ApiVersions answer: the highest Metadata and Produce versions both
        sides speak, encoded once for every later connection."""
        tops = max_versions(frame)
        top = tops.get(METADATA_KEY)
        if top is not None and top < METADATA_MAX_VERSION:
            self._meta = metadata_frame(self.cfg.client_id, top)
        top = tops.get(PRODUCE_KEY)
        if self.cfg.shape == "produce" and top is not None and top < PRODUCE_MAX_VERSION:
            self._produce_version = top
            self._produce = self._produce_frame()
            compile_produce(top)

    # -- the end ------------------------------------------------------------------------------
    def _done_or_hold(self, c: Conn, now: int) -> None:
        if self._hold_ns > 0:
            self._hold(c, now, self._hold_ns)
            return
        self._go(c, _FINISH)
        self._close(c, "done", now)

    def _hold(self, c: Conn, now: int, hold_ns: int) -> None:
        self._go(c, _HOLD)
        c.gen += 1
        self._watch(c, _IN)
        if hold_ns == self._hold_ns:
            self._q_hold.append((now + hold_ns, c, c.gen))
        else:  # a stalled TLS handshake without a hold time: the connect timeout
            self._q_tls.append((now + hold_ns, c, c.gen))

    def _request_failed(
        self, c: Conn, reason: str, now: int, why: str = "", inp: Input = _FAILED
    ) -> None:
        self._go(c, inp)
        if reason in ("eof", "reset") and c.eof_ms is None:
            c.eof_ms = (now - c.invoke_ns) / 1e6
        self._put(
            ClientRequestFail(
                now,
                *c.ids,
                reason=reason,
                api_key=c.api,
                client_id=self._client_id,
                latency_ms=(now - c.req_ns) / 1e6,
            )
        )
        if why:
            c.errors = (c.errors or []) + [why]
        self._close(c, reason, now)

    def _close(self, c: Conn, reason: str, now: int, outcome: str | None = None) -> None:
        """`c` is DONE (its step taken): its socket closed, its outcome counted, its
        `closed` row written."""
        c.gen += 1
        self._conns.pop(c.fd, None)
        c.sock.close()
        if c.tls is not None and self._tls is not None and self._tls.resume:
            session = c.tls.obj.session
            if session is not None and session.has_ticket:
                self._tls_session = session
        if outcome is None:
            outcome = self._classify(c, reason)
        out = self.stats.outcomes
        out[outcome] = out.get(outcome, 0) + 1
        if self.hist is None:
            return
        sasl, tls = self._sasl, self._tls
        fields = closed_fields(
            c,
            outcome,
            reason,
            self.cfg.profile,
            sasl.principal if sasl is not None else None,
            tls.principal if tls is not None else None,
        )
        self._put(
            ClientClosed(
                now,
                *c.ids,
                reason="refused" if outcome == "refused" else reason,
                client_id=self._client_id,
                latency_ms=(now - c.invoke_ns) / 1e6,
                detail=fields,  # typed: encoded at the flush, off this loop
            )
        )

    def _classify(self, c: Conn, reason: str) -> str:
        """`outcomes.classify`; a TLS or SASL failure is ``tls_failed``/``auth_failed``, a
        stalled handshake ``tls_stalled`` (set where it happened)."""
        if c.fail is not None:
            return c.fail
        outcome = classify(
            reason,
            responses=c.responses,
            ready_ms=c.ready_ms,
            delayed_threshold_ms=self._delayed_ms,
            connect_only=self.cfg.shape == "connect",
        )
        return outcome.value

    def _expire(self, now: int) -> None:
        """The deadlines passed: each ends its connection as its state's `TIMEOUT` says
        (a stale one, of an older generation, is dropped)."""
        for q in (self._q_connect, self._q_request, self._q_hold, self._q_tls):
            while q and q[0][0] <= now:
                _, c, gen = q.popleft()
                if c.gen != gen or c.state is _DONE:
                    continue
                self._timeout(c, now)

    def _timeout(self, c: Conn, now: int) -> None:
        state = c.state
        if state is _CONNECTING:
            self._conns.pop(c.fd, None)
            self._connect_failed(c, errno.ETIMEDOUT)
        elif state is _SETTLING:
            self._go(c, _TIMEOUT)
            self._close(c, "timeout", now)  # no session ticket in time
        elif state is _HANDSHAKING:
            self._tls_failed(c, now, "handshake timeout", "timeout", _TIMEOUT)
        elif state is _HOLDING:
            self._go(c, _TIMEOUT)
            self._close(c, "done", now)
        else:
            self._request_failed(c, "timeout", now, inp=_TIMEOUT)

    def _abort_all(self) -> None:
        """Stopped mid-run: close what is open without a ``closed`` row (outcome unknown)."""
        for c in list(self._conns.values()):
            c.sock.close()
            self.stats.aborted += 1
            self._go(c, _ABORT)
        self._conns.clear()


def _cause(err: int | None) -> str:
    if err in _PORTS:
        return "ports"
    if err in _FDS:
        return "fds"
    return "cpu"
