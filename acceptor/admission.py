"""Admission, sans-IO: Kafka's acceptor-thread steps for one listener's accepted sockets
(reference §0.3), as a table that drives. `listener.ListenerAcceptor` is the thin asyncio
adapter: it accepts, reads PROXY headers, sleeps, waits for slots and queues, and carries
out the actions this core returns.

Why sans-IO: admission is where Kafka's connection quotas meet the accept loop (a rate
delay the whole listener sleeps through, a slot wait, a throttled socket parked until a
turn of the loop after its end, a reject closed at once, a hand-off that blocks on full
processor queues). Kept apart from sockets and the loop, every step is driven in a unit
test by inputs, an injected clock and the quota engine, and its actions recorded
(`tests/unit/test_admission.py`).

States of one accepted socket (`Stage`) and what moves it (`Input`). A step is a lookup:
`TRANSITIONS[(stage, input)]` gives the next stage and the actions the step takes, in
order; an input no row has is a bug (`TransitionError`). The table, as Kafka runs it:

    HEADER   --header_read----> TAKEN       the client is the header's source (PROXY)
    HEADER   --header_failed--> CLOSED      refused: bad header, timeout, EOF, reset
    TAKEN    --no_delay-------> RATED       `accept` row; the rate step: no delay
    TAKEN    --delayed--------> RATED       `accept` and `delay` rows
    TAKEN    --dropped--------> CLOSED      (a seeded fault: no row, no count)
    RATED    --slot_free------> SLOTTED     decided at once: the loop held throughout
    RATED    --wait-----------> WAITING     the listener stops taking sockets
    WAITING  --late-----------> WAITING     the rate delay is slept out
    WAITING  --no_slot--------> WAITING     until a release frees a slot (or the poll)
    WAITING  --slot_free------> SLOTTED     `blocked` row
    SLOTTED  --ip_throttled---> PARKED      never counted; closed at a turn after its end
    SLOTTED  --ip_rejected----> CLOSED      `reject` row: closed at once (client sees EOF)
    SLOTTED  --admitted-------> HANDED      `admit` row: counted, to a processor's queue
    HANDED   --queue_full-----> QUEUE_WAIT  every queue full: blocking on the last one
    QUEUE_WAIT --queued-------> HANDED      `blocked` row (queue_full)
    HANDED   --unusable-------> CLOSED      its socket refused TCP_NODELAY: released
    PARKED   --due / shutdown-> CLOSED      `throttle_close` row

and `shutdown` from every stage a socket waits in. One socket is admitted at a time
(Kafka's single acceptor thread): `admit` runs the steps that need no wait and returns
their actions; a wait (`Sleep`, `AwaitSlot`) ends the list, and the adapter comes back
with `woken`; a full hand-off with `queue_full` then `queued`.
"""

from __future__ import annotations

import enum
import heapq
import itertools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from base.history import events
from base.history.rows import (
    AcceptorAccept,
    AcceptorAdmit,
    AcceptorDelay,
    AcceptorReject,
    AcceptorRow,
    AcceptorThrottleClose,
)
from base.quota.connections import Outcome

if TYPE_CHECKING:
    from acceptor.ports import NewConnection
    from acceptor.recorder import ConnInfo
    from base.quota.connections import Admission as IpStep
    from base.quota.connections import ConnectionQuotas, RateStep
    from base.quota.faults import NoFaults
    from base.wire.proxy import ProxyHeader

__all__ = [
    "SLOT_WAIT_POLL_S",
    "TRANSITIONS",
    "Admission",
    "AwaitSlot",
    "Blocked",
    "Close",
    "CloseRow",
    "ConnRow",
    "Count",
    "HandOff",
    "Held",
    "Input",
    "Parked",
    "Sleep",
    "SlotFreed",
    "Stage",
    "Stall",
    "TransitionError",
    "Unwatch",
    "Watch",
]

#: Kafka's `waitForConnectionSlot` polls the slot every 500 ms when no release wakes it
SLOT_WAIT_POLL_S = 0.5
MS = 1_000_000


class _Member(enum.Enum):
    """Members hash by identity: the table is looked up on every step."""

    __hash__ = object.__hash__


class Stage(_Member):
    HEADER = "header"  # its PROXY header is being read
    TAKEN = "taken"  # accepted; its admission has not begun
    RATED = "rated"  # accepted, the connection-rate step taken
    WAITING = "waiting"  # a rate delay or a slot wait: the listener stalls
    SLOTTED = "slotted"  # a slot is free: the IP steps next
    PARKED = "parked"  # IP-rate throttled: closed at a turn of the loop after its end
    HANDED = "handed"  # counted and given to the processors
    QUEUE_WAIT = "queue_wait"  # every processor queue full: blocked on the last one
    CLOSED = "closed"  # closed here (refused, dropped, rejected, throttled, unusable)


class Input(_Member):
    HEADER_READ = "header_read"
    HEADER_FAILED = "header_failed"
    DROPPED = "dropped"  # taken and closed unrecorded: never in production (`accept_drop`)
    NO_DELAY = "no_delay"  # the rate step asks for no delay
    DELAYED = "delayed"
    SLOT_FREE = "slot_free"
    WAIT = "wait"
    LATE = "late"  # woken before the delay's end
    NO_SLOT = "no_slot"
    IP_THROTTLED = "ip_throttled"
    IP_REJECTED = "ip_rejected"
    ADMITTED = "admitted"
    QUEUE_FULL = "queue_full"
    QUEUED = "queued"
    UNUSABLE = "unusable"
    DUE = "due"
    SHUTDOWN = "shutdown"


class TransitionError(RuntimeError):
    """A step no row of `TRANSITIONS` allows: a bug in admission."""


#: the members every admitted socket's steps read, as module names: a member read through
#: its enum class is a slow attribute lookup on CPython 3.11
_TAKEN, _NO_DELAY, _SLOT_FREE = Stage.TAKEN, Input.NO_DELAY, Input.SLOT_FREE
_ADMITTED = Input.ADMITTED
_THROTTLED_IP, _REJECTED_IP_COUNT = Outcome.THROTTLED_IP, Outcome.REJECTED_IP_COUNT


# -- actions: what the adapter does, in order ---------------------------------------------
class ConnRow(NamedTuple):
    """A history row of one connection, built by its event's row class (`Recorder.write`)."""

    row: AcceptorRow


class CloseRow(NamedTuple):
    """The `close` row of a socket that never reached a processor (`Recorder.closed`)."""

    info: ConnInfo
    mono_ns: int
    reason: str
    fields: Mapping[str, Any]


class Count(NamedTuple):
    """The metrics' outcome counter of one client IP."""

    ip: str
    outcome: str


class Blocked(NamedTuple):
    """The listener took no socket from `start_ns` to `end_ns` (`blocked` row)."""

    start_ns: int
    end_ns: int
    reason: str


class Close(NamedTuple):
    """Close the socket, `after_s` from now (0: at once)."""

    item: NewConnection
    after_s: float = 0.0


class Sleep(NamedTuple):
    """Sleep out (the rest of) a rate delay, then `woken`."""

    seconds: float


class AwaitSlot(NamedTuple):
    """Wait for a release (at most `timeout_s`), then `woken`."""

    timeout_s: float


class Stall(NamedTuple):
    """Stop (True) or resume (False) taking sockets: the acceptor thread is busy."""

    stalled: bool


class Watch(NamedTuple):
    """Measure the loop's stalls from `since_ns` (None: from now) (`Heartbeat.arm`)."""

    since_ns: int | None


class Unwatch(NamedTuple):
    """Stop measuring them (`Heartbeat.disarm`)."""


class Held(NamedTuple):
    """The loop ran one callback from `start_ns` to `end_ns` (`Heartbeat.held`)."""

    start_ns: int
    end_ns: int


class HandOff(NamedTuple):
    """Give the admitted socket to a processor (round robin; `queue_full` when none has
    room, `unusable` when its socket cannot be set up)."""

    item: NewConnection


class Parked(NamedTuple):
    """The socket is parked until its throttle ends (`Admission.parked` holds it)."""

    item: NewConnection


class SlotFreed(NamedTuple):
    """A counted socket was released: wake the admissions waiting for a slot."""


Action = (
    ConnRow
    | CloseRow
    | Count
    | Blocked
    | Close
    | Sleep
    | AwaitSlot
    | Stall
    | Watch
    | Unwatch
    | Held
    | HandOff
    | Parked
    | SlotFreed
)
#: one action, from the admission, the socket and the step's fact (None: not this time)
Build = Callable[["Admission", "NewConnection", Any], "Action | None"]

_UNWATCH, _SLOT_FREED = Unwatch(), SlotFreed()
_STALL, _UNSTALL = Stall(True), Stall(False)


# -- the builders the table names ------------------------------------------------------------
#: a NamedTuple's own `__new__` is a Python function; `tuple.__new__` makes the same value
#: (every field, in order) at half the cost: the builders every admitted socket runs use it
_new = tuple.__new__


def accept_row(a: Admission, item: NewConnection, _: Any) -> Action:
    info = item.info
    if a.proxy:  # the detail's template by whether a header came, the TCP accept filled in
        detail = a.accept_detail_proxied[item.proxied] % item.tcp_accept_ns
    else:
        detail = a.accept_detail
    return _new(ConnRow, (AcceptorAccept(a.t0_ns, info, detail),))


def count_accepted(a: Admission, item: NewConnection, _: Any) -> Action:
    return _new(Count, (item.info.client_ip, "accepted"))


def delay_row(a: Admission, item: NewConnection, step: RateStep) -> Action:
    detail = _DELAY_DETAIL % (step.broker_delay_ms, step.listener_delay_ms)
    return ConnRow(
        AcceptorDelay(a.t0_ns, item.info, step.reason, float(step.delay_ms), detail=detail)
    )


def count_delayed(a: Admission, item: NewConnection, _: Any) -> Action:
    return Count(item.info.client_ip, "delayed")


def held(a: Admission, item: NewConnection, _: Any) -> Action:
    return _new(Held, (a.t0_ns, a.t1_ns))


def stall(a: Admission, item: NewConnection, _: Any) -> Action:
    return _STALL


def unstall(a: Admission, item: NewConnection, _: Any) -> Action:
    return _UNSTALL


def watch_since_accept(a: Admission, item: NewConnection, _: Any) -> Action:
    return Watch(a.t0_ns)


def unwatch(a: Admission, item: NewConnection, _: Any) -> Action:
    return _UNWATCH


def sleep(a: Admission, item: NewConnection, remaining_ms: int) -> Action:
    return Sleep(remaining_ms / 1000)


def await_slot(a: Admission, item: NewConnection, _: Any) -> Action:
    return AwaitSlot(SLOT_WAIT_POLL_S)


def blocked(a: Admission, item: NewConnection, reason: str) -> Action:
    return Blocked(a.wait_start_ns, a.t1_ns, reason)


def watch_first_parked(a: Admission, item: NewConnection, _: Any) -> Action | None:
    # the first parked socket's close is timed by the loop: measure the loop's stalls
    return Watch(None) if len(a.parked) == 1 else None


def parked(a: Admission, item: NewConnection, _: Any) -> Action:
    return Parked(item)


def close(a: Admission, item: NewConnection, _: Any) -> Action:
    return Close(item)


def close_rejected(a: Admission, item: NewConnection, _: Any) -> Action:
    return Close(item, a.faults.reject_close_s(0.0))


def reject_row(a: Admission, item: NewConnection, adm: IpStep) -> Action:
    detail = _REJECT_DETAIL % (adm.ip_count, adm.ip_limit)
    return ConnRow(AcceptorReject(a.t1_ns, item.info, "ip_count", detail=detail))


def count_rejected(a: Admission, item: NewConnection, _: Any) -> Action:
    return Count(item.info.client_ip, "rejected")


def admit_row(a: Admission, item: NewConnection, _: Any) -> Action:
    return _new(ConnRow, (AcceptorAdmit(a.t1_ns, item.info, (a.t1_ns - a.t0_ns) / 1e6),))


def hand_off(a: Admission, item: NewConnection, _: Any) -> Action:
    return _new(HandOff, (item,))


def slot_freed(a: Admission, item: NewConnection, _: Any) -> Action:
    return _SLOT_FREED


def unusable_row(a: Admission, item: NewConnection, _: Any) -> Action:
    return CloseRow(item.info, a.clock(), "reset", {"registered": False})


def refused_row(a: Admission, item: NewConnection, why: tuple[str, str]) -> Action:
    reason, error = why
    fields = {"error": error, "counted": False, "tcp_accept_mono_ns": item.tcp_accept_ns}
    return CloseRow(item.info, a.clock(), reason, fields)


def count_closed(a: Admission, item: NewConnection, _: Any) -> Action:
    return Count(item.info.client_ip, "closed")


def unwatch_last_parked(a: Admission, item: NewConnection, _: Any) -> Action | None:
    return None if a.parked else _UNWATCH  # nothing left whose close the loop times


def throttle_close_row(a: Admission, item: NewConnection, due: tuple[int, str]) -> Action:
    end_ms, closed_by = due
    detail = _THROTTLE_CLOSE_DETAIL[closed_by] % (end_ms, item.throttled_ns)  # key order
    return ConnRow(
        AcceptorThrottleClose(
            a.clock(), item.info, "ip_rate", float(item.throttle_ms), detail=detail
        )
    )


def count_throttle_closed(a: Admission, item: NewConnection, _: Any) -> Action:
    return Count(item.info.client_ip, "throttle_closed")


#: the details' templates: each slot filled in its key's sorted order
_DELAY_DETAIL = events.detail_template(
    "acceptor", "delay", ("broker_delay_ms", "listener_delay_ms")
)
_REJECT_DETAIL = events.detail_template("acceptor", "reject", ("count", "max"))
_THROTTLE_CLOSE_DETAIL = {
    by: events.detail_template(
        "acceptor", "throttle_close", ("throttle_start_mono_ns", "end_ms"), closed_by=by
    )
    for by in ("ip_rate", "shutdown")
}


class Step(NamedTuple):
    """One row of the table: the next stage and the actions the step takes, in order."""

    next: Stage
    does: tuple[Build, ...]


def _rows() -> dict[tuple[Stage, Input], Step]:
    S, I = Stage, Input  # noqa: E741 (the table reads as the docstring's)
    refused = (close, refused_row, count_closed)
    throttle_closed = (unwatch_last_parked, close, throttle_close_row, count_throttle_closed)
    return {
        (S.HEADER, I.HEADER_READ): Step(S.TAKEN, ()),
        (S.HEADER, I.HEADER_FAILED): Step(S.CLOSED, refused),
        (S.TAKEN, I.DROPPED): Step(S.CLOSED, (close,)),
        (S.TAKEN, I.SHUTDOWN): Step(S.CLOSED, refused),  # header read, admission not begun
        (S.TAKEN, I.NO_DELAY): Step(S.RATED, (accept_row, count_accepted)),
        (S.TAKEN, I.DELAYED): Step(S.RATED, (accept_row, count_accepted, delay_row, count_delayed)),
        (S.RATED, I.SLOT_FREE): Step(S.SLOTTED, (held,)),
        (S.RATED, I.WAIT): Step(S.WAITING, (stall, watch_since_accept)),
        (S.WAITING, I.LATE): Step(S.WAITING, (sleep,)),
        (S.WAITING, I.NO_SLOT): Step(S.WAITING, (await_slot,)),
        (S.WAITING, I.SLOT_FREE): Step(S.SLOTTED, (unwatch, unstall, blocked)),
        (S.WAITING, I.SHUTDOWN): Step(S.CLOSED, (unwatch, unstall, close)),
        (S.SLOTTED, I.IP_THROTTLED): Step(S.PARKED, (watch_first_parked, parked)),
        (S.SLOTTED, I.IP_REJECTED): Step(S.CLOSED, (close_rejected, reject_row, count_rejected)),
        (S.SLOTTED, I.ADMITTED): Step(S.HANDED, (admit_row, hand_off)),
        (S.HANDED, I.QUEUE_FULL): Step(S.QUEUE_WAIT, (stall,)),
        (S.HANDED, I.UNUSABLE): Step(S.CLOSED, (slot_freed, close, unusable_row)),
        (S.QUEUE_WAIT, I.QUEUED): Step(S.HANDED, (unstall, blocked)),
        (S.QUEUE_WAIT, I.SHUTDOWN): Step(S.CLOSED, (unstall, close)),
        (S.PARKED, I.DUE): Step(S.CLOSED, throttle_closed),
        (S.PARKED, I.SHUTDOWN): Step(S.CLOSED, throttle_closed),
    }


#: every step a socket may take: (stage, input) -> (next stage, the actions it takes)
TRANSITIONS = _rows()


class Admission:
    """One listener's admission. Receives the listener's name, whether it is protected
    and reads PROXY headers (`proxy`: its mode), the connection engine, the fault policy
    (`base.quota.faults`), and `clock` (monotonic ns). Holds the socket in admission
    (one at a time, as Kafka's acceptor thread) and the parked ones."""

    def __init__(
        self,
        listener: str,
        *,
        protected: bool,
        proxy: str,
        quotas: ConnectionQuotas,
        faults: NoFaults,
        clock: Callable[[], int],
    ) -> None:
        self.listener = listener
        self.protected = protected
        self.proxy = proxy != "off"
        self._optional_header = proxy == "optional"
        self.quotas = quotas
        self.faults = faults
        self.clock = clock
        self.accept_detail = events.detail("acceptor", "accept", protected=protected)
        self.accept_detail_proxied = {
            proxied: events.detail_template(
                "acceptor",
                "accept",
                ("tcp_accept_mono_ns",),
                protected=protected,
                proxy_header=proxied,
            )
            for proxied in (False, True)
        }
        #: whether to drop the socket just taken, unrecorded (a fault hook; None in
        #: production)
        self._drop = faults.accept_drop()
        #: the socket in admission and its stage
        self.current: NewConnection | None = None
        self.stage = Stage.CLOSED
        #: its accept (Kafka's t0) and IP step (t1), the start of its wait, the delay's end
        self.t0_ns = self.t1_ns = self.wait_start_ns = 0
        self._end_ms = 0
        self._reason = "slot"
        self._first_look = True
        #: IP-throttled sockets by (end ms, arrival order)
        self.parked: list[tuple[int, int, NewConnection]] = []
        self._seq = itertools.count()
        #: every step taken, when a test asks for it (`trace = []`)
        self.trace: list[tuple[Stage, Input, Stage]] | None = None

    # -- the table ---------------------------------------------------------------------------
    def _step(
        self, stage: Stage, inp: Input, item: NewConnection, out: list[Action], fact: Any = None
    ) -> Stage:
        try:
            nxt, does = TRANSITIONS[(stage, inp)]
        except KeyError:
            raise TransitionError(f"{item.info.conn_id}: no step from {stage} on {inp}") from None
        if self.trace is not None:
            self.trace.append((stage, inp, nxt))
        for build in does:
            action = build(self, item, fact)
            if action is not None:
                out.append(action)
        return nxt

    def _admitting(self, item: NewConnection) -> None:
        if self.current is not item:
            raise TransitionError(f"{item.info.conn_id}: not the socket in admission")

    # -- PROXY headers -------------------------------------------------------------------------
    def header_read(self, item: NewConnection, header: ProxyHeader | None) -> list[Action]:
        """Its header read (None: an optional header that did not come): the client is the
        header's source from now on."""
        if header is not None and header.src_ip is not None and header.src_port is not None:
            info = item.info
            info.client_ip, info.client_port = self.faults.proxy_source(
                (header.src_ip, header.src_port), (info.client_ip, info.client_port)
            )
        out: list[Action] = []
        self._step(Stage.HEADER, Input.HEADER_READ, item, out)
        return out

    def header_timed_out(self, item: NewConnection, decided: bool) -> tuple[bool, list[Action]]:
        """No whole header in time. Where the header is optional and the reader had not
        decided whether one comes (a silent client): admitted as is (True); otherwise
        refused."""
        if self._optional_header and not decided:
            return True, self.header_read(item, None)
        return False, self.header_failed(item, "proxy_timeout", "no PROXY header in time")

    def header_failed(self, item: NewConnection, reason: str, why: str) -> list[Action]:
        out: list[Action] = []
        self._step(Stage.HEADER, Input.HEADER_FAILED, item, out, (reason, why))
        return out

    # -- admission: one socket at a time --------------------------------------------------
    def admit(self, item: NewConnection) -> list[Action]:
        """Kafka's steps for one socket, as far as they need no wait: the rate step, the
        slot, the IP steps, the hand-off. A wait ends the actions (`woken` follows)."""
        out: list[Action] = []
        drop = self._drop
        if drop is not None and drop():
            self._step(Stage.TAKEN, Input.DROPPED, item, out)
            return out
        self.current = item
        self.t0_ns = t0_ns = self.clock()  # Kafka's t0: the accept and its rate step
        quotas, name = self.quotas, self.listener
        step = quotas.record_connection_rate(name, t0_ns // MS)
        if step.delay_ms > 0:
            stage = self._step(Stage.TAKEN, Input.DELAYED, item, out, step)
            wait_ms = self.faults.rate_delay(step.delay_ms)
            if wait_ms > 0 or not quotas.slot_available(name):
                return self._wait(item, wait_ms, out)
        else:
            stage = self._step(_TAKEN, _NO_DELAY, item, out)
            if not quotas.slot_available(name):
                return self._wait(item, 0, out)
        self.t1_ns = self.clock()
        self.stage = self._step(stage, _SLOT_FREE, item, out)
        self._ip_steps(item, out)
        return out

    def _wait(self, item: NewConnection, wait_ms: int, out: list[Action]) -> list[Action]:
        """`waitForConnectionSlot`: sleep out the delay, then wait for a free slot."""
        self.wait_start_ns = self.clock()
        self._reason = "rate" if wait_ms > 0 else "slot"
        self._end_ms = self.t0_ns // MS + wait_ms
        self._first_look = True
        self.stage = self._step(Stage.RATED, Input.WAIT, item, out)
        self._look(item, out)
        return out

    def woken(self, item: NewConnection) -> list[Action]:
        """A `Sleep` or an `AwaitSlot` is over: look again."""
        self._admitting(item)
        out: list[Action] = []
        self._look(item, out)
        return out

    def _look(self, item: NewConnection, out: list[Action]) -> None:
        remaining = self._end_ms - self.clock() // MS
        if remaining > 0:
            self.stage = self._step(self.stage, Input.LATE, item, out, remaining)
            return
        first, self._first_look = self._first_look, False
        if self.faults.slot_free(self.quotas.slot_available(self.listener), first):
            self.t1_ns = self.clock()
            self.stage = self._step(self.stage, Input.SLOT_FREE, item, out, self._reason)
            self._ip_steps(item, out)
            return
        if self._reason == "rate":
            self._reason = "rate+slot"
        self.stage = self._step(self.stage, Input.NO_SLOT, item, out)

    def _ip_steps(self, item: NewConnection, out: list[Action]) -> None:
        """After the delay and the slot: the IP rate and count steps, then counted and
        handed to a processor."""
        t1_ms = self.t1_ns // MS
        adm = self.quotas.admit(self.listener, item.info.client_ip, t1_ms)
        outcome = adm.outcome
        if outcome is _THROTTLED_IP:
            item.throttle_ms, item.throttled_ns = adm.throttle_ms, self.t1_ns
            heapq.heappush(self.parked, (t1_ms + adm.throttle_ms, next(self._seq), item))
            self._done(self._step(self.stage, Input.IP_THROTTLED, item, out))
        elif outcome is _REJECTED_IP_COUNT:
            self._done(self._step(self.stage, Input.IP_REJECTED, item, out, adm))
        else:
            item.protected, item.admitted_ns = self.protected, self.t1_ns
            self.stage = self._step(self.stage, _ADMITTED, item, out)

    def _done(self, stage: Stage) -> None:
        self.stage = stage
        self.current = None

    def queue_full(self, item: NewConnection) -> list[Action]:
        """Every processor's queue is full: the acceptor blocks on the last one tried."""
        self._admitting(item)
        out: list[Action] = []
        self.wait_start_ns = self.clock()
        self.stage = self._step(self.stage, Input.QUEUE_FULL, item, out)
        return out

    def queued(self, item: NewConnection) -> list[Action]:
        """The blocked hand-off went through."""
        self._admitting(item)
        out: list[Action] = []
        self.t1_ns = self.clock()
        self._done(self._step(self.stage, Input.QUEUED, item, out, "queue_full"))
        return out

    def unusable(self, item: NewConnection) -> list[Action]:
        """The admitted socket cannot be set up (TCP_NODELAY refused): it is released."""
        self._admitting(item)
        self.quotas.release(self.listener, item.info.client_ip)
        out: list[Action] = []
        self._done(self._step(self.stage, Input.UNUSABLE, item, out))
        return out

    def stopped(self, item: NewConnection) -> list[Action]:
        """Shutdown: the socket in admission (waiting), or one whose header was read and
        whose admission had not begun (refused)."""
        out: list[Action] = []
        if self.current is item:
            self._done(self._step(self.stage, Input.SHUTDOWN, item, out))
        else:
            why = ("shutdown", "stopped before admission")
            self._step(Stage.TAKEN, Input.SHUTDOWN, item, out, why)
        return out

    # -- parked sockets: Kafka's `closeThrottledConnections` -----------------------------
    def due(self) -> list[Action]:
        """Close every parked socket whose throttle ended before now (end < now)."""
        out: list[Action] = []
        now_ms = self.clock() // MS
        parked = self.parked
        while parked and parked[0][0] < now_ms:
            end_ms, _, item = heapq.heappop(parked)
            self._step(Stage.PARKED, Input.DUE, item, out, (end_ms, "ip_rate"))
        return out

    def close_parked(self) -> list[Action]:
        """Shutdown: every parked socket closes now."""
        out: list[Action] = []
        parked = self.parked
        while parked:
            end_ms, _, item = heapq.heappop(parked)
            self._step(Stage.PARKED, Input.SHUTDOWN, item, out, (end_ms, "shutdown"))
        return out
