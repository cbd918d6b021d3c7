"""The run's timeline and the limits along it: ordering rules and config rows, no clock needed."""

from __future__ import annotations

from typing import Any

from harness.runner.scenario import INT_MAX, parse_scenario
from harness.runner.schedule import (
    Cursor,
    apply_change,
    build_timeline,
    fault_windows,
    initial_limits,
    limits_timeline,
)

SPEC: dict[str, Any] = {
    "name": "sched",
    "description": "schedule test",
    "duration": 30,
    "listeners": {"names": ["CLIENT", "REPLICATION"], "inter_broker": "REPLICATION"},
    "limits": {"max.connection.creation.rate": 40, "listener.name.client.max.connections": 50},
    "ip_quotas": {"default": 10, "127.0.0.9": 1},
    "load": [
        {"name": "steady", "profile": "steady", "users": 2},
        {
            "name": "storm",
            "profile": "storm",
            "arrival": "constant:rate=60",
            "start": 10,
            "stop": 25,
        },
    ],
    "schedule": [
        {"at": 10, "ip_quota": {"ip": "default", "rate": 2}},
        {"at": 10, "fault": "broker_pause", "for": 5},
        {"at": 15, "broker_config": {"max.connection.creation.rate": None, "max.connections": 100}},
        {"at": 20, "ip_quota": {"ip": "127.0.0.9", "rate": None}},
        {"at": 25, "fault": "upstream_latency", "for": 3, "latency_ms": 150},
        {"at": 26, "request_quota": {"client-id": "c", "request_percentage": 20}},
        {"at": 27, "request_quota": {"client-id": "c", "request_percentage": None}},
    ],
}


def test_timeline_order_at_equal_times() -> None:
    sc = parse_scenario(SPEC)
    kinds = [(e.at, e.kind) for e in build_timeline(sc)]
    # at 10: the change before the fault before the phase it is meant for
    assert kinds[:4] == [
        (0, "phase_start"),
        (10, "change"),
        (10, "fault_start"),
        (10, "phase_start"),
    ]
    # at 15: the pause ends before the next change
    assert kinds[4:6] == [(15, "fault_end"), (15, "change")]
    # at 25: the storm stops before the latency fault starts
    assert (25, "phase_stop") in kinds
    assert kinds.index((25, "phase_stop")) < kinds.index((25, "fault_start"))
    assert kinds[-1] == (30, "phase_stop")
    assert [e.at for e in build_timeline(sc)] == sorted(e.at for e in build_timeline(sc))


def test_shortened_run_clips_phases_and_faults() -> None:
    sc = parse_scenario(SPEC)
    events = build_timeline(sc, duration=12)
    assert max(e.at for e in events) == 12
    assert [e.kind for e in events if e.at == 12] == [
        "phase_stop",
        "fault_end",
        "phase_stop",
    ] or all(e.kind in ("phase_stop", "fault_end") for e in events if e.at == 12)
    assert not any(e.kind == "change" and e.at >= 12 for e in events)
    assert (
        sum(e.kind == "phase_start" for e in events)
        == sum(e.kind == "phase_stop" for e in events)
        == 2
    )
    assert (
        sum(e.kind == "fault_start" for e in events)
        == sum(e.kind == "fault_end" for e in events)
        == 1
    )
    # a phase that would start after the end is not started at all
    assert sum(e.kind == "phase_start" for e in build_timeline(sc, duration=5)) == 1


def test_cursor_hands_out_each_event_once() -> None:
    sc = parse_scenario(SPEC)
    cursor = Cursor(build_timeline(sc))
    assert [e.kind for e in cursor.due(0)] == ["phase_start"]
    assert list(cursor.due(0)) == []
    assert cursor.next_at == 10
    assert [e.kind for e in cursor.due(10.05)] == ["change", "fault_start", "phase_start"]
    seen = list(cursor.due(1000))
    assert cursor.done() and cursor.next_at is None and cursor.pending() == []
    assert len(seen) == len(build_timeline(sc)) - 4


def test_initial_limits_carry_every_broker_key_with_kafka_defaults() -> None:
    sc = parse_scenario(SPEC)
    limits = initial_limits(sc, {"CLIENT": ("127.0.0.1", 9092), "REPLICATION": ("127.0.0.1", 9093)})
    assert limits["max.connection.creation.rate"] == 40
    assert limits["max.connections"] == INT_MAX
    assert limits["max.connections.per.ip"] == INT_MAX
    assert limits["quota.window.num"] == 11 and limits["quota.window.size.seconds"] == 1
    assert limits["listener.name.client.max.connections"] == 50
    # unset listener keys stay unset: the listener takes the broker-wide value (Kafka's
    # valuesWithPrefixOverride), which an explicit Int.MaxValue would not
    assert "listener.name.replication.max.connection.creation.rate" not in limits
    assert limits["listeners"] == "CLIENT://127.0.0.1:9092,REPLICATION://127.0.0.1:9093"
    assert limits["inter.broker.listener.name"] == "REPLICATION"
    assert limits["ip_quotas"] == {"default": 10, "127.0.0.9": 1}
    assert limits["request_quotas"] == []


def test_changes_apply_like_kafka_and_never_mutate() -> None:
    sc = parse_scenario(SPEC)
    start = initial_limits(sc)
    timeline = limits_timeline(sc, start)
    assert [at for at, _ in timeline] == [0, 10, 15, 20, 26, 27]
    assert start["ip_quotas"] == {"default": 10, "127.0.0.9": 1}  # untouched
    at10, at15, at20, at26, at27 = (lim for _, lim in timeline[1:])
    assert at10["ip_quotas"] == {"default": 2, "127.0.0.9": 1}  # the override survives
    assert at15["max.connection.creation.rate"] == INT_MAX  # deleted = back to Kafka's default
    assert at15["max.connections"] == 100
    assert at20["ip_quotas"] == {"default": 2}
    assert at26["request_quotas"] == [{"client-id": "c", "request_percentage": 20}]
    assert at27["request_quotas"] == []


def test_fault_changes_no_limit_and_windows_are_listed() -> None:
    sc = parse_scenario(SPEC)
    start = initial_limits(sc)
    pause = sc.faults[0]
    assert apply_change(start, pause) == start
    assert fault_windows(sc) == [("broker_pause", 10, 15), ("upstream_latency", 25, 28)]


def test_deleting_a_listener_key_drops_it_back_to_the_broker_wide_value() -> None:
    from harness.runner.scenario import Action

    start = initial_limits(parse_scenario(SPEC))
    assert start["listener.name.client.max.connections"] == 50
    after = apply_change(
        start, Action(1.0, "broker_config", {"listener.name.client.max.connections": None})
    )
    assert "listener.name.client.max.connections" not in after
    assert start["listener.name.client.max.connections"] == 50  # never mutated
