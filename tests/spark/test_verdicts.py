"""The verdict vocabulary: n/a is not a pass, an unexercised limit is unknown (exit 2),
a scenario's expected checks must be exercised, and n/a is shown apart."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from analysis.checks.base import merge
from analysis.synth import write_rows
from harness.cli import main
from tests.spark.test_checks import RUN, _edge_rows

T0 = 7_000_000_000_000
S = 1_000_000_000

#: limits configured but never approached: 1 conn/s against 20/s, 50 and 5 at once
IDLE_LIMITS = {
    "listeners": "CLIENT://127.0.0.1:9092",
    "max.connection.creation.rate": 20,
    "max.connections": 50,
    "max.connections.per.ip": 5,
}


def _idle_rows(n: int = 30) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [
        {"source": "harness", "event": "config", "mono_ns": T0 - 1, "detail": IDLE_LIMITS}
    ]
    for i in range(n):
        ns = T0 + i * S
        common = {
            "conn_id": f"i-{i}",
            "listener": "client",
            "ip": f"127.0.0.{10 + i % 3}",
            "port": 3000 + i,
        }
        rows.append({"source": "acceptor", "event": "accept", "mono_ns": ns, **common})
        rows.append({"source": "acceptor", "event": "admit", "mono_ns": ns + 100_000, **common})
        rows.append(
            {"source": "acceptor", "event": "register", "mono_ns": ns + 200_000, **common,
             "detail": {"queue_depth": 1}}
        )  # fmt: skip
        rows.append({"source": "acceptor", "event": "close", "mono_ns": ns + S // 2, **common})
    return rows


def test_merge_na_counts_for_nothing() -> None:
    assert merge(["n/a", "pass"]) == "pass"
    assert merge(["n/a", "unknown", "pass"]) == "unknown"
    assert merge(["n/a", "n/a"]) == "n/a"
    assert merge(["fail", "n/a"]) == "fail"


def test_configured_but_unexercised_limits_exit_2_with_peak_vs_limit(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = {"run_id": "idle", "target": "acceptor", "limits": IDLE_LIMITS}
    run_dir = write_rows(tmp_path / "idle", _idle_rows(), run)
    assert main(["analyze", str(run_dir), "--gate", "--quiet", "--no-html"]) == 2
    out = capsys.readouterr().out
    assert "verdict: UNKNOWN" in out
    verdict = json.loads((run_dir / "report" / "verdict.json").read_text())
    checks = {c["name"]: c for c in verdict["checks"]}
    assert not verdict["exercised"]
    assert any("nothing configured was exercised" in r for r in verdict["reasons"])
    for name, peak, limit in (
        ("max_connections", 1, 50),
        ("max_connections_per_ip", 1, 5),
        ("broker_rate_span", 11, 200),
        # CLIENT sets no limit of its own: it inherits the broker-wide ones (Kafka's
        # valuesWithPrefixOverride), so its checks are configured too, and unexercised
        ("listener_max_connections", 1, 50),
        ("listener_rate_span", 11, 200),
    ):
        c = checks[name]
        assert c["verdict"] == "unknown", (name, c)
        assert c["exercised"] is False and "not exercised" in c["observed"], c
        assert c["peak"] == peak and c["limit"] == limit, c
        assert c["judged"] > 0
    # not configured at all: n/a, never pass
    assert checks["ip_rate_span"]["verdict"] == "n/a", checks["ip_rate_span"]
    # what may pass judges no configured limit (queue depth, the model's agreement)
    assert not [n for n, c in checks.items() if c["verdict"] == "pass" and c["exercised"]]


def test_na_is_skipped_in_junit_and_shown_apart_in_report(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = write_rows(tmp_path / "edge-ok", _edge_rows(50.0), RUN)
    assert main(["analyze", str(run_dir), "--gate", "--quiet"]) == 0
    verdict = json.loads((run_dir / "report" / "verdict.json").read_text())
    checks = {c["name"]: c for c in verdict["checks"]}
    assert checks["listener_rate_span"]["verdict"] == "pass"
    assert checks["listener_rate_span"]["exercised"] is True
    assert "listener_rate_span" in verdict["exercised"]
    na = [n for n, c in checks.items() if c["verdict"] == "n/a"]
    assert "max_connections" in na and "ip_rate_span" in na
    assert verdict["counts"]["n/a"] == len(na)
    suite = ET.parse(run_dir / "report" / "junit.xml").getroot()
    for name in na:
        case = suite.find(f".//testcase[@name='{name}']")
        assert case is not None
        skipped = case.find("skipped")
        assert skipped is not None and (skipped.get("message") or "").startswith("n/a: ")
    html = (run_dir / "report" / "report.html").read_text()
    assert "Not applicable (n/a)" in html and 'class="na"' in html
    passed_rows = html.split("Not applicable (n/a)")[0]
    assert all(f'<td class="name">{n}</td>' not in passed_rows for n in na)


def test_expected_check_not_exercised_is_unknown_naming_the_load(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = {**RUN, "expect": {"slack_ms": 50, "checks": ["listener_rate_span", "ip_rate_span"]}}
    run_dir = write_rows(tmp_path / "edge-expect", _edge_rows(50.0), run)
    assert main(["analyze", str(run_dir), "--gate", "--quiet", "--no-html"]) == 2
    verdict = json.loads((run_dir / "report" / "verdict.json").read_text())
    assert verdict["verdict"] == "unknown"
    why = " ".join(verdict["reasons"])
    assert "ip_rate_span" in why and "raise" in why and "listener_rate_span" not in why
    run_ok = {**RUN, "expect": {"slack_ms": 50, "checks": ["listener_rate_span"]}}
    ok_dir = write_rows(tmp_path / "edge-expect-ok", _edge_rows(50.0), run_ok)
    assert main(["analyze", str(ok_dir), "--gate", "--quiet", "--no-html"]) == 0


def test_no_client_rows_on_broker_target_is_a_clear_unknown(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [{"source": "harness", "event": "config", "mono_ns": T0, "detail": IDLE_LIMITS}]
    rows.append({"source": "harness", "event": "phase_start", "mono_ns": T0 + 1})
    run = {"run_id": "noclient", "target": "broker", "limits": IDLE_LIMITS}
    run_dir = write_rows(tmp_path / "noclient", rows, run)
    assert main(["analyze", str(run_dir), "--gate", "--quiet", "--no-html"]) == 2
    verdict = json.loads((run_dir / "report" / "verdict.json").read_text())
    assert verdict["checks"] and all(c["verdict"] == "unknown" for c in verdict["checks"])
    assert all("no client rows" in c["observed"] for c in verdict["checks"])


@pytest.mark.parametrize(
    "missing, verdict", [(None, "pass"), (4, "fail"), (9, "pass")], ids=["all", "mid", "last"]
)
def test_agreement_explains_every_acceptor_connection_no_client_made(
    spark: Any, tmp_path: Path, missing: int | None, verdict: str
) -> None:
    """10 acceptor connections a second apart; the client recorded all but `missing`.
    Disagreement is not absence: one the enforcer saw in the middle of the load that no
    client made fails; one after the last client row (the load had stopped) is explained."""
    from analysis.checks import ALL_CHECKS
    from analysis.load import load_run
    from analysis.verdict import run_checks

    rows: list[dict[str, Any]] = [
        {"source": "harness", "event": "config", "mono_ns": T0 - 1, "detail": IDLE_LIMITS}
    ]
    for i in range(10):
        ns = T0 + i * S
        c = {"conn_id": f"a-{i}", "listener": "client", "ip": "127.0.0.10", "port": 7000 + i}
        rows += [
            {"source": "acceptor", "event": "accept", "mono_ns": ns, **c},
            {"source": "acceptor", "event": "admit", "mono_ns": ns + 100_000, **c},
        ]
        if i != missing:
            k = {"listener": "client", "ip": "127.0.0.10", "port": 7000 + i}
            rows += [
                {"source": "client", "event": "connect_invoke", "mono_ns": ns - 500_000, **k},
                {"source": "client", "event": "connect_ok", "mono_ns": ns - 400_000, **k},
                {"source": "client", "event": "ready", "mono_ns": ns + 2_000_000,
                 "latency_ms": 2.4, **k},
            ]  # fmt: skip
    name = f"m{missing}"
    run_dir = write_rows(tmp_path / name, rows, {"run_id": name, "target": "acceptor"})
    run = load_run(spark, run_dir)
    picked = [c for c in ALL_CHECKS if c.name == "client_acceptor_agreement"]
    r = run_checks(run, picked)[0]
    assert r.verdict == verdict, r.observed
    assert r.judged == (10 if missing is None else 9)
    if verdict == "fail":
        assert r.witnesses[0]["client_ip"] == "127.0.0.10" and r.witnesses[0]["connections"] == 1


def test_broker_target_judges_expected_checks_by_their_client_side_equivalents() -> None:
    from types import SimpleNamespace

    from analysis.checks.base import PASS, UNKNOWN, CheckResult
    from analysis.verdict import build_verdict

    def run(target: str) -> Any:
        return SimpleNamespace(
            meta={"run_id": "r"},
            expect={"checks": ["broker_rate_span"]},
            target=target,
            run_dir=Path("r"),
            timeline=SimpleNamespace(changes=[]),
        )

    client_side = CheckResult(
        "client_broker_rate_span", PASS, "30 ≤ 36", "≤ 36", judges_limit=True, exercised=True
    )
    # on a broker run the acceptor check cannot run; its client-side equivalent stands for it
    assert build_verdict(run("broker"), [client_side])["verdict"] == PASS
    # on an acceptor run the expected check itself must be there
    verdict = build_verdict(run("acceptor"), [client_side])
    assert verdict["verdict"] == UNKNOWN
    assert any("broker_rate_span did not run" in r for r in verdict["reasons"])
