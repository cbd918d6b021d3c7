"""`client_request_quota_buckets` on hand-built histories at the bound's edge.

bob has a user quota of 10 %: with Kafka's default 11 windows of 1 s read over at least 10 s,
his bucket is provably under while the charge bounds of his responses read in the last 11 s
sum to at most 1,000 ms. A throttle there is a witness; one more hundredth of a millisecond
and the bound proves nothing (not judged). A user's client ids share his bucket; a bucket
without a quota is never throttled; an unknown principal is not judged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from analysis.checks.request_buckets import check_request_quota_buckets
from analysis.load import load_run
from analysis.synth import write_rows

MS = 1_000_000
S = 1000 * MS
T0 = 9_000 * S
QUOTAS = [{"user": "bob", "request_percentage": 10}]


def _response(
    conn: str, port: int, at_ns: int, api: int, in_flight_ms: float, *, client: str,
    principal: str | None = "bob", throttle: int = 0,
) -> dict[str, Any]:  # fmt: skip
    detail: dict[str, Any] = {"profile": "steady", "in_flight_ms": in_flight_ms}
    if principal is not None:
        detail["principal"] = principal
    if throttle:
        detail["throttle_time_ms"] = throttle
    return {"source": "client", "event": "request_ok", "mono_ns": at_ns, "conn_id": conn,
            "ip": "127.0.0.1", "port": port, "listener": "CLIENT", "api_key": api,
            "client_id": client, "detail": detail}  # fmt: skip


def _invoke(conn: str, port: int, at_ns: int, client: str) -> dict[str, Any]:
    return {"source": "client", "event": "connect_invoke", "mono_ns": at_ns, "conn_id": conn,
            "ip": "127.0.0.1", "port": port, "listener": "CLIENT", "client_id": client,
            "detail": {"profile": "steady"}}  # fmt: skip


def _history(
    tmp: Path, name: str, last_ms: float, *, throttle: int, quotas: Any = QUOTAS,
    principal: str | None = "bob", expect: tuple[str, ...] = (),
) -> Path:  # fmt: skip
    """bob's producer (c1): ApiVersions before the login (2 ms), then a Metadata sent 96 ms
    after its connect began (bound 4 + 96 = 100 ms); his consumer (c2, another client id,
    connected as it sends): one fetch in flight ``last_ms``, read at T0 + 1 s."""
    end = T0 + S
    rows: list[dict[str, Any]] = [
        {"source": "harness", "event": "config", "mono_ns": T0 - S, "reason": "start",
         "detail": {"request_quotas": quotas}},
        _invoke("c1", 40001, T0, "producer"),
        _response("c1", 40001, T0 + 10 * MS, 18, 2.0, client="producer", principal=principal),
        _response("c1", 40001, T0 + 100 * MS, 3, 4.0, client="producer", principal=principal),
        _invoke("c2", 40002, end - int(last_ms * MS), "consumer"),
        _response("c2", 40002, end, 1, last_ms, client="consumer", principal=principal,
                  throttle=throttle),
    ]  # fmt: skip
    meta = {"run_id": name, "target": "broker", "expect": {"checks": list(expect)}}
    return write_rows(tmp / name, rows, meta)


@pytest.mark.parametrize(
    ("last_ms", "throttle", "verdict", "judged"),
    [
        (898.0, 5, "fail", 3),  # 2 + 100 + 898 = 1,000 ms: 10 %, provably under, throttled
        (898.01, 5, "pass", 2),  # a hundredth more: may be over, the throttle is not judged
        (898.0, 0, "pass", 3),  # under and not throttled
    ],
    ids=["at-the-quota-throttled", "just-over-not-judged", "at-the-quota-served"],
)
def test_a_throttle_while_provably_under_fails_at_the_edge(
    spark: Any, tmp_path: Path, last_ms: float, throttle: int, verdict: str, judged: int
) -> None:
    name = f"edge-{last_ms}-{throttle}"
    r = check_request_quota_buckets(load_run(spark, _history(tmp_path, name, last_ms,
                                                             throttle=throttle)))  # fmt: skip
    assert (r.verdict, r.judged) == (verdict, judged), (r.observed, r.witnesses)
    if verdict == "fail":
        (w,) = r.witnesses
        assert w["conn_id"] == "c2" and "provably under" in w["why"] and "'bob'" in w["why"]


def test_a_bucket_without_a_quota_is_never_throttled(spark: Any, tmp_path: Path) -> None:
    quotas = [{"user": "alice", "request_percentage": 1}]  # bob's bucket has none
    run = load_run(spark, _history(tmp_path, "no-quota", 5000.0, throttle=7, quotas=quotas))
    r = check_request_quota_buckets(run)
    assert r.verdict == "fail" and "no request quota" in r.witnesses[0]["why"]


def test_client_id_quotas_bucket_by_client_id_not_user(spark: Any, tmp_path: Path) -> None:
    """With only a client-id quota, bob's consumer is its own bucket: the producer's
    102 ms do not count towards it (898.01 + 0 login < 1,000 ms: provably under)."""
    quotas = [{"client-id": "consumer", "request_percentage": 10}]
    run = load_run(spark, _history(tmp_path, "by-client", 898.01, throttle=5, quotas=quotas))
    r = check_request_quota_buckets(run)
    assert r.verdict == "fail" and "client-id='consumer'" in r.witnesses[0]["why"], r.witnesses


@pytest.mark.parametrize(
    ("quotas", "expect", "verdict"),
    [
        (QUOTAS, (), "unknown"),  # an unknown principal (a certificate's) is not judged
        ([], (), "n/a"),
        ([], ("client_request_quota_buckets",), "unknown"),
    ],
)
def test_nothing_judged_is_never_a_pass(
    spark: Any, tmp_path: Path, quotas: Any, expect: tuple[str, ...], verdict: str
) -> None:
    path = _history(tmp_path, f"none-{verdict}-{len(quotas)}", 10.0, throttle=0, quotas=quotas,
                    principal=None, expect=expect)  # fmt: skip
    r = check_request_quota_buckets(load_run(spark, path))
    assert r.verdict == verdict and r.judged == 0, r.observed
