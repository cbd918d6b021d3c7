"""The reference passes table (bench.kafka_reference.passes_table)."""

from __future__ import annotations

from bench.kafka_reference import passes_table


def _row(name: str, verdict: str, bad: list[str], spans: dict[str, str]) -> dict[str, object]:
    return {
        "scenario": name,
        "broker": {
            "verdict": "pass",
            "broker_verdict": verdict,
            "not_passing": bad,
            "spans": spans,
            "peaks": {},
        },
        "acceptor": {"verdict": "pass"},
    }


def test_passes_side_by_side() -> None:
    p1 = [_row("ci-gate", "pass", ["model_replay=unknown"], {"client_ip_rate_span": "35/36"})]
    p2 = [
        _row("ci-gate", "pass", [], {"client_ip_rate_span": "34/36"}),
        _row("listener-max", "unknown", ["client_connection_count=unknown"], {}),
    ]
    text = passes_table([("1", p1), ("2", p2)])
    lines = text.splitlines()
    assert lines[0].startswith("| scenario | 1 | 2 |")
    assert "| `ci-gate` | PASS | PASS | - | 1: ip 35/36<br>2: ip 34/36 |" in lines
    assert "| `listener-max` | - | UNKNOWN | 2: client_connection_count=unknown | - |" in lines
