"""Nothing to judge is found before any Spark job: `principal_agreement` on a plaintext run
whose acceptor charges ANONYMOUS while no client names itself, `quota_precedes_tls` on a
secured run where no client started TLS, and the broker target's span checks where their
rate is configured at no time. Each gives the result it gave after its jobs (the same
verdict and words) and starts none; the same checks with something to judge do start jobs,
so the count below can see one. Every run here is read as a large one is, a Parquet scan
(a small run's in-memory table answers some queries in the driver, no job but still the
planning's cost)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from analysis.checks import ALL_CHECKS, CheckResult, run_check
from analysis.checks.secured import check_principal_agreement, check_quota_precedes_tls
from analysis.load import load_run
from analysis.synth import write_rows
from base.history import HistoryWriter
from tests.handbuilt import record
from tests.spark.histories import hand_built_run

S = 1_000_000_000
MS = 1_000_000
T0 = 5_000 * S


@pytest.fixture(autouse=True)
def _scanned(monkeypatch: pytest.MonkeyPatch) -> None:
    import analysis.load as load

    monkeypatch.setattr(load, "IN_MEMORY_EVENTS", 0)


def jobs_during(spark: Any, fn: Callable[[], CheckResult]) -> tuple[CheckResult, int]:
    """``fn()`` and the Spark jobs submitted while it ran (the scheduler's job counter,
    which every submitted job takes its id from; the tests call checks one at a time)."""
    scheduler = spark.sparkContext._jsc.sc().dagScheduler()
    before = int(scheduler.nextJobId())  # py4j hands the AtomicInteger over as its value
    result = fn()
    return result, int(scheduler.nextJobId()) - before


def _plaintext(principal: str | None, tls: bool = False) -> Any:
    """Two served connections; the acceptor charges each one request to ANONYMOUS; the
    client names ``principal`` (a steady client on plaintext names ANONYMOUS), or nobody."""

    def build(cw: HistoryWriter, aw: HistoryWriter, _hw: HistoryWriter) -> None:
        for n, port in ((1, 40001), (2, 40002)):
            at = T0 + n * S
            addr = {"client_ip": "127.0.0.7", "client_port": port, "listener": "CLIENT"}
            record(cw, "connect_invoke", mono_ns=at, detail={"profile": "steady"}, **addr)
            record(cw, "connect_ok", mono_ns=at + MS, latency_ms=1.0, **addr)
            if tls:
                record(cw, "tls_start", mono_ns=at + MS, latency_ms=1.0, **addr)
                record(cw, "tls_done", mono_ns=at + 2 * MS, latency_ms=1.0, **addr)
            record(cw, "ready", mono_ns=at + 3 * MS, latency_ms=3.0, **addr)
            named = {"principal": principal} if principal is not None else {}
            record(cw, "request_ok", mono_ns=at + 20 * MS, latency_ms=1.0, api_key=3,
                      detail=named or None, **addr)  # fmt: skip
            record(cw, "closed", mono_ns=at + S, reason="done",
                      detail={"outcome": "served", **named}, **addr)  # fmt: skip
            conn = {"conn_id": f"CLIENT-{n}", **addr}
            record(aw, "accept", mono_ns=at + MS // 2, **conn)
            record(aw, "admit", mono_ns=at + MS // 2, delay_ms=0.0, **conn)
            record(aw, "request", mono_ns=at + 20 * MS, principal="ANONYMOUS", api_key=3,
                      client_id="c", latency_ms=1.0, bytes=10, processor=0, **conn)  # fmt: skip
            record(aw, "close", mono_ns=at + S, reason="client_eof", **conn)

    return build


@pytest.mark.parametrize("expected, verdict", [([], "n/a"), (["principal_agreement"], "unknown")])
def test_no_client_naming_itself_is_decided_before_any_job(
    spark: Any, tmp_path: Path, expected: list[str], verdict: str
) -> None:
    meta = {"expect": {"checks": expected}}
    run_dir = hand_built_run(tmp_path, "plain", _plaintext(None), config_ns=T0 - S, meta=meta)
    r, jobs = jobs_during(spark, lambda: check_principal_agreement(load_run(spark, run_dir)))
    assert (r.verdict, r.judged, jobs) == (verdict, 0, 0), r.observed
    assert r.observed.startswith("0 acceptor-charged connections whose client named")


def test_a_client_naming_itself_is_judged(spark: Any, tmp_path: Path) -> None:
    run_dir = hand_built_run(tmp_path, "anon", _plaintext("ANONYMOUS"), config_ns=T0 - S)
    r, jobs = jobs_during(spark, lambda: check_principal_agreement(load_run(spark, run_dir)))
    assert (r.verdict, r.judged) == ("pass", 2), r.observed
    assert jobs > 0


@pytest.mark.parametrize("tls", [False, True])
def test_no_client_starting_tls_is_decided_before_any_job(
    spark: Any, tmp_path: Path, tls: bool
) -> None:
    """A SASL_PLAINTEXT listener: no TLS byte anywhere, nothing for the rule to judge."""
    meta = {"listener_security": {"CLIENT": {"protocol": "SASL_PLAINTEXT" if not tls else "SSL"}}}
    build = _plaintext(None, tls=tls)
    run_dir = hand_built_run(tmp_path, f"tls-{tls}", build, config_ns=T0 - S, meta=meta)
    r, jobs = jobs_during(spark, lambda: check_quota_precedes_tls(load_run(spark, run_dir)))
    # with TLS: two handshakes, neither closed by a quota; still nothing to judge, but
    # only the join can tell
    assert (r.verdict, r.judged) == ("n/a", 0), r.observed
    assert r.observed.startswith("0 quota-closed connections that started TLS")
    assert (jobs > 0) is tls


def _broker_run(tmp: Path, name: str, limits: dict[str, Any]) -> Path:
    cfg = {"listeners": "CLIENT://127.0.0.1:9092", **limits}
    rows: list[dict[str, Any]] = [
        {"source": "harness", "event": "config", "mono_ns": T0 - 1, "detail": cfg}
    ]
    for i in range(3):
        base = {"source": "client", "listener": "client", "ip": "127.0.0.9", "port": 3000 + i}
        t = T0 + i * 100 * MS
        rows += [
            {**base, "event": "connect_invoke", "mono_ns": t, "detail": {"profile": "storm"}},
            {**base, "event": "connect_ok", "mono_ns": t + MS, "latency_ms": 1.0},
            {**base, "event": "ready", "mono_ns": t + 5 * MS, "latency_ms": 5.0},
            {**base, "event": "closed", "mono_ns": t + 50 * MS, "reason": "done"},
        ]
    meta = {"run_id": name, "target": "broker", "limits": cfg, "expect": {"slack_ms": 50}}
    return write_rows(tmp / name, rows, meta)


SPANS = {
    "client_broker_rate_span": (
        "max.connection.creation.rate",
        {"max.connection.creation.rate": 5},
    ),
    "client_listener_rate_span": (
        "listener.name.<l>.max.connection.creation.rate",
        {"listener.name.client.max.connection.creation.rate": 5},
    ),
    "client_ip_rate_span": ("connection_creation_rate (ip)", {"ip_quotas": {"127.0.0.9": 5}}),
}


@pytest.mark.parametrize("name", sorted(SPANS))
def test_a_span_check_without_its_rate_starts_no_job(spark: Any, tmp_path: Path, name: str) -> None:
    what, limit = SPANS[name]
    check = next(c for c in ALL_CHECKS if c.name == name)
    unset = _broker_run(tmp_path, "unset", {})
    r, jobs = jobs_during(spark, lambda: run_check(check, load_run(spark, unset)))
    assert (r.verdict, jobs) == ("n/a", 0), r.observed
    assert r.observed == f"not configured: {what} (unset / Int.MaxValue for the whole run)"
    judged = _broker_run(tmp_path, "set", limit)
    r, jobs = jobs_during(spark, lambda: run_check(check, load_run(spark, judged)))
    assert r.verdict != "n/a" and jobs > 0, r.observed


def test_no_reject_and_no_per_ip_limit_plans_no_dataframe(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ip_count_reject_closes_at_once` finds no reject in the census (a shared frame, a
    list built before the checks) and no per-IP limit: `n/a` without planning a DataFrame
    (each `where` is analysed by the JVM as it is built, 0.1 s on a cold one)."""
    import analysis.checks.processors as processors
    from analysis.frames import census

    run = load_run(spark, hand_built_run(tmp_path, "plain", _plaintext(None), config_ns=T0 - S))
    census(run)  # built before the checks, as `_judge` does

    def planned(*_args: Any) -> Any:
        raise AssertionError("a DataFrame planned on the way to n/a")

    monkeypatch.setattr(processors, "acceptor_conns", planned)
    monkeypatch.setattr(processors, "attempt_join", planned)
    r, jobs = jobs_during(spark, lambda: processors.check_reject_closes_at_once(run))
    assert (r.verdict, jobs) == ("n/a", 0), r.observed
    assert r.observed.startswith("not configured: max.connections.per.ip (or overrides)")
