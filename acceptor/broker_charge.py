"""Kafka's own handler time per request, read from the broker's request log.

Why: Kafka 4.3.1 charges a request quota (KIP-124) the handler thread's time,
`requestThreadTimeNanos = apiLocalCompleteTimeNanos - requestDequeueTimeNanos`, when the
response is made (`ClientRequestQuotaManager.maybeRecordAndGetThrottleTimeMs`). A front cannot
see the broker's threads: the forward -> response wall time it sees adds the broker's request
and response queues, its network thread, the loopback hop and the front's own loop, ~10x the
handler time of a cheap request on a loaded machine (docs/acceptor.md, "What is charged").
The broker tells it, though: with `kafka.request.logger` at DEBUG, `RequestChannel.Request.
updateRequestMetrics` writes one line per completed request,

    Completed request:{"isForwarded":false,"requestHeader":{"requestApiKey":3,
    "requestApiVersion":13,"correlationId":5,"clientId":"c",...},"request":{...},
    "response":{...},"connection":"127.0.0.1:9092-127.0.0.1:57394-1-0","totalTimeMs":0.298,
    "requestQueueTimeMs":0.036,"localTimeMs":0.161,...}

whose `localTimeMs` is `apiLocalCompleteTimeNanos - requestDequeueTimeNanos` (plus the time
of callback requests, none for most APIs), truncated to microseconds: the quantity Kafka
charges. `connection` is `<broker>-<remote>-<processor>-<index>`, and the remote address is the
acceptor's upstream socket's own address, so (upstream address, correlation id) names the
client's request. The line is written after the response's bytes were sent, so it may reach
the acceptor a little after the response does: `RequestLog.wait` holds the response until it
does, at most `HOLD_MAX_S`.

A response is held only when its charge could throttle it (`RequestQuotas.could_throttle`
with the wall time as the upper bound of the charge: a bucket near its quota); otherwise it
goes at once and the charge is recorded, unthrottled, when the line comes (`late` waits), as
its throttle was 0 whatever the charge.

`RequestLogParser` is sans-IO (bytes in, `LoggedRequest`s out); `RequestLog` tails the file
(rolled over by log4j at a size: reopened when its inode changes) and is driven by the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "HOLD_MAX_S",
    "LoggedRequest",
    "RequestLog",
    "RequestLogParser",
    "kafka_address",
    "network_estimate",
    "parse_line",
]

#: longest a response waits for its request's log line before it is charged its wall time
HOLD_MAX_S = 0.020
#: how often the file is read while a response waits (the loop's timers have ~1 ms resolution)
POLL_S = 0.0005
#: holds that timed out in a row with no line for any connection meanwhile: the log is taken
#: as not written (logger off, another broker) and no response is held until a line comes
DEAD_AFTER_TIMEOUTS = 3
#: lines kept per upstream connection that no response took (acks=0 produce, ...)
MAX_PENDING_PER_CONN = 64
_READ_CHUNK = 1 << 20

_PREFIX = b"Completed request:"
_HEADER = re.compile(
    rb'"requestHeader":\{"requestApiKey":(-?\d+),"requestApiVersion":(-?\d+),'
    rb'"correlationId":(-?\d+)'
)
_CONNECTION = b',"connection":"'
_LOCAL_TIME = re.compile(rb'"localTimeMs":([-+0-9.eE]+)')
_SEND_TIME = re.compile(rb'"sendTimeMs":([-+0-9.eE]+)')
_TOTAL_TIME = re.compile(rb'"totalTimeMs":([-+0-9.eE]+)')


@dataclass(frozen=True, slots=True)
class LoggedRequest:
    """One completed request as the broker logged it."""

    #: the client end of the broker's connection, "host:port" (the acceptor's upstream socket)
    remote: str
    correlation_id: int
    api_key: int
    #: `localTimeMs` in ns (microsecond resolution): the handler time Kafka charges
    local_ns: int
    #: `sendTimeMs` in ns: response dequeued by the network thread -> its send completed,
    #: the acceptor's estimate of the network-thread time Kafka also records (unthrottled)
    send_ns: int = 0
    #: `totalTimeMs` in ns: request read -> response sent
    total_ns: int = 0


def _ms_to_ns(text: bytes) -> int:
    return max(round(float(text) * 1000), 0) * 1000


def kafka_address(sockname: tuple[object, ...]) -> str:
    """A socket's own address as Kafka writes a remote in a connection id
    (`InetAddress.getHostAddress`: IPv6 uncompressed, no leading zeros, no brackets)."""
    host, port = str(sockname[0]), int(str(sockname[1]))
    with contextlib.suppress(ValueError):
        ip = ipaddress.ip_address(host.partition("%")[0])
        if ip.version == 6:
            host = ":".join(f"{int(group, 16):x}" for group in ip.exploded.split(":"))
    return f"{host}:{port}"


def parse_line(line: bytes) -> LoggedRequest | None:
    """One request-log line, None if it is not a `Completed request` line with the fields."""
    if not line.startswith(_PREFIX):
        return None
    # top-level fields after "request"/"response": the last `,"connection":"` is the real one
    # (inside a JSON string a quote is escaped, so client-chosen text cannot fake it)
    at = line.rfind(_CONNECTION)
    if at < 0:
        return None
    start = at + len(_CONNECTION)
    end = line.find(b'"', start)
    parts = line[start:end].decode("ascii", "replace").split("-")
    header = _HEADER.search(line, len(_PREFIX), len(_PREFIX) + 200)
    local = _LOCAL_TIME.search(line, end)
    if end < 0 or len(parts) != 4 or header is None or local is None:
        return None
    send = _SEND_TIME.search(line, local.end())
    total = _TOTAL_TIME.search(line, end, local.start())
    try:
        local_ns = _ms_to_ns(local.group(1))
        send_ns = _ms_to_ns(send.group(1)) if send is not None else 0
        total_ns = _ms_to_ns(total.group(1)) if total is not None else 0
    except ValueError:
        return None
    return LoggedRequest(
        remote=parts[1],
        correlation_id=int(header.group(3)),
        api_key=int(header.group(1)),
        local_ns=local_ns,
        send_ns=send_ns,
        total_ns=total_ns,
    )


def network_estimate(logged: LoggedRequest, waited_ns: int) -> int:
    """The network-thread time to record for a logged request: its `sendTimeMs`, but no more
    than could have passed before the acceptor had the response (`waited_ns`, forward ->
    response, holds everything the broker measured before the bytes left): the processor's
    loop turn goes on after the write (completed receives of other channels, a pause), which
    is neither network-thread time for this channel nor inside the acceptor's wait."""
    before_send = logged.total_ns - logged.send_ns
    return max(min(logged.send_ns, waited_ns - before_send), 0)


class RequestLogParser:
    """Bytes of the request log in, whole parsed lines out (a partial last line is kept)."""

    __slots__ = ("_partial",)

    def __init__(self) -> None:
        self._partial = b""

    def feed(self, data: bytes, wanted: Callable[[str], bool] | None = None) -> list[LoggedRequest]:
        """Lines completed by `data`; with `wanted`, only those whose remote it accepts
        (checked before the rest of the line is parsed)."""
        if not data:
            return []
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        out: list[LoggedRequest] = []
        for line in lines:
            if wanted is not None:
                at = line.rfind(_CONNECTION)
                if at < 0:
                    continue
                conn = line[at + len(_CONNECTION) : line.find(b'"', at + len(_CONNECTION))]
                remote = conn.split(b"-")
                if len(remote) != 4 or not wanted(remote[1].decode("ascii", "replace")):
                    continue
            parsed = parse_line(line)
            if parsed is not None:
                out.append(parsed)
        return out

    def reset(self) -> None:
        """A new file: what was left of the old one's last line is dropped."""
        self._partial = b""


class RequestLog:
    """The broker's request log as the acceptor's source of handler times.

    Connections `register` their upstream address before their first request is forwarded;
    `take(addr, cid)` is the handler time of that request if its line has been read;
    `wait(addr, cid, resume)` calls `resume()` on the loop once the line is there or after
    `HOLD_MAX_S` (then `take` returns None and the wall time is charged).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        hold_when: Callable[[str, str, int, int], bool] = lambda principal, client, key, ns: True,
        hold_max_s: float = HOLD_MAX_S,
        poll_s: float = POLL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = os.fspath(path)
        self._hold_when = hold_when
        self.hold_max_s = hold_max_s
        self.poll_s = poll_s
        self._clock = clock
        self._parser = RequestLogParser()
        self._fd: int | None = None
        self._ino: int | None = None
        self._lines: dict[str, dict[int, LoggedRequest]] = {}
        #: (addr, cid) -> (deadline, resume, late): a held response, or a late charge
        self._waiters: dict[tuple[str, int], tuple[float, Callable[[], None], bool]] = {}
        #: ended connections whose late charges still wait for their lines
        self._closing: set[str] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._timeouts_in_row = 0
        #: counters for the bench and the metrics: lines used, holds, late charges, waits
        #: that timed out
        self.found = 0
        self.held = 0
        self.late = 0
        self.timed_out = 0

    # -- connections -----------------------------------------------------------------------
    def register(self, addr: str) -> None:
        """An upstream connection from `addr` ("host:port") is about to carry requests."""
        if not self._lines:  # nothing was kept: what was written meanwhile is nobody's
            self._skip_to_end()
        self._lines[addr] = {}

    def unregister(self, addr: str) -> None:
        """The connection ended: its held responses are dropped; charges left for lines to
        come are still made (the lines are read until they come or time out)."""
        late = False
        for key in [k for k in self._waiters if k[0] == addr]:
            if self._waiters[key][2]:
                late = True
            else:
                del self._waiters[key]
        if late:
            self._closing.add(addr)
        else:
            self._lines.pop(addr, None)

    @property
    def live(self) -> bool:
        """Whether the log seems to be written: the file is open (it exists) and fewer than
        `DEAD_AFTER_TIMEOUTS` holds in a row ended with no line for any connection."""
        if self._fd is None and not self._open(at_end=False):
            return False
        return self._timeouts_in_row < DEAD_AFTER_TIMEOUTS

    def pending(self, addr: str, cid: int) -> bool:
        """Whether the line of `cid` from `addr` is still to come from a live log."""
        return not self.ready(addr, cid) and self.live

    def should_hold(self, principal: str, client_id: str, api_key: int, at_most_ns: int) -> bool:
        """Whether a response whose line is pending waits for it: its charge (at most
        `at_most_ns`) could throttle it (`hold_when`); if not, it goes at once and the charge
        is recorded when the line comes (`wait` with the late charge)."""
        return self._hold_when(principal, client_id, api_key, at_most_ns)

    def take(self, addr: str, cid: int) -> LoggedRequest | None:
        """What the broker logged for request `cid` from `addr`, once."""
        lines = self._lines.get(addr)
        if lines is None:
            return None
        if cid not in lines:
            self._read()
        logged = lines.pop(cid, None)
        if logged is not None:
            self.found += 1
        return logged

    def ready(self, addr: str, cid: int) -> bool:
        lines = self._lines.get(addr)
        if lines is None:
            return True  # not one of ours: nothing to wait for
        if cid not in lines:
            self._read()
        return cid in lines

    def wait(self, addr: str, cid: int, resume: Callable[[], None], *, late: bool = False) -> None:
        """Call `resume()` once the line of `cid` from `addr` is read, or after `hold_max_s`:
        a held response (`late` False) or a charge left for its line (`late`)."""
        if late:
            self.late += 1
        else:
            self.held += 1
        self._waiters[(addr, cid)] = (self._clock() + self.hold_max_s, resume, late)
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.poll_s, self._poll)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    # -- reading ---------------------------------------------------------------------------
    def _poll(self) -> None:
        self._timer = None
        self._read()
        now = self._clock()
        due: list[Callable[[], None]] = []
        for key, (deadline, resume, _late) in list(self._waiters.items()):
            addr, cid = key
            if cid in self._lines.get(addr, {}):
                due.append(resume)
            elif now >= deadline:
                self.timed_out += 1
                self._timeouts_in_row += 1
                due.append(resume)
            else:
                continue
            del self._waiters[key]
        ended: list[str] = []
        if self._closing:
            waiting = {addr for addr, _ in self._waiters}
            ended = [addr for addr in self._closing if addr not in waiting]
            self._closing.difference_update(ended)
        if self._waiters:
            self._timer = asyncio.get_running_loop().call_later(self.poll_s, self._poll)
        for resume in due:
            resume()
        for addr in ended:  # after the resumes took their lines
            self._lines.pop(addr, None)

    def _open(self, at_end: bool) -> bool:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            return False
        self._fd = fd
        self._ino = os.fstat(fd).st_ino
        self._parser.reset()
        if at_end:
            os.lseek(fd, 0, os.SEEK_END)
        return True

    def _skip_to_end(self) -> None:
        """No connection is registered: the lines written so far belong to none of ours."""
        if self._fd is None:
            self._open(at_end=True)
            return
        self._rotated()
        if self._fd is not None:
            os.lseek(self._fd, 0, os.SEEK_END)
            self._parser.reset()

    def _rotated(self) -> bool:
        """log4j rolled the file over: read the new one from its start."""
        try:
            ino = os.stat(self.path).st_ino
        except OSError:
            return False
        if ino == self._ino:
            return False
        if self._fd is not None:
            self._consume(self._fd)  # what the old file still had
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
        return self._open(at_end=False)

    def _read(self) -> None:
        if self._fd is None and not self._open(at_end=False):
            return
        assert self._fd is not None
        self._consume(self._fd)
        if self._rotated() and self._fd is not None:  # one stat per read: a rollover is rare
            self._consume(self._fd)

    def _consume(self, fd: int) -> bool:
        """Read `fd` to its end; True if anything was read."""
        got = False
        lines = self._lines
        while True:
            try:
                data = os.read(fd, _READ_CHUNK)
            except OSError:
                return got
            if not data:
                return got
            got = True
            for req in self._parser.feed(data, lines.__contains__):
                kept = lines.get(req.remote)
                if kept is None:
                    continue
                kept[req.correlation_id] = req
                self._timeouts_in_row = 0
                if len(kept) > MAX_PENDING_PER_CONN:
                    del kept[next(iter(kept))]
