"""The process sampler reads /proc: a command name with spaces and parentheses, and the
sums over a process group (a fake /proc tree; no process is started)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from base.history.rows import FIELDS, Row
from harness.runner.proc_stats import EVENT, ProcStatsSampler, folder_bytes, read_stat

TICKS = os.sysconf("SC_CLK_TCK")
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def _fields(row: Row) -> dict[str, Any]:
    """A written row by its column names."""
    return dict(zip(FIELDS, row, strict=True))


def _stat(pid: int, comm: str, pgrp: int, utime: int, stime: int, rss_pages: int) -> str:
    # fields 3.. : state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
    # utime stime cutime cstime priority nice threads itrealvalue starttime vsize rss
    head = ["S", "1", str(pgrp), str(pgrp), "0", "-1", "0", "0", "0", "0", "0"]
    rest = [*head, str(utime), str(stime), "0", "0", "20", "0", "1", "0", "0", "0", str(rss_pages)]
    return f"{pid} ({comm}) " + " ".join(rest) + "\n"


def test_read_stat_takes_fields_after_the_last_parenthesis() -> None:
    text = _stat(7, "java (broker) x", 7, 3 * TICKS, TICKS, 100)
    assert read_stat(text) == (7, 4.0, 100 * PAGE_KB)


def _proc(tmp: Path, pid: int, pgrp: int, fds: int, rss_pages: int) -> None:
    d = tmp / str(pid)
    (d / "fd").mkdir(parents=True)
    for i in range(fds):
        (d / "fd" / str(i)).write_text("")
    (d / "stat").write_text(_stat(pid, "python3", pgrp, TICKS, 0, rss_pages))


def test_a_role_sums_every_process_of_its_groups_and_the_history_folder(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    _proc(proc, 100, 100, 5, 10)  # the acceptor
    _proc(proc, 101, 100, 7, 20)  # its processor process, same group
    _proc(proc, 200, 200, 3, 30)  # someone else
    (proc / "self").mkdir()
    hist = tmp_path / "history"
    (hist / "client").mkdir(parents=True)
    (hist / "client" / "a.parquet").write_bytes(b"x" * 1000)
    rows: list[dict[str, Any]] = []
    s = ProcStatsSampler(
        lambda row: rows.append(_fields(row)),
        lambda: {"acceptor": [100], "load": []},
        hist,
        proc=proc,
    )
    s.sample_once()
    assert [r["event"] for r in rows] == [EVENT, EVENT]
    acceptor, history = rows[0]["detail"], rows[1]["detail"]
    assert acceptor["role"] == "acceptor" and acceptor["processes"] == 2
    assert acceptor["fds"] == 12 and acceptor["rss_kb"] == 30 * PAGE_KB
    assert acceptor["cpu_s"] == pytest.approx(2.0)
    assert history == {"role": "history", "bytes": 1000, "files": 1}
    assert folder_bytes(hist) == (1000, 1)


def _schedstat(proc: Path, pid: int, run_ns: int, wait_ns: int) -> None:
    d = proc / str(pid) / "task" / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    (d / "schedstat").write_text(f"{run_ns} {wait_ns} 10\n")


def test_loop_busy_is_the_busiest_main_threads_share_of_the_interval(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    _proc(proc, 100, 100, 1, 1)  # the accepting process
    _proc(proc, 101, 100, 1, 1)  # a processor process
    now = [0]
    rows: list[dict[str, Any]] = []
    s = ProcStatsSampler(
        lambda row: rows.append(_fields(row)["detail"]),
        lambda: {"acceptor": [100]},
        None,
        proc=proc,
        clock_ns=lambda: now[0],
    )
    _schedstat(proc, 100, 0, 0)
    _schedstat(proc, 101, 0, 0)
    s.sample_once()
    assert "loop_busy" not in rows[-1]  # nothing to compare with yet
    now[0] = 1_000_000_000
    _schedstat(proc, 100, 600_000_000, 400_000_000)  # on a CPU 0.6 s, waiting for one 0.4 s
    _schedstat(proc, 101, 300_000_000, 0)
    s.sample_once()
    assert rows[-1]["loop_busy"] == 1.0 and rows[-1]["loop_busy_pid"] == 100
    now[0] = 2_000_000_000
    _schedstat(proc, 100, 700_000_000, 400_000_000)
    _schedstat(proc, 101, 800_000_000, 0)
    s.sample_once()
    assert rows[-1]["loop_busy"] == 0.5 and rows[-1]["loop_busy_pid"] == 101


def test_the_load_roles_busiest_thread_of_any_kind_is_its_loop(tmp_path: Path) -> None:
    """The storm engine's loop runs on a thread of gevent's pool: for `load`, every thread."""
    proc = tmp_path / "proc"
    _proc(proc, 200, 200, 1, 1)  # a Locust worker: main thread idle, the engine on 203
    now = [0]
    rows: list[dict[str, Any]] = []
    s = ProcStatsSampler(
        lambda row: rows.append(_fields(row)["detail"]),
        lambda: {"load": [200], "acceptor": [200]},
        None,
        proc=proc,
        clock_ns=lambda: now[0],
    )

    def task(tid: int, run_ns: int) -> None:
        d = proc / "200" / "task" / str(tid)
        d.mkdir(parents=True, exist_ok=True)
        (d / "schedstat").write_text(f"{run_ns} 0 10\n")

    task(200, 0)
    task(203, 0)
    s.sample_once()
    now[0] = 1_000_000_000
    task(200, 10_000_000)
    task(203, 900_000_000)
    s.sample_once()
    by_role = {r["role"]: r for r in rows[-2:]}
    assert by_role["load"]["loop_busy"] == 0.9 and by_role["load"]["loop_busy_pid"] == 203
    assert by_role["acceptor"]["loop_busy"] == 0.01  # the main thread only
    # the process's other threads' time on a CPU: what a loop waiting for the GIL lost
    assert by_role["acceptor"]["loop_others"] == 0.9 and by_role["load"]["loop_others"] == 0.01


def test_the_loops_are_placed_by_their_own_read_not_the_whole_readings(tmp_path: Path) -> None:
    """A slow scan of /proc (here 300 ms between the sampler's clock readings around it)
    does not widen the span that places the loop reads: that is the read of the loops
    alone, and the share's interval runs from the end of one such read to the next."""
    proc = tmp_path / "proc"
    _proc(proc, 100, 100, 1, 1)
    _schedstat(proc, 100, 0, 0)
    ticks = iter(range(0, 100 * 300_000_000, 300_000_000))  # each clock reading 300 ms on
    rows: list[tuple[int, float, dict[str, Any]]] = []

    def write(row: Row) -> None:
        f = _fields(row)
        rows.append((f["mono_ns"], f["latency_ms"], f["detail"]))

    s = ProcStatsSampler(
        write,
        lambda: {"acceptor": [100]},
        None,
        proc=proc,
        clock_ns=lambda: next(ticks),
    )
    s.sample_once()  # clock: start 0, loops read 0.3-0.6 s, end 0.9 s
    _schedstat(proc, 100, 900_000_000, 0)
    s.sample_once()  # start 1.2 s, loops read 1.5-1.8 s, end 2.1 s
    (t0, whole0, first), (t1, whole1, second) = rows
    assert (t0, whole0, t1, whole1) == (0, 900.0, 1_200_000_000, 900.0)
    assert (first["loop_read_mono_ns"], first["loop_read_ms"]) == (600_000_000, 300.0)
    assert (second["loop_read_mono_ns"], second["loop_read_ms"]) == (1_800_000_000, 300.0)
    assert second["loop_busy"] == 0.75  # 0.9 s busy over the 1.2 s from read end to read end


def test_the_sampler_reads_its_own_process_as_the_runner(tmp_path: Path) -> None:
    """`own=True`: one more row per reading, role runner, the sampling process alone (what
    the run's own readers and scrapes cost), read from the real /proc."""
    rows: list[dict[str, Any]] = []
    sampler = ProcStatsSampler(
        lambda row: rows.append(_fields(row)["detail"]), lambda: {"load": [os.getpgrp()]}, None,
        own=True,
    )  # fmt: skip
    sampler.sample_once()
    runner = [d for d in rows if d["role"] == "runner"]
    assert len(runner) == 1 and runner[0]["processes"] == 1 and runner[0]["cpu_s"] >= 0
