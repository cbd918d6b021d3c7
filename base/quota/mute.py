"""Kafka's channel mute state machine (``KafkaChannel.ChannelMuteState``, KIP-219).

A request-quota violation does not delay the response: the response goes out at once with
``throttle_time_ms`` and the connection then reads nothing until *both* the response has
been sent *and* the throttle has ended (reference §0.5, §4.5). Written as a table, as
h11 does, so the whole machine is visible at once; the acceptor drives it with events and
asks ``readable`` before reading the next request.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["TRANSITIONS", "ChannelMute", "MuteEvent", "MuteState"]


class MuteState(Enum):
    NOT_MUTED = "NOT_MUTED"
    MUTED = "MUTED"
    MUTED_AND_RESPONSE_PENDING = "MUTED_AND_RESPONSE_PENDING"
    MUTED_AND_THROTTLED = "MUTED_AND_THROTTLED"
    MUTED_AND_THROTTLED_AND_RESPONSE_PENDING = "MUTED_AND_THROTTLED_AND_RESPONSE_PENDING"


class MuteEvent(Enum):
    REQUEST_RECEIVED = "REQUEST_RECEIVED"
    RESPONSE_SENT = "RESPONSE_SENT"
    THROTTLE_STARTED = "THROTTLE_STARTED"
    THROTTLE_ENDED = "THROTTLE_ENDED"


_S, _E = MuteState, MuteEvent

#: ``KafkaChannel.handleChannelMuteEvent``; any pair not listed is an illegal transition.
TRANSITIONS: dict[tuple[MuteState, MuteEvent], MuteState] = {
    (_S.MUTED, _E.REQUEST_RECEIVED): _S.MUTED_AND_RESPONSE_PENDING,
    (_S.MUTED_AND_RESPONSE_PENDING, _E.RESPONSE_SENT): _S.MUTED,
    (_S.MUTED_AND_THROTTLED_AND_RESPONSE_PENDING, _E.RESPONSE_SENT): _S.MUTED_AND_THROTTLED,
    (_S.MUTED_AND_RESPONSE_PENDING, _E.THROTTLE_STARTED): (
        _S.MUTED_AND_THROTTLED_AND_RESPONSE_PENDING
    ),
    (_S.MUTED_AND_THROTTLED, _E.THROTTLE_ENDED): _S.MUTED,
    (_S.MUTED_AND_THROTTLED_AND_RESPONSE_PENDING, _E.THROTTLE_ENDED): (
        _S.MUTED_AND_RESPONSE_PENDING
    ),
}


class ChannelMute:
    """One connection's mute state. The processor mutes after every completed receive.

    Typical request: ``mute()``, ``handle(REQUEST_RECEIVED)``, then on a throttle
    ``handle(THROTTLE_STARTED)`` *before* the response is queued (Kafka starts the throttle
    first), ``handle(RESPONSE_SENT)``, later ``handle(THROTTLE_ENDED)``, and
    ``maybe_unmute()`` after each event.
    """

    __slots__ = ("state",)

    def __init__(self) -> None:
        self.state = MuteState.NOT_MUTED

    def mute(self) -> None:
        """``KafkaChannel.mute``: only from NOT_MUTED (otherwise a no-op)."""
        if self.state is MuteState.NOT_MUTED:
            self.state = MuteState.MUTED

    def maybe_unmute(self) -> bool:
        """``KafkaChannel.maybeUnmute``: unmutes only from MUTED; True if now readable."""
        if self.state is MuteState.MUTED:
            self.state = MuteState.NOT_MUTED
        return self.state is MuteState.NOT_MUTED

    def handle(self, event: MuteEvent) -> MuteState:
        """Apply ``event``; an illegal transition is a harness bug (Kafka throws too)."""
        new = TRANSITIONS.get((self.state, event))
        if new is None:
            raise RuntimeError(f"Cannot transition from {self.state.name} for {event.name}")
        self.state = new
        return new

    @property
    def readable(self) -> bool:
        return self.state is MuteState.NOT_MUTED
