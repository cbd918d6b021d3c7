"""One request in flight per connection: requests the broker never answers (Produce with
acks=0) release the channel at once, and nothing is held behind them."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from kafka.protocol.admin import DescribeClientQuotasRequest, DescribeClientQuotasResponse
from kafka.protocol.metadata import ApiVersionsResponse
from kafka.protocol.producer import ProduceRequest

from acceptor import AcceptorHandle
from acceptor.testing import api_versions_frame
from base.wire.framing import FrameDecoder


@pytest.fixture
def acceptor(fronted_acceptor: AcceptorHandle) -> AcceptorHandle:
    return fronted_acceptor


def _frame(req: Any, correlation_id: int) -> bytes:
    req.with_header(correlation_id=correlation_id, client_id="inflight-test")
    return bytes(req.encode(header=True, framed=True))


def test_answers_after_an_acks0_produce_are_not_held(acceptor: AcceptorHandle) -> None:
    acks0 = ProduceRequest[9](transactional_id=None, acks=0, timeout_ms=100, topic_data=[])
    local = DescribeClientQuotasRequest[1](
        components=[
            DescribeClientQuotasRequest.ComponentData(entity_type="ip", match_type=2, match=None)
        ],
        strict=False,
    )
    s = socket.create_connection(acceptor.address("CLIENT"), timeout=5)
    try:
        # no answer to 1; 2 answered by the acceptor at once (it used to wait for the next
        # broker response), then 3 by the broker
        s.sendall(_frame(acks0, 1) + _frame(local, 2))
        decoder = FrameDecoder(2**31 - 1)
        frames: list[bytes] = []
        while len(frames) < 1:
            data = s.recv(65536)  # socket.timeout (5 s) if the answer is held
            assert data, "closed by the acceptor"
            frames += decoder.feed(data)
        s.sendall(api_versions_frame(3))
        while len(frames) < 2:
            data = s.recv(65536)  # socket.timeout (5 s) if an answer is held
            assert data, "closed by the acceptor"
            frames += decoder.feed(data)
    finally:
        s.close()
    first = DescribeClientQuotasResponse[1].decode(frames[0][4:], version=1, header=True)
    second = ApiVersionsResponse[3].decode(frames[1][4:], version=3, header=True)
    assert (first.header.correlation_id, first.error_code) == (2, 0)
    assert (second.header.correlation_id, second.error_code) == (3, 0)
