"""The typed row of every history event. GENERATED from `base/history/events.py` by
`python -m base.history.codegen`: do not edit by hand.

One frozen row class per event (``<Source><Event>``): its constructor takes only the
event's columns and a `detail` of the event's TypedDict (``<Source><Event>Detail``, only
its declared keys), so mypy refuses a column or key the event does not have. At run time
a row IS the writer's buffered tuple (`base.history.writer.ROW` order), a plain one: the
class is its type and its constructor, never its instances' class. CPython untracks a
plain tuple of atoms at its first collection and frees it on the fast path, never a
tuple subclass's instance: the hot writers build hundreds of thousands of rows (measured
in bench/results/NOTES.md, "Typed history rows"). ``ts_ns`` None: the writer derives it
from ``mono_ns``. Readers parse a stored `detail` with the row class's ``parse`` into its
TypedDict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypedDict, cast

from base.history.events import loads_detail


class Ident(Protocol):
    """A connection's identity columns (the acceptor's `ConnInfo`)."""

    @property
    def conn_id(self) -> str: ...
    @property
    def listener(self) -> str: ...
    @property
    def client_ip(self) -> str: ...
    @property
    def client_port(self) -> int: ...
    @property
    def sock_ip(self) -> str: ...
    @property
    def sock_port(self) -> int: ...


#: a client connection's identity columns, in order (conn_id, listener, client_ip,
#: client_port, sock_ip, sock_port): what a client row's constructor takes first
ClientIds = tuple[str | None, str | None, str | None, int | None, str | None, int | None]


def client_ids(
    conn_id: str | None,
    listener: str | None,
    ip: str | None,
    port: int | None,
    sock_ip: str | None = None,
) -> ClientIds:
    """A client connection's identity columns: the socket's address is the client's, but
    for ``sock_ip`` when a PROXY header claimed ``ip`` (the port is the socket's in both)."""
    return (conn_id, listener, ip, port, sock_ip or ip, port)


@dataclass(slots=True)
class ConnInfo:
    """A connection's identity columns (an `Ident`): the acceptor's, one per connection."""

    conn_id: str
    listener: str
    client_ip: str
    client_port: int
    sock_ip: str
    sock_port: int


class Row(
    tuple[
        int | None,  # ts_ns
        int | None,  # mono_ns
        str | None,  # event
        str | None,  # conn_id
        str | None,  # listener
        str | None,  # client_ip
        int | None,  # client_port
        str | None,  # sock_ip
        int | None,  # sock_port
        int | None,  # processor
        str | None,  # reason
        float | None,  # delay_ms
        int | None,  # api_key
        str | None,  # client_id
        str | None,  # principal
        float | None,  # latency_ms
        int | None,  # bytes
        object | None,  # detail
    ]
):
    """One history row as the writers buffer it: a plain tuple in `FIELDS` order
    (the writer's `ROW`), read by position, never by name."""

    __slots__ = ()


#: a row's fields, in order
FIELDS = (
    "ts_ns",
    "mono_ns",
    "event",
    "conn_id",
    "listener",
    "client_ip",
    "client_port",
    "sock_ip",
    "sock_port",
    "processor",
    "reason",
    "delay_ms",
    "api_key",
    "client_id",
    "principal",
    "latency_ms",
    "bytes",
    "detail",
)


class AcceptorRow(Row):
    """A row of the acceptor history: its writer takes only these."""

    __slots__ = ()


class ClientRow(Row):
    """A row of the client history: its writer takes only these."""

    __slots__ = ()


class HarnessRow(Row):
    """A row of the harness history: its writer takes only these."""

    __slots__ = ()


Outcome = Literal[
    "served",
    "delayed_served",
    "eof_after_accept",
    "refused",
    "reset",
    "timeout",
    "connected",
    "tls_failed",
    "tls_stalled",
    "auth_failed",
]
ClosedBy = Literal["eof", "reset", "ip_rate", "shutdown"]
ChargeSource = Literal["broker_log", "wall", "late", "broker_log_late", "wall_late", "login"]


class AcceptorAcceptDetail(TypedDict, total=False):
    protected: Any
    proxy_header: Any
    tcp_accept_mono_ns: Any


class AcceptorAccept(AcceptorRow):
    """acceptor `accept`: socket taken (and its PROXY header read); the rate step runs now
    (Kafka's t0)
    """

    __slots__ = ()
    SOURCE = "acceptor"
    EVENT = "accept"

    def __new__(
        cls,
        mono_ns: int,
        info: Ident,
        detail: AcceptorAcceptDetail | str | None = None,
        ts_ns: int | None = None,
    ) -> AcceptorAccept:
        return (  # type: ignore[return-value]  # a plain tuple (module doc)
            ts_ns,
            mono_ns,
            "accept",
            info.conn_id,
            info.listener,
            info.client_ip,
            info.client_port,
            info.sock_ip,
            info.sock_port,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            detail,
        )

    @staticmethod
    def parse(text: str | None) -> AcceptorAcceptDetail:
        """A stored `detail` (JSON) as this event's mapping ({} when empty)."""
        return cast("AcceptorAcceptDetail", loads_detail(text))


class AcceptorDelayDetail(TypedDict, total=False):
    broker_delay_ms: Any
    listener_delay_ms: Any


class AcceptorDelay(AcceptorRow):
    """acceptor `delay`: the rate step asked for a delay"""

    __slots__ = ()
    SOURCE = "acceptor"
    EVENT = "delay"

    def __new__(
        cls,
        mono_ns: int,
        info: Ident,
        reason: str | None = None,
        delay_ms: float | None = None,
        detail: AcceptorDelayDetail | str | None = None,
        ts_ns: int | None = None,
    ) -> AcceptorDelay:
        return (  # type: ignore[return-value]  # a plain tuple (module doc)
            ts_ns,
            mono_ns,
            "delay",
            info.conn_id,
            info.listener,
            info.client_ip,
            info.client_port,
            info.sock_ip,
            info.sock_port,
            None,
            reason,
            delay_ms,
            None,
            None,
            None,
            None,
            None,
            detail,
        )

    @staticmethod
    def parse(text: str | None) -> AcceptorDelayDetail:
        """A stored `detail` (JSON) as this event's mapping ({} when empty)."""
        return cast("AcceptorDelayDetail", loads_detail(text))


class AcceptorBlockedDetail(TypedDict, total=False):
    start_mono_ns: Any


class AcceptorBlocked(AcceptorRow):
    """acceptor `blocked`: the listener's acceptor was blocked (rate, slot, rate+slot,
    queue_full)
    """

    __slots__ = ()
    SOURCE = "acceptor"
    EVENT = "blocked"

    def __new__(
        cls,
        mono_ns: int,
        listener: str | None = None,
        reason: str | None = None,
        delay_ms: float | None = None,
        detail: AcceptorBlockedDetail | str | None = None,
        ts_ns: int | None = None,
    ) -> AcceptorBlocked:
        return (  # type: ignore[return-value]  # a plain tuple (module doc)
            ts_ns,
            mono_ns,
            "blocked",
            None,
            listener,
            None,
            None,
            None,
            None,
            None,
            reason,
            delay_ms,
            None,
            None,
            None,
            None,
            None,
            detail,
        )

    @staticmethod
    def parse(text: str | None) -> AcceptorBlockedDetail:
        """A stored `detail` (JSON) as this event's mapping ({} when empty)."""
        return cast("AcceptorBlockedDetail", loads_detail(text))


class AcceptorListenerCloseDetail(TypedDict, total=False):
    queued: Any


class AcceptorListenerClose(AcceptorRow):
    """acceptor `listener_close`: the listening socket closed at the stop; `queued`: the
    connections then in its accept queue, never accepted (the kernel resets them with the
    socket)
    """

    __slots__ = ()
    SOURCE = "acceptor"
    EVENT = "listener_close"

    def __new__(
        cls,
        mono_ns: int,
        listener: str | None = None,
        detail: AcceptorListenerCloseDetail | str | None = None,
        ts_ns: int | None = None,
    ) -> AcceptorListenerClose:
        return (  # type: ignore[return-value]  # a plain tuple (module doc)
            ts_ns,
            mono_ns,
            "listener_close",
            None,
            listener,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            detail,
        )

    @staticmethod
    def parse(text: str | None) -> AcceptorListenerCloseDetail:
        """A stored `detail` (JSON) as this event's mapping ({} when empty)."""
        return cast("AcceptorListenerCloseDetail", loads_detail(text))


class AcceptorAdmitDetail(TypedDict, total=False):
    pass


class AcceptorAdmit(AcceptorRow):
    """acceptor `admit`: counted (Kafka's t1 of the IP step)"""

    __slots__ = ()
    SOURCE = "acceptor"
    EVENT = "admit"

    def __new__(
        cls,
        mono_ns: int,
        info: Ident,
        delay_ms: float | None = None,
        detail: AcceptorAdmitDetail | str | None = None,
        ts_ns: int | None = None,
    ) -> AcceptorAdmit:
        return (  # type: ignore[return-value]  # a plain tuple (module doc)
            ts_ns,
            mono_ns,
            "admit",
            info.conn_id,
            info.listener,
            info.client_ip,
            info.client_port,
            info.sock_ip,
            info.sock_port,
            None,
            None,
            delay_ms,
            None,
            None,
            None,
            None,
            None,
            detail,
        )

    @staticmethod
    def parse(text: str | None) -> AcceptorAdmitDetail:
        """A stored `detail` (JSON) as this event's mapping ({} when empty)."""
        return cast("AcceptorAdmitDetail", loads_detail(text))


class AcceptorRegisterDetail(TypedDict, total=False):
    in_iteration: Any
    iteration: Any
    queue_depth: Any


class AcceptorRegister(AcceptorRow):
    """acceptor `register`: a processor started serving it"""

    __slots__ = ()
    SOURCE = "acceptor"
    EVENT = "register"

    def __new__(
        cls,
        mono_ns: int,
        info: Ident,
        processor: int | None = None,
        delay_ms: float | None = None,
        detail: AcceptorRegisterDetail | str | None = None,
        ts_ns: int | None = None,
    ) -> AcceptorRegister:
        return (  # type: ignore[return-value]  # a plain tuple (module doc)
            ts_ns,
            mono_ns,
            "register",
            info.conn_id,
            info.listener,
            info.client_ip,
            info.client_port,
            info.sock_ip,
            info.sock_port,
            processor,
            None,
            delay_ms,
            None,
            None,
            None,
            None,
            None,
            detail,
        )

    @staticmethod
    def parse(text: str | None) -> AcceptorRegisterDetail:
        """A stored `detail` (JSON) as this event's mapping ({} when empty)."""
        return cast("AcceptorRegisterDetail", loads_detail(text))


class AcceptorRejectDetail(TypedDict, total=False):
    count: Any
    max: Any


class AcceptorReject(AcceptorRow):
    """acceptor `reject`: per-IP count: closed at once"""

    __slots__ = ()
    SOURCE = "acceptor"
    EVENT = "reject"

    def __new__(
        cls,
        mono_ns: int,
        info: Ident,
        reason: str | None = None,
        detail: AcceptorRejectDetail | str | None = None,
        ts_ns: int | None = None,
    ) -> AcceptorReject:
        return (  # type: ignore[return-value]  # a plain tuple (module doc)
            ts_ns,
            mono_ns,
            "reject",
            info.conn_id,
            info.listener,
            info.client_ip,
            info.client_port,
            info.sock_ip,
            info.sock_port,
            None,
            reason,
            None,
            None,
            None,
            None,
            None,
            None,
            detail,
        )

    @staticmethod
    def parse(text: str | None) -> AcceptorRejectDetail:
        """A stored `detail` (JSON) as this event's mapping ({} when empty)."""
        return cast("AcceptorRejectDetail", loads_detail(text))


class AcceptorThrottleCloseDetail(TypedDict, total=False):
    closed_by: ClosedBy
    end_ms: Any
    throttle_start_mono_ns: Any


class AcceptorThrottleClose(AcceptorRow):
    """acceptor `throttle_close`: per-IP rate: the parked socket was closed"""

    __slots__ = ()
    SOURCE = "acceptor"
    EVENT = "throttle_close"

    def __new__(
        cls,
        mono_ns: int,
        info: Ident,
        reason: str | None = None,
        delay_ms: float | None = None,
        detail: AcceptorThrottleCloseDetail | str | None = None,
        ts_ns: int | None = None,
    ) -> AcceptorThrottleClose:
        return (  # type: ignore[return-value]  # a plain tuple (module doc)
            ts_ns,
            mono_ns,
            "throttle_close",
            info.conn_id,
            info.listener,
            info.client_ip,
            info.client_port,
            info.sock_ip,
            info.sock_port,
            None,
            reason,
            delay_ms,
            None,
            None,
            None,
            None,
            None,
            detail,
        )

    @staticmethod
    def parse(text: str | None) -> AcceptorThrottleCloseDetail:
        """A stored `detail` (JSON) as this event's mapping ({} when empty)."""
        return cast("AcceptorThrottleCloseDetail", loads_detail(text))


class AcceptorEvictDetail(TypedDict, total=False):
    pass


class AcceptorEvict(AcceptorRow):
    """acceptor `evict`: LRU channel shed over max.connections"""

    __slots__ = ()
    SOURCE = "acceptor"
    EVENT = "evict"

    def __new__(
        cls,
        mono_ns: int,
        info: Ident,
        processor: int | None = None,
        reason: str | None = None,
        detail: AcceptorEvictDetail | str | None = None,
        ts_ns: int | None = None,
    ) -> AcceptorEvict:
        return (  # type: ignore[return-value]  # a plain tuple (module doc)
            ts_ns,
            mono_ns,
            "evict",
            info.conn_id,
            info.listener,
            info.client_ip,
            info.client_port,
            info.sock_ip,
            info.sock_port,
            processor,
            reason,
            None,
            None,
            None,
            None,
            None,
            None,
            detail,
        )

    @staticmethod
    def parse(text: str | None) -> AcceptorEvictDetail:
        """A stored `detail` (JSON) as this event's mapping ({} when empty)."""
        return cast("AcceptorEvictDetail", loads_detail(text))


class AcceptorCloseDetail(TypedDict, total=False):
    bytes_in: Any
    bytes_out: Any
    counted: Any
    duration_ms: Any
    error: Any
    registered: Any
    requests: Any
    tcp_accept_mono_ns: Any
    then: Any
    unanswered: Any


class AcceptorClose(AcceptorRow):
    """acceptor `close`: a connection ended"""

    __slots__ = ()
    SOURCE = "acceptor"
    EVENT = "close"

    def __new__(
        cls,
        mono_ns: int,
        info: Ident,
        processor: int | None = None,
        reason: str | None = None,
        bytes: int | None = None,
        detail: AcceptorCloseDetail | str | None = None,
        ts_ns: int | None = None,
    ) -> AcceptorClose:
        return (  # type: ignore[return-value]  # a plain tuple (module doc)
            ts_ns,
            mono_ns,
            "close",
            info.conn_id,
            info.listener,
            info.client_ip,
            info.client_port,
            info.sock_ip,
            info.sock_port,
            processor,
            reason,
            None,
            None,
            None,
            None,
            None,
            bytes,
            detail,
        )

    @staticmethod
    def parse(text: str | None) -> AcceptorCloseDetail:
        """A stored `detail` (JSON) as this event's mapping ({} when empty)."""
        return cast("AcceptorCloseDetail", loads_detail(text))


class AcceptorRequestDetail(TypedDict, total=False):
    charge_source: ChargeSource
    charged_ms: Any
    held_ms: Any
    late_ms: Any
    network_ms: Any
    sample: Any


class AcceptorRequest(AcceptorRow):
    """acceptor `request`: one request answered"""

    __slots__ = ()
    SOURCE = "acceptor"
    EVENT = "request"

    def __new__(
        cls,
        mono_ns: int,
        info: Ident,
        processor: int | None = None,
        api_key: int | None = None,
        client_id: str | None = None,
        principal: str | None = None,
        latency_ms: float | None = None,
        bytes: int | None = None,
        detail: AcceptorRequestDetail | str | None = None,
        ts_ns: int | None = None,
    ) -> AcceptorRequest:
        return (  # type: ignore[return-value]  # a plain tuple (module doc)
            ts_ns,
            mono_ns,
            "request",
            info.conn_id,
            info.listener,
            info.client_ip,
            info.client_port,
            info.sock_ip,
            info.sock_port,
            processor,
            None,
            None,
            api_key,
            client_id,
            principal,
            latency_ms,
            bytes,
            detail,
        )

    @staticmethod
    def parse(text: str | None) -> AcceptorRequestDetail:
        """A stored `detail` (JSON) as this event's mapping ({} when empty)."""
        return cast("AcceptorRequestDetail", loads_detail(text))


class AcceptorRequestThrottleDetail(TypedDict, total=False):
    broker_time_ms: Any
    bucket: Any
    charge_source: ChargeSource
    charged_ms: Any
    held_ms: Any
    late_ms: Any
    network_ms: Any
    quota: Any
    rate: Any


class AcceptorRequestThrottle(AcceptorRow):
    """acceptor `request_throttle`: a request-quota violation muted the channel"""

    __slots__ = ()
    SOURCE = "acceptor"
    EVENT = "request_throttle"

    def __new__(
        cls,
        mono_ns: int,
        info: Ident,
        processor: int | None = None,
        delay_ms: float | None = None,
        api_key: int | None = None,
        client_id: str | None = None,
        principal: str | None = None,
        detail: AcceptorRequestThrottleDetail | str | None = None,
        ts_ns: int | None = None,
    ) -> AcceptorRequestThrottle:
        return (  # type: ignore[return-value]  # a plain tuple (module doc)
            ts_ns,
            mono_ns,
            "request_throttle",
            info.conn_id,
            info.listener,
            info.client_ip,
            info.client_port,
            info.sock_ip,
            info.sock_port,
            processor,
            None,
            delay_ms,
            api_key,
            client_id,
            principal,
            None,
            None,
            detail,
        )

    @staticmethod
    def parse(text: str | None) -> AcceptorRequestThrottleDetail:
        """A stored `detail` (JSON) as this event's mapping ({} when empty)."""
        return cast("AcceptorRequestThrottleDetail", loads_detail(text))


AcceptorAdminDetail = dict[str, Any]


class AcceptorAdmin(AcceptorRow):
    """acceptor `admin`: a quota/config change or refusal"""

    __slots__ = ()
    SOURCE = "acceptor"
    EVENT = "admin"

    def __new__(
        cls,
        mono_ns: int,
        info: Ident,
        reason: str | None = None,
        api_key: int | None = None,
        client_id: str | None = None,
        principal: str | None = None,
        detail: AcceptorAdminDetail | str | None = None,
        ts_ns: int | None = None,
    ) -> AcceptorAdmin:
        return (  # type: ignore[return-value]  # a plain tuple (module doc)
            ts_ns,
            mono_ns,
            "admin",
            info.conn_id,
            info.listener,
            info.client_ip,
            info.client_port,
            info.sock_ip,
            info.sock_port,
            None,
            reason,
            None,
            api_key,
            client_id,
            principal,
            None,
            None,
            detail,
        )

    @staticmethod
    def parse(text: str | None) -> AcceptorAdminDetail:
        """A stored `detail` (JSON) as this event's mapping ({} when empty)."""
        return loads_detail(text)


class AcceptorLoopLagDetail(TypedDict, total=False):
    armed: Any
    due_mono_ns: Any
    period_ms: Any
    threshold_ms: Any


class AcceptorLoopLag(AcceptorRow):
    """acceptor `loop_lag`: the heartbeat: the event loop ran late while an admission waited"""

    __slots__ = ()
    SOURCE = "acceptor"
    EVENT = "loop_lag"

    def __new__(
        cls,
        mono_ns: int,
        reason: str | None = None,
        delay_ms: float | None = None,
        detail: AcceptorLoopLagDetail | str | None = None,
        ts_ns: int | None = None,
    ) -> AcceptorLoopLag:
        return (  # type: ignore[return-value]  # a plain tuple (module doc)
            ts_ns,
            mono_ns,
            "loop_lag",
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            reason,
            delay_ms,
            None,
            None,
            None,
            None,
            None,
            detail,
        )

    @staticmethod
    def parse(text: str | None) -> AcceptorLoopLagDetail:
        """A stored `detail` (JSON) as this event's mapping ({} when empty)."""
        return cast("AcceptorLoopLagDetail", loads_detail(text))


class AcceptorProcessorStallDetail(TypedDict, total=False):
    queued: Any


class AcceptorProcessorStall(AcceptorRow):
    """acceptor `processor_stall`: a test-scheduled processor stall began or ended"""

    __slots__ = ()
    SOURCE = "acceptor"
    EVENT = "processor_stall"

    def __new__(
        cls,
        mono_ns: int,
        listener: str | None = None,
        processor: int | None = None,
        reason: str | None = None,
        delay_ms: float | None = None,
        detail: AcceptorProcessorStallDetail | str | None = None,
        ts_ns: int | None = None,
    ) -> AcceptorProcessorStall:
        return (  # type: ignore[return-value]  # a plain tuple (module doc)
            ts_ns,
            mono_ns,
            "processor_stall",
            None,
            listener,
            None,
            None,
            None,
            None,
            processor,
            reason,
            delay_ms,
            None,
            None,
            None,
            None,
            None,
            detail,
        )

    @staticmethod
    def parse(text: str | None) -> AcceptorProcessorStallDetail:
        """A stored `detail` (JSON) as this event's mapping ({} when empty)."""
        return cast("AcceptorProcessorStallDetail", loads_detail(text))


class ClientConnectInvokeDetail(TypedDict, total=False):
    broker: Any
    clock_offset_ns: Any
    clock_rtt_ns: Any
    intended_mono_ns: Any
    profile: Any
    proxy_protocol: Any


class ClientConnectInvoke(ClientRow):
    """client `connect_invoke`: an attempt starts (a Locust worker on another host: its clock
    offset; a cluster: the node id of the broker it connects to; the PROXY header version it
    sends)
    """

    __slots__ = ()
    SOURCE = "client"
    EVENT = "connect_invoke"

    def __new__(
        cls,
        mono_ns: int,
        conn_id: str | None = None,
        listener: str | None = None,
        client_ip: str | None = None,
        client_port: int | None = None,
        sock_ip: str | None = None,
        sock_port: int | None = None,
        client_id: str | None = None,
        detail: ClientConnectInvokeDetail | str | None = None,
        ts_ns: int | None = None,
    ) -> ClientConnectInvoke:
        return (  # type: ignore[return-value]  # a plain tuple (module doc)
            ts_ns,
            mono_ns,
            "connect_invoke",
            conn_id,
            listener,
            client_ip,
            client_port,
            sock_ip,
            sock_port,
            None,
            None,
            None,
            None,
            client_id,
            None,
            None,
            None,
            detail,
        )

    @staticmethod
    def parse(text: str | None) -> ClientConnectInvokeDetail:
        """A stored `detail` (JSON) as this event's mapping ({} when empty)."""
        return cast("ClientConnectInvokeDetail", loads_detail(text))


class ClientConnectFailDetail(TypedDict, total=False):
    cause: Any
    intended_mono_ns: Any
    profile: Any
    why: Any


class ClientConnectFail(ClientRow):
    """client `connect_fail`: TCP connect failed, or an intended arrival was not offered"""

    __slots__ = ()
    SOURCE = "client"
    EVENT = "connect_fail"

    def __new__(
        cls,
        mono_ns: int,
        conn_id: str | None = None,
        listener: str | None = None,
        client_ip: str | None = None,
        client_port: int | None = None,
        sock_ip: str | None = None,
        sock_port: int | None = None,
        reason: str | None = None,
        client_id: str | None = None,
        latency_ms: float | None = None,
        detail: ClientConnectFailDetail | str | None = None,
        ts_ns: int | None = None,
    ) -> ClientConnectFail:
        return (  # type: ignore[return-value]  # a plain tuple (module doc)
            ts_ns,
            mono_ns,
            "connect_fail",
            conn_id,
            listener,
            client_ip,
            client_port,
            sock_ip,
            sock_port,
            None,
            reason,
            None,
            None,
            client_id,
            None,
            latency_ms,
            None,
            detail,
        )

    @staticmethod
    def parse(text: str | None) -> ClientConnectFailDetail:
        """A stored `detail` (JSON) as this event's mapping ({} when empty)."""
        return cast("ClientConnectFailDetail", loads_detail(text))


class ClientConnectOkDetail(TypedDict, total=False):
    pass


class ClientConnectOk(ClientRow):
    """client `connect_ok`: TCP handshake completed"""

    __slots__ = ()
    SOURCE = "client"
    EVENT = "connect_ok"

    def __new__(
        cls,
        mono_ns: int,
        conn_id: str | None = None,
        listener: str | None = None,
        client_ip: str | None = None,
        client_port: int | None = None,
        sock_ip: str | None = None,
        sock_port: int | None = None,
        client_id: str | None = None,
        latency_ms: float | None = None,
        detail: ClientConnectOkDetail | str | None = None,
        ts_ns: int | None = None,
    ) -> ClientConnectOk:
        return (  # type: ignore[return-value]  # a plain tuple (module doc)
            ts_ns,
            mono_ns,
            "connect_ok",
            conn_id,
            listener,
            client_ip,
            client_port,
            sock_ip,
            sock_port,
            None,
            None,
            None,
            None,
            client_id,
            None,
            latency_ms,
            None,
            detail,
        )

    @staticmethod
    def parse(text: str | None) -> ClientConnectOkDetail:
        """A stored `detail` (JSON) as this event's mapping ({} when empty)."""
        return cast("ClientConnectOkDetail", loads_detail(text))


class ClientReadyDetail(TypedDict, total=False):
    pass


class ClientReady(ClientRow):
    """client `ready`: first Kafka response"""

    __slots__ = ()
    SOURCE = "client"
    EVENT = "ready"

    def __new__(
        cls,
        mono_ns: int,
        conn_id: str | None = None,
        listener: str | None = None,
        client_ip: str | None = None,
        client_port: int | None = None,
        sock_ip: str | None = None,
        sock_port: int | None = None,
        api_key: int | None = None,
        client_id: str | None = None,
        latency_ms: float | None = None,
        detail: ClientReadyDetail | str | None = None,
        ts_ns: int | None = None,
    ) -> ClientReady:
        return (  # type: ignore[return-value]  # a plain tuple (module doc)
            ts_ns,
            mono_ns,
            "ready",
            conn_id,
            listener,
            client_ip,
            client_port,
            sock_ip,
            sock_port,
            None,
            None,
            None,
            api_key,
            client_id,
            None,
            latency_ms,
            None,
            detail,
        )

    @staticmethod
    def parse(text: str | None) -> ClientReadyDetail:
        """A stored `detail` (JSON) as this event's mapping ({} when empty)."""
        return cast("ClientReadyDetail", loads_detail(text))


class ClientRequestOkDetail(TypedDict, total=False):
    error_code: Any
    in_flight_ms: Any
    offset: Any
    principal: Any
    profile: Any
    throttle_time_ms: Any


class ClientRequestOk(ClientRow):
    """client `request_ok`: a request got its response (kafka-python's sockets: in_flight_ms,
    send to response; principal, the user it logged in as)
    """

    __slots__ = ()
    SOURCE = "client"
    EVENT = "request_ok"

    def __new__(
        cls,
        mono_ns: int,
        conn_id: str | None = None,
        listener: str | None = None,
        client_ip: str | None = None,
        client_port: int | None = None,
        sock_ip: str | None = None,
        sock_port: int | None = None,
        reason: str | None = None,
        api_key: int | None = None,
        client_id: str | None = None,
        latency_ms: float | None = None,
        bytes: int | None = None,
        detail: ClientRequestOkDetail | str | None = None,
        ts_ns: int | None = None,
    ) -> ClientRequestOk:
        return (  # type: ignore[return-value]  # a plain tuple (module doc)
            ts_ns,
            mono_ns,
            "request_ok",
            conn_id,
            listener,
            client_ip,
            client_port,
            sock_ip,
            sock_port,
            None,
            reason,
            None,
            api_key,
            client_id,
            None,
            latency_ms,
            bytes,
            detail,
        )

    @staticmethod
    def parse(text: str | None) -> ClientRequestOkDetail:
        """A stored `detail` (JSON) as this event's mapping ({} when empty)."""
        return cast("ClientRequestOkDetail", loads_detail(text))


class ClientRequestFailDetail(TypedDict, total=False):
    error: Any
    profile: Any


class ClientRequestFail(ClientRow):
    """client `request_fail`: a request got no response"""

    __slots__ = ()
    SOURCE = "client"
    EVENT = "request_fail"

    def __new__(
        cls,
        mono_ns: int,
        conn_id: str | None = None,
        listener: str | None = None,
        client_ip: str | None = None,
        client_port: int | None = None,
        sock_ip: str | None = None,
        sock_port: int | None = None,
        reason: str | None = None,
        api_key: int | None = None,
        client_id: str | None = None,
        latency_ms: float | None = None,
        detail: ClientRequestFailDetail | str | None = None,
        ts_ns: int | None = None,
    ) -> ClientRequestFail:
        return (  # type: ignore[return-value]  # a plain tuple (module doc)
            ts_ns,
            mono_ns,
            "request_fail",
            conn_id,
            listener,
            client_ip,
            client_port,
            sock_ip,
            sock_port,
            None,
            reason,
            None,
            api_key,
            client_id,
            None,
            latency_ms,
            None,
            detail,
        )

    @staticmethod
    def parse(text: str | None) -> ClientRequestFailDetail:
        """A stored `detail` (JSON) as this event's mapping ({} when empty)."""
        return cast("ClientRequestFailDetail", loads_detail(text))


class ClientClosedDetail(TypedDict, total=False):
    closed_by: ClosedBy
    connect_ms: Any
    eof_ms: Any
    error: Any
    errors: Any
    outcome: Outcome
    principal: Any
    profile: Any
    ready_ms: Any
    sasl_ms: Any
    tls_ms: Any


class ClientClosed(ClientRow):
    """client `closed`: the client is done with the connection"""

    __slots__ = ()
    SOURCE = "client"
    EVENT = "closed"

    def __new__(
        cls,
        mono_ns: int,
        conn_id: str | None = None,
        listener: str | None = None,
        client_ip: str | None = None,
        client_port: int | None = None,
        sock_ip: str | None = None,
        sock_port: int | None = None,
        reason: str | None = None,
        client_id: str | None = None,
        latency_ms: float | None = None,
        detail: ClientClosedDetail | str | None = None,
        ts_ns: int | None = None,
    ) -> ClientClosed:
        return (  # type: ignore[return-value]  # a plain tuple (module doc)
            ts_ns,
            mono_ns,
            "closed",
            conn_id,
            listener,
            client_ip,
            client_port,
            sock_ip,
            sock_port,
            None,
            reason,
            None,
            None,
            client_id,
            None,
            latency_ms,
            None,
            detail,
        )

    @staticmethod
    def parse(text: str | None) -> ClientClosedDetail:
        """A stored `detail` (JSON) as this event's mapping ({} when empty)."""
        return cast("ClientClosedDetail", loads_detail(text))


class ClientTlsStartDetail(TypedDict, total=False):
    pass


class ClientTlsStart(ClientRow):
    """client `tls_start`: the client starts its TLS handshake (latency_ms: since connect_invoke)"""

    __slots__ = ()
    SOURCE = "client"
    EVENT = "tls_start"

    def __new__(
        cls,
        mono_ns: int,
        conn_id: str | None = None,
        listener: str | None = None,
        client_ip: str | None = None,
        client_port: int | None = None,
        sock_ip: str | None = None,
        sock_port: int | None = None,
        client_id: str | None = None,
        latency_ms: float | None = None,
        detail: ClientTlsStartDetail | str | None = None,
        ts_ns: int | None = None,
    ) -> ClientTlsStart:
        return (  # type: ignore[return-value]  # a plain tuple (module doc)
            ts_ns,
            mono_ns,
            "tls_start",
            conn_id,
            listener,
            client_ip,
            client_port,
            sock_ip,
            sock_port,
            None,
            None,
            None,
            None,
            client_id,
            None,
            latency_ms,
            None,
            detail,
        )

    @staticmethod
    def parse(text: str | None) -> ClientTlsStartDetail:
        """A stored `detail` (JSON) as this event's mapping ({} when empty)."""
        return cast("ClientTlsStartDetail", loads_detail(text))


class ClientTlsDoneDetail(TypedDict, total=False):
    principal: Any
    resumed: Any
    tls_ms: Any
    tls_version: Any


class ClientTlsDone(ClientRow):
    """client `tls_done`: the TLS handshake completed (tls_ms: its own duration; principal:
    Kafka's name for the client certificate offered, RFC 2253 order)
    """

    __slots__ = ()
    SOURCE = "client"
    EVENT = "tls_done"

    def __new__(
        cls,
        mono_ns: int,
        conn_id: str | None = None,
        listener: str | None = None,
        client_ip: str | None = None,
        client_port: int | None = None,
        sock_ip: str | None = None,
        sock_port: int | None = None,
        client_id: str | None = None,
        latency_ms: float | None = None,
        detail: ClientTlsDoneDetail | str | None = None,
        ts_ns: int | None = None,
    ) -> ClientTlsDone:
        return (  # type: ignore[return-value]  # a plain tuple (module doc)
            ts_ns,
            mono_ns,
            "tls_done",
            conn_id,
            listener,
            client_ip,
            client_port,
            sock_ip,
            sock_port,
            None,
            None,
            None,
            None,
            client_id,
            None,
            latency_ms,
            None,
            detail,
        )

    @staticmethod
    def parse(text: str | None) -> ClientTlsDoneDetail:
        """A stored `detail` (JSON) as this event's mapping ({} when empty)."""
        return cast("ClientTlsDoneDetail", loads_detail(text))


class ClientTlsFailDetail(TypedDict, total=False):
    error: Any
    tls_ms: Any


class ClientTlsFail(ClientRow):
    """client `tls_fail`: the TLS handshake failed, timed out, or the server closed during it"""

    __slots__ = ()
    SOURCE = "client"
    EVENT = "tls_fail"

    def __new__(
        cls,
        mono_ns: int,
        conn_id: str | None = None,
        listener: str | None = None,
        client_ip: str | None = None,
        client_port: int | None = None,
        sock_ip: str | None = None,
        sock_port: int | None = None,
        reason: str | None = None,
        client_id: str | None = None,
        latency_ms: float | None = None,
        detail: ClientTlsFailDetail | str | None = None,
        ts_ns: int | None = None,
    ) -> ClientTlsFail:
        return (  # type: ignore[return-value]  # a plain tuple (module doc)
            ts_ns,
            mono_ns,
            "tls_fail",
            conn_id,
            listener,
            client_ip,
            client_port,
            sock_ip,
            sock_port,
            None,
            reason,
            None,
            None,
            client_id,
            None,
            latency_ms,
            None,
            detail,
        )

    @staticmethod
    def parse(text: str | None) -> ClientTlsFailDetail:
        """A stored `detail` (JSON) as this event's mapping ({} when empty)."""
        return cast("ClientTlsFailDetail", loads_detail(text))


class ClientSaslDoneDetail(TypedDict, total=False):
    mechanism: Any
    principal: Any
    rounds: Any
    sasl_ms: Any


class ClientSaslDone(ClientRow):
    """client `sasl_done`: SASL login succeeded (principal: the user it logged in as; never a
    secret)
    """

    __slots__ = ()
    SOURCE = "client"
    EVENT = "sasl_done"

    def __new__(
        cls,
        mono_ns: int,
        conn_id: str | None = None,
        listener: str | None = None,
        client_ip: str | None = None,
        client_port: int | None = None,
        sock_ip: str | None = None,
        sock_port: int | None = None,
        api_key: int | None = None,
        client_id: str | None = None,
        latency_ms: float | None = None,
        detail: ClientSaslDoneDetail | str | None = None,
        ts_ns: int | None = None,
    ) -> ClientSaslDone:
        return (  # type: ignore[return-value]  # a plain tuple (module doc)
            ts_ns,
            mono_ns,
            "sasl_done",
            conn_id,
            listener,
            client_ip,
            client_port,
            sock_ip,
            sock_port,
            None,
            None,
            None,
            api_key,
            client_id,
            None,
            latency_ms,
            None,
            detail,
        )

    @staticmethod
    def parse(text: str | None) -> ClientSaslDoneDetail:
        """A stored `detail` (JSON) as this event's mapping ({} when empty)."""
        return cast("ClientSaslDoneDetail", loads_detail(text))


class ClientSaslFailDetail(TypedDict, total=False):
    answer_ms: Any
    error: Any
    error_code: Any
    mechanism: Any
    principal: Any
    round: Any
    sasl_ms: Any


class ClientSaslFail(ClientRow):
    """client `sasl_fail`: SASL login failed: Kafka's error code and the round (0 handshake, 1-2
    authenticate); answer_ms: from sending the failing request to its answer
    """

    __slots__ = ()
    SOURCE = "client"
    EVENT = "sasl_fail"

    def __new__(
        cls,
        mono_ns: int,
        conn_id: str | None = None,
        listener: str | None = None,
        client_ip: str | None = None,
        client_port: int | None = None,
        sock_ip: str | None = None,
        sock_port: int | None = None,
        reason: str | None = None,
        api_key: int | None = None,
        client_id: str | None = None,
        latency_ms: float | None = None,
        detail: ClientSaslFailDetail | str | None = None,
        ts_ns: int | None = None,
    ) -> ClientSaslFail:
        return (  # type: ignore[return-value]  # a plain tuple (module doc)
            ts_ns,
            mono_ns,
            "sasl_fail",
            conn_id,
            listener,
            client_ip,
            client_port,
            sock_ip,
            sock_port,
            None,
            reason,
            None,
            api_key,
            client_id,
            None,
            latency_ms,
            None,
            detail,
        )

    @staticmethod
    def parse(text: str | None) -> ClientSaslFailDetail:
        """A stored `detail` (JSON) as this event's mapping ({} when empty)."""
        return cast("ClientSaslFailDetail", loads_detail(text))


class ClientLoopLagDetail(TypedDict, total=False):
    engine: Any
    from_mono_ns: Any
    period_ms: Any
    threshold_ms: Any
    until_mono_ns: Any


class ClientLoopLag(ClientRow):
    """client `loop_lag`: the storm engine's heartbeat: its loop could not look at its sockets
    (`start`: the period and threshold; `stall`: latency_ms how late, [from, until] the
    stretch in which an observation of it may have been late)
    """

    __slots__ = ()
    SOURCE = "client"
    EVENT = "loop_lag"

    def __new__(
        cls,
        mono_ns: int,
        listener: str | None = None,
        reason: str | None = None,
        client_id: str | None = None,
        latency_ms: float | None = None,
        detail: ClientLoopLagDetail | str | None = None,
        ts_ns: int | None = None,
    ) -> ClientLoopLag:
        return (  # type: ignore[return-value]  # a plain tuple (module doc)
            ts_ns,
            mono_ns,
            "loop_lag",
            None,
            listener,
            None,
            None,
            None,
            None,
            None,
            reason,
            None,
            None,
            client_id,
            None,
            latency_ms,
            None,
            detail,
        )

    @staticmethod
    def parse(text: str | None) -> ClientLoopLagDetail:
        """A stored `detail` (JSON) as this event's mapping ({} when empty)."""
        return cast("ClientLoopLagDetail", loads_detail(text))


HarnessConfigDetail = dict[str, Any]


class HarnessConfig(HarnessRow):
    """harness `config`: every limit in force (runner: intended; acceptor: applied)"""

    __slots__ = ()
    SOURCE = "harness"
    EVENT = "config"

    def __new__(
        cls,
        mono_ns: int,
        reason: str | None = None,
        detail: HarnessConfigDetail | str | None = None,
        ts_ns: int | None = None,
    ) -> HarnessConfig:
        return (  # type: ignore[return-value]  # a plain tuple (module doc)
            ts_ns,
            mono_ns,
            "config",
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            reason,
            None,
            None,
            None,
            None,
            None,
            None,
            detail,
        )

    @staticmethod
    def parse(text: str | None) -> HarnessConfigDetail:
        """A stored `detail` (JSON) as this event's mapping ({} when empty)."""
        return loads_detail(text)


HarnessPhaseStartDetail = dict[str, Any]


class HarnessPhaseStart(HarnessRow):
    """harness `phase_start`: a load phase starts"""

    __slots__ = ()
    SOURCE = "harness"
    EVENT = "phase_start"

    def __new__(
        cls,
        mono_ns: int,
        detail: HarnessPhaseStartDetail | str | None = None,
        ts_ns: int | None = None,
    ) -> HarnessPhaseStart:
        return (  # type: ignore[return-value]  # a plain tuple (module doc)
            ts_ns,
            mono_ns,
            "phase_start",
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            detail,
        )

    @staticmethod
    def parse(text: str | None) -> HarnessPhaseStartDetail:
        """A stored `detail` (JSON) as this event's mapping ({} when empty)."""
        return loads_detail(text)


HarnessPhaseEndDetail = dict[str, Any]


class HarnessPhaseEnd(HarnessRow):
    """harness `phase_end`: a load phase ends"""

    __slots__ = ()
    SOURCE = "harness"
    EVENT = "phase_end"

    def __new__(
        cls,
        mono_ns: int,
        detail: HarnessPhaseEndDetail | str | None = None,
        ts_ns: int | None = None,
    ) -> HarnessPhaseEnd:
        return (  # type: ignore[return-value]  # a plain tuple (module doc)
            ts_ns,
            mono_ns,
            "phase_end",
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            detail,
        )

    @staticmethod
    def parse(text: str | None) -> HarnessPhaseEndDetail:
        """A stored `detail` (JSON) as this event's mapping ({} when empty)."""
        return loads_detail(text)


HarnessFaultStartDetail = dict[str, Any]


class HarnessFaultStart(HarnessRow):
    """harness `fault_start`: an injected fault starts"""

    __slots__ = ()
    SOURCE = "harness"
    EVENT = "fault_start"

    def __new__(
        cls,
        mono_ns: int,
        reason: str | None = None,
        detail: HarnessFaultStartDetail | str | None = None,
        ts_ns: int | None = None,
    ) -> HarnessFaultStart:
        return (  # type: ignore[return-value]  # a plain tuple (module doc)
            ts_ns,
            mono_ns,
            "fault_start",
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            reason,
            None,
            None,
            None,
            None,
            None,
            None,
            detail,
        )

    @staticmethod
    def parse(text: str | None) -> HarnessFaultStartDetail:
        """A stored `detail` (JSON) as this event's mapping ({} when empty)."""
        return loads_detail(text)


HarnessFaultEndDetail = dict[str, Any]


class HarnessFaultEnd(HarnessRow):
    """harness `fault_end`: an injected fault ends"""

    __slots__ = ()
    SOURCE = "harness"
    EVENT = "fault_end"

    def __new__(
        cls,
        mono_ns: int,
        reason: str | None = None,
        detail: HarnessFaultEndDetail | str | None = None,
        ts_ns: int | None = None,
    ) -> HarnessFaultEnd:
        return (  # type: ignore[return-value]  # a plain tuple (module doc)
            ts_ns,
            mono_ns,
            "fault_end",
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            reason,
            None,
            None,
            None,
            None,
            None,
            None,
            detail,
        )

    @staticmethod
    def parse(text: str | None) -> HarnessFaultEndDetail:
        """A stored `detail` (JSON) as this event's mapping ({} when empty)."""
        return loads_detail(text)


class HarnessRunStartDetail(TypedDict, total=False):
    duration_s: Any
    scenario: Any
    seed: Any
    target: Any


class HarnessRunStart(HarnessRow):
    """harness `run_start`: the run starts"""

    __slots__ = ()
    SOURCE = "harness"
    EVENT = "run_start"

    def __new__(
        cls,
        mono_ns: int,
        detail: HarnessRunStartDetail | str | None = None,
        ts_ns: int | None = None,
    ) -> HarnessRunStart:
        return (  # type: ignore[return-value]  # a plain tuple (module doc)
            ts_ns,
            mono_ns,
            "run_start",
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            detail,
        )

    @staticmethod
    def parse(text: str | None) -> HarnessRunStartDetail:
        """A stored `detail` (JSON) as this event's mapping ({} when empty)."""
        return cast("HarnessRunStartDetail", loads_detail(text))


class HarnessRunEndDetail(TypedDict, total=False):
    error: Any
    scenario: Any
    target: Any


class HarnessRunEnd(HarnessRow):
    """harness `run_end`: the run ends"""

    __slots__ = ()
    SOURCE = "harness"
    EVENT = "run_end"

    def __new__(
        cls,
        mono_ns: int,
        reason: str | None = None,
        detail: HarnessRunEndDetail | str | None = None,
        ts_ns: int | None = None,
    ) -> HarnessRunEnd:
        return (  # type: ignore[return-value]  # a plain tuple (module doc)
            ts_ns,
            mono_ns,
            "run_end",
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            reason,
            None,
            None,
            None,
            None,
            None,
            None,
            detail,
        )

    @staticmethod
    def parse(text: str | None) -> HarnessRunEndDetail:
        """A stored `detail` (JSON) as this event's mapping ({} when empty)."""
        return cast("HarnessRunEndDetail", loads_detail(text))


class HarnessKafkaMetricsDetail(TypedDict, total=False):
    broker: Any
    error: Any
    samples: Any
    scrape_ms: Any
    target: Any
    url: Any


class HarnessKafkaMetrics(HarnessRow):
    """harness `kafka_metrics`: one scrape of Prometheus metrics (a cluster: the broker whose
    exporter it is; target 'upstream': the Kafka behind the acceptor)
    """

    __slots__ = ()
    SOURCE = "harness"
    EVENT = "kafka_metrics"

    def __new__(
        cls,
        mono_ns: int,
        reason: str | None = None,
        latency_ms: float | None = None,
        detail: HarnessKafkaMetricsDetail | str | None = None,
        ts_ns: int | None = None,
    ) -> HarnessKafkaMetrics:
        return (  # type: ignore[return-value]  # a plain tuple (module doc)
            ts_ns,
            mono_ns,
            "kafka_metrics",
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            reason,
            None,
            None,
            None,
            None,
            latency_ms,
            None,
            detail,
        )

    @staticmethod
    def parse(text: str | None) -> HarnessKafkaMetricsDetail:
        """A stored `detail` (JSON) as this event's mapping ({} when empty)."""
        return cast("HarnessKafkaMetricsDetail", loads_detail(text))


class HarnessKernelNetDetail(TypedDict, total=False):
    error: Any
    listen_drops: Any
    listen_overflows: Any
    netns: Any
    reqq_full_drop: Any
    syn_cookies: Any


class HarnessKernelNet(HarnessRow):
    """harness `kernel_net`: one reading of the kernel's listen-queue drop counters (per network
    namespace)
    """

    __slots__ = ()
    SOURCE = "harness"
    EVENT = "kernel_net"

    def __new__(
        cls,
        mono_ns: int,
        reason: str | None = None,
        latency_ms: float | None = None,
        detail: HarnessKernelNetDetail | str | None = None,
        ts_ns: int | None = None,
    ) -> HarnessKernelNet:
        return (  # type: ignore[return-value]  # a plain tuple (module doc)
            ts_ns,
            mono_ns,
            "kernel_net",
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            reason,
            None,
            None,
            None,
            None,
            latency_ms,
            None,
            detail,
        )

    @staticmethod
    def parse(text: str | None) -> HarnessKernelNetDetail:
        """A stored `detail` (JSON) as this event's mapping ({} when empty)."""
        return cast("HarnessKernelNetDetail", loads_detail(text))


class HarnessProcessStatsDetail(TypedDict, total=False):
    bytes: Any
    cpu_s: Any
    fds: Any
    files: Any
    loop_busy: Any
    loop_busy_pid: Any
    loop_others: Any
    loop_read_mono_ns: Any
    loop_read_ms: Any
    loop_wait: Any
    pgids: Any
    processes: Any
    role: Any
    rss_kb: Any


class HarnessProcessStats(HarnessRow):
    """harness `process_stats`: one reading of a role's processes (descriptors, RSS, CPU, its
    busiest main thread's share of the time since the last reading), the history's size, the
    runner's own process (role runner) or the whole machine's busy CPU (role machine)
    """

    __slots__ = ()
    SOURCE = "harness"
    EVENT = "process_stats"

    def __new__(
        cls,
        mono_ns: int,
        latency_ms: float | None = None,
        detail: HarnessProcessStatsDetail | str | None = None,
        ts_ns: int | None = None,
    ) -> HarnessProcessStats:
        return (  # type: ignore[return-value]  # a plain tuple (module doc)
            ts_ns,
            mono_ns,
            "process_stats",
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            latency_ms,
            None,
            detail,
        )

    @staticmethod
    def parse(text: str | None) -> HarnessProcessStatsDetail:
        """A stored `detail` (JSON) as this event's mapping ({} when empty)."""
        return cast("HarnessProcessStatsDetail", loads_detail(text))


#: the row class of every event, by (source, event)
ROWS: dict[tuple[str, str], type[Row]] = {
    ("acceptor", "accept"): AcceptorAccept,
    ("acceptor", "delay"): AcceptorDelay,
    ("acceptor", "blocked"): AcceptorBlocked,
    ("acceptor", "listener_close"): AcceptorListenerClose,
    ("acceptor", "admit"): AcceptorAdmit,
    ("acceptor", "register"): AcceptorRegister,
    ("acceptor", "reject"): AcceptorReject,
    ("acceptor", "throttle_close"): AcceptorThrottleClose,
    ("acceptor", "evict"): AcceptorEvict,
    ("acceptor", "close"): AcceptorClose,
    ("acceptor", "request"): AcceptorRequest,
    ("acceptor", "request_throttle"): AcceptorRequestThrottle,
    ("acceptor", "admin"): AcceptorAdmin,
    ("acceptor", "loop_lag"): AcceptorLoopLag,
    ("acceptor", "processor_stall"): AcceptorProcessorStall,
    ("client", "connect_invoke"): ClientConnectInvoke,
    ("client", "connect_fail"): ClientConnectFail,
    ("client", "connect_ok"): ClientConnectOk,
    ("client", "ready"): ClientReady,
    ("client", "request_ok"): ClientRequestOk,
    ("client", "request_fail"): ClientRequestFail,
    ("client", "closed"): ClientClosed,
    ("client", "tls_start"): ClientTlsStart,
    ("client", "tls_done"): ClientTlsDone,
    ("client", "tls_fail"): ClientTlsFail,
    ("client", "sasl_done"): ClientSaslDone,
    ("client", "sasl_fail"): ClientSaslFail,
    ("client", "loop_lag"): ClientLoopLag,
    ("harness", "config"): HarnessConfig,
    ("harness", "phase_start"): HarnessPhaseStart,
    ("harness", "phase_end"): HarnessPhaseEnd,
    ("harness", "fault_start"): HarnessFaultStart,
    ("harness", "fault_end"): HarnessFaultEnd,
    ("harness", "run_start"): HarnessRunStart,
    ("harness", "run_end"): HarnessRunEnd,
    ("harness", "kafka_metrics"): HarnessKafkaMetrics,
    ("harness", "kernel_net"): HarnessKernelNet,
    ("harness", "process_stats"): HarnessProcessStats,
}
