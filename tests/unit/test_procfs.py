"""`base.procfs`: stat lines parsed after the command name's last ``)``, and this
process's own /proc entries (no process is started, no socket opened)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from base import procfs

pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="needs Linux /proc"),
]


def _line(pid: int, comm: str, **over: int | str) -> str:
    # fields 3..24 of proc(5): state ppid pgrp session tty_nr tpgid flags minflt cminflt
    # majflt cmajflt utime stime cutime cstime priority nice num_threads itrealvalue
    # starttime vsize rss (then more, which nothing here reads)
    names = (
        "state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime "
        "cutime cstime priority nice num_threads itrealvalue starttime vsize rss"
    ).split()
    values: dict[str, int | str] = {name: 0 for name in names}
    values["state"] = "S"
    values.update(over)
    return f"{pid} ({comm}) " + " ".join(str(values[n]) for n in names) + " 18446744073709551615\n"


@pytest.mark.parametrize(
    "comm", ["java", "java (broker) x", "a) b) c", "(", ") S 1 2 3", "", "sp  aces "]
)
def test_fields_are_read_after_the_command_names_last_parenthesis(comm: str) -> None:
    line = _line(
        42,
        comm,
        state="T",
        ppid=7,
        pgrp=9,
        utime=3,
        stime=5,
        cutime=11,
        cstime=13,
        starttime=123456,
        rss=77,
    )
    stat = procfs.parse_stat(line)
    assert stat.pid == 42 and stat.comm == comm
    assert stat.state == "T" and stat.ppid == 7 and stat.pgrp == 9
    assert (stat.utime, stat.stime, stat.cutime, stat.cstime) == (3, 5, 11, 13)
    assert stat.cpu_ticks == 8 and stat.cpu_s == 8 / procfs.CLK_TCK
    assert stat.starttime == 123456 and stat.rss_pages == 77


def test_a_line_without_a_command_name_is_refused() -> None:
    with pytest.raises(ValueError):
        procfs.parse_stat("42 S 1 2 3")
    with pytest.raises(ValueError):
        procfs.parse_stat("")


def test_a_short_line_has_no_fields_past_its_end() -> None:
    stat = procfs.parse_stat("42 (x) R 1")
    assert stat.state == "R" and stat.ppid == 1
    with pytest.raises(IndexError):
        _ = stat.starttime


def test_this_process_is_running_or_sleeping_and_its_parent_is_its_parent() -> None:
    stat = procfs.read_stat(os.getpid())
    assert stat.pid == os.getpid()
    assert stat.state in ("R", "S")
    assert stat.ppid == os.getppid() and stat.pgrp == os.getpgrp()
    assert stat.starttime > 0
    assert procfs.read_stat("self").starttime == stat.starttime


def test_this_processs_threads_include_its_main_thread_and_a_started_one() -> None:
    done = threading.Event()
    worker = threading.Thread(target=done.wait, daemon=True)
    worker.start()
    try:
        tids = procfs.thread_ids(os.getpid())
        assert os.getpid() in tids
        assert worker.native_id in tids
        assert set(procfs.thread_ids("self")) >= {os.getpid(), worker.native_id}
        assert procfs.read_stat(os.getpid(), worker.native_id).state in ("S", "R")
        # a thread may name itself anything (15 bytes at most): spaces and parentheses too
        name = "a) b (c) S 1"
        Path(f"/proc/self/task/{worker.native_id}/comm").write_text(name)
        stat = procfs.read_stat(os.getpid(), worker.native_id)
        assert stat.comm == name and stat.pid == worker.native_id
        assert stat.state in ("S", "R") and stat.ppid == os.getppid()
    finally:
        done.set()
        worker.join()


def test_cpu_seconds_grow_with_a_busy_loop() -> None:
    def tree_ticks() -> int:  # user/CLK_TCK + system/CLK_TCK: compare in ticks, not floats
        return round(sum(procfs.tree_cpu_times(os.getpid())) * procfs.CLK_TCK)

    before = procfs.read_stat(os.getpid()).cpu_ticks
    tree_before = tree_ticks()
    assert before >= 0 and tree_before >= before
    start = time.process_time()
    while time.process_time() - start < 0.1:  # ten ticks at 100 Hz, on a CPU
        pass
    after = procfs.read_stat(os.getpid()).cpu_ticks
    assert after > before
    assert tree_ticks() > tree_before


def test_this_process_is_among_its_parents_children() -> None:
    assert os.getpid() in procfs.children().get(os.getppid(), [])


def test_a_process_that_is_not_there_raises_oserror(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        procfs.read_stat(12345, proc=tmp_path)
    with pytest.raises(OSError):
        procfs.thread_ids(12345, proc=tmp_path)
    assert procfs.children(tmp_path) == {}
    assert procfs.tree_cpu_times(12345, proc=tmp_path) == (0.0, 0.0)


def test_a_fake_tree_sums_its_descendants_and_skips_what_it_cannot_read(tmp_path: Path) -> None:
    tick = procfs.CLK_TCK
    for pid, ppid, utime, stime in ((10, 1, tick, 0), (11, 10, 2 * tick, tick), (12, 11, 0, tick)):
        (tmp_path / str(pid)).mkdir()
        line = _line(pid, f"p {pid})", ppid=ppid, utime=utime, stime=stime)
        (tmp_path / str(pid) / "stat").write_text(line)
    (tmp_path / "13").mkdir()  # exited between the listing and the read: no stat
    (tmp_path / "self").mkdir()
    assert procfs.children(tmp_path) == {1: [10], 10: [11], 11: [12]}
    assert procfs.tree_cpu_times(10, proc=tmp_path) == (3.0, 2.0)
    assert procfs.tree_cpu_times(11, proc=tmp_path) == (2.0, 2.0)


SNMP_AND_NETSTAT = """Tcp: ActiveOpens PassiveOpens OutRsts
Tcp: 10 20 7
TcpExt: SyncookiesSent ListenOverflows ListenDrops
TcpExt: 0 5 6
IpExt: InOctets
IpExt: 99
"""


def test_net_counters_are_read_by_group_and_name() -> None:
    assert procfs.parse_net_counters(SNMP_AND_NETSTAT) == {
        "Tcp": {"ActiveOpens": 10, "PassiveOpens": 20, "OutRsts": 7},
        "TcpExt": {"SyncookiesSent": 0, "ListenOverflows": 5, "ListenDrops": 6},
        "IpExt": {"InOctets": 99},
    }


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("Tcp: OutRsts\nUdp: 3\n", "'Tcp' names followed by 'Udp' values"),
        ("Tcp: A B\nTcp: 1\n", "'Tcp' has 2 names, 1 values"),
        ("Tcp: A\nTcp: 1\nUdp: B\n", "'Udp' names without values"),
    ],
)
def test_malformed_net_counters_are_refused(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        procfs.parse_net_counters(text)


TCP_TABLE = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000003 00:00000000 00000000     0        0 1 1
   1: 0100007F:1F90 0A00007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 2 1
   2: 00000000:2382 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 3 1
   3: 0900007F:0050 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4 1
"""


def test_listen_rows_are_read_with_their_accept_queue(tmp_path: Path) -> None:
    want = [procfs.ListenSocket("127.0.0.1", 8080, 3), procfs.ListenSocket("0.0.0.0", 9090, 0)]
    assert procfs.parse_listen_sockets(TCP_TABLE) == want
    table = tmp_path / "tcp"
    table.write_text(TCP_TABLE)
    assert procfs.listen_sockets(table) == want


def test_this_process_reads_its_own_session_and_nice() -> None:
    stat = procfs.read_stat(os.getpid())
    assert stat.session == os.getsid(0)
    assert stat.nice == os.nice(0)
    assert stat.pgrp == os.getpgrp() and stat.ppid == os.getppid()
