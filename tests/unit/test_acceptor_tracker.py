"""Response ordering when the acceptor answers some requests itself."""

from __future__ import annotations

from acceptor.tracker import ResponseOrder


def test_local_answer_with_nothing_pending_goes_out_at_once() -> None:
    order = ResponseOrder()
    assert order.local(1, 48, b"L1") == b"L1"


def test_local_answer_waits_behind_forwarded_requests() -> None:
    order = ResponseOrder()
    order.forwarded(1, 0, "c", 100, 10)
    assert order.local(2, 48, b"L2") == b""
    order.forwarded(3, 3, "c", 120, 10)
    before, done, after = order.response(1, 50, 160)
    assert before == [] and after == [b"L2"]
    assert done is not None and done.api_key == 0 and done.latency_ns == 60
    before, done, after = order.response(3, 5, 200)
    assert done is not None and done.latency_ns == 80 and after == [] and len(order) == 0


def test_requests_without_response_are_skipped() -> None:
    order = ResponseOrder()
    order.forwarded(1, 0, "p", 0, 1)  # acks=0 produce: never answered
    assert order.local(2, 49, b"L2") == b""
    order.forwarded(3, 0, "p", 0, 1)
    before, done, _after = order.response(3, 1, 10)
    assert before == [b"L2"]  # the local answer was due before request 3's response
    assert done is not None and done.api_key == 0
    assert len(order) == 0


def test_unknown_correlation_id_changes_nothing() -> None:
    order = ResponseOrder()
    order.forwarded(1, 0, "p", 0, 1)
    assert order.response(99, 1, 10) == ([], None, [])
    assert len(order) == 1


def test_each_response_carries_its_own_requests_purgatory_allowance() -> None:
    order = ResponseOrder()
    order.forwarded(1, 1, "consumer", 0, 10, 11, 500_000_000)  # a fetch, max_wait 500 ms
    order.forwarded(2, 8, "consumer", 5, 10, 8)  # an offset commit behind it, pipelined
    _, first, _ = order.response(1, 10, 501_000_000)
    _, second, _ = order.response(2, 10, 501_000_005)
    assert first is not None and first.allowance_ns == 500_000_000
    assert second is not None and second.allowance_ns == 0


def test_an_awaited_answer_first_in_line_goes_out_when_it_comes() -> None:
    order = ResponseOrder()
    order.awaiting(7, 49)
    assert order.ready(8, b"other") == []  # not the one awaited: nothing changes
    assert len(order) == 1
    assert order.ready(7, b"answer") == [b"answer"]
    assert len(order) == 0


def test_an_awaited_answer_waits_behind_the_broker_and_then_leaves_with_it() -> None:
    """Forwarded 1, then admin 2 answered in another process: 2's answer may come first,
    but goes out right after the broker's answer to 1; the broker's response never matches
    the awaited entry, even with the same correlation id."""
    order = ResponseOrder()
    order.forwarded(1, 3, "c", 0, 10)
    order.awaiting(2, 48)
    assert order.ready(2, b"admin") == []  # behind 1
    before, done, after = order.response(1, 20, 5)
    assert before == [] and done is not None and done.latency_ns == 5
    assert after == [b"admin"]
    order.awaiting(3, 48)
    assert order.response(3, 20, 6) == ([], None, [])  # an awaited entry is no broker's
    assert order.ready(3, b"x") == [b"x"]
