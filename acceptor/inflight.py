"""One request in flight per connection, as Kafka's processors enforce it (KIP-219), sans-IO.

Why: Kafka's `Processor` reads ONE request from a channel, then mutes the channel until the
response has been sent and, when the request was throttled, until the throttle has ended
(`KafkaChannel.ChannelMuteState`, here `base.quota.mute.ChannelMute`). A client that
pipelines requests therefore gets every later request read (and handled, and charged) only
after the earlier one's throttle: a throttle delays everything behind it. The acceptor reads
whatever the client sent, so the complete frames it read but Kafka would still have left in
the socket wait here, in order; the I/O adapter forwards one at a time with `take()` and
reports `response_sent()`, `throttle_started()` and `throttle_ended()`.

A request that gets no response (Produce with `acks=0`) is answered by the broker with a
no-op response internally (`sendNoOpResponseExemptThrottle`), which unmutes the channel at
once; `expects_response` tells the adapter so.

While no request can be throttled (no request quota was ever set, Kafka's `quotasEnabled`,
and no broker request log is read), the gate is `pipelined`: requests pass as they come,
and the broker behind reads them one at a time itself, as it would from the client. Nothing
the client sees differs (the same answers in the same order; no throttle to delay them), and
a producer's pipelined batches cost one upstream write each instead of one round trip. Once
a quota exists, the gate goes back to one request in flight after the pipelined ones are
answered; a throttle on one of those (a quota set while they were at the broker) holds every
later request until it ends, as the mute would.

The frames' readers live here too: what a request may spend waiting in the broker's
purgatory, which Kafka does not charge to request quotas (it charges handler-thread time,
`apiLocalCompleteTimeNanos - requestDequeueTimeNanos`, set when `KafkaApis.handle` returns,
before a delayed fetch waits): a Fetch's `max_wait_ms` (`purgatory_allowance_ns`, carried
with the request in `tracker.Pending`, taken off by `charge.charged_ns`), and a Produce's
`acks`. What a response is charged is decided in `charge`.
"""

from __future__ import annotations

import struct
from collections import deque

from base.quota.mute import ChannelMute, MuteEvent, MuteState
from base.wire.framing import FrameError

__all__ = ["RequestGate", "expects_response"]

PRODUCE = 0
FETCH = 1
#: Fetch versions with a v2 request header; from v15 the body starts with max_wait_ms
_FETCH_FLEXIBLE_FROM = 12
_FETCH_NO_REPLICA_ID_FROM = 15
#: Produce versions with flexible (compact) encodings and a v2 request header
_PRODUCE_FLEXIBLE_FROM = 9


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise ValueError("uvarint too long")


def _body_offset(frame: bytes, flexible: bool) -> int:
    """Where the request body starts (after the v1 header, and v2's tagged fields)."""
    client_len: int = struct.unpack_from(">h", frame, 12)[0]
    pos = 14 + max(client_len, 0)
    if flexible:
        count, pos = _uvarint(frame, pos)
        for _ in range(count):
            _tag, pos = _uvarint(frame, pos)
            size, pos = _uvarint(frame, pos)
            pos += size
    return pos


def fetch_max_wait_ms(frame: bytes) -> int | None:
    """The `max_wait_ms` of a Fetch request frame (size prefix included), None if unreadable
    or not a Fetch."""
    try:
        api_key, version = struct.unpack_from(">hh", frame, 4)
        if api_key != FETCH:
            return None
        pos = _body_offset(frame, version >= _FETCH_FLEXIBLE_FROM)
        if version < _FETCH_NO_REPLICA_ID_FROM:
            pos += 4  # replica_id
        (max_wait,) = struct.unpack_from(">i", frame, pos)
        return int(max_wait)
    except (struct.error, IndexError, ValueError):
        return None


def purgatory_allowance_ns(frame: bytes) -> int:
    """How long the request may legitimately wait in the broker's purgatory, uncharged."""
    if frame[4:6] != b"\x00\x01":
        return 0
    max_wait = fetch_max_wait_ms(frame)
    return max(max_wait or 0, 0) * 1_000_000


def produce_acks(frame: bytes) -> int | None:
    """The `acks` of a Produce request frame (size prefix included), None if unreadable."""
    try:
        api_key, version = struct.unpack_from(">hh", frame, 4)
        if api_key != PRODUCE:
            return None
        flexible = version >= _PRODUCE_FLEXIBLE_FROM
        pos = _body_offset(frame, flexible)
        if version >= 3:  # transactional_id, nullable
            if flexible:
                length, pos = _uvarint(frame, pos)
                pos += max(length - 1, 0)
            else:
                (length,) = struct.unpack_from(">h", frame, pos)
                pos += 2 + max(length, 0)
        (acks,) = struct.unpack_from(">h", frame, pos)
        return int(acks)
    except (struct.error, IndexError, ValueError):
        return None


def expects_response(frame: bytes) -> bool:
    """False only for a Produce with acks=0 (the broker sends nothing back)."""
    return frame[4:6] != b"\x00\x00" or produce_acks(frame) != 0


_NOT_MUTED = MuteState.NOT_MUTED


class RequestGate:
    """Complete request frames (and a bad frame's error) in arrival order, released one at
    a time while the channel is readable, or as they come while `pipelined`."""

    __slots__ = ("_frame", "_mute", "_outstanding", "_queue", "_throttled", "pipelined")

    def __init__(self) -> None:
        self._mute = ChannelMute()
        self._queue: deque[bytes | FrameError] = deque()
        #: requests taken while pipelined whose responses are not sent yet
        self._outstanding = 0
        #: a throttle on one of those is running: nothing more is taken until it ends
        self._throttled = False
        #: no request can be throttled now: requests pass as they come (the adapter sets it
        #: before each take; Kafka's `quotasEnabled` never turns back off)
        self.pipelined = False
        self._frame = b""  # the request in flight

    def __len__(self) -> int:
        """Frames (and a bad-frame error) read but not yet taken."""
        return len(self._queue)

    @property
    def readable(self) -> bool:
        """The next item may be taken: no request muting the channel, no throttle running,
        and, unless pipelined, no pipelined request still unanswered (a bad frame's error
        waits for every answer before it in either mode)."""
        # `ChannelMute.readable`, read in place: asked on every take and response
        if self._mute.state is not _NOT_MUTED or self._throttled:
            return False
        if self._outstanding:
            return self.pipelined and not (self._queue and isinstance(self._queue[0], FrameError))
        return True

    @property
    def outstanding(self) -> int:
        """Requests taken while pipelined whose responses are not sent yet."""
        return self._outstanding

    @property
    def state(self) -> str:
        return self._mute.state.name

    def received(self, frames: list[bytes], bad: FrameError | None = None) -> None:
        self._queue.extend(frames)
        if bad is not None:
            self._queue.append(bad)

    def take(self) -> bytes | FrameError | None:
        """The next request if the channel is readable (it is then muted until its response
        is sent, or counted outstanding while pipelined), a bad frame's error when that is
        next, else None."""
        if not self._queue or not self.readable:
            return None
        item = self._queue.popleft()
        if isinstance(item, bytes):
            if self.pipelined:
                self._outstanding += 1
            else:
                self._mute.mute()
                self._mute.handle(MuteEvent.REQUEST_RECEIVED)
            self._frame = item
        return item

    @property
    def api_key(self) -> int:
        """The api key of the request in flight (-1 if unreadable)."""
        try:
            return int(struct.unpack_from(">h", self._frame, 4)[0])
        except struct.error:
            return -1

    @property
    def client_id(self) -> str:
        """The client id of the request in flight ("" if null or unreadable)."""
        try:
            (length,) = struct.unpack_from(">h", self._frame, 12)
        except struct.error:
            return ""
        raw = self._frame[14 : 14 + max(length, 0)]
        return raw.decode("utf-8", "replace")

    def throttle_started(self) -> None:
        """A throttle for the request answered (before its response is sent, as Kafka)."""
        if self._outstanding:  # a pipelined one: hold everything after it until it ends
            self._throttled = True
            return
        self._mute.handle(MuteEvent.THROTTLE_STARTED)

    def response_sent(self) -> bool:
        """The oldest unanswered request's response was sent (the pipelined ones come
        first: one in flight resumes only once they are answered); True if readable."""
        if self._outstanding:
            self._outstanding -= 1
        else:
            self._mute.handle(MuteEvent.RESPONSE_SENT)
            self._mute.maybe_unmute()
        return self.readable

    def throttle_ended(self) -> bool:
        """The throttle ended; True if the channel is readable."""
        if self._throttled:
            self._throttled = False
        else:
            self._mute.handle(MuteEvent.THROTTLE_ENDED)
            self._mute.maybe_unmute()
        return self.readable
