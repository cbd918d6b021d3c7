"""A cluster's per-broker rules on hand-built histories: each broker is judged on its own
attempts (its own meters, counts and per-IP quotas), never on the cluster's sum.

One address sends to three brokers with a per-IP quota of 1/s (bound q·(n+1)·w = 12
connections in a span, n = 11, w = 1 s): 11 on each broker (92 % of each one's bound, 33
in all) must pass; 13 on broker 2 must fail naming broker 2; an attempt that names no
broker makes the rule `unknown`, never merged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from analysis.checks import ALL_CHECKS, CheckResult
from analysis.load import load_run
from analysis.synth import write_rows
from analysis.verdict import run_checks

T0 = 7_000_000_000_000
MS = 1_000_000
IP = "127.0.0.9"


def _served(port: int, invoke_ms: float, broker: int | None) -> list[dict[str, Any]]:
    base = {"source": "client", "listener": "client", "ip": IP, "port": port}
    t = T0 + int(invoke_ms * MS)
    detail: dict[str, Any] = {"profile": "storm"}
    if broker is not None:
        detail["broker"] = broker
    return [
        {**base, "event": "connect_invoke", "mono_ns": t, "detail": detail},
        {**base, "event": "connect_ok", "mono_ns": t + MS // 2, "latency_ms": 0.5},
        {**base, "event": "ready", "mono_ns": t + 5 * MS, "latency_ms": 5.0},
        {**base, "event": "closed", "mono_ns": t + 6 * MS, "reason": "done",
         "detail": {"outcome": "served"}},
    ]  # fmt: skip


def _judge(
    spark: Any, tmp: Path, name: str, per_broker: dict[int | None, int], check: str
) -> CheckResult:
    rows: list[dict[str, Any]] = []
    port = 3000
    for broker, count in per_broker.items():
        for i in range(count):  # all inside one 10.998 s span
            rows += _served(port, i * 800.0 + (broker or 0) * 7.0, broker)
            port += 1
    cfg = {"listeners": "CLIENT://127.0.0.1:9092", "ip_quotas": {IP: 1},
           "max.connections.per.ip": 2}  # fmt: skip
    head = [{"source": "harness", "event": "config", "mono_ns": T0 - 1, "detail": cfg}]
    brokers = {str(n): {"CLIENT": f"127.0.0.1:{9091 + n}"} for n in (1, 2, 3)}
    meta = {"run_id": name, "target": "broker", "limits": cfg, "brokers": brokers,
            "expect": {"slack_ms": 50}}  # fmt: skip
    run = load_run(spark, write_rows(tmp / name, head + rows, meta))
    (result,) = run_checks(run, [c for c in ALL_CHECKS if c.name == check])
    return result


def test_each_broker_under_its_own_bound_passes_though_the_sum_is_over(
    spark: Any, tmp_path: Path
) -> None:
    r = _judge(spark, tmp_path, "each-92", {1: 11, 2: 11, 3: 11}, "client_ip_rate_span")
    assert r.verdict == "pass", (r.observed, r.witnesses)
    assert r.observed.count("broker ") >= 3 and "11 served" in r.observed
    assert set(r.data["per_broker"]) == {"1", "2", "3"}


def test_one_broker_over_its_bound_fails_naming_it(spark: Any, tmp_path: Path) -> None:
    r = _judge(spark, tmp_path, "two-over", {1: 11, 2: 13, 3: 11}, "client_ip_rate_span")
    assert r.verdict == "fail", r.observed
    assert r.witnesses and {w["broker"] for w in r.witnesses} == {2}, r.witnesses


def test_an_attempt_that_names_no_broker_is_never_merged(spark: Any, tmp_path: Path) -> None:
    r = _judge(spark, tmp_path, "unnamed", {1: 11, 2: 11, None: 1}, "client_ip_rate_span")
    assert r.verdict == "unknown" and "name no broker" in r.observed, r.observed
    assert r.observed.endswith("never reached by the load: broker 3"), r.observed


@pytest.mark.parametrize(("counts", "verdict"), [({1: 2, 2: 2}, "pass"), ({1: 2, 2: 3}, "fail")])
def test_per_ip_concurrency_is_each_brokers_own(
    spark: Any, tmp_path: Path, counts: dict[int | None, int], verdict: str
) -> None:
    """max.connections.per.ip 2: two served at once on each broker (four in all) pass;
    three on one broker fail. The connections overlap: each lasts from its ready to its
    close, and here all of one broker's are open together."""
    rows_name = f"conc-{counts[2]}"
    r = _judge_overlapping(spark, tmp_path, rows_name, counts)
    assert r.verdict == verdict, (r.observed, r.witnesses)
    if verdict == "fail":
        assert "on broker 2" in r.witnesses[0]["why"]


def _judge_overlapping(
    spark: Any, tmp: Path, name: str, per_broker: dict[int | None, int]
) -> CheckResult:
    rows: list[dict[str, Any]] = []
    port = 4000
    for broker, count in per_broker.items():
        for i in range(count):
            one = _served(port, i * 1.0, broker)
            one[-1]["mono_ns"] = T0 + 5_000 * MS  # all closed at +5 s: open together
            rows += one
            port += 1
    cfg = {"listeners": "CLIENT://127.0.0.1:9092", "max.connections.per.ip": 2}
    head = [{"source": "harness", "event": "config", "mono_ns": T0 - 1, "detail": cfg}]
    brokers = {str(n): {"CLIENT": f"127.0.0.1:{9091 + n}"} for n in (1, 2, 3)}
    meta = {"run_id": name, "target": "broker", "limits": cfg, "brokers": brokers,
            "expect": {"slack_ms": 50}}  # fmt: skip
    run = load_run(spark, write_rows(tmp / name, head + rows, meta))
    (result,) = run_checks(run, [c for c in ALL_CHECKS if c.name == "client_ip_concurrency"])
    return result


def test_the_report_shows_each_brokers_result(spark: Any, tmp_path: Path) -> None:
    from analysis.report import render
    from analysis.verdict import build_verdict

    path = tmp_path / "report"
    r = _judge(spark, tmp_path, "report", {1: 11, 2: 13, 3: 11}, "client_ip_rate_span")
    per = r.to_dict()["per_broker"]
    assert [per[n]["verdict"] for n in ("1", "2", "3")] == ["pass", "fail", "pass"]
    run = load_run(spark, path)
    html = render(build_verdict(run, [r]), [], run, outcomes={})
    table = html[
        html.index("<h2>Per broker</h2>") : html.index(
            "</table>", html.index("<h2>Per broker</h2>")
        )
    ]
    assert all(f"<th>broker {n}</th>" in table for n in (1, 2, 3))
    cells = table.split("<td")[2:]  # after the check's name: brokers 1, 2, 3
    assert ["v fail" in c for c in cells] == [False, True, False], cells


def _scrape(at_ms: float, broker: int, count: float) -> dict[str, Any]:
    ssm = "kafka_server_socket_server_metrics_"
    samples = [[ssm + "connection_count", {"listener": "CLIENT", "network_processor": "0"},
                count]]  # fmt: skip
    return {"source": "harness", "event": "kafka_metrics", "mono_ns": T0 + int(at_ms * MS),
            "detail": {"url": f"http://b{broker}/metrics", "target": "broker", "broker": broker,
                       "samples": samples}}  # fmt: skip


@pytest.mark.parametrize(("second", "verdict"), [(3.0, "pass"), (4.0, "fail")])
def test_kafkas_connection_count_is_each_brokers_own(
    spark: Any, tmp_path: Path, second: float, verdict: str
) -> None:
    """max.connections 3 per broker: Kafka's gauges of 3 on each of two brokers (6 in all)
    pass; 4 on broker 2 fails naming broker 2. Each broker's scrapes are judged against its
    own attempts only."""
    rows = [_scrape(1000.0, 1, 3.0), _scrape(1000.0, 2, second), _scrape(2000.0, 1, 0.0),
            _scrape(2000.0, 2, 0.0)]  # fmt: skip
    rows += _served(5000, 0.0, 1) + _served(5001, 1.0, 2)
    cfg = {"listeners": "CLIENT://127.0.0.1:9092", "max.connections": 3}
    head = [{"source": "harness", "event": "config", "mono_ns": T0 - 1, "detail": cfg}]
    brokers = {str(n): {"CLIENT": f"127.0.0.1:{9091 + n}"} for n in (1, 2)}
    meta = {"run_id": f"kc-{second}", "target": "broker", "limits": cfg, "brokers": brokers,
            "expect": {"slack_ms": 50}}  # fmt: skip
    run = load_run(spark, write_rows(tmp_path / f"kc-{second}", head + rows, meta))
    picked = [c for c in ALL_CHECKS if c.name == "kafka_metric_connection_count"]
    (r,) = run_checks(run, picked)
    assert r.verdict == verdict, (r.observed, r.witnesses)
    if verdict == "fail":
        assert {w["broker"] for w in r.witnesses} == {2}


def test_a_broker_with_nothing_to_judge_adds_nothing_but_is_named(
    spark: Any, tmp_path: Path
) -> None:
    r = _judge(spark, tmp_path, "two-of-three", {1: 11, 2: 11}, "client_ip_rate_span")
    assert r.verdict == "pass", r.observed
    assert r.to_dict()["per_broker"]["3"]["verdict"] in ("unknown", "n/a")  # never "pass"
    assert r.observed.endswith("never reached by the load: broker 3"), r.observed


def test_the_report_charts_each_brokers_accept_rate(spark: Any, tmp_path: Path) -> None:
    """A cluster run's served connections per second on each broker, as the per-broker
    checks attribute them (one line per broker; a one-broker run has no such chart)."""
    from analysis.report import chart_data, charts

    _judge(spark, tmp_path, "chart", {1: 3, 2: 5, 3: 2}, "client_ip_rate_span")
    ctx = chart_data(load_run(spark, tmp_path / "chart"))
    pb = ctx["per_broker"]
    assert pb.groupby("broker")["n"].sum().to_dict() == {1: 3, 2: 5, 3: 2}
    assert "Accept rate per broker" in [c["title"] for c in charts(ctx)]


def test_a_broker_with_its_own_lower_rate_is_judged_by_its_own(spark: Any, tmp_path: Path) -> None:
    """A per-broker config (BROKER resource "2"): the runner writes broker 2's limits in a
    row of their own (`node.id`), and broker 2 alone is judged by them
    (analysis.load.for_node): 40 served in one span is far under the cluster's 10/s bound
    and far over broker 2's own 1/s."""
    rows: list[dict[str, Any]] = []
    port = 5000
    for broker in (1, 2):
        for i in range(40):
            rows += _served(port, i * 250.0 + broker * 7.0, broker)
            rows[-4]["ip"] = rows[-3]["ip"] = rows[-2]["ip"] = rows[-1]["ip"] = f"127.0.0.{10 + i}"
            port += 1
    cfg = {"listeners": "CLIENT://127.0.0.1:9092", "max.connection.creation.rate": 10}
    runner = {**cfg, "origin": "runner", "cause": "start", "applied_from_mono_ns": T0 - 3 * MS}
    own = {**runner, "max.connection.creation.rate": 1, "node.id": 2}
    head = [
        {"source": "harness", "event": "config", "mono_ns": T0 - 2 * MS, "detail": runner},
        {"source": "harness", "event": "config", "mono_ns": T0 - 2 * MS + 1, "detail": own},
    ]
    brokers = {str(n): {"CLIENT": f"127.0.0.1:{9091 + n}"} for n in (1, 2)}
    meta = {"run_id": "own-rate", "target": "broker", "limits": cfg, "brokers": brokers,
            "expect": {"slack_ms": 50}}  # fmt: skip
    run = load_run(spark, write_rows(tmp_path / "own-rate", head + rows, meta))
    (r,) = run_checks(run, [c for c in ALL_CHECKS if c.name == "client_broker_rate_span"])
    assert r.verdict == "fail", r.observed
    assert {w["broker"] for w in r.witnesses} == {2}, r.witnesses
    assert r.data["per_broker"]["1"]["verdict"] == "pass", r.data
