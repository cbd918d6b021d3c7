"""New rules on small hand-built histories, each both ways: a conforming history passes,
one that breaks the rule by a small margin fails with the witness named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from analysis.checks import ALL_CHECKS, CheckResult
from analysis.load import load_run
from analysis.synth import write_rows
from analysis.verdict import run_checks

T0 = 9_000_000_000_000
MS = 1_000_000
S = 1000 * MS


def results(spark: Any, run_dir: Path, *names: str) -> dict[str, CheckResult]:
    run = load_run(spark, run_dir)
    return {r.name: r for r in run_checks(run, [c for c in ALL_CHECKS if c.name in names])}


def conn(
    i: int,
    ns: int,
    ip: str = "127.0.0.10",
    outcome: str = "admit",
    close_after: int | None = None,
    listener: str = "client",
    delay_ms: float = 0.0,
    admit_after: int = 100_000,
) -> list[dict[str, Any]]:
    """Acceptor rows of one connection: accept, (delay), admit/reject, register, close."""
    c = {"conn_id": f"c-{i}", "listener": listener, "ip": ip, "port": 4000 + i}
    rows = [{"source": "acceptor", "event": "accept", "mono_ns": ns, **c}]
    if delay_ms:
        rows.append(
            {"source": "acceptor", "event": "delay", "mono_ns": ns, "delay_ms": delay_ms,
             "reason": "broker_rate", **c}
        )  # fmt: skip
    t1 = ns + admit_after
    if outcome == "reject":
        rows.append({"source": "acceptor", "event": "reject", "mono_ns": t1, **c})
        rows.append({"source": "acceptor", "event": "close", "mono_ns": t1 + 1, **c})
        return rows
    rows.append({"source": "acceptor", "event": "admit", "mono_ns": t1, "delay_ms": delay_ms, **c})
    rows.append(
        {"source": "acceptor", "event": "register", "mono_ns": t1 + 1000, **c,
         "detail": {"queue_depth": 1}}
    )  # fmt: skip
    if close_after is not None:
        rows.append({"source": "acceptor", "event": "close", "mono_ns": t1 + close_after, **c})
    return rows


def cfg(ns: int, detail: dict[str, Any], runner: bool = False, lo: int | None = None) -> Any:
    d = dict(detail)
    if runner:
        d["origin"] = "runner"
        if lo is not None:
            d["applied_from_mono_ns"] = lo
    return {"source": "harness", "event": "config", "mono_ns": ns, "detail": d}


BASE = {"listeners": "CLIENT://127.0.0.1:9092"}


# ---- (c) host-name overrides in max.connections.per.ip.overrides ----------------------


def _per_ip_rows(admitted_from_localhost: int) -> list[dict[str, Any]]:
    limits = {
        **BASE,
        "max.connections.per.ip": 5,
        "max.connections.per.ip.overrides": "localhost:2",
    }
    rows = [cfg(T0 - 1, limits)]
    for i in range(admitted_from_localhost):
        rows += conn(i, T0 + i * MS, ip="127.0.0.1")  # held open for the run
    rows += conn(50, T0 + 50 * MS, ip="127.0.0.1", outcome="reject")
    for i in range(4):  # another address may hold 4 (< its 5): not over
        rows += conn(60 + i, T0 + (60 + i) * MS, ip="127.0.0.20")
    return rows


@pytest.mark.parametrize("admitted, verdict", [(2, "pass"), (3, "fail")])
def test_host_name_override_resolved_as_kafka_does(
    spark: Any, tmp_path: Path, admitted: int, verdict: str
) -> None:
    run = {"run_id": "host-override", "target": "acceptor"}
    run_dir = write_rows(tmp_path / f"ho-{admitted}", _per_ip_rows(admitted), run)
    r = results(spark, run_dir, "max_connections_per_ip")["max_connections_per_ip"]
    assert r.verdict == verdict, r.observed
    assert r.exercised is True and r.limit == 2
    if verdict == "fail":  # an enforcer that ignored the override (5) is caught
        assert [w["client_ip"] for w in r.witnesses] == ["127.0.0.1"]
        assert "#3" in r.witnesses[0]["why"]


# ---- (d) config testimony: the runner's limits, the enforcer's record -------------------

RATE = {**BASE, "ip_quotas": {"default": 5}}
LOWER = {**BASE, "ip_quotas": {"default": 2}}


def _testimony_rows(enforcer_change_at: int | None) -> list[dict[str, Any]]:
    """The runner lowers the IP quota at T0+20 s (bracket [20 s, 20 s + 3 ms]); the
    enforcer records it at `enforcer_change_at` (None: never)."""
    lo, ack = T0 + 20 * S, T0 + 20 * S + 3 * MS
    rows = [cfg(T0 - 2 * MS, RATE), cfg(T0 - MS, RATE, runner=True, lo=T0 - 5 * MS)]
    if enforcer_change_at is not None:
        rows.append(cfg(enforcer_change_at, LOWER))
    rows.append(cfg(ack, LOWER, runner=True, lo=lo))
    rows += conn(1, T0 + S, close_after=S)
    return rows


@pytest.mark.parametrize(
    "at, verdict, why",
    [
        (T0 + 20 * S + 1 * MS, "pass", ""),
        (None, "fail", "never took the change"),
        (T0 + 20 * S - 1000, "fail", "with no change from the runner"),  # 1 µs early
    ],
    ids=["taken-inside-bracket", "lost-change", "enforcer-changed-first"],
)
def test_config_testimony_catches_a_lost_change(
    spark: Any, tmp_path: Path, at: int | None, verdict: str, why: str
) -> None:
    run = {"run_id": "testimony", "target": "acceptor"}
    run_dir = write_rows(tmp_path / f"t-{verdict}-{at}", _testimony_rows(at), run)
    r = results(spark, run_dir, "config_testimony")["config_testimony"]
    assert r.verdict == verdict, (r.observed, r.witnesses)
    assert r.judged == 2
    if verdict == "fail":
        assert any(why in w["why"] for w in r.witnesses), r.witnesses
        assert all("mono_ns" in w for w in r.witnesses)


@pytest.mark.parametrize(
    "key, runner_value, verdict",
    [
        ("kafka.version", None, "pass"),
        ("kafka.version", "4.3.1", "pass"),
        ("kafka.version", "3.7.2", "fail"),
        ("kafka.metadata", None, "pass"),
        ("kafka.metadata", "kraft", "pass"),
        ("kafka.metadata", "zookeeper", "fail"),
    ],
    ids=[
        "runner-silent",
        "same-release",
        "other-release",
        "runner-silent-mode",
        "same-mode",
        "other-mode",
    ],
)
def test_config_testimony_compares_the_release_enforced_as(
    spark: Any, tmp_path: Path, key: str, runner_value: str | None, verdict: str
) -> None:
    """The enforcer says it enforces as 4.3.1 in KRaft mode: a runner that intended 3.7.2,
    or ZooKeeper mode, is contradicted; one that stated neither (older runs, a launcher that
    does not set them) is not."""
    runner = RATE if runner_value is None else {**RATE, key: runner_value}
    rows = [cfg(T0 - 2 * MS, {**RATE, "kafka.version": "4.3.1", "kafka.metadata": "kraft"})]
    rows += [cfg(T0 - MS, runner, runner=True, lo=T0 - 5 * MS), *conn(1, T0 + S, close_after=S)]
    name = f"release-{key}-{runner_value}"
    run_dir = write_rows(tmp_path / name, rows, {"run_id": name, "target": "acceptor"})
    r = results(spark, run_dir, "config_testimony")["config_testimony"]
    assert r.verdict == verdict, (r.observed, r.witnesses)
    if verdict == "fail":
        assert key in r.witnesses[0]["why"], r.witnesses


def test_checker_judges_by_the_runner_limits_not_the_enforcers(spark: Any, tmp_path: Path) -> None:
    """The enforcer claims per-IP max 10 while the runner set 2: three connections held
    at once from one address break the runner's limit, whatever the enforcer says."""
    runner = {**BASE, "max.connections.per.ip": 2}
    enforcer = {**BASE, "max.connections.per.ip": 10}
    rows = [cfg(T0 - 2 * MS, enforcer), cfg(T0 - MS, runner, runner=True, lo=T0 - 5 * MS)]
    for i in range(3):
        rows += conn(i, T0 + i * MS)
    run_dir = write_rows(tmp_path / "judge", rows, {"run_id": "judge", "target": "acceptor"})
    r = results(spark, run_dir, "max_connections_per_ip", "config_testimony")
    assert r["max_connections_per_ip"].verdict == "fail"
    assert r["max_connections_per_ip"].witnesses[0]["conn_id"] == "c-2"
    assert r["config_testimony"].verdict == "fail"
    assert "max.connections.per.ip" in r["config_testimony"].witnesses[0]["why"]


# ---- (a) over-strictness: the wait accept → admit must be explained ---------------------


def _wait_rows(case: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One connection waits; `case` decides how long and with which limits."""
    limits: dict[str, Any] = {**BASE, "max.connection.creation.rate": 20}
    rows: list[dict[str, Any]] = []
    t = T0 + S
    if case == "delay-served":
        rows += conn(1, t, delay_ms=100.0, admit_after=100 * MS + 40 * MS)  # 40 < slack 50
    elif case == "delay-plus-slack-over":
        rows += conn(1, t, delay_ms=100.0, admit_after=100 * MS + 51 * MS)
    elif case == "delay-not-served":
        rows += conn(1, t, delay_ms=100.0, admit_after=98 * MS)
    elif case == "admit-800ms-no-reason":
        rows += conn(1, t, admit_after=800 * MS)
    else:  # slot waits: max.connections 2, two held, one releases at t + 500 ms
        limits["max.connections"] = 3 if case == "slot-wait-while-free" else 2
        rows += conn(10, T0, close_after=S + 500 * MS - 100_000)  # admitted T0+0.1ms
        rows += conn(11, T0 + MS, close_after=None)
        after = {"slot-wait-ok": 501 * MS, "slot-wait-too-long": 500 * MS + 51 * MS}.get(
            case, 501 * MS
        )
        rows += conn(1, t, admit_after=after)
    return [cfg(T0 - MS, limits), *rows], limits


@pytest.mark.parametrize(
    "case, verdict, why",
    [
        ("delay-served", "pass", ""),
        ("delay-plus-slack-over", "fail", "count limit configured"),
        ("delay-not-served", "fail", "not served"),
        ("admit-800ms-no-reason", "fail", "nothing explains"),
        ("slot-wait-ok", "pass", ""),
        ("slot-wait-too-long", "fail", "admitted only after"),
        ("slot-wait-while-free", "fail", "slot was free"),
    ],
)
def test_admission_wait_must_be_explained(
    spark: Any, tmp_path: Path, case: str, verdict: str, why: str
) -> None:
    rows, _limits = _wait_rows(case)
    run_dir = write_rows(tmp_path / case, rows, {"run_id": case, "target": "acceptor"})
    r = results(spark, run_dir, "admission_wait_explained")["admission_wait_explained"]
    assert r.verdict == verdict, (r.observed, r.witnesses)
    if verdict == "fail":
        assert [w["conn_id"] for w in r.witnesses] == ["c-1"], r.witnesses
        assert why in r.witnesses[0]["why"], r.witnesses


# ---- (b) eviction: only over max.connections, the excess, LRU, never protected ----------

TWO = {
    "listeners": "CLIENT://127.0.0.1:9092,INTERNAL://127.0.0.1:9093",
    "inter.broker.listener.name": "INTERNAL",
    "max.connections": 2,
}


def _two_on_processor_0() -> list[dict[str, Any]]:
    """The config (max.connections 2) and two client connections, c-0 and c-1, on
    processor 0."""
    rows = [cfg(T0 - MS, TWO)]
    for i in (0, 1):
        c = conn(i, T0 + i * MS)
        for r in c:
            r["processor"] = 0
        rows += c
    return rows


def evicted(
    cid: str, port: int, ns: int, listener: str = "client", ip: str = "127.0.0.10"
) -> list[dict[str, Any]]:
    """The `evict` and `close` rows of one eviction on processor 0."""
    common = {"conn_id": cid, "listener": listener, "ip": ip, "port": port, "processor": 0}
    return [
        {"source": "acceptor", "event": e, "mono_ns": ns, "reason": "max_connections", **common}
        for e in ("evict", "close")
    ]


def _evict_rows(case: str) -> list[dict[str, Any]]:
    rows = _two_on_processor_0()  # c-1 used more recently
    rows.append(
        {"source": "acceptor", "event": "request", "mono_ns": T0 + 2 * S, "conn_id": "c-1",
         "listener": "client", "ip": "127.0.0.10", "port": 4001, "latency_ms": 1.0,
         "api_key": 3, "processor": 0}
    )  # fmt: skip
    rows += conn(5, T0 + 3 * S, listener="internal", ip="127.0.0.3")  # total 3 > 2
    at = T0 + 3 * S + 5 * MS

    if case == "lru":
        rows += evicted("c-0", 4000, at)
    elif case == "wrong-victim":
        rows += evicted("c-1", 4001, at)
    elif case == "too-many":
        rows += evicted("c-0", 4000, at) + evicted("c-1", 4001, at + MS)
    elif case == "protected":
        rows += evicted("c-5", 4005, at, listener="internal", ip="127.0.0.3")
    # "none": nobody is evicted, the excess stays
    rows.append({"source": "harness", "event": "phase_end", "mono_ns": T0 + 5 * S})
    return rows


@pytest.mark.parametrize(
    "case, verdict, why",
    [
        ("lru", "pass", ""),
        ("wrong-victim", "fail", "not the LRU"),
        ("too-many", "fail", "not over max.connections"),
        ("protected", "fail", "protected listener"),
        ("none", "fail", "without an eviction"),
    ],
)
def test_eviction_rule_both_ways(
    spark: Any, tmp_path: Path, case: str, verdict: str, why: str
) -> None:
    run_dir = write_rows(tmp_path / case, _evict_rows(case), {"run_id": case, "target": "acceptor"})
    r = results(spark, run_dir, "eviction_rule")["eviction_rule"]
    assert r.verdict == verdict, (r.observed, r.witnesses)
    assert r.exercised is True
    if verdict == "fail":
        assert any(why in w["why"] for w in r.witnesses), r.witnesses


# ---- (e) request quotas judged by the model ---------------------------------------------


def _request_rows(quotas: list[dict[str, Any]], recorded: dict[str, float]) -> list[Any]:
    """At T0: `hot` charges 100.5 ms (10.05 % over the padded 10 s window: rate 1.005 %),
    `cold` 90 ms (0.9 %). Against 1 % the model throttles hot round(0.005·10000) = 50 ms."""
    limits = {**BASE, "request_quotas": quotas}
    rows = [cfg(T0 - S, limits)]
    for i, (client, latency) in enumerate((("hot", 100.5), ("cold", 90.0))):
        c = {"conn_id": f"r-{client}", "listener": "client", "ip": "127.0.0.1", "port": 5000 + i}
        ns = T0 + i * 1000
        rows.append(
            {"source": "acceptor", "event": "request", "mono_ns": ns, "api_key": 3,
             "client_id": client, "principal": "ANONYMOUS", "latency_ms": latency, **c}
        )  # fmt: skip
        if recorded.get(client):
            rows.append(
                {"source": "acceptor", "event": "request_throttle", "mono_ns": ns,
                 "delay_ms": recorded[client], "api_key": 3, "client_id": client, **c}
            )  # fmt: skip
    return rows


CLIENT_Q = [
    {"client-id": "hot", "request_percentage": 1},
    {"client-id": "cold", "request_percentage": 1},
]
USER_DEFAULT = [*CLIENT_Q, {"user": None, "request_percentage": 1000}]


@pytest.mark.parametrize(
    "quotas, recorded, verdict, why",
    [
        (CLIENT_Q, {"hot": 50}, "pass", ""),
        (CLIENT_Q, {"hot": 51}, "pass", ""),  # within 1 ms
        (CLIENT_Q, {"hot": 52}, "fail", "vs model 50"),
        (CLIENT_Q, {}, "fail", "but none applied"),
        (CLIENT_Q, {"hot": 50, "cold": 5}, "fail", "while under quota"),
        # the default-user quota (level 6) outranks the client-id quota (level 7)
        (USER_DEFAULT, {"hot": 50}, "fail", "while under quota"),
    ],
    ids=["exact", "1ms-off", "2ms-off", "missing", "cold-throttled", "precedence"],
)
def test_request_quota_model_both_ways(
    spark: Any,
    tmp_path: Path,
    quotas: list[dict[str, Any]],
    recorded: dict[str, float],
    verdict: str,
    why: str,
) -> None:
    name = f"rq-{len(quotas)}-{'-'.join(f'{k}{v}' for k, v in recorded.items())}"
    run_dir = write_rows(
        tmp_path / name, _request_rows(quotas, recorded), {"run_id": name, "target": "acceptor"}
    )
    r = results(spark, run_dir, "request_quota_model")["request_quota_model"]
    assert r.verdict == verdict, (r.observed, r.witnesses)
    assert r.judged == 2
    if verdict == "fail":
        assert any(why in w["why"] for w in r.witnesses), r.witnesses


@pytest.mark.parametrize(
    "api_key, metadata, verdict",
    [
        (67, "zookeeper", "pass"),  # AllocateProducerIds: served and charged by a ZK 3.x broker
        (67, "kraft", "unknown"),  # ... controller-only on KRaft: never charged there
        (55, "kraft", "pass"),  # DescribeQuorum: forwarded and charged by a KRaft broker
        (55, "zookeeper", "unknown"),  # ... not served by a ZooKeeper-mode broker
    ],
)
def test_the_request_model_charges_what_the_metadata_mode_serves(
    spark: Any, tmp_path: Path, api_key: int, metadata: str, verdict: str
) -> None:
    """Switch `zookeeper_cluster_actions` both ways in the request model: hot's 100.5 ms
    throttled 50 ms is proven right where the broker charges its API; where that broker
    would not serve the API nothing is charged, so the model proves nothing (`unknown`:
    the quota is never reached), never a pass."""
    rows = _request_rows(CLIENT_Q, {"hot": 50})
    rows[0]["detail"] = {**rows[0]["detail"], "kafka.version": "3.6.2", "kafka.metadata": metadata}
    for r in rows:
        if r.get("client_id") == "hot":
            r["api_key"] = api_key
    name = f"rq-{api_key}-{metadata}"
    run_dir = write_rows(tmp_path / name, rows, {"run_id": name, "target": "acceptor"})
    r = results(spark, run_dir, "request_quota_model")["request_quota_model"]
    assert r.verdict == verdict, (r.observed, r.witnesses)


@pytest.mark.parametrize(
    "apart_ns, verdict",
    [(400_000, "pass"), (2_000_000, "fail")],
    ids=["same-millisecond", "two-ms-apart"],
)
def test_charges_in_one_millisecond_have_no_order(
    spark: Any, tmp_path: Path, apart_ns: int, verdict: str
) -> None:
    """Two requests of the `hot` client-id (50 ms, then 50.5 ms: 1.005 % together against
    1 %): the enforcer throttled the first-stamped one 50 ms and not the second, the decision
    of the other order. Stamped in the same millisecond, Kafka's quota clock cannot order
    them, so either order stands; 2 ms apart, the order is the stamps' and the swap is a
    witness."""
    limits = {**BASE, "request_quotas": CLIENT_Q}
    rows: list[Any] = [cfg(T0 - S, limits)]
    for i, latency in enumerate((50.0, 50.5)):
        c = {"conn_id": f"r-{i}", "listener": "client", "ip": "127.0.0.1", "port": 5100 + i}
        ns = T0 + 100_000 + i * apart_ns
        rows.append(
            {"source": "acceptor", "event": "request", "mono_ns": ns, "api_key": 3,
             "client_id": "hot", "principal": "ANONYMOUS", "latency_ms": latency, **c}
        )  # fmt: skip
        if i == 0:
            rows.append(
                {"source": "acceptor", "event": "request_throttle", "mono_ns": ns,
                 "delay_ms": 50, "api_key": 3, "client_id": "hot", **c}
            )  # fmt: skip
    name = f"rq-order-{apart_ns}"
    run_dir = write_rows(tmp_path / name, rows, {"run_id": name, "target": "acceptor"})
    r = results(spark, run_dir, "request_quota_model")["request_quota_model"]
    assert r.verdict == verdict, (r.observed, r.witnesses)
    assert r.judged == 2


@pytest.mark.parametrize(
    "charged, recorded, verdict",
    [(100.5, {"hot": 50}, "pass"), (90.0, {}, "unknown"), (90.0, {"hot": 50}, "fail")],
    ids=["charged-over", "charged-under", "charged-under-throttled"],
)
def test_request_model_charges_charged_ms_not_the_long_poll(
    spark: Any, tmp_path: Path, charged: float, recorded: dict[str, float], verdict: str
) -> None:
    """A fetch long poll of 600 ms whose purgatory wait the acceptor did not charge
    (`detail.charged_ms`): the model charges what was charged. Charged 100.5 ms → the model
    throttles 50 ms as in the base case; charged 90 ms → no throttle is due (the quota is
    then not reached: unknown, and a recorded throttle fails), where latency 600 ms would
    have meant the 1000 ms cap."""
    rows = _request_rows(CLIENT_Q, recorded)
    hot = next(r for r in rows if r.get("event") == "request" and r["client_id"] == "hot")
    hot["latency_ms"] = 600.0
    hot["detail"] = {"charged_ms": charged}
    name = f"rq-charged-{charged}-{len(recorded)}"
    run_dir = write_rows(tmp_path / name, rows, {"run_id": name, "target": "acceptor"})
    r = results(spark, run_dir, "request_quota_model")["request_quota_model"]
    assert r.verdict == verdict, (r.observed, r.witnesses)
    assert r.judged == 2


def test_a_stall_of_the_acceptors_loop_is_not_over_strictness(spark: Any, tmp_path: Path) -> None:
    """800 ms accept → admit with no delay: a witness when the rest of the acceptor kept
    writing (or was idle); excused when its rows show the loop stood still (a gap ended by
    a burst of overdue rows, as on a starved machine)."""
    rows, _ = _wait_rows("admit-800ms-no-reason")
    t = T0 + S
    others = [  # overdue throttle-closes of other connections right after the admit
        {"source": "acceptor", "event": "throttle_close", "mono_ns": t + 800 * MS + k * 100_000,
         "conn_id": f"o-{k}", "listener": "client", "ip": "127.0.0.20", "port": 6000 + k}
        for k in range(1, 4)
    ]  # fmt: skip
    run_dir = write_rows(
        tmp_path / "stall", rows + others, {"run_id": "stall", "target": "acceptor"}
    )
    r = results(spark, run_dir, "admission_wait_explained")["admission_wait_explained"]
    assert r.verdict == "pass", (r.observed, r.witnesses)
    assert "1 by a stall" in r.observed
    busy = [  # the loop kept running during the wait: not a stall
        {**o, "mono_ns": t + 400 * MS + i * 100_000} for i, o in enumerate(others)
    ]
    run_dir = write_rows(tmp_path / "busy", rows + busy, {"run_id": "busy", "target": "acceptor"})
    r = results(spark, run_dir, "admission_wait_explained")["admission_wait_explained"]
    assert r.verdict == "fail" and r.witnesses[0]["conn_id"] == "c-1", r.observed


@pytest.mark.parametrize("closed_by, verdict", [("shutdown", "pass"), ("ip_rate", "fail")])
def test_a_throttled_socket_closed_early_only_by_the_runs_end(
    spark: Any, tmp_path: Path, closed_by: str, verdict: str
) -> None:
    """Held 900 ms of a 1000 ms throttle: early (beyond the 50 ms slack) unless the
    acceptor was shutting down at the end of the run."""
    limits = {**BASE, "ip_quotas": {"default": 5}}
    c = {"conn_id": "t-1", "listener": "client", "ip": "127.0.0.9", "port": 4100}
    t1 = T0 + 10 * MS
    rows = [
        cfg(T0 - MS, limits),
        {"source": "acceptor", "event": "accept", "mono_ns": T0, **c},
        {"source": "acceptor", "event": "throttle_close", "mono_ns": t1 + 900 * MS,
         "reason": "ip_rate", "delay_ms": 1000.0, **c,
         "detail": {"throttle_start_mono_ns": t1, "closed_by": closed_by}},
    ]  # fmt: skip
    run_dir = write_rows(tmp_path / closed_by, rows, {"run_id": "thr", "target": "acceptor"})
    r = results(spark, run_dir, "ip_throttle_within_window")["ip_throttle_within_window"]
    assert r.verdict == verdict, (r.observed, r.witnesses)
    if verdict == "fail":
        assert r.witnesses[0]["conn_id"] == "t-1" and "held 900" in r.witnesses[0]["why"]


def test_slot_wait_on_a_full_listener_named_in_upper_case_is_explained(
    spark: Any, tmp_path: Path
) -> None:
    """The acceptor names listeners as configured (`REPLICATION`); a slot wait while that
    listener is at its maximum (1) is explained whatever the case of the name."""
    limits = {
        "listeners": "CLIENT://127.0.0.1:9092,REPLICATION://127.0.0.1:9093",
        "inter.broker.listener.name": "REPLICATION",
        "listener.name.replication.max.connections": 1,
    }
    rows = [cfg(T0 - MS, limits)]
    rows += conn(1, T0, listener="REPLICATION", ip="127.0.0.30", close_after=100 * MS)
    rows += conn(2, T0 + 10 * MS, listener="REPLICATION", ip="127.0.0.30",
                 admit_after=90 * MS + 200_000)  # fmt: skip
    rows.append(
        {"source": "acceptor", "event": "blocked", "mono_ns": T0 + 100 * MS + 150_000,
         "listener": "REPLICATION", "reason": "slot", "delay_ms": 90.0,
         "detail": {"start_mono_ns": T0 + 10 * MS + 100_000}}
    )  # fmt: skip
    run_dir = write_rows(tmp_path / "upper", rows, {"run_id": "upper", "target": "acceptor"})
    r = results(spark, run_dir, "admission_wait_explained")["admission_wait_explained"]
    assert r.verdict == "pass", (r.observed, r.witnesses)


def _throttled_request(spark: Any, run_dir: Path, limits: dict[str, Any], api_key: int) -> Any:
    """request_throttle_bounds on one answered request of ``api_key`` throttled 300 ms."""
    c = {"conn_id": "x-1", "listener": "client", "ip": "127.0.0.1", "port": 5100}
    rows = [
        cfg(T0 - S, limits),
        {"source": "acceptor", "event": "request", "mono_ns": T0, "api_key": api_key,
         "client_id": "hot", "principal": "ANONYMOUS", "latency_ms": 200.0, **c},
        {"source": "acceptor", "event": "request_throttle", "mono_ns": T0, "delay_ms": 300.0,
         "api_key": api_key, "client_id": "hot", **c},
    ]  # fmt: skip
    written = write_rows(run_dir, rows, {"run_id": run_dir.name, "target": "acceptor"})
    return results(spark, written, "request_throttle_bounds")["request_throttle_bounds"]


@pytest.mark.parametrize(
    "api_key, verdict",
    [(55, "pass"), (84, "pass"), (27, "fail")],
    ids=["DescribeQuorum-charged", "ReadShareGroupState-charged", "WriteTxnMarkers-exempt"],
)
def test_only_write_txn_markers_is_exempt_from_request_throttles(
    spark: Any, tmp_path: Path, api_key: int, verdict: str
) -> None:
    """Kafka 4.3.1 throttles DescribeQuorum and the share-group-state APIs like any request
    (`sendMaybeThrottle`); only WriteTxnMarkers is answered exempt (reference Errata 4.4)."""
    limits = {**BASE, "request_quotas": CLIENT_Q}
    r = _throttled_request(spark, tmp_path / f"exempt-{api_key}", limits, api_key)
    assert r.verdict == verdict, (r.observed, r.witnesses)
    if verdict == "fail":
        assert "WriteTxnMarkers" in r.witnesses[0]["why"]


@pytest.mark.parametrize(
    "metadata, version, verdict",
    [
        ("zookeeper", "3.6.2", "fail"),  # a ZooKeeper broker answers LeaderAndIsr exempt
        ("kraft", "3.6.2", "pass"),  # a KRaft broker does not serve it: nothing to exempt
        (None, "2.8.2", "fail"),  # 2.8.2 runs in ZooKeeper mode unless told
        (None, "4.3.1", "pass"),
    ],
)
def test_the_exempt_apis_follow_the_metadata_mode(
    spark: Any, tmp_path: Path, metadata: str | None, version: str, verdict: str
) -> None:
    """Switch `zookeeper_cluster_actions` (analysis.versions): a throttled LeaderAndIsr
    breaks the rule only for a broker that answers it exempt."""
    limits = {**BASE, "request_quotas": CLIENT_Q, "kafka.version": version}
    if metadata:
        limits["kafka.metadata"] = metadata
    r = _throttled_request(spark, tmp_path / f"exempt-{metadata}-{version}", limits, 4)
    assert r.verdict == verdict, (r.observed, r.witnesses)
    if verdict == "fail":
        assert "LeaderAndIsr" in r.witnesses[0]["why"]


@pytest.mark.parametrize(
    "holders, own_max, verdict",
    [(2, None, "pass"), (3, None, "fail"), (3, 3, "pass")],
    ids=["at-inherited-max", "one-over-inherited-max", "own-max"],
)
def test_a_listener_without_its_own_max_is_held_to_max_connections(
    spark: Any, tmp_path: Path, holders: int, own_max: int | None, verdict: str
) -> None:
    """Kafka 4.3.1 (valuesWithPrefixOverride): the protected REPLICATION, exempt from the
    broker-wide total, still takes max.connections (2) as its own maximum unless it sets
    one; one admission over it fails listener_max_connections."""
    limits: dict[str, Any] = {
        "listeners": "CLIENT://127.0.0.1:9092,REPLICATION://127.0.0.1:9093",
        "inter.broker.listener.name": "REPLICATION",
        "max.connections": 2,
    }
    if own_max is not None:
        limits["listener.name.replication.max.connections"] = own_max
    rows = [cfg(T0 - MS, limits)]
    for i in range(holders):
        rows += conn(i, T0 + i * MS, listener="REPLICATION", ip="127.0.0.30", close_after=S)
    run_dir = write_rows(tmp_path / f"inh-{holders}-{own_max}", rows,
                         {"run_id": "inh", "target": "acceptor"})  # fmt: skip
    got = results(spark, run_dir, "listener_max_connections", "max_connections")
    r = got["listener_max_connections"]
    assert r.verdict == verdict, (r.observed, r.witnesses)
    assert r.exercised
    if verdict == "fail":
        assert "#3 concurrent for replication" in r.witnesses[0]["why"]
    # nothing on CLIENT: max.connections is not exercised, and says its configured limit
    m = got["max_connections"]
    assert m.verdict == "unknown" and m.limit == 2, m.observed


def _throttled_rows(close_after_end_ms: float, other: tuple[float, float] | None) -> list[Any]:
    """One socket throttled 10 ms from T0+10ms (end T0+20ms), closed `close_after_end_ms`
    after its end; `other` = (accept, admit) of another admission on the listener, in ms
    after that end."""
    limits = {**BASE, "ip_quotas": {"default": 5}}
    c = {"conn_id": "t-1", "listener": "client", "ip": "127.0.0.9", "port": 4100}
    t1 = T0 + 10 * MS
    end = t1 + 10 * MS
    rows = [
        cfg(T0 - MS, limits),
        {"source": "acceptor", "event": "accept", "mono_ns": T0, **c},
        {"source": "acceptor", "event": "throttle_close",
         "mono_ns": end + int(close_after_end_ms * MS), "reason": "ip_rate", "delay_ms": 10.0,
         **c, "detail": {"throttle_start_mono_ns": t1, "closed_by": "ip_rate"}},
    ]  # fmt: skip
    if other is not None:
        a, b = other
        rows += conn(2, end + int(a * MS), ip="127.0.0.20", admit_after=int((b - a) * MS),
                     close_after=S)  # fmt: skip
    return rows


@pytest.mark.parametrize(
    "close_after, other, verdict",
    [
        # idle listener: the 500 ms select timeout, + 50 ms slack
        (549.0, None, "pass"),
        (551.0, None, "fail"),
        # an admission accepted 100 ms after the end completes at 300 ms: that turn closes it
        (349.0, (100.0, 300.0), "pass"),
        (351.0, (100.0, 300.0), "fail"),
        # an admission in progress at the end (a 1000 ms delay, done at 800 ms): not before
        (849.0, (-200.0, 800.0), "pass"),
        (851.0, (-200.0, 800.0), "fail"),
        # accepted after the select timeout: the timeout came first
        (549.0, (600.0, 900.0), "pass"),
        (551.0, (600.0, 900.0), "fail"),
    ],
    ids=[
        "idle-in",
        "idle-late",
        "turn-in",
        "turn-late",
        "busy-in",
        "busy-late",
        "timeout-first-in",
        "timeout-first-late",
    ],
)
def test_a_throttled_socket_closes_at_the_acceptor_loops_first_turn_past_its_end(
    spark: Any,
    tmp_path: Path,
    close_after: float,
    other: tuple[float, float] | None,
    verdict: str,
) -> None:
    """Kafka's closeThrottledConnections runs once per turn of the acceptor loop (after
    select(500) and the ready connection's admission): 1 ms either side of the slack."""
    rows = _throttled_rows(close_after, other)
    run_dir = write_rows(tmp_path / "turn", rows, {"run_id": "turn", "target": "acceptor"})
    r = results(spark, run_dir, "ip_throttle_within_window")["ip_throttle_within_window"]
    assert r.verdict == verdict, (r.observed, r.witnesses)
    if verdict == "fail":
        assert "first turn past its end" in r.witnesses[0]["why"]


def _loop_lag(ns: int, reason: str, late_ms: float = 0.0) -> dict[str, Any]:
    """A heartbeat row (acceptor.heartbeat: period 10 ms, threshold 5 ms)."""
    detail = {"period_ms": 10, "threshold_ms": 5} if reason == "start" else {
        "due_mono_ns": ns - int(late_ms * MS), "period_ms": 10}  # fmt: skip
    return {"source": "acceptor", "event": "loop_lag", "mono_ns": ns, "reason": reason,
            "delay_ms": late_ms, "detail": detail}  # fmt: skip


@pytest.mark.parametrize(
    "fired_ms, late_ms, heartbeat, verdict",
    [
        # credited [fired - late - 10 - 1, fired] = [549, 570]: 21 ms of the 70 ms late
        (570.0, 10.0, True, "pass"),
        # [551, 570]: 19 ms, 51 ms left over the 50 ms slack
        (570.0, 8.0, True, "fail"),
        # a stall before the turn (the select timeout at 500 ms) did not hold the close
        (300.0, 60.0, True, "fail"),
        # no heartbeat `start` row: nothing measured, nothing credited
        (570.0, 10.0, False, "fail"),
    ],
    ids=["stall-covers", "stall-short", "stall-before-the-turn", "no-heartbeat"],
)
def test_a_measured_loop_stall_excuses_a_late_throttle_close(
    spark: Any, tmp_path: Path, fired_ms: float, late_ms: float, heartbeat: bool, verdict: str
) -> None:
    """Idle listener: the close is due at the 500 ms select timeout and comes at 570 ms,
    20 ms past the slack. The acceptor loop's own stall, measured by its heartbeat between
    that turn and the close, is credited (a loop that cannot run cannot close); 1 ms
    either side of the slack."""
    end = T0 + 20 * MS  # _throttled_rows: the throttle ends 20 ms after T0
    rows = _throttled_rows(570.0, None)
    rows.append(_loop_lag(end + int(fired_ms * MS), "stall", late_ms))
    if heartbeat:
        rows.append(_loop_lag(T0 - MS, "start"))
    run_dir = write_rows(tmp_path / "stall", rows, {"run_id": "stall", "target": "acceptor"})
    r = results(spark, run_dir, "ip_throttle_within_window")["ip_throttle_within_window"]
    assert r.verdict == verdict, (r.observed, r.witnesses)
    if verdict == "fail":
        assert "first turn past its end" in r.witnesses[0]["why"]
    if heartbeat and fired_ms == 570.0:
        assert "1 close(s) credited with measured loop stalls" in r.observed, r.observed
    if not heartbeat:
        assert "no heartbeat recorded" in r.tolerance, r.tolerance


@pytest.mark.parametrize(
    "second_after_ms, verdict",
    [(349.0, "pass"), (351.0, "fail")],
    ids=["each-turn-in-pace", "a-turn-late"],
)
def test_an_excess_of_two_is_shed_one_per_processor_turn(
    spark: Any, tmp_path: Path, second_after_ms: float, verdict: str
) -> None:
    """Kafka 4.3.1 sheds one LRU channel per processor loop turn, and with idle channels a
    turn comes every 300 ms (bench.eviction_pace: 6 over on 3 processors at ~180 and ~480
    ms): two over on one processor take two turns. Each step may take 300 ms + 50 ms slack;
    1 ms over is a witness."""
    rows = _two_on_processor_0()
    over_at = T0 + 3 * S
    rows += conn(5, over_at, listener="internal", ip="127.0.0.3")
    rows += conn(6, over_at, listener="internal", ip="127.0.0.4")  # total 4 > 2
    admitted = over_at + 100_000  # conn()'s admit_after

    first = admitted + 349 * MS
    rows += evicted("c-0", 4000, first)
    rows += evicted("c-1", 4001, first + int(second_after_ms * MS))
    rows.append({"source": "harness", "event": "phase_end", "mono_ns": T0 + 5 * S})
    run_dir = write_rows(tmp_path / "pace", rows, {"run_id": "pace", "target": "acceptor"})
    r = results(spark, run_dir, "eviction_rule")["eviction_rule"]
    assert r.verdict == verdict, (r.observed, r.witnesses)
    if verdict == "fail":
        assert any("without an eviction" in w["why"] for w in r.witnesses), r.witnesses


@pytest.mark.parametrize(
    "taken_after_ms, verdict",
    [(49.0, "pass"), (51.0, "fail")],
    ids=["taken-within-slack", "free-past-slack"],
)
def test_a_slot_another_listener_took_at_once_was_not_free_for_the_waiter(
    spark: Any, tmp_path: Path, taken_after_ms: float, verdict: str
) -> None:
    """CLIENT waits for a slot (max.connections 2: one CLIENT and one protected INTERNAL
    connection held); 500 ms in, the INTERNAL one closes and another INTERNAL connection
    is admitted `taken_after_ms` later; the waiter is admitted only when the CLIENT one
    closes, 1.5 s in. Taken within the 50 ms slack: that slot was never the waiter's.
    Free longer: a witness."""
    limits = {**TWO, "max.connections": 2}
    rows = [cfg(T0 - MS, limits)]
    rows += conn(10, T0, close_after=S + 1500 * MS)  # CLIENT, closes at T0 + 2.5 s
    rows += conn(20, T0 + 2 * MS, listener="internal", ip="127.0.0.3",
                 close_after=S + 500 * MS - 2 * MS)  # fmt: skip
    t = T0 + S  # the waiter: accepted at t, admitted when c-10 closes (t + 1.5 s)
    rows += conn(21, t + 500 * MS + int(taken_after_ms * MS) - 100_000, listener="internal",
                 ip="127.0.0.4", close_after=None)  # fmt: skip
    rows += conn(1, t, admit_after=1500 * MS + 200_000)
    run_dir = write_rows(tmp_path / "race", rows, {"run_id": "race", "target": "acceptor"})
    r = results(spark, run_dir, "admission_wait_explained")["admission_wait_explained"]
    assert r.verdict == verdict, (r.observed, r.witnesses)
    if verdict == "fail":
        assert "slot freed" in r.witnesses[0]["why"], r.witnesses


@pytest.mark.parametrize(
    "in_flight, verdict", [(True, "pass"), (False, "fail")], ids=["fetch-in-flight", "idle"]
)
def test_a_request_in_flight_at_an_eviction_is_recent_use(
    spark: Any, tmp_path: Path, in_flight: bool, verdict: str
) -> None:
    """c-0 was answered 100 ms before the eviction; c-1's last answer was 200 ms before
    it, but (in_flight) it sent a fetch 30 ms before the eviction, answered 300 ms after:
    on Kafka that read made c-1 the more recently used, so evicting c-0 is the LRU."""
    rows = _two_on_processor_0()
    ev = T0 + 3 * S

    def req(cid: str, port: int, answered: int, latency_ms: float) -> dict[str, Any]:
        return {"source": "acceptor", "event": "request", "mono_ns": answered, "conn_id": cid,
                "listener": "client", "ip": "127.0.0.10", "port": port,
                "latency_ms": latency_ms, "api_key": 1, "processor": 0}  # fmt: skip

    rows.append(req("c-0", 4000, ev - 100 * MS, 1.0))
    rows.append(req("c-1", 4001, ev - 200 * MS, 1.0))
    if in_flight:
        rows.append(req("c-1", 4001, ev + 300 * MS, 330.0))  # read at ev − 30 ms
    rows += conn(5, ev - 5 * MS, listener="internal", ip="127.0.0.3")  # total 3 > 2
    rows += evicted("c-0", 4000, ev)
    rows.append({"source": "harness", "event": "phase_end", "mono_ns": T0 + 5 * S})
    run_dir = write_rows(tmp_path / "lru", rows, {"run_id": "lru", "target": "acceptor"})
    r = results(spark, run_dir, "eviction_rule")["eviction_rule"]
    assert r.verdict == verdict, (r.observed, r.witnesses)
    if verdict == "fail":
        assert any("not the LRU" in w["why"] for w in r.witnesses), r.witnesses


@pytest.mark.parametrize(
    "how, second_throttle, verdict",
    [("network", 50.0, "pass"), ("network", None, "fail"), ("late", 50.0, "pass"),
     ("late", None, "fail"), ("neither", None, "unknown")],
)  # fmt: skip
def test_request_model_records_network_time_and_late_charges_unchecked(
    spark: Any, tmp_path: Path, how: str, second_throttle: float | None, verdict: str
) -> None:
    """hot's first request is charged 90 ms by its decision (under the 1 % quota) and 10.5 ms
    more without a check: its network time (`network_ms`, after the decision), or its whole
    100.5 ms when the broker's log line came after the response (`broker_log_late`, at
    mono_ns + late_ms, no decision). Either way hot's second request, 1 ms later, finds the
    bucket at 1.005 %: 50 ms due. Without the extra charge nothing is due."""
    limits = {**BASE, "request_quotas": CLIENT_Q}
    c = {"conn_id": "r-hot", "listener": "client", "ip": "127.0.0.1", "port": 5000}
    first: dict[str, Any] = {"source": "acceptor", "event": "request", "mono_ns": T0,
                             "api_key": 3, "client_id": "hot", "principal": "ANONYMOUS",
                             "latency_ms": 0.5, **c}  # fmt: skip
    if how == "network":
        first["detail"] = {"charged_ms": 90.0, "network_ms": 10.5, "charge_source": "broker_log"}
    elif how == "late":
        first["detail"] = {"charged_ms": 100.5, "charge_source": "broker_log_late",
                           "late_ms": 0.5}  # fmt: skip
    else:
        first["detail"] = {"charged_ms": 90.0, "charge_source": "broker_log"}
    second = {**first, "mono_ns": T0 + MS,
              "detail": {"charged_ms": 0.0, "charge_source": "broker_log"}}  # fmt: skip
    rows = [cfg(T0 - S, limits), first, second]
    if second_throttle is not None:
        rows.append(
            {"source": "acceptor", "event": "request_throttle", "mono_ns": T0 + MS,
             "delay_ms": second_throttle, "api_key": 3, "client_id": "hot", **c}
        )  # fmt: skip
    name = f"rq-{how}-{second_throttle}"
    run_dir = write_rows(tmp_path / name, rows, {"run_id": name, "target": "acceptor"})
    r = results(spark, run_dir, "request_quota_model")["request_quota_model"]
    assert r.verdict == verdict, (r.observed, r.witnesses)
    if verdict == "fail":
        assert "but none applied" in r.witnesses[0]["why"], r.witnesses


@pytest.mark.parametrize(
    "source, verdict", [("login", "unknown"), (None, "fail")], ids=["login", "charged"]
)
def test_a_sasl_logins_requests_are_not_charged(
    spark: Any, tmp_path: Path, source: str | None, verdict: str
) -> None:
    """A 200 ms SaslAuthenticate of client-id `hot` (quota 1 %), then a 1 ms request the
    enforcer did not throttle. Kafka's authenticator answers the login before any request
    handler, so it is never charged (`charge_source: login`): nothing reaches the quota
    (`unknown`, not exercised). Were it charged, the second request's throttle is owed and
    missing: `fail`."""
    limits = {**BASE, "request_quotas": CLIENT_Q}
    c = {"conn_id": "r-0", "listener": "client", "ip": "127.0.0.1", "port": 5100}
    login: dict[str, Any] = {"charged_ms": 0.0, "charge_source": "login"} if source else {}
    rows: list[Any] = [
        cfg(T0 - S, limits),
        {"source": "acceptor", "event": "request", "mono_ns": T0, "api_key": 36,
         "client_id": "hot", "principal": "ANONYMOUS", "latency_ms": 200.0,
         "detail": login or None, **c},
        {"source": "acceptor", "event": "request", "mono_ns": T0 + 300 * MS, "api_key": 3,
         "client_id": "hot", "principal": "alice", "latency_ms": 1.0, **c},
    ]  # fmt: skip
    name = f"rq-login-{source}"
    run_dir = write_rows(tmp_path / name, rows, {"run_id": name, "target": "acceptor"})
    r = results(spark, run_dir, "request_quota_model")["request_quota_model"]
    assert r.verdict == verdict, (r.observed, r.witnesses)
