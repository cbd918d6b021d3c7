"""A process's and its threads' entries in Linux ``/proc``: the one parser of
``/proc/<pid>/stat`` that the harness and its benches read states, CPU times, start times
and parents with.

Field 2 of a stat line, the command name in parentheses, may itself hold spaces and
parentheses (a thread may name itself anything): the fields are read after its last ``)``.
Field numbers below are proc(5)'s: ``rest[0]`` is field 3, the state.

Standard library only, so that anything may import it. Reading a process that is gone (or
a ``/proc`` that is not there) raises `OSError` (`FileNotFoundError`, or
`ProcessLookupError` in a race with its exit); callers decide what a vanished process means
to them.
"""

from __future__ import annotations

import os
import socket
import struct
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
#: clock ticks a second: the unit of stat's CPU and start times
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Stat:
    """One ``/proc/<pid>/stat`` (or ``/proc/<pid>/task/<tid>/stat``) line."""

    pid: int
    comm: str
    #: fields 3 (state) onwards, as text
    rest: tuple[str, ...]

    @property
    def state(self) -> str:
        """R, S, D, T (stopped), t (traced), Z, …"""
        return self.rest[0]

    @property
    def ppid(self) -> int:
        return int(self.rest[1])

    @property
    def pgrp(self) -> int:
        return int(self.rest[2])

    @property
    def session(self) -> int:
        return int(self.rest[3])

    @property
    def nice(self) -> int:
        """Field 19: -20 (most favoured) to 19."""
        return int(self.rest[16])

    @property
    def utime(self) -> int:
        """User CPU time, clock ticks."""
        return int(self.rest[11])

    @property
    def stime(self) -> int:
        """System CPU time, clock ticks."""
        return int(self.rest[12])

    @property
    def cutime(self) -> int:
        """Reaped children's user CPU time, clock ticks."""
        return int(self.rest[13])

    @property
    def cstime(self) -> int:
        """Reaped children's system CPU time, clock ticks."""
        return int(self.rest[14])

    @property
    def starttime(self) -> int:
        """Clock ticks from boot to the process's start: with the pid, names it for good."""
        return int(self.rest[19])

    @property
    def rss_pages(self) -> int:
        return int(self.rest[21])

    @property
    def cpu_ticks(self) -> int:
        """utime + stime."""
        return self.utime + self.stime

    @property
    def cpu_s(self) -> float:
        """utime + stime, in seconds."""
        return self.cpu_ticks / CLK_TCK


def parse_stat(text: str) -> Stat:
    """A stat line -> `Stat`; `ValueError` when it has no ``(comm)``."""
    head, sep, tail = text.rpartition(")")
    pid, paren, comm = head.partition(" (")
    if not sep or not paren:
        raise ValueError(f"not a /proc stat line: {text[:80]!r}")
    return Stat(int(pid), comm, tuple(tail.split()))


def read_stat(pid: int | str, tid: int | None = None, proc: Path = PROC) -> Stat:
    """``/proc/<pid>/stat``, or with `tid` that of one of its threads."""
    path = proc / str(pid) if tid is None else proc / str(pid) / "task" / str(tid)
    return parse_stat((path / "stat").read_text())


def start_time(pid: int) -> str:
    """The process's start time (clock ticks since boot, stat field 22), or "" when it is
    gone or unreadable. With the pid it names one process for good: a reused pid has
    another start time."""
    try:
        return str(read_stat(pid).starttime)
    except (OSError, ValueError, IndexError):
        return ""


def alive(pid: int, started: str = "") -> bool:
    """Whether process ``pid`` runs and, given its ``started`` (`start_time`), is the one
    that started then."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone else's: it exists
    return not started or start_time(pid) in ("", started)


def machine_busy_s(proc: Path = PROC) -> float:
    """CPU seconds every CPU of the machine spent busy since boot (``/proc/stat``'s first
    line: user, nice, system, irq, softirq, steal; not idle or iowait): with two readings,
    how many cores the whole machine used, whoever used them."""
    fields = (proc / "stat").read_text().split("\n", 1)[0].split()
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[1:9])
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


def thread_ids(pid: int | str, proc: Path = PROC) -> list[int]:
    """The ids of a process's threads (its ``task`` folder; the main thread's is the pid).
    `pid` may be ``"self"``."""
    return [int(t) for t in os.listdir(proc / str(pid) / "task") if t.isdigit()]


def children(proc: Path = PROC) -> dict[int, list[int]]:
    """Parent pid -> its live children's pids, over every process this one can read."""
    kids: dict[int, list[int]] = {}
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        try:
            stat = read_stat(entry, proc=proc)
        except OSError:
            continue  # exited meanwhile
        kids.setdefault(stat.ppid, []).append(int(entry))
    return kids


def tree_cpu_times(pid: int, proc: Path = PROC) -> tuple[float, float]:
    """(user, system) CPU seconds of `pid` and its live descendants; a process gone
    meanwhile (and what only it led to) counts nothing."""
    kids = children(proc)
    user = system = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            stat = read_stat(p, proc=proc)
        except OSError:
            continue
        user += stat.utime
        system += stat.stime
        todo.extend(kids.get(p, []))
    return user / CLK_TCK, system / CLK_TCK


# -- the network namespace's tables ------------------------------------------------------------
NET_SNMP = PROC / "net" / "snmp"
NET_NETSTAT = PROC / "net" / "netstat"
NET_TCP = PROC / "net" / "tcp"
#: ``TCP_LISTEN`` in ``include/net/tcp_states.h``: the state of a listening socket
_TCP_STATE_LISTEN = 10
#: the same in ``/proc/net/tcp``'s state column, in hex
TCP_LISTEN = f"{_TCP_STATE_LISTEN:02X}"
#: bytes of ``struct tcp_info`` read by `accept_queue`: up to tcpi_sacked
_TCP_INFO_LEN = 32


def parse_net_counters(text: str) -> dict[str, dict[str, int]]:
    """``/proc/net/snmp`` or ``/proc/net/netstat`` text (or both, one after the other) ->
    group -> counter -> value.

    Both files are pairs of lines, a group's names then its values (``TcpExt: a b`` /
    ``TcpExt: 1 2``). `ValueError` when a names line is not followed by its own group's
    values, or the two lines differ in length."""
    groups: dict[str, dict[str, int]] = {}
    lines = text.splitlines()
    if len(lines) % 2:
        raise ValueError(f"/proc/net: {lines[-1].partition(':')[0]!r} names without values")
    for names, values in zip(lines[::2], lines[1::2], strict=True):
        group, _, keys = names.partition(":")
        vgroup, _, nums = values.partition(":")
        if vgroup != group:
            raise ValueError(f"/proc/net: {group!r} names followed by {vgroup!r} values")
        names_, nums_ = keys.split(), nums.split()
        if len(names_) != len(nums_):
            raise ValueError(f"/proc/net: {group!r} has {len(names_)} names, {len(nums_)} values")
        groups.setdefault(group.strip(), {}).update(zip(names_, map(int, nums_), strict=True))
    return groups


@dataclass(frozen=True)
class ListenSocket:
    """A listening IPv4 TCP socket, from one LISTEN row of ``/proc/net/tcp``."""

    ip: str
    port: int
    #: connections that completed their handshake and wait to be accepted (rx_queue)
    accept_queue: int


def parse_listen_sockets(text: str) -> list[ListenSocket]:
    """``/proc/net/tcp`` text (a header line, then one socket a line) -> its LISTEN rows.
    Addresses are written as the kernel stores them: ``0100007F:1F90`` is 127.0.0.1:8080."""
    out = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 5 or fields[3] != TCP_LISTEN:
            continue
        addr, _, port = fields[1].partition(":")
        ip = ".".join(str(b) for b in reversed(bytes.fromhex(addr)))
        out.append(ListenSocket(ip, int(port, 16), int(fields[4].partition(":")[2], 16)))
    return out


def listen_sockets(table: Path = NET_TCP) -> list[ListenSocket]:
    """The listening IPv4 sockets of this process's network namespace."""
    return parse_listen_sockets(table.read_text())


def accept_queue(sock: socket.socket) -> int | None:
    """Connections waiting in a listening socket's accept queue now, read from the socket
    itself (Linux ``TCP_INFO``: for a LISTEN socket ``tcpi_unacked`` is the queue's length,
    ``tcpi_sacked`` its limit), so in any network namespace: the count `ListenSocket`
    reads from ``/proc/net/tcp``. None where the kernel does not say (not Linux, not TCP)."""
    tcp_info = getattr(socket, "TCP_INFO", None)
    if tcp_info is None:
        return None
    try:
        raw = sock.getsockopt(socket.IPPROTO_TCP, tcp_info, _TCP_INFO_LEN)
    except OSError:
        return None
    if len(raw) < _TCP_INFO_LEN or raw[0] != _TCP_STATE_LISTEN:
        return None
    # eight one-byte fields, then u32 rto, ato, snd_mss, rcv_mss, unacked
    return int(struct.unpack_from("=I", raw, 24)[0])
