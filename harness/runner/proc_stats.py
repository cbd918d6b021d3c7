"""What the run's own processes hold, read every second into the history: descriptors,
memory, CPU, and the history's bytes on disk.

A harness that validates hour-long incidents must show it survives them itself: a front
or a generator leaking descriptors, growing its memory or its history without bound is
the harness failing, not the system under test. Each reading is one harness row per role,
event ``process_stats``:

- a process role (``acceptor``, ``broker``, ``load``): ``detail`` = {``role``, ``pgids``,
  ``processes``, ``fds``, ``rss_kb``, ``cpu_s``}, summed over every process of the role's
  process groups (the runner starts each in a session of its own, so a split acceptor's
  processor processes and a Locust master's workers are counted with it), and
  ``loop_busy`` / ``loop_busy_pid``: the largest share of the time since the last reading
  that one of its processes' main threads (an event loop: the acceptor's, a processor
  process's) spent on a CPU or runnable and waiting for one
  (``/proc/<pid>/task/<pid>/schedstat``); for ``load``, any of its threads' (the storm
  engine's loop runs on a thread of gevent's pool; ``loop_busy_pid`` is then that thread's
  id). A loop busy for the whole interval never went idle: it had more work than time,
  which is what `front_saturation` and `offered_load` read. ``loop_others`` (``acceptor``,
  ``load``): the share its process's other threads spent on a CPU, the most the loop can
  have waited for the GIL. ``loop_wait``: of the busy share, the part its loop was runnable
  and waiting for a CPU (schedstat's run-queue wait): starved by the machine's other
  processes rather than busy with its own work. ``loop_read_mono_ns`` /
  ``loop_read_ms``: when that read of the loops ended and how long it took (the loops are
  read together after the scan, so the span that places them is short even when the scan
  is slow);
- ``history``: {``role``, ``bytes``, ``files``} of the run's history folder.

Read from ``/proc`` (Linux): a process that exits between the listing and the read is
skipped. A container's broker has no local process group and is not sampled.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Literal

from base import procfs
from base.history.rows import HarnessProcessStats, HarnessProcessStatsDetail, Row
from harness.runner.periodic import Periodic

EVENT = "process_stats"
#: the row of the sampling process itself (the runner): what the run's own readers cost
RUNNER = "runner"
#: the whole machine's busy CPU seconds (`/proc/stat`): what none of the run's roles used
#: is a neighbour's
MACHINE = "machine"
#: roles whose busiest thread of any kind is their loop (the storm engine runs on a thread
#: of gevent's pool, not the main one); the others' loop is their main thread
EVERY_THREAD = frozenset({"load"})
#: roles whose loops run Python: every thread of their processes is read, so the time the
#: loop's process's other threads ran (`loop_others`) bounds the loop's waits for the GIL
THREADED = frozenset({"acceptor", "load"})
PROC = Path("/proc")
#: the readings whose peak the summary says
PEAKS: tuple[Literal["fds", "rss_kb", "bytes"], ...] = ("fds", "rss_kb", "bytes")
_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def read_stat(text: str) -> tuple[int, float, int]:
    """``/proc/<pid>/stat`` -> (process group, CPU seconds user+system, RSS in kB). The
    command name (field 2) may hold spaces and parentheses: fields are read after its
    last ``)``."""
    stat = procfs.parse_stat(text)
    return stat.pgrp, stat.cpu_s, stat.rss_pages * _PAGE_KB


def schedstat(pid: int, proc: Path = PROC, tid: int | None = None) -> tuple[int, int]:
    """(ns on a CPU, ns runnable but waiting for one) of a process's main thread (or of its
    thread `tid`)."""
    task = pid if tid is None else tid
    fields = (proc / str(pid) / "task" / str(task) / "schedstat").read_text().split()
    return int(fields[0]), int(fields[1])


def scan(proc: Path = PROC) -> dict[int, list[tuple[int, float, int]]]:
    """Every readable process by its process group: (pid, CPU seconds, RSS kB). One pass
    over ``proc`` per reading, whatever the number of roles."""
    groups: dict[int, list[tuple[int, float, int]]] = {}
    for entry in os.scandir(proc):
        if not entry.name.isdigit():
            continue
        try:
            pgrp, cpu, rss_kb = read_stat((Path(entry.path) / "stat").read_text())
        except (OSError, ValueError, IndexError):
            continue  # exited meanwhile, or not ours to read
        groups.setdefault(pgrp, []).append((int(entry.name), cpu, rss_kb))
    return groups


def group_totals(
    members: Sequence[tuple[int, float, int]], proc: Path = PROC
) -> HarnessProcessStatsDetail:
    """Processes, descriptors, RSS and CPU summed over ``members`` (`scan`'s entries of a
    role's groups), as those keys of its row's detail; one gone before its descriptors
    were counted is left out."""
    out: HarnessProcessStatsDetail = {"processes": 0, "fds": 0, "rss_kb": 0, "cpu_s": 0.0}
    for pid, cpu, rss_kb in members:
        try:
            fds = len(os.listdir(proc / str(pid) / "fd"))
        except OSError:
            continue
        out["processes"] += 1
        out["fds"] += fds
        out["rss_kb"] += rss_kb
        out["cpu_s"] += cpu
    out["cpu_s"] = round(out["cpu_s"], 2)
    return out


def folder_bytes(path: Path) -> tuple[int, int]:
    """(bytes, files) under ``path``."""
    total = files = 0
    for root, _dirs, names in os.walk(path):
        for name in names:
            try:
                total += os.stat(os.path.join(root, name)).st_size
                files += 1
            except OSError:
                continue
    return total, files


class ProcStatsSampler:
    """Every ``interval_s``: one row per role of ``roles()`` (role -> process group ids,
    asked each time: brokers restart, phases come and go) and one for ``history``."""

    def __init__(
        self,
        write: Callable[[Row], None],
        roles: Callable[[], Mapping[str, Sequence[int]]],
        history: Path | None,
        *,
        interval_s: float = 1.0,
        max_duration_s: float = 24 * 3600.0,
        proc: Path = PROC,
        clock_ns: Callable[[], int] = time.monotonic_ns,
        own: bool = False,
    ) -> None:
        self.write = write
        #: also a row for the sampling process itself (role `runner`)
        self.own = own
        self.roles = roles
        self.history = history
        self.proc = proc
        self.clock_ns = clock_ns
        self.readings = 0
        self.peak: dict[str, dict[str, float]] = {}
        #: per role: when its loops were last read, and per thread (pid, busy ns, on-CPU ns)
        self._busy: dict[str, tuple[int, dict[int, tuple[int, int, int]]]] = {}
        self._every = Periodic(
            self.sample_once, name="proc-stats", interval_s=interval_s,
            max_duration_s=max_duration_s,
        )  # fmt: skip

    def sample_once(self) -> None:
        t0 = self.clock_ns()
        rows: list[HarnessProcessStatsDetail] = []
        roles = {role: pgids for role, pgids in sorted(self.roles().items()) if pgids}
        groups = scan(self.proc) if roles else {}
        for role, pgids in roles.items():
            members = [m for g in pgids for m in groups.get(g, [])]
            rows.append(
                {
                    "role": role,
                    "pgids": list(pgids),
                    **group_totals(members, self.proc),
                    **self._loop_busy(role, [pid for pid, _, _ in members]),
                }
            )
        if self.own and roles:  # the runner itself: its readers, scrapes and waits (only it)
            me = os.getpid()
            own = [m for m in groups.get(os.getpgrp(), []) if m[0] == me]
            rows.append({"role": RUNNER, "pgids": [], **group_totals(own, self.proc)})
            with contextlib.suppress(OSError, ValueError):  # and the whole machine's CPU
                busy = round(procfs.machine_busy_s(self.proc), 2)
                rows.append({"role": MACHINE, "pgids": [], "cpu_s": busy})
        if self.history is not None:
            size, files = folder_bytes(self.history)
            rows.append({"role": "history", "bytes": size, "files": files})
        t1 = self.clock_ns()
        for detail in rows:
            self.write(HarnessProcessStats(t0, latency_ms=(t1 - t0) / 1e6, detail=detail))
            peak = self.peak.setdefault(str(detail["role"]), {})
            for key in PEAKS:
                if key in detail:
                    peak[key] = max(peak.get(key, 0), float(detail[key]))
        self.readings += 1

    def _loop_busy(self, role: str, pids: Sequence[int]) -> HarnessProcessStatsDetail:
        """The busiest loop of the role since its last reading: its share of the interval
        (on a CPU or waiting for one) and its pid (thread id); ``loop_others``: the share
        its process's other threads spent on a CPU (a Python loop waiting for the GIL that
        one of them holds is off-CPU, yet not idle: `front_saturation` counts that time as
        possibly busy); and when the loops were read (``loop_read_mono_ns``: the end of the
        read, ``loop_read_ms``: how long it took).

        The loops are read together, after the scan, between two clock readings: that span,
        not the whole reading's, is what places the reads in time (on a busy machine a
        scan of ``/proc`` takes hundreds of ms, which would leave a reading unable to tell
        a busy loop from one at a third of its time). The share's interval runs from the
        end of one read to the end of the next."""
        tasks: list[tuple[int, int]] = []
        for pid in pids:
            tids = [pid]
            if role in THREADED:
                with contextlib.suppress(OSError):
                    tids = procfs.thread_ids(pid, self.proc)
            tasks += [(pid, tid) for tid in tids]
        began = self.clock_ns()
        now_read: dict[int, tuple[int, int, int]] = {}  # tid -> (pid, busy ns, on-CPU ns)
        for pid, tid in tasks:
            with contextlib.suppress(OSError, ValueError, IndexError):  # gone, or none
                run_ns, wait_ns = schedstat(pid, self.proc, tid)
                now_read[tid] = (pid, run_ns + wait_ns, run_ns)
        now = self.clock_ns()
        if not now_read:
            return {}
        last = self._busy.get(role)
        self._busy[role] = (now, now_read)
        read: HarnessProcessStatsDetail = {
            "loop_read_mono_ns": now,
            "loop_read_ms": round((now - began) / 1e6, 3),
        }
        if last is None or now <= last[0]:
            return read
        interval = now - last[0]
        seen = {tid: v for tid, v in now_read.items() if tid in last[1]}
        loops = {
            tid: (busy - last[1][tid][1]) / interval
            for tid, (pid, busy, _) in seen.items()
            if role in EVERY_THREAD or tid == pid
        }
        if not loops:
            return read
        tid = max(loops, key=lambda t: loops[t])
        owner = seen[tid][0]
        others = sum(
            run - last[1][t][2] for t, (pid, _, run) in seen.items() if pid == owner and t != tid
        )
        _, busy, run = seen[tid]
        waited = (busy - run) - (last[1][tid][1] - last[1][tid][2])
        return {
            "loop_busy": round(loops[tid], 4),
            "loop_busy_pid": tid,
            "loop_others": round(others / interval, 4),
            # of its busy share, the part it was runnable but waiting for a CPU (starved by
            # the machine's other processes, not busy with its own work)
            "loop_wait": round(max(0, waited) / interval, 4),
            **read,
        }

    def start(self) -> ProcStatsSampler:
        self._every.start()
        return self

    def stop(self) -> None:
        self._every.stop()

    def summary(self) -> str:
        parts = []
        for role, peak in sorted(self.peak.items()):
            if not peak:  # a role with nothing but CPU (the machine's row)
                continue
            shown = ", ".join(
                f"{k.replace('_kb', '')} {v / 1024:.0f} MB" if k == "rss_kb"
                else f"{v / 2**20:.1f} MB" if k == "bytes" else f"{k} {v:.0f}"
                for k, v in peak.items()
            )  # fmt: skip
            parts.append(f"{role} peak {shown}")
        return f"{self.readings} readings; " + "; ".join(parts)
