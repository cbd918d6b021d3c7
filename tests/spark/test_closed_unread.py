"""A rejected connection its client closed itself before reading anything (reason `done`:
a kafka-python consumer's own close while the connection was still initialising, as at
the end of the `ip-count` scenario's steady phase) saw nothing of the acceptor's close
either way: `ip_count_reject_closes_at_once` and `client_acceptor_agreement` do not judge
it, within the slack of the reject. Past the slack, or with a real error, or with an EOF
the engine saw late, they still fail."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from analysis.checks.clients import check_agreement
from analysis.checks.processors import check_reject_closes_at_once
from analysis.load import load_run
from base.history import HistoryWriter
from tests.handbuilt import record
from tests.spark.histories import hand_built_run

MS = 1_000_000
S = 1000 * MS
T0 = 9_000 * S
SLACK_MS = 50  # the default slack (run.json expect.slack_ms unset)
PORT = 47011


def _run(tmp: Path, name: str, profile: str, reason: str, after_ms: float) -> Path:
    """One connection from 127.0.0.9 the acceptor rejected for the per-IP count 1 s after
    its connect; its client had no response and closed it `after_ms` after the reject
    with `reason` (`done` its own close, `error` a failure, `eof` the acceptor's close)."""
    reject = T0 + 2 * S

    def build(cw: HistoryWriter, aw: HistoryWriter, hw: HistoryWriter) -> None:
        record(hw, "config", mono_ns=T0 + 1, detail={"max.connections.per.ip": 1})
        addr = {"client_ip": "127.0.0.9", "client_port": PORT}
        client = {"conn_id": "s77-1", "listener": "CLIENT", **addr}
        record(cw, "connect_invoke", mono_ns=T0 + S, detail={"profile": profile}, **client)
        record(cw, "connect_ok", mono_ns=T0 + S + MS, latency_ms=1.0, **client)
        conn = {"conn_id": "CLIENT-1", "listener": "CLIENT", **addr}
        record(aw, "accept", mono_ns=reject - 10_000, **conn)
        record(aw, "reject", mono_ns=reject, reason="ip_count", **conn)
        outcome = "eof_after_accept" if reason == "eof" else "timeout"
        closed_at = reject + int(after_ms * MS)
        record(
            cw,
            "closed",
            mono_ns=closed_at,
            reason=reason,
            latency_ms=(closed_at - T0 - S) / MS,
            detail={"outcome": outcome, "profile": profile},
            **client,
        )

    return hand_built_run(tmp, name, build, config_ns=T0)


def _part(result: Any, name: str) -> Any:
    return next(p for p in result.parts if p.name == name)


@pytest.mark.parametrize("profile", ["steady", "storm"])
def test_a_client_that_closed_itself_before_reading_is_not_judged(
    spark: Any, tmp_path: Path, profile: str
) -> None:
    """The ip-count run's connection: closed by the client itself 5 ms after the reject,
    nothing read. Neither check counts it as a failure nor as a client that saw the close."""
    run = load_run(spark, _run(tmp_path, f"own-{profile}", profile, "done", 5.0))
    rej = check_reject_closes_at_once(run)
    assert rej.verdict == "pass", (rej.observed, rej.witnesses)
    assert not rej.witnesses
    assert "1 closed by the client itself before reading (not judged)" in rej.observed
    client = _part(rej, "client EOF, never served")
    assert client.judged == 0 and "1 not judged" in client.note, client
    assert _part(rej, "close timing").judged == 0
    agree = check_agreement(run)
    assert agree.verdict == "pass", (agree.observed, agree.witnesses)
    assert "0 of those disagree, 1 not judged" in agree.observed, agree.observed
    assert agree.judged == 0 and not agree.witnesses
    both = _part(agree, "both ends agree on each matched connection")
    assert both.judged == 0 and "1 not judged" in both.note, both


@pytest.mark.parametrize(
    "profile, reason, after_ms",
    [
        ("steady", "done", SLACK_MS + 1),  # held open past the slack, no EOF: it could look
        ("storm", "done", SLACK_MS + 1),
        ("steady", "error", 5.0),  # a failure, not its own close
        ("storm", "timeout", 5.0),
    ],
    ids=["steady-own-close-past-slack", "storm-own-close-past-slack", "error", "timeout"],
)
def test_past_the_slack_or_not_its_own_close_it_still_fails(
    spark: Any, tmp_path: Path, profile: str, reason: str, after_ms: float
) -> None:
    name = f"{profile}-{reason}-{after_ms}"
    run = load_run(spark, _run(tmp_path, name, profile, reason, after_ms))
    rej = check_reject_closes_at_once(run)
    assert rej.verdict == "fail", (rej.observed, rej.witnesses)
    assert rej.witnesses[0]["client_port"] == PORT
    assert "client saw no EOF" in rej.witnesses[0]["why"], rej.witnesses
    assert "not judged" not in rej.observed
    agree = check_agreement(run)
    assert agree.verdict == "fail", (agree.observed, agree.witnesses)
    assert "saw no EOF" in agree.witnesses[0]["why"], agree.witnesses
    assert "not judged" not in agree.observed


def test_an_eof_the_engine_saw_past_the_slack_still_fails(spark: Any, tmp_path: Path) -> None:
    """The same connection with the acceptor's close seen 1 ms past the slack by the storm
    engine (which watches its socket): late, whatever the not-judged rule excuses."""
    run = load_run(spark, _run(tmp_path, "storm-eof-late", "storm", "eof", SLACK_MS + 1))
    rej = check_reject_closes_at_once(run)
    assert rej.verdict == "fail", (rej.observed, rej.witnesses)
    assert "after the reject (> slack 50 ms)" in rej.witnesses[0]["why"], rej.witnesses
    on_time = load_run(spark, _run(tmp_path, "storm-eof", "storm", "eof", SLACK_MS - 1))
    assert check_reject_closes_at_once(on_time).verdict == "pass"
