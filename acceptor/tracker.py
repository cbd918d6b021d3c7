"""Per-connection response ordering, sans-IO.

Why: Kafka clients match responses to requests strictly in order (kafka-python raises
CorrelationIdError otherwise), and the acceptor answers some requests itself (admin). A
locally built response must therefore wait behind every earlier request still pending at the
broker. The tracker is that FIFO; it also yields the broker time of each forwarded request
(forward -> response) for `request` rows.

Requests that get no response (Produce with acks=0) are not entered (`intake` reads their
acks); should one be, a response skips earlier upstream entries until its correlation id
matches, and a local answer queued behind such an entry is released by the next response.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import NamedTuple


@dataclass(slots=True)
class Pending:
    correlation_id: int
    api_key: int
    api_version: int
    client_id: str | None
    sent_ns: int
    request_bytes: int
    local: bytes | None = None  # a response the acceptor built, waiting its turn
    allowance_ns: int = 0  # purgatory wait it may spend uncharged (`inflight.charged_ns`)
    awaiting: bool = False  # a response the acceptor builds elsewhere, not here yet


class Completed(NamedTuple):
    """A forwarded request whose response came: what its `request` row and its charge
    read. A tuple (two a connection, one per response: a frozen dataclass sets each field
    through `object.__setattr__`)."""

    api_key: int
    api_version: int
    client_id: str | None
    latency_ns: int
    request_bytes: int
    response_bytes: int
    allowance_ns: int = 0
    correlation_id: int = -1


#: a NamedTuple's own `__new__` is a Python function; `tuple.__new__` makes the same value
_new = tuple.__new__


class ResponseOrder:
    """FIFO of requests in flight on one connection."""

    __slots__ = ("_queue",)

    def __init__(self) -> None:
        self._queue: deque[Pending] = deque()

    def __len__(self) -> int:
        return len(self._queue)

    def forwarded(
        self,
        correlation_id: int,
        api_key: int,
        client_id: str | None,
        now_ns: int,
        size: int,
        api_version: int = 0,
        allowance_ns: int = 0,
    ) -> None:
        self._queue.append(
            Pending(
                correlation_id, api_key, api_version, client_id, now_ns, size, None, allowance_ns
            )
        )

    def local(self, correlation_id: int, api_key: int, response: bytes) -> bytes:
        """Returns the bytes to send now (the response, or b"" if it must wait its turn)."""
        if not self._queue:
            return response
        self._queue.append(Pending(correlation_id, api_key, 0, None, 0, 0, response))
        return b""

    def peek(self, correlation_id: int) -> Pending | None:
        """The forwarded request a broker response with this correlation id answers (left
        in place: `response` takes it)."""
        i = self._upstream_index(correlation_id)
        return self._queue[i] if i >= 0 else None

    def _upstream_index(self, correlation_id: int) -> int:
        """Where the forwarded request with this correlation id is (-1: nowhere)."""
        for i, entry in enumerate(self._queue):
            upstream = entry.local is None and not entry.awaiting
            if upstream and entry.correlation_id == correlation_id:
                return i
        return -1

    def awaiting(self, correlation_id: int, api_key: int) -> None:
        """A request the acceptor answers once another process built the answer (`ready`)."""
        self._queue.append(Pending(correlation_id, api_key, 0, None, 0, 0, None, 0, True))

    def ready(self, correlation_id: int, response: bytes) -> list[bytes]:
        """The answer of an `awaiting` request: the responses to send now (it and the local
        ones behind it, if it is first in line; else nothing: it goes out after the broker
        answers what is before it)."""
        queue = self._queue
        for entry in queue:
            if entry.awaiting and entry.correlation_id == correlation_id:
                entry.awaiting = False
                entry.local = response
                break
        else:
            return []
        out: list[bytes] = []
        while queue and queue[0].local is not None:
            out.append(queue.popleft().local or b"")
        return out

    def response(
        self, correlation_id: int, frame_len: int, now_ns: int
    ) -> tuple[list[bytes], Completed | None, list[bytes]]:
        """An upstream response arrived.

        Returns (local responses to send before it, the request it answers, local responses
        to send after it). An unknown correlation id is forwarded with nothing around it.
        """
        queue = self._queue
        match = self._upstream_index(correlation_id)
        if match < 0:
            return [], None, []
        before: list[bytes] = []
        if match and any(queue[i].awaiting for i in range(match)):
            # not expected: nothing is taken behind an answer awaited (`Connection._step`)
            return [], None, []
        for _ in range(match):
            dropped = queue.popleft()  # an upstream entry that never got a response (acks=0)
            if dropped.local is not None:
                before.append(dropped.local)
        entry = queue.popleft()
        done = _new(
            Completed,
            (
                entry.api_key,
                entry.api_version,
                entry.client_id,
                now_ns - entry.sent_ns,
                entry.request_bytes,
                frame_len,
                entry.allowance_ns,
                entry.correlation_id,
            ),
        )
        after: list[bytes] = []
        while queue and queue[0].local is not None:
            after.append(queue.popleft().local or b"")
        return before, done, after
