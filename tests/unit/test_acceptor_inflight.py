"""The one-request-in-flight gate (Kafka's processor with KIP-219's channel mute), with bytes."""

from __future__ import annotations

import pytest
from kafka.protocol.producer import ProduceRequest

from acceptor.inflight import RequestGate, expects_response, produce_acks
from acceptor.testing import api_versions_frame
from base.wire.framing import FrameError


def produce(version: int, acks: int, transactional_id: str | None = None) -> bytes:
    fields = {"acks": acks, "timeout_ms": 100, "topic_data": []}
    if version >= 3:
        fields["transactional_id"] = transactional_id
    req = ProduceRequest[version](**fields)
    req.with_header(correlation_id=7, client_id="client-\u00e9")
    return bytes(req.encode(header=True, framed=True))


@pytest.mark.parametrize("version", [0, 2, 3, 8, 9, 11, 13])
@pytest.mark.parametrize("acks", [0, 1, -1])
@pytest.mark.parametrize("txn", [None, "tx-1"])
def test_produce_acks_in_every_version(version: int, acks: int, txn: str | None) -> None:
    frame = produce(version, acks, txn if version >= 3 else None)
    assert produce_acks(frame) == acks
    assert expects_response(frame) is (acks != 0)


def test_other_requests_and_unreadable_produce_expect_a_response() -> None:
    assert expects_response(api_versions_frame())
    truncated = produce(9, 0)[:14]
    assert produce_acks(truncated) is None and expects_response(truncated)


def test_one_request_at_a_time() -> None:
    gate = RequestGate()
    a, b, c = (api_versions_frame(i) for i in (1, 2, 3))
    gate.received([a, b])
    gate.received([c])
    assert gate.take() == a
    assert gate.take() is None and len(gate) == 2  # muted until a's response is sent
    assert gate.state == "MUTED_AND_RESPONSE_PENDING"
    assert gate.response_sent() is True
    assert gate.take() == b


def test_a_throttle_holds_the_next_request_until_it_ends() -> None:
    gate = RequestGate()
    gate.received([api_versions_frame(1), api_versions_frame(2)])
    gate.take()
    gate.throttle_started()  # before the response is sent, as Kafka orders it
    assert gate.response_sent() is False
    assert gate.state == "MUTED_AND_THROTTLED" and gate.take() is None
    assert gate.throttle_ended() is True
    assert gate.take() == api_versions_frame(2)


def test_throttle_ending_before_the_response_is_sent_still_waits_for_it() -> None:
    gate = RequestGate()
    gate.received([api_versions_frame(1), api_versions_frame(2)])
    gate.take()
    gate.throttle_started()
    assert gate.throttle_ended() is False  # the response is still pending
    assert gate.take() is None
    assert gate.response_sent() is True


def test_a_bad_frame_comes_out_after_the_requests_before_it() -> None:
    gate = RequestGate()
    bad = FrameError("frame_too_large", "size 2000000000")
    gate.received([api_versions_frame(1)], bad)
    assert gate.take() == api_versions_frame(1)
    assert gate.take() is None
    gate.response_sent()
    assert gate.take() is bad and gate.readable


def test_a_response_with_nothing_in_flight_is_a_bug() -> None:
    with pytest.raises(RuntimeError):
        RequestGate().response_sent()


def fetch(version: int, max_wait_ms: int) -> bytes:
    from kafka.protocol.consumer import FetchRequest

    topic = FetchRequest.FetchTopic(
        partitions=[
            FetchRequest.FetchTopic.FetchPartition(
                partition=0, fetch_offset=0, partition_max_bytes=1024
            )
        ],
        **(
            {"topic_id": "00000000-0000-0000-0000-000000000001"}
            if version >= 13
            else {"topic": "t"}
        ),
    )
    req = FetchRequest[version](
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        topics=[topic],
    )
    req.with_header(correlation_id=3, client_id="consumer-1")
    return bytes(req.encode(header=True, framed=True))


@pytest.mark.parametrize("version", [4, 11, 12, 13, 15, 17])
def test_fetch_max_wait_in_every_version(version: int) -> None:
    from acceptor.inflight import fetch_max_wait_ms, purgatory_allowance_ns

    assert fetch_max_wait_ms(fetch(version, 321)) == 321
    assert purgatory_allowance_ns(fetch(version, 321)) == 321_000_000
    assert purgatory_allowance_ns(produce(9, -1)) == 0  # acks=all: see docs/acceptor.md


def test_a_fetch_that_waited_its_max_wait_is_charged_without_it() -> None:
    from acceptor.charge import Logged, charged_ns
    from acceptor.inflight import purgatory_allowance_ns

    allowance = purgatory_allowance_ns(fetch(11, 500))
    assert charged_ns(None, 503_000_000, allowance) == 3_000_000  # expired in purgatory
    assert charged_ns(None, 40_000_000, allowance) == 40_000_000  # answered before: whole
    no_wait = purgatory_allowance_ns(api_versions_frame(2))
    assert charged_ns(None, 503_000_000, no_wait) == 503_000_000  # not a fetch
    assert charged_ns(Logged(4000), 503_000_000, allowance) == 4000  # the broker's own


def pipelined_gate(*correlation_ids: int) -> RequestGate:
    gate = RequestGate()
    gate.pipelined = True
    gate.received([api_versions_frame(i) for i in correlation_ids])
    return gate


def test_pipelined_requests_pass_as_they_come_and_are_answered_in_order() -> None:
    gate = pipelined_gate(1, 2, 3)
    assert [gate.take(), gate.take(), gate.take()] == [api_versions_frame(i) for i in (1, 2, 3)]
    assert gate.outstanding == 3 and gate.state == "NOT_MUTED" and gate.readable
    assert gate.response_sent() is True and gate.outstanding == 2


def test_one_in_flight_resumes_only_once_the_pipelined_requests_are_answered() -> None:
    gate = pipelined_gate(1, 2, 3)
    gate.take()
    gate.take()
    gate.pipelined = False  # a request quota was set: one in flight from here on
    assert not gate.readable and gate.take() is None
    assert gate.response_sent() is False  # 1 answered, 2 still at the broker
    assert gate.response_sent() is True
    assert gate.take() == api_versions_frame(3)
    assert gate.state == "MUTED_AND_RESPONSE_PENDING" and gate.take() is None
    gate.response_sent()
    assert gate.state == "NOT_MUTED"


def test_a_throttle_on_a_pipelined_response_holds_every_later_request() -> None:
    gate = pipelined_gate(1, 2, 3)
    gate.take()
    gate.take()
    gate.pipelined = False
    gate.throttle_started()  # on 1's response, before it is sent
    assert gate.response_sent() is False and gate.response_sent() is False
    assert gate.outstanding == 0 and gate.take() is None  # the throttle is still running
    assert gate.throttle_ended() is True
    assert gate.take() == api_versions_frame(3)


def test_a_bad_frame_waits_for_the_pipelined_answers_before_it() -> None:
    gate = RequestGate()
    gate.pipelined = True
    bad = FrameError("frame_too_large", "size 2000000000")
    gate.received([api_versions_frame(1)], bad)
    assert gate.take() == api_versions_frame(1)
    assert gate.take() is None and not gate.readable  # the error is next: 1 must be answered
    gate.response_sent()
    assert gate.take() is bad
