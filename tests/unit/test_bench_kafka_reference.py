"""The reference passes table (bench.kafka_reference.passes_table)."""

from __future__ import annotations

import pytest

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


def test_the_release_matrix_runs_each_scenario_per_release_and_writes_its_table(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--versions`: one column per release, each run with its `--kafka-version`; the
    table goes into the doc between its own markers, and to JSON and HTML."""
    from pathlib import Path

    import bench.kafka_reference as kr

    tmp = Path(str(tmp_path))
    calls: list[tuple[str, str | None]] = []

    def fake_run(
        name: str, target: str, out: Path, kafka_version: str | None = None, extra: object = ()
    ) -> Path:
        assert extra == []  # no per-worker phase: no worker hosts
        calls.append((name, kafka_version))
        return out / f"{name}-{kafka_version}"

    def fake_summary(run_dir: Path | None) -> dict[str, object]:
        bad = ["client_ip_rate_span=fail"] if run_dir and "2.8.2" in run_dir.name else []
        spans = {"client_ip_rate_span": "33/36"}
        return {"verdict": "pass", "broker_verdict": "fail" if bad else "pass",
                "not_passing": bad, "spans": spans, "peaks": {}}  # fmt: skip

    monkeypatch.setattr(kr, "run_one", fake_run)
    monkeypatch.setattr(kr, "summarise", fake_summary)
    doc = tmp / "versions.md"
    doc.write_text("# Versions\n")
    assert kr.main(["--versions", "2.8.2,4.4.0", "--scenarios", "ci-gate,broker-rate",
                    "--out", str(tmp / "m"), "--doc", str(doc)]) == 0  # fmt: skip
    assert calls == [("ci-gate", "2.8.2"), ("broker-rate", "2.8.2"), ("ci-gate", "4.4.0"),
                     ("broker-rate", "4.4.0")]  # fmt: skip
    text = doc.read_text()
    assert kr.MATRIX_BEGIN in text and "| scenario | 2.8.2 | 4.4.0 |" in text
    assert "| `ci-gate` | FAIL | PASS | 2.8.2: client_ip_rate_span=fail |" in text
    assert (tmp / "m" / "matrix.json").is_file() and "<table>" in (
        tmp / "m" / "matrix.html"
    ).read_text()


def test_a_per_worker_scenario_runs_on_worker_hosts_or_is_skipped_saying_why(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`hosts-ip-rate` (`source_ips: per-worker`, workers: 3) gets `--workers 3
    --worker-netns` where namespaces can be made; elsewhere it is not run, and its row
    says why; a scenario without such a phase gets nothing extra."""
    from pathlib import Path

    import bench.kafka_reference as kr
    from harness.runner import netns

    monkeypatch.setattr(netns, "permitted", lambda: None)
    assert kr.worker_hosts_args("hosts-ip-rate") == ["--workers", "3", "--worker-netns"]
    assert kr.worker_hosts_args("ci-gate") == []

    monkeypatch.setattr(netns, "permitted", lambda: "ip netns add: not root")
    why = kr.worker_hosts_args("hosts-ip-rate")
    assert why == "its 3 worker hosts need network namespaces: ip netns add: not root"
    ran: list[tuple[str, object]] = []

    def fake_run(name: str, target: str, out: Path, kafka_version: object = None,
                 extra: object = ()) -> None:  # fmt: skip
        ran.append((name, extra))

    monkeypatch.setattr(kr, "run_one", fake_run)
    tmp = Path(str(tmp_path))
    doc = tmp / "ref.md"
    args = ["--scenarios", "hosts-ip-rate,ci-gate", "--out", str(tmp / "r"), "--doc", str(doc)]
    args += ["--acceptor-runs", str(tmp / "none")]
    assert kr.main(args) == 0
    assert ran == [("ci-gate", [])]
    (row,) = [ln for ln in doc.read_text().splitlines() if ln.startswith("| `hosts-ip-rate`")]
    assert row.startswith(f"| `hosts-ip-rate` | SKIPPED | - | {why} |"), row
