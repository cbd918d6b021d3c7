"""Broker-side checks (client intervals) and Kafka-metric checks on hand-built histories.

Each rule is shown passing exactly at its bound and failing one past it (the bounds:
analysis.checks.kafka_bounds, docs/kafka-reference.md). n = 11, w = 1 s throughout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from analysis.checks import ALL_CHECKS, CheckResult
from analysis.load import load_run
from analysis.synth import SynthSpec, generate, write_rows
from analysis.verdict import run_checks

T0 = 7_000_000_000_000
MS = 1_000_000
LISTENERS = "CLIENT://127.0.0.1:9092"


def _results(spark: Any, run_dir: Path, names: list[str]) -> dict[str, CheckResult]:
    run = load_run(spark, run_dir)
    picked = [c for c in ALL_CHECKS if c.name in names]
    return {r.name: r for r in run_checks(run, picked)}


def _conn(
    ip: str,
    port: int,
    invoke_ms: float,
    *,
    ready_ms: float | None = None,
    eof_ms: float | None = None,
    closed_ms: float | None = None,
) -> list[dict[str, Any]]:
    """The client rows of one attempt (connect_invoke .. closed)."""
    base = {"source": "client", "listener": "client", "ip": ip, "port": port}
    t = T0 + int(invoke_ms * MS)
    rows = [
        {**base, "event": "connect_invoke", "mono_ns": t, "detail": {"profile": "storm"}},
        {**base, "event": "connect_ok", "mono_ns": t + MS // 2, "latency_ms": 0.5},
    ]
    if ready_ms is not None:
        r = T0 + int(ready_ms * MS)
        rows.append({**base, "event": "ready", "mono_ns": r, "latency_ms": ready_ms - invoke_ms})
        end = T0 + int((closed_ms if closed_ms is not None else ready_ms + 1) * MS)
        rows.append(
            {
                **base,
                "event": "closed",
                "mono_ns": end,
                "reason": "done",
                "detail": {"outcome": "served"},
            }
        )
    if eof_ms is not None:
        e = T0 + int(eof_ms * MS)
        rows.append({**base, "event": "request_fail", "mono_ns": e, "reason": "eof"})
        rows.append(
            {
                **base,
                "event": "closed",
                "mono_ns": e,
                "reason": "eof",
                "detail": {"outcome": "eof_after_accept"},
            }
        )
    return rows


def _run(
    tmp: Path,
    name: str,
    limits: dict[str, Any],
    rows: list[dict[str, Any]],
    kafka_version: str | None = None,
) -> Path:
    cfg = {"listeners": LISTENERS, **limits}
    if kafka_version is not None:
        cfg["kafka.version"] = kafka_version
    head = [{"source": "harness", "event": "config", "mono_ns": T0 - 1, "detail": cfg}]
    run = {"run_id": name, "target": "broker", "limits": cfg, "expect": {"slack_ms": 50}}
    return write_rows(tmp / name, head + rows, run)


# --- per-IP span: bound q·(n+1)·w = 12 at 1/s ---------------------------------------------


@pytest.mark.parametrize("served, verdict", [(12, "pass"), (13, "fail")])
def test_ip_rate_span_at_and_past_the_bound(
    spark: Any, tmp_path: Path, served: int, verdict: str
) -> None:
    rows: list[dict[str, Any]] = []
    for i in range(served):  # all inside one 10.998 s span, each interval 5 ms wide
        rows += _conn("127.0.0.9", 3000 + i, i * 800.0, ready_ms=i * 800.0 + 5)
    run_dir = _run(tmp_path, f"ip-{served}", {"ip_quotas": {"127.0.0.9": 1}}, rows)
    res = _results(spark, run_dir, ["client_ip_rate_span"])["client_ip_rate_span"]
    assert res.verdict == verdict, res.observed
    assert res.limit == 12 and res.peak == served
    assert res.exercised  # 12 attempts in n·w > the fresh burst q·(n-1)·w = 10
    if verdict == "fail":
        assert {w["client_ip"] for w in res.witnesses} == {"127.0.0.9"}


def test_ip_rate_span_counts_only_intervals_surely_inside(spark: Any, tmp_path: Path) -> None:
    """13 served, but one's interval (invoke → ready) is 11 s wide: it may have been
    accepted before the span, so the client cannot prove over-admission."""
    rows: list[dict[str, Any]] = []
    for i in range(12):
        rows += _conn("127.0.0.9", 3000 + i, 2000 + i * 700.0, ready_ms=2000 + i * 700.0 + 5)
    rows += _conn("127.0.0.9", 3100, -9500.0, ready_ms=10_500.0)
    run_dir = _run(tmp_path, "ip-wide", {"ip_quotas": {"127.0.0.9": 1}}, rows)
    res = _results(spark, run_dir, ["client_ip_rate_span"])["client_ip_rate_span"]
    assert res.verdict == "pass", res.observed


def test_ip_rate_span_is_na_without_a_quota(spark: Any, tmp_path: Path) -> None:
    rows = _conn("127.0.0.9", 3000, 0.0, ready_ms=5.0)
    res = _results(spark, _run(tmp_path, "ip-none", {}, rows), ["client_ip_rate_span"])
    assert res["client_ip_rate_span"].verdict == "n/a"


# --- broker-wide rate span: r = 2/s -> 2·13 + (10.999/0.999 + 1) = 38 -----------------------


@pytest.mark.parametrize("served, verdict", [(38, "pass"), (39, "fail")])
def test_broker_rate_span_at_and_past_the_bound(
    spark: Any, tmp_path: Path, served: int, verdict: str
) -> None:
    rows: list[dict[str, Any]] = []
    for i in range(served):
        ip = f"127.0.0.{2 + i % 8}"
        rows += _conn(ip, 4000 + i, i * 250.0, ready_ms=i * 250.0 + 3)
    run_dir = _run(tmp_path, f"broker-{served}", {"max.connection.creation.rate": 2}, rows)
    res = _results(spark, run_dir, ["client_broker_rate_span"])["client_broker_rate_span"]
    assert res.verdict == verdict, res.observed
    assert res.limit == 38


# --- the spans judged as a release before 3.8 (a ring of n samples purged by start) --------
# Its meter remembers every event of the last (n-1)·w only, so the span is 9.999 s and the
# bounds use m = n slots: per-IP q·n·w = 11 at 1/s, broker rate 2·12 + (10/0.999 + 1) = 35.
# Each history below is judged both ways: what the old ring could not record passes as
# 4.3.1, and what the n+1 ring could not record passes as 2.8.2.


@pytest.mark.parametrize(
    "spacing, version, verdict, bound",
    [
        (800.0, "2.8.2", "fail", 11),  # 12 in 8.8 s: one over the old ring's 11
        (800.0, "4.3.1", "pass", 12),
        (916.0, "2.8.2", "pass", 11),  # 13 over 10.997 s: never more than 11 in 9.999 s
        (916.0, "4.3.1", "fail", 12),  # ... but 13 in one 10.998 s span
    ],
)
def test_ip_rate_span_is_judged_with_the_release_s_ring(
    spark: Any, tmp_path: Path, spacing: float, version: str, verdict: str, bound: int
) -> None:
    count = 12 if spacing == 800.0 else 13
    rows: list[dict[str, Any]] = []
    for i in range(count):
        rows += _conn("127.0.0.9", 3000 + i, i * spacing, ready_ms=i * spacing + 5)
    run_dir = _run(
        tmp_path, f"ip-{spacing:g}-{version}", {"ip_quotas": {"127.0.0.9": 1}}, rows, version
    )
    res = _results(spark, run_dir, ["client_ip_rate_span"])["client_ip_rate_span"]
    assert res.verdict == verdict, res.observed
    assert res.limit == bound
    span = "9.999 s" if version == "2.8.2" else "10.998 s"
    assert span in res.observed


@pytest.mark.parametrize(
    "spacing, count, version, verdict, bound",
    [
        (250.0, 36, "2.8.2", "fail", 35),  # 36 in 8.75 s: one over the old ring's 35
        (250.0, 36, "4.3.1", "pass", 38),
        (288.0, 39, "2.8.2", "pass", 35),  # 39 over 10.95 s, at most 35 in 9.999 s
        (288.0, 39, "4.3.1", "fail", 38),
    ],
)
def test_broker_rate_span_is_judged_with_the_release_s_ring(
    spark: Any, tmp_path: Path, spacing: float, count: int, version: str, verdict: str, bound: int
) -> None:
    rows: list[dict[str, Any]] = []
    for i in range(count):
        ip = f"127.0.0.{2 + i % 8}"
        rows += _conn(ip, 4000 + i, i * spacing, ready_ms=i * spacing + 3)
    limits = {"max.connection.creation.rate": 2}
    run_dir = _run(tmp_path, f"broker-{spacing:g}-{version}", limits, rows, version)
    res = _results(spark, run_dir, ["client_broker_rate_span"])["client_broker_rate_span"]
    assert res.verdict == verdict, res.observed
    assert res.limit == bound


# --- over-throttling: quota 1/s needs more than q·(n-1)·w - 1 = 9 other kept records ---------


@pytest.mark.parametrize("others, verdict", [(10, "pass"), (9, "fail")])
def test_an_eof_needs_enough_other_connections_to_be_a_throttle(
    spark: Any, tmp_path: Path, others: int, verdict: str
) -> None:
    rows: list[dict[str, Any]] = []
    for i in range(others):
        rows += _conn("127.0.0.9", 5000 + i, i * 300.0, ready_ms=i * 300.0 + 4)
    rows += _conn("127.0.0.9", 5999, 4000.0, eof_ms=4400.0)
    run_dir = _run(tmp_path, f"eof-{others}", {"ip_quotas": {"127.0.0.9": 1}}, rows)
    res = _results(spark, run_dir, ["client_over_throttling"])["client_over_throttling"]
    assert res.verdict == verdict, res.observed
    if verdict == "fail":
        assert res.witnesses[0]["client_port"] == 5999


def test_a_lowered_quota_counts_for_an_eof_around_the_change(spark: Any, tmp_path: Path) -> None:
    """Quota 10/s lowered to 1/s at 5 s: 10 others make a throttle possible at 1/s (not at
    10/s, which needs 99), so an EOF at 4.8 s, just before the change row, is explained."""
    rows: list[dict[str, Any]] = []
    for i in range(10):
        rows += _conn("127.0.0.9", 5000 + i, i * 300.0, ready_ms=i * 300.0 + 4)
    rows += _conn("127.0.0.9", 5999, 4700.0, eof_ms=4800.0)
    lowered = {"listeners": LISTENERS, "ip_quotas": {"127.0.0.9": 1}}
    rows.append(
        {"source": "harness", "event": "config", "mono_ns": T0 + 5000 * MS, "detail": lowered}
    )
    run_dir = _run(tmp_path, "eof-lowered", {"ip_quotas": {"127.0.0.9": 10}}, rows)
    res = _results(spark, run_dir, ["client_over_throttling"])["client_over_throttling"]
    assert res.verdict == "pass", res.observed


def test_an_eof_with_no_limit_at_all_is_over_throttling(spark: Any, tmp_path: Path) -> None:
    rows = _conn("127.0.0.5", 6000, 0.0, ready_ms=3.0) + _conn("127.0.0.5", 6001, 10.0, eof_ms=20.0)
    res = _results(spark, _run(tmp_path, "eof-free", {}, rows), ["client_over_throttling"])
    assert res["client_over_throttling"].verdict == "fail"


def test_a_count_limit_explains_an_eof_while_enough_are_open(spark: Any, tmp_path: Path) -> None:
    rows = _conn("127.0.0.5", 6000, 0.0, ready_ms=3.0, closed_ms=5000.0)
    rows += _conn("127.0.0.5", 6001, 0.0, ready_ms=3.0, closed_ms=5000.0)
    rows += _conn("127.0.0.5", 6002, 1000.0, eof_ms=1001.0)
    run_dir = _run(tmp_path, "eof-count", {"max.connections.per.ip": 2}, rows)
    res = _results(spark, run_dir, ["client_over_throttling"])["client_over_throttling"]
    assert res.verdict == "pass", res.observed
    # the same EOF 6 s later, after both closed (+300 ms poll + 50 ms slack): unexplained
    rows[-4:] = _conn("127.0.0.5", 6002, 5400.0, eof_ms=5401.0)
    run_dir = _run(tmp_path, "eof-count-late", {"max.connections.per.ip": 2}, rows)
    res = _results(spark, run_dir, ["client_over_throttling"])["client_over_throttling"]
    assert res.verdict == "fail", res.observed


# --- connection counts from the intervals --------------------------------------------------


@pytest.mark.parametrize("open_at_once, verdict", [(3, "pass"), (4, "fail")])
def test_served_connections_open_at_once(
    spark: Any, tmp_path: Path, open_at_once: int, verdict: str
) -> None:
    rows: list[dict[str, Any]] = []
    for i in range(open_at_once):
        rows += _conn(f"127.0.0.{2 + i}", 7000 + i, i * 10.0, ready_ms=i * 10.0 + 2, closed_ms=900)
    rows += _conn("127.0.0.2", 7100, 1000.0, ready_ms=1002.0, closed_ms=1500.0)  # after release
    run_dir = _run(tmp_path, f"count-{open_at_once}", {"max.connections": 3}, rows)
    res = _results(spark, run_dir, ["client_connection_count"])["client_connection_count"]
    assert res.verdict == verdict, res.observed
    assert res.exercised and res.peak == open_at_once


# --- Kafka's metrics as testimony ------------------------------------------------------------


def _scrape(at_ms: float, count: float, ip_throttle: float | None) -> dict[str, Any]:
    ssm = "kafka_server_socket_server_metrics_"
    samples = [
        [ssm + "connection_count", {"listener": "CLIENT", "network_processor": "0"}, count - 1],
        [ssm + "connection_count", {"listener": "CLIENT", "network_processor": "1"}, 1.0],
        [ssm + "connection_count", {"listener": "CONTROLLER", "network_processor": "0"}, 9.0],
        [ssm + "ip_connection_accept_throttle_time", {"listener": "CLIENT"}, ip_throttle],
        [ssm + "connection_accept_throttle_time", {"listener": "CLIENT"}, None],
    ]
    return {
        "source": "harness",
        "event": "kafka_metrics",
        "mono_ns": T0 + int(at_ms * MS),
        "detail": {"url": "http://x/metrics", "target": "broker", "samples": samples},
    }


@pytest.mark.parametrize("count, verdict", [(3.0, "pass"), (4.0, "fail")])
def test_kafka_connection_count_against_max(
    spark: Any, tmp_path: Path, count: float, verdict: str
) -> None:
    rows = [_scrape(1000.0, count, None), _scrape(2000.0, 1.0, None)]
    rows += _conn("127.0.0.2", 8000, 0.0, ready_ms=3.0)
    run_dir = _run(tmp_path, f"kc-{count}", {"max.connections": 3}, rows)
    res = _results(spark, run_dir, ["kafka_metric_connection_count"])
    r = res["kafka_metric_connection_count"]
    assert r.verdict == verdict, r.observed  # the CONTROLLER listener's 9 is not the run's
    assert r.judged == 2


@pytest.mark.parametrize("ready_ms, verdict", [(1001.5, "pass"), (997.9, "fail")])
def test_a_scrape_sum_over_the_limit_is_excused_only_by_a_registration_during_it(
    spark: Any, tmp_path: Path, ready_ms: float, verdict: str
) -> None:
    """The exporter reads each processor's gauge in turn during a scrape (here 1000 ms ±
    2 ms): one over max.connections is what a registration read early beside a close
    read late can add, when one connection could register inside the scrape; one that
    answered before the scrape began was in every gauge read."""
    scrape = _scrape(1000.0, 4.0, None)
    scrape["detail"]["scrape_ms"] = 4.0
    rows = [scrape, *_conn("127.0.0.2", 8000, ready_ms - 3.5, ready_ms=ready_ms)]
    rows += _conn("127.0.0.3", 8001, 0.0, ready_ms=3.0)
    run_dir = _run(tmp_path, f"kc-scrape-{verdict}", {"max.connections": 3}, rows)
    r = _results(spark, run_dir, ["kafka_metric_connection_count"])
    assert r["kafka_metric_connection_count"].verdict == verdict


def test_kafka_metrics_missing_is_unknown_not_pass(spark: Any, tmp_path: Path) -> None:
    rows = _conn("127.0.0.2", 8000, 0.0, ready_ms=3.0)
    run_dir = _run(tmp_path, "kc-none", {"max.connections": 3}, rows)
    r = _results(spark, run_dir, ["kafka_metric_connection_count"])
    assert r["kafka_metric_connection_count"].verdict == "unknown"


@pytest.mark.parametrize("avg, verdict", [(1000.0, "pass"), (1001.0, "fail")])
def test_kafka_throttle_averages_are_capped_at_w(
    spark: Any, tmp_path: Path, avg: float, verdict: str
) -> None:
    rows = [_scrape(1000.0, 1.0, avg), *_conn("127.0.0.2", 8000, 0.0, ready_ms=3.0)]
    run_dir = _run(tmp_path, f"kt-{avg}", {"ip_quotas": {"default": 1}}, rows)
    r = _results(spark, run_dir, ["kafka_metric_throttle_bounded"])
    assert r["kafka_metric_throttle_bounded"].verdict == verdict


@pytest.mark.parametrize("value, verdict", [(120.0, "pass"), (None, "fail")])
def test_client_eofs_are_confirmed_by_kafkas_ip_throttle_metric(
    spark: Any, tmp_path: Path, value: float | None, verdict: str
) -> None:
    rows = _conn("127.0.0.9", 9000, 0.0, eof_ms=500.0)
    rows += [_scrape(200.0, 1.0, None), _scrape(900.0, 1.0, value), _scrape(1900.0, 1.0, value)]
    rows += [_scrape(20_000.0, 1.0, None)]  # past the Avg's n·w life: not compared
    run_dir = _run(tmp_path, f"ks-{value}", {"ip_quotas": {"127.0.0.9": 1}}, rows)
    r = _results(spark, run_dir, ["kafka_metric_ip_throttle_seen"])
    assert r["kafka_metric_ip_throttle_seen"].verdict == verdict, r[
        "kafka_metric_ip_throttle_seen"
    ].observed


def test_eofs_near_a_fault_are_not_compared_with_the_metric(spark: Any, tmp_path: Path) -> None:
    """A broker kill cuts connections and restarts the metrics: such EOFs are not judged."""
    rows = _conn("127.0.0.9", 9000, 0.0, eof_ms=500.0)
    rows += [_scrape(900.0, 1.0, None), _scrape(1900.0, 1.0, None)]
    for event, at in (("fault_start", 300.0), ("fault_end", 3000.0)):
        rows.append(
            {
                "source": "harness",
                "event": event,
                "mono_ns": T0 + int(at * MS),
                "reason": "broker_kill",
                "detail": {"kind": "broker_kill"},
            }
        )
    run_dir = _run(tmp_path, "ks-fault", {"ip_quotas": {"127.0.0.9": 1}}, rows)
    r = _results(spark, run_dir, ["kafka_metric_ip_throttle_seen"])["kafka_metric_ip_throttle_seen"]
    assert r.verdict == "unknown" and r.judged == 0, r.observed


@pytest.mark.parametrize("set_at, verdict", [(2_500.0, "fail"), (2_510.0, "unknown")])
def test_a_rate_set_during_the_run_is_judged_from_one_window_after(
    spark: Any, tmp_path: Path, set_at: float, verdict: str
) -> None:
    """39 served within one span (invokes 5.0-14.5 s, the span ends at 14.503 s and starts
    at 3.505 s); a broker rate of 2/s (bound 38) set during the run counts for the span only
    when it held from one window (1 s) before the span's start: set at 2.5 s it does (fail),
    set at 2.51 s the span may have run under no limit (not judged: unknown)."""
    rows: list[dict[str, Any]] = []
    for i in range(39):
        t = 5_000 + i * 250.0
        rows += _conn(f"127.0.0.{2 + i % 8}", 4000 + i, t, ready_ms=t + 3)
    limited = {"listeners": LISTENERS, "max.connection.creation.rate": 2}
    at = T0 + int(set_at * MS)
    rows.append({"source": "harness", "event": "config", "mono_ns": at, "detail": limited})
    run_dir = _run(tmp_path, f"broker-set-{set_at}", {}, rows)
    res = _results(spark, run_dir, ["client_broker_rate_span"])["client_broker_rate_span"]
    assert res.verdict == verdict, res.observed


# --- a synthetic conforming broker run passes; the replay is only a diagnostic there ---------


def test_synthetic_broker_run_passes_and_replay_is_a_diagnostic(spark: Any, tmp_path: Path) -> None:
    """(The synthetic `broken={"ip_rate"}` broker run is no failing case for the client view:
    its flood waits ~17 s in the listener's backlog, so no span surely holds more than 7 of
    its served connections; the hand-built cases above fail one past the bound instead.)"""
    names = ["client_ip_rate_span", "client_over_throttling", "model_replay"]
    ok = tmp_path / "synth-ok"
    generate(ok, SynthSpec(run_id="synth-ok", cycles=1, target="broker"))
    good = _results(spark, ok, names)
    assert good["client_ip_rate_span"].verdict == "pass", good["client_ip_rate_span"].observed
    assert good["client_over_throttling"].verdict == "pass"
    replay = good["model_replay"]
    assert replay.verdict == "n/a" and 0.0 <= replay.data["agreement"] <= 1.0
    assert not replay.witnesses  # disagreements are data on a broker target, not witnesses


# --- the protected listener past max.connections (Kafka never evicts it) ---------------------

TWO = "CLIENT://127.0.0.1:9092,REPLICATION://127.0.0.1:9093"


def _on(listener: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**r, "listener": listener} for r in rows]


def _protected_run(spark: Any, tmp: Path, name: str, rows: list[dict[str, Any]]) -> Any:
    limits = {
        "listeners": TWO,
        "inter.broker.listener.name": "REPLICATION",
        "max.connections": 4,
    }
    run_dir = _run(tmp, name, limits, rows)
    return _results(spark, run_dir, ["client_over_throttling"])["client_over_throttling"]


@pytest.mark.parametrize("holders, exercised", [(4, None), (5, True)])
def test_protected_holders_past_max_are_kept(
    spark: Any, tmp_path: Path, holders: int, exercised: bool | None
) -> None:
    rows: list[dict[str, Any]] = []
    for i in range(holders):
        rows += _on(
            "replication",
            _conn("127.0.0.30", 9000 + i, i * 5.0, ready_ms=i * 5.0 + 2, closed_ms=20_000.0),
        )
    res = _protected_run(spark, tmp_path, f"prot-{holders}", rows)
    assert res.verdict == "pass", res.observed
    assert res.exercised is exercised  # one past max.connections = 4: exercised
    if exercised:
        assert res.peak == holders and res.limit == 4


def test_a_protected_connection_closed_by_kafka_is_over_strict(spark: Any, tmp_path: Path) -> None:
    rows: list[dict[str, Any]] = []
    for i in range(5):
        rows += _on(
            "replication",
            _conn("127.0.0.30", 9000 + i, i * 5.0, ready_ms=i * 5.0 + 2, closed_ms=20_000.0),
        )
    # a sixth, served, then closed by the broker (EOF after its response) at 3 s
    sixth = _on("replication", _conn("127.0.0.30", 9100, 100.0, ready_ms=102.0))
    sixth = [r for r in sixth if r["event"] != "closed"]
    sixth.append(
        {
            **sixth[0],
            "event": "closed",
            "mono_ns": T0 + 3000 * MS,
            "reason": "eof",
            "detail": {"outcome": "served"},
        }
    )
    res = _protected_run(spark, tmp_path, "prot-closed", rows + sixth)
    assert res.verdict == "fail", res.observed
    assert [w["client_port"] for w in res.witnesses] == [9100]


@pytest.mark.parametrize("listener, verdict", [("client", "pass"), ("replication", "fail")])
def test_an_early_eof_is_an_eviction_only_off_the_protected_listener(
    spark: Any, tmp_path: Path, listener: str, verdict: str
) -> None:
    rows = _on(listener, _conn("127.0.0.31", 9200, 1000.0, eof_ms=1001.0))
    rows += _on("client", _conn("127.0.0.2", 9201, 0.0, ready_ms=2.0, closed_ms=5000.0))
    res = _protected_run(spark, tmp_path, f"prot-eof-{listener}", rows)
    assert res.verdict == verdict, res.observed


@pytest.mark.parametrize(
    "holders, listener_max, verdict",
    # an explicit 2147483647 is the listener's own maximum (the runner leaves unset keys out)
    [(4, None, "pass"), (5, None, "fail"), (5, 2147483647, "pass"), (5, 10, "pass")],
)
def test_the_protected_listener_is_capped_by_max_connections_unless_its_own_max(
    spark: Any, tmp_path: Path, holders: int, listener_max: int | None, verdict: str
) -> None:
    """Kafka 4.3.1: a listener without listener.name.<l>.max.connections takes the broker's
    max.connections as its own cap (valuesWithPrefixOverride), protected or not."""
    rows: list[dict[str, Any]] = []
    for i in range(holders):
        rows += _on(
            "replication",
            _conn("127.0.0.30", 9300 + i, i * 5.0, ready_ms=i * 5.0 + 2, closed_ms=20_000.0),
        )
    limits: dict[str, Any] = {
        "listeners": TWO,
        "inter.broker.listener.name": "REPLICATION",
        "max.connections": 4,
    }
    if listener_max is not None:
        limits["listener.name.replication.max.connections"] = listener_max
    run_dir = _run(tmp_path, f"prot-cap-{holders}-{listener_max}", limits, rows)
    res = _results(spark, run_dir, ["client_connection_count"])["client_connection_count"]
    assert res.verdict == verdict, res.observed
    if verdict == "fail":
        assert "listener replication" in res.witnesses[0]["why"]
    elif listener_max is None:
        assert res.exercised and res.peak == 4 and res.limit == 4


@pytest.mark.parametrize("target", ["broker", "acceptor"])
def test_kafka_count_of_the_protected_listener_uses_kafkas_cap(
    spark: Any, tmp_path: Path, target: str
) -> None:
    """Kafka's own connection-count of REPLICATION at 5 with max.connections 4: over the
    listener's inherited cap on either target (the acceptor follows Kafka's rule too)."""
    ssm = "kafka_server_socket_server_metrics_"
    samples = [
        [ssm + "connection_count", {"listener": "CLIENT", "network_processor": "0"}, 0.0],
        [ssm + "connection_count", {"listener": "REPLICATION", "network_processor": "0"}, 5.0],
    ]
    scrape = {
        "source": "harness",
        "event": "kafka_metrics",
        "mono_ns": T0 + 1000 * MS,
        "detail": {"url": "http://x/metrics", "target": target, "samples": samples},
    }
    cfg = {"listeners": TWO, "inter.broker.listener.name": "REPLICATION", "max.connections": 4}
    head = [{"source": "harness", "event": "config", "mono_ns": T0 - 1, "detail": cfg}]
    rows = [*head, scrape, *_conn("127.0.0.2", 8000, 0.0, ready_ms=3.0)]
    meta = {"run_id": f"kc-{target}", "target": target, "limits": cfg, "expect": {"slack_ms": 50}}
    run_dir = write_rows(tmp_path / f"kc-{target}", rows, meta)
    r = _results(spark, run_dir, ["kafka_metric_connection_count"])["kafka_metric_connection_count"]
    assert r.verdict == "fail", r.observed


# --- max.connections is reached by every listener together --------------------------------
# Kafka's slot check is totalCount < max.connections over every listener, the protected one
# included, so its own connections there (a ZooKeeper-mode controller's channel to itself)
# keep the client listener one short of the cap: the limit is reached when the listeners
# together reach it, and only the non-protected ones are held to it.


@pytest.mark.parametrize("replication_at_ms, reached", [(500.0, True), (5000.0, False)])
def test_max_connections_is_reached_by_the_listeners_together(
    spark: Any, tmp_path: Path, replication_at_ms: float, reached: bool
) -> None:
    rows: list[dict[str, Any]] = []
    for i in range(3):  # CLIENT holds 3 of max.connections 4 over [2, 3000] ms
        rows += _conn(f"127.0.0.{2 + i}", 9500 + i, i * 1.0, ready_ms=i + 2.0, closed_ms=3000.0)
    rows += _on(
        "replication",
        _conn(
            "127.0.0.30",
            9600,
            replication_at_ms,
            ready_ms=replication_at_ms + 2,
            closed_ms=replication_at_ms + 500,
        ),
    )
    limits = {"listeners": TWO, "inter.broker.listener.name": "REPLICATION", "max.connections": 4}
    run_dir = _run(tmp_path, f"together-{replication_at_ms:g}", limits, rows)
    res = _results(spark, run_dir, ["client_connection_count"])["client_connection_count"]
    assert res.verdict == "pass", res.observed
    assert bool(res.exercised) is reached, res.observed
    assert res.peak == 3 and res.limit == 4


@pytest.mark.parametrize("replication, reached", [(1.0, True), (0.0, False)])
def test_kafkas_count_reaches_max_connections_over_every_listener(
    spark: Any, tmp_path: Path, replication: float, reached: bool
) -> None:
    ssm = "kafka_server_socket_server_metrics_"
    samples = [
        [ssm + "connection_count", {"listener": "CLIENT", "network_processor": "0"}, 3.0],
        [
            ssm + "connection_count",
            {"listener": "REPLICATION", "network_processor": "0"},
            replication,
        ],
        [ssm + "connection_count", {"listener": "CONTROLLER", "network_processor": "0"}, 2.0],
    ]
    scrape = {
        "source": "harness",
        "event": "kafka_metrics",
        "mono_ns": T0 + 1000 * MS,
        "detail": {"url": "http://x/metrics", "target": "broker", "samples": samples},
    }
    cfg = {"listeners": TWO, "inter.broker.listener.name": "REPLICATION", "max.connections": 4}
    head = [{"source": "harness", "event": "config", "mono_ns": T0 - 1, "detail": cfg}]
    rows = [*head, scrape, *_conn("127.0.0.2", 8000, 0.0, ready_ms=3.0)]
    meta = {"run_id": f"kt-{replication}", "target": "broker", "limits": cfg}
    run_dir = write_rows(tmp_path / f"kt-{replication:g}", rows, meta)
    r = _results(spark, run_dir, ["kafka_metric_connection_count"])["kafka_metric_connection_count"]
    assert r.verdict == "pass", r.observed
    assert bool(r.exercised) is reached, r.observed  # the controller listener never counts
