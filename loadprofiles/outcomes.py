"""How one connection ended, from the client's side: one classification for every profile.

The storm engine (every arrival profile), the steady profile's kafka-python connections
(`steady_conns`) and the set-up connection (`kafka_client`) each see a connection end with
a reason (``done``, ``eof``, ``reset``, ``timeout``) after some number of responses; this
turns that into the ``closed.detail.outcome`` the checker reads. Pure: no socket, no clock.

Closed by the server before any response is an EOF after accept, whether the client saw a
FIN or a RST: a server that closes a socket holding the client's unread request makes the
kernel send RST (Kafka's count-reject and throttle-close do exactly that), so the two are
one enforcement outcome (``detail.closed_by`` keeps which). A reset or time-out after a
response is a reset or time-out.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, cast

from base.history.rows import ClientClosedDetail


class Outcome(StrEnum):
    """``closed.detail.outcome`` (docs/history.md)."""

    SERVED = "served"
    DELAYED_SERVED = "delayed_served"
    EOF_AFTER_ACCEPT = "eof_after_accept"
    REFUSED = "refused"
    RESET = "reset"
    TIMEOUT = "timeout"
    #: a connect-only arrival that connected and closed by itself (it asked nothing)
    CONNECTED = "connected"
    TLS_FAILED = "tls_failed"
    TLS_STALLED = "tls_stalled"
    AUTH_FAILED = "auth_failed"


def classify(
    reason: str,
    *,
    responses: int,
    ready_ms: float | None,
    delayed_threshold_ms: float,
    connect_only: bool = False,
) -> Outcome:
    """The outcome of a connection that got past its TCP connect and ended for ``reason``
    after ``responses`` responses, the first ``ready_ms`` after its start."""
    if responses:
        if reason in ("reset", "timeout"):
            return Outcome(reason)
        slow = ready_ms is not None and ready_ms > delayed_threshold_ms
        return Outcome.DELAYED_SERVED if slow else Outcome.SERVED
    if reason in ("eof", "reset"):
        return Outcome.EOF_AFTER_ACCEPT
    if reason == "done" and connect_only:
        return Outcome.CONNECTED
    return Outcome.TIMEOUT  # connected, asked, heard nothing in time (or asked nothing)


def closed_detail(
    outcome: str,
    reason: str,
    profile: str,
    connect_ms: float | None,
    ready_ms: float | None,
    eof_ms: float | None,
    errors: list[str] | None,
) -> ClientClosedDetail:
    """The `closed` row's detail every client writes: the outcome, how the server ended
    it (``closed_by`` of an EOF after accept), each stage's time it reached (ms, to the
    µs), its first three errors. A profile adds what only it knows (TLS, SASL)."""
    d: dict[str, Any] = {"outcome": outcome, "profile": profile}
    if outcome == Outcome.EOF_AFTER_ACCEPT:
        d["closed_by"] = "reset" if reason == "reset" else "eof"
    if connect_ms is not None:
        d["connect_ms"] = round(connect_ms, 3)
    if ready_ms is not None:
        d["ready_ms"] = round(ready_ms, 3)
    if eof_ms is not None:
        d["eof_ms"] = round(eof_ms, 3)
    if errors:
        d["errors"] = errors[:3]
    return cast("ClientClosedDetail", d)
