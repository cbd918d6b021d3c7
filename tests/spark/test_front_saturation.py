"""`front_saturation` on hand-built histories at the edge of its bound: an acceptor loop
busy for a whole reading's interval (within the reads' spans) marks that interval
saturated, with the connections that waited in the accept queue beyond the slack named;
a loop that idled a little is the front keeping up; no reading, nothing judged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from analysis.checks.clients import check_offered_load
from analysis.checks.front import check_front_saturation
from analysis.load import load_run
from analysis.verdict import overall
from base.history import HistoryWriter
from tests.handbuilt import record
from tests.spark.histories import hand_built_run

S = 1_000_000_000
MS = 1_000_000
T0 = 7_000 * S
ADDR = {"client_ip": "127.0.0.7", "listener": "CLIENT"}


def _conn(cw: HistoryWriter, aw: HistoryWriter, port: int, ok: int, accept: int) -> None:
    a = {**ADDR, "client_port": port}
    record(cw, "connect_invoke", mono_ns=ok - MS, detail={"profile": "storm"}, **a)
    record(cw, "connect_ok", mono_ns=ok, latency_ms=1.0, **a)
    record(cw, "closed", mono_ns=accept + 10 * MS, reason="done", latency_ms=1.0,
              detail={"outcome": "served", "profile": "storm"}, **a)  # fmt: skip
    c = {**a, "conn_id": f"CLIENT-{port}"}
    record(aw, "accept", mono_ns=accept, detail={"protected": False}, **c)
    record(aw, "admit", mono_ns=accept, delay_ms=0.0, **c)
    record(aw, "close", mono_ns=accept + 10 * MS, reason="client_eof", **c)


def _run(
    tmp: Path,
    name: str,
    busy: float | None,
    drops: list[int] | None = None,
    role: str = "acceptor",
    wait: float | None = None,
    noise_cpu_s: list[float] | None = None,
    machine_cpu_s: list[float] | None = None,
) -> Any:
    def build(cw: HistoryWriter, aw: HistoryWriter, hw: HistoryWriter) -> None:
        for k, n in enumerate(drops or []):  # the kernel's counters, one reading a second
            record(hw, "kernel_net", mono_ns=T0 + k * S, latency_ms=0.01,
                      detail={"listen_drops": n, "listen_overflows": n, "reqq_full_drop": 0,
                              "syn_cookies": 0, "netns": "net:[1]"})  # fmt: skip
        record(hw, "phase_start", mono_ns=T0, detail={"name": "storm"})
        for i in range(3):  # taken at once
            _conn(cw, aw, 40000 + i, T0 + i * 100 * MS, T0 + i * 100 * MS + MS)
        # in the second interval: 80 ms in the queue, 20 of them while blocked on a rate delay
        ok = T0 + 1_500 * MS
        _conn(cw, aw, 40100, ok, ok + 80 * MS)
        record(aw, "blocked", mono_ns=ok + 30 * MS, listener="CLIENT", reason="rate",
                  delay_ms=20.0, detail={"start_mono_ns": ok + 10 * MS})  # fmt: skip
        shares = [None, 0.5, busy, 0.2] if busy is not None else [None] * 4  # None: not read
        for k, share in enumerate(shares):
            d: dict[str, Any] = {"role": role, "pgids": [1], "processes": 1}
            if share is not None:
                d |= {"loop_busy": share, "loop_busy_pid": 4242}
                if wait is not None:
                    d |= {"loop_wait": wait if share == busy else 0.0, "cpu_s": 0.4 * k}
            record(hw, "process_stats", mono_ns=T0 + k * S, latency_ms=1.0, detail=d)
        for k, cpu in enumerate(noise_cpu_s or []):  # neighbours made on purpose
            noise = {"role": "noise", "pgids": [2], "processes": 3, "cpu_s": cpu}
            record(hw, "process_stats", mono_ns=T0 + k * S, latency_ms=1.0, detail=noise)
        for k, cpu in enumerate(machine_cpu_s or []):  # /proc/stat: every process's
            machine = {"role": "machine", "pgids": [], "cpu_s": cpu}
            record(hw, "process_stats", mono_ns=T0 + k * S, latency_ms=1.0, detail=machine)

    return hand_built_run(tmp, name, build, config_ns=T0 - S)


def test_a_loop_busy_throughout_is_the_front_saturated(spark: Any, tmp_path: Path) -> None:
    # read spans of 1 ms and 1 ms and the 10 ms tick (loops.TICK_MS) over 1 s: busy
    # throughout reads at least 0.988
    r = check_front_saturation(load_run(spark, _run(tmp_path, "busy", 0.998)))
    assert r.verdict == "unknown", r.observed
    assert r.observed == (
        "front saturated 1.0–2.0 s: its loop busy 100%; 1 connections waited in "
        "its accept queue, with the acceptor not blocked on purpose, more than the 50 ms "
        "slack (the worst 60.0 ms); peak 3 accepted/s (at 0 s) of ~900 forwarded or ~4,400 "
        "bare/s held here (single)"
    )
    assert r.witnesses[0]["client_port"] == 40100
    assert r.data["windows_ns"] == [(T0 + S, T0 + 2 * S)]
    verdict, reasons = overall([r])
    assert verdict == "unknown" and reasons[0].startswith("judged by no check: front saturated")


def test_a_starved_front_names_its_measured_cause_and_its_neighbours(
    spark: Any, tmp_path: Path
) -> None:
    """The kernel's run-queue wait splits busy throughout into starved (waiting for a CPU
    others held) and its own work, and the roles' CPU over the window names who held it."""
    starved = _run(tmp_path, "starved", 0.998, wait=0.7, noise_cpu_s=[0.0, 1.9, 3.8, 5.7])
    r = check_front_saturation(load_run(spark, starved))
    assert r.verdict == "unknown", r.observed
    assert r.observed.startswith(
        "front saturated 1.0–2.0 s: its loop busy 100%: on a CPU 30%, waiting for one 70%; "
        "starved: waiting for a CPU; the machine meanwhile: noise 1.90 cores, acceptor 0.40 "
        "cores; "
    ), r.observed
    own = check_front_saturation(load_run(spark, _run(tmp_path, "own", 0.998, wait=0.1)))
    assert "waiting for one 10%; its own work: on a CPU" in own.observed, own.observed
    # a neighbour the run did not start: the machine's busy CPU less the run's own roles
    unnamed = _run(tmp_path, "unnamed", 0.998, wait=0.7, machine_cpu_s=[0.0, 2.0, 4.0, 6.0])
    r = check_front_saturation(load_run(spark, unnamed))
    assert "the machine meanwhile: other processes 1.60 cores, acceptor 0.40 cores; " in (
        r.observed
    ), r.observed


def test_the_window_names_the_drops_the_kernel_counted_around_it(
    spark: Any, tmp_path: Path
) -> None:
    # readings at 0, 1, 2, 3 s, each read in 10 µs: the window is (1 s, 2 s]; the reading
    # at 1 s ends 10 µs into it, so the drops are bounded by the ones at 0 s and 2 s
    r = check_front_saturation(load_run(spark, _run(tmp_path, "drops", 0.998, [0, 4, 11, 30])))
    assert r.verdict == "unknown" and "; 11 listen drops; peak" in r.observed, r.observed


def test_a_loop_that_idled_a_little_kept_up(spark: Any, tmp_path: Path) -> None:
    r = check_front_saturation(load_run(spark, _run(tmp_path, "idle", 0.9879)))
    assert r.verdict == "pass", r.observed
    assert r.judged == 3 and "busiest loop 98.8% of an interval (pid 4242" in r.observed
    assert r.data["peak_accepts"] == (3, 0.0) and r.data["model"] == "single"


def test_without_loop_readings_nothing_is_judged(spark: Any, tmp_path: Path) -> None:
    r = check_front_saturation(load_run(spark, _run(tmp_path, "none", None)))
    assert r.verdict == "n/a", r.observed


def test_the_generators_loop_reads_as_the_fronts(spark: Any, tmp_path: Path) -> None:
    busy = check_offered_load(load_run(spark, _run(tmp_path, "gen-busy", 0.998, role="load")))
    assert "the generator's busiest loop 99.8% of an interval (pid 4242" in busy.observed
    assert busy.observed.endswith("; the generator saturated 1.0–2.0 s (busy 100%)"), busy.observed
    idle = check_offered_load(load_run(spark, _run(tmp_path, "gen-idle", 0.9879, role="load")))
    assert "the generator's busiest loop 98.8%" in idle.observed
    assert "saturated" not in idle.observed, idle.observed


def test_a_reading_of_the_acceptors_own_start_up_is_not_its_pace(
    spark: Any, tmp_path: Path
) -> None:
    """A loop busy throughout an interval that ended before its process wrote its first row
    (its heartbeat's start, written once its listeners are bound: a restarted front coming
    back)
    was starting, not serving: left out, and said so. The same reading 1 ms after that row
    is the front's own pace again."""
    import os

    def run(first_row_ns: int) -> Any:
        def build(cw: HistoryWriter, aw: HistoryWriter, hw: HistoryWriter) -> None:
            record(aw, "loop_lag", mono_ns=first_row_ns, reason="start", delay_ms=0.0,
                      detail={"period_ms": 10, "threshold_ms": 5})  # fmt: skip
            record(cw, "connect_invoke", mono_ns=T0 + 1_500 * MS, detail={"profile": "storm"},
                      client_ip="127.0.0.7", client_port=40001, listener="CLIENT")  # fmt: skip
            for k, share in enumerate([None, 0.5, 0.998, 0.2]):
                d: dict[str, Any] = {"role": "acceptor", "pgids": [1], "processes": 1}
                if share is not None:  # this test's own pid: the acceptor files' writer
                    d |= {"loop_busy": share, "loop_busy_pid": os.getpid()}
                record(hw, "process_stats", mono_ns=T0 + k * S, latency_ms=1.0, detail=d)

        return hand_built_run(tmp_path, f"start-{first_row_ns}", build, config_ns=T0 - S)

    starting = check_front_saturation(load_run(spark, run(T0 + 2 * S)))
    assert starting.verdict == "pass", starting.observed
    assert "2 reading(s) of an acceptor process's own start-up" in starting.observed
    serving = check_front_saturation(load_run(spark, run(T0 + 2 * S - MS)))
    assert serving.verdict == "unknown", serving.observed


def test_a_loop_busy_when_nothing_was_at_stake_is_left_out(spark: Any, tmp_path: Path) -> None:
    """A reading busy throughout with no client attempt and no accept inside it (the last
    one, taken as the run stops, on a loaded machine) left nothing to judge at the front's
    pace: left out, and said so. One attempt inside it, and it is the front's pace again."""

    def run(name: str, attempt_ns: int) -> Any:
        def build(cw: HistoryWriter, aw: HistoryWriter, hw: HistoryWriter) -> None:
            record(cw, "connect_invoke", mono_ns=attempt_ns, detail={"profile": "storm"},
                      client_ip="127.0.0.7", client_port=40001, listener="CLIENT")  # fmt: skip
            for k, share in enumerate([None, 0.5, 0.998, 0.2]):
                d: dict[str, Any] = {"role": "acceptor", "pgids": [1], "processes": 1}
                if share is not None:
                    d |= {"loop_busy": share, "loop_busy_pid": 4242}
                record(hw, "process_stats", mono_ns=T0 + k * S, latency_ms=1.0, detail=d)

        return hand_built_run(tmp_path, name, build, config_ns=T0 - S)

    idle = check_front_saturation(load_run(spark, run("idle", T0 + 500 * MS)))
    assert idle.verdict == "pass", idle.observed
    assert "1 reading(s) busy throughout with no client attempt" in idle.observed
    at_stake = check_front_saturation(load_run(spark, run("at-stake", T0 + 2 * S)))
    assert at_stake.verdict == "unknown", at_stake.observed
