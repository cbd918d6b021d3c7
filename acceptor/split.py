"""The split process model (`acceptor.process.model=split`): Kafka's processors as processes.

Why: under Trogdor's connection storm on CPUs shared with the load, one Python loop that
both accepts and serves is off a CPU for milliseconds at a stretch while Kafka's listen queue
of 50 lasts 4 ms; only Kafka's shape in processes (one accepting process, processors
elsewhere) kept the overflows near Kafka's (`bench.accept_floor`, docs/acceptor-processes.md).
This is steps 1 and 2 of that note: the accepting process keeps the listeners, admission and
the connection engine (its only owner, as `ConnectionQuotas` is one object in Kafka);
`acceptor.processor.processes` processor processes (`acceptor.worker`) run Kafka's
`num.network.threads` processors of every listener between them (processor `i` in process
`i mod processes`): registration, forwarding, eviction, idle expiry and their rows. Each
processor keeps Kafka's own queue of 20 and LRU order whichever process runs it; fewer
processes cost less CPU per connection (a wake-up and a context switch fewer), more keep
serving while one is off a CPU (docs/acceptor-processes.md has the numbers).

What crosses between the two, over one `SOCK_SEQPACKET` socketpair per processor process
(`Link`: lists of the typed values of `messages`, `marshal`led as plain tuples):
- to a processor process, one message per admitted socket: its fd by `SCM_RIGHTS`, the
  processor it is for and the `NewConnection` fields (`conn`); the test-scheduled stalls
  of its processors (`stalls`, once, at start); `stop` at shutdown;
- back, batched once per turn of its loop: `took` (room again in a processor's queue of 20),
  `release` (a registered connection ended: Kafka's `ConnectionQuotas.dec`), `count`,
  `request` and `throttled` (the metrics' counters, served by this process; these wait
  for the next batch, at most `LAZY_S`), `admin` (a
  request the acceptor answers itself: DescribeClientQuotas, AlterClientQuotas,
  IncrementalAlterConfigs on its keys, answered here, where the quotas are, by `answer`),
  `charge` (once a request quota exists: a response's request-handler charge, decided by
  this process's meters, as KIP-124's are one per broker, by `charged`: the throttle the
  response then carries and mutes its channel for; or a claim, answered by `claimed`:
  whether a charge of at most so much could throttle a response whose log line is still
  to come; or that response's late charge, recorded without a check) and `ready`.

What the processors read of the engine (Kafka's processors read `ConnectionQuotas` under
its lock for `closeExcessConnections`) is in shared memory (`SharedCounts`): the broker-wide
count, the limit eviction compares it with, how many of each processor process's releases
are counted in it, and how many each has made (written by itself at the release), so no
processor evicts for an excess that a release on its way, its own or another's, has
already ended.

With the broker's request log (`upstream.request.log`), each processor process reads it
for its own responses and sends Kafka's handler time (and the network-thread estimate,
recorded unthrottled) as the charge; a response whose line has not come yet is claimed
first: it waits for its line only if its charge could throttle it, else it goes at once and
is charged when its line comes, as in one process (`connection.Connection._ask_charges`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import marshal
import mmap
import os
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acceptor import messages as msg
from acceptor.config import MODEL_KEY, PROCESSES_KEY
from acceptor.ports import ASK_CLAIM, ASK_LATE
from acceptor.processor import CONNECTION_QUEUE_SIZE
from acceptor.recorder import ConnInfo
from base.quota.config import ConfigError
from base.wire.framing import FrameError, parse_request_header

if TYPE_CHECKING:
    from acceptor.config import AcceptorConfig
    from acceptor.ports import Counts, LocalAnswers, NewConnection
    from acceptor.stall import Stall
    from base.quota.connections import ConnectionQuotas
    from base.quota.requests import RequestQuotas

#: ops in one message at most (a storm's closes in one turn stay far below the socket's
#: send buffer: ~40 bytes an op)
BATCH_MAX = 1000
#: longest a processor process keeps the metrics' counters (`Link.queue_lazy`) before it
#: sends them on their own: they ride with the next release or `took` when one comes
#: sooner. Prometheus scrapes every few seconds; a message per request would wake the
#: accepting process per request (measured: `docs/acceptor-processes.md`, "Measured")
LAZY_S = 0.1
#: how long `start` waits for every processor process to say ready (imports included)
READY_TIMEOUT_S = 60.0
#: how long `stop` waits for a processor process to close its connections and exit
STOP_TIMEOUT_S = 15.0


def check_split(cfg: AcceptorConfig) -> None:
    """Refuse what the split model cannot do (ConfigError: key, value, reason)."""
    if cfg.processor_processes > cfg.quota.num_network_threads:
        raise ConfigError(
            PROCESSES_KEY,
            str(cfg.processor_processes),
            f"more processor processes than processors (num.network.threads="
            f"{cfg.quota.num_network_threads}): each runs at least one",
        )


class SharedCounts:
    """`[version, total, limit, requests, applied_0, ..., released_0, ...]` as int64 in
    shared memory.

    The first part is written by the accepting process alone, read by the processor
    processes; the version is odd while a write is in progress (a sequence lock), so a
    reader never mixes two writes. `requests`: 1 once a request quota exists (Kafka's
    `quotasEnabled`, which never turns back off). `applied_i`: how many of processor
    process i's releases `total` has counted. `released_i`: how many releases processor
    process i has made, written by it alone before each release message, so every
    processor reads a count that every release already left, as Kafka's processors read
    one `ConnectionQuotas` that `dec` changed at once.
    """

    def __init__(self, processes: int, fd: int | None = None) -> None:
        self.processes = processes
        size = 8 * (4 + 2 * processes)
        if fd is None:
            fd = os.memfd_create("acceptor-counts", 0)  # not close-on-exec: passed on
            os.ftruncate(fd, size)
        self.fd = fd
        self._map = mmap.mmap(fd, size)
        self._q = memoryview(self._map).cast("q")

    def publish(
        self,
        total: int,
        limit: int,
        requests: bool = False,
        process: int | None = None,
        applied: int = 0,
    ) -> None:
        if process is not None and not 0 <= process < self.processes:
            raise IndexError(f"no processor process {process} of {self.processes}")
        q = self._q
        q[0] += 1
        q[1] = total
        q[2] = limit
        q[3] = int(requests)
        if process is not None:
            q[4 + process] = applied
        q[0] += 1

    def requests_enabled(self) -> bool:
        """Whether any request quota exists (one word, set once: no lock needed)."""
        return bool(self._q[3])

    def released(self, process: int, n: int) -> None:
        """Processor process `process` has made `n` releases (its own word: no lock)."""
        if not 0 <= process < self.processes:
            raise IndexError(f"no processor process {process} of {self.processes}")
        self._q[4 + self.processes + process] = n

    def read(self) -> tuple[int, int, int]:
        """(total, limit, releases made that `total` still counts) of one consistent write;
        the releases are read after it, so none it counted is missed."""
        q, n = self._q, self.processes
        while True:
            version = q[0]
            if not version & 1:
                total, limit, applied = q[1], q[2], sum(q[4 : 4 + n])
                if q[0] == version:
                    return total, limit, sum(q[4 + n : 4 + 2 * n]) - applied
            os.sched_yield()  # the writer is between its two increments

    def close(self) -> None:
        self._q.release()
        self._map.close()
        with contextlib.suppress(OSError):
            os.close(self.fd)


class Link:
    """One end of a processor process's socketpair.

    `send` writes one message now (an fd with it: the local socket is closed once sent),
    or keeps it, in order, while the kernel's buffer is full; `queue` adds an op to the
    batch sent at the end of this turn of the loop; `queue_lazy` one that may wait for the
    next batch, at most `LAZY_S`. Incoming messages go to
    `on_ops(ops, fds)`; the peer's end (EOF, a reset) to `on_eof()`, once.
    """

    def __init__(
        self,
        sock: socket.socket,
        loop: asyncio.AbstractEventLoop,
        on_ops: Callable[[list[msg.Message], list[int]], None],
        on_eof: Callable[[], None],
    ) -> None:
        sock.setblocking(False)
        self.sock = sock
        self._loop = loop
        self._on_ops = on_ops
        self._on_eof = on_eof
        self._out: deque[tuple[bytes, socket.socket | None]] = deque()
        self._writing = False
        self._ops: list[msg.Message] = []
        self._lazy: list[msg.Message] = []
        self._lazy_timer: asyncio.TimerHandle | None = None
        self.closed = False
        loop.add_reader(sock.fileno(), self._readable)

    # -- out -------------------------------------------------------------------------------
    def send(self, ops: list[msg.Message], with_sock: socket.socket | None = None) -> None:
        if self.closed:
            if with_sock is not None:
                with contextlib.suppress(OSError):
                    with_sock.close()
            return
        data = marshal.dumps([msg.encode(op) for op in ops])
        if self._out or not self._try(data, with_sock):
            self._out.append((data, with_sock))
            if not self._writing:
                self._loop.add_writer(self.sock.fileno(), self._writable)
                self._writing = True

    def queue(self, op: msg.Message) -> None:
        if not self._ops:
            self._loop.call_soon(self.flush)
        self._ops.append(op)

    def queue_lazy(self, op: msg.Message) -> None:
        if not self._lazy:
            self._lazy_timer = self._loop.call_later(LAZY_S, self.flush)
        self._lazy.append(op)

    def flush(self) -> None:
        """Send this turn's ops, and the lazy ones with them."""
        ops, self._ops = self._ops, []
        if self._lazy:
            ops, self._lazy = self._lazy + ops, []
            if self._lazy_timer is not None:
                self._lazy_timer.cancel()
                self._lazy_timer = None
        for start in range(0, len(ops), BATCH_MAX):
            self.send(ops[start : start + BATCH_MAX])

    def pending(self) -> int:
        """Messages and ops not yet written to the socket."""
        return len(self._out) + len(self._ops) + len(self._lazy)

    def _try(self, data: bytes, with_sock: socket.socket | None) -> bool:
        try:
            if with_sock is None:
                self.sock.send(data)
            else:
                socket.send_fds(self.sock, [data], [with_sock.fileno()])
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:  # the peer is gone: its EOF reaches `_readable`
            pass
        if with_sock is not None:
            with contextlib.suppress(OSError):
                with_sock.close()  # the processor process holds its own copy
        return True

    def _writable(self) -> None:
        while self._out:
            data, with_sock = self._out[0]
            if not self._try(data, with_sock):
                return
            self._out.popleft()
        self._loop.remove_writer(self.sock.fileno())
        self._writing = False

    # -- in --------------------------------------------------------------------------------
    def _readable(self) -> None:
        while not self.closed:
            try:
                data, fds, _flags, _addr = socket.recv_fds(self.sock, 1 << 20, 1)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data, fds = b"", []
            if not data:
                self.close()
                self._on_eof()
                return
            self._on_ops([msg.decode(raw) for raw in marshal.loads(data)], fds)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._lazy_timer is not None:
            self._lazy_timer.cancel()
        with contextlib.suppress(Exception):
            self._loop.remove_reader(self.sock.fileno())
        if self._writing:
            with contextlib.suppress(Exception):
                self._loop.remove_writer(self.sock.fileno())
        for _, with_sock in self._out:
            if with_sock is not None:
                with contextlib.suppress(OSError):
                    with_sock.close()
        self._out.clear()
        self.sock.close()


def hand_off_op(item: NewConnection, processor: int) -> msg.Conn:
    """The message of one admitted socket for `processor` (its fd travels beside it)."""
    i = item.info
    return msg.Conn(
        processor,
        i.listener,
        i.conn_id,
        i.client_ip,
        i.client_port,
        i.sock_ip,
        i.sock_port,
        item.tcp_accept_ns,
        item.admitted_ns,
        item.protected,
        item.proxied,
        item.initial,
        int(item.sock.family),  # the receiver need not ask the kernel
    )


class RemoteProcessor:
    """Processor `index` of one listener, in a processor process: a `ports.HandOff`.

    Its room is Kafka's queue of 20 (40 with the seeded fault `queue_larger_than_20`, as
    the processor itself), counted here: a socket sent takes one, the processor's
    registrations give them back (`took`)."""

    task: asyncio.Task[None] | None = None

    def __init__(self, process: ProcessorProcess, listener: str, index: int, size: int) -> None:
        self.process = process
        self.listener = listener
        self.index = index
        self.size = size
        self.room = size
        self._room_freed: asyncio.Event | None = None

    def offer(self, item: NewConnection) -> bool:
        if self.room <= 0:
            return False
        self._send(item)
        return True

    async def put(self, item: NewConnection) -> None:
        while self.room <= 0:
            self._room_freed = asyncio.Event()
            await self._room_freed.wait()
        self._send(item)

    def _send(self, item: NewConnection) -> None:
        self.room -= 1
        self.process.hand_off(item, self.index)

    def took(self, n: int) -> None:
        self.room += n
        if self._room_freed is not None:
            self._room_freed.set()
            self._room_freed = None

    def queued(self) -> int:
        """Sockets sent and not yet registered (in the kernel or the processor's queue)."""
        return self.size - self.room

    def start(self) -> None:
        """The processor runs in its process (started by `SplitProcessors.start`)."""

    def stop(self) -> None:
        """Its process closes what it holds (`SplitProcessors.stop`)."""

    def resume(self) -> None:
        """Never paused from here: its process runs its stalls (`schedule_stalls`)."""

    def pause(self) -> None:
        raise RuntimeError(
            f"a processor cannot be paused from the accepting process with {MODEL_KEY}=split "
            "(harness.test.processor.stall pauses it in its own process)"
        )

    def drain_unregistered(self) -> list[NewConnection]:
        return []  # its process closes the sockets it never registered


class ProcessorProcess:
    """Processor process `index`: the process, its link, its processors' room, its releases."""

    def __init__(self, owner: SplitProcessors, index: int) -> None:
        self.owner = owner
        self.index = index
        self.proc: subprocess.Popen[bytes] | None = None
        self.link: Link | None = None
        self.ready = asyncio.Event()
        self.ended = asyncio.Event()
        #: its processors by (listener, processor index)
        self.remotes: dict[tuple[str, int], RemoteProcessor] = {}
        #: its releases the engine has counted
        self.applied = 0

    def spawn(self, payload: Mapping[str, Any], history_dir: Path | None, run_id: str) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        shared_fd = self.owner.shared.fd
        argv = [
            sys.executable, "-m", "acceptor.worker",
            "--index", str(self.index),
            "--processes", str(self.owner.processes),
            "--processors", str(self.owner.processors),
            "--link-fd", str(theirs.fileno()),
            "--counts-fd", str(shared_fd),
            "--run-id", run_id,
            *(["--history", str(history_dir)] if history_dir is not None else []),
        ]  # fmt: skip
        try:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, pass_fds=(theirs.fileno(), shared_fd)
            )
        finally:
            theirs.close()
        assert self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):  # it ended at once: `start` says how
            self.proc.stdin.write(json.dumps(payload).encode())
        with contextlib.suppress(BrokenPipeError):
            self.proc.stdin.close()
        self.link = Link(ours, asyncio.get_running_loop(), self._on_ops, self._on_eof)

    def hand_off(self, item: NewConnection, processor: int) -> None:
        assert self.link is not None
        self.link.send([hand_off_op(item, processor)], item.sock)
        self.owner.publish()

    def _on_ops(self, ops: list[msg.Message], fds: list[int]) -> None:
        for fd in fds:  # none are expected this way
            os.close(fd)
        owner = self.owner
        owned = owner.owned
        released = 0
        for op in ops:
            match op:
                case msg.Release(listener, ip):
                    owned.quotas.release(listener, ip)
                    released += 1
                case msg.Count(listener, ip, outcome):
                    owned.counts.count(listener, ip, outcome)
                case msg.Request(client_id, latency_ms):
                    owned.counts.request(client_id, latency_ms)
                case msg.Took(listener, processor, n):
                    self.remotes[(listener, processor)].took(n)
                case msg.Throttled(user, client, throttle_ms):
                    owned.counts.throttled((user, client), throttle_ms)
                case msg.Admin():
                    self._answer(op)
                case msg.Charge():
                    self._charge(op)
                case msg.Ready():
                    self.ready.set()
        if released:
            self.applied += released
            owner.publish(self)
            owned.slot_freed()

    def _answer(self, op: msg.Admin) -> None:
        """A processor's admin request, answered with the quotas it changes or reads."""
        peer = _Peer(
            ConnInfo(
                op.conn_id, op.listener, op.client_ip, op.client_port, op.sock_ip, op.sock_port
            )
        )
        try:
            info = parse_request_header(op.frame)
            response = self.owner.owned.admin.maybe_handle(peer, op.frame, info)
        except FrameError as exc:  # the connection closes with its reason, as in `single`
            answer = msg.Answer(op.conn_id, -1, None, exc.reason, str(exc))
        else:
            if not isinstance(response, bytes):  # routed the same way there: not expected
                response = None
            answer = msg.Answer(op.conn_id, info.correlation_id, response, "admin_error", "")
        self.owner.publish()  # a limit may have changed: in force before the answer is read
        assert self.link is not None
        self.link.send([answer])

    def _charge(self, op: msg.Charge) -> None:
        """A response's request-handler charge, recorded by the meters here; the outcome
        goes back (the processor throttles and mutes with it). A claim (a response whose
        log line is still to come) is answered with whether its charge could throttle it,
        asked as one process asks it; a late charge is recorded without a check."""
        meters = self.owner.owned.request_quotas
        if op.kind == ASK_CLAIM:
            hold = meters.could_throttle(
                op.principal, op.client_id, op.api_key, op.charged_ns, op.now_ms,
                windows=self.owner.claim_windows,
            )  # fmt: skip
            assert self.link is not None
            self.link.send([msg.Claimed(op.conn_id, op.correlation_id, hold)])
            return
        if op.kind == ASK_LATE:
            meters.record_no_throttle(
                op.principal, op.client_id, op.charged_ns + op.network_ns, op.now_ms,
                exempt=op.api_key in meters.exempt_api_keys,
            )  # fmt: skip
            return
        c = meters.record_request(op.principal, op.client_id, op.api_key, op.charged_ns, op.now_ms)
        if op.network_ns:  # the broker's network-thread time, after, unthrottled (as `single`)
            meters.record_no_throttle(
                op.principal, op.client_id, op.network_ns, op.now_ms, exempt=c.exempt
            )
        user, client = c.bucket
        charged = msg.Charged(
            op.conn_id, op.correlation_id, c.throttle_ms, c.exempt, user, client, c.quota, c.rate
        )
        assert self.link is not None
        self.link.send([charged])

    def _on_eof(self) -> None:
        self.ended.set()
        if not self.owner.stopping:
            code = self.proc.poll() if self.proc is not None else None
            pid = self.proc.pid if self.proc is not None else "?"
            self.owner.owned.failed(
                f"processor process {self.index} (pid {pid}) ended unexpectedly "
                f"(exit code {code}); its connections are lost"
            )

    def describe_exit(self) -> str:
        code = self.proc.poll() if self.proc is not None else None
        return f"processor process {self.index} exited with code {code}"


@dataclass(frozen=True, slots=True)
class _Peer:
    """Whose admin request it is (`ports.Peer`), as the processor process sent it."""

    info: ConnInfo


@dataclass(frozen=True, slots=True)
class Owned:
    """What the processor processes' messages reach in the accepting process, which owns
    it: the connection engine (releases), the request-quota meters (charges), the metrics'
    counters, the admin answers, the admissions waiting for a slot (`slot_freed`), and
    `failed(reason)` for a processor process that ends on its own."""

    quotas: ConnectionQuotas
    request_quotas: RequestQuotas
    counts: Counts
    admin: LocalAnswers
    slot_freed: Callable[[], None]
    failed: Callable[[str], None]


class SplitProcessors:
    """The processor processes of one acceptor (`acceptor.processor.processes`), the counts
    they read (`SharedCounts`) and what their messages change here (`Owned`).

    Receives the configuration and `owned`."""

    def __init__(self, cfg: AcceptorConfig, owned: Owned) -> None:
        self.cfg = cfg
        self.owned = owned
        self.processors = cfg.quota.num_network_threads
        self.processes = cfg.processor_processes
        self.shared = SharedCounts(self.processes)
        self.children = [ProcessorProcess(self, i) for i in range(self.processes)]
        self.stopping = False
        faults = cfg.faults.policy()
        self._queue_size = faults.queue_size(CONNECTION_QUEUE_SIZE)
        #: the windows a claim (a charge of at most some ns) is judged over, as in one
        #: process (`connections.Connections`)
        self.claim_windows = faults.claim_windows(owned.request_quotas.claim_windows)
        self.publish()

    def processor(self, listener: str, index: int, protected: bool) -> RemoteProcessor:
        """`ListenerAcceptor`'s `new_processor`."""
        child = self.children[index % self.processes]
        remote = RemoteProcessor(child, listener, index, self._queue_size)
        child.remotes[(listener, index)] = remote
        return remote

    def publish(self, child: ProcessorProcess | None = None) -> None:
        total, limit = self.owned.quotas.broker_count()
        requests = self.owned.request_quotas.enabled()
        if child is None:
            self.shared.publish(total, limit, requests)
        else:
            self.shared.publish(total, limit, requests, child.index, child.applied)

    def schedule_stalls(self, stalls: tuple[Stall, ...]) -> None:
        """Test-scheduled processor stalls (`acceptor.stall`), each armed in the
        process that runs its processor, from now (the acceptor's start) as in `single`."""
        armed_ns = time.monotonic_ns()
        for child in self.children:
            mine = [
                (st.listener, st.index, st.at_s, st.for_s)
                for st in stalls
                if st.index % self.processes == child.index
            ]
            if mine and child.link is not None:
                child.link.send([msg.Stalls(armed_ns, mine)])

    def pids(self) -> list[int]:
        return [c.proc.pid for c in self.children if c.proc is not None]

    async def start(
        self,
        addresses: Mapping[str, tuple[str, int]],
        history_dir: Path | None,
        run_id: str,
    ) -> None:
        """Start every processor process and wait until each says ready."""
        payload = {
            "properties": dict(self.cfg.properties),
            "addresses": {name: list(addr) for name, addr in addresses.items()},
        }
        try:
            for child in self.children:
                child.spawn(payload, history_dir, run_id)
            await self._all_ready()
        except BaseException:
            self._kill()
            raise

    async def _all_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        for child in self.children:
            while not child.ready.is_set():
                if child.proc is None or child.proc.poll() is not None:
                    raise RuntimeError(f"{child.describe_exit()} before it was ready (see above)")
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"processor process {child.index} not ready in {READY_TIMEOUT_S:.0f} s"
                    )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(child.ready.wait(), 0.1)

    def _kill(self) -> None:
        """A failed start: no processor process outlives it."""
        self.stopping = True
        for child in self.children:
            if child.proc is not None and child.proc.poll() is None:
                child.proc.kill()
                child.proc.wait()
            if child.link is not None:
                child.link.close()
        self.shared.close()

    async def stop(self) -> None:
        """Tell each processor process to close its connections, then wait for it to end
        (its releases and counts keep arriving meanwhile); kill one that does not."""
        self.stopping = True
        for child in self.children:
            if child.link is not None:
                child.link.send([msg.Stop()])
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for child in self.children:
            if child.proc is None:
                continue
            while child.proc.poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            if child.proc.poll() is None:
                child.proc.kill()
                child.proc.wait()
            with contextlib.suppress(TimeoutError):  # its last messages
                await asyncio.wait_for(child.ended.wait(), 1.0)
            if child.link is not None:
                child.link.close()
        self.shared.close()
