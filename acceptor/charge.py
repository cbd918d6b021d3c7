"""A response's request-quota charge, decided in the connection's core, sans-IO.

Why here: Kafka charges a request quota (KIP-124) when the response is queued, with a
check whose throttle mutes the channel (KIP-219). Which time is charged depends on what
the acceptor knows when the response comes back, and the connection (`connection.py`) is
the one place that knows it all: the broker's request log line, or none yet; a charge
decided in another process (the split model); a SASL login's request. The decision is pure
code over values; `connections.Connections` only records what it says on the meters and
writes its rows.

A response is charged in one of four ways (`Charge.source`):

- at once (`None`: no request log read): the broker time the acceptor saw, forward ->
  response, less a Fetch's purgatory wait (`charged_ns`);
- from the broker's log line (`"broker_log"`, or `"wall"` when no line came in time):
  Kafka's handler time, then its network-thread estimate recorded without a check; the
  response may have been held for its line (`Held`, `Logged.held_ns`);
- late (`"late"` at the response, `"broker_log_late"` / `"wall_late"` when made): the
  response went out before its line because its charge could not throttle it
  (`RequestQuotas.could_throttle` with the wall time as the bound); the whole charge is
  recorded without a check when the line comes (`late`), after the close too;
- `"login"`: a request of a SASL login, answered by Kafka's authenticator: never charged.

In the split model the meters live in the accepting process: each response's charge is
asked there (`Ledger.asked`: the instant and what the log said) and its outcome comes back
(`Ledger.decided`) before the response is sent; a response whose log line is still to come
is claimed there first (could its charge throttle it?), and if it could not, it is sent at
once and charged late, at the claim's instant, as in one process.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, NamedTuple

from acceptor.broker_charge import network_estimate
from base.history import events
from base.history.rows import AcceptorRequestDetail, AcceptorRequestThrottleDetail, ChargeSource

if TYPE_CHECKING:
    from acceptor.broker_charge import LoggedRequest
    from acceptor.tracker import Completed
    from base.quota.requests import RequestCharge

__all__ = [
    "LATE",
    "LOGIN",
    "Asked",
    "Charge",
    "Held",
    "Ledger",
    "Logged",
    "charged_ns",
    "decide",
    "late",
    "request_detail",
    "throttle_detail",
]

#: `Charge.source` of a charge left for the broker's log line (its response is sent first)
LATE: Final = "late"
#: `Charge.source` of a SASL login's request (never charged)
LOGIN: Final = "login"
_LOGIN_DETAIL = events.detail("acceptor", "request", charged_ms=0.0, charge_source=LOGIN)


class Logged(NamedTuple):
    """What the broker's request log said of one request: its handler time (None: no line
    in time), its network-thread estimate, and how long its response was held for it."""

    handler_ns: int | None
    network_ns: int = 0
    held_ns: int = 0

    @classmethod
    def read(cls, line: LoggedRequest | None, broker_ns: int, held_ns: int) -> Logged:
        """From the line taken for a request whose response came `broker_ns` after it was
        forwarded (None: no line)."""
        if line is None:
            return cls(None, 0, held_ns)
        return cls(line.local_ns, network_estimate(line, broker_ns), held_ns)


class Asked(NamedTuple):
    """A charge asked of another process (the split model): `at_ns`, the instant its
    meters record it at (its `request` row carries it, so the checker replays the meters
    as they ran), and what the broker's log said (None: no log read)."""

    at_ns: int
    logged: Logged | None


class Charge(NamedTuple):
    """One response's charge as decided: to whom, how much with a check (`handler_ns`)
    and after it without one (`network_ns`), at which instant (`at_ns`, the response's;
    a late charge is recorded `late_ns` after it), and where the time came from."""

    done: Completed
    principal: str
    handler_ns: int
    network_ns: int
    at_ns: int
    source: ChargeSource | None
    held_ns: int = 0
    late_ns: int = 0

    @property
    def client_id(self) -> str:
        return self.done.client_id or ""

    @property
    def checked(self) -> bool:
        """Recorded with a quota check (whose throttle mutes the channel)."""
        source = self.source
        return source is None or (source != LOGIN and not source.endswith(LATE))

    @property
    def recorded_ns(self) -> int:
        """When the meters record it: at the response, or when a late charge is made."""
        return self.at_ns + self.late_ns


@dataclass(slots=True)
class Held:
    """Responses read from the broker and not yet sent: waiting for the broker's log line
    of the first (`broker_charge.RequestLog.wait`) or for charges decided elsewhere."""

    frames: list[bytes]
    since_ns: int  # when they were read
    #: correlation ids whose charges are being decided in another process
    owed: set[int]


class Ledger:
    """One connection's charges in the making: when the request in flight was forwarded,
    the charges asked of another process and the outcomes that came back (by correlation
    id, until their responses go out)."""

    __slots__ = ("asked", "decided", "forwarded_ns")

    def __init__(self) -> None:
        #: when the request in flight was forwarded (the wall time's start, the bound of
        #: its charge while its log line is still to come)
        self.forwarded_ns = 0
        self.asked: dict[int, Asked] = {}
        self.decided: dict[int, RequestCharge] = {}


def charged_ns(logged: Logged | None, broker_ns: int, allowance_ns: int = 0) -> int:
    """What a response is charged with a check: the broker's handler time when its request
    log gave it, else the broker time the acceptor saw (forward -> response): a Fetch that
    took at least its `max_wait_ms` (`allowance_ns`, `inflight.purgatory_allowance_ns`)
    waited that long in purgatory, which Kafka does not charge; everything else is charged
    whole (an upper bound of Kafka's handler time)."""
    if logged is not None and logged.handler_ns is not None:
        return logged.handler_ns
    if allowance_ns and broker_ns >= allowance_ns:
        return broker_ns - allowance_ns
    return broker_ns


#: a NamedTuple's own `__new__` is a Python function; `tuple.__new__` makes the same value
#: (every field, in order) for less: every response without a log line is made this way
_new = tuple.__new__


def decide(
    done: Completed,
    principal: str,
    at_ns: int,
    logged: Logged | None,
    *,
    login: bool = False,
    later: bool = False,
) -> Charge:
    """The charge of the response to `done`, made at `at_ns`: `logged`, what the broker's
    log said of it (None: no log read); `login`, a SASL login's request; `later`, its line
    is still to come and the charge cannot throttle it (made by `late`)."""
    if login:
        return Charge(done, principal, 0, 0, at_ns, LOGIN)
    if logged is None and not later:  # no log read: every response's, made the cheap way
        latency, allowance = done.latency_ns, done.allowance_ns
        handler = latency - allowance if allowance and latency >= allowance else latency
        return _new(Charge, (done, principal, handler, 0, at_ns, None, 0, 0))
    handler = charged_ns(logged, done.latency_ns, done.allowance_ns)
    if later:  # the wall charge for now: what the line says replaces it (`late`)
        return Charge(done, principal, handler, 0, at_ns, LATE)
    if logged is None:
        return Charge(done, principal, handler, 0, at_ns, None)
    if logged.handler_ns is None:
        return Charge(done, principal, handler, 0, at_ns, "wall", logged.held_ns)
    return Charge(done, principal, handler, logged.network_ns, at_ns, "broker_log", logged.held_ns)


def late(pending: Charge, line: LoggedRequest | None, now_ns: int) -> Charge:
    """A charge left for its log line (`decide(..., later=True)`), made at `now_ns` with
    what the line said (None: none in time, the wall charge): all of it without a check,
    as its throttle was 0 whatever the charge."""
    done = pending.done
    late_ns = now_ns - pending.at_ns
    if line is None:
        return pending._replace(source="wall_late", late_ns=late_ns)
    return pending._replace(
        handler_ns=line.local_ns,
        network_ns=network_estimate(line, done.latency_ns),
        source="broker_log_late",
        late_ns=late_ns,
    )


@functools.cache
def _sampled(sample: int) -> str:
    return events.detail("acceptor", "request", sample=sample)


def request_detail(charge: Charge, sample: int) -> AcceptorRequestDetail | str | None:
    """The `detail` of a charge's `request` row (`sample`: 1 in how many rows is written)."""
    source = charge.source
    if source == LOGIN:
        return _LOGIN_DETAIL
    done = charge.done
    if source is None and charge.handler_ns == done.latency_ns:
        return None if sample == 1 else _sampled(sample)
    detail: AcceptorRequestDetail = {"charged_ms": charge.handler_ns / 1e6}
    if source is not None:  # a request log is read: which charge this is
        detail["charge_source"] = source
        if charge.network_ns:
            detail["network_ms"] = charge.network_ns / 1e6
        if charge.held_ns:
            detail["held_ms"] = charge.held_ns / 1e6
        if source.endswith(LATE):
            detail["late_ms"] = charge.late_ns / 1e6
    if sample > 1:
        detail["sample"] = sample
    return detail


def throttle_detail(charge: Charge, outcome: RequestCharge) -> AcceptorRequestThrottleDetail:
    """The `detail` of the `request_throttle` row of a charge the meters throttled."""
    user, client = outcome.bucket
    detail: AcceptorRequestThrottleDetail = {
        "bucket": {"user": user, "client-id": client},
        "quota": outcome.quota,
        "rate": outcome.rate,
        "broker_time_ms": charge.done.latency_ns / 1e6,
        "charged_ms": charge.handler_ns / 1e6,
    }
    if charge.source is not None:
        detail["charge_source"] = charge.source
    if charge.network_ns:
        detail["network_ms"] = charge.network_ns / 1e6
    return detail
