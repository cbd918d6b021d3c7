"""One registered connection, sans-IO: its record, its state and every decision from its
registration to its close. `forwarding` is the thin asyncio adapter that moves its bytes.

Why sans-IO: the connection is where Kafka's rules meet two sockets (the client's and the
broker's), a request in flight, a throttle timer, responses held for the broker's request
log or for a charge decided in another process, half-closes and bad frames. Kept apart
from the transports, every one of those decisions is driven in a unit test by bytes, timer
ticks and answers, with an injected clock and a recording `Wire`, and no socket
(`tests/unit/test_connection.py`).

Kafka's channel, as a processor drives it (`SocketServer.Processor`, `Selector`,
`KafkaChannel`): registered (`configureNewConnections`), ready at once on PLAINTEXT, then
one receive at a time: muted from a request until its response is sent and its throttle
is over (`KafkaChannel.ChannelMuteState`; here `inflight.RequestGate` over `quota.mute`),
until either peer closes, the processor evicts it (`closeExcessConnections`) or expires it
(`connections.max.idle.ms`), or a receive is invalid (`InvalidReceiveException`: the
requests before it are answered first, finding F3 of docs/hostile-input.md). A relay adds
what standing between a client and a broker needs, and the states say so:

- `REGISTERED`: its processor registered it; the adapter is making the client transport.
- `IDLE`: the client side is open and has sent nothing. No upstream yet: a client that
  connects and leaves (Trogdor's CONNECT, a health check) costs the broker nothing, as
  none of its bytes would have reached it.
- `CONNECTING`: the client's first bytes came; they wait while the upstream opens.
- `OPEN`: both sides up; requests pass the gate, responses come back charged.
- `CLOSING`: a bad frame; nothing more is read; the answers owed still go out, then the
  close (or after `CLOSE_GRACE_S`).
- `CLOSED`: `finish` ran once: both sides closed, counts released, `close` written.

Half-closes are per side (`Eof`), beside the state: the client's goes upstream once every
request before it was forwarded, or, with nothing left to come back for the client, closes
both sides then (as Kafka closes a channel whose EOF it read); the broker's goes to the
client, which has `UPSTREAM_EOF_GRACE_S` to read and close.

The table drives: every input is looked up in `TRANSITIONS` by the state it finds,
`(state, input) -> Row`, and the row's `step` takes it; a state is left only for one of the
row's `next` states, and the row lists what the step may do (`Act`: the wire's actions, a
response's charge, the mute; `Write`: the history rows it writes, by their typed events:
`close`, and the `request` / `request_throttle` rows of the charges it decides,
`charge.py`). A state with no row for an input, or a step to a state its row does not
list, is a bug: `TransitionError`, which the adapter turns into the connection's end
(`internal_error`), visible in its `close` row. The tests check every action against the
row of the step that took it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Coroutine
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from acceptor.charge import (
    Asked,
    Charge,
    Held,
    Ledger,
    Logged,
    charged_ns,
    decide,
    late,
)
from acceptor.inflight import RequestGate
from acceptor.intake import (
    ANSWERED,
    AWAITED,
    CLOSE_GRACE_S,
    FORWARDED_UNANSWERED,
    close_reason,
    take_request,
)
from acceptor.login import ANONYMOUS, SASL_AUTHENTICATE, Login
from acceptor.ports import ASK_CLAIM, ASK_LATE, ChargeAsked
from acceptor.request_quotas import with_throttle_time
from acceptor.tracker import ResponseOrder
from base.history import events
from base.wire.framing import (
    FrameDecoder,
    FrameError,
    correlation_id_of_response,
    parse_request_header,
)

if TYPE_CHECKING:
    from acceptor.broker_charge import RequestLog
    from acceptor.ports import ChannelSlot, ConnectionHost, RemoteCharge
    from acceptor.recorder import ConnInfo
    from acceptor.tracker import Completed
    from base.quota.requests import RequestCharge

__all__ = [
    "TRANSITIONS",
    "Act",
    "Connection",
    "End",
    "Eof",
    "Input",
    "Row",
    "Side",
    "State",
    "Timer",
    "TransitionError",
    "Wire",
    "Write",
]

#: after the broker's EOF, how long the client has to read what it was sent and close
UPSTREAM_EOF_GRACE_S = 1.0
NS = 1_000_000_000


class _Member(enum.Enum):
    """Members hash by identity (they are singletons): the table's lookups and the
    per-side dicts run on every input, and `Enum.__hash__` is a Python call."""

    __hash__ = object.__hash__


class State(_Member):
    REGISTERED = "registered"
    IDLE = "idle"
    CONNECTING = "connecting"
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


class Input(_Member):
    OPENED = "opened"  # the client transport was made
    CLIENT_DATA = "client_data"
    CLIENT_EOF = "client_eof"  # the client half-closed (or closed before any transport)
    CLIENT_LOST = "client_lost"  # the client side went away (reset, or its transport lost)
    UPSTREAM_UP = "upstream_up"
    UPSTREAM_FAILED = "upstream_failed"
    UPSTREAM_DATA = "upstream_data"
    UPSTREAM_EOF = "upstream_eof"
    UPSTREAM_LOST = "upstream_lost"
    BACKPRESSURE = "backpressure"  # one side's write buffer filled or drained
    TIMER = "timer"
    ANSWER = "answer"  # an admin answer built in another process (split model)
    CHARGED = "charged"  # a response's charge decided in another process (split model)
    #: whether a response whose log line is still to come could be throttled by its charge,
    #: answered by another process (split model)
    CLAIMED = "claimed"
    LOGGED = "logged"  # the broker's request log line of a held response came (or not)
    LATE_LINE = "late_line"  # the log line of a response already sent came (or not)
    END = "end"  # ended from outside: eviction, idle expiry, shutdown, an internal error


class Side(_Member):
    CLIENT = "client"
    UPSTREAM = "upstream"


class Eof(_Member):
    """A side's half-close, as this connection has handled it."""

    NONE = "none"
    #: received; the client's waits until every request before it was forwarded, the
    #: broker's until the responses held before it were sent
    PENDING = "pending"
    PASSED = "passed"  # written to the other side


class Timer(_Member):
    UNMUTE = "unmute"  # KIP-219: the throttle of the request answered is over
    CLOSE_GRACE = "close_grace"  # after a bad frame: the answers owed had their time
    UPSTREAM_EOF_GRACE = "upstream_eof_grace"  # after the broker's EOF: the client's time


class TransitionError(RuntimeError):
    """A step no row of `TRANSITIONS` allows: a bug in the connection."""


_S, _I = State, Input
#: members read on every input, as module names: an enum member read through its class is
#: a slow attribute lookup on CPython 3.11 (~50 ns; this core takes ~60 per connection)
_REGISTERED, _IDLE, _CONNECTING = State.REGISTERED, State.IDLE, State.CONNECTING
_OPEN, _CLOSING, _CLOSED = State.OPEN, State.CLOSING, State.CLOSED
_CLIENT, _UPSTREAM = Side.CLIENT, Side.UPSTREAM
_NO_EOF, _EOF_PENDING, _EOF_PASSED = Eof.NONE, Eof.PENDING, Eof.PASSED
_LIVE = (_S.REGISTERED, _S.IDLE, _S.CONNECTING, _S.OPEN, _S.CLOSING)
_ENDS = (_I.CLIENT_LOST, _I.END)
#: both sides up: requests are taken, responses delivered
_FORWARDING = frozenset({_S.OPEN, _S.CLOSING})


class Act(_Member):
    """What a step may do, as its row of `TRANSITIONS` lists it (besides the rows it
    writes, `Write`): the `Wire`'s actions, a response's charge, the KIP-219 mute."""

    SEND = "send"
    HALF_CLOSE = "half_close"
    PAUSE = "pause"
    RESUME = "resume"
    OPEN_UPSTREAM = "open_upstream"
    ARM = "arm"
    CLOSE = "close"
    CHARGE = "charge"  # recorded on the meters, asked of another process, or made late
    MUTE = "mute"


class Write(NamedTuple):
    """A history row a step writes, by its typed event (`base.history.events`)."""

    event: events.Event


WRITE_CLOSE = Write(events.event("acceptor", "close"))
WRITE_REQUEST = Write(events.event("acceptor", "request"))
WRITE_THROTTLE = Write(events.event("acceptor", "request_throttle"))


class End(NamedTuple):
    """What an input that ends the connection carries: the `close` row's reason, whether
    both sides are reset, whether it was evicted, and the row's extra detail."""

    reason: str
    reset: bool = False
    evicted: bool = False
    detail: dict[str, Any] | None = None


#: a side's orderly close, the ends read on every connection's last callbacks
_CLIENT_EOF_END = End("client_eof")
_UPSTREAM_EOF_END = End("upstream_eof")


class Row(NamedTuple):
    """One (state, input) of the table: the method that takes the step, the states it may
    leave the connection in, and what it may do on the way."""

    step: Callable[..., Any]
    next: frozenset[State]
    actions: frozenset[Act | Write]


class Wire(Protocol):
    """What the connection asks of its I/O adapter (`forwarding.AsyncioWire`; a test's
    recording one). Each call is one action; none calls back into the connection."""

    def start(self) -> Coroutine[Any, Any, None] | None:
        """What the processor runs for the newly registered connection (None: ended)."""

    def send(self, side: Side, data: bytes) -> None: ...

    def send_eof(self, side: Side) -> bool:
        """Half-close towards `side`; False when that side cannot take one."""

    def pause(self, side: Side) -> None:
        """Stop reading from `side`."""

    def resume(self, side: Side) -> None: ...

    def open_upstream(self, host: str, port: int) -> None:
        """Connect to the broker; the answer comes to `upstream_up` / `upstream_failed`."""

    def arm(self, timer: Timer, at_ns: int) -> None:
        """Call `timer(timer)` at `at_ns` (on the connection's clock), unless closed first."""

    def close(self, reset: bool) -> None:
        """Close both sides (a reset: SO_LINGER 0, else a FIN) and cancel the timers."""


class Connection:
    """One registered connection; satisfies `ports.Channel`. Receives what it calls back
    (`host`: admin answers, the request charge, the end), its processor (`processor`: LRU
    order, removal), its record as admitted (`info`), the bytes read with a PROXY header
    (`initial`), the broker's request log if one is read (`charges`), and `clock`
    (monotonic ns). Its `wire` is attached by the adapter before `start`.

    `opaque`: a TLS pass-through listener's: the bytes are relayed untouched both ways (no
    frame read, nothing charged or answered here). `sasl`: a SASL_PLAINTEXT listener's:
    the login is read in passing (`login.Login`) for the principal requests are charged to."""

    wire: Wire

    def __init__(
        self,
        host: ConnectionHost,
        processor: ChannelSlot,
        info: ConnInfo,
        initial: bytes,
        protected: bool,
        *,
        charges: RequestLog | None,
        clock: Callable[[], int],
        opaque: bool = False,
        sasl: bool = False,
    ) -> None:
        self.host = host
        self.processor = processor
        self.info = info
        self.protected = protected
        self.charges = charges
        #: the connection's clock (monotonic ns), which its timers' instants are on
        self.clock = clock
        self.opaque = opaque
        #: the SASL login, read in passing (None: a listener without SASL)
        self.login: Login | None = Login() if sasl and not opaque else None
        #: the client certificate's principal, where the acceptor ends TLS (set by the
        #: adapter once the handshake is done)
        self.tls_principal: str | None = None
        self.state = _REGISTERED
        self.client_eof = _NO_EOF
        self.upstream_eof = _NO_EOF
        self.started_ns = self.last_active_ns = clock()
        self.bytes_in = self.bytes_out = self.requests = 0
        #: client bytes not yet cut into requests: read with the PROXY header, or while the
        #: upstream opens
        self.pending = initial
        self.gate = RequestGate()  # one request in flight (Kafka's KIP-219 mute)
        self.muted_until_ns = 0
        self.close_reason: str | None = None
        #: the upstream socket's own address as the broker's connection id names it
        self.upstream_addr: str | None = None
        self.held: Held | None = None
        #: the request-quota charges in the making (`charge`)
        self.ledger = Ledger()
        #: an admin answer is being built in another process: nothing more is taken
        self.awaiting_answer = False
        #: (reason, detail) of the bad frame the connection is closing after
        self._closing: tuple[str, dict[str, Any]] | None = None
        self._order = ResponseOrder()
        self._requests = FrameDecoder(host.request_max_bytes)
        self._responses = FrameDecoder(2**31 - 1)
        self._paused: dict[Side, set[str]] = {_CLIENT: set(), _UPSTREAM: set()}
        #: the row of the step being taken (None between inputs)
        self.row: Row | None = None
        #: every step taken, when a test asks for it (`trace = []`)
        self.trace: list[tuple[State, Input, State]] | None = None

    # -- the table ------------------------------------------------------------------------
    def _input(self, inp: Input, arg: Any = None) -> Any:
        """One input and the one value it carries (None, a value, or a tuple of them): its
        row of `TRANSITIONS`, looked up by the state now, takes the step with it (an input
        the state has no row for is a `TransitionError`). One value, not ``*args``: a call
        with unpacked arguments costs about twice a plain one, on every input."""
        before = self.state
        row = TRANSITIONS.get((before, inp))
        if row is None:
            raise TransitionError(f"{self.info.conn_id}: no step for {inp.name} in {before.name}")
        outer, self.row = self.row, row
        try:
            out = row.step(self, arg)
        finally:
            self.row = outer
        if self.trace is not None:
            self.trace.append((before, inp, self.state))
        return out

    def _enter(self, state: State) -> None:
        """The state the step being taken leaves the connection in: one its row lists."""
        row = self.row
        if row is None or state not in row.next:
            raise TransitionError(f"{self.info.conn_id}: no step to {state.name} from here")
        self.state = state

    @property
    def closed(self) -> bool:
        return self.state is _CLOSED

    @property
    def principal(self) -> str:
        """Who requests are charged to: the SASL user once logged in (SASL wins over a
        certificate on SASL_SSL, as in Kafka), else the client certificate's principal
        where the acceptor ends TLS, else ANONYMOUS."""
        if self.login is not None:
            return self.login.principal
        return self.tls_principal or ANONYMOUS

    def uncharged(self, correlation_id: int) -> bool:
        """Whether the request answered was taken before a SASL login completed (Kafka's
        authenticator answers those itself: never charged). Asked once per response."""
        login = self.login
        if login is None or correlation_id not in login.uncharged:
            return False
        login.uncharged.discard(correlation_id)
        return True

    # -- ports.Channel --------------------------------------------------------------------
    def start(self) -> Coroutine[Any, Any, None] | None:
        return self.wire.start()

    def finish(self, reason: str, *, evicted: bool = False) -> None:
        """Ended from outside (eviction, idle expiry, shutdown): `END`."""
        self._input(_I.END, End(reason, False, evicted))

    def mute(self, until_ns: int) -> None:
        """KIP-219: the request in flight is throttled until `until_ns` (before its response
        is written): nothing more is taken from the client until then."""
        self.muted_until_ns = max(self.muted_until_ns, until_ns)
        self.gate.throttle_started()
        self.wire.arm(Timer.UNMUTE, self.muted_until_ns)

    # -- inputs from the adapter -----------------------------------------------------------
    def opened(self) -> None:
        """The client transport was made: wait for its first bytes, or (bytes read with a
        PROXY header) open the upstream now."""
        self._input(_I.OPENED)

    def client_data(self, data: bytes) -> None:
        self._input(_I.CLIENT_DATA, data)

    def upstream_up(self, addr: str | None) -> None:
        """The upstream is connected; `addr` is its socket's address as the broker's
        connection ids name it (for the request log), if known."""
        self._input(_I.UPSTREAM_UP, addr)

    def upstream_failed(self, error: str) -> None:
        self._input(_I.UPSTREAM_FAILED, End("upstream_unreachable", detail={"error": error}))

    def upstream_data(self, data: bytes) -> None:
        self._input(_I.UPSTREAM_DATA, data)

    def eof(self, side: Side) -> bool:
        """A half-close from `side`; True to keep the other direction open."""
        return self._input(_I.CLIENT_EOF if side is _CLIENT else _I.UPSTREAM_EOF) is True

    def tls_failed(self, error: str) -> None:
        """The client's TLS handshake with the acceptor failed (a terminating listener):
        the client side is lost, with its own reason."""
        self._input(_I.CLIENT_LOST, End("tls_handshake_failed", detail={"error": error}))

    def lost(self, side: Side, error: str | None) -> None:
        """A side went away: with an error, a reset (answered with one); else a close."""
        client = side is _CLIENT
        inp = _I.CLIENT_LOST if client else _I.UPSTREAM_LOST
        if error is None:
            self._input(inp, _CLIENT_EOF_END if client else _UPSTREAM_EOF_END)
        else:
            reason = "reset" if client else "upstream_reset"
            self._input(inp, End(reason, True, detail={"error": error}))

    def backpressure(self, full: Side, on: bool) -> None:
        """Our write buffer towards `full` filled (`on`) or drained: read the other side
        no faster than this one takes it."""
        self._input(_I.BACKPRESSURE, (full, on))

    def timer(self, timer: Timer) -> None:
        self._input(_I.TIMER, timer)

    def internal_error(self, exc: Exception) -> None:
        """A bug must end this connection visibly, not leak it."""
        self.host.log(f"{self.info.conn_id}: internal error {exc!r}")
        self._input(_I.END, End("internal_error", True, detail={"error": repr(exc)}))

    # -- inputs from another process (the split model) ------------------------------------
    def deferred_answer(
        self, correlation_id: int, response: bytes | None, error: tuple[str, str] | None = None
    ) -> None:
        """The answer built in another process for the request awaiting it: sent in its
        turn, then requests are taken again; or the close it asked for (`error`: reason and
        message, as a refused admin request closes a connection)."""
        self._input(_I.ANSWER, (correlation_id, response, error))

    def charged(self, correlation_id: int, charge: RequestCharge) -> None:
        """The decided charge of a held response (`_ask_charges`)."""
        self._input(_I.CHARGED, (correlation_id, charge))

    def claimed(self, correlation_id: int, hold: bool) -> None:
        """Whether the charge of a response whose log line is still to come could throttle
        it (`hold`: it waits for its line), as the meters' process judged it."""
        self._input(_I.CLAIMED, (correlation_id, hold))

    # -- inputs from the broker's request log ---------------------------------------------
    def _line_came(self, remote: RemoteCharge | None) -> None:
        """The held responses' log line was read (or the hold is over)."""
        self._input(_I.LOGGED, remote)

    def _late_line_came(
        self, pending: Charge, sampled: bool, charges: RequestLog, addr: str
    ) -> None:
        """The log line of a response sent before it was read (or the wait is over)."""
        self._input(_I.LATE_LINE, (pending, sampled, charges, addr))

    # -- the steps (`TRANSITIONS` names the one each state takes for each input) -----------
    def _on_nothing(self, _: object) -> bool:
        """Nothing to do: callbacks after the end, bytes after a bad frame."""
        return False

    def _on_opened(self, _: None) -> None:
        self._enter(_IDLE)
        if self.pending:
            self._open_upstream()

    def _on_first_bytes(self, data: bytes) -> None:
        self.bytes_in += len(data)
        self._touch()
        self._open_upstream()
        self.pending += data

    def _on_kept(self, data: bytes) -> None:
        """Kept, in order, until the upstream is up."""
        self.bytes_in += len(data)
        self._touch()
        self.pending += data

    def _on_requests(self, data: bytes) -> None:
        self.bytes_in += len(data)
        self._touch()
        self._take(data)

    def _on_upstream_up(self, addr: str | None) -> None:
        self._enter(_OPEN)
        if self.charges is not None and addr is not None:  # before any request
            self.upstream_addr = addr
            self.charges.register(addr)
        data, self.pending = self.pending, b""
        if data:
            self._take(data)  # and taken while readable (`_pump`), but on an opaque listener
        self._resume(_CLIENT, "upstream")
        if not data or self.opaque:  # a client EOF kept meanwhile is passed (`_pump`)
            self._pump()

    def _on_late_upstream(self, _: str | None) -> None:
        """Ended while it was being made: it is closed too."""
        self.wire.close(reset=False)

    def _on_end(self, end: End) -> bool:
        self._finish(end.reason, reset=end.reset, evicted=end.evicted, detail=end.detail)
        return False

    def _on_silent_eof(self, _: None) -> bool:
        """The client left before sending anything: nothing to answer."""
        self._finish("client_eof")
        return False

    def _on_eof_kept(self, _: None) -> bool:
        """The client's EOF while its bytes wait for the upstream: passed after them."""
        self.client_eof = _EOF_PENDING
        return True

    def _on_client_eof(self, _: None) -> bool:
        self.client_eof = _EOF_PENDING
        if self.upstream_eof is _EOF_PASSED:
            self._finish("upstream_eof")
            return False
        self._pass_client_eof()
        return self.state is not _CLOSED

    def _on_upstream_eof(self, _: None) -> bool:
        return self._upstream_eof()

    def _on_responses(self, data: bytes) -> None:
        self._touch()
        if self.opaque:  # TLS pass-through: relayed as it came
            self.bytes_out += len(data)
            self.wire.send(_CLIENT, data)
            return
        try:
            frames = self._responses.feed(data)
            if frames:
                self._responses_read(frames)
        except FrameError as exc:
            self._finish("upstream_" + exc.reason, detail={"error": str(exc)})

    def _on_backpressure(self, arg: tuple[Side, bool]) -> None:
        full, on = arg
        other = _UPSTREAM if full is _CLIENT else _CLIENT
        if on:
            self._pause(other, "backpressure")
        else:
            self._resume(other, "backpressure")

    def _on_timer(self, timer: Timer) -> None:
        if timer is Timer.UNMUTE:
            self._unmute()
        elif timer is Timer.CLOSE_GRACE:
            self._finish("close_grace_expired", detail={"unanswered": len(self._order)})
        else:
            self._finish("upstream_eof")

    def _on_answer(self, arg: tuple[int, bytes | None, tuple[str, str] | None]) -> None:
        correlation_id, response, error = arg
        if not self.awaiting_answer:
            return
        self.awaiting_answer = False
        if response is None:
            reason, message = error or ("admin_error", "no answer")
            self._finish(reason, detail={"error": message})
            return
        out = self._order.ready(correlation_id, response)
        if out:
            self.wire.send(_CLIENT, out[0] if len(out) == 1 else b"".join(out))
        self.gate.response_sent()
        self._pump()

    def _on_charged(self, arg: tuple[int, RequestCharge]) -> None:
        correlation_id, charge = arg
        held = self.held
        if held is not None and correlation_id in held.owed:
            self.ledger.decided[correlation_id] = charge
            held.owed.discard(correlation_id)
            if not held.owed:
                self._release_held()

    def _on_claimed(self, arg: tuple[int, bool]) -> None:
        """The claim's answer: a response whose charge could throttle it waits for its log
        line (read meanwhile: its charge is asked now); one whose charge could not goes at
        once, charged when its line comes (`later`), as in one process."""
        correlation_id, hold = arg
        held, remote = self.held, self.host.remote_charge
        if held is None or correlation_id not in held.owed or remote is None:
            return
        held.owed.discard(correlation_id)
        charges, addr = self.charges, self.upstream_addr
        if not hold:
            self._release_held(later=True)
        elif charges is not None and addr is not None and charges.pending(addr, correlation_id):
            charges.wait(addr, correlation_id, partial(self._line_came, remote))
        else:
            self.held = None
            self._ask_charges(held.frames, remote, read_ns=held.since_ns)

    def _on_logged(self, remote: RemoteCharge | None) -> None:
        held = self.held
        if held is None or held.owed:
            return
        try:
            if remote is None:
                self._release_held()
            else:
                self.held = None
                self._ask_charges(held.frames, remote, read_ns=held.since_ns)
        except Exception as exc:  # called by the log's reader: end visibly, not leak
            self.internal_error(exc)

    def _on_late_line(self, arg: tuple[Charge, bool, RequestLog, str]) -> None:
        """A response sent before its log line: its whole charge recorded without a check,
        its `request` row written now with the response's instant; after the close too
        (the charge was owed to the bucket, not to the connection)."""
        pending, sampled, charges, addr = arg
        charge = late(pending, charges.take(addr, pending.done.correlation_id), self.clock())
        remote = self.host.remote_charge
        if remote is None:
            self.host.charge_unchecked(charge)
        else:  # where the meters are
            remote(self, _late_asked(charge))
        if sampled:
            self.host.request_row(self, charge)

    # -- the client side ------------------------------------------------------------------
    def _touch(self) -> None:
        self.last_active_ns = self.clock()
        self.processor.touch(self)

    def _open_upstream(self) -> None:
        self._enter(_CONNECTING)
        self._pause(_CLIENT, "upstream")  # one read's worth until it is up
        self.wire.open_upstream(*self.host.upstream(self.info.listener))

    def _take(self, data: bytes) -> None:
        """Client bytes, cut into requests, into the gate, then taken while readable. A bad
        frame ends the reading: the whole requests before it are still answered, then the
        connection closes with its reason (CLOSING). On an opaque listener they go
        upstream as they came."""
        if self.opaque:
            self.wire.send(_UPSTREAM, data)
            return
        try:
            frames = self._requests.feed(data)
        except FrameError as exc:
            self.gate.received(exc.frames, exc)
            self._closing = (exc.reason, {"error": str(exc)})
            self._enter(_CLOSING)
            self._pause(_CLIENT, "closing")
            self.wire.arm(Timer.CLOSE_GRACE, self.clock() + int(CLOSE_GRACE_S * NS))
        else:
            self.gate.received(frames, None)
        self._pump()

    def _pump(self) -> None:
        """Take requests while the channel is readable (Kafka's processor: one request,
        then muted until its response is sent and its throttle is over; all of them while
        no request can be throttled, the gate's `pipelined`)."""
        state = self.state
        if state is not _OPEN and state is not _CLOSING:
            return
        gate = self.gate
        # requests pass as they come while none can be throttled (no request quota was
        # ever set) and no broker request log is read for their charges (`inflight`)
        gate.pipelined = self.charges is None and not self.host.request_quotas_enabled()
        while self.state is not _CLOSED and not self.awaiting_answer:
            item = gate.take()
            if item is None:
                break
            if not self._step(item):
                return
        # what the client pipelined stays unread (in the kernel) while a request is in
        # flight, as on Kafka's muted channel; one read's worth of frames waits in the gate
        if len(gate) and (not gate.readable or self.awaiting_answer):
            self._pause(_CLIENT, "in_flight")
        elif "in_flight" in self._paused[_CLIENT]:
            self._resume(_CLIENT, "in_flight")
        if self.client_eof is _EOF_PENDING:
            self._pass_client_eof()

    def _step(self, item: bytes | FrameError) -> bool:
        """Handle one item the gate released; False once the connection is finished. A
        request forwarded whose response is owed holds the gate (muted, or outstanding
        while pipelined) until its response is sent; one answered here, or a Produce with
        acks=0 (the broker's no-op response), releases it at once."""
        if isinstance(item, FrameError):  # every request before it is answered
            self._finish(item.reason)
            return False
        login = self.login
        if login is not None and not login.done and not self._login_request(login, item):
            return False
        now = self.clock()
        try:
            taken = take_request(self.host.admin, self, self._order, item, now, self._to_client)
        except FrameError as stopped:  # unreadable header, refused admin request: Kafka closes
            self._finish(stopped.reason, detail={"error": str(stopped)})
            return False
        if taken is AWAITED:  # answered once built elsewhere: the gate waits for it
            self.awaiting_answer = True
        elif taken is ANSWERED:  # the answer is written
            self.gate.response_sent()
        else:
            self.ledger.forwarded_ns = now
            self.wire.send(_UPSTREAM, item)
            if taken is FORWARDED_UNANSWERED:  # acks=0: the broker's no-op response
                self.gate.response_sent()
        return True

    def _login_request(self, login: Login, frame: bytes) -> bool:
        """A request taken before the SASL login completed, read by the login; False when
        the connection ended (a SaslHandshake v0, whose raw tokens cannot be read)."""
        try:
            info = parse_request_header(frame)
        except FrameError:
            return True  # take_request closes it with the reason
        login.request(frame, info)
        if login.raw_tokens:
            self._finish(
                "sasl_handshake_v0",
                detail={"error": "SaslHandshake v0 (raw SASL tokens) is not relayed"},
            )
            return False
        return True

    def _to_client(self, data: bytes) -> None:
        self.wire.send(_CLIENT, data)

    def _unmute(self) -> None:
        if not self.muted_until_ns:  # an earlier timer already ended it
            return
        if self.clock() < self.muted_until_ns:  # timers may fire a little early: the rest
            self.wire.arm(Timer.UNMUTE, self.muted_until_ns)
            return
        self.muted_until_ns = 0
        if self.gate.throttle_ended():
            self._pump()

    def _pass_client_eof(self) -> None:
        """The client's half-close goes upstream once every request it sent before it was
        forwarded (the broker reads them all, then the EOF). With nothing owed to the
        client it closes both sides at once instead, as Kafka closes a channel whose EOF
        it read (the broker reads the same EOF; no round trip through it)."""
        if self.client_eof is not _EOF_PENDING or self.state not in _FORWARDING:
            return
        if len(self.gate) or self.pending:
            return
        self.client_eof = _EOF_PASSED
        if self._owes_nothing() or not self.wire.send_eof(_UPSTREAM):
            self._finish("client_eof")

    def _owes_nothing(self) -> bool:
        """Nothing more can come from the broker for the client: every request forwarded
        was answered and delivered, and no request log line is awaited for a charge. An
        opaque connection's bytes are not read, so whatever the broker still sends is
        owed."""
        return (
            not self.opaque
            and self.charges is None
            and self.held is None
            and not self.awaiting_answer
            and not len(self._order)
        )

    # -- the upstream side ----------------------------------------------------------------
    def _upstream_eof(self) -> bool:
        """The broker half-closed: passed to the client (after the responses held before
        it), which has `UPSTREAM_EOF_GRACE_S` to read them and close."""
        if self.state is _CLOSED:
            return False
        if self.held is not None:  # the held responses go to the client first
            self.upstream_eof = _EOF_PENDING
            return True
        self.upstream_eof = _EOF_PASSED
        if self.client_eof is not _NO_EOF:
            self._finish("client_eof")
            return False
        self.wire.send_eof(_CLIENT)
        self.wire.arm(Timer.UPSTREAM_EOF_GRACE, self.clock() + int(UPSTREAM_EOF_GRACE_S * NS))
        return True

    def _responses_read(self, frames: list[bytes]) -> None:
        """Whole responses from the broker: sent to the client charged (KIP-124), unless
        they must wait for the broker's log line or for charges decided elsewhere."""
        if self.held is not None:  # behind a response waiting for its log line
            self.held.frames.extend(frames)
            return
        remote = self.host.remote_charge
        if remote is not None and self.host.request_quotas_enabled():
            self._ask_charges(frames, remote)
            return
        charges, addr = self.charges, self.upstream_addr
        if charges is not None and addr is not None:
            cid = correlation_id_of_response(frames[0])
            if charges.pending(addr, cid):
                gate = self.gate
                now = self.clock()
                wall_ns = now - self.ledger.forwarded_ns  # the bound of its charge
                if charges.should_hold(self.principal, gate.client_id, gate.api_key, wall_ns):
                    self.held = Held(frames, now, set())
                    charges.wait(addr, cid, partial(self._line_came, None))
                    return
                self._deliver(frames, later=True)  # it cannot throttle: charged at its line
                return
        self._deliver(frames)

    def _ask_charges(
        self, frames: list[bytes], remote: RemoteCharge, read_ns: int | None = None
    ) -> None:
        """A processor process's responses while request quotas exist: each one's charge is
        decided where the meters are (`remote`); they are held until every answer came
        (`charged`), then sent as they would have been, throttle and mute included.

        With the broker's request log read, the charge is Kafka's handler time from its
        line. A response whose line has not come yet is claimed first, as one process
        claims it, where the meters are: whether its charge, at most the wall time since
        its request was forwarded, could throttle it (`claimed`). If it could, it waits for
        its line (at most `broker_charge.HOLD_MAX_S`; then `read_ns` says when it was
        read); if not, it goes at once and its charge is made when the line comes."""
        now = self.clock()
        charges, addr = self.charges, self.upstream_addr
        if charges is not None and addr is not None and read_ns is None:
            cid = correlation_id_of_response(frames[0])
            if charges.pending(addr, cid):
                self.held = Held(frames, now, {cid})
                self.ledger.asked[cid] = Asked(now, None)  # a late charge's instant
                gate = self.gate
                wall_ns = now - self.ledger.forwarded_ns  # the bound of its charge
                claim = ChargeAsked(
                    cid, gate.client_id, gate.api_key, wall_ns, 0, now, self.principal, ASK_CLAIM
                )
                remote(self, claim)
                return
        arrived_ns = now if read_ns is None else read_ns
        owed: set[int] = set()
        for frame in frames:
            cid = correlation_id_of_response(frame)
            pending = self._order.peek(cid)
            if pending is None:  # answers nothing forwarded: sent as it is
                continue
            login = self.login
            if login is not None and cid in login.uncharged:  # never charged (`uncharged`)
                continue
            broker_ns = arrived_ns - pending.sent_ns
            logged = None
            if charges is not None and addr is not None:
                logged = Logged.read(charges.take(addr, cid), broker_ns, now - arrived_ns)
            network_ns = 0 if logged is None else logged.network_ns
            owed.add(cid)
            self.ledger.asked[cid] = Asked(now, logged)
            remote(
                self,
                ChargeAsked(
                    cid,
                    pending.client_id or "",
                    pending.api_key,
                    charged_ns(logged, broker_ns, pending.allowance_ns),
                    network_ns,
                    now,
                    self.principal,
                ),
            )
        self.held = Held(frames, arrived_ns, owed)
        if not owed:  # sent now, as a held response is (an EOF meanwhile included)
            self._release_held()

    def _release_held(self, later: bool = False) -> None:
        """The held responses' log line came (or the hold is over), or their charges were
        decided (`later`: they cannot throttle, their charges wait for the line): charge and
        send them, then the broker's EOF that waited behind them."""
        held, self.held = self.held, None
        if held is None or self.state is _CLOSED:
            return
        try:
            self._deliver(held.frames, held.since_ns, later=later)
        except FrameError as exc:
            self._finish("upstream_" + exc.reason, detail={"error": str(exc)})
        if self.upstream_eof is _EOF_PENDING and self.state is not _CLOSED:
            self._upstream_eof()

    def _deliver(
        self, frames: list[bytes], arrived_ns: int | None = None, *, later: bool = False
    ) -> None:
        payload, answered = self._answers(frames, arrived_ns, later)
        self.wire.send(_CLIENT, payload)
        if answered:
            for _ in range(answered):
                self.gate.response_sent()
            self._pump()

    def _answers(
        self, frames: list[bytes], arrived_ns: int | None, later: bool
    ) -> tuple[bytes, int]:
        """The broker's responses as sent to the client (each charged, `charge`), and how
        many answered a request (one in flight; several, pipelined).

        `arrived_ns`: when they were read, if they were held for the broker's log line
        (latency is measured to then; the charge and the throttle are made now). `later`:
        the charge waits for the line still to come (it cannot throttle)."""
        now = self.clock()
        read_ns = now if arrived_ns is None else arrived_ns
        out: list[bytes] = []
        answered = 0
        for frame in frames:
            cid = correlation_id_of_response(frame)
            before, done, after = self._order.response(cid, len(frame), read_ns)
            if done is not None:
                login = self.login
                if login is not None and done.api_key == SASL_AUTHENTICATE:
                    login.response(frame, done.api_version)
                frame = self._charge(done, frame, now, now - read_ns, later)
                answered += 1
            out.extend(before)
            out.append(frame)
            out.extend(after)
        payload = out[0] if len(out) == 1 else b"".join(out)
        self.bytes_out += len(payload)
        return payload, answered

    # -- the request-quota charge (KIP-124) -----------------------------------------------
    def _charge(self, done: Completed, frame: bytes, now: int, held_ns: int, later: bool) -> bytes:
        """The charge of a response, decided here (`charge.decide`): its `request` row, the
        meters' check, and on a throttle the channel muted (KIP-219), the `request_throttle`
        row and the frame with throttle_time_ms raised. A charge whose log line is still to
        come is made when it comes (`LATE_LINE`), its row then too."""
        host, ledger = self.host, self.ledger
        sampled = host.answered(done)
        cid = done.correlation_id
        asked = ledger.asked.pop(cid, None)
        if self.login is not None and self.uncharged(cid):
            charge = decide(done, self.principal, now, None, login=True)
        elif later:
            charges, addr = self.charges, self.upstream_addr
            if charges is not None and addr is not None:
                at = now if asked is None else asked.at_ns  # claimed elsewhere: its instant
                pending = decide(done, self.principal, at, None, later=True)
                resume = partial(self._late_line_came, pending, sampled, charges, addr)
                charges.wait(addr, cid, resume, late=True)
            return frame
        elif asked is not None:  # decided in another process, at the instant it was asked
            charge = decide(done, self.principal, asked.at_ns, asked.logged)
        else:
            charges, addr = self.charges, self.upstream_addr
            logged = None
            if charges is not None and addr is not None:
                logged = Logged.read(charges.take(addr, cid), done.latency_ns, held_ns)
            charge = decide(done, self.principal, now, logged)
        if sampled:
            host.request_row(self, charge)
        if charge.source is not None and not charge.checked:  # a login's: never charged
            return frame
        outcome = ledger.decided.pop(cid, None)
        if outcome is None:
            outcome = host.charge(charge)
        throttle = outcome.throttle_ms
        if throttle <= 0:
            return frame
        if host.mutes_throttled:  # KIP-219
            self.mute(charge.at_ns + throttle * 1_000_000)
        host.throttle_row(self, charge, outcome)
        return with_throttle_time(frame, done.api_key, done.api_version, throttle)

    # -- flow control ---------------------------------------------------------------------
    def _pause(self, side: Side, why: str) -> None:
        reasons = self._paused[side]
        if not reasons:
            self.wire.pause(side)
        reasons.add(why)

    def _resume(self, side: Side, why: str) -> None:
        reasons = self._paused[side]
        if why not in reasons:
            return
        reasons.discard(why)
        if not reasons and self.state is not _CLOSED:
            self.wire.resume(side)

    # -- the end --------------------------------------------------------------------------
    def _finish(
        self,
        reason: str,
        *,
        reset: bool = False,
        evicted: bool = False,
        detail: dict[str, Any] | None = None,
    ) -> None:
        """End the connection once: close both sides, release counts, write `close`."""
        if self.state is _CLOSED:
            return
        if self._closing is not None:  # after a bad frame: its reason stays (`close_reason`)
            reason, detail = close_reason(self._closing, reason, detail, evicted)
        self._enter(_CLOSED)
        self.close_reason = reason
        if self.charges is not None and self.upstream_addr is not None:
            self.charges.unregister(self.upstream_addr)
        self.wire.close(reset)
        now = self.clock()
        d: dict[str, Any] = {
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "requests": self.requests,
            "duration_ms": (now - self.started_ns) / 1e6,
        }
        if detail:
            d.update(detail)
        self.host.connection_closed(self, reason, now, d, evicted=evicted)


def _table() -> dict[tuple[State, Input], Row]:
    """(state, input) -> the row: the step it takes, where it may leave the connection,
    what it may do. Every row of Kafka's channel and of the relay around it; a state with
    no row for an input is a bug (`TransitionError`)."""
    c = Connection
    a = Act
    finish = frozenset({a.CLOSE, WRITE_CLOSE})
    #: what taking requests may do: forward them, answer here, pause, the close grace,
    #: the client's half-close passed, the close after a refused request
    take = finish | {a.SEND, a.PAUSE, a.RESUME, a.ARM, a.HALF_CLOSE}
    #: what responses may do besides: be charged, mute, write their rows
    relay = take | {a.CHARGE, a.MUTE, WRITE_REQUEST, WRITE_THROTTLE}
    charge_late = frozenset({a.CHARGE, WRITE_REQUEST})
    rows: dict[tuple[State, Input], Row] = {}

    def row(state: State, inp: Input, step: Callable[..., Any], nxt: Any, acts: Any) -> None:
        rows[(state, inp)] = Row(step, frozenset(nxt), frozenset(acts))

    # PROXY-read bytes: the upstream opens at once
    row(_REGISTERED, _I.OPENED, c._on_opened, {_IDLE, _CONNECTING}, {a.PAUSE, a.OPEN_UPSTREAM})
    row(_REGISTERED, _I.CLIENT_EOF, c._on_silent_eof, {_CLOSED}, finish)
    row(_IDLE, _I.CLIENT_DATA, c._on_first_bytes, {_CONNECTING}, {a.PAUSE, a.OPEN_UPSTREAM})
    row(_IDLE, _I.CLIENT_EOF, c._on_silent_eof, {_CLOSED}, finish)
    row(_CONNECTING, _I.CLIENT_DATA, c._on_kept, {_CONNECTING}, ())
    row(_CONNECTING, _I.CLIENT_EOF, c._on_eof_kept, {_CONNECTING}, ())
    # the bytes kept are fed at once: they may hold a bad frame, or a refused request
    row(_CONNECTING, _I.UPSTREAM_UP, c._on_upstream_up, {_OPEN, _CLOSING, _CLOSED}, take)
    row(_CONNECTING, _I.UPSTREAM_FAILED, c._on_end, {_CLOSED}, finish)
    for state in (_OPEN, _CLOSING):
        both = (state, _CLOSED)
        row(state, _I.UPSTREAM_DATA, c._on_responses, both, relay)  # a bad one closes
        row(state, _I.CLIENT_EOF, c._on_client_eof, both, finish | {a.HALF_CLOSE})
        row(state, _I.UPSTREAM_EOF, c._on_upstream_eof, both, finish | {a.HALF_CLOSE, a.ARM})
        row(state, _I.UPSTREAM_LOST, c._on_end, {_CLOSED}, finish)
        # the connect's timeout fired after its transport was made (a loaded machine: TLS
        # done, `create_connection` not yet returned): asyncio closes that transport, and
        # the connection ends as unreachable now rather than on its loss
        row(state, _I.UPSTREAM_FAILED, c._on_end, {_CLOSED}, finish)
        row(state, _I.BACKPRESSURE, c._on_backpressure, {state}, {a.PAUSE, a.RESUME})
        row(state, _I.ANSWER, c._on_answer, both, take)
        row(state, _I.CHARGED, c._on_charged, both, relay)
        row(state, _I.CLAIMED, c._on_claimed, both, relay)
        row(state, _I.LOGGED, c._on_logged, both, relay)
        row(state, _I.TIMER, c._on_timer, both, take | {a.MUTE})  # unmute; either grace over
        row(state, _I.LATE_LINE, c._on_late_line, {state}, charge_late)
    row(_OPEN, _I.CLIENT_DATA, c._on_requests, {_OPEN, _CLOSING, _CLOSED}, take)
    row(_CLOSING, _I.CLIENT_DATA, c._on_nothing, {_CLOSING}, ())  # nothing more is read
    for state in _LIVE:
        for inp in _ENDS:
            row(state, inp, c._on_end, {_CLOSED}, finish)
    for inp in Input:  # late callbacks after the end change nothing, but for two
        row(_CLOSED, inp, c._on_nothing, {_CLOSED}, ())
    row(_CLOSED, _I.UPSTREAM_UP, c._on_late_upstream, {_CLOSED}, {a.CLOSE})
    # a charge owed to the bucket is made after the close too
    row(_CLOSED, _I.LATE_LINE, c._on_late_line, {_CLOSED}, charge_late)
    return rows


#: every step a connection may take: (state, input) -> its `Row`
TRANSITIONS = _table()


def _late_asked(charge: Charge) -> ChargeAsked:
    """A late charge as asked of the meters' process: all of it, without a check, when it
    is made (`Charge.recorded_ns`)."""
    return ChargeAsked(
        charge.done.correlation_id,
        charge.client_id,
        charge.done.api_key,
        charge.handler_ns,
        charge.network_ns,
        charge.recorded_ns,
        charge.principal,
        ASK_LATE,
    )
