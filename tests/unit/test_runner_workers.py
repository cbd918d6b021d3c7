"""Load from many hosts, the runner's side: the scenario keys, the master's command line,
worker entities, the roster judged into incomplete-history markers the analysis reads, the
worker hosts' addresses (harness.runner.workers, loadgen, scenario, netns; no Locust)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from base.history.writer import incomplete_markers
from harness.runner import netns
from harness.runner.loadgen import LoadTarget, Workers, locust_argv
from harness.runner.scenario import PER_WORKER, ScenarioError, parse_scenario
from harness.runner.worker_cli import locust_worker_argv, master_address
from harness.runner.workers import judge, problems_before_start, resolve_entities
from loadprofiles.addresses import AddressSpecError, parse_ip_pool, parse_target

pytestmark = pytest.mark.unit

SPEC: dict[str, Any] = {
    "name": "hosts",
    "description": "per-worker addresses",
    "duration": 10,
    "workers": 3,
    "ip_quotas": {"default": 5, "worker:2": 1},
    "load": [
        {
            "name": "storm",
            "profile": "storm",
            "arrival": "constant:rate=30",
            "source_ips": PER_WORKER,
        }
    ],
}


def test_a_scenario_may_ask_for_workers_and_per_worker_addresses() -> None:
    sc = parse_scenario(SPEC)
    assert sc.workers == 3 and sc.load[0].source_ips == PER_WORKER
    assert sc.ip_quotas == {"default": 5, "worker:2": 1}


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"workers": -1}, "workers"),
        ({"workers": 201}, "workers"),
        ({"ip_quotas": {"worker:0": 1}}, "ip_quotas.worker:0"),
        ({"ip_quotas": {"worker:x": 1}}, "ip_quotas.worker:x"),
        (
            {"load": [{"profile": "steady", "users": 1, "source_ips": PER_WORKER}]},
            "load[0].source_ips",
        ),
    ],
)
def test_bad_worker_keys_are_named(change: dict[str, Any], key: str) -> None:
    with pytest.raises(ScenarioError) as info:
        parse_scenario({**SPEC, **change})
    assert info.value.key == key


def _argv(workers: Workers | None) -> list[str]:
    sc = parse_scenario(SPEC)
    return locust_argv(
        sc.load[0],
        locust_bin="locust",
        profile_dir=Path("p"),
        target=LoadTarget("198.18.4.1", 9092),
        run_dir=Path("r"),
        run_id="x",
        seed=1,
        workers=workers,
    )


def _value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_a_phase_on_workers_is_a_master_that_waits_for_them_and_splits_its_arrivals() -> None:
    argv = _argv(Workers(3, "198.18.4.1", 40001, 60.0))
    assert "--master" in argv and "--headless" in argv
    assert _value(argv, "--master-bind-host") == "198.18.4.1"
    assert _value(argv, "--master-bind-port") == "40001"
    assert _value(argv, "--expect-workers") == "3"
    assert _value(argv, "--expect-workers-max-wait") == "60"
    assert _value(argv, "--arrival-slots") == "3"
    assert _value(argv, "--history-home") == "channel"
    assert _value(argv, "-u") == "3"  # one (idle) user per worker
    assert _value(argv, "--source-ips") == ""  # each worker's own address
    assert _value(argv, "--host") == "kafka://198.18.4.1:9092"
    lone = _argv(None)
    assert "--master" not in lone and "--history-home" not in lone


def test_worker_entities_become_the_hosts_addresses() -> None:
    hosts = ["198.18.4.11", "198.18.4.12", "198.18.4.13"]
    assert resolve_entities({"default": 5, "worker:2": 1}, hosts) == {
        "default": 5,
        "198.18.4.12": 1,
    }
    with pytest.raises(ValueError, match=r"ip_quotas.worker:4=1: the run has worker hosts 1-3"):
        resolve_entities({"worker:4": 1}, hosts)


def test_a_lost_worker_is_marked_where_the_analysis_reads_an_incomplete_history(
    tmp_path: Path,
) -> None:
    ready = tmp_path / "loadgen" / "storm"
    ready.mkdir(parents=True)
    roster = {
        "workers": {
            "a": {
                "index": 0,
                "host": "h",
                "pid": 5,
                "addresses": ["198.18.4.11"],
                "files": ["f"],
                "rows_reported": 40,
                "rows_received": 40,
                "done": {"rows": 40, "files": 1},
            },
            "b": {
                "index": 1,
                "host": "h",
                "pid": 6,
                "addresses": ["198.18.4.12"],
                "files": [],
                "rows_reported": 250,
                "rows_received": 0,
                "gone": True,
            },
        }
    }
    (ready / "workers.json").write_text(json.dumps(roster))
    hosts = ["198.18.4.11", "198.18.4.12", "198.18.4.13"]
    found, summary = judge(ready, 3, hosts, tmp_path / "history" / "client")
    assert [(p.worker.split()[0], p.rows_lost) for p in found] == [
        ("1", 250),
        ("198.18.4.13", None),
    ]
    assert [w["index"] for w in summary] == [0, 1]
    markers = incomplete_markers(tmp_path / "history")
    assert len(markers) == 2
    lost = {m["writer"]: (m["reason"], m["rows_lost"]) for m in markers}
    assert lost["worker 1 (198.18.4.12, host h pid 6) of phase storm"] == (
        "went missing mid-phase after its last report of 250 rows (at least these); its "
        "history did not arrive",
        250,
    )
    assert lost["worker 198.18.4.13 of phase storm"] == ("never joined the master", None)


def test_a_phase_whose_workers_never_came_says_who(tmp_path: Path) -> None:
    why = problems_before_start(tmp_path, 2, ["198.18.4.11", "198.18.4.12"])
    assert why == (
        "0 of 2 worker(s) joined its master; never joined: 198.18.4.11, 198.18.4.12; "
        "the phase did not start"
    )


def test_worker_hosts_take_addresses_from_the_benchmarking_range_only() -> None:
    hosts = netns.WorkerHosts(7, 3)
    assert hosts.host == "198.18.7.1"
    assert hosts.addresses == ["198.18.7.11", "198.18.7.12", "198.18.7.13"]
    assert (hosts.bridge, hosts.namespace(2)) == ("hkw7br", "hkw7n2")
    assert all(netns.subnet(i).subnet_of(netns.RANGE) for i in netns.INDEXES)
    assert max(len(f"hkw{i}v{netns.MAX_HOSTS}") for i in netns.INDEXES) <= 15  # IFNAMSIZ
    with pytest.raises(netns.NetnsError):
        netns.worker_address(7, netns.MAX_HOSTS + 1)


def test_load_may_aim_at_the_benchmarking_range_and_nowhere_else() -> None:
    assert parse_target("kafka://198.18.7.1:9092") == ("198.18.7.1", 9092)
    assert parse_ip_pool("198.19.255.254") == ("198.19.255.254",)
    for bad in ("10.0.0.1:9092", "192.168.1.1:9092", "198.20.0.1:9092"):
        with pytest.raises(AddressSpecError, match=r"outside 127\.0\.0\.0/8"):
            parse_target(bad)


def test_harness_worker_runs_a_locust_worker_that_takes_its_profile_from_the_master() -> None:
    assert master_address("198.18.7.1:5557") == ("198.18.7.1", 5557)
    argv = locust_worker_argv("198.18.7.1", 5557, 2)
    assert argv[1:] == [
        "-f",
        "-",
        "--worker",
        "--master-host",
        "198.18.7.1",
        "--master-port",
        "5557",
        "--processes",
        "2",
    ]
    import argparse

    for bad in ("nohost", ":5557", "h:0", "h:x"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected HOST:PORT"):
            master_address(bad)


def _orchestrator(tmp_path: Path, spec: dict[str, Any], **opts: Any) -> Any:
    from harness.runner.orchestrator import Orchestrator, RunOptions

    return Orchestrator(
        parse_scenario(spec), RunOptions("acceptor", out=tmp_path, **opts), lambda _msg: None
    )


@pytest.mark.parametrize(
    ("spec", "opts", "says"),
    [
        ({**SPEC, "workers": 0, "ip_quotas": {}}, {}, "source_ips per-worker needs worker hosts"),
        (SPEC, {}, "a worker's address is known before the run only with --worker-netns"),
        (
            {
                **SPEC,
                "ip_quotas": {},
                "load": [
                    {"name": "a", "profile": "storm", "arrival": "constant:rate=5", "stop": 6},
                    {"name": "b", "profile": "storm", "arrival": "constant:rate=5", "start": 5},
                ],
            },
            {},
            "phases a and b overlap",
        ),
    ],
)
def test_the_runner_refuses_worker_plans_it_cannot_run_before_starting_anything(
    tmp_path: Path, spec: dict[str, Any], opts: dict[str, Any], says: str
) -> None:
    from harness.runner.plan import TargetError

    orch = _orchestrator(tmp_path, spec, **opts)
    with pytest.raises(TargetError, match=says):
        orch._make_worker_hosts()
    assert orch.workers.hosts is None


def test_engine_phases_wait_for_the_workers_at_the_master_bind_and_steady_ones_do_not(
    tmp_path: Path,
) -> None:
    spec = {
        **SPEC,
        "ip_quotas": {},
        "load": [
            {"name": "storm", "profile": "storm", "arrival": "constant:rate=5"},
            {"name": "steady", "profile": "steady", "users": 2},
        ],
    }
    orch = _orchestrator(tmp_path, spec, workers=2, master_bind=("198.18.9.1", 6000))
    orch._make_worker_hosts()
    storm, steady = orch.sc.load
    assert orch.workers.for_phase(storm) == Workers(2, "198.18.9.1", 6000, 60.0)
    assert orch.workers.for_phase(steady) is None
    assert orch.run_json["workers"] == {
        "count": 2,
        "netns": False,
        "master_bind": "198.18.9.1:6000",
    }
    lone = _orchestrator(tmp_path, {**spec, "workers": 0})
    assert lone.workers.for_phase(storm) is None


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--workers", "0", "--worker-netns"], "--worker-netns: needs --workers N"),
        (["--workers", "201"], "--workers=201: between 0 and 200"),
    ],
)
def test_harness_run_refuses_worker_options_it_cannot_honour(
    args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.cli import main

    assert main(["run", "hosts-ip-rate", *args]) == 3
    assert says in capsys.readouterr().out


def test_the_runner_says_each_workers_rows_and_clock_offset_with_its_bound() -> None:
    from harness.runner.workers import worker_line

    w = {
        "index": 1,
        "addresses": ["198.18.4.12"],
        "rows_received": 310,
        "clock_offset_ns": -200_120_000,
        "clock_rtt_ns": 600_000,
    }
    assert worker_line(w) == (
        "worker 1 (198.18.4.12): 310 rows home, clock offset -200.1 ms ± 0.3 ms"
    )
    assert worker_line({"index": 0, "gone": True}).endswith("0 rows home, gone")


def test_a_worker_on_shared_storage_is_judged_by_the_files_it_left(tmp_path: Path) -> None:
    """--shared-run-dir: the worker writes its own files; the runner counts their rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    ready, client = tmp_path / "ready", tmp_path / "files"
    ready.mkdir()
    client.mkdir()
    pq.write_table(pa.table({"seq": list(range(7))}), client / "client-m2-41-00001.parquet")
    roster = {
        "workers": {
            "a": {
                "index": 0,
                "host": "m2",
                "pid": 41,
                "home": "local",
                "addresses": ["198.18.4.11"],
                "done": {"rows": 7, "files": 1},
                "rows_received": 0,
                "files": [],
            },
            "b": {
                "index": 1,
                "host": "m3",
                "pid": 41,
                "home": "local",
                "addresses": ["198.18.4.12"],
                "done": {"rows": 5, "files": 1},
                "rows_received": 0,
                "files": [],
            },
        }
    }
    (ready / "workers.json").write_text(json.dumps(roster))
    found, summary = judge(ready, 2, [], client)
    assert [(p.worker.split()[0], p.reason, p.rows_lost) for p in found] == [
        ("1", "0 of its 5 rows arrived", 5)
    ]
    assert [w["rows_received"] for w in summary] == [7, 0]
