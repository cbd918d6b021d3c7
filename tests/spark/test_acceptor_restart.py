"""A run whose acceptor was killed and restarted (fault `acceptor_kill`), hand-built: each
acceptor process is judged on its own history, the window without a front by no check
(`front_outage`, unknown, and the run's verdict with it), and a broken rule after the
restart still fails. A front stopped with its broker (a fronted cluster's `broker_kill`)
is judged per process too, with no outage: its history is whole, and only an attempt
still queued at its stop is the stop's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from analysis.checks import ALL_CHECKS
from analysis.load import load_run
from analysis.verdict import OUTAGE, overall, run_checks
from base.history import HistoryWriter
from tests.handbuilt import record

S = 1_000_000_000
MS = 1_000_000
T0 = 9_000 * S
KILL, BACK = T0 + 10_500 * MS, T0 + 13 * S
ADDR = {"client_ip": "127.0.0.7", "listener": "CLIENT"}
CHECKS = [c for c in ALL_CHECKS if c.name in ("accounting", "client_acceptor_agreement")]


def _attempt(
    cw: HistoryWriter, port: int, start: int, *, refused: bool = False, reset_at: int = 0
) -> None:
    a = {**ADDR, "client_port": port}
    record(cw, "connect_invoke", mono_ns=start, detail={"profile": "storm"}, **a)
    if refused:
        record(cw, "connect_fail", mono_ns=start + MS, reason="refused", latency_ms=1.0, **a)
        return
    record(cw, "connect_ok", mono_ns=start + MS, latency_ms=1.0, **a)
    if reset_at:  # queued in the listening socket, reset when it closed
        record(cw, "closed", mono_ns=reset_at, reason="reset", latency_ms=(reset_at - start) / MS,
                  detail={"outcome": "reset", "profile": "storm"}, **a)  # fmt: skip
        return
    record(cw, "ready", mono_ns=start + 3 * MS, latency_ms=3.0, api_key=18, **a)
    record(cw, "closed", mono_ns=start + 5 * MS, reason="done", latency_ms=5.0,
              detail={"outcome": "served", "profile": "storm"}, **a)  # fmt: skip


def _conn(aw: HistoryWriter, pid: str, port: int, at: int) -> None:
    c = {**ADDR, "client_port": port, "conn_id": f"CLIENT-{pid}-{port}"}
    record(aw, "accept", mono_ns=at, **c)
    record(aw, "admit", mono_ns=at, delay_ms=0.0, **c)
    record(aw, "close", mono_ns=at + 4 * MS, reason="client_eof", **c)


def _run(
    tmp: Path, name: str, lost_after_restart: bool, kill: bool = True, stop: bool = False
) -> Path:
    run = tmp / name
    (run / "history").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"run_id": name, "target": "acceptor"}))
    h = run / "history"
    cw = HistoryWriter(h, "client", name, background=False)
    first = HistoryWriter(h, "acceptor", name, name="acceptor-111", background=False)
    second = HistoryWriter(h, "acceptor", name, name="acceptor-222", background=False)
    hw = HistoryWriter(h, "harness", name, background=False)
    record(hw, "config", mono_ns=T0, detail={"max.connections": 2147483647})
    for i in range(10):  # served by the first process
        _attempt(cw, 40000 + i, T0 + i * S)
        _conn(first, "111", 40000 + i, T0 + i * S + 2 * MS)
    # connected, in its backlog when it died (or was stopped: reset by the stop)
    _attempt(cw, 40100, T0 + 10_200 * MS, reset_at=KILL + 2 * MS if stop else 0)
    if stop:  # its broker killed, the front stopped with it (SIGTERM: its rows flushed)
        record(hw, "fault_start", mono_ns=KILL, reason="broker_kill",
                  detail={"kind": "broker_kill", "broker": 1, "front_stopped": True})  # fmt: skip
        record(first, "close", mono_ns=KILL + 3 * MS, reason="shutdown",
                     conn_id="CLIENT-111-40001", **{**ADDR, "client_port": 40001})  # fmt: skip
    elif kill:
        record(
            hw,
            "fault_start",
            mono_ns=KILL,
            reason="acceptor_kill",
            detail={"kind": "acceptor_kill"},
        )
    # connected to the dying process's socket just after the kill was sent, reset with its
    # backlog: the outage's, not the restarted process's
    _attempt(cw, 40150, KILL + MS, reset_at=KILL + 2 * MS if stop else 0)
    _attempt(cw, 40200, T0 + 11 * S, refused=True)  # no front
    if stop:
        record(hw, "fault_end", mono_ns=BACK, reason="broker_kill",
                  detail={"kind": "broker_kill", "broker": 1})  # fmt: skip
    elif kill:
        record(
            hw, "fault_end", mono_ns=BACK, reason="acceptor_kill", detail={"kind": "acceptor_kill"}
        )
    for i in range(5):  # served by the restarted one
        _attempt(cw, 40300 + i, BACK + (i + 1) * S)
        _conn(second, "222", 40300 + i, BACK + (i + 1) * S + 2 * MS)
    if lost_after_restart:  # connected to the restarted front, never recorded by it
        _attempt(cw, 40400, BACK + 7 * S)
    if lost_after_restart and stop:  # connected, reset 1 ms before the stop, never recorded
        _attempt(cw, 40050, T0 + 10_400 * MS, reset_at=KILL - MS)
    for t in range(0, 22):  # the kernel counted no drop all run
        record(hw, "kernel_net", mono_ns=T0 + t * S, latency_ms=0.01,
                  detail={"listen_drops": 0, "listen_overflows": 0, "reqq_full_drop": 0,
                          "syn_cookies": 0, "netns": "net:[1]"})  # fmt: skip
    for w in (cw, first, second, hw):
        w.close()
    return run


def test_each_process_is_judged_on_its_own_and_the_outage_by_none(
    spark: Any, tmp_path: Path
) -> None:
    run = load_run(spark, _run(tmp_path, "crash", lost_after_restart=False))
    incs = run.incarnations()
    assert [(i.pid, i.crashed) for i in incs] == [("111", True), ("222", False)]
    assert incs[1].lo_ns == KILL and incs[0].hi_ns == KILL
    results = {r.name: r for r in run_checks(run, CHECKS)}
    agreement, accounting, outage = (
        results["client_acceptor_agreement"], results["accounting"], results[OUTAGE]
    )  # fmt: skip
    assert agreement.verdict == "pass" and agreement.judged == 15, agreement.observed
    # the attempt in the dead front's backlog is not judged: unknown, never a fail
    assert accounting.verdict == "unknown", accounting.observed
    assert "pid 111 was killed" in accounting.observed
    assert "1 connected to the killed acceptor (its outage); 0 unexplained" in accounting.observed
    assert outage.verdict == "unknown" and "3 client attempts" in outage.observed
    verdict, reasons = overall(list(results.values()))
    assert verdict == "unknown"
    assert any(r.startswith("judged by no check: ") and "pid 111 killed" in r for r in reasons)


def test_a_connection_lost_by_the_restarted_front_still_fails(spark: Any, tmp_path: Path) -> None:
    run = load_run(spark, _run(tmp_path, "crash-lost", lost_after_restart=True))
    results = {r.name: r for r in run_checks(run, CHECKS)}
    accounting = results["accounting"]
    assert accounting.verdict == "fail", accounting.observed
    assert [w["client_port"] for w in accounting.witnesses] == [40400]
    assert accounting.witnesses[0]["acceptor_pid"] == "222"
    assert overall(list(results.values()))[0] == "fail"


def test_processes_of_one_acceptor_without_a_kill_are_one_acceptor(
    spark: Any, tmp_path: Path
) -> None:
    # a `split` acceptor's processor processes write files of their own: no kill, one life
    run = load_run(spark, _run(tmp_path, "split", lost_after_restart=False, kill=False))
    assert run.incarnations() == []
    names = [r.name for r in run_checks(run, CHECKS)]
    assert OUTAGE not in names and "client_acceptor_agreement" in names


def test_a_front_stopped_with_its_broker_leaves_no_outage(spark: Any, tmp_path: Path) -> None:
    run = load_run(spark, _run(tmp_path, "stop", lost_after_restart=False, stop=True))
    incs = run.incarnations()
    assert [(i.pid, i.crashed, i.stopped, i.after_stop) for i in incs] == [
        ("111", False, True, False),
        ("222", False, False, True),
    ]
    assert incs[0].hi_ns == KILL == incs[1].lo_ns
    results = {r.name: r for r in run_checks(run, CHECKS)}
    accounting = results["accounting"]
    # the two attempts queued at the stop were reset by it; the refused one is a connect
    # error; every other attempt was accepted: judged whole, nothing unknown
    assert accounting.verdict == "pass", accounting.observed
    assert accounting.observed.count("in its queue at the stop (its outage)") == 2
    assert "stopped with its broker" in accounting.explanation
    assert OUTAGE not in results
    _verdict, reasons = overall(list(results.values()))  # no limit here to exercise
    assert not any("judged by no check" in r for r in reasons), reasons


def test_an_attempt_lost_before_the_stop_still_fails(spark: Any, tmp_path: Path) -> None:
    # a front stopped cleanly kept its rows: one it never recorded is a loss, not the stop's
    run = load_run(spark, _run(tmp_path, "stop-lost", lost_after_restart=True, stop=True))
    accounting = {r.name: r for r in run_checks(run, CHECKS)}["accounting"]
    assert accounting.verdict == "fail", accounting.observed
    assert sorted(w["client_port"] for w in accounting.witnesses) == [40050, 40400]


def test_every_table_kept_for_the_run_and_its_processes_is_freed(
    spark: Any, tmp_path: Path
) -> None:
    """Each acceptor process's view builds its own tables; the analysis's end frees them
    with the run's (`Run.release`), so a session that judges many runs keeps none."""
    from analysis import analyze_run

    def kept() -> set[int]:
        return set(spark.sparkContext._jsc.getPersistentRDDs().keys())

    before = kept()
    run_dir = _run(tmp_path, "freed", lost_after_restart=False)
    seen: list[str] = []
    verdict = analyze_run(run_dir, spark=spark, report=False, progress=seen.append)
    assert any(line.startswith("  acceptor process 2 of 2") for line in seen), seen
    # the shared tables were built for each process's view, before its checks
    assert sum("[frame] acceptor_conns" in line for line in seen) == 2, seen
    assert verdict["checks"], verdict
    assert kept() <= before
