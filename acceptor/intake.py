"""The per-request path of a registered connection, and how a bad frame ends it.

Why one place: every request is treated alike (header, admin answered locally, response
order, `request` rows), including the whole requests that arrived in the same read as a bad
frame. Kafka's
selector reads one receive at a time and answers it before reading the next, so a client
that sends a valid request and then a bad size gets its answer and then the close (finding F3
in docs/hostile-input.md). The acceptor does the same: "answer what was read, then close",
bounded by `CLOSE_GRACE_S` in case an answer never comes (an `acks=0` produce has none).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from acceptor.inflight import expects_response, purgatory_allowance_ns
from acceptor.ports import DEFERRED
from acceptor.tracker import ResponseOrder
from base.wire.framing import parse_request_header

if TYPE_CHECKING:
    from acceptor.ports import Channel, LocalAnswers

#: how long a connection that met a bad frame waits for the answers still owed to its client
CLOSE_GRACE_S = 30.0

#: reasons imposed from outside the connection: they stay the `close` reason even while a
#: connection is already closing after a bad frame
_EXTERNAL_REASONS = frozenset({"shutdown", "idle_timeout", "max_connections"})


#: what became of a request taken (`take_request`)
FORWARDED = "forwarded"  # to go upstream; the broker answers it
FORWARDED_UNANSWERED = "forwarded_unanswered"  # to go upstream; no answer comes (acks=0)
ANSWERED = "answered"  # answered here, the answer written in its turn
AWAITED = "awaited"  # answered once built in another process (`DEFERRED`)


def take_request(
    admin: LocalAnswers,
    conn: Channel,
    order: ResponseOrder,
    frame: bytes,
    now_ns: int,
    to_client: Callable[[bytes], None],
) -> str:
    """Run one whole request frame through the per-request path.

    Returns what became of it: `FORWARDED` or `FORWARDED_UNANSWERED` (the frame goes
    upstream unchanged; a Produce with acks=0 is not entered in `order`, so nothing waits
    behind a response that never comes), `ANSWERED` (an answer the acceptor built itself,
    sent to `to_client` as soon as its turn comes) or `AWAITED` (built in another process:
    entered in `order` as awaited). Raises the `FrameError` of a frame that cannot be taken
    (unreadable header, refused admin request): the broker never reads past it.
    """
    info = parse_request_header(frame)
    conn.requests += 1
    local = admin.maybe_handle(conn, frame, info)
    if local is DEFERRED:
        order.awaiting(info.correlation_id, info.api_key)
        return AWAITED
    if local is not None:
        to_send = order.local(info.correlation_id, info.api_key, local)
        if to_send:
            to_client(to_send)
        return ANSWERED
    if not expects_response(frame):  # acks=0: the broker never answers it
        return FORWARDED_UNANSWERED
    order.forwarded(
        info.correlation_id,
        info.api_key,
        info.client_id,
        now_ns,
        len(frame),
        info.api_version,
        purgatory_allowance_ns(frame),
    )
    return FORWARDED


def close_reason(
    closing: tuple[str, dict[str, Any]] | None,
    reason: str,
    detail: dict[str, Any] | None,
    evicted: bool,
) -> tuple[str, dict[str, Any] | None]:
    """The `close` reason and detail of a connection that may already be closing.

    A connection closing after a bad frame keeps that frame's reason when its end comes
    from the connection itself (the answers sent, the grace period over, either side
    hanging up meanwhile); the event that ended it goes to `detail.then`.
    """
    if closing is None or evicted or reason in _EXTERNAL_REASONS:
        return reason, detail
    first, first_detail = closing
    merged = {**first_detail, **(detail or {})}
    if reason != first:
        merged["then"] = reason
    return first, merged
