"""Benchmark: the acceptor's cost, measured against the same broker reached directly.

One real broker with a listener per path: PLAINTEXT (clients reach it directly) and
FRONTED (advertised as the acceptor's address, where the acceptor forwards; with
``--compare-ref`` also FRONTEDREF, advertised as the other commit's acceptor). Each acceptor
runs as its own process (`harness acceptor`, history ON, metrics on), as in production, so it
does not share the client's GIL. In one run, each phase alternating the paths round by round
(the machine is shared: ratios within one run are what counts):

  trogdor  Kafka's own ConnectionStress (org.apache.kafka:trogdor, 8 threads), CONNECT (a TCP
           connect and close) and FETCH_METADATA (a new admin client per operation: two
           connections, ApiVersions + Metadata each); per round: connections/s counted by the
           server (the broker's connection-creation counter for direct, the acceptor's
           accepted counter through it), Trogdor's own successful operations/s, the kernel's
           ListenOverflows/ListenDrops and resets sent (Tcp OutRsts, TcpExt TCPAbortOnClose/
           OnData) as deltas over the round, the acceptor's CPU per connection;
  producebench  Kafka's own producer load (Trogdor ProduceBench: the Java producer, acks=1,
           512 B values, pipelining as configured by default): unthrottled throughput in
           alternating rounds, then p50/p99 at half of the slower path's throughput;
  accept   connect -> ApiVersions -> close from --threads Python threads; acceptor CPU per
           connection (utime+stime from /proc);
  produce  --records records of --record-size bytes, acks=1, batched;
  latency  one producer at half of the slower path's throughput (capped), p50/p99 per record.

    .venv/bin/python -m bench.acceptor                      # all phases, ~4 minutes
    .venv/bin/python -m bench.acceptor --phases trogdor --rounds 3 --compare-ref HEAD~1
    .venv/bin/python -m bench.acceptor --phases trogdor --profile   # + py-spy of the acceptor
    .venv/bin/python -m bench.acceptor --phases trogdor,producebench --cpus split
                                     # server side on its own CPU, the load on the others
    .venv/bin/python -m bench.acceptor --phases trogdor,producebench --cpus front
                                     # the acceptor on its own CPU (its own host)

The kernel counters are per network namespace: as root (with util-linux ``unshare``) the
bench re-runs itself in a private one with only loopback up (``--netns auto``), so the
counters hold this bench's traffic only; elsewhere they are machine-wide (said in the output).
``--compare-ref GIT_REF`` adds the acceptor of another commit (``git archive`` of its
``harness/``) as a third path, so current/ref ratios come from the same rounds.
``--history-off-path`` adds the current acceptor without history (path ``nohist``), so the
history's own share shows in the same rounds. ``--haproxy-path`` adds Debian's HAProxy as a
plain TCP relay (path ``haproxy``: one thread, no PROXY header, no parsing, ``splice()``
between the sockets, upstream opened at accept, Kafka's accept queue of 50) in front of its
own broker listener: what a relay in C that only moves bytes costs on this machine.
Each front runs in a session of its own (``--sessions own``), as the broker does: with the
kernel's autogroup on, the scheduler shares the CPUs between sessions first, and a front in
the load's session (``--sessions load``, the layout until session 8) competes with
Trogdor's threads while Kafka does not. ``bench.accept_floor`` measures the cheapest Python
fronts under the same CONNECT storm.
``--profile`` adds one Trogdor round per action through the current acceptor under
``py-spy record`` (not counted in the ratios) and prints its hot spots (self and inclusive
share of the acceptor's samples); ``--profile perf`` samples its CPU with ``perf record``
instead (kernel included). The load average is printed next to every round. For the
acceptor's own CPU per connection and per request without a broker or JVM (seconds, not
minutes), see ``bench.front_cost``.

Prints progress, then per-action tables and the goals of issue 14 (Trogdor >= 1.0x direct for
both actions, no more listen-queue overflows than direct, no resets where direct has none,
produce throughput >= 0.95x direct, added p99 <= 1 ms at half load; with ``--haproxy-path``,
beside each, whether HAProxy meets it in the same run); JSON in
bench/results/acceptor-<time>.json (or --json FILE).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acceptor.config import DEFAULTS as ACCEPTOR_DEFAULTS
from acceptor.testing import round_trip
from base import procfs
from base.localnet import free_port
from bench.output import write_results
from bench.toolkit.fronts import (
    acceptor_accepted,
    add_sessions_option,
    autogroup,
    kill_descendants,
    ready_info,
    ref_checkout,
    start_acceptor,
    stop_process,
)
from bench.toolkit.load import produce_throughput, rotations
from bench.toolkit.netns import in_private_netns, net_counters, reexec_in_netns
from bench.toolkit.profiling import hot_spots, py_spy, sampling
from bench.toolkit.trogdor import (
    accepted_total,
    exec_trogdor,
    run_trogdor,
    tree_cpu_s,
    trogdor_classpath,
)
from harness.runner.proc_stats import schedstat
from loadprofiles.haproxy import start_haproxy

PHASES = ("trogdor", "producebench", "accept", "produce", "latency")
ACTIONS = ("CONNECT", "FETCH_METADATA")


def _progress(msg: str) -> None:
    print(f"[bench] {msg}", flush=True)


def _load() -> float:
    return round(os.getloadavg()[0], 2)


# -- measurements -----------------------------------------------------------------------------
def accept_rate(addr: tuple[str, int], threads: int, seconds: float) -> float:
    counts = [0] * threads
    bad: list[str] = []

    def loop(i: int) -> None:
        end = time.monotonic() + seconds
        n = 0
        while time.monotonic() < end and n < 200_000:
            out = round_trip(addr, f"127.0.{10 + i}.{n % 200 + 1}", timeout=10)
            if out == "ok":
                counts[i] += 1
            else:
                bad.append(out)
            n += 1

    ts = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    elapsed = time.monotonic() - t0
    if bad:
        _progress(f"  {len(bad)} failed round trips: {sorted(set(bad))}")
    return sum(counts) / elapsed


def cpu_idle() -> tuple[float, float]:
    """(idle, total) jiffies of the whole machine (/proc/stat), iowait counted idle."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return float(fields[3] + fields[4]), float(sum(fields[:8]))


# -- acceptor processes -----------------------------------------------------------------------


@dataclass
class Target:
    """One path to the broker: direct, or through an acceptor process."""

    name: str
    port: int
    proc: subprocess.Popen[bytes] | None = None
    metrics_url: str | None = None

    @property
    def addr(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)


# -- Trogdor ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class CpuPlan:
    """Which CPUs the broker, the fronts (acceptors, HAProxy) and the load run on."""

    broker: set[int]
    fronts: set[int]
    load: set[int]


def cpu_plan(layout: str) -> CpuPlan | None:
    """``split``: the server side (broker and fronts) on the last CPU this process may use,
    the load on the others; ``front``: the fronts alone on the last CPU, the broker and the
    load on the others (a front on its own host); None when shared."""
    if layout == "shared":
        return None
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit(f"--cpus {layout} needs at least two CPUs")
    last, others = {cpus[-1]}, set(cpus[:-1])
    if layout == "split":
        return CpuPlan(broker=last, fronts=last, load=others)
    return CpuPlan(broker=others, fronts=last, load=others)


def front_nice(pid: int, nice: int | None) -> None:
    """Give HAProxy's one thread a nice value (on Linux a pid's priority is its main
    thread's), as `acceptor.nice` does for every thread of an acceptor."""
    if nice is None:
        return
    os.setpriority(os.PRIO_PROCESS, pid, nice)
    _progress(f"pid {pid}: nice {nice}")


@dataclass
class BrokerProbe:
    """Where the bench reads the broker's own numbers: its metrics (connections created)
    and its process (CPU)."""

    metrics_url: str | None
    pid: int | None

    def cpu(self) -> float:
        return tree_cpu_s(self.pid) if self.pid else 0.0


def children_cpu() -> float:
    """utime + stime of this process's waited-for children (Trogdor's JVM once it ends)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


@dataclass(frozen=True)
class CpuMark:
    """CPU seconds spent so far by a front (user space, kernel; 0 for direct), the broker
    and this process's waited-for children (the load), and the machine's (idle, total)
    jiffies: read before and after a run, their differences are what the run cost."""

    front_user: float
    front_kernel: float
    broker: float
    client: float
    machine: tuple[float, float]

    @classmethod
    def take(cls, t: Target, broker: BrokerProbe) -> CpuMark:
        user, kernel = procfs.tree_cpu_times(t.proc.pid) if t.proc else (0.0, 0.0)
        return cls(user, kernel, broker.cpu(), children_cpu(), cpu_idle())

    @property
    def front(self) -> float:
        return self.front_user + self.front_kernel

    def kernel_pct(self, later: CpuMark) -> float | None:
        """The kernel's share of the front's CPU since this mark (syscalls, TCP)."""
        spent = later.front - self.front
        if spent <= 0:
            return None
        return round((later.front_kernel - self.front_kernel) * 100 / spent, 1)

    def idle_pct(self, later: CpuMark) -> float | None:
        """The machine's idle share since this mark."""
        total = later.machine[1] - self.machine[1]
        if total <= 0:
            return None
        return round(100 * (later.machine[0] - self.machine[0]) / total, 1)


def trogdor_round(
    cp: str, t: Target, action: str, args: argparse.Namespace, work: Path, broker: BrokerProbe
) -> dict[str, Any]:
    """One ConnectionStress run against `t`; counters read around the whole run."""
    load = _load()
    net0 = net_counters()
    # an acceptor counts what it accepted; direct and HAProxy (which connects upstream at
    # accept) are counted by the broker
    acc0 = acceptor_accepted(t.metrics_url) if t.metrics_url else accepted_total(broker.metrics_url)
    sched0 = schedstat(t.proc.pid) if t.proc else (0, 0)
    mark0 = CpuMark.take(t, broker)
    trog = run_trogdor(
        cp, f"127.0.0.1:{t.port}", action, args.trogdor_seconds, args.trogdor_threads, None,
        work, None,
    )  # fmt: skip
    mark1 = CpuMark.take(t, broker)
    sched1 = schedstat(t.proc.pid) if t.proc else (0, 0)
    acc1 = acceptor_accepted(t.metrics_url) if t.metrics_url else accepted_total(broker.metrics_url)
    net1 = net_counters()
    seconds = args.trogdor_seconds
    row: dict[str, Any] = {
        "action": action,
        "path": t.name,
        "load_avg": load,
        "trogdor_ok_per_s": trog["ops_per_s"],
        "trogdor_connections": trog.get("totalConnections"),
        "trogdor_failed": trog.get("totalFailedConnections"),
        **{k: net1[k] - net0[k] for k in net1},
    }
    row["resets_sent"] = row["OutRsts"]
    if (idle := mark0.idle_pct(mark1)) is not None:  # over the run, JVM start included
        row["machine_idle_pct"] = idle
    if t.proc:  # the event loop's thread over the load window: running / waiting for a CPU
        row["loop_on_cpu_pct"] = round((sched1[0] - sched0[0]) / seconds / 1e7, 1)
        row["loop_runq_wait_pct"] = round((sched1[1] - sched0[1]) / seconds / 1e7, 1)
    if (kernel := mark0.kernel_pct(mark1)) is not None:
        row["kernel_cpu_pct"] = kernel
    front, broker_s = mark1.front - mark0.front, mark1.broker - mark0.broker
    client_s = mark1.client - mark0.client
    if acc0 is not None and acc1 is not None:
        row["accepted"] = acc1 - acc0
        row["conn_per_s"] = round((acc1 - acc0) / seconds, 1)
        if t.proc and acc1 > acc0:
            row["cpu_ms_per_conn"] = round(front * 1000 / (acc1 - acc0), 4)
        if acc1 > acc0:  # the CPU the machine spent per connection, by whom
            n = acc1 - acc0
            row["broker_cpu_ms_per_conn"] = round(broker_s * 1000 / n, 4)
            row["server_cpu_ms_per_conn"] = round((broker_s + front) * 1000 / n, 4)
            row["client_cpu_ms_per_conn"] = round(client_s * 1000 / n, 4)
    if "error" in trog:
        row["error"] = trog["error"][-500:]
    return row


def trogdor_phase(
    cp: str, targets: list[Target], args: argparse.Namespace, work: Path, broker: BrokerProbe
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for action in args.actions:
        for rnd, order in rotations(targets, args.rounds):
            for t in order:
                row = trogdor_round(cp, t, action, args, work, broker)
                row["round"] = rnd + 1
                rows.append(row)
                _progress(
                    f"trogdor {action:<14} round {rnd + 1} {t.name:<8} "
                    f"{row.get('conn_per_s', float('nan')):>7.0f} conn/s (server), "
                    f"Trogdor ok {row['trogdor_ok_per_s']:>6.0f}/s, overflows "
                    f"{row['ListenOverflows']}/{row['ListenDrops']} drops, SYNs sent again "
                    f"{row.get('TCPSynRetrans', '-')}, resets sent "
                    f"{row['resets_sent']}, CPU {row.get('cpu_ms_per_conn', '-')} ms/conn, "
                    f"broker {row.get('broker_cpu_ms_per_conn', '-')}, "
                    f"client {row.get('client_cpu_ms_per_conn', '-')} ms/conn, "
                    f"loop on CPU {row.get('loop_on_cpu_pct', '-')} % / waiting for one "
                    f"{row.get('loop_runq_wait_pct', '-')} %, kernel "
                    f"{row.get('kernel_cpu_pct', '-')} % of its CPU; machine idle "
                    f"{row.get('machine_idle_pct', '-')} % (load {row['load_avg']})"
                    + (f"  ERROR {row['error'][-200:]!r}" if "error" in row else "")
                )
    return rows


def summarize_trogdor(rows: list[dict[str, Any]], paths: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for action in ACTIONS:
        per: dict[str, Any] = {}
        for p in paths:
            rs = [r for r in rows if r["action"] == action and r["path"] == p]
            if not rs:
                continue
            conn = [r["conn_per_s"] for r in rs if "conn_per_s" in r]
            cpu = [r["cpu_ms_per_conn"] for r in rs if "cpu_ms_per_conn" in r]
            per[p] = {
                "conn_per_s": statistics.mean(conn) if conn else None,
                "trogdor_ok_per_s": statistics.mean(r["trogdor_ok_per_s"] for r in rs),
                "listen_overflows": sum(r["ListenOverflows"] for r in rs),
                "listen_drops": sum(r["ListenDrops"] for r in rs),
                "syn_retrans": sum(r.get("TCPSynRetrans", 0) for r in rs),
                "resets_sent": sum(r["resets_sent"] for r in rs),
                "abort_on_close": sum(r["TCPAbortOnClose"] for r in rs),
                "cpu_ms_per_conn": statistics.median(cpu) if cpu else None,
                **{
                    key: statistics.median(r[key] for r in rs if key in r)
                    if any(key in r for r in rs)
                    else None
                    for key in (
                        "broker_cpu_ms_per_conn",
                        "server_cpu_ms_per_conn",
                        "client_cpu_ms_per_conn",
                    )
                },
                **{
                    key: statistics.median(r[key] for r in rs) if key in rs[0] else None
                    for key in (
                        "loop_on_cpu_pct",
                        "loop_runq_wait_pct",
                        "kernel_cpu_pct",
                        "machine_idle_pct",
                    )
                },
                "load_avg": [r["load_avg"] for r in rs],
            }
        for p in paths:
            if p == "direct" or p not in per or "direct" not in per:
                continue
            a, d = per[p], per["direct"]
            if a["conn_per_s"] and d["conn_per_s"]:
                a["ratio"] = a["conn_per_s"] / d["conn_per_s"]
                paired = [
                    ra["conn_per_s"] / rd["conn_per_s"]
                    for ra in rows
                    for rd in rows
                    if ra["action"] == rd["action"] == action
                    and ra["path"] == p
                    and rd["path"] == "direct"
                    and ra["round"] == rd["round"]
                    and ra.get("conn_per_s")
                    and rd.get("conn_per_s")
                ]
                a["ratio_per_round"] = [round(x, 3) for x in paired]
            if d["trogdor_ok_per_s"]:
                a["ratio_trogdor_ok"] = a["trogdor_ok_per_s"] / d["trogdor_ok_per_s"]
        for mine, other in _PAIRS:
            if other in per and mine in per:
                a, r = per[mine], per[other]
                per[f"{mine}_vs_{other}"] = {
                    key: a[key] / r[key] if a[key] and r[key] else None
                    for key in ("conn_per_s", "cpu_ms_per_conn")
                }
        if per:
            out[action] = per
    return out


#: the paths compared in each Trogdor action's summary, (path, against)
_PAIRS = (
    ("acceptor", "ref"),
    ("acceptor", "nohist"),
    ("acceptor", "split"),
    ("acceptor", "haproxy"),
    ("split", "refsplit"),
)


# -- py-spy -----------------------------------------------------------------------------------


def profile_phase(
    cp: str, t: Target, args: argparse.Namespace, work: Path, broker: BrokerProbe
) -> dict[str, Any]:
    """One Trogdor round per action with py-spy (or perf) sampling the acceptor (not in the
    ratios)."""
    if args.profile == "perf":
        return perf_phase(cp, t, args, work, broker)
    spy = py_spy()
    if spy is None or t.proc is None:
        _progress("--profile: py-spy not found (pip install -e '.[dev]'); skipped")
        return {}
    out: dict[str, Any] = {}
    for action in args.actions:
        raw = work / f"profile-{action}.txt"
        # gil: only the thread holding the GIL is sampled, so the shares are of the
        # acceptor's Python time (uvloop waits in epoll without the GIL); native: C frames
        # too (uvloop, pyarrow, the socket calls), which py-spy can only read by pausing
        cmd = [spy, "record", "--pid", str(t.proc.pid), "--rate", "200", "--gil"]
        cmd += ["--native"] if args.profile == "native" else ["--nonblocking"]
        cmd += ["--format", "raw", "--output", str(raw), "--duration", "600"]
        with sampling(cmd):
            row = trogdor_round(cp, t, action, args, work, broker)
        spots = hot_spots(raw.read_text()) if raw.exists() else {}
        out[action] = {"round": row, **spots, "raw": str(raw)}
        _progress(f"profile {action}: {spots.get('samples', 0)} samples in {raw}")
    return out


def perf_phase(
    cp: str, t: Target, args: argparse.Namespace, work: Path, broker: BrokerProbe
) -> dict[str, Any]:
    """`perf record` of the acceptor's CPU (not wall clock: py-spy's samples also count the
    time a thread holding the GIL waits for a CPU), flat, by shared object and symbol.
    Python 3.11's own frames are not named (they are libpython's `_PyEval_*`); what it
    shows is the kernel's share and the C code's."""
    perf = shutil.which("perf")
    if perf is None or t.proc is None:
        _progress("--profile perf: perf not found (Debian's linux-perf); skipped")
        return {}
    out: dict[str, Any] = {}
    for action in args.actions:
        data = work / f"perf-{action}.data"
        cmd = [perf, "record", "-F", "997", "-p", str(t.proc.pid), "-o", str(data), "-q"]
        with sampling(cmd):
            row = trogdor_round(cp, t, action, args, work, broker)
        by: dict[str, list[str]] = {}
        for sort in ("dso", "dso,sym"):
            rep = subprocess.run(
                [perf, "report", "-i", str(data), "--stdio", "--sort", sort, "-q"],
                capture_output=True,
                text=True,
                timeout=120,
            )
            by[sort] = [line.strip() for line in rep.stdout.splitlines() if "%" in line][:25]
        out[action] = {"round": row, "by_dso": by["dso"], "by_symbol": by["dso,sym"]}
        _progress(f"perf {action}: {data}")
    return out


# -- producer ---------------------------------------------------------------------------------


def produce_latency(boot: str, topic: str, rate: float, seconds: float, size: int) -> list[float]:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=boot, acks=1, linger_ms=0)
    value = b"y" * size
    p.send(topic, value).get(30)
    lat: list[float] = []
    lock = threading.Lock()
    n = int(rate * seconds)
    t0 = time.perf_counter()
    for i in range(n):
        due = t0 + i / rate
        now = time.perf_counter()
        if due > now:
            time.sleep(due - now)
        start = time.perf_counter()

        def done(_: Any, start: float = start) -> None:
            with lock:
                lat.append((time.perf_counter() - start) * 1000)

        p.send(topic, value).add_callback(done)
    p.flush(120)
    p.close()
    return lat


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


# -- the other phases -------------------------------------------------------------------------
def accept_phase(targets: list[Target], args: argparse.Namespace, res: dict[str, Any]) -> None:
    for t in targets:  # warm-up: imports, first connections
        accept_rate(t.addr, args.threads, 1.0)
    for rnd, order in rotations(targets, args.rounds):
        for t in order:
            load = _load()
            cpu0 = tree_cpu_s(t.proc.pid) if t.proc else 0.0
            t0 = time.monotonic()
            rate = accept_rate(t.addr, args.threads, args.seconds)
            msg = f"accept round {rnd + 1} {t.name:<8} {rate:6.0f} conn/s"
            res.setdefault(f"accept_rate_{t.name}", []).append(rate)
            if t.proc:
                conns = max(rate * (time.monotonic() - t0), 1.0)
                cpu_ms = (tree_cpu_s(t.proc.pid) - cpu0) * 1000 / conns
                res.setdefault(f"cpu_ms_per_conn_{t.name}", []).append(cpu_ms)
                msg += f", {cpu_ms:.3f} ms acceptor CPU per connection"
            _progress(f"{msg} (load {load})")


def produce_phase(targets: list[Target], args: argparse.Namespace, res: dict[str, Any]) -> None:
    for rnd, order in rotations(targets, 2):
        for t in order:
            load = _load()
            boot = f"127.0.0.1:{t.port}"
            r = produce_throughput(boot, f"bench-tp-{t.name}", args.records, args.record_size)
            res.setdefault(f"throughput_{t.name}", []).append(r)
            _progress(
                f"produce round {rnd + 1} {t.name:<8} {r:6.0f} records/s "
                f"({args.records} x {args.record_size} B, load {load})"
            )


def produce_bench(
    cp: str,
    t: Target,
    rate: float,
    args: argparse.Namespace,
    work: Path,
    tag: str,
    broker: BrokerProbe,
) -> dict[str, Any]:
    """Trogdor's ProduceBench (acks=1, 512 B values) at `rate` messages/s for the round,
    with the CPU each process spent per 1000 messages sent (read around the whole Trogdor
    run, so its JVM start and the topic's creation are in it, the same for both paths)."""
    seconds = args.trogdor_seconds
    spec = {
        "class": "org.apache.kafka.trogdor.workload.ProduceBenchSpec",
        "startMs": 0,
        "durationMs": int(seconds * 1000),
        "producerNode": "node0",
        "bootstrapServers": f"127.0.0.1:{t.port}",
        "targetMessagesPerSec": int(rate),
        "maxMessages": int(rate * seconds),
        "producerConf": {"acks": "1"},
        "activeTopics": {f"bench-pb-{t.name}": {"numPartitions": 1, "replicationFactor": 1}},
        "inactiveTopics": {},
    }
    load = _load()
    mark0 = CpuMark.take(t, broker)
    status, text, _ = exec_trogdor(cp, spec, f"pb-{t.name}-{tag}", work, seconds)
    mark1 = CpuMark.take(t, broker)
    row: dict[str, Any] = {"path": t.name, "tag": tag, "target_per_s": rate, "load_avg": load}
    row.update(status)
    row["sent_per_s"] = status.get("totalSent", 0) / seconds
    if sent := status.get("totalSent", 0):
        row["broker_cpu_ms_per_1k"] = round((mark1.broker - mark0.broker) * 1e6 / sent, 3)
        row["acceptor_cpu_ms_per_1k"] = round((mark1.front - mark0.front) * 1e6 / sent, 3)
        row["client_cpu_ms_per_1k"] = round((mark1.client - mark0.client) * 1e6 / sent, 3)
    if (kernel := mark0.kernel_pct(mark1)) is not None:
        row["kernel_cpu_pct"] = kernel
    if not status:
        row["error"] = text[-500:]
    return row


def producebench_phase(
    cp: str,
    targets: list[Target],
    args: argparse.Namespace,
    work: Path,
    res: dict[str, Any],
    broker: BrokerProbe,
) -> None:
    """Throughput (unthrottled) in alternating rounds, then latency at half the slower one."""
    rows: list[dict[str, Any]] = []
    for rnd, order in rotations(targets, args.rounds):
        for t in order:
            row = produce_bench(cp, t, 1_000_000, args, work, f"max{rnd + 1}", broker)
            rows.append(row)
            _progress(
                f"ProduceBench round {rnd + 1} {t.name:<8} {row['sent_per_s']:8.0f} msg/s "
                f"(p99 {row.get('p99LatencyMs', '-')} ms, load {row['load_avg']}; CPU ms per "
                f"1000 msgs: broker {row.get('broker_cpu_ms_per_1k', '-')}, acceptor "
                f"{row.get('acceptor_cpu_ms_per_1k', '-')} "
                f"({row.get('kernel_cpu_pct', '-')} % kernel), "
                f"client {row.get('client_cpu_ms_per_1k', '-')})"
                + (f"  ERROR {row['error'][-200:]!r}" if "error" in row else "")
            )
    best = {t.name: max(r["sent_per_s"] for r in rows if r["path"] == t.name) for t in targets}
    half = min(best["direct"], best["acceptor"]) / 2
    for t in targets:
        row = produce_bench(cp, t, half, args, work, "half", broker)
        rows.append(row)
        _progress(
            f"ProduceBench at half load {half:.0f} msg/s {t.name:<8} sent {row['sent_per_s']:.0f}"
            f"/s, p50 {row.get('p50LatencyMs', '-')} p99 {row.get('p99LatencyMs', '-')} ms "
            f"(load {row['load_avg']})"
        )
    res["producebench_rounds"] = rows
    res["producebench_best_per_s"] = best
    res["producebench_half_load_per_s"] = half
    if best["direct"]:
        res["ratio_producebench_throughput"] = best["acceptor"] / best["direct"]
        if "haproxy" in best:
            res["ratio_producebench_throughput_haproxy"] = best["haproxy"] / best["direct"]
    lat = {r["path"]: r for r in rows if r["tag"] == "half" and "p99LatencyMs" in r}
    if "direct" in lat and "acceptor" in lat:
        res["producebench_added_p50_ms"] = (
            lat["acceptor"]["p50LatencyMs"] - lat["direct"]["p50LatencyMs"]
        )
        res["producebench_added_p99_ms"] = (
            lat["acceptor"]["p99LatencyMs"] - lat["direct"]["p99LatencyMs"]
        )
    if "direct" in lat and "haproxy" in lat:
        res["producebench_added_p99_ms_haproxy"] = (
            lat["haproxy"]["p99LatencyMs"] - lat["direct"]["p99LatencyMs"]
        )


def latency_phase(targets: list[Target], args: argparse.Namespace, res: dict[str, Any]) -> None:
    # "half load" for a steady unbatched (linger 0) producer: capped so that the Python
    # client itself is not the bottleneck being measured
    tps = [max(v) for k, v in res.items() if k.startswith("throughput_")]
    rate = min(min(tps) / 2 if tps else args.latency_rate, args.latency_rate)
    res["latency_rate"] = rate
    res["latency_half_load"] = min(tps) / 2 if tps else None
    for t in targets:
        load = _load()
        boot = f"127.0.0.1:{t.port}"
        lat = produce_latency(boot, f"bench-lat-{t.name}", rate, args.seconds, args.record_size)
        res[f"p50_ms_{t.name}"] = statistics.median(lat)
        res[f"p99_ms_{t.name}"] = pct(lat, 0.99)
        _progress(
            f"latency {t.name:<8} at {rate:.0f} records/s: p50 {res[f'p50_ms_{t.name}']:.2f} ms,"
            f" p99 {res[f'p99_ms_{t.name}']:.2f} ms (load {load})"
        )


# -- report -----------------------------------------------------------------------------------
def report(res: dict[str, Any], paths: list[str]) -> list[str]:
    lines: list[str] = []
    trog = res.get("trogdor_summary", {})
    for action, per in trog.items():
        lines.append(
            f"Trogdor ConnectionStress {action} (mean of rounds; sums for counters; CPU per "
            "connection: the acceptor's, the broker's, both (server), Trogdor's (client)):"
        )
        lines.append(
            f"  {'path':<9}{'conn/s':>8}{'ratio':>7}{'Trogdor ok/s':>14}{'ratio':>7}"
            f"{'overflows':>11}{'drops':>7}{'SYN again':>10}{'resets':>8}"
            f"{'CPU ms/conn: acceptor':>22}"
            f"{'broker':>8}{'server':>8}{'client':>8}{'loop CPU%':>10}{'runq%':>7}{'kernel%':>9}"
            f"{'idle%':>7}  load"
        )
        for p in paths:
            s = per.get(p)
            if not s:
                continue
            lines.append(
                f"  {p:<9}{s['conn_per_s'] or 0:>8.0f}{s.get('ratio', 1.0):>7.2f}"
                f"{s['trogdor_ok_per_s']:>14.0f}{s.get('ratio_trogdor_ok', 1.0):>7.2f}"
                f"{s['listen_overflows']:>11}{s['listen_drops']:>7}{s['syn_retrans']:>10}"
                f"{s['resets_sent']:>8}"
                f"{s['cpu_ms_per_conn'] or 0:>22.3f}"
                f"{s['broker_cpu_ms_per_conn'] or 0:>8.3f}{s['server_cpu_ms_per_conn'] or 0:>8.3f}"
                f"{s['client_cpu_ms_per_conn'] or 0:>8.3f}"
                f"{s['loop_on_cpu_pct'] or 0:>10.1f}{s['loop_runq_wait_pct'] or 0:>7.1f}"
                f"{s['kernel_cpu_pct'] or 0:>9.1f}{s['machine_idle_pct'] or 0:>7.1f}"
                f"  {s['load_avg']}"
            )
        for mine, other in _PAIRS:
            if c := per.get(f"{mine}_vs_{other}"):
                lines.append(
                    f"  {mine}/{other}: conn/s {c['conn_per_s'] or float('nan'):.3f}, "
                    f"CPU per connection {c['cpu_ms_per_conn'] or float('nan'):.3f}"
                )
    goals = res.get("goals", {})
    relay = res.get("goals_haproxy", {})
    if goals:
        lines.append("Goals (issue 14)" + (", and HAProxy's in the same run:" if relay else ":"))
        mark = {True: "MET ", False: "NOT ", None: "n/a "}
        for name, ok in goals.items():
            also = f"   (HAProxy: {mark[relay[name]].strip()})" if name in relay else ""
            lines.append(f"  {mark[ok]} {name}{also}")
    for key in (
        "ratio_producebench_throughput",
        "producebench_added_p50_ms",
        "producebench_added_p99_ms",
        "ratio_producebench_throughput_haproxy",
        "producebench_added_p99_ms_haproxy",
        "ratio_accept_rate",
        "ratio_throughput",
        "added_p50_ms",
        "added_p99_ms",
    ):
        if key in res:
            lines.append(f"{key} = {res[key]:.3f}")
    if "ratio_accept_current_vs_ref" in res:
        lines.append(
            f"accept (Python threads) current/ref: rate (median) "
            f"{res['ratio_accept_current_vs_ref']:.3f}, CPU per connection (median) "
            f"{res['ratio_cpu_current_vs_ref']:.3f}"
        )
    for action, prof in res.get("profile", {}).items():
        if "by_dso" in prof:
            lines.append(f"perf, acceptor's CPU under Trogdor {action}, by object then symbol:")
            lines += [f"  {line}" for line in prof["by_dso"][:8] + prof["by_symbol"][:20]]
            continue
        lines.append(f"py-spy, acceptor under Trogdor {action} ({prof.get('samples')} samples):")
        lines += [f"  self {pct_:5.1f} %  {f}" for f, pct_ in prof.get("self", [])[:12]]
        lines += [f"  incl {pct_:5.1f} %  {f}" for f, pct_ in prof.get("inclusive", [])[:12]]
    return lines


def goals(res: dict[str, Any], path: str = "acceptor") -> dict[str, bool | None]:
    """Issue 14's speed goals for `path` (the acceptor, or ``haproxy``: whether a C relay
    meets them in the same run): True met, False not met, None n/a (nothing to judge)."""
    out: dict[str, bool | None] = {}
    suffix = "" if path == "acceptor" else f"_{path}"
    for action, per in res.get("trogdor_summary", {}).items():
        a, d = per.get(path), per.get("direct")
        if not a or not d:
            continue
        out[f"Trogdor {action} conn/s >= 1.0x direct"] = a.get("ratio", 0.0) >= 1.0
        out[f"Trogdor {action} ok ops/s >= 1.0x direct"] = a.get("ratio_trogdor_ok", 0.0) >= 1.0
        out[f"Trogdor {action} listen overflows <= direct"] = (
            a["listen_overflows"] + a["listen_drops"] <= d["listen_overflows"] + d["listen_drops"]
        )
        # "no resets where direct has none": n/a when direct's rounds sent resets too
        out[f"Trogdor {action} no resets (where direct has none)"] = (
            a["resets_sent"] == 0 if d["resets_sent"] == 0 else None
        )
    if f"ratio_producebench_throughput{suffix}" in res:
        out["Trogdor ProduceBench throughput >= 0.95x direct"] = (
            res[f"ratio_producebench_throughput{suffix}"] >= 0.95
        )
    if f"producebench_added_p99_ms{suffix}" in res:
        half = res["producebench_half_load_per_s"]
        out[f"Trogdor ProduceBench added p99 <= 1 ms at half load ({half:.0f} msg/s)"] = (
            res[f"producebench_added_p99_ms{suffix}"] <= 1.0
        )
    if path != "acceptor":  # the Python-client phases below run the acceptor only
        return out
    if "ratio_throughput" in res:
        out["produce throughput >= 0.95x direct"] = res["ratio_throughput"] >= 0.95
    if "added_p99_ms" in res:
        half = res.get("latency_half_load")
        at = f"{res.get('latency_rate', 0):.0f} rec/s"
        if half and half > res.get("latency_rate", 0):
            at += f", capped: half load would be {half:.0f}"
        out[f"added p99 <= 1 ms at half load ({at})"] = res["added_p99_ms"] <= 1.0
    return out


# -- main -------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.acceptor",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--phases", default=",".join(PHASES), help="comma list of " + ",".join(PHASES))
    ap.add_argument("--rounds", type=int, default=2, help="rounds of trogdor and accept phases")
    ap.add_argument("--trogdor-seconds", type=float, default=8.0)
    ap.add_argument("--trogdor-threads", type=int, default=8)
    ap.add_argument(
        "--actions",
        default=",".join(ACTIONS),
        help="ConnectionStress actions for the trogdor phase and --profile: " + ",".join(ACTIONS),
    )
    ap.add_argument("--seconds", type=float, default=5.0, help="per accept-rate / latency run")
    ap.add_argument("--threads", type=int, default=4, help="accept phase client threads")
    ap.add_argument("--records", type=int, default=50_000)
    ap.add_argument("--record-size", type=int, default=100)
    ap.add_argument("--latency-rate", type=float, default=200.0, help="cap of the steady rate")
    ap.add_argument("--loop", choices=("auto", "uvloop", "asyncio"), default="auto")
    ap.add_argument("--json", type=Path, help="write the numbers here (default bench/results/)")
    ap.add_argument("--compare-ref", metavar="GIT_REF", help="also run this commit's acceptor")
    ap.add_argument(
        "--history-off-path",
        action="store_true",
        help="also run the current acceptor without history (path 'nohist')",
    )
    ap.add_argument(
        "--split-path",
        type=int,
        metavar="N",
        help="also run the current acceptor with acceptor.process.model=split and N processor "
        "processes (path 'split'; with --compare-ref, that commit's too: path 'refsplit')",
    )
    ap.add_argument(
        "--haproxy-path",
        action="store_true",
        help="also run HAProxy as a plain one-thread TCP relay (path 'haproxy')",
    )
    ap.add_argument("--accept-only", action="store_true", help="same as --phases accept")
    ap.add_argument(
        "--profile",
        nargs="?",
        const="gil",
        choices=("gil", "native", "perf"),
        help="py-spy the acceptor under Trogdor (native: with C frames; slows it down; "
        "perf: the CPU it spends, by shared object and symbol, kernel included)",
    )
    ap.add_argument("--netns", choices=("auto", "off"), default="auto")
    ap.add_argument(
        "--front-nice",
        type=int,
        metavar="N",
        help="nice value of each front (the acceptor's `acceptor.nice`, HAProxy's thread); "
        "with shared CPUs, -6 gives the acceptor's one loop thread about the weight of "
        "Kafka's acceptor and three processors (negative values need root)",
    )
    add_sessions_option(ap)
    ap.add_argument(
        "--cpus",
        choices=("shared", "split", "front"),
        default="shared",
        help="split: the server side (broker, acceptors) on the last CPU, the load (Trogdor, "
        "the Python clients) on the others, as load generators run on other machines; "
        "front: the fronts (acceptors, HAProxy) alone on the last CPU, the broker and the load "
        "on the others, as a front on its own host; shared: everything on every CPU",
    )
    args = ap.parse_args(argv)
    phases = ["accept"] if args.accept_only else [p for p in args.phases.split(",") if p]
    if unknown := set(phases) - set(PHASES):
        ap.error(f"--phases: unknown {sorted(unknown)}")
    args.actions = [a for a in args.actions.split(",") if a]
    if unknown := set(args.actions) - set(ACTIONS):
        ap.error(f"--actions: unknown {sorted(unknown)}")
    trog = "trogdor" in phases or "producebench" in phases or args.profile
    cp = trogdor_classpath(_progress) if trog else ""
    if args.netns == "auto":
        rc = reexec_in_netns(sys.argv[1:] if argv is None else argv)
        if rc is not None:
            return rc
    private = in_private_netns()
    from broker import start_broker

    work = Path(tempfile.mkdtemp(prefix="bench-acceptor-"))
    # the acceptors: (path, its broker listener, harness/ source or None, history on, sets)
    Plan = tuple[str, str, Path | None, bool, tuple[str, ...]]
    plan: list[Plan] = [("acceptor", "FRONTED", None, True, ())]
    if args.compare_ref:
        plan.append(("ref", "FRONTEDREF", work / "ref-src", True, ()))
    if args.history_off_path:
        plan.append(("nohist", "FRONTEDNOHIST", None, False, ()))
    if args.split_path:
        split_sets = (
            "acceptor.process.model=split",
            f"acceptor.processor.processes={args.split_path}",
        )
        plan.append(("split", "FRONTEDSPLIT", None, True, split_sets))
        if args.compare_ref:  # the other commit's acceptor in the split model too
            plan.append(("refsplit", "FRONTEDREFSPLIT", work / "ref-src", True, split_sets))
    relays = [("haproxy", "FRONTEDHAPROXY")] if args.haproxy_path else []
    fronts = [(tag, listener) for tag, listener, *_ in plan] + relays
    ports = {tag: free_port() for tag, _ in fronts}
    names = ("PLAINTEXT", *(listener for _, listener in fronts))
    advertised = {listener: f"127.0.0.1:{ports[tag]}" for tag, listener in fronts}
    plan_cpus = cpu_plan(args.cpus)
    if plan_cpus is not None:  # each process inherits this process's CPUs when it starts
        _progress(
            f"CPUs {args.cpus}: broker on {sorted(plan_cpus.broker)}, acceptors and HAProxy on "
            f"{sorted(plan_cpus.fronts)}, load on {sorted(plan_cpus.load)}"
        )
        os.sched_setaffinity(0, plan_cpus.broker)
    _progress(f"starting a Kafka broker (listeners {', '.join(names)}); work dir {work}")
    broker = start_broker(
        launcher="local",
        listeners=names,
        advertised=advertised,
        workdir=work / "broker",
        progress=_progress,
    )
    res: dict[str, Any] = {
        "phases": phases,
        "loop": args.loop,
        "cpus": os.cpu_count(),
        "cpu_layout": args.cpus,
        "private_netns": private,
        "load_avg_start": os.getloadavg(),
        "compare_ref": args.compare_ref,
        "front_nice": args.front_nice,
        "sessions": args.sessions,
        "autogroup": autogroup(),
    }
    targets = [Target("direct", broker.listener_ports["PLAINTEXT"])]
    paths = [t.name for t in targets]
    try:
        if args.compare_ref:
            ref_checkout(args.compare_ref, work / "ref-src")
        if plan_cpus is not None:
            os.sched_setaffinity(0, plan_cpus.fronts)
        for tag, listener, cwd, history, sets in plan:
            p, up = ports[tag], broker.listener_ports[listener]
            nice = () if args.front_nice is None else (f"acceptor.nice={args.front_nice}",)
            proc = start_acceptor(
                work, tag, p, up, args.loop, cwd, metrics=True, history=history,
                sets=(*nice, *sets),
                own_session=args.sessions == "own",
            )  # fmt: skip
            url = ready_info(work, tag).get("metrics_url")
            targets.append(Target(tag, p, proc, url))
            _progress(
                f"acceptor {tag} pid {proc.pid} on 127.0.0.1:{p} -> {listener}, {url}"
                f"{'' if history else ', history OFF'}"
            )
        for tag, listener in relays:
            relay = start_haproxy(
                upstream=("127.0.0.1", broker.listener_ports[listener]),
                send_proxy="off",
                listen_port=ports[tag],
                source_ip="127.0.0.1",
                maxconn=6_000,  # 2 fds each + splice's pipes, under this machine's 20,000
                threads=1,
                splice=True,
                # Kafka's socket.listen.backlog.size (50), which the broker and the acceptor
                # listen with: HAProxy's default (maxconn, capped by somaxconn: 4096) let it
                # absorb bursts that overflow theirs (session 6's CONNECT rows had it)
                backlog=int(ACCEPTOR_DEFAULTS["socket.listen.backlog.size"]),
                workdir=work / tag,
                own_session=args.sessions == "own",
            )
            targets.append(Target(tag, ports[tag], relay.process.proc))
            front_nice(relay.process.pid, args.front_nice)
            _progress(f"{tag} pid {relay.process.pid} on 127.0.0.1:{ports[tag]} -> {listener}")
        if plan_cpus is not None:  # the load from here on (Trogdor, Python clients)
            os.sched_setaffinity(0, plan_cpus.load)
        if not private:
            _progress("kernel counters are machine-wide here (not in a private netns)")
        paths = [t.name for t in targets]
        broker_url = getattr(broker, "metrics_url", None)
        probe = BrokerProbe(broker_url, getattr(broker, "pid", None))
        if "trogdor" in phases:
            rows = trogdor_phase(cp, targets, args, work, probe)
            res["trogdor_rounds"] = rows
            res["trogdor_summary"] = summarize_trogdor(rows, paths)
        if "producebench" in phases:
            producebench_phase(cp, targets, args, work, res, probe)
        if "accept" in phases:
            accept_phase(targets, args, res)
            acc = res["accept_rate_acceptor"]
            res["ratio_accept_rate"] = statistics.median(acc) / statistics.median(
                res["accept_rate_direct"]
            )
            if args.compare_ref:
                res["ratio_accept_current_vs_ref"] = statistics.median(acc) / statistics.median(
                    res["accept_rate_ref"]
                )
                res["ratio_cpu_current_vs_ref"] = statistics.median(
                    res["cpu_ms_per_conn_acceptor"]
                ) / statistics.median(res["cpu_ms_per_conn_ref"])
        if "produce" in phases:
            produce_phase(targets, args, res)
            res["ratio_throughput"] = max(res["throughput_acceptor"]) / max(
                res["throughput_direct"]
            )
        if "latency" in phases:
            latency_phase(targets, args, res)
            res["added_p50_ms"] = res["p50_ms_acceptor"] - res["p50_ms_direct"]
            res["added_p99_ms"] = res["p99_ms_acceptor"] - res["p99_ms_direct"]
        if args.profile:
            res["profile"] = profile_phase(cp, targets[1], args, work, probe)
    finally:
        for t in targets:
            if t.proc is not None:
                stop_process(t.proc)
        broker.stop()
        kill_descendants()
        # the broker's log segments (GBs after ProduceBench) are not results: the acceptors'
        # logs and histories stay
        shutil.rmtree(work / "broker" / "data", ignore_errors=True)
    res["load_avg_end"] = os.getloadavg()
    res["goals"] = goals(res)
    if "haproxy" in paths:
        res["goals_haproxy"] = goals(res, "haproxy")
    print()
    for line in report(res, paths):
        print(line)
    write_results(res, "acceptor", args.json)
    print(f"acceptor logs and history: {work}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
