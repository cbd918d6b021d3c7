"""Benchmark: how fast any Python front on this machine accepts Trogdor's CONNECT storm.

Issue 14 asks the acceptor for Trogdor's ConnectionStress CONNECT (a TCP connect and close,
8 threads) at >= 1.0x the broker's own rate with no more listen-queue overflows, on the same
two CPUs as the load. This bench measures the floor under that goal: fronts that do less
than any acceptor could, run in the same rounds as the broker (direct) and the acceptor.

  direct     the broker's PLAINTEXT listener (Kafka's acceptor thread + 3 processors);
  acceptor   `harness acceptor` with history and metrics on (as `bench.acceptor`);
  split:N    with ``--split N``: the same with ``acceptor.process.model=split`` (an
             accepting process and N processor processes running Kafka's three processors:
             acceptor.split); its CPU includes its processor processes';
  close:N    N processes sharing one listening socket (one accept queue of 50, as Kafka's),
             each a blocking ``accept()`` then ``close()``: no admission, no registration,
             no history, no upstream. ``close:1`` is the cheapest one-process Python front;
  loop:1     one uvloop process shaped like the acceptor's loop and nothing more: a reader
             on the listening socket accepting up to 50 per turn, a reader per connection,
             ``close()`` on its EOF;
  handoff:N  Kafka's shape, reduced: one process accepts (blocking ``accept()``) and hands
             each socket round-robin to one of N processor processes (its fd over a Unix
             socket, SCM_RIGHTS), which watch it and ``close()`` it on its EOF. A
             processor's hand-off queue is the kernel's for that socket,
             ``net.unix.max_dgram_qlen`` (10 by default; Kafka's is 20): the accepting
             process waits while the next processor's is full, as Kafka's acceptor does;
  kafka:N    handoff:N with the acceptor's connection engine (`base.quota`, no limits
             set) in the accepting process: one accept per readiness (Kafka's select loop),
             the rate step and admission, the address sent with the socket, and the
             processors' close reports read back to release the counts.

Every front listens with Kafka's ``socket.listen.backlog.size`` (50). Per round: connections
per second counted by the server (the broker's connection-creation counter, the acceptor's
accepted counter, the floors' own counts), Trogdor's successful operations, the kernel's
ListenOverflows, SYNs sent again and resets sent (per network namespace: as root the bench
re-runs itself in a private one), and the front's CPU per connection. Rounds rotate the
order of the paths; the ratios are to direct in the same run.

    .venv/bin/python -m bench.accept_floor                 # 2 rounds, ~2 minutes
    .venv/bin/python -m bench.accept_floor --rounds 3 --fronts close:1,close:2,close:4

Prints progress, a table and where the JSON went (bench/results/accept-floor-<time>.json).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import ctypes
import itertools
import multiprocessing
import os
import selectors
import signal
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from acceptor.config import DEFAULTS as ACCEPTOR_DEFAULTS
from base.localnet import LOOPBACK, free_port
from bench.output import write_results
from bench.toolkit.fronts import (
    acceptor_accepted,
    add_sessions_option,
    autogroup,
    kill_descendants,
    ready_info,
    start_acceptor,
    stop_process,
)
from bench.toolkit.load import rotations
from bench.toolkit.netns import in_private_netns, net_counters, reexec_in_netns
from bench.toolkit.trogdor import accepted_total, run_trogdor, tree_cpu_s, trogdor_classpath

BACKLOG = int(ACCEPTOR_DEFAULTS["socket.listen.backlog.size"])
KINDS = ("close", "loop", "handoff", "kafka")
#: kernel counters reported per round (TcpExt/Tcp names, as `bench.acceptor` reads them)
COUNTERS = ("ListenOverflows", "TCPSynRetrans", "OutRsts")


#: one slot per front process, shared with the bench (each process writes only its own)
Counts = ctypes.Array[ctypes.c_longlong]


def _progress(msg: str) -> None:
    print(f"[accept-floor] {msg}", flush=True)


def handoff_queue() -> int | None:
    """How many sockets a `handoff` processor's Unix socket holds before the accepting
    process waits (``net.unix.max_dgram_qlen``)."""
    try:
        return int(Path("/proc/sys/net/unix/max_dgram_qlen").read_text())
    except (OSError, ValueError):
        return None


# -- the floor fronts ------------------------------------------------------------------------
def parse_front(spec: str) -> tuple[str, int]:
    """``close:4`` -> ("close", 4); refuses an unknown kind or a count below 1."""
    kind, _, count = spec.partition(":")
    if kind not in KINDS:
        raise ValueError(f"front {spec!r}: kind must be one of {', '.join(KINDS)}")
    try:
        n = int(count or "1")
    except ValueError:
        raise ValueError(f"front {spec!r}: the count after ':' must be a number") from None
    if n < 1 or (kind == "loop" and n != 1):
        raise ValueError(
            f"front {spec!r}: close takes 1 or more processes, handoff and kafka 1 or more "
            "processors, loop exactly 1"
        )
    return kind, n


def listen(port: int, backlog: int = BACKLOG) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((LOOPBACK, port))
    sock.listen(backlog)
    return sock


def serve_close(sock: socket.socket, counts: Counts, slot: int, life_s: int) -> None:
    """Accept and close at once until `life_s` seconds have passed (SIGALRM ends it)."""
    signal.alarm(life_s)
    while True:
        conn, _ = sock.accept()
        counts[slot] += 1
        conn.close()


def _closer(
    loop: asyncio.AbstractEventLoop, closed: Callable[[bytes], None] | None = None
) -> Callable[[socket.socket, bytes], None]:
    """What a processor does with a connection here: watch it, close it on its EOF (or an
    error), then tell `closed` the connection's tag."""

    def readable(conn: socket.socket, tag: bytes) -> None:
        try:
            data = conn.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            loop.remove_reader(conn.fileno())
            conn.close()
            if closed is not None:
                closed(tag)

    def watch(conn: socket.socket, tag: bytes) -> None:
        conn.setblocking(False)
        loop.add_reader(conn.fileno(), readable, conn, tag)

    return watch


def _run_loop(setup: Callable[[asyncio.AbstractEventLoop], None], life_s: int) -> None:
    import uvloop

    loop = uvloop.new_event_loop()
    setup(loop)
    loop.call_later(life_s, loop.stop)
    loop.run_forever()


def serve_loop(sock: socket.socket, counts: Counts, slot: int, life_s: int) -> None:
    """The acceptor's loop shape with nothing in it: accept up to a backlog per readiness,
    watch each connection, close it on EOF; ends after `life_s` seconds."""
    sock.setblocking(False)

    def setup(loop: asyncio.AbstractEventLoop) -> None:
        watch = _closer(loop)

        def turn() -> None:
            for _ in range(BACKLOG):
                try:
                    conn, _ = sock.accept()
                except BlockingIOError:
                    return
                counts[slot] += 1
                watch(conn, b"")

        loop.add_reader(sock.fileno(), turn)

    _run_loop(setup, life_s)


def serve_processor(channel: socket.socket, life_s: int, report: bool = False) -> None:
    """Kafka's processor, reduced: take accepted sockets from `channel` (SCM_RIGHTS), watch
    each, close it on EOF (with `report`, send its tag back: the accepting process releases
    its count); ends when the accepting process is gone or after `life_s`."""
    channel.setblocking(False)

    def setup(loop: asyncio.AbstractEventLoop) -> None:
        unsent: collections.deque[bytes] = collections.deque()

        def flush() -> None:
            while unsent:
                try:
                    channel.send(unsent[0])
                except BlockingIOError:  # the accepting process's queue is full
                    loop.add_writer(channel.fileno(), flush)
                    return
                except OSError:
                    unsent.clear()
                    break
                unsent.popleft()
            loop.remove_writer(channel.fileno())

        def closed(tag: bytes) -> None:
            unsent.append(tag)
            if len(unsent) == 1:
                flush()

        watch = _closer(loop, closed if report else None)

        def take() -> None:
            while True:
                try:
                    msg, fds, _, _ = socket.recv_fds(channel, 16, 64)
                except BlockingIOError:
                    return
                if not msg and not fds:
                    loop.stop()
                    return
                for fd in fds:
                    watch(socket.socket(fileno=fd), msg)

        loop.add_reader(channel.fileno(), take)

    _run_loop(setup, life_s)


def serve_handoff(
    sock: socket.socket, counts: Counts, channels: Sequence[socket.socket], life_s: int
) -> None:
    """Kafka's acceptor, reduced: a blocking accept, the socket handed to the next processor
    round-robin (its fd over a Unix socket), this process's copy closed."""
    signal.alarm(life_s)
    for i in itertools.count():
        conn, _ = sock.accept()
        counts[0] += 1
        socket.send_fds(channels[i % len(channels)], [b"c"], [conn.fileno()])
        conn.close()


def serve_kafka(
    sock: socket.socket, counts: Counts, channels: Sequence[socket.socket], life_s: int
) -> None:
    """Kafka's acceptor with the acceptor's connection engine (`base.quota`, no limits
    set): one accept per readiness of the listening socket (Kafka's ``select(500)`` loop),
    the rate step and admission, the socket handed to the next processor with its address,
    and the processors' close reports read between accepts to release the counts (Kafka's
    processors call ``ConnectionQuotas.dec`` themselves, under a lock)."""
    from base.quota import ConnectionQuotas, Outcome, parse_config

    port = sock.getsockname()[1]
    quotas = ConnectionQuotas(parse_config({"listeners": f"CLIENT://{LOOPBACK}:{port}"}))
    sel = selectors.DefaultSelector()
    sock.setblocking(False)
    sel.register(sock, selectors.EVENT_READ)
    for ch in channels:
        sel.register(ch, selectors.EVENT_READ, ch)
    deadline = time.monotonic() + life_s
    turn = itertools.count()
    while time.monotonic() < deadline:
        for key, _ in sel.select(0.5):
            if key.fileobj is sock:
                try:
                    conn, (ip, _) = sock.accept()
                except BlockingIOError:
                    continue
                counts[0] += 1
                decision = quotas.decide("CLIENT", ip, time.monotonic_ns() // 1_000_000)
                if decision.outcome is not Outcome.ADMITTED:  # no limit is set here
                    raise AssertionError(f"unlimited engine refused {ip}: {decision}")
                socket.send_fds(
                    channels[next(turn) % len(channels)], [ip.encode()], [conn.fileno()]
                )
                conn.close()
                continue
            channel: socket.socket = key.data
            while True:
                try:
                    tag = channel.recv(64, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    break
                if not tag:
                    sel.unregister(channel)
                    break
                quotas.release("CLIENT", tag.decode())


SERVE: dict[str, Callable[[socket.socket, Counts, int, int], None]] = {
    "close": serve_close,
    "loop": serve_loop,
}


def _front_main(
    kind: str, sock: socket.socket, counts: Counts, n: int, life_s: int, own_session: bool
) -> None:
    """The front's first process: its own process group (its own session with
    `own_session`), then the other n - 1 processes forked from it, each serving a slot."""
    if own_session:
        os.setsid()
    else:
        os.setpgid(0, 0)
    if kind in ("handoff", "kafka"):  # n processors, this process accepts
        channels = []
        for _ in range(n):
            mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            if os.fork() == 0:
                try:
                    sock.close()
                    serve_processor(theirs, life_s, report=kind == "kafka")
                finally:
                    os._exit(0)
            theirs.close()
            channels.append(mine)
        accept = serve_kafka if kind == "kafka" else serve_handoff
        accept(sock, counts, channels, life_s)
        return
    for slot in range(1, n):
        if os.fork() == 0:
            try:
                SERVE[kind](sock, counts, slot, life_s)
            finally:
                os._exit(0)
    SERVE[kind](sock, counts, 0, life_s)


@dataclass
class FloorFront:
    """N processes in one process group serving one listening socket; each counts its
    accepts in its own slot of a shared array (no lock needed, no writer shares a slot).

    With `own_session` the group is a session of its own, as the broker's: with the
    kernel's autogroup on, the scheduler then shares the CPUs between it, the broker and
    the load's session as between three services, instead of giving it one share among the
    load's threads."""

    spec: str
    port: int
    leader: multiprocessing.process.BaseProcess
    counts: Counts

    @classmethod
    def start(cls, spec: str, port: int, life_s: int, own_session: bool = True) -> FloorFront:
        kind, n = parse_front(spec)
        ctx = multiprocessing.get_context("fork")
        counts = ctx.Array("q", n, lock=False)
        sock = listen(port)
        leader = ctx.Process(
            target=_front_main, args=(kind, sock, counts, n, life_s, own_session), daemon=True
        )
        leader.start()
        sock.close()  # its processes hold it
        return cls(spec, port, leader, counts)

    def accepted(self) -> float:
        return float(sum(self.counts))

    def cpu(self) -> float:
        return tree_cpu_s(self.leader.pid) if self.leader.pid else 0.0

    def stop(self) -> None:
        pgid = self.leader.pid
        if pgid:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGTERM)
        self.leader.join(5)
        if pgid:  # a member that missed the TERM (forked as it was sent) ends now
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)


# -- one path, measured ----------------------------------------------------------------------
@dataclass
class Way:
    """A path to the broker's port, with how its server counts accepts and spends CPU."""

    name: str
    port: int
    accepted: Callable[[], float | None]
    cpu: Callable[[], float] | None = None


def measure_round(cp: str, path: Way, seconds: float, threads: int, work: Path) -> dict[str, Any]:
    net0, acc0, cpu0 = net_counters(), path.accepted(), path.cpu() if path.cpu else 0.0
    trog = run_trogdor(
        cp, f"{LOOPBACK}:{path.port}", "CONNECT", seconds, threads, None, work, None
    )  # fmt: skip
    net1, acc1, cpu1 = net_counters(), path.accepted(), path.cpu() if path.cpu else 0.0
    row: dict[str, Any] = {
        "path": path.name,
        "load_avg": round(os.getloadavg()[0], 2),
        "trogdor_ok_per_s": trog["ops_per_s"],
        **{k: net1[k] - net0[k] for k in COUNTERS},
    }
    if acc0 is not None and acc1 is not None:
        row["accepted"] = acc1 - acc0
        row["conn_per_s"] = round((acc1 - acc0) / seconds, 1)
        if path.cpu and acc1 > acc0:
            row["cpu_us_per_conn"] = round((cpu1 - cpu0) * 1e6 / (acc1 - acc0), 1)
    if "error" in trog:
        row["error"] = trog["error"][-500:]
    return row


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per path: mean connections/s, its ratio to direct's mean and the paired per-round
    ratios, and the kernel counters summed over the rounds."""
    names = list(dict.fromkeys(r["path"] for r in rows))
    direct = [r for r in rows if r["path"] == "direct" and r.get("conn_per_s")]
    direct_mean = statistics.mean(r["conn_per_s"] for r in direct) if direct else None
    by_round = {r["round"]: r["conn_per_s"] for r in direct}
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        rs = [r for r in rows if r["path"] == name]
        conn = [r["conn_per_s"] for r in rs if r.get("conn_per_s") is not None]
        cpu = [r["cpu_us_per_conn"] for r in rs if "cpu_us_per_conn" in r]
        mean = statistics.mean(conn) if conn else None
        out[name] = {
            "rounds": len(rs),
            "conn_per_s": mean,
            "ratio": mean / direct_mean if mean is not None and direct_mean else None,
            "ratio_per_round": [
                round(r["conn_per_s"] / by_round[r["round"]], 3)
                for r in rs
                if r.get("conn_per_s") is not None and by_round.get(r["round"])
            ],
            **{k: sum(r[k] for r in rs) for k in COUNTERS},
            "cpu_us_per_conn": statistics.median(cpu) if cpu else None,
        }
    return out


def report(summary: dict[str, dict[str, Any]]) -> list[str]:
    lines = [
        f"{'path':10} {'conn/s':>8} {'x direct':>8}  {'per round':18} {'overflows':>9} "
        f"{'SYN again':>9} {'resets':>6} {'CPU/conn':>9}"
    ]
    for name, s in summary.items():
        conn = f"{s['conn_per_s']:8.0f}" if s["conn_per_s"] is not None else f"{'-':>8}"
        ratio = f"{s['ratio']:8.2f}" if s["ratio"] is not None else f"{'-':>8}"
        cpu = f"{s['cpu_us_per_conn']:7.1f}us" if s["cpu_us_per_conn"] is not None else ""
        per = ",".join(f"{x:.2f}" for x in s["ratio_per_round"])
        lines.append(
            f"{name:10} {conn} {ratio}  {per:18} {s['ListenOverflows']:9d} "
            f"{s['TCPSynRetrans']:9d} {s['OutRsts']:6d} {cpu:>9}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.accept_floor",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--trogdor-seconds", type=float, default=8.0)
    ap.add_argument("--trogdor-threads", type=int, default=8)
    ap.add_argument(
        "--fronts",
        default="close:1,close:4,loop:1,handoff:3",
        help="comma list of floor fronts: close:N, loop:1, handoff:N, kafka:N",
    )
    ap.add_argument("--no-acceptor", action="store_true", help="leave the acceptor path out")
    ap.add_argument(
        "--split",
        metavar="N[,N...]",
        default="",
        help="also run the acceptor with acceptor.process.model=split and N processor "
        "processes (path 'split:N'), once per N",
    )
    add_sessions_option(ap)
    ap.add_argument("--netns", choices=("auto", "off"), default="auto")
    ap.add_argument("--json", type=Path, help="write the numbers here (default bench/results/)")
    args = ap.parse_args(argv)
    specs = [s for s in args.fronts.split(",") if s]
    try:
        split_counts = [int(n) for n in args.split.split(",") if n]
    except ValueError:
        ap.error(f"--split: expected numbers, got {args.split!r}")
    for spec in specs:
        try:
            parse_front(spec)
        except ValueError as e:
            ap.error(f"--fronts: {e}")
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    cp = trogdor_classpath(_progress)
    if args.netns == "auto":
        rc = reexec_in_netns(list(argv) if argv is not None else sys.argv[1:], "bench.accept_floor")
        if rc is not None:
            return rc
    from broker import start_broker

    work = Path(tempfile.mkdtemp(prefix="bench-accept-floor-"))
    paths = len(specs) + 2 + len(split_counts)
    # each front ends by itself after the whole run could have taken (a JVM per round + 30 s)
    own = args.sessions == "own"
    life_s = int(args.rounds * paths * (args.trogdor_seconds + 30) + 120)
    floors = [FloorFront.start(spec, free_port(), life_s, own) for spec in specs]  # before threads
    _progress(f"floor fronts: {', '.join(f'{f.spec} on {f.port}' for f in floors)}")
    _progress(f"starting a Kafka broker; work dir {work}")
    broker = start_broker(launcher="local", workdir=work / "broker", progress=_progress)
    acceptors: list[Any] = []
    res: dict[str, Any] = {
        "private_netns": in_private_netns(),
        "cpus": os.cpu_count(),
        "load_avg_start": os.getloadavg(),
        "backlog": BACKLOG,
        "fronts": specs,
        "sessions": args.sessions,
        "autogroup": autogroup(),
        "handoff_queue": handoff_queue(),
    }
    rows: list[dict[str, Any]] = []
    try:
        direct = broker.listener_ports["PLAINTEXT"]
        broker_url = getattr(broker, "metrics_url", None)
        ways = [Way("direct", direct, lambda: accepted_total(broker_url))]
        models: list[tuple[str, tuple[str, ...]]] = [] if args.no_acceptor else [("acceptor", ())]
        models += [
            (f"split:{n}", ("acceptor.process.model=split", f"acceptor.processor.processes={n}"))
            for n in split_counts
        ]
        for tag, sets in models:
            port = free_port()
            proc = start_acceptor(
                work, tag, port, direct, "auto", metrics=True, sets=sets, own_session=own
            )
            acceptors.append(proc)
            url = ready_info(work, tag).get("metrics_url")
            ways.append(
                Way(
                    tag,
                    port,
                    partial(acceptor_accepted, url),
                    partial(tree_cpu_s, proc.pid),  # with its processor processes
                )
            )
        ways += [Way(f.spec, f.port, f.accepted, f.cpu) for f in floors]
        if not in_private_netns():
            _progress("kernel counters are machine-wide here (not in a private netns)")
        for rnd, order in rotations(ways, args.rounds):
            for way in order:
                row = measure_round(cp, way, args.trogdor_seconds, args.trogdor_threads, work)
                row["round"] = rnd + 1
                rows.append(row)
                _progress(
                    f"round {rnd + 1} {way.name}: {row.get('conn_per_s')} conn/s, "
                    f"{row['ListenOverflows']} overflows, load {row['load_avg']}"
                )
    finally:
        for f in floors:
            f.stop()
        for proc in acceptors:
            stop_process(proc)
        broker.stop()
        kill_descendants()
    res["rounds"] = rows
    res["summary"] = summarize(rows)
    res["load_avg_end"] = os.getloadavg()
    print()
    for line in report(res["summary"]):
        print(line)
    write_results(res, "accept-floor", args.json)
    print(f"acceptor log and history, Trogdor's output: {work}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
