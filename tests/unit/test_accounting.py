"""The accounting check's pure parts: the kernel's counters read from /proc/net/netstat text,
and lost attempts matched to the drops counted in their lives (no Spark, no clock)."""

from __future__ import annotations

from typing import Any

import pytest

from analysis.checks.accounting import (
    NEVER,
    Lost,
    QueueClose,
    Reading,
    explain_by_drops,
    reset_in_queue,
)
from base.history.rows import FIELDS, HarnessKernelNetDetail
from harness.runner.kernel_net import EVENT, KernelNetSampler, NetstatError, parse_netstat

NETSTAT = """\
TcpExt: SyncookiesSent ListenOverflows ListenDrops TCPReqQFullDoCookies TCPReqQFullDrop
TcpExt: 9 12 15 3 0
IpExt: InNoRoutes InTruncatedPkts
IpExt: 0 0
"""


def test_parse_netstat_reads_the_listen_counters() -> None:
    counters = parse_netstat(NETSTAT)
    assert counters == {
        "listen_overflows": 12,
        "listen_drops": 15,
        "reqq_full_drop": 0,
        "syn_cookies": 3,
    }
    # the keys its rows carry are the event's declared detail keys
    assert set(counters) <= HarnessKernelNetDetail.__optional_keys__


def test_a_kernel_without_the_counters_is_an_error_not_zero() -> None:
    with pytest.raises(NetstatError, match="ListenDrops"):
        parse_netstat("TcpExt: ListenOverflows\nTcpExt: 1\n")
    with pytest.raises(NetstatError, match="no TcpExt"):
        parse_netstat("IpExt: A\nIpExt: 1\n")


def test_the_sampler_records_the_read_span_and_a_failed_read_as_a_gap() -> None:
    rows: list[dict[str, Any]] = []
    ticks = iter([1_000, 1_250, 5_000])
    texts = iter([NETSTAT])

    def read() -> str:
        try:
            return next(texts)
        except StopIteration:
            raise OSError("gone") from None

    s = KernelNetSampler(
        lambda row: rows.append(dict(zip(FIELDS, row, strict=True))),
        read=read,
        clock_ns=lambda: next(ticks),
    )
    assert s.sample_once() is True
    assert s.sample_once() is False
    ok, bad = rows
    assert ok["event"] == bad["event"] == EVENT
    assert ok["mono_ns"] == 1_000 and ok["latency_ms"] == pytest.approx(250 / 1e6)
    assert ok["detail"]["listen_drops"] == 15 and "netns" in ok["detail"]
    assert bad["reason"] == "read_failed" and "gone" in bad["detail"]["error"]


def _readings(*points: tuple[int, int]) -> list[Reading]:
    """(instant, cumulative drops); each read takes 10 ns."""
    return [Reading(t, t + 10, d) for t, d in points]


def _lost(start: int, end: int, name: str = "x") -> Lost:
    return Lost(start, end, (name,))


def test_a_drop_explains_one_attempt_whose_life_overlaps_its_interval() -> None:
    readings = _readings((0, 5), (1_000, 6), (2_000, 6))
    bad, unjudged, used = explain_by_drops([_lost(400, 600, "a"), _lost(500, 700, "b")], readings)
    assert used == 1 and unjudged == []
    assert [x.key for x in bad] == [("b",)]  # the earliest-ending took the one drop


def test_a_drop_outside_the_attempts_life_explains_nothing() -> None:
    # the drop was counted between 1000 and 2000; the attempt ended at 999 (the earlier
    # reading began at 1000): just outside, so it stays unexplained
    readings = _readings((0, 0), (1_000, 0), (2_000, 1))
    bad, _, used = explain_by_drops([_lost(100, 999)], readings)
    assert used == 0 and len(bad) == 1
    # ending 1 ns after that reading began, it overlaps the interval: explained
    bad, _, used = explain_by_drops([_lost(100, 1_001)], readings)
    assert used == 1 and bad == []


def test_the_clock_alignment_bound_widens_an_attempts_life() -> None:
    readings = _readings((0, 0), (1_000, 0), (2_000, 1))
    bad, _, _ = explain_by_drops([_lost(100, 990)], readings, margin_ns=5)
    assert len(bad) == 1
    bad, _, _ = explain_by_drops([_lost(100, 990)], readings, margin_ns=11)
    assert bad == []


def test_earliest_ending_first_explains_as_many_as_possible() -> None:
    # one drop in each of two intervals; a long attempt and a short one: matching the long
    # one first in the first interval would leave the short one unexplained
    readings = _readings((0, 0), (1_000, 1), (2_000, 2))
    lost = [_lost(100, 5_000, "long"), _lost(200, 900, "short")]
    bad, _, used = explain_by_drops(lost, readings)
    assert used == 2 and bad == []


def test_more_lost_than_dropped_leaves_the_surplus_unexplained() -> None:
    readings = _readings((0, 0), (1_000, 2))
    lost = [_lost(10 * i, 500 + i, str(i)) for i in range(3)]
    bad, _, used = explain_by_drops(lost, readings)
    assert used == 2 and [x.key for x in bad] == [("2",)]


def test_attempts_outside_the_readings_are_not_judged() -> None:
    readings = _readings((1_000, 0), (2_000, 0))
    bad, unjudged, _ = explain_by_drops(
        [_lost(10, 500), _lost(3_000, 4_000), _lost(900, 1_500)], readings
    )
    assert [x.start for x in unjudged] == [10, 3_000]
    assert [x.start for x in bad] == [900]


def test_fewer_than_two_readings_judge_nothing() -> None:
    bad, unjudged, used = explain_by_drops([_lost(1, 2)], _readings((0, 0)))
    assert bad == [] and len(unjudged) == 1 and used == 0


def _alive(connected: int, end: int = NEVER, listener: str = "client", name: str = "x") -> Lost:
    """A connected attempt: key (ip, port, listener, connect_ok_ns, outcome)."""
    return Lost(connected - 5, end, (name, 1, listener, connected, None))


def test_a_closing_queue_resets_the_latest_connected_attempts_alive_at_the_close() -> None:
    early, mid, late = _alive(100, name="early"), _alive(200, name="mid"), _alive(300, name="late")
    reset, rest = reset_in_queue([early, mid, late], [QueueClose("client", 1_000, 2)])
    assert reset == [mid, late] and rest == [early]
    # all three queued: all reset; none queued: none
    assert reset_in_queue([early, mid, late], [QueueClose("client", 1_000, 3)])[1] == []
    assert reset_in_queue([early], [QueueClose("client", 1_000, 0)]) == ([], [early])


def test_only_an_attempt_of_that_listener_open_across_the_close_can_have_been_queued() -> None:
    closes = [QueueClose("client", 1_000, 5)]
    ended = _alive(100, end=999)  # its client closed 1 ns before the listener did
    after = _alive(1_001)  # connected 1 ns after the close
    other = _alive(100, listener="replication")
    never_connected = Lost(100, NEVER, ("x", 1, "client", None, None))
    lost = [ended, after, other, never_connected]
    assert reset_in_queue(lost, closes) == ([], lost)
    # at the close itself, either way, it can
    on_time = [_alive(100, end=1_000), _alive(1_000)]
    assert reset_in_queue(on_time, closes) == (on_time, [])


def test_the_clock_alignment_bound_widens_the_close_for_moved_rows() -> None:
    closes = [QueueClose("client", 1_000, 1)]
    after = _alive(1_004)
    assert reset_in_queue([after], closes, margin_ns=3) == ([], [after])
    assert reset_in_queue([after], closes, margin_ns=4) == ([after], [])


def test_each_close_resets_its_own_count_once() -> None:
    a, b = _alive(100), _alive(200)
    closes = [QueueClose("client", 1_000, 1), QueueClose("client", 2_000, 1)]
    # two processes' closes (a restart): each explains one, never the same one twice
    assert sorted(x.key[3] for x in reset_in_queue([a, b], closes)[0]) == [100, 200]
