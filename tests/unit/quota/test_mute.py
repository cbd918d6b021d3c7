"""KIP-219 channel muting: nothing is read until the response is sent and the throttle ended."""

from __future__ import annotations

import itertools

import pytest

from base.quota.mute import TRANSITIONS, ChannelMute, MuteEvent, MuteState

E = MuteEvent


def received() -> ChannelMute:
    ch = ChannelMute()
    ch.mute()
    ch.handle(E.REQUEST_RECEIVED)
    return ch


def test_unthrottled_request_unmutes_after_the_response() -> None:
    ch = received()
    assert not ch.maybe_unmute()
    ch.handle(E.RESPONSE_SENT)
    assert ch.maybe_unmute() and ch.readable


@pytest.mark.parametrize(
    "order",
    [(E.RESPONSE_SENT, E.THROTTLE_ENDED), (E.THROTTLE_ENDED, E.RESPONSE_SENT)],
)
def test_throttled_request_needs_both_events(order: tuple[MuteEvent, MuteEvent]) -> None:
    ch = received()
    ch.handle(E.THROTTLE_STARTED)
    first, second = order
    ch.handle(first)
    assert not ch.maybe_unmute(), f"readable after only {first.name}"
    ch.handle(second)
    assert ch.maybe_unmute()


def test_mute_is_idempotent_and_unmute_only_from_muted() -> None:
    ch = ChannelMute()
    assert ch.maybe_unmute()  # NOT_MUTED stays readable
    ch.mute()
    ch.mute()
    assert ch.state is MuteState.MUTED
    pending = ch.handle(E.REQUEST_RECEIVED)
    assert pending is MuteState.MUTED_AND_RESPONSE_PENDING
    ch.mute()  # no effect while a response is pending
    assert not ch.maybe_unmute()


def test_every_pair_outside_the_table_is_illegal() -> None:
    illegal = [
        (s, e) for s, e in itertools.product(MuteState, MuteEvent) if (s, e) not in TRANSITIONS
    ]
    assert len(illegal) == len(MuteState) * len(MuteEvent) - 6
    for state, event in illegal:
        ch = ChannelMute()
        ch.state = state
        with pytest.raises(RuntimeError, match=f"Cannot transition from {state.name}"):
            ch.handle(event)
