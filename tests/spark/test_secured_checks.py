"""`quota_precedes_tls` and `principal_agreement` on hand-built histories: one connection
decides each verdict (a handshake finished after a throttle-close; a request charged to
another principal than its client's), and what they must not judge is left alone (an
admitted connection's handshake; a SASL login's uncharged requests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from analysis.checks.secured import check_principal_agreement, check_quota_precedes_tls
from analysis.load import load_run
from base.history import HistoryWriter
from tests.handbuilt import record
from tests.spark.histories import hand_built_run

S = 1_000_000_000
MS = 1_000_000
T0 = 5_000 * S
SECURED = {"listener_security": {"CLIENT": {"protocol": "SSL"}}}


def _client(
    cw: HistoryWriter, port: int, at: int, *, tls_done: bool, principal: str | None
) -> None:
    addr = {"client_ip": "127.0.0.7", "client_port": port, "listener": "CLIENT"}
    record(cw, "connect_invoke", mono_ns=at, detail={"profile": "storm"}, **addr)
    record(cw, "connect_ok", mono_ns=at + MS, latency_ms=1.0, **addr)
    record(cw, "tls_start", mono_ns=at + MS, latency_ms=1.0, **addr)
    if tls_done:
        record(cw, "tls_done", mono_ns=at + 5 * MS, latency_ms=5.0, **addr)
    else:
        record(cw, "tls_fail", mono_ns=at + 900 * MS, latency_ms=900.0, reason="eof", **addr)
    detail: dict[str, Any] = {"outcome": "served" if tls_done else "eof_after_accept"}
    if principal is not None:
        detail["principal"] = principal
    record(cw, "closed", mono_ns=at + S, reason="eof", latency_ms=1000.0, detail=detail, **addr)


def _conn(aw: HistoryWriter, n: int, port: int, at: int, *, throttled: bool) -> dict[str, Any]:
    conn = {"conn_id": f"CLIENT-{n}", "listener": "CLIENT", "client_ip": "127.0.0.7",
            "client_port": port}  # fmt: skip
    record(aw, "accept", mono_ns=at, **conn)
    if throttled:
        detail = {"throttle_start_mono_ns": at, "closed_by": "ip_rate"}
        record(aw, "throttle_close", mono_ns=at + 800 * MS, delay_ms=800.0, reason="ip_rate",
                  detail=detail, **conn)  # fmt: skip
    else:
        record(aw, "admit", mono_ns=at, delay_ms=0.0, **conn)
        record(aw, "close", mono_ns=at + S, reason="client_eof", **conn)
    return conn


def _tls(finished_after_throttle: bool) -> Any:
    def build(cw: HistoryWriter, aw: HistoryWriter, _hw: HistoryWriter) -> None:
        _client(cw, 40001, T0, tls_done=True, principal=None)  # admitted: not judged
        _conn(aw, 1, 40001, T0 + MS // 2, throttled=False)
        _client(cw, 40002, T0 + S, tls_done=finished_after_throttle, principal=None)
        _conn(aw, 2, 40002, T0 + S + MS // 2, throttled=True)

    return build


def test_a_throttled_connection_never_finishes_tls(spark: Any, tmp_path: Path) -> None:
    run = hand_built_run(tmp_path, "ok", _tls(False), config_ns=T0 - S, meta=SECURED)
    r = check_quota_precedes_tls(load_run(spark, run))
    assert r.verdict == "pass", r.observed
    assert r.judged == 1 and "1 quota-closed connections started TLS; 0 finished" in r.observed


def test_a_handshake_finished_before_the_quotas_close_fails(spark: Any, tmp_path: Path) -> None:
    run = hand_built_run(tmp_path, "bad", _tls(True), config_ns=T0 - S, meta=SECURED)
    r = check_quota_precedes_tls(load_run(spark, run))
    assert r.verdict == "fail", r.observed
    assert [w["client_port"] for w in r.witnesses] == [40002]


def test_without_a_secured_listener_the_rule_does_not_apply(spark: Any, tmp_path: Path) -> None:
    run = hand_built_run(tmp_path, "plain", _tls(True), config_ns=T0 - S)
    assert check_quota_precedes_tls(load_run(spark, run)).verdict == "n/a"


def _charged(to: str) -> Any:
    def build(cw: HistoryWriter, aw: HistoryWriter, _hw: HistoryWriter) -> None:
        for n, port, who in ((1, 40001, "alice"), (2, 40002, to)):
            at = T0 + n * S
            _client(cw, port, at, tls_done=True, principal="alice")
            conn = _conn(aw, n, port, at + MS // 2, throttled=False)
            row = {"api_key": 36, "client_id": "c", "latency_ms": 1.0, "bytes": 10,
                   "processor": 0}  # fmt: skip
            # the login's own request: uncharged, recorded before the user is known
            login = {"charged_ms": 0.0, "charge_source": "login"}
            record(aw, "request", mono_ns=at + 10 * MS, principal="ANONYMOUS", detail=login,
                      **row, **conn)  # fmt: skip
            record(aw, "request", mono_ns=at + 20 * MS, principal=who,
                      **{**row, "api_key": 3}, **conn)  # fmt: skip

    return build


def test_requests_charged_to_the_clients_own_principal_pass(spark: Any, tmp_path: Path) -> None:
    run = hand_built_run(tmp_path, "same", _charged("alice"), config_ns=T0 - S, meta=SECURED)
    r = check_principal_agreement(load_run(spark, run))
    assert r.verdict == "pass", (r.observed, r.witnesses)
    assert r.judged == 2


def test_one_request_charged_to_another_principal_fails(spark: Any, tmp_path: Path) -> None:
    run = hand_built_run(tmp_path, "other", _charged("ANONYMOUS"), config_ns=T0 - S, meta=SECURED)
    r = check_principal_agreement(load_run(spark, run))
    assert r.verdict == "fail", r.observed
    assert [w["client_port"] for w in r.witnesses] == [40002]
    assert "charged to ['ANONYMOUS']" in r.witnesses[0]["why"]


def _named_without_requests(cw: HistoryWriter, aw: HistoryWriter, _hw: HistoryWriter) -> None:
    _client(cw, 40001, T0, tls_done=True, principal="alice")
    _conn(aw, 1, 40001, T0 + MS // 2, throttled=False)


@pytest.mark.parametrize("expected, verdict", [([], "n/a"), (["principal_agreement"], "unknown")])
@pytest.mark.parametrize("named", [False, True])
def test_no_request_charged_to_a_named_principal_is_nothing_to_judge(
    spark: Any, tmp_path: Path, expected: list[str], verdict: str, named: bool
) -> None:
    """No client named its principal, or one did and the acceptor charged no request."""
    meta = {**SECURED, "expect": {"checks": expected}}
    build = _named_without_requests if named else _tls(True)
    run = hand_built_run(tmp_path, f"none-{verdict}", build, config_ns=T0 - S, meta=meta)
    r = check_principal_agreement(load_run(spark, run))
    assert r.verdict == verdict, r.observed
    assert r.judged == 0 and not r.witnesses
