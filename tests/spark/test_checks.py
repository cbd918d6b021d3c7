"""Every check passes on a conforming history and fails, with the right witnesses, on a
history that breaks its rule; short offered load turns would-be passes into unknown."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from analysis.checks import ALL_CHECKS, Check, CheckResult, run_check
from analysis.checks.base import merge
from analysis.load import load_run
from analysis.synth import SynthSpec, generate, write_rows
from analysis.verdict import run_checks

CHANGE = {"listener.name.client.max.connection.creation.rate": 20}


def _synth(root: Path, name: str, **kw: Any) -> Path:
    path = root / name
    if not (path / "run.json").exists():
        generate(path, SynthSpec(run_id=name, cycles=1, config_change=CHANGE, **kw))
    return path


def _results(spark: Any, run_dir: Path, names: list[str]) -> dict[str, CheckResult]:
    run = load_run(spark, run_dir)
    picked = [c for c in ALL_CHECKS if c.name in names or c.name == "offered_load"]
    return {r.name: r for r in run_checks(run, picked)}


BROKEN_CASES = [
    ("ip_count", ["max_connections_per_ip", "model_replay"], "127.0.0.9"),
    ("delay_over_window", ["rate_delay_within_window", "model_replay"], None),
    ("ip_rate", ["ip_rate_span", "model_replay"], "127.0.0.9"),
    ("broker_rate", ["broker_rate_span", "listener_rate_span", "model_replay"], None),
    ("protected_delayed", ["protected_listener_not_delayed"], "127.0.0.3"),
    ("queue_over", ["processor_queue_depth"], None),
    ("exempt_throttle", ["request_throttle_bounds"], None),
    ("client_disagree", ["client_acceptor_agreement"], None),
    ("lost_change", ["config_testimony"], None),
]


@pytest.mark.parametrize(
    "flag, failing, witness_ip", BROKEN_CASES, ids=[c[0] for c in BROKEN_CASES]
)
def test_broken_history_fails_its_check(
    spark: Any, synth_root: Path, flag: str, failing: list[str], witness_ip: str | None
) -> None:
    run_dir = _synth(synth_root, f"broken-{flag}", broken=frozenset({flag}))
    results = _results(spark, run_dir, failing)
    for name in failing:
        r = results[name]
        assert r.verdict == "fail", f"{name} on {flag}: {r.verdict} {r.observed} {r.explanation}"
        assert r.witnesses, f"{name} on {flag} failed without witnesses"
        for w in r.witnesses:
            assert w["why"] and ("conn_id" in w or "client_ip" in w or "mono_ns" in w)
        if witness_ip and name != "model_replay":
            assert all(w.get("client_ip") == witness_ip for w in r.witnesses), r.witnesses


def test_short_offered_load_turns_passes_into_unknown(spark: Any, synth_root: Path) -> None:
    run_dir = _synth(synth_root, "short", broken=frozenset({"short_load"}))
    results = _results(spark, run_dir, ["listener_rate_span", "processor_queue_depth"])
    assert results["offered_load"].verdict == "unknown"
    assert "intended" in results["offered_load"].observed
    assert results["listener_rate_span"].verdict == "unknown"  # needs the load
    assert "fell short" in results["listener_rate_span"].explanation
    assert "fell short" not in results["processor_queue_depth"].explanation  # does not need it


def test_crashed_check_is_unknown_never_pass(spark: Any, synth_root: Path) -> None:
    run = load_run(spark, _synth(synth_root, "conforming"))

    def boom(_run: Any) -> CheckResult:
        raise ZeroDivisionError("checker bug")

    res = run_check(Check("boom", "test", boom, False), run)
    assert res.verdict == "unknown"
    assert "ZeroDivisionError: checker bug" in res.observed
    assert merge(["pass", res.verdict]) == "unknown"
    assert merge(["unknown", "fail", "pass"]) == "fail"


def test_broker_target_checks_from_the_client_side(spark: Any, synth_root: Path) -> None:
    ok = _synth(synth_root, "broker-ok", target="broker")
    bad = _synth(synth_root, "broker-ip-rate", target="broker", broken=frozenset({"ip_rate"}))
    good = {r.name: r for r in run_checks(load_run(spark, ok))}
    # the client-side replay is a diagnostic on target broker (n/a, agreement reported)
    assert good["model_replay"].verdict == "n/a", good["model_replay"].observed
    assert not [n for n, r in good.items() if r.verdict == "fail"], {
        n: r.observed for n, r in good.items() if r.verdict == "fail"
    }
    broken = {r.name: r for r in run_checks(load_run(spark, bad))}
    # the diagnostic's agreement drops (which check must fail here is issue 12's broker-side
    # checks' business; at this size none does: noted in the report)
    replay = broken["model_replay"]
    assert replay.data["agreement"] < good["model_replay"].data["agreement"]


# ---- hand-built histories at the exact edges -------------------------------------------

RUN = {
    "run_id": "edge",
    "target": "acceptor",
    "limits": {
        "listeners": "CLIENT://127.0.0.1:9092",
        "listener.name.client.max.connection.creation.rate": 20,
    },
    "expect": {"slack_ms": 50},
}
T0 = 5_000_000_000_000


def _edge_rows(delay_of_201st: float | None, at_ms: int = 0) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [
        {"source": "harness", "event": "config", "mono_ns": T0 - 1, "detail": RUN["limits"]}
    ]
    for i in range(201):
        ns = T0 + i * 1000 + (at_ms * 1_000_000 if i == 200 else 0)
        cid = f"c-{i + 1}"
        common = {
            "conn_id": cid,
            "listener": "client",
            "ip": f"127.0.0.{10 + i % 50}",
            "port": 2000 + i,
        }
        rows.append({"source": "acceptor", "event": "accept", "mono_ns": ns, **common})
        wait = 0.0
        if i == 200 and delay_of_201st:
            wait = delay_of_201st
            rows.append(
                {
                    "source": "acceptor",
                    "event": "delay",
                    "mono_ns": ns,
                    "delay_ms": wait,
                    "reason": "listener_rate",
                    **common,
                }
            )
        rows.append(
            {
                "source": "acceptor",
                "event": "admit",
                "mono_ns": ns + int(wait * 1e6) + 10,
                "delay_ms": wait,
                **common,
            }
        )
    return rows


@pytest.mark.parametrize(
    "delay, at_ms, verdict",
    [
        (50.0, 0, "pass"),
        (None, 0, "fail"),
        (49.0, 0, "pass"),
        (40.0, 0, "fail"),
        (None, 999, "pass"),
        (50.0, 999, "fail"),
    ],
    ids=[
        "201st-delayed-50",
        "201st-not-delayed",
        "within-2ms",
        "10ms-off",
        "999ms-later-no-delay",
        "999ms-later-delayed",
    ],
)
def test_replay_at_the_201st_connection(
    spark: Any, tmp_path: Path, delay: float | None, at_ms: int, verdict: str
) -> None:
    run_dir = write_rows(tmp_path / "edge", _edge_rows(delay, at_ms), RUN)
    res = _results(spark, run_dir, ["model_replay"])["model_replay"]
    assert res.verdict == verdict, res.observed
    if verdict == "fail":
        assert [w["conn_id"] for w in res.witnesses] == ["c-201"]
        assert "rate delay ms" in res.witnesses[0]["why"]
    assert json.loads(json.dumps(res.to_dict()))["name"] == "model_replay"
