"""A processor process of the split model (`acceptor.process.model=split`, `split`).

Processors `i` (every `i` of Kafka's `num.network.threads` with `i mod processes = index`)
of every listener, as Kafka's processors are per listener: it receives admitted sockets from
the accepting process, each for one of its processors, registers them (at most
20 per iteration), forwards their requests, evicts while the broker is over
`max.connections`, expires idle ones, runs the stalls a test schedules on its processors,
and writes those rows (`register`, `request`, `evict`, `close`, `processor_stall`) to a
history file of its own. Every end of a registered connection is
reported back (`release`), as Kafka's processor calls `ConnectionQuotas.dec`. What needs
the broker-wide quotas is decided by the accepting process, which owns them: the admin
requests the acceptor answers, and, once a request quota exists, each response's charge
(the response waits for it).

Started by `split.ProcessorProcess.spawn` only: `python -m acceptor.worker` with the
link's and the shared counts' fds, and the acceptor's properties and listener addresses as
JSON on stdin.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Mapping
from functools import partial
from pathlib import Path

from acceptor import messages as msg
from acceptor.admin import AdminHandler
from acceptor.config import AcceptorConfig, parse_acceptor_config, quota_engines
from acceptor.connection import Connection
from acceptor.connections import Connections
from acceptor.dynamic import DynamicConfig
from acceptor.eventloop import new_event_loop
from acceptor.ports import ASK_LATE, Channel, ChargeAsked, NewConnection, Peer
from acceptor.processor import Processor
from acceptor.recorder import ConnInfo, Recorder
from acceptor.split import Link, SharedCounts
from acceptor.stall import Stall, schedule_stalls
from base.history import HistoryWriter
from base.quota.requests import RequestCharge

log = logging.getLogger("acceptor.worker")


class RemoteCounts:
    """The engine and the metrics' counters as a processor process sees them: a
    `ports.Counted` and a `ports.Counts`. Counts and releases go back on the link, and each
    release is counted in shared memory first; whether the broker is over
    `max.connections` is read from the shared counts, less every process's releases still
    on their way (so no excess is evicted for twice, nor one another process's close ended)."""

    def __init__(
        self, link: Link, shared: SharedCounts, index: int, exempt: Mapping[str, bool]
    ) -> None:
        self._link = link
        self._shared = shared
        self._index = index
        self._exempt = dict(exempt)
        self._released = 0

    # -- ports.Counted -------------------------------------------------------------------
    def max_connections_exceeded(self, listener: str) -> bool:
        if self._exempt[listener]:
            return False
        total, limit, on_their_way = self._shared.read()
        return total - on_their_way > limit

    def release(self, listener: str, ip: str) -> None:
        self._released += 1
        self._shared.released(self._index, self._released)
        self._link.queue(msg.Release(listener, ip))

    # -- ports.Counts --------------------------------------------------------------------
    # the metrics' counters: with the next batch, at most `split.LAZY_S` later
    def count(self, listener: str, ip: str, outcome: str) -> None:
        self._link.queue_lazy(msg.Count(listener, ip, outcome))

    def request(self, client_id: str | None, latency_ms: float) -> None:
        self._link.queue_lazy(msg.Request(client_id, latency_ms))

    def throttled(self, bucket: tuple[str, str], throttle_ms: int) -> None:
        self._link.queue_lazy(msg.Throttled(bucket[0], bucket[1], throttle_ms))


class ProcessorProcess:
    """What one processor process runs; receives its configuration, index, link and
    shared counts, the acceptor's listener addresses and where its rows go."""

    def __init__(
        self,
        cfg: AcceptorConfig,
        index: int,
        processors: list[int],
        link_sock: socket.socket,
        shared: SharedCounts,
        addresses: Mapping[str, tuple[str, int]],
        rec: Recorder,
    ) -> None:
        self.cfg = cfg
        self.index = index
        self.indices = processors
        self.rec = rec
        self._addresses = dict(addresses)
        self._link_sock = link_sock
        self._shared = shared
        self.stopped = asyncio.Event()
        self.processors: dict[tuple[str, int], Processor] = {}
        #: connections waiting for an admin answer from the accepting process
        self._awaiting: dict[str, Connection] = {}
        #: responses waiting for their request-quota charge, by (connection, correlation id)
        self._charging: dict[tuple[str, int], Connection] = {}
        self._stall_timers: list[asyncio.TimerHandle] = []

    def log(self, message: str) -> None:
        print(f"processor process {self.index}: {message}", file=sys.stderr, flush=True)

    async def run(self) -> None:
        cfg = self.cfg
        engine, request_quotas = quota_engines(cfg)  # its limits, never counted
        # the admin path's view: only what it needs to route; the accepting process answers
        # from its own (state.dir is re-applied there, never here)
        dynamic = DynamicConfig(cfg, engine, request_quotas, lambda: None)
        self.link = Link(
            self._link_sock, asyncio.get_running_loop(), self._on_ops, self.stopped.set
        )
        names = [spec.name for spec in cfg.listeners]
        self.counted = counted = RemoteCounts(
            self.link, self._shared, self.index, {n: engine.is_evict_exempt(n) for n in names}
        )
        admin = AdminHandler(
            cfg,
            dynamic,
            self.rec,
            log=self.log,
            address=self._address,
            config_changed=lambda cause: None,
            delegate=self._delegate,
        )
        self.conns = Connections(
            cfg,
            counted,
            request_quotas,  # never set here: the accepting process's meters decide
            self.rec,
            counted,
            admin,
            lambda: None,  # slot waiters live in the accepting process: a release wakes them
            self.log,
            remote_charge=self._charge,
            request_quotas_enabled=self._shared.requests_enabled,
        )
        for name in names:
            for i in self.indices:
                proc = Processor(
                    self.conns,
                    name,
                    i,
                    engine.is_protected(name),
                    taken=partial(self._took, name, i),
                )
                self.processors[(name, i)] = proc
                proc.start()
        self.link.queue(msg.Ready())
        await self.stopped.wait()
        await self._shut_down()

    def _address(self, listener: str) -> tuple[str, int]:
        return self._addresses[listener.upper()]

    def _delegate(self, conn: Peer, frame: bytes) -> None:
        """An admin request the acceptor answers: to the accepting process, which owns the
        quotas; the connection waits for its `answer` (`Connection.deferred_answer`)."""
        assert isinstance(conn, Connection)  # what the processors' connections are
        i = conn.info
        self._awaiting[i.conn_id] = conn
        self.link.queue(
            msg.Admin(
                i.conn_id, i.listener, i.client_ip, i.client_port, i.sock_ip, i.sock_port, frame
            )
        )

    def _charge(self, conn: Channel, asked: ChargeAsked) -> None:
        """A response's request-quota charge: decided by the accepting process's meters
        (KIP-124's are one per broker); the response waits for it (`charged`), or for the
        claim's answer (`claimed`); a late charge waits for nothing."""
        assert isinstance(conn, Connection)  # what the processors' connections are
        conn_id = conn.info.conn_id
        if asked.kind != ASK_LATE:
            self._charging[(conn_id, asked.correlation_id)] = conn
        a = asked
        now_ms = a.at_ns // 1_000_000  # the instant its `request` row carries
        self.link.queue(
            msg.Charge(
                conn_id, a.correlation_id, a.client_id, a.api_key, a.charged_ns, a.network_ns,
                now_ms, a.principal, a.kind,
            )
        )  # fmt: skip

    def _charged(self, op: msg.Charged) -> None:
        conn = self._charging.pop((op.conn_id, op.correlation_id), None)
        if conn is not None:
            charge = RequestCharge(
                op.throttle_ms, op.exempt, (op.user, op.client), op.quota, op.rate
            )
            conn.charged(op.correlation_id, charge)

    def _claimed(self, op: msg.Claimed) -> None:
        conn = self._charging.pop((op.conn_id, op.correlation_id), None)
        if conn is not None:
            conn.claimed(op.correlation_id, op.hold)

    def _answered(self, op: msg.Answer) -> None:
        conn = self._awaiting.pop(op.conn_id, None)
        if conn is not None:
            conn.deferred_answer(op.correlation_id, op.response, (op.reason, op.message))

    def _took(self, listener: str, processor: int, n: int) -> None:
        self.link.queue(msg.Took(listener, processor, n))

    def _on_ops(self, ops: list[msg.Message], fds: list[int]) -> None:
        for op in ops:
            match op:
                case msg.Conn():
                    self._queue(op, fds.pop(0))
                case msg.Charged():
                    self._charged(op)
                case msg.Claimed():
                    self._claimed(op)
                case msg.Answer():
                    self._answered(op)
                case msg.Stalls(armed_ns, items):
                    self._schedule_stalls(armed_ns, items)
                case msg.Stop():
                    self.stopped.set()
        for fd in fds:
            os.close(fd)

    def _schedule_stalls(self, armed_ns: int, items: list[tuple[str, int, float, float]]) -> None:
        """Stalls of this process's processors, timed from when the accepting process armed
        them (its start, as in `single`), less the message's own way here."""
        late_s = (time.monotonic_ns() - armed_ns) / 1e9
        stalls = []
        for listener, index, at_s, for_s in items:
            begin = max(0.0, at_s - late_s)
            end = max(begin, at_s + for_s - late_s)
            stalls.append(Stall(listener, index, begin, end - begin))
        self._stall_timers = schedule_stalls(
            tuple(stalls), lambda listener, index: self.processors[(listener, index)], self.rec
        )

    def _queue(self, op: msg.Conn, fd: int) -> None:
        sock = socket.socket(op.family, socket.SOCK_STREAM, 0, fileno=fd)
        sock.setblocking(False)
        info = ConnInfo(
            op.conn_id, op.listener, op.client_ip, op.client_port, op.sock_ip, op.sock_port
        )
        item = NewConnection(
            info,
            sock,
            op.tcp_accept_ns,
            initial=op.initial,
            proxied=op.proxied,
            protected=op.protected,
            admitted_ns=op.admitted_ns,
        )
        if not self.processors[(op.listener, op.processor)].offer(item):  # room counted upstream
            self.log(f"{op.conn_id}: queue of processor {op.processor} full (a bug); closed")
            self._close_unregistered(item, "queue_full")

    def _close_unregistered(self, item: NewConnection, reason: str) -> None:
        with contextlib.suppress(OSError):
            item.sock.close()
        self.counted.release(item.info.listener, item.info.client_ip)
        self.rec.closed(item.info, time.monotonic_ns(), reason, registered=False)

    async def _shut_down(self) -> None:
        for timer in self._stall_timers:
            timer.cancel()
        for proc in self.processors.values():
            proc.resume()  # a stall cut short by the stop
            proc.stop()
            for item in proc.drain_unregistered():
                self._close_unregistered(item, "shutdown")
        for conn in list(self.conns.open):
            conn.finish("shutdown")
        pending = [t for t in self.conns.tasks if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=5)
        self.conns.stop()
        self.link.flush()
        for _ in range(100):  # the last releases and counts, while the peer reads
            if not self.link.pending():
                break
            await asyncio.sleep(0.01)
        self.link.close()
        self.rec.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m acceptor.worker")
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--processes", type=int, required=True)
    parser.add_argument("--processors", type=int, required=True)
    parser.add_argument("--link-fd", type=int, required=True)
    parser.add_argument("--counts-fd", type=int, required=True)
    parser.add_argument("--history")
    parser.add_argument("--run-id", default="adhoc")
    args = parser.parse_args(argv)
    # A stop is the accepting process's to give (`stop` on the link, or its end): a SIGTERM
    # or Ctrl-C sent to the whole process group (as `harness run` and a terminal do) must
    # not end this process before it closed its connections and wrote their rows.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    payload = json.loads(sys.stdin.read())
    cfg = parse_acceptor_config(payload["properties"])
    addresses = {name: (host, int(port)) for name, (host, port) in payload["addresses"].items()}
    writer = None
    if args.history:
        writer = HistoryWriter(
            Path(args.history),
            "acceptor",
            args.run_id,
            name=f"acceptor-{os.getpid()}",
            flush_interval_s=cfg.history_flush_ms / 1000,
        )
    rec = Recorder(writer)
    shared = SharedCounts(args.processes, args.counts_fd)
    link_sock = socket.socket(fileno=args.link_fd)
    loop = new_event_loop("auto")
    asyncio.set_event_loop(loop)
    mine = [i for i in range(args.processors) if i % args.processes == args.index]
    process = ProcessorProcess(cfg, args.index, mine, link_sock, shared, addresses, rec)
    try:
        loop.run_until_complete(process.run())
    finally:
        loop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
