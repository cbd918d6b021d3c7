"""The acceptor's connection core (`acceptor.connection`) driven by bytes, timer
ticks and answers alone: an injected clock, a recording wire, a host that answers as told.
No socket, no loop.

Each scenario is a plain function returning its connection (with its trace of steps);
the tests assert what each one sent, armed and wrote, and `test_every_row_is_exercised`
runs them all and fails on any step of `TRANSITIONS` none of them took. The fakes check
every action as it is taken: inside a step whose row lists it (`acted`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import pytest

from acceptor.broker_charge import LoggedRequest
from acceptor.charge import Charge
from acceptor.connection import (
    TRANSITIONS,
    WRITE_CLOSE,
    WRITE_REQUEST,
    WRITE_THROTTLE,
    Act,
    Connection,
    Eof,
    Input,
    Side,
    State,
    Timer,
    TransitionError,
    Write,
)
from acceptor.ports import DEFERRED, ChargeAsked
from acceptor.recorder import ConnInfo
from base.quota.requests import RequestCharge

pytestmark = pytest.mark.unit

MS = 1_000_000
C, U = Side.CLIENT, Side.UPSTREAM
ADMIN = 48  # DescribeClientQuotas: answered by the acceptor
UPSTREAM_ADDR = "127.0.0.1:50000"


# -- frames ------------------------------------------------------------------------------------
def req(cid: int, api_key: int = 3, version: int = 1) -> bytes:
    payload = struct.pack(">hhih", api_key, version, cid, 4) + b"test" + b"\0\0\0\0"
    return struct.pack(">i", len(payload)) + payload


def produce(cid: int, acks: int) -> bytes:
    payload = struct.pack(">hhih", 0, 3, cid, 4) + b"test" + struct.pack(">hhii", -1, acks, 1, 0)
    return struct.pack(">i", len(payload)) + payload


def resp(cid: int) -> bytes:
    return struct.pack(">ii", 8, cid) + b"\0\0\0\0"


BAD_SIZE = struct.pack(">i", -5)  # a size no frame has: bad_frame
NO_HEADER = struct.pack(">i", 2) + b"\0\0"  # a whole frame whose header cannot be read


# -- the fakes -----------------------------------------------------------------------------------
def acted(conn: Connection | None, act: Act | Write) -> None:
    """An action of `conn`: taken inside a step (an input), one its row lists."""
    if conn is None:
        return
    row = conn.row
    assert row is not None, f"{act} outside any step"
    assert act in row.actions, f"{act} is not an action of the step taken ({row.step.__name__})"


class Clock:
    def __init__(self) -> None:
        self.ns = 1_000 * MS

    def __call__(self) -> int:
        return self.ns


class Wire:
    """Records every action; `send_eof` succeeds unless told otherwise."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.eof_ok = True
        self.conn: Connection | None = None

    def start(self) -> None:
        return None

    def send(self, side: Side, data: bytes) -> None:
        acted(self.conn, Act.SEND)
        self.calls.append(("send", side, bytes(data)))

    def send_eof(self, side: Side) -> bool:
        acted(self.conn, Act.HALF_CLOSE)
        self.calls.append(("eof", side))
        return self.eof_ok

    def pause(self, side: Side) -> None:
        acted(self.conn, Act.PAUSE)
        self.calls.append(("pause", side))

    def resume(self, side: Side) -> None:
        acted(self.conn, Act.RESUME)
        self.calls.append(("resume", side))

    def open_upstream(self, host: str, port: int) -> None:
        acted(self.conn, Act.OPEN_UPSTREAM)
        self.calls.append(("open_upstream", host, port))

    def arm(self, timer: Timer, at_ns: int) -> None:
        acted(self.conn, Act.MUTE if timer is Timer.UNMUTE else Act.ARM)
        self.calls.append(("arm", timer, at_ns))

    def close(self, reset: bool) -> None:
        acted(self.conn, Act.CLOSE)
        self.calls.append(("close", reset))

    def sent(self, side: Side) -> list[bytes]:
        return [c[2] for c in self.calls if c[0] == "send" and c[1] is side]


class Processor:
    index = 0

    def __init__(self) -> None:
        self.touched = 0
        self.removed = False

    def touch(self, conn: Any) -> None:
        self.touched += 1

    def remove(self, conn: Any) -> None:
        self.removed = True


class Host:
    """Answers admin requests as `local` says, throttles as `throttle_ms` says (by
    correlation id), and records the charges, their rows and the end."""

    request_max_bytes = 1024
    mutes_throttled = True

    def __init__(self) -> None:
        self.local: dict[int, Any] = {}
        self.throttle_ms: dict[int, int] = {}
        self.quotas = False
        self.remote_charge: Callable[[Any, ChargeAsked], None] | None = None
        #: (correlation id, instant) of each `request` row
        self.done: list[tuple[int, int]] = []
        self.rows: list[Charge] = []
        #: charges recorded with a check, and without (late)
        self.charged: list[Charge] = []
        self.unchecked: list[Charge] = []
        self.throttled: list[tuple[Charge, RequestCharge]] = []
        self.closed: list[tuple[str, dict[str, Any], bool]] = []
        self.conn: Connection | None = None

    @property
    def admin(self) -> Host:
        return self

    def maybe_handle(self, conn: Any, frame: bytes, info: Any) -> Any:
        return self.local.get(info.api_key)

    def upstream(self, listener: str) -> tuple[str, int]:
        return ("127.0.0.1", 9092)

    def log(self, message: str) -> None:
        pass

    def answered(self, done: Any) -> bool:
        return True

    def charge(self, charge: Charge) -> RequestCharge:
        acted(self.conn, Act.CHARGE)
        self.charged.append(charge)
        throttle = self.throttle_ms.get(charge.done.correlation_id, 0)
        return RequestCharge(throttle, False, ("", charge.client_id), 1.0, 0.0)

    def charge_unchecked(self, charge: Charge) -> None:
        acted(self.conn, Act.CHARGE)
        self.unchecked.append(charge)

    def request_row(self, conn: Any, charge: Charge) -> None:
        acted(self.conn, WRITE_REQUEST)
        self.done.append((charge.done.correlation_id, charge.at_ns))
        self.rows.append(charge)

    def throttle_row(self, conn: Any, charge: Charge, outcome: RequestCharge) -> None:
        acted(self.conn, WRITE_THROTTLE)
        self.throttled.append((charge, outcome))

    def request_quotas_enabled(self) -> bool:
        return self.quotas

    def connection_closed(
        self, conn: Any, reason: str, now_ns: int, detail: dict[str, Any], *, evicted: bool
    ) -> None:
        acted(self.conn, WRITE_CLOSE)
        self.closed.append((reason, detail, evicted))


class Log:
    """The broker's request log as the connection sees it: every line still to come;
    `came()` reads them (calls what waited)."""

    def __init__(self, hold: bool = True) -> None:
        self.hold = hold
        self.waiting: list[Callable[[], None]] = []
        self.lines: dict[int, LoggedRequest] = {}
        self.registered: list[str] = []

    def register(self, addr: str) -> None:
        self.registered.append(addr)

    def unregister(self, addr: str) -> None:
        self.registered.remove(addr)

    def pending(self, addr: str, cid: int) -> bool:
        return cid not in self.lines

    def should_hold(self, principal: str, client_id: str, api_key: int, at_most_ns: int) -> bool:
        return self.hold

    def wait(self, addr: str, cid: int, resume: Callable[[], None], *, late: bool = False) -> None:
        self.waiting.append(resume)

    def take(self, addr: str, cid: int) -> LoggedRequest | None:
        return self.lines.pop(cid, None)

    def came(self, cid: int, local_ms: float) -> None:
        ns = int(local_ms * MS)
        self.lines[cid] = LoggedRequest(UPSTREAM_ADDR, cid, 3, ns, 0, ns)
        waiting, self.waiting = self.waiting, []
        for resume in waiting:
            resume()


def new(
    initial: bytes = b"", *, log: Log | None = None, opaque: bool = False, sasl: bool = False
) -> tuple[Connection, Wire, Host, Clock]:
    host, wire, clock = Host(), Wire(), Clock()
    info = ConnInfo("CLIENT-1", "CLIENT", "127.0.0.9", 40000, "127.0.0.9", 40000)
    conn = Connection(
        host,  # type: ignore[arg-type]
        Processor(),  # type: ignore[arg-type]
        info,
        initial,
        False,
        charges=log,  # type: ignore[arg-type]
        clock=clock,
        opaque=opaque,
        sasl=sasl,
    )
    conn.wire = wire
    conn.trace = []
    wire.conn = host.conn = conn
    return conn, wire, host, clock


def open_conn(
    first: bytes = b"", *, log: Log | None = None, quotas: bool = False
) -> tuple[Connection, Wire, Host, Clock]:
    """A connection through to OPEN, its client's first bytes `first` forwarded."""
    conn, wire, host, clock = new(log=log)
    host.quotas = quotas
    conn.opened()
    conn.client_data(first or req(1))
    conn.upstream_up(UPSTREAM_ADDR)
    wire.calls.clear()
    return conn, wire, host, clock


def reason(host: Host) -> str:
    assert len(host.closed) == 1, host.closed
    return host.closed[0][0]


# -- scenarios -----------------------------------------------------------------------------------
def served_then_both_close() -> Connection:
    conn, wire, host, clock = new()
    conn.opened()
    assert conn.state is State.IDLE and wire.calls == []  # no upstream for a silent client
    conn.client_data(req(1)[:6])
    assert conn.state is State.CONNECTING
    assert wire.calls == [("pause", C), ("open_upstream", "127.0.0.1", 9092)]
    conn.client_data(req(1)[6:])  # kept, in order
    conn.upstream_up(UPSTREAM_ADDR)
    assert conn.state is State.OPEN
    assert wire.sent(U) == [req(1)] and ("resume", C) in wire.calls
    clock.ns += 2 * MS
    conn.upstream_data(resp(1))
    assert wire.sent(C) == [resp(1)] and host.done == [(1, clock.ns)]
    # nothing owed: both sides closed at once (a FIN each), as Kafka closes on the EOF
    assert conn.eof(C) is False and ("eof", U) not in wire.calls
    assert reason(host) == "client_eof" and wire.calls[-1] == ("close", False)
    assert host.closed[0][1]["bytes_in"] == len(req(1))
    assert host.closed[0][1]["requests"] == 1
    return conn


def closed_before_a_byte() -> Connection:
    conn, wire, host, _ = new()
    assert conn.eof(C) is False  # the processor's peek saw the FIN
    assert reason(host) == "client_eof" and wire.calls == [("close", False)]
    return conn


def reset_before_a_byte() -> Connection:
    conn, wire, host, _ = new()
    conn.lost(C, "ConnectionResetError()")
    assert reason(host) == "reset" and wire.calls == [("close", True)]
    return conn


def evicted_while_registered() -> Connection:
    conn, _, host, _ = new()
    conn.finish("max_connections", evicted=True)
    assert host.closed[0][0] == "max_connections" and host.closed[0][2] is True
    return conn


def proxy_bytes_open_the_upstream_at_once() -> Connection:
    conn, wire, _host, _ = new(req(1))
    conn.opened()
    assert conn.state is State.CONNECTING
    assert ("open_upstream", "127.0.0.1", 9092) in wire.calls
    conn.upstream_up(UPSTREAM_ADDR)
    assert wire.sent(U) == [req(1)]
    conn.finish("shutdown")
    return conn


def idle_client_leaves() -> Connection:
    conn, _, host, _ = new()
    conn.opened()
    assert conn.eof(C) is False
    assert reason(host) == "client_eof"
    return conn


def idle_client_resets() -> Connection:
    conn, _, host, _ = new()
    conn.opened()
    conn.lost(C, "ConnectionResetError()")
    assert reason(host) == "reset"
    return conn


def idle_expiry() -> Connection:
    conn, _, host, _ = new()
    conn.opened()
    conn.finish("idle_timeout")
    assert reason(host) == "idle_timeout"
    return conn


def half_close_while_connecting() -> Connection:
    conn, wire, host, _ = new()
    conn.opened()
    conn.client_data(req(1))
    assert conn.eof(C) is True and conn.client_eof is Eof.PENDING
    conn.upstream_up(UPSTREAM_ADDR)
    sends = [c for c in wire.calls if c[0] in ("send", "eof")]
    assert sends == [("send", U, req(1)), ("eof", U)]  # its request first, then the EOF
    conn.upstream_data(resp(1))
    assert conn.eof(U) is False and reason(host) == "client_eof"
    return conn


def upstream_unreachable() -> Connection:
    conn, _, host, _ = new()
    conn.opened()
    conn.client_data(req(1))
    conn.upstream_failed("ConnectionRefusedError()")
    assert reason(host) == "upstream_unreachable"
    assert host.closed[0][1]["error"] == "ConnectionRefusedError()"
    return conn


def upstream_connect_fails_after_its_transport() -> list[Connection]:
    """The upstream connect's timeout can fire after its transport was made (on a loaded
    machine: the TLS handshake done, `create_connection` not yet returned); asyncio closes
    that transport: the connection ends as unreachable, open or closing alike."""
    conn, _wire, host, _ = open_conn()
    conn.upstream_failed("TimeoutError()")
    assert reason(host) == "upstream_unreachable"
    assert host.closed[0][1]["error"] == "TimeoutError()"
    closing, _wire, host2, _ = open_conn(quotas=True)
    closing.client_data(BAD_SIZE)
    assert closing.state is State.CLOSING
    closing.upstream_failed("TimeoutError()")
    assert reason(host2) == "bad_frame"  # the first reason is kept
    assert host2.closed[0][1]["then"] == "upstream_unreachable"
    return [conn, closing]


def client_resets_while_connecting() -> Connection:
    conn, wire, host, _ = new()
    conn.opened()
    conn.client_data(req(1))
    conn.lost(C, "ConnectionResetError()")
    conn.upstream_up(UPSTREAM_ADDR)  # the upstream came up after the end: closed again
    assert reason(host) == "reset" and wire.calls[-1] == ("close", False)
    return conn


def shutdown_while_connecting() -> Connection:
    conn, _, host, _ = new()
    conn.opened()
    conn.client_data(req(1))
    conn.finish("shutdown")
    assert reason(host) == "shutdown"
    return conn


def bad_frame_in_the_first_bytes() -> Connection:
    """F3: the request before the bad size is answered, then the close."""
    conn, wire, host, clock = new()
    conn.opened()
    conn.client_data(req(1) + BAD_SIZE)
    conn.upstream_up(UPSTREAM_ADDR)
    assert conn.state is State.CLOSING and wire.sent(U) == [req(1)]
    assert ("arm", Timer.CLOSE_GRACE, clock.ns + 30_000 * MS) in wire.calls
    conn.client_data(req(2))  # nothing more is read
    assert wire.sent(U) == [req(1)]
    conn.upstream_data(resp(1))
    assert wire.sent(C) == [resp(1)] and reason(host) == "bad_frame"
    return conn


def unreadable_header_in_the_first_bytes() -> Connection:
    conn, wire, host, _ = new()
    conn.opened()
    conn.client_data(NO_HEADER)
    conn.upstream_up(UPSTREAM_ADDR)
    assert wire.sent(U) == [] and reason(host) == "bad_frame"
    return conn


def bad_frame_while_a_request_is_in_flight() -> Connection:
    conn, wire, host, _ = open_conn(quotas=True)
    conn.client_data(req(2) + BAD_SIZE)
    assert conn.state is State.CLOSING and wire.sent(U) == []  # behind the one in flight
    conn.upstream_data(resp(1))
    assert conn.state is State.CLOSING and wire.sent(U) == [req(2)]
    conn.upstream_data(resp(2))
    assert wire.sent(C) == [resp(1), resp(2)] and reason(host) == "bad_frame"
    return conn


def unreadable_header_closes_at_once() -> Connection:
    conn, wire, host, _ = open_conn()
    conn.upstream_data(resp(1))
    conn.client_data(NO_HEADER)
    assert reason(host) == "bad_frame" and wire.sent(U) == []
    return conn


def one_in_flight_and_a_throttle() -> Connection:
    """KIP-219: the second request waits for the first's response and its throttle; the
    client's half-close meanwhile waits behind it too."""
    conn, wire, host, clock = open_conn(quotas=True)
    conn.client_data(req(2) + req(3))
    assert wire.sent(U) == [] and ("pause", C) in wire.calls  # in flight: muted
    host.throttle_ms[1] = 100
    until = clock.ns + 100 * MS
    conn.upstream_data(resp(1))
    assert wire.sent(C) == [resp(1)] and ("arm", Timer.UNMUTE, until) in wire.calls
    assert conn.eof(C) is True and ("eof", U) not in wire.calls  # muted: held back
    clock.ns = until - 1  # a timer that fires early waits the rest
    conn.timer(Timer.UNMUTE)
    assert wire.sent(U) == [] and wire.calls[-1] == ("arm", Timer.UNMUTE, until)
    clock.ns = until
    conn.timer(Timer.UNMUTE)
    assert wire.sent(U) == [req(2)]
    conn.upstream_data(resp(2))
    assert wire.sent(U) == [req(2), req(3)] and wire.calls[-1] == ("eof", U)
    conn.upstream_data(resp(3))
    conn.eof(U)
    assert reason(host) == "client_eof"
    return conn


def pipelined_while_no_quota_can_throttle() -> Connection:
    conn, wire, _host, _ = open_conn()
    conn.client_data(req(2) + req(3) + produce(4, acks=0))
    assert wire.sent(U) == [req(1), req(2), req(3), produce(4, acks=0)][1:]
    conn.upstream_data(resp(1) + resp(2) + resp(3))
    assert wire.sent(C) == [resp(1) + resp(2) + resp(3)]
    conn.finish("shutdown")
    return conn


def acks_zero_releases_the_gate_at_once() -> Connection:
    conn, wire, _host, _ = open_conn(produce(1, acks=0), quotas=True)
    conn.client_data(req(2))
    assert wire.sent(U) == [req(2)]  # no response owed for the produce: not muted by it
    conn.finish("shutdown")
    return conn


def admin_answered_in_turn() -> Connection:
    """A local answer waits behind the broker's response to the request before it."""
    conn, wire, host, _ = open_conn()
    host.local[ADMIN] = resp(2)
    conn.client_data(req(2, api_key=ADMIN))
    assert wire.sent(C) == []
    conn.upstream_data(resp(1))
    assert wire.sent(C) == [resp(1) + resp(2)]
    conn.finish("shutdown")
    return conn


def deferred_answer_then_more() -> Connection:
    """The split model: an admin answer built in the accepting process; nothing more is
    taken until it comes; an answer for a closed connection changes nothing."""
    conn, wire, host, _ = open_conn()
    conn.upstream_data(resp(1))
    host.local[ADMIN] = DEFERRED
    conn.client_data(req(2, api_key=ADMIN) + req(3))
    assert conn.awaiting_answer and wire.sent(U) == [req(3)][:0]
    conn.deferred_answer(2, resp(2))
    assert wire.sent(C)[-1] == resp(2) and wire.sent(U) == [req(3)]
    conn.client_data(req(4, api_key=ADMIN))
    conn.deferred_answer(4, None, ("bad_request", "refused"))
    assert reason(host) == "bad_request"
    conn.deferred_answer(4, resp(4))  # late
    assert wire.sent(C)[-1] == resp(2)
    return conn


def deferred_answer_while_closing() -> Connection:
    conn, wire, host, _ = open_conn()
    conn.upstream_data(resp(1))
    host.local[ADMIN] = DEFERRED
    conn.client_data(req(2, api_key=ADMIN) + req(3) + BAD_SIZE)
    assert conn.state is State.CLOSING
    conn.deferred_answer(2, resp(2))
    assert conn.state is State.CLOSING and wire.sent(U) == [req(3)]
    conn.upstream_data(resp(3))
    assert reason(host) == "bad_frame"
    return conn


def deferred_answer_then_the_bad_frame() -> Connection:
    conn, wire, host, _ = open_conn()
    conn.upstream_data(resp(1))
    host.local[ADMIN] = DEFERRED
    conn.client_data(req(2, api_key=ADMIN) + BAD_SIZE)
    conn.deferred_answer(2, resp(2))
    assert wire.sent(C)[-1] == resp(2) and reason(host) == "bad_frame"
    return conn


def charges_decided_elsewhere() -> Connection:
    """The split model with a request quota: a response waits for its charge; the broker's
    EOF meanwhile waits behind it; a charge answer after the close changes nothing."""
    conn, wire, host, clock = open_conn(quotas=True)
    asked: list[ChargeAsked] = []
    host.remote_charge = lambda c, a: asked.append(a)
    conn.upstream_data(resp(1))
    assert [a.correlation_id for a in asked] == [1] and wire.sent(C) == []
    assert conn.eof(U) is True and conn.upstream_eof is Eof.PENDING
    conn.charged(1, RequestCharge(0, False, ("", "test"), 1.0, 0.0))
    assert wire.sent(C) == [resp(1)] and ("eof", C) in wire.calls
    grace = [c for c in wire.calls if c[0] == "arm" and c[1] is Timer.UPSTREAM_EOF_GRACE]
    assert grace == [("arm", Timer.UPSTREAM_EOF_GRACE, clock.ns + 1_000 * MS)]
    conn.timer(Timer.UPSTREAM_EOF_GRACE)
    assert reason(host) == "upstream_eof"
    conn.charged(1, RequestCharge(0, False, ("", "test"), 1.0, 0.0))
    conn.eof(U)
    assert len(host.closed) == 1
    return conn


def a_charge_throttles_while_closing() -> Connection:
    conn, wire, host, clock = open_conn(quotas=True)
    asked: list[ChargeAsked] = []
    host.remote_charge = lambda c, a: asked.append(a)
    conn.client_data(req(2) + req(3) + BAD_SIZE)
    conn.upstream_data(resp(1))
    host.throttle_ms[1] = 50
    conn.charged(1, RequestCharge(50, False, ("", "test"), 1.0, 2.0))
    assert conn.state is State.CLOSING and wire.sent(U) == []  # throttled: req 2 waits
    conn.timer(Timer.UNMUTE)  # fired early
    clock.ns += 50 * MS
    conn.timer(Timer.UNMUTE)
    assert conn.state is State.CLOSING and wire.sent(U) == [req(2)]
    conn.upstream_data(resp(2))
    conn.charged(2, RequestCharge(0, False, ("", "test"), 1.0, 0.0))
    assert wire.sent(U) == [req(2), req(3)]
    conn.upstream_data(resp(3))
    conn.charged(3, RequestCharge(0, False, ("", "test"), 1.0, 0.0))
    assert reason(host) == "bad_frame"
    return conn


def claimed_elsewhere() -> list[Connection]:
    """The split model reading the broker's request log: a response whose line is still to
    come is claimed where the meters are, with the wall time as its bound. Could not
    throttle: it goes at once and its whole charge goes there, unchecked, when its line
    comes, at the claim's instant. Could: it waits for its line (or asks its charge at once
    if the line came meanwhile). A claim answered after the close changes nothing."""
    out = []
    for hold, line_first in ((False, False), (True, False), (True, True)):
        log = Log()
        conn, wire, host, clock = open_conn(log=log, quotas=True)
        asked: list[ChargeAsked] = []
        host.remote_charge = lambda c, a, asked=asked: asked.append(a)
        clock.ns += 4 * MS
        conn.upstream_data(resp(1))
        (claim,) = asked
        assert (claim.kind, claim.correlation_id, claim.charged_ns) == ("claim", 1, 4 * MS)
        at = clock.ns
        assert wire.sent(C) == [] and conn.held is not None
        clock.ns += MS
        if line_first:
            log.lines[1] = LoggedRequest(UPSTREAM_ADDR, 1, 3, 500_000, 0, 500_000)
        conn.claimed(1, hold)
        if not hold:
            assert wire.sent(C) == [resp(1)] and host.unchecked == []
            clock.ns += 2 * MS
            log.came(1, local_ms=0.5)
            late_ask = asked[-1]
            assert (late_ask.kind, late_ask.charged_ns, late_ask.at_ns) == (
                "late", 500_000, at + 3 * MS,
            )  # fmt: skip
            assert host.rows[0].at_ns == at and host.rows[0].source == "broker_log_late"
        else:
            if not line_first:
                assert wire.sent(C) == [] and len(asked) == 1
                log.came(1, local_ms=0.5)
            assert asked[-1].kind == "check" and asked[-1].charged_ns == 500_000
            conn.charged(1, RequestCharge(0, False, ("", "test"), 1.0, 0.0))
            assert wire.sent(C) == [resp(1)]
        out.append(conn)
    # closing: the claim answered while the close waits for the answers owed
    conn, wire, host, _ = open_conn(log=Log(), quotas=True)
    host.remote_charge = lambda c, a: None
    conn.client_data(req(2) + BAD_SIZE)
    conn.upstream_data(resp(1))
    conn.claimed(1, False)
    assert conn.state is State.CLOSING and wire.sent(U)[-1] == req(2)
    conn.upstream_data(resp(2))
    conn.claimed(2, False)
    assert wire.sent(C)[-1] == resp(2) and reason(host) == "bad_frame"
    out.append(conn)
    # open: the client's EOF passed, the broker's behind the held response: both end it
    conn, wire, host, _ = open_conn(log=Log(), quotas=True)
    host.remote_charge = lambda c, a: None
    conn.upstream_data(resp(1))
    assert conn.eof(C) is True and conn.eof(U) is True
    conn.claimed(1, False)
    assert wire.sent(C) == [resp(1)] and reason(host) == "client_eof"
    out.append(conn)
    return out


def held_for_the_brokers_log() -> Connection:
    """One process reading the broker's request log: a response whose charge could
    throttle waits for its line, and is charged Kafka's handler time."""
    log = Log()
    conn, wire, host, clock = open_conn(log=log, quotas=True)
    assert log.registered == [UPSTREAM_ADDR]
    conn.upstream_data(resp(1))
    assert wire.sent(C) == [] and conn.held is not None
    clock.ns += 3 * MS
    log.came(1, local_ms=0.5)
    assert wire.sent(C) == [resp(1)] and host.charged[-1].source == "broker_log"
    assert host.charged[-1].handler_ns == 500_000 and host.charged[-1].held_ns == 3 * MS
    conn.client_data(req(2) + req(3) + BAD_SIZE)
    assert conn.state is State.CLOSING
    conn.upstream_data(resp(2))
    log.came(2, local_ms=0.5)
    assert conn.state is State.CLOSING and wire.sent(U)[-1] == req(3)
    conn.upstream_data(resp(3))
    log.came(3, local_ms=0.5)
    assert reason(host) == "bad_frame" and log.registered == []
    return conn


def half_close_while_the_brokers_log_is_read() -> Connection:
    """Every response delivered, but a charge may still wait for the broker's log line:
    the client's EOF goes upstream and the connection stays until the broker closes."""
    log = Log()
    conn, wire, host, _ = open_conn(log=log, quotas=True)
    conn.upstream_data(resp(1))
    log.came(1, local_ms=0.5)
    assert wire.sent(C) == [resp(1)]
    assert conn.eof(C) is True and wire.calls[-1] == ("eof", U) and host.closed == []
    assert conn.eof(U) is False and reason(host) == "client_eof" and log.registered == []
    return conn


def an_unreadable_request_behind_a_held_response() -> list[Connection]:
    """The request after a held response cannot be read: the close comes once the held
    response went out (its charge decided elsewhere, or its log line read)."""
    out = []
    conn, wire, host, _ = open_conn(quotas=True)
    host.remote_charge = lambda c, a: None
    conn.client_data(NO_HEADER)
    conn.upstream_data(resp(1))
    conn.charged(1, RequestCharge(0, False, ("", "test"), 1.0, 0.0))
    assert wire.sent(C) == [resp(1)] and reason(host) == "bad_frame"
    out.append(conn)
    log = Log()
    conn, wire, host, _ = open_conn(log=log, quotas=True)
    conn.client_data(NO_HEADER)
    conn.upstream_data(resp(1))
    log.came(1, local_ms=0.2)
    assert wire.sent(C) == [resp(1)] and reason(host) == "bad_frame"
    out.append(conn)
    return out


def late_lines_open_closing_and_closed() -> list[Connection]:
    """A response whose charge cannot throttle goes at once; its charge is made when its
    log line comes: while the connection is open, closing, or after it closed."""
    out = []
    for when in ("open", "closing", "closed"):
        log = Log(hold=False)
        conn, wire, host, _ = open_conn(log=log, quotas=True)
        conn.upstream_data(resp(1))
        assert wire.sent(C) == [resp(1)] and host.rows == [] and host.unchecked == []
        if when == "closing":
            conn.client_data(req(2) + BAD_SIZE)
            assert conn.state is State.CLOSING
        elif when == "closed":
            conn.lost(C, None)
        log.came(1, local_ms=0.5)
        assert (
            [c.source for c in host.unchecked]
            == ["broker_log_late"]
            == [c.source for c in host.rows]
        )
        conn.finish("shutdown")
        out.append(conn)
    return out


def a_bad_response_closes() -> Connection:
    conn, _, host, _ = open_conn()
    conn.upstream_data(BAD_SIZE)
    assert reason(host) == "upstream_bad_frame"
    return conn


def upstream_resets() -> Connection:
    conn, wire, host, _ = open_conn()
    conn.lost(U, "ConnectionResetError()")
    assert reason(host) == "upstream_reset" and wire.calls[-1] == ("close", True)
    return conn


def upstream_closes_then_the_client() -> Connection:
    conn, wire, host, _ = open_conn()
    conn.upstream_data(resp(1))
    assert conn.eof(U) is True and ("eof", C) in wire.calls
    assert conn.eof(C) is False and reason(host) == "upstream_eof"
    return conn


def upstream_gone_without_eof() -> Connection:
    conn, _, host, _ = open_conn()
    conn.lost(U, None)
    conn.lost(C, None)  # after the end: nothing
    assert reason(host) == "upstream_eof"
    return conn


def client_gone_without_eof() -> Connection:
    conn, _, host, _ = open_conn()
    conn.lost(C, None)
    assert reason(host) == "client_eof"
    return conn


def no_half_close_upstream() -> Connection:
    """The client's EOF while its request's response is owed, and an upstream that takes
    no half-close (TLS): the end follows at once."""
    conn, wire, host, _ = open_conn()
    wire.eof_ok = False
    assert conn.eof(C) is False
    assert reason(host) == "client_eof"
    assert wire.calls[-2:] == [("eof", U), ("close", False)]  # asked, refused, closed
    return conn


def backpressure_both_ways() -> Connection:
    conn, wire, host, _ = open_conn()
    conn.backpressure(U, True)  # the broker reads slowly: stop reading the client
    conn.backpressure(U, False)
    assert wire.calls == [("pause", C), ("resume", C)]
    conn.client_data(BAD_SIZE)
    conn.backpressure(C, True)
    assert wire.calls[-1] == ("pause", U)
    conn.upstream_data(resp(1))
    assert reason(host) == "bad_frame"
    return conn


def closing_ends_in_every_way() -> list[Connection]:
    out = []
    for end in ("grace", "client_lost", "upstream_lost", "shutdown", "eofs", "eofs_reversed"):
        conn, wire, host, _ = open_conn(quotas=True)
        conn.client_data(BAD_SIZE)
        assert conn.state is State.CLOSING
        if end == "grace":
            conn.timer(Timer.CLOSE_GRACE)
            assert reason(host) == "bad_frame"
            assert host.closed[0][1]["then"] == "close_grace_expired"
            assert host.closed[0][1]["unanswered"] == 1
        elif end == "client_lost":
            conn.lost(C, "ConnectionResetError()")
            assert host.closed[0][1]["then"] == "reset"
        elif end == "upstream_lost":
            conn.lost(U, None)
            assert reason(host) == "bad_frame"
        elif end == "shutdown":
            conn.finish("shutdown")
            assert reason(host) == "shutdown"  # imposed from outside: kept
        elif end == "eofs":
            assert conn.eof(C) is True and conn.state is State.CLOSING
            assert conn.eof(U) is False and reason(host) == "bad_frame"
        else:
            assert conn.eof(U) is True and ("eof", C) in wire.calls
            assert conn.eof(C) is False and host.closed[0][1]["then"] == "upstream_eof"
        out.append(conn)
    conn, wire, host, _ = open_conn(quotas=True)
    conn.client_data(BAD_SIZE)
    assert conn.eof(U) is True and conn.state is State.CLOSING
    conn.timer(Timer.UPSTREAM_EOF_GRACE)
    assert host.closed[0][1]["then"] == "upstream_eof"
    out.append(conn)
    return out


def a_bug_ends_the_connection_visibly() -> Connection:
    conn, wire, host, _ = open_conn()
    conn.internal_error(RuntimeError("a bug"))
    assert reason(host) == "internal_error" and wire.calls[-1] == ("close", True)
    assert host.closed[0][1]["error"] == "RuntimeError('a bug')"
    return conn


def every_input_after_the_end() -> Connection:
    conn, wire, host, _ = open_conn()
    conn.finish("shutdown")
    calls = len(wire.calls)
    conn.opened()
    conn.client_data(req(9))
    assert not conn.eof(C) and not conn.eof(U)
    conn.lost(C, None)
    conn.lost(U, None)
    conn.upstream_up(UPSTREAM_ADDR)
    conn.upstream_failed("x")
    conn.upstream_data(resp(9))
    conn.backpressure(C, True)
    conn.timer(Timer.UNMUTE)
    conn.deferred_answer(9, resp(9))
    conn.charged(9, RequestCharge(0, False, ("", ""), 1.0, 0.0))
    conn.claimed(9, False)
    conn._line_came(None)
    conn.finish("shutdown")
    assert len(host.closed) == 1
    assert wire.calls[calls:] == [("close", False)]  # the late upstream, closed again
    return conn


# -- secured listeners -------------------------------------------------------------------------
def tls_pass_through_relays_bytes_untouched() -> Connection:
    """A TLS listener passed through: no frame is read (a ClientHello is no Kafka frame),
    the bytes go both ways as they came, nothing is charged, half-closes pass."""
    conn, wire, host, _ = new(opaque=True)
    hello = bytes([0x16, 0x03, 0x01, 0x02, 0x00]) + b"\x01" * 40  # a size no frame has
    conn.opened()
    conn.client_data(hello[:10])
    conn.client_data(hello[10:])
    conn.upstream_up(UPSTREAM_ADDR)
    assert conn.state is State.OPEN and wire.sent(U) == [hello]
    conn.client_data(b"\x17\x03\x03")
    conn.upstream_data(b"\x16\x03\x03\x00\x10")
    assert wire.sent(U)[-1] == b"\x17\x03\x03" and wire.sent(C) == [b"\x16\x03\x03\x00\x10"]
    assert host.done == [] and conn.requests == 0
    assert conn.eof(C) is True and ("eof", U) in wire.calls
    assert conn.eof(U) is False and reason(host) == "client_eof"
    assert host.closed[0][1]["bytes_in"] == len(hello) + 3
    return conn


def _sasl_frame(request: Any, cid: int) -> bytes:
    request.with_header(correlation_id=cid, client_id="app")
    return bytes(request.encode(framed=True, header=True))


def sasl_handshake(cid: int, mechanism: str, version: int = 1) -> bytes:
    from kafka.protocol.sasl import SaslHandshakeRequest

    return _sasl_frame(SaslHandshakeRequest(version=version, mechanism=mechanism), cid)


def sasl_authenticate(cid: int, token: bytes, version: int = 2) -> bytes:
    from kafka.protocol.sasl import SaslAuthenticateRequest

    return _sasl_frame(SaslAuthenticateRequest(version=version, auth_bytes=token), cid)


def sasl_answer(cid: int, error_code: int = 0, version: int = 2) -> bytes:
    from kafka.protocol.sasl import SaslAuthenticateResponse

    body = SaslAuthenticateResponse(
        version=version, error_code=error_code, error_message=None, auth_bytes=b"s",
        session_lifetime_ms=0,
    ).encode(version=version)  # fmt: skip
    header = struct.pack(">i", cid) + (b"\0" if version >= 2 else b"")
    return struct.pack(">i", len(header) + len(body)) + header + bytes(body)


def _login(conn: Connection, frames: list[bytes], answers: list[bytes]) -> None:
    for frame, answer in zip(frames, answers, strict=True):
        conn.client_data(frame)
        conn.upstream_data(answer)


def sasl_plain_login_names_the_principal() -> Connection:
    """SASL_PLAINTEXT: the user is PLAIN's authcid once the broker said yes; the login's
    requests are uncharged, the first after it is charged to the user."""
    conn, _wire, host, _ = new(sasl=True)
    conn.opened()
    conn.client_data(req(1, api_key=18, version=3))  # ApiVersions
    conn.upstream_up(UPSTREAM_ADDR)
    conn.upstream_data(resp(1))
    _login(
        conn,
        [sasl_handshake(2, "PLAIN"), sasl_authenticate(3, b"\0alice\0s3cret")],
        [resp(2), sasl_answer(3)],
    )
    assert conn.principal == "alice" and conn.login is not None and conn.login.done
    assert [c.source for c in host.rows] == ["login"] * 3 and host.charged == []
    conn.client_data(req(4))
    conn.upstream_data(resp(4))
    assert [cid for cid, _ in host.done] == [1, 2, 3, 4]
    assert [(c.principal, c.source) for c in host.charged] == [("alice", None)]
    kept = [getattr(conn.login, name) for name in conn.login.__slots__]
    assert "s3cret" not in repr(kept)  # only the name is read out of the token
    conn.finish("shutdown")
    return conn


def sasl_scram_login_takes_two_rounds() -> Connection:
    """SCRAM: the user from the client-first-message's `n=` (escaped `=2C`), known only after
    the second successful round."""
    conn, _wire, _host, _ = new(sasl=True)
    conn.opened()
    conn.client_data(sasl_handshake(1, "SCRAM-SHA-512"))
    conn.upstream_up(UPSTREAM_ADDR)
    conn.upstream_data(resp(1))
    _login(conn, [sasl_authenticate(2, b"n,,n=bob=2Cjr,r=abc")], [sasl_answer(2)])
    assert conn.principal == "ANONYMOUS"  # one round of two
    _login(conn, [sasl_authenticate(3, b"c=biws,r=abcdef,p=proof")], [sasl_answer(3)])
    assert conn.principal == "bob,jr"
    conn.finish("shutdown")
    return conn


def sasl_failed_login_stays_anonymous() -> Connection:
    """A wrong password: the broker's error answer; nothing learnt, the broker closes."""
    conn, _wire, host, _ = new(sasl=True)
    conn.opened()
    conn.client_data(sasl_handshake(1, "PLAIN"))
    conn.upstream_up(UPSTREAM_ADDR)
    conn.upstream_data(resp(1))
    _login(conn, [sasl_authenticate(2, b"\0alice\0wrong")], [sasl_answer(2, error_code=58)])
    assert conn.principal == "ANONYMOUS" and conn.login is not None
    assert conn.login.failed == 58 and not conn.login.done
    assert conn.eof(U) is True
    assert conn.eof(C) is False and reason(host) == "upstream_eof"
    return conn


def sasl_handshake_v0_closes() -> Connection:
    """SaslHandshake v0: raw SASL tokens would follow, which cannot be read as requests:
    closed with its own reason before it is forwarded."""
    conn, wire, host, _ = new(sasl=True)
    conn.opened()
    conn.client_data(sasl_handshake(1, "PLAIN", version=0))
    conn.upstream_up(UPSTREAM_ADDR)
    assert reason(host) == "sasl_handshake_v0" and wire.sent(U) == []
    return conn


SCENARIOS: list[Callable[[], Any]] = [
    served_then_both_close,
    half_close_while_the_brokers_log_is_read,
    closed_before_a_byte,
    reset_before_a_byte,
    evicted_while_registered,
    proxy_bytes_open_the_upstream_at_once,
    idle_client_leaves,
    idle_client_resets,
    idle_expiry,
    half_close_while_connecting,
    upstream_unreachable,
    client_resets_while_connecting,
    shutdown_while_connecting,
    bad_frame_in_the_first_bytes,
    unreadable_header_in_the_first_bytes,
    bad_frame_while_a_request_is_in_flight,
    unreadable_header_closes_at_once,
    one_in_flight_and_a_throttle,
    pipelined_while_no_quota_can_throttle,
    acks_zero_releases_the_gate_at_once,
    admin_answered_in_turn,
    deferred_answer_then_more,
    deferred_answer_while_closing,
    deferred_answer_then_the_bad_frame,
    charges_decided_elsewhere,
    claimed_elsewhere,
    a_charge_throttles_while_closing,
    held_for_the_brokers_log,
    an_unreadable_request_behind_a_held_response,
    late_lines_open_closing_and_closed,
    a_bad_response_closes,
    upstream_resets,
    upstream_closes_then_the_client,
    upstream_gone_without_eof,
    upstream_connect_fails_after_its_transport,
    client_gone_without_eof,
    no_half_close_upstream,
    backpressure_both_ways,
    closing_ends_in_every_way,
    a_bug_ends_the_connection_visibly,
    every_input_after_the_end,
    tls_pass_through_relays_bytes_untouched,
    sasl_plain_login_names_the_principal,
    sasl_scram_login_takes_two_rounds,
    sasl_failed_login_stays_anonymous,
    sasl_handshake_v0_closes,
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda f: f.__name__)
def test_scenario(scenario: Callable[[], Any]) -> None:
    result = scenario()
    for conn in result if isinstance(result, list) else [result]:
        assert conn.trace, "no step taken"


def test_every_row_is_exercised() -> None:
    taken: set[tuple[State, Input, State]] = set()
    for scenario in SCENARIOS:
        result = scenario()
        for conn in result if isinstance(result, list) else [result]:
            taken.update(conn.trace)
    steps = {(state, inp, nxt) for (state, inp), row in TRANSITIONS.items() for nxt in row.next}
    untested = sorted(f"{a.name} --{i.name}--> {b.name}" for a, i, b in steps - taken)
    assert not untested, "rows no scenario takes:\n" + "\n".join(untested)


def test_a_step_outside_the_table_is_an_error() -> None:
    conn, _wire, _host, _ = new()
    conn.state = State.OPEN  # as a bug would leave it, then an input the table has no row for
    with pytest.raises(TransitionError, match="no step"):
        conn.opened()
