"""One storm-engine connection, the states it passes through and what each step may write:
the table `loadprofiles.engine.StormEngine` drives its connections by, and the pure pieces
of its steps (the SASL step's outcome, the rows' details).

Why a table: a storm connection has seven ways to end and a dozen stages (TCP, a PROXY
header, TLS over memory BIOs, a SASL login, the shape's requests, a hold); with the states
as plain ints, which step may follow which lived only in the engine's branches. Here every
step is a lookup, `TRANSITIONS[(state, input)]`, that gives the next state and the history
rows the step may write (`Write`); an input a state has no row for is a bug
(`TransitionError`). `tests/unit/test_engine_conn.py` drives the engine through every row
with a fake clock, a fake epoll and scripted sockets, checks each row written against the
row of the step that wrote it, and fails on a row no scenario took.

The states, as the engine takes a connection through them (``UP`` is passed through within
one step: it is never what the loop waits on)::

    NEW          --invoked-----------> CONNECTING   connect_invoke
    CONNECTING   --connected---------> UP           connect_ok (a PROXY header sent)
    CONNECTING   --connect_failed /
                   timeout-----------> DONE         connect_fail, closed
    UP           --tls_start---------> HANDSHAKING  tls_start
    HANDSHAKING  --handshake_done----> UP           tls_done
    HANDSHAKING  --tls_failed / peer_closed / timeout --> DONE   tls_fail, closed
    HANDSHAKING  --hold--------------> HOLDING      a stalled ClientHello (TLS fault)
    UP           --sent / sent_part--> AWAITING / SENDING   a login or the shape's request
    SENDING      --sent--------------> AWAITING
    AWAITING     --answered----------> UP           ready (the first), request_ok
    AWAITING     --sasl_pending------> AWAITING     the pipelined SaslAuthenticate is next
    AWAITING     --sasl_round / sasl_done --> UP    (sasl_done)
    AWAITING     --sasl_failed-------> DONE         sasl_fail, closed
    UP, SENDING, AWAITING --failed---> DONE         request_fail, closed
    SENDING, AWAITING --timeout------> DONE         request_fail, closed
    UP           --settle------------> SETTLING     TLS 1.3 connect: the server's first record
    SETTLING     --settled-----------> UP
    SETTLING     --peer_closed / timeout --> DONE   closed
    UP           --hold / finish-----> HOLDING / DONE   (closed)
    HOLDING      --peer_closed-------> HOLDING      noted, still held
    HOLDING      --timeout-----------> DONE         closed
    a waiting state --abort----------> DONE         stopped mid-run: no outcome, no row
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, NamedTuple

from base.history import events
from base.history.rows import ClientClosedDetail, ClientIds
from base.security.client import SaslError
from loadprofiles.outcomes import closed_detail

if TYPE_CHECKING:
    from base.security.client import SaslExchange, TlsLink

__all__ = [
    "NEXT",
    "TRANSITIONS",
    "Conn",
    "Input",
    "Row",
    "State",
    "TransitionError",
    "Write",
    "closed_fields",
    "sasl_step",
    "tls_fail_fields",
]


class _Member(enum.Enum):
    """Members hash by identity (they are singletons): the table is looked up on every
    step of every connection, and `Enum.__hash__` is a Python call."""

    __hash__ = object.__hash__


class State(_Member):
    NEW = "new"  # made; its connect not yet invoked
    CONNECTING = "connecting"  # connect invoked, not yet answered
    UP = "up"  # the transport is ready for the next stage (within one step)
    HANDSHAKING = "handshaking"  # TLS over memory BIOs, bounded by the connect timeout
    SENDING = "sending"  # a request partly sent
    AWAITING = "awaiting"  # a request sent, its response not yet read
    SETTLING = "settling"  # TLS 1.3 connect shape: until the server's first record
    HOLDING = "holding"  # done, the connection held open for the hold time
    DONE = "done"  # closed (with its `closed` row, unless aborted)


class Input(_Member):
    INVOKED = "invoked"  # connect_ex called
    CONNECTED = "connected"
    CONNECT_FAILED = "connect_failed"
    TLS_START = "tls_start"
    HANDSHAKE_DONE = "handshake_done"
    TLS_FAILED = "tls_failed"
    PEER_CLOSED = "peer_closed"  # the server closed (or reset) while nothing was asked
    SENT = "sent"  # a request wholly written
    SENT_PART = "sent_part"  # partly written: the rest when the socket takes it
    ANSWERED = "answered"  # a response of the shape's
    SASL_PENDING = "sasl_pending"
    SASL_ROUND = "sasl_round"
    SASL_DONE = "sasl_done"
    SASL_FAILED = "sasl_failed"
    FAILED = "failed"  # a request failed: EOF, reset, a bad response, a send error
    SETTLE = "settle"
    SETTLED = "settled"
    HOLD = "hold"
    FINISH = "finish"
    TIMEOUT = "timeout"  # the state's own deadline (connect, TLS, request, hold)
    ABORT = "abort"  # the engine stopped


class TransitionError(RuntimeError):
    """A step no row of `TRANSITIONS` allows: a bug in the engine."""


class Write(NamedTuple):
    """A history row a step may write, by its typed event (`base.history.events`)."""

    event: events.Event


class Row(NamedTuple):
    """One (state, input): the state the step leaves the connection in, and the history
    rows it may write."""

    next: State
    writes: frozenset[Write]


def _w(*names: str) -> frozenset[Write]:
    return frozenset(Write(events.event("client", n)) for n in names)


def _table() -> dict[tuple[State, Input], Row]:
    S, I = State, Input  # noqa: E741 (the table reads as the docstring's)
    rows: dict[tuple[State, Input], Row] = {}

    def row(state: State, inp: Input, nxt: State, writes: frozenset[Write] = _w()) -> None:
        rows[(state, inp)] = Row(nxt, writes)

    request_failed = _w("request_fail", "closed")
    tls_failed = _w("tls_fail", "closed")
    row(S.NEW, I.INVOKED, S.CONNECTING, _w("connect_invoke"))
    row(S.CONNECTING, I.CONNECTED, S.UP, _w("connect_ok"))
    row(S.CONNECTING, I.CONNECT_FAILED, S.DONE, _w("connect_fail", "closed"))
    row(S.CONNECTING, I.TIMEOUT, S.DONE, _w("connect_fail", "closed"))
    row(S.UP, I.TLS_START, S.HANDSHAKING, _w("tls_start"))
    row(S.HANDSHAKING, I.HANDSHAKE_DONE, S.UP, _w("tls_done"))
    for inp in (I.TLS_FAILED, I.PEER_CLOSED, I.TIMEOUT):
        row(S.HANDSHAKING, inp, S.DONE, tls_failed)
    row(S.HANDSHAKING, I.HOLD, S.HOLDING)
    row(S.UP, I.SENT, S.AWAITING)
    row(S.UP, I.SENT_PART, S.SENDING)
    row(S.SENDING, I.SENT, S.AWAITING)
    row(S.AWAITING, I.ANSWERED, S.UP, _w("ready", "request_ok"))
    row(S.AWAITING, I.SASL_PENDING, S.AWAITING)
    row(S.AWAITING, I.SASL_ROUND, S.UP)
    row(S.AWAITING, I.SASL_DONE, S.UP, _w("sasl_done"))
    row(S.AWAITING, I.SASL_FAILED, S.DONE, _w("sasl_fail", "closed"))
    for state in (S.UP, S.SENDING, S.AWAITING):
        row(state, I.FAILED, S.DONE, request_failed)
    for state in (S.SENDING, S.AWAITING):
        row(state, I.TIMEOUT, S.DONE, request_failed)
    row(S.UP, I.SETTLE, S.SETTLING)
    row(S.SETTLING, I.SETTLED, S.UP)
    row(S.SETTLING, I.PEER_CLOSED, S.DONE, _w("closed"))
    row(S.SETTLING, I.TIMEOUT, S.DONE, _w("closed"))
    row(S.SETTLING, I.TLS_FAILED, S.DONE, tls_failed)
    row(S.UP, I.HOLD, S.HOLDING)
    row(S.UP, I.FINISH, S.DONE, _w("closed"))
    row(S.HOLDING, I.PEER_CLOSED, S.HOLDING)
    row(S.HOLDING, I.TIMEOUT, S.DONE, _w("closed"))
    for state in (S.CONNECTING, S.HANDSHAKING, S.SENDING, S.AWAITING, S.SETTLING, S.HOLDING):
        row(state, I.ABORT, S.DONE)
    return rows


#: every step a connection may take: (state, input) -> its `Row`
TRANSITIONS = _table()
#: the same table as the engine looks it up on every step: (state, input) -> next state
NEXT = {key: row.next for key, row in TRANSITIONS.items()}


class Conn:
    """One connection's record: its state and only what its history rows need."""

    __slots__ = (
        "api", "broker", "buf", "cid", "conn_id", "connect_ms", "eof_ms", "errors", "fail", "fd",
        "gen", "ids", "invoke_ns", "ip", "out", "phase_ns", "port", "ready_ms", "req_ns",
        "responses", "sasl", "sasl_ms", "sip", "sock", "state", "tls", "tls_ms",
    )  # fmt: skip
    api: int
    broker: int | None
    buf: bytes
    cid: int
    conn_id: str
    connect_ms: float | None
    eof_ms: float | None
    errors: list[str] | None
    #: the outcome set where it happened (a TLS or SASL failure, a stalled handshake)
    fail: str | None
    fd: int
    #: bumped on every step that starts or ends a deadline: a queued deadline of an older
    #: generation is stale
    gen: int
    #: its rows' identity columns: conn_id, listener, client_ip, client_port, sock_ip,
    #: sock_port
    ids: ClientIds
    invoke_ns: int
    ip: str | None
    out: bytes
    #: when the TLS handshake or the SASL login began
    phase_ns: int
    port: int | None
    ready_ms: float | None
    req_ns: int
    responses: int
    sasl: SaslExchange | None
    sasl_ms: float | None
    #: the socket's own address when a PROXY header claims another (``ip``)
    sip: str | None
    sock: Any
    state: State
    tls: TlsLink | None
    tls_ms: float | None


# -- the steps' pure pieces --------------------------------------------------------------------
def _ms(ns: int) -> float:
    return round(ns / 1e6, 3)


def sasl_step(
    ex: SaslExchange, frame: bytes, cid: int, c: Conn, now: int, principal: str
) -> tuple[Input, Any]:
    """One SASL response read: the step it makes and what that step needs: the next
    token's frame (`SASL_ROUND`), nothing (`SASL_PENDING`: the pipelined answer is next),
    the `sasl_done` detail's fields (`SASL_DONE`), or the `sasl_fail` fields and the error
    line for the `closed` row (`SASL_FAILED`)."""
    try:
        nxt = ex.response(frame, cid)
    except SaslError as exc:
        fields = {
            "error": exc.reason,
            "error_code": exc.error_code,
            "mechanism": ex.mechanism,
            "principal": principal,
            "round": exc.round,
            "sasl_ms": _ms(now - c.phase_ns),
            # since the failing request went out: what Kafka's failed-login delay adds to
            "answer_ms": _ms(now - c.req_ns),
        }
        return Input.SASL_FAILED, (fields, f"SASL round {exc.round}: error {exc.error_code}")
    if nxt is None:
        fields = {
            "mechanism": ex.mechanism,
            "principal": principal,
            "rounds": ex.round,
            "sasl_ms": _ms(now - c.phase_ns),
        }
        return Input.SASL_DONE, fields
    if nxt:
        return Input.SASL_ROUND, nxt
    return Input.SASL_PENDING, None


def tls_fail_fields(error: str, phase_ns: int, now: int) -> dict[str, Any]:
    """The `tls_fail` detail's fields: the error, and the handshake's time once begun."""
    fields: dict[str, Any] = {"error": error}
    if phase_ns:
        fields["tls_ms"] = _ms(now - phase_ns)
    return fields


def closed_fields(
    c: Conn,
    outcome: str,
    reason: str,
    profile: str,
    sasl_principal: str | None,
    tls_principal: str | None,
) -> ClientClosedDetail:
    """The `closed` detail's fields: the outcome, each stage's time it reached, who it
    logged in as (SASL's user, else the client certificate's once TLS was done), how the
    server ended it, its first three errors."""
    d = closed_detail(outcome, reason, profile, c.connect_ms, c.ready_ms, c.eof_ms, c.errors)
    if c.tls_ms is not None:
        d["tls_ms"] = round(c.tls_ms, 3)
    if c.sasl_ms is not None:
        d["sasl_ms"] = round(c.sasl_ms, 3)
    if c.sasl is not None and sasl_principal is not None:
        d["principal"] = sasl_principal
    elif c.tls_ms is not None and tls_principal:
        d["principal"] = tls_principal
    return d
