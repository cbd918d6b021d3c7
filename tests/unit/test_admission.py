"""The acceptor's admission core (`acceptor.admission`) driven by accepted sockets,
an injected clock and Kafka's connection engine (`base.quota.ConnectionQuotas`, itself
sans-IO). No socket, no loop: the adapter's part (sleeping, waiting for a slot, offering to
processors) is played by the test, which comes back with `woken`, `queue_full`, `queued`.

Each scenario is a plain function returning its admission (with its trace of steps); the
tests assert the actions each step returned, and `test_every_row_is_exercised` runs them
all and fails on any row of `TRANSITIONS` none of them took.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from acceptor.admission import (
    SLOT_WAIT_POLL_S,
    TRANSITIONS,
    Action,
    Admission,
    AwaitSlot,
    Blocked,
    Close,
    CloseRow,
    ConnRow,
    Count,
    HandOff,
    Held,
    Input,
    Parked,
    Sleep,
    SlotFreed,
    Stage,
    Stall,
    TransitionError,
    Unwatch,
    Watch,
)
from acceptor.ports import NewConnection
from acceptor.recorder import ConnInfo
from base.history import events
from base.history.rows import FIELDS
from base.quota import ConnectionQuotas, parse_config
from base.quota.faults import KAFKA, REJECT_LATE_S, Faults, NoFaults
from base.wire.proxy import ProxyHeader

pytestmark = pytest.mark.unit

MS = 1_000_000
L = "EXTERNAL"
IP = "127.0.0.1"


# -- the fakes -----------------------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.ns = 10_000 * MS

    def __call__(self) -> int:
        return self.ns

    def advance(self, ms: float) -> None:
        self.ns += int(ms * MS)


class Sock:
    """Stands for the accepted socket: admission never touches it."""


def new(
    faults: NoFaults = KAFKA, proxy: str = "off", props: dict[str, str] | None = None
) -> tuple[Admission, Clock, ConnectionQuotas]:
    cfg = parse_config({"listeners": f"{L}://127.0.0.1:1", **(props or {})})
    quotas = ConnectionQuotas(cfg)
    clock = Clock()
    adm = Admission(L, protected=False, proxy=proxy, quotas=quotas, faults=faults, clock=clock)
    adm.trace = []
    return adm, clock, quotas


_ids = iter(range(1, 1_000_000))


def sock(clock: Clock, ip: str = IP) -> NewConnection:
    info = ConnInfo(f"c{next(_ids)}", L, ip, 40000, ip, 40000)
    return NewConnection(info, Sock(), clock())  # type: ignore[arg-type]


def kinds(actions: list[Action]) -> list[str]:
    return [a.__class__.__name__ for a in actions]


def cols(action: Action) -> dict[str, Any]:
    """A `ConnRow`'s typed row by column name (a row is a plain tuple in FIELDS order)."""
    assert isinstance(action, ConnRow), action
    return dict(zip(FIELDS, action.row, strict=True))


def rows(actions: list[Action]) -> list[str]:
    return [cols(a)["event"] for a in actions if isinstance(a, ConnRow)]


def detail(action: Action) -> dict[str, Any]:
    text = cols(action)["detail"]
    assert text is not None
    value: dict[str, Any] = json.loads(text)
    return value


def admit_at_once(adm: Admission, clock: Clock, ip: str = IP) -> NewConnection:
    item = sock(clock, ip)
    out = adm.admit(item)
    assert kinds(out)[-1] == "HandOff", out
    return item


def until(
    adm: Admission, clock: Clock, last: type, ip: str = IP
) -> tuple[NewConnection, list[Action]]:
    """Admit sockets from `ip` at one instant until one's actions end with `last` (a rate
    is over its bound only once the window holds enough: Kafka's Rate pads short ones)."""
    for _ in range(1000):
        item = sock(clock, ip)
        out = adm.admit(item)
        if isinstance(out[-1], last):
            return item, out
        assert isinstance(out[-1], HandOff), out
    raise AssertionError(f"never {last.__name__}")


# -- scenarios -------------------------------------------------------------------------------------
def admitted_at_once() -> Admission:
    """No limit in the way: accept, the loop held throughout, admit, hand-off."""
    adm, clock, _ = new()
    item = sock(clock)
    out = adm.admit(item)
    assert kinds(out) == ["ConnRow", "Count", "Held", "ConnRow", "HandOff"]
    accept, count, held, admit, hand = out
    assert cols(accept)["event"] == "accept"
    assert detail(accept) == {"protected": False}
    assert count == Count(IP, "accepted")
    assert held == Held(clock.ns, clock.ns)
    assert cols(admit)["event"] == "admit" and cols(admit)["delay_ms"] == 0
    assert hand == HandOff(item)
    assert item.admitted_ns == clock.ns and not item.protected
    return adm


def rate_delay_slept_out() -> Admission:
    """Over max.connection.creation.rate: `delay` row, the listener stalls and sleeps the
    delay out; woken early, it sleeps the rest; then admitted, with the `blocked` row."""
    adm, clock, _ = new(props={"max.connection.creation.rate": "2"})
    t0 = clock.ns
    item, out = until(adm, clock, Sleep)
    assert rows(out) == ["accept", "delay"]
    delay = cols(out[2])
    assert delay["reason"] == "broker_rate"  # a tie: the broker's
    delay_ms = delay["delay_ms"]
    assert delay_ms is not None and delay_ms > 0
    assert set(detail(out[2])) == {"broker_delay_ms", "listener_delay_ms"}
    assert detail(out[2])["listener_delay_ms"] == delay_ms
    assert out[3] == Count(IP, "delayed")
    assert out[4:] == [Stall(True), Watch(t0), Sleep(delay_ms / 1000)]
    clock.advance(delay_ms / 2)  # woken early (a timer's jitter): sleep the rest
    again = adm.woken(item)
    assert len(again) == 1 and isinstance(again[0], Sleep)
    clock.advance(delay_ms)
    done = adm.woken(item)
    assert kinds(done) == ["Unwatch", "Stall", "Blocked", "ConnRow", "HandOff"]
    assert done[1] == Stall(False)
    assert done[2] == Blocked(t0, clock.ns, "rate")  # from the wait's start: the accept
    admit = cols(done[3])
    assert admit["event"] == "admit"
    assert admit["delay_ms"] == (clock.ns - t0) / 1e6
    return adm


def slot_wait_until_a_release() -> Admission:
    """max.connections reached: the listener waits for a slot (the poll, then a release)."""
    adm, clock, quotas = new(props={"max.connections": "1"})
    first = admit_at_once(adm, clock)
    item = sock(clock)
    out = adm.admit(item)
    assert rows(out) == ["accept"]
    assert out[2:] == [Stall(True), Watch(clock.ns), AwaitSlot(SLOT_WAIT_POLL_S)]
    clock.advance(500)  # the poll: still no slot
    assert adm.woken(item) == [AwaitSlot(SLOT_WAIT_POLL_S)]
    quotas.release(L, first.info.client_ip)
    clock.advance(10)
    done = adm.woken(item)
    assert kinds(done) == ["Unwatch", "Stall", "Blocked", "ConnRow", "HandOff"]
    blocked = done[2]
    assert isinstance(blocked, Blocked) and blocked.reason == "slot"
    return adm


def rate_then_slot() -> Admission:
    """A delay, then no slot at its end: the `blocked` row says rate+slot."""
    adm, clock, quotas = new(props={"max.connection.creation.rate": "1", "max.connections": "1"})
    first = admit_at_once(adm, clock)
    for _ in range(30):  # the rate over its bound: only the slot's wait ends each
        item = sock(clock)
        out = adm.admit(item)
        if isinstance(out[-1], Sleep):
            break
        assert out[-1] == AwaitSlot(SLOT_WAIT_POLL_S)
        assert adm.stopped(item)[-1] == Close(item)
    sleep = out[-1]
    assert isinstance(sleep, Sleep)
    clock.advance(sleep.seconds * 1000)
    assert adm.woken(item) == [AwaitSlot(SLOT_WAIT_POLL_S)]
    quotas.release(L, first.info.client_ip)
    done = adm.woken(item)
    blocked = done[2]
    assert isinstance(blocked, Blocked) and blocked.reason == "rate+slot"
    return adm


def ip_throttled_parked_then_closed() -> Admission:
    """Over the IP's rate: parked (never counted), closed at the first look after its end."""
    adm, clock, quotas = new()
    quotas.set_ip_quota(IP, 1, clock.ns // MS)
    item, out = until(adm, clock, Parked)
    assert kinds(out) == ["ConnRow", "Count", "Held", "Watch", "Parked"]
    assert out[3] == Watch(None) and out[4] == Parked(item)
    assert item.throttle_ms > 0 and item.throttled_ns == clock.ns
    end_ms = clock.ns // MS + item.throttle_ms
    quotas.set_ip_quota("127.0.0.2", 1, clock.ns // MS)
    _, out = until(adm, clock, Parked, "127.0.0.2")  # the loop is already watched
    assert kinds(out) == ["ConnRow", "Count", "Held", "Parked"]
    clock.ns = end_ms * MS  # end == now: not yet (Kafka closes on end < now)
    assert [a for a in adm.due() if isinstance(a, Close) and a.item is item] == []
    clock.advance(1)
    out = adm.due()
    first_close = out[: kinds(out).index("Count") + 1]
    assert kinds(first_close) == ["Close", "ConnRow", "Count"]  # another still parked
    row = cols(first_close[1])
    assert row["event"] == "throttle_close"
    assert row["reason"] == "ip_rate" and row["delay_ms"] == float(item.throttle_ms)
    assert detail(first_close[1]) == {
        "throttle_start_mono_ns": item.throttled_ns,
        "end_ms": end_ms,
        "closed_by": "ip_rate",
    }
    assert adm.parked == [] and kinds(out)[-4:] == ["Unwatch", "Close", "ConnRow", "Count"]
    return adm


def ip_count_rejected() -> Admission:
    """Over max.connections.per.ip: closed at once, `reject` row with count and max."""
    adm, clock, _ = new(props={"max.connections.per.ip": "1"})
    admit_at_once(adm, clock)
    item = sock(clock)
    out = adm.admit(item)
    assert kinds(out) == ["ConnRow", "Count", "Held", "Close", "ConnRow", "Count"]
    assert out[3] == Close(item, 0.0)
    assert rows(out) == ["accept", "reject"] and detail(out[4]) == {"count": 1, "max": 1}
    assert out[5] == Count(IP, "rejected")
    return adm


def every_queue_full() -> Admission:
    """The adapter found every processor queue full: the listener blocks, then goes on."""
    adm, clock, _ = new()
    item = admit_at_once(adm, clock)
    start = clock.ns
    assert adm.queue_full(item) == [Stall(True)]
    clock.advance(30)
    assert adm.queued(item) == [Stall(False), Blocked(start, clock.ns, "queue_full")]
    return adm


def unusable_socket_released() -> Admission:
    """TCP_NODELAY refused: the counted socket is released, its waiters woken, closed."""
    adm, clock, quotas = new()
    item = admit_at_once(adm, clock)
    assert quotas.listener_count(L) == 1
    out = adm.unusable(item)
    assert kinds(out) == ["SlotFreed", "Close", "CloseRow"]
    assert out[0] == SlotFreed() and quotas.listener_count(L) == 0
    row = out[2]
    assert isinstance(row, CloseRow) and row.reason == "reset"
    assert row.fields == {"registered": False}
    return adm


def proxy_header_read() -> Admission:
    """The client is the header's source; the accept row says a header came."""
    adm, clock, _ = new(proxy="on")
    item = sock(clock)
    header = ProxyHeader(2, "PROXY", "10.0.0.7", 5555, "10.0.0.1", 9092)
    assert adm.header_read(item, header) == []
    item.proxied = True
    assert (item.info.client_ip, item.info.client_port) == ("10.0.0.7", 5555)
    out = adm.admit(item)
    assert detail(out[0]) == {
        "protected": False,
        "tcp_accept_mono_ns": item.tcp_accept_ns,
        "proxy_header": True,
    }
    assert out[1] == Count("10.0.0.7", "accepted")
    return adm


def proxy_header_refused() -> Admission:
    """A bad header (and a required one that never came): refused, never counted."""
    adm, clock, _ = new(proxy="on")
    item = sock(clock)
    out = adm.header_failed(item, "bad_proxy_header", "not a PROXY header")
    assert kinds(out) == ["Close", "CloseRow", "Count"]
    row = out[1]
    assert isinstance(row, CloseRow) and row.reason == "bad_proxy_header"
    assert row.fields == {
        "error": "not a PROXY header",
        "counted": False,
        "tcp_accept_mono_ns": item.tcp_accept_ns,
    }
    assert out[2] == Count(IP, "closed")
    admitted, out = adm.header_timed_out(sock(clock), decided=False)
    assert not admitted and out[1].reason == "proxy_timeout"  # type: ignore[union-attr]
    return adm


def optional_header_silent_client() -> Admission:
    """An optional header, a client silent until the timeout: admitted as is."""
    adm, clock, _ = new(proxy="optional")
    item = sock(clock)
    admitted, out = adm.header_timed_out(item, decided=False)
    assert admitted and out == []
    assert detail(adm.admit(item)[0])["proxy_header"] is False
    return adm


def shutdown_everywhere() -> Admission:
    """Shutdown in every stage a socket waits in: a slot wait, a full queue, parked, and a
    header read whose admission had not begun."""
    adm, clock, quotas = new(props={"max.connections": "1"})
    blocked = admit_at_once(adm, clock)
    assert adm.queue_full(blocked) == [Stall(True)]
    assert adm.stopped(blocked) == [Stall(False), Close(blocked)]
    waiting = sock(clock)
    adm.admit(waiting)
    assert adm.stage is Stage.WAITING
    assert adm.stopped(waiting) == [Unwatch(), Stall(False), Close(waiting)]
    quotas.release(L, IP)
    adm2, clock2, quotas2 = new()
    quotas2.set_ip_quota(IP, 1, clock2.ns // MS)
    until(adm2, clock2, Parked)
    out = adm2.close_parked()
    assert adm.trace is not None and adm2.trace is not None
    adm.trace += adm2.trace
    assert kinds(out) == ["Unwatch", "Close", "ConnRow", "Count"]
    assert detail(out[2])["closed_by"] == "shutdown"
    taken = sock(clock)
    out = adm.stopped(taken)
    row = out[1]
    assert isinstance(row, CloseRow) and (row.reason, row.fields["error"]) == (
        "shutdown",
        "stopped before admission",
    )
    return adm


# -- the seeded faults' hooks, through the same table -------------------------------------------
def seeded_faults() -> Admission:
    """accept_unrecorded drops one socket in 100 with no row; delay_doubled waits twice the
    delay; slot_wait_while_free waits for a release on the first look; a late reject."""
    faults = Faults.of(
        ["accept_unrecorded", "delay_doubled", "slot_wait_while_free", "ip_count_reject_close_late"]
    ).policy()
    adm, clock, _ = new(
        faults, props={"max.connection.creation.rate": "1", "max.connections.per.ip": "150"}
    )
    dropped = 0
    for n in range(1, 101):
        item = sock(clock)
        out = adm.admit(item)
        if out == [Close(item)]:
            dropped += 1
            assert n == 100
            continue
        if isinstance(out[-1], Sleep):  # doubled: twice the meter's delay
            delay_ms = cols(out[2])["delay_ms"]
            assert delay_ms is not None
            assert out[-1] == Sleep(2 * delay_ms / 1000)
            clock.advance(2 * delay_ms)
            first = adm.woken(item)  # a slot is free, but the first look waits for a release
            assert first == [AwaitSlot(SLOT_WAIT_POLL_S)]
            done = adm.woken(item)
            assert isinstance(done[2], Blocked) and done[2].reason == "rate+slot"
        clock.advance(2000)
    assert dropped == 1
    adm2, clock2, _ = new(faults, props={"max.connections.per.ip": "1"})
    admit_at_once(adm2, clock2)
    item = sock(clock2)
    assert adm2.admit(item)[3] == Close(item, REJECT_LATE_S)
    return adm


SCENARIOS: list[Callable[[], Admission]] = [
    admitted_at_once,
    rate_delay_slept_out,
    slot_wait_until_a_release,
    rate_then_slot,
    ip_throttled_parked_then_closed,
    ip_count_rejected,
    every_queue_full,
    unusable_socket_released,
    proxy_header_read,
    proxy_header_refused,
    optional_header_silent_client,
    shutdown_everywhere,
    seeded_faults,
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda f: f.__name__)
def test_scenario(scenario: Callable[[], Admission]) -> None:
    assert scenario().trace, "no step taken"


def test_every_row_is_exercised() -> None:
    taken: set[tuple[Stage, Input]] = set()
    for scenario in SCENARIOS:
        trace = scenario().trace
        assert trace is not None
        taken.update((stage, inp) for stage, inp, _ in trace)
    untested = sorted(
        f"{s.name} --{i.name}--> {TRANSITIONS[(s, i)].next.name}"
        for s, i in set(TRANSITIONS) - taken
    )
    assert not untested, "rows no scenario takes:\n" + "\n".join(untested)


def test_a_step_outside_the_table_is_an_error() -> None:
    adm, clock, _ = new()
    item = admit_at_once(adm, clock)
    with pytest.raises(TransitionError, match="no step"):
        adm.queued(item)  # handed at once: nothing blocked
    with pytest.raises(TransitionError, match="not the socket in admission"):
        adm.woken(sock(clock))


def test_every_row_detail_is_declared() -> None:
    """The details admission writes are the ones `base.history.events` declares."""
    adm, clock, quotas = new(props={"max.connections.per.ip": "1"})
    quotas.set_ip_quota("127.0.0.9", 1, clock.ns // MS)
    quotas.reconfigure(
        parse_config(
            {
                "listeners": f"{L}://127.0.0.1:1",
                "max.connections.per.ip": "1",
                "max.connections.per.ip.overrides": "127.0.0.9:100",
            }
        ),
        clock.ns // MS,
    )
    out = adm.admit(sock(clock)) + adm.admit(sock(clock))  # accept, admit; reject
    out += until(adm, clock, Parked, "127.0.0.9")[1]
    clock.advance(2000)
    out += adm.due()
    adm, clock, _ = new(proxy="on", props={"max.connection.creation.rate": "1"})
    out += until(adm, clock, Sleep)[1]
    written = set(rows(out))
    assert written == {"accept", "admit", "reject", "delay", "throttle_close"}
    for action in out:
        if isinstance(action, ConnRow) and cols(action)["detail"] is not None:
            events.checked("acceptor", cols(action)["event"], detail(action))
