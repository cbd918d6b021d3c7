"""The shipped catalog: every file valid, named for itself, covering every limit the issue lists."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.runner import catalog
from harness.runner.admin_changes import admin_listener
from harness.runner.loadgen import LoadTarget, locust_argv, max_arrivals
from harness.runner.scenario import (
    CLOSED_PROFILES,
    PER_WORKER,
    ScenarioError,
    expand_ips,
    parse_scenario,
)

ENTRIES = catalog.entries()


def test_catalog_has_no_broken_file() -> None:
    broken = [(e.path.name, e.error) for e in ENTRIES if e.scenario is None]
    assert broken == []


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.path.stem for e in ENTRIES])
def test_scenario_is_short_named_and_states_checks(entry: catalog.Entry) -> None:
    sc = entry.scenario
    assert sc is not None
    assert sc.name == entry.path.stem
    assert 20 <= sc.duration <= 60, "catalog scenarios stay short enough to run the whole catalog"
    assert sc.expect.checks, "every scenario states its expected checks"
    assert sc.covers
    profiles = Path(catalog.catalog_dir()).parent
    for phase in sc.load:
        assert (profiles / f"{phase.profile}.py").name.endswith(".py")
        if phase.source_ips != PER_WORKER:  # else each worker host's own (198.18.0.0/15)
            assert all(ip.startswith("127.") for ip in expand_ips(phase.source_ips))
        if phase.profile not in CLOSED_PROFILES:
            assert phase.users == 1, "arrival profiles run one driver user per process"


def test_catalog_covers_every_limit_of_the_issue() -> None:
    scenarios = {e.scenario.name: e.scenario for e in ENTRIES if e.scenario}
    assert {"demo-storm", "ci-gate"} <= set(scenarios)
    covered = " | ".join(c for sc in scenarios.values() for c in sc.covers)
    for needle in [
        "max.connection.creation.rate",
        "listener.name.<l>.max.connection.creation.rate",
        "ip default",
        "ip override",
        "max.connections.per.ip",
        "protected inter-broker listener",
        "per-request",
        "single-IP flood",
        "HAProxy",
        "request_percentage",
        "changed at run time",
        "fairness",
        "broker pause",
        "broker kill",
        "upstream latency",
    ]:
        assert needle in covered, needle
    items = {c for sc in scenarios.values() for c in sc.covers}
    assert "max.connections" in items  # the broker-wide count, not only the per-IP one
    assert any(sc.expect.fairness_p99_ratio for sc in scenarios.values())
    assert any(
        p.via == "haproxy" and p.proxy_protocol == "v2"
        for sc in scenarios.values()
        for p in sc.load
    )
    assert any(a.kind == "ip_quota" for sc in scenarios.values() for a in sc.schedule)


def test_fast_scenarios_stay_fast() -> None:
    for name in ("ci-gate", "demo-storm"):
        sc = catalog.load(name)
        assert sc.duration <= 30
        assert not sc.faults


def test_lookup_errors() -> None:
    with pytest.raises(ScenarioError, match="not in the catalog"):
        catalog.load("no-such-scenario")
    with pytest.raises(ScenarioError, match="no such file"):
        catalog.scenario_path("/nonexistent/x.yaml")


def test_locust_command_line_for_a_phase(tmp_path: Path) -> None:
    sc = parse_scenario(
        {
            "name": "argv",
            "description": "argv",
            "duration": 20,
            "load": [
                {
                    "name": "flood",
                    "profile": "single_ip_flood",
                    "arrival": "constant:rate=50",
                    "source_ips": "127.0.0.9",
                    "proxy_protocol": "v2",
                    "proxy_client_ips": "127.0.0.100-127.0.0.109",
                    "start": 2,
                    "stop": 12,
                },
                {"name": "steady", "profile": "steady", "users": 3},
            ],
        }
    )
    flood, steady = sc.load
    argv = locust_argv(
        flood,
        locust_bin="locust",
        profile_dir=tmp_path,
        run_dir=tmp_path / "run",
        target=LoadTarget("127.0.0.1", 9092, "http://127.0.0.1:1/metrics"),
        run_id="r1",
        seed=5,
    )
    text = " ".join(argv)
    assert argv[:4] == ["locust", "-f", str(tmp_path / "single_ip_flood.py"), "--headless"]
    for part in (
        "-t 10s",
        "--host kafka://127.0.0.1:9092",
        "--arrival constant:rate=50",
        "--source-ips 127.0.0.9",
        "--proxy-protocol v2",
        "--proxy-client-ips 127.0.0.100-127.0.0.109",
        "--run-id r1",
        "--seed 5",
        f"--csv {tmp_path / 'run' / 'locust' / 'flood'}",
        "--listener-name CLIENT",
        "--metrics-url http://127.0.0.1:1/metrics",
        "-u 1",
    ):
        assert part in text, part
    assert int(argv[argv.index("--max-arrivals") + 1]) == max_arrivals(flood) == 50 * 10
    assert "--command-config" not in argv
    secured = LoadTarget("127.0.0.1", 9093, command_config="/run/private/client.properties")
    argv = locust_argv(
        flood, locust_bin="locust", profile_dir=tmp_path, run_dir=tmp_path, target=secured,
        run_id="r1", seed=5,
    )  # fmt: skip
    assert argv[argv.index("--command-config") + 1] == "/run/private/client.properties"
    web = locust_argv(
        steady,
        locust_bin="locust",
        profile_dir=tmp_path,
        run_dir=tmp_path,
        target=LoadTarget("127.0.0.1", 9092),
        run_id="r1",
        seed=5,
        web_port=8099,
    )
    assert "--headless" not in web and "--arrival" not in web
    assert web[web.index("--web-port") + 1] == "8099" and "--autostart" in web
    assert web[web.index("-u") + 1] == "3"


def test_max_arrivals_is_the_intended_count() -> None:
    def phase(arrival: str) -> Any:
        sc = parse_scenario(
            {
                "name": "s",
                "description": "s",
                "duration": 30,
                "load": [{"profile": "storm", "arrival": arrival}],
            }
        )
        return sc.load[0]

    assert max_arrivals(phase("spike:base=5,peak=200,at=10,for=2")) == 5 * 28 + 200 * 2
    assert max_arrivals(phase("ramp:from=0,to=100,over=30")) == 1500
    assert max_arrivals(phase("poisson:rate=10")) == 300


def _argv(phase: Any, tmp_path: Path, **kw: Any) -> list[str]:
    return locust_argv(
        phase,
        locust_bin="locust",
        profile_dir=tmp_path,
        run_dir=tmp_path,
        target=LoadTarget("127.0.0.1", 9092),
        run_id="r",
        seed=1,
        **kw,
    )


def test_haproxy_phase_lets_haproxy_write_the_header(tmp_path: Path) -> None:
    sc = catalog.load("haproxy-flood")
    assert len(sc.load) == 3  # an override client, a quiet one and a flooding one
    for phase in sc.load:
        argv = _argv(phase, tmp_path)
        assert argv[argv.index("--via-haproxy") + 1] == "v2"
        assert argv[argv.index("--proxy-protocol") + 1] == "off"
    assert sc.targets == ("acceptor",)
    assert sc.proxy_protocol == {"CLIENT": "required"}
    assert admin_listener(sc) == "REPLICATION"


def test_locust_run_time_gets_the_startup_allowance(tmp_path: Path) -> None:
    sc = catalog.load("ci-gate")
    (phase,) = sc.load
    argv = _argv(phase, tmp_path, startup_allowance_s=4.5)
    assert argv[argv.index("-t") + 1] == f"{int(sc.duration) + 5}s"
    # the arrival count, not the run time, ends the phase on schedule
    assert argv[argv.index("--max-arrivals") + 1] == str(int(60 * sc.duration))


def test_expected_checks_are_checks_the_analysis_has() -> None:
    checks = pytest.importorskip("analysis.checks")
    known = {c.name for c in checks.ALL_CHECKS}
    for entry in ENTRIES:
        assert entry.scenario is not None
        for target in entry.scenario.targets:
            unknown = set(entry.scenario.expect_for(target).checks) - known
            assert not unknown, f"{entry.scenario.name}: {sorted(unknown)} not in {sorted(known)}"
