"""Client-side checks at the edges real runs hit: a client that gave up while its socket
still sat in the kernel backlog or was parked for its IP throttle, and steady victims
whose rows carry no connection of ours."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from analysis.checks.clients import check_agreement, check_fairness
from analysis.load import load_run
from base.history import HistoryWriter
from tests.handbuilt import record
from tests.spark.histories import hand_built_run

S = 1_000_000_000
T0 = 5_000 * S


def _run(tmp: Path, name: str, build: Any) -> Path:
    return hand_built_run(tmp, name, build, config_ns=T0)


def _backlog_case(client_closes_at: int) -> Any:
    def build(cw: HistoryWriter, aw: HistoryWriter, hw: HistoryWriter) -> None:
        addr = {"client_ip": "127.0.0.7", "client_port": 55580}
        record(cw, "connect_invoke", mono_ns=T0 + 1 * S, detail={"profile": "storm"}, **addr)
        record(cw, "connect_ok", mono_ns=T0 + 1 * S + 1_000, latency_ms=0.001, **addr)
        record(
            cw,
            "closed",
            mono_ns=client_closes_at,
            reason="timeout",
            detail={"outcome": "timeout", "profile": "storm"},
            **addr,
        )
        conn = {"conn_id": "CLIENT-1", "listener": "CLIENT", **addr}
        record(aw, "accept", mono_ns=T0 + 13 * S, **conn)
        record(
            aw,
            "throttle_close",
            mono_ns=T0 + 13 * S + 62_000_000,
            reason="ip_rate",
            delay_ms=62.0,
            detail={"throttle_start_mono_ns": T0 + 13 * S},
            **conn,
        )

    return build


def test_a_client_that_left_before_the_accept_is_not_a_disagreement(
    spark: Any, tmp_path: Path
) -> None:
    left_first = _run(tmp_path, "left-first", _backlog_case(T0 + 12 * S))
    result = check_agreement(load_run(spark, left_first))
    assert result.verdict == "pass", (result.observed, result.witnesses)


def test_a_client_still_there_that_saw_no_eof_is_a_disagreement(spark: Any, tmp_path: Path) -> None:
    stayed = _run(tmp_path, "stayed", _backlog_case(T0 + 20 * S))
    result = check_agreement(load_run(spark, stayed))
    assert result.verdict == "fail"
    assert result.witnesses and result.witnesses[0]["client_port"] == 55580


def test_a_client_that_left_while_parked_for_its_throttle_is_not_a_disagreement(
    spark: Any, tmp_path: Path
) -> None:
    # accepted at 13 s and parked for its IP throttle; the client timed out 1 ns before the
    # acceptor closed it (13.062 s): it could not see that close
    parked = _run(tmp_path, "parked", _backlog_case(T0 + 13 * S + 62_000_000 - 1))
    result = check_agreement(load_run(spark, parked))
    assert result.verdict == "pass", (result.observed, result.witnesses)
    # 1 ns after the close, still open: it must have seen the EOF
    late = _run(tmp_path, "parked-late", _backlog_case(T0 + 13 * S + 62_000_000 + 1))
    assert check_agreement(load_run(spark, late)).verdict == "fail"


def test_steady_rows_without_a_connection_still_count_for_fairness(
    spark: Any, tmp_path: Path
) -> None:
    def build(cw: HistoryWriter, aw: HistoryWriter, hw: HistoryWriter) -> None:
        storm = {"name": "storm", "profile": "storm", "intended_rate": 0}
        record(hw, "phase_start", mono_ns=T0 + 10 * S, detail=storm)
        record(hw, "phase_end", mono_ns=T0 + 20 * S, detail=storm)
        for i in range(40):  # 10 ms before the storm, 30 ms during it
            during = i >= 20
            record(
                cw,
                "request_ok",
                mono_ns=T0 + (10 * S if during else 0) + (i % 20) * (S // 2),
                api_key=0,
                latency_ms=30.0 if during else 10.0,
                detail={"profile": "steady", "offset": i},
            )

    # the ratio is measured where the scenario states a bound (without one: n/a, unmeasured)
    bound = {"expect": {"fairness_p99_ratio": 5.0}}
    run = hand_built_run(tmp_path, "steady", build, config_ns=T0, meta=bound)
    result = check_fairness(load_run(spark, run))
    assert "n=20/20" in str(result.observed), result.observed
    assert result.data.get("ratio") == 3.0
