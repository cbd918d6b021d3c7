"""`client_failed_login_delay` on hand-built histories at the bound's edges: a refused SASL
login must be answered no sooner than d − 1 ms after its failing request (Kafka's
millisecond deadline) and no later than d + one processor poll (300 ms) + the run's slowest
successful login; nothing refused is n/a (unknown when the scenario expects the check)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from analysis.checks.auth import check_failed_login_delay
from analysis.load import load_run
from analysis.synth import write_rows

MS = 1_000_000
S = 1000 * MS
T0 = 9_000 * S
DELAY = 500
SLOWEST_OK = 12.5


def _run(
    tmp: Path,
    name: str,
    answers: list[float],
    *,
    ok: bool = True,
    expect: list[str] = (),
    conn_id: str | None = None,
    extra: list[dict[str, Any]] = (),
) -> Path:
    rows: list[dict[str, Any]] = [
        {"source": "harness", "event": "config", "mono_ns": T0,
         "detail": {"connection.failed.authentication.delay.ms": DELAY}},
    ]  # fmt: skip
    if ok:
        rows.append(
            {"source": "client", "event": "sasl_done", "mono_ns": T0 + S, "ip": "127.0.0.2",
             "port": 40000, "latency_ms": 20.0, "api_key": 36,
             "detail": {"mechanism": "PLAIN", "sasl_ms": SLOWEST_OK, "rounds": 1}}
        )  # fmt: skip
    for i, ms in enumerate(answers):
        rows.append(
            {"source": "client", "event": "sasl_fail", "mono_ns": T0 + 2 * S + i * S,
             "ip": "127.0.0.3", "port": 41000 + i, "latency_ms": ms + 5, "reason": "auth",
             "api_key": 36, "detail": {"error_code": 58, "round": 1, "mechanism": "PLAIN",
                                       "answer_ms": ms, "sasl_ms": ms},
             **({"conn_id": f"{conn_id}{i}"} if conn_id else {})}
        )  # fmt: skip
    rows += extra
    meta = {"run_id": name, "target": "broker", "expect": {"checks": list(expect)}}
    return write_rows(tmp / name, rows, meta)


@pytest.mark.parametrize(
    "answer, verdict",
    [
        (DELAY - 1.0, "pass"),  # Kafka's deadline is whole milliseconds
        (DELAY - 1.01, "fail"),  # not delayed: answered before d - 1 ms
        (DELAY + 300 + SLOWEST_OK, "pass"),  # one idle processor poll late, plus the path
        (DELAY + 300 + SLOWEST_OK + 0.01, "fail"),  # later than that: the delay was longer
    ],
    ids=["at-d-1", "below-d-1", "at-upper", "above-upper"],
)
def test_the_delay_is_judged_at_both_edges(
    spark: Any, tmp_path: Path, answer: float, verdict: str
) -> None:
    run = load_run(spark, _run(tmp_path, f"r-{answer}", [DELAY + 10, answer]))
    r = check_failed_login_delay(run)
    assert r.verdict == verdict, (r.observed, r.expected, r.witnesses)
    assert r.judged == 2 and r.exercised
    if verdict == "fail":
        assert [w["client_port"] for w in r.witnesses] == [41001], r.witnesses


def test_without_a_successful_login_the_upper_bound_is_an_unjudged_part(
    spark: Any, tmp_path: Path
) -> None:
    run = load_run(spark, _run(tmp_path, "no-ok", [DELAY + 5000], ok=False))
    r = check_failed_login_delay(run)
    assert r.verdict == "pass" and [p.name for p in r.unjudged_parts()] == [
        "within one processor poll after it"
    ]


@pytest.mark.parametrize(
    "expect, verdict", [([], "n/a"), (["client_failed_login_delay"], "unknown")]
)
def test_nothing_refused_is_never_a_pass(
    spark: Any, tmp_path: Path, expect: list[str], verdict: str
) -> None:
    run = load_run(spark, _run(tmp_path, f"none-{verdict}", [], expect=expect))
    assert check_failed_login_delay(run).verdict == verdict


# -- kafka_metric_auth_counts: Kafka's counters between two scrapes ---------------------------
SSM = "kafka_server_socket_server_metrics_"


def _scrape(ns: int, ok: float, failed: float) -> dict[str, Any]:
    labels = {"listener": "CLIENT", "network_processor": "0"}
    samples = [
        [SSM + "successful_authentication", labels, ok],
        [SSM + "failed_authentication", labels, failed],
    ]
    return {"source": "harness", "event": "kafka_metrics", "mono_ns": ns, "latency_ms": 2.0,
            "reason": "ok", "detail": {"samples": samples, "scrape_ms": 2.0}}  # fmt: skip


def _conn(port: int, at: int, *, ok: bool) -> list[dict[str, Any]]:
    c = {"source": "client", "ip": "127.0.0.2", "port": port, "conn_id": f"c{port}",
         "listener": "CLIENT"}  # fmt: skip
    rows = [
        {**c, "event": "connect_invoke", "mono_ns": at, "detail": {"profile": "storm"}},
        {**c, "event": "tls_start", "mono_ns": at + MS, "latency_ms": 1.0},
        {**c, "event": "tls_done", "mono_ns": at + 5 * MS, "latency_ms": 5.0},
    ]
    if ok:
        rows += [
            {**c, "event": "sasl_done", "mono_ns": at + 9 * MS, "latency_ms": 9.0, "api_key": 36,
             "detail": {"mechanism": "PLAIN", "sasl_ms": 4.0, "rounds": 1}},
            {**c, "event": "ready", "mono_ns": at + 10 * MS, "latency_ms": 10.0, "api_key": 18},
            {**c, "event": "closed", "mono_ns": at + 12 * MS, "latency_ms": 12.0, "reason": "done",
             "detail": {"outcome": "served"}},
        ]  # fmt: skip
    else:
        rows += [
            {**c, "event": "sasl_fail", "mono_ns": at + 506 * MS, "latency_ms": 506.0,
             "reason": "auth", "api_key": 36,
             "detail": {"error_code": 58, "round": 1, "answer_ms": 501.0}},
            {**c, "event": "closed", "mono_ns": at + 507 * MS, "latency_ms": 507.0,
             "reason": "auth", "detail": {"outcome": "auth_failed"}},
        ]  # fmt: skip
    return rows


@pytest.mark.parametrize(
    "ok_delta, failed_delta, verdict",
    [
        (2, 1, "pass"),  # the two logins and the refusal inside, nothing more possible
        (3, 1, "pass"),  # the connection across the last scrape may have been counted
        (1, 1, "fail"),  # a login the clients surely completed is missing
        (2, 0, "fail"),  # a refusal the clients surely saw is missing
        (5, 1, "fail"),  # more logins than the 4 connections that could have reached one
    ],
)
def test_kafkas_authentication_counters_between_two_scrapes(
    spark: Any, tmp_path: Path, ok_delta: int, failed_delta: int, verdict: str
) -> None:
    rows: list[dict[str, Any]] = [
        {"source": "harness", "event": "config", "mono_ns": T0, "detail": {}},
        _scrape(T0 + S, 10, 5),
        *_conn(41000, T0 + 2 * S, ok=True),
        *_conn(41001, T0 + 3 * S, ok=True),
        *_conn(41002, T0 + 4 * S, ok=False),
        # started before the last scrape, logged in after it: possibly counted
        *_conn(41003, T0 + 6 * S - 2 * MS, ok=True),
        _scrape(T0 + 6 * S, 10 + ok_delta, 5 + failed_delta),
    ]
    meta = {"run_id": "auth", "target": "broker",
            "listener_security": {"CLIENT": {"protocol": "SASL_SSL"}}}  # fmt: skip
    run = load_run(spark, write_rows(tmp_path / "auth", rows, meta))
    from analysis.checks.auth import check_auth_counts

    r = check_auth_counts(run)
    assert r.verdict == verdict, (r.observed, r.witnesses)
    assert r.judged == 1


def test_behind_the_acceptor_the_counters_are_those_of_the_kafka_behind_it(
    spark: Any, tmp_path: Path
) -> None:
    """On the acceptor target the check reads the scrapes of the Kafka behind the acceptor
    (target `upstream`), never the acceptor's own /metrics; without them it is unknown."""
    from analysis.checks.auth import check_auth_counts

    def scrape(ns: int, ok: float, failed: float, target: str) -> dict[str, Any]:
        row = _scrape(ns, ok, failed)
        row["detail"] = {**row["detail"], "target": target}
        return row

    conns = [*_conn(41000, T0 + 2 * S, ok=True), *_conn(41002, T0 + 4 * S, ok=False)]
    meta = {"run_id": "auth-acc", "target": "acceptor",
            "listener_security": {"CLIENT": {"protocol": "SASL_SSL"}}}  # fmt: skip
    front = [scrape(T0 + S, 0, 0, "acceptor"), scrape(T0 + 6 * S, 0, 0, "acceptor")]
    for behind, verdict in (
        ([scrape(T0 + S, 10, 5, "upstream"), scrape(T0 + 6 * S, 11, 6, "upstream")], "pass"),
        ([scrape(T0 + S, 10, 5, "upstream"), scrape(T0 + 6 * S, 10, 6, "upstream")], "fail"),
        ([], "unknown"),
    ):
        rows = [{"source": "harness", "event": "config", "mono_ns": T0, "detail": {}}]
        rows += [*front, *behind, *conns]
        run = load_run(spark, write_rows(tmp_path / f"auth-acc-{verdict}", rows, meta))
        r = check_auth_counts(run)
        assert r.verdict == verdict, (r.observed, r.witnesses)


def _library_conn(port: int, at: int) -> list[dict[str, Any]]:
    """A kafka-python connection as the steady recorder writes it: the library logs in
    inside itself, so no login row, only connect, first response, close."""
    c = {"source": "client", "ip": "127.0.0.2", "port": port, "conn_id": f"k{port}",
         "listener": "CLIENT"}  # fmt: skip
    return [
        {**c, "event": "connect_invoke", "mono_ns": at, "detail": {"profile": "steady"}},
        {**c, "event": "connect_ok", "mono_ns": at + MS, "latency_ms": 1.0},
        {**c, "event": "ready", "mono_ns": at + 10 * MS, "latency_ms": 10.0, "api_key": 18},
        {**c, "event": "closed", "mono_ns": at + 12 * MS, "latency_ms": 12.0, "reason": "done",
         "detail": {"outcome": "served"}},
    ]  # fmt: skip


@pytest.mark.parametrize(
    "ok_delta, verdict",
    [
        (1, "pass"),  # the one recorded login; the library's two may not have been counted
        (3, "pass"),  # every connection logged in, the library's without a row of its own
        (4, "fail"),  # more logins than the 3 connections on the listener
        (0, "fail"),  # the recorded login is missing
    ],
)
def test_connections_that_log_in_inside_a_library_bound_the_count_from_above(
    spark: Any, tmp_path: Path, ok_delta: int, verdict: str
) -> None:
    rows: list[dict[str, Any]] = [
        {"source": "harness", "event": "config", "mono_ns": T0, "detail": {}},
        _scrape(T0 + S, 10, 5),
        *_conn(41000, T0 + 2 * S, ok=True),
        *_library_conn(42000, T0 + 3 * S),
        *_library_conn(42001, T0 + 4 * S),
        _scrape(T0 + 6 * S, 10 + ok_delta, 5),
    ]
    meta = {"run_id": f"lib-{ok_delta}", "target": "broker",
            "listener_security": {"CLIENT": {"protocol": "SASL_PLAINTEXT"}}}  # fmt: skip
    run = load_run(spark, write_rows(tmp_path / f"lib-{ok_delta}", rows, meta))
    from analysis.checks.auth import check_auth_counts

    r = check_auth_counts(run)
    assert r.verdict == verdict, (r.observed, r.witnesses)


# -- client_ip_concurrency: a refused login holds its slot through the delay ------------------
@pytest.mark.parametrize(
    "gap_ms, verdict",
    [
        (DELAY - 1.0, "pass"),  # the first slot surely held until its send + d − 1 ms: free
        (DELAY - 2.0, "fail"),  # a second connection admitted while the first waited
    ],
    ids=["after-the-hold", "inside-the-hold"],
)
def test_a_refused_login_holds_its_per_ip_slot_through_the_delay(
    spark: Any, tmp_path: Path, gap_ms: float, verdict: str
) -> None:
    """One slot for 127.0.0.2 (an override): two wrong-password connections from it whose
    failing requests go out ``gap_ms`` apart; Kafka holds the first one's slot from that
    send until the send + d − 1 ms, so admitting the second inside it is over the limit."""
    from analysis.checks.clients import check_client_ip_concurrency

    rows: list[dict[str, Any]] = [
        {"source": "harness", "event": "config", "mono_ns": T0,
         "detail": {"connection.failed.authentication.delay.ms": DELAY,
                    "max.connections.per.ip.overrides": "127.0.0.2:1"}},
        *_conn(42000, T0 + S, ok=False),
        *_conn(42001, T0 + S + int(gap_ms * MS), ok=False),
    ]  # fmt: skip
    meta = {"run_id": "held", "target": "broker",
            "listener_security": {"CLIENT": {"protocol": "SASL_SSL"}}}  # fmt: skip
    run = load_run(spark, write_rows(tmp_path / "held", rows, meta))
    r = check_client_ip_concurrency(run)
    assert r.verdict == verdict, (r.observed, r.witnesses)
    assert r.judged == 2


@pytest.mark.parametrize(
    "security, tls_client, verdict",
    [
        (None, False, "n/a"),  # plaintext: Kafka records no authentication
        (None, True, "pass"),  # a client began TLS: judged though run.json names no listener
        ("SASL_PLAINTEXT", False, "pass"),  # a secured listener's library connections
    ],
)
def test_only_a_run_without_any_secured_connection_is_not_applicable(
    spark: Any, tmp_path: Path, security: str | None, tls_client: bool, verdict: str
) -> None:
    rows: list[dict[str, Any]] = [
        {"source": "harness", "event": "config", "mono_ns": T0, "detail": {}},
        _scrape(T0 + S, 10, 5),
        *(_conn(41000, T0 + 2 * S, ok=True) if tls_client else []),
        *_library_conn(42000, T0 + 3 * S),
        _scrape(T0 + 6 * S, 11, 5),
    ]
    meta: dict[str, Any] = {"run_id": f"plain-{security}-{tls_client}", "target": "broker"}
    if security is not None:
        meta["listener_security"] = {"CLIENT": {"protocol": security}}
    run = load_run(spark, write_rows(tmp_path / meta["run_id"], rows, meta))
    from analysis.checks.auth import check_auth_counts

    r = check_auth_counts(run)
    assert r.verdict == verdict, (r.observed, r.witnesses)


@pytest.mark.parametrize(
    "span_ms, answer, verdict, timed",
    [
        ((-20.0, 1.0), DELAY + 400.0, "pass", 0),  # answer seen 1 ms inside the stall
        ((-20.0, -1.0), DELAY + 400.0, "fail", 1),  # 1 ms after it ended: late is late
        ((-20.0, 1.0), DELAY - 2.0, "fail", 1),  # a stall never excuses an early answer
    ],
    ids=["late-inside", "late-outside", "early-inside"],
)
def test_a_late_answer_seen_inside_its_engines_stall_is_not_timed(
    spark: Any,
    tmp_path: Path,
    span_ms: tuple[float, float],
    answer: float,
    verdict: str,
    timed: int,
) -> None:
    """The "not timed" rule on the upper bound: a refusal whose answer the client saw inside
    a stall its own engine measured (its heartbeat) is not timed against d + poll + path;
    1 ms outside the stall it fails; the lower bound is judged whatever the stall."""
    seen = T0 + 2 * S
    lo, hi = (seen + int(x * MS) for x in span_ms)
    beats = [
        {"source": "client", "event": "loop_lag", "mono_ns": T0, "reason": "start",
         "listener": "CLIENT", "detail": {"engine": "c9-", "period_ms": 5.0,
                                          "threshold_ms": 10.0}},
        {"source": "client", "event": "loop_lag", "mono_ns": hi - 15 * MS, "reason": "stall",
         "listener": "CLIENT", "latency_ms": 30.0,
         "detail": {"engine": "c9-", "from_mono_ns": lo, "until_mono_ns": hi}},
    ]  # fmt: skip
    rows_path = _run(tmp_path, f"hb-{span_ms}-{answer}", [answer], conn_id="c9-", extra=beats)
    r = check_failed_login_delay(load_run(spark, rows_path))
    assert r.verdict == verdict, (r.observed, r.witnesses)
    upper = next(p for p in r.parts if p.name == "within one processor poll after it")
    assert upper.judged == timed, upper
