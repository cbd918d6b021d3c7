"""The request-quota charge decided in the connection's core (`acceptor.charge`),
driven by bytes, a fake clock and a recording host whose meters are the quota engine's
own (`RequestQuotas`), at the window's edges. No socket, no loop.

The quota: client-id `test` at 1 % of a thread, Kafka's 11 samples of 1 s. The shortest
window `Rate` measures over is 10 s (it pads to n - 1 windows), so a charge can throttle
an empty bucket only if it is over 100 ms: that is what `could_throttle` asks, with the
wall time (forward -> response) as the bound of a charge whose log line is still to come.
"""

from __future__ import annotations

from typing import Any

import pytest

from acceptor.charge import Charge, Logged, decide, late, request_detail
from acceptor.connection import Act, Connection, Side
from acceptor.tracker import Completed
from base.quota.faults import NO_FAULTS, Faults
from base.quota.requests import RequestCharge, RequestQuotas
from tests.unit.test_connection import (
    MS,
    UPSTREAM_ADDR,
    Host,
    Log,
    acted,
    open_conn,
    req,
    resp,
)

pytestmark = pytest.mark.unit

C = Side.CLIENT
QUOTA_PCT = 1.0


class Meters(Host):
    """The recording host, its charges recorded on real meters (`RequestQuotas`)."""

    def __init__(self, clock: Any, faults: Faults = NO_FAULTS) -> None:
        super().__init__()
        self.meters = RequestQuotas(11, 1)
        self.meters.set_quota(None, "test", "request_percentage", QUOTA_PCT)
        self.quotas = True
        self.clock = clock
        self.windows = faults.policy().claim_windows(self.meters.claim_windows)

    def charge(self, charge: Charge) -> RequestCharge:
        acted(self.conn, Act.CHARGE)
        self.charged.append(charge)
        return self.meters.record_request(
            charge.principal,
            charge.client_id,
            charge.done.api_key,
            charge.handler_ns,
            charge.at_ns // MS,
        )

    def charge_unchecked(self, charge: Charge) -> None:
        acted(self.conn, Act.CHARGE)
        self.unchecked.append(charge)
        self.meters.record_no_throttle(
            charge.principal,
            charge.client_id,
            charge.handler_ns + charge.network_ns,
            charge.recorded_ns // MS,
        )

    def could_throttle(self, principal: str, client_id: str, api_key: int, ns: int) -> bool:
        return self.meters.could_throttle(
            principal, client_id, api_key, ns, self.clock() // MS, windows=self.windows
        )


class QuotaLog(Log):
    """The broker's request log; a response is held when its charge could throttle it."""

    def __init__(self) -> None:
        super().__init__()
        self.host: Meters | None = None

    def should_hold(self, principal: str, client_id: str, api_key: int, at_most_ns: int) -> bool:
        assert self.host is not None
        return self.host.could_throttle(principal, client_id, api_key, at_most_ns)

    def timed_out(self) -> None:
        """No line came in time: what waited is called without one."""
        waiting, self.waiting = self.waiting, []
        for resume in waiting:
            resume()


def metered(
    first: bytes = b"", faults: Faults = NO_FAULTS
) -> tuple[Connection, Any, Meters, Any, QuotaLog]:
    log = QuotaLog()
    conn, wire, _host, clock = open_conn(first, log=log, quotas=True)
    host = Meters(clock, faults)
    conn.host = host  # type: ignore[assignment]
    host.conn = conn
    log.host = host
    return conn, wire, host, clock, log


def answered_after(conn: Connection, clock: Any, cid: int, wall_ms: float) -> None:
    """The broker's response to request `cid`, `wall_ms` after it was forwarded."""
    clock.ns = conn.ledger.forwarded_ns + int(wall_ms * MS)
    conn.upstream_data(resp(cid))


# -- a response whose log line comes after it ----------------------------------------------
def test_a_response_that_could_not_throttle_goes_at_once_and_is_charged_at_its_line() -> None:
    """Wall time 100 ms exactly: 10 % over 10 s is the quota, not over it: it cannot
    throttle. Sent at once; the handler time its line gives is charged, unchecked, when the
    line comes, and its row carries the response's instant and how late the charge was."""
    conn, wire, host, clock, log = metered()
    answered_after(conn, clock, 1, 100.0)
    sent_at = clock.ns
    assert wire.sent(C) == [resp(1)] and conn.held is None
    assert host.charged == [] and host.rows == []  # nothing charged yet
    clock.ns += 4 * MS
    log.came(1, local_ms=0.5)
    (charge,) = host.unchecked
    assert (charge.source, charge.handler_ns, charge.at_ns) == ("broker_log_late", 500_000, sent_at)
    assert charge.late_ns == 4 * MS and charge.recorded_ns == clock.ns
    assert host.rows == [charge] and host.throttled == []
    detail = request_detail(charge, 1)
    assert detail == {"charged_ms": 0.5, "charge_source": "broker_log_late", "late_ms": 4.0}


def test_a_response_that_could_throttle_waits_for_its_line_and_is_throttled() -> None:
    """Wall time 100.001 ms: over the shortest window it could exceed the quota, so the
    response waits for its line; the line's 150 ms handler time is charged with the check,
    which throttles: the channel is muted and the row says so."""
    conn, wire, host, clock, log = metered()
    answered_after(conn, clock, 1, 100.001)
    assert wire.sent(C) == [] and conn.held is not None
    clock.ns += 2 * MS
    log.came(1, local_ms=150.0)
    (charge,) = host.charged
    assert (charge.source, charge.handler_ns, charge.held_ns) == ("broker_log", 150 * MS, 2 * MS)
    ((_, outcome),) = host.throttled
    assert outcome.throttle_ms > 0 and conn.muted_until_ns == clock.ns + outcome.throttle_ms * MS
    assert wire.sent(C) == [resp(1)]  # Metadata v1: no throttle_time_ms to raise
    assert host.unchecked == []


def test_held_but_charged_under_the_quota_is_not_throttled() -> None:
    """Held (it could throttle), but its line says 0.5 ms: the check finds the bucket under
    its quota, the response goes unthrottled."""
    conn, wire, host, clock, log = metered()
    answered_after(conn, clock, 1, 250.0)
    assert conn.held is not None
    log.came(1, local_ms=0.5)
    assert wire.sent(C) == [resp(1)] and host.throttled == [] and conn.muted_until_ns == 0
    assert [c.handler_ns for c in host.charged] == [500_000]


def test_no_line_in_time_charges_the_wall_time_late() -> None:
    conn, wire, host, clock, log = metered()
    answered_after(conn, clock, 1, 40.0)
    assert wire.sent(C) == [resp(1)]
    clock.ns += 20 * MS
    log.timed_out()
    (charge,) = host.unchecked
    assert (charge.source, charge.handler_ns, charge.late_ns) == ("wall_late", 40 * MS, 20 * MS)
    assert host.meters.rate("", "test", clock.ns // MS) > 0  # recorded, without a check


def test_a_late_charge_after_the_close_is_still_made() -> None:
    """The client leaves right after its response; the line comes after the close: the
    charge was owed to the bucket, not to the connection, and is made with its row."""
    conn, wire, host, clock, log = metered()
    answered_after(conn, clock, 1, 10.0)
    assert wire.sent(C) == [resp(1)]
    conn.lost(C, None)
    assert conn.closed and host.closed[0][0] == "client_eof"
    clock.ns += 5 * MS
    log.came(1, local_ms=2.0)
    (charge,) = host.unchecked
    assert (charge.source, charge.handler_ns) == ("broker_log_late", 2 * MS)
    assert host.rows == [charge] and host.throttled == []


def test_late_charges_fill_the_bucket_for_the_next_check() -> None:
    """Responses of 9 ms each go out at once while the bucket's sum and their own could not
    reach 10 % (over 10 s): eleven of them (99 ms recorded, then 9 more is 108 > 100 ms).
    Their late charges fill the bucket, so the twelfth could throttle: it is held and,
    charged over the quota, throttled."""
    conn, _wire, host, clock, log = metered()
    for cid in range(1, 12):
        answered_after(conn, clock, cid, 9.0)
        assert conn.held is None, cid  # sent at once
        log.came(cid, local_ms=9.0)
        conn.client_data(req(cid + 1))
    assert len(host.unchecked) == 11 and host.charged == []
    answered_after(conn, clock, 12, 9.0)
    assert conn.held is not None
    log.came(12, local_ms=9.0)
    assert host.throttled and host.throttled[0][1].throttle_ms > 0


@pytest.mark.parametrize("fault", [False, True], ids=["kafka", "late_charge_n_windows"])
def test_the_claim_is_judged_over_n_minus_one_windows(fault: bool) -> None:
    """95 ms in the bucket, then a response 10 ms after its request: 105 ms over 10 s is
    over the quota, so it is held and its 10 ms charged with the check: throttled. The
    seeded fault `late_charge_n_windows` asks over 11 s (105 / 11 s is under it): the
    response goes at once, unthrottled, and its charge is made late."""
    conn, wire, host, clock, log = metered(faults=Faults.of(["late_charge_n_windows"] * fault))
    host.meters.record_request("ANONYMOUS", "test", 3, 95 * MS, clock.ns // MS)
    answered_after(conn, clock, 1, 10.0)
    if not fault:
        assert conn.held is not None and wire.sent(C) == []
        log.came(1, local_ms=10.0)
        assert host.throttled and host.unchecked == []
    else:
        assert conn.held is None and wire.sent(C) == [resp(1)]
        log.came(1, local_ms=10.0)
        assert host.throttled == [] and [c.source for c in host.unchecked] == ["broker_log_late"]


# -- the pure decision -------------------------------------------------------------------------
def test_the_decision_names_where_the_time_came_from() -> None:
    done = Completed(1, 12, "test", 600 * MS, 10, 10, 500 * MS, 3)  # a fetch's long poll
    assert decide(done, "u", 7, None) == Charge(done, "u", 100 * MS, 0, 7, None)
    assert decide(done, "u", 7, None, login=True).source == "login"
    assert not decide(done, "u", 7, None, login=True).checked
    pending = decide(done, "u", 7, None, later=True)
    assert (pending.source, pending.handler_ns, pending.checked) == ("late", 100 * MS, False)
    walled = late(pending, None, 7 + 3 * MS)
    assert (walled.source, walled.handler_ns, walled.late_ns) == ("wall_late", 100 * MS, 3 * MS)
    logged = decide(done, "u", 7, Logged(2 * MS, 30_000, 5 * MS))
    assert (logged.source, logged.handler_ns, logged.network_ns, logged.checked) == (
        "broker_log", 2 * MS, 30_000, True,
    )  # fmt: skip
    assert request_detail(decide(done, "u", 7, None), 1) == {"charged_ms": 100.0}
    whole = Completed(3, 12, "test", 9 * MS, 10, 10, 0, 3)
    assert request_detail(decide(whole, "u", 7, None), 1) is None  # latency is the charge
    assert request_detail(decide(whole, "u", 7, None), 10) == '{"sample": 10}'


def test_split_charges_are_asked_then_decided_elsewhere() -> None:
    """A processor process: the charge is asked with what the log said, the outcome that
    comes back is the one applied (no meters here), at the instant it was asked."""
    conn, _wire, host, clock, log = metered()
    asked: list[Any] = []
    host.remote_charge = lambda c, a: asked.append(a)
    log.lines[1] = log_line(1, 3.0)
    answered_after(conn, clock, 1, 30.0)
    (a,) = asked
    assert (a.charged_ns, a.at_ns) == (3 * MS, clock.ns) and conn.ledger.asked
    at = clock.ns
    clock.ns += 7 * MS
    conn.charged(1, RequestCharge(20, False, ("", "test"), 1.0, 1.2))
    assert host.charged == [] and not conn.ledger.asked and not conn.ledger.decided
    ((charge, outcome),) = host.throttled
    assert charge.at_ns == at and outcome.throttle_ms == 20
    assert conn.muted_until_ns == at + 20 * MS and host.rows[0].source == "broker_log"
    assert UPSTREAM_ADDR in log.registered


def log_line(cid: int, local_ms: float) -> Any:
    from acceptor.broker_charge import LoggedRequest

    ns = int(local_ms * MS)
    return LoggedRequest(UPSTREAM_ADDR, cid, 3, ns, 0, ns)
