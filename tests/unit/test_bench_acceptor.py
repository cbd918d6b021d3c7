"""bench.acceptor's pure parts: kernel counters, round order, summaries, goals, py-spy stacks."""

from __future__ import annotations

from typing import Any

import pytest

from bench.acceptor import Target, goals, report, summarize_trogdor
from bench.toolkit.load import rotations
from bench.toolkit.netns import parse_net_counters
from bench.toolkit.profiling import hot_spots

SNMP = """Ip: Forwarding DefaultTTL
Ip: 1 64
Tcp: RtoAlgorithm ActiveOpens PassiveOpens EstabResets OutRsts
Tcp: 1 10 20 3 7
TcpExt: SyncookiesSent ListenOverflows ListenDrops TCPAbortOnClose TCPAbortOnData TCPSynRetrans
TcpExt: 0 5 6 2 1 4
"""


def test_net_counters_are_read_by_section_and_name() -> None:
    assert parse_net_counters(SNMP) == {
        "PassiveOpens": 20,
        "EstabResets": 3,
        "OutRsts": 7,
        "ListenOverflows": 5,
        "ListenDrops": 6,
        "TCPAbortOnClose": 2,
        "TCPAbortOnData": 1,
        "TCPSynRetrans": 4,
    }
    with pytest.raises(ValueError, match="names followed by"):
        parse_net_counters("Tcp: OutRsts\nUdp: 3\n")


def test_every_path_leads_one_round_in_turn() -> None:
    ts = [Target("direct", 1), Target("acceptor", 2), Target("ref", 3)]
    order = [[t.name for t in o] for _, o in rotations(ts, 3)]
    assert order == [
        ["direct", "acceptor", "ref"],
        ["acceptor", "ref", "direct"],
        ["ref", "direct", "acceptor"],
    ]


def _row(action: str, path: str, rnd: int, conn: float, **kw: Any) -> dict[str, Any]:
    row = {
        "action": action,
        "path": path,
        "round": rnd,
        "conn_per_s": conn,
        "trogdor_ok_per_s": conn,
        "ListenOverflows": 0,
        "ListenDrops": 0,
        "resets_sent": 0,
        "TCPAbortOnClose": 0,
        "load_avg": 1.0,
    }
    return {**row, **kw}


def test_summary_ratios_and_goals_fail_by_a_small_margin() -> None:
    rows = [
        _row("CONNECT", "direct", 1, 1000.0),
        _row("CONNECT", "acceptor", 1, 990.0, cpu_ms_per_conn=0.1),  # 0.99x: not met
        _row("CONNECT", "direct", 2, 1000.0),
        _row("CONNECT", "acceptor", 2, 1000.0, cpu_ms_per_conn=0.1),
        _row("FETCH_METADATA", "direct", 1, 500.0, ListenOverflows=1, ListenDrops=1),
        _row("FETCH_METADATA", "acceptor", 1, 510.0, ListenOverflows=1, ListenDrops=1),
    ]
    summary = summarize_trogdor(rows, ["direct", "acceptor"])
    con = summary["CONNECT"]["acceptor"]
    assert con["ratio"] == pytest.approx(0.995)
    assert con["ratio_per_round"] == [0.99, 1.0]
    got = goals(
        {
            "trogdor_summary": summary,
            "ratio_throughput": 0.95,
            "added_p99_ms": 1.01,
            "latency_rate": 150.0,
            "latency_half_load": 150.0,
        }
    )
    assert got == {
        "Trogdor CONNECT conn/s >= 1.0x direct": False,
        "Trogdor CONNECT ok ops/s >= 1.0x direct": False,
        "Trogdor CONNECT listen overflows <= direct": True,
        "Trogdor CONNECT no resets (where direct has none)": True,
        "Trogdor FETCH_METADATA conn/s >= 1.0x direct": True,
        "Trogdor FETCH_METADATA ok ops/s >= 1.0x direct": True,
        "Trogdor FETCH_METADATA listen overflows <= direct": True,
        "Trogdor FETCH_METADATA no resets (where direct has none)": True,
        "produce throughput >= 0.95x direct": True,
        "added p99 <= 1 ms at half load (150 rec/s)": False,
    }
    # one overflow more than direct, one reset where direct had none: both goals fail
    rows[3] = _row("CONNECT", "acceptor", 2, 1100.0, ListenDrops=1, resets_sent=1)
    got = goals({"trogdor_summary": summarize_trogdor(rows, ["direct", "acceptor"])})
    assert not got["Trogdor CONNECT listen overflows <= direct"]
    assert got["Trogdor CONNECT no resets (where direct has none)"] is False
    assert got["Trogdor CONNECT conn/s >= 1.0x direct"]  # (990 + 1100) / 2 > 1000
    # direct sent resets too: nothing to judge, n/a rather than a pass
    rows[0] = _row("CONNECT", "direct", 1, 1000.0, resets_sent=2)
    got = goals({"trogdor_summary": summarize_trogdor(rows, ["direct", "acceptor"])})
    assert got["Trogdor CONNECT no resets (where direct has none)"] is None


def test_the_same_goals_are_judged_for_haproxy_in_the_same_run() -> None:
    rows = [
        _row("CONNECT", "direct", 1, 1000.0, ListenOverflows=2),
        _row("CONNECT", "acceptor", 1, 800.0, ListenOverflows=9),
        _row("CONNECT", "haproxy", 1, 1010.0, ListenOverflows=3),
    ]
    res = {
        "trogdor_summary": summarize_trogdor(rows, ["direct", "acceptor", "haproxy"]),
        "producebench_half_load_per_s": 1000.0,
        "ratio_producebench_throughput": 0.96,
        "producebench_added_p99_ms": 0.5,
        "ratio_producebench_throughput_haproxy": 0.94,
        "producebench_added_p99_ms_haproxy": 2.0,
        "ratio_throughput": 0.9,  # the Python-client phases: the acceptor's only
    }
    relay = goals(res, "haproxy")
    assert relay["Trogdor CONNECT conn/s >= 1.0x direct"] is True
    assert relay["Trogdor CONNECT listen overflows <= direct"] is False  # 3 > 2
    assert relay["Trogdor ProduceBench throughput >= 0.95x direct"] is False
    assert relay["Trogdor ProduceBench added p99 <= 1 ms at half load (1000 msg/s)"] is False
    assert "produce throughput >= 0.95x direct" not in relay
    mine = goals(res)
    assert mine["Trogdor CONNECT conn/s >= 1.0x direct"] is False
    assert mine["Trogdor ProduceBench throughput >= 0.95x direct"] is True
    lines = report(
        {**res, "goals": mine, "goals_haproxy": relay}, ["direct", "acceptor", "haproxy"]
    )
    assert "  NOT  Trogdor CONNECT conn/s >= 1.0x direct   (HAProxy: MET)" in lines


def test_hot_spots_self_and_inclusive_shares() -> None:
    raw = "\n".join(
        [
            "run (acceptor/cli.py:90);Processor._run (/x/acceptor/processor.py:3) 6",
            "run (acceptor/cli.py:90);HistoryWriter.flush (base/history/writer.py:9);"
            "write_table (/v/site-packages/pyarrow/parquet/core.py:1) 3",
            "run (acceptor/cli.py:90) 1",
            "garbage line",
        ]
    )
    spots = hot_spots(raw)
    assert spots["samples"] == 10
    assert spots["self"][0] == ("Processor._run (acceptor/processor.py)", 60.0)
    assert ("write_table (pyarrow/parquet/core.py)", 30.0) in spots["self"]
    incl = dict(spots["inclusive"])
    assert incl["run (acceptor/cli.py)"] == 100.0
    assert incl["HistoryWriter.flush (base/history/writer.py)"] == 30.0


def test_the_netns_rerun_gets_the_brokers_jmx_exporter_while_the_network_is_there(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fresh machine: the re-run in a private namespace has loopback only, so the JMX
    exporter (the direct path's connection count) is resolved before it starts; a failure
    to resolve it is said, and the re-run still starts (the broker runs without it)."""
    import bench.toolkit.netns as ba
    from broker import BrokerError, artifacts

    calls: list[str] = []

    class FakeProc:
        def wait(self) -> int:
            return 0

    def popen(cmd: list[str], **kwargs: Any) -> FakeProc:
        calls.append("unshare" if cmd[0] == "unshare" else cmd[0])
        return FakeProc()

    def resolved(**kwargs: Any) -> None:
        calls.append("jmx")

    monkeypatch.delenv(ba._NETNS_ENV, raising=False)
    monkeypatch.setattr(ba.os, "geteuid", lambda: 0)
    monkeypatch.setattr(ba.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(ba.subprocess, "Popen", popen)
    monkeypatch.setattr(artifacts, "jmx_exporter", resolved)
    assert ba.reexec_in_netns(["--rounds", "1"]) == 0
    assert calls == ["jmx", "unshare"]

    said: list[str] = []

    def unreachable(**kwargs: Any) -> None:
        raise BrokerError("Maven cannot reach Maven Central")

    calls.clear()
    monkeypatch.setattr(artifacts, "jmx_exporter", unreachable)
    assert ba.reexec_in_netns(["--rounds", "1"], progress=said.append) == 0
    assert calls == ["unshare"]
    assert any("Maven cannot reach" in line for line in said)
