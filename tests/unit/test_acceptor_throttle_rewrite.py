"""KIP-219 response rewriting: throttle_time_ms raised in place, everything else kept."""

from __future__ import annotations

from kafka.protocol.metadata import ApiVersionsResponse, MetadataResponse

from acceptor.request_quotas import entity_key, parse_entity_key, with_throttle_time
from base.quota.requests import DEFAULT


def _frame(resp, cid: int) -> bytes:
    resp.with_header(correlation_id=cid)
    return bytes(resp.encode(header=True, framed=True))


def test_api_versions_response_gets_the_throttle() -> None:
    frame = _frame(ApiVersionsResponse[3](error_code=0, api_keys=[], throttle_time_ms=0), 5)
    out = with_throttle_time(frame, 18, 3, 250)
    resp = ApiVersionsResponse.decode(out[4:], version=3, header=True)
    assert resp.throttle_time_ms == 250 and resp.header.correlation_id == 5


def test_flexible_metadata_response_keeps_its_fields() -> None:
    frame = _frame(
        MetadataResponse[12](
            throttle_time_ms=0, brokers=[], cluster_id="c1", controller_id=1, topics=[]
        ),
        9,
    )
    out = with_throttle_time(frame, 3, 12, 300)
    resp = MetadataResponse.decode(out[4:], version=12, header=True)
    assert (resp.throttle_time_ms, resp.cluster_id, resp.header.correlation_id) == (300, "c1", 9)


def test_a_larger_broker_throttle_is_kept_and_unknown_bytes_pass() -> None:
    frame = _frame(ApiVersionsResponse[3](error_code=0, api_keys=[], throttle_time_ms=900), 1)
    assert with_throttle_time(frame, 18, 3, 250) == frame
    assert with_throttle_time(b"\x00\x00\x00\x02zz", 18, 3, 10) == b"\x00\x00\x00\x02zz"


def test_entity_keys_round_trip() -> None:
    for user, client in (("alice", None), (None, DEFAULT), (DEFAULT, "c"), ("u", "c")):
        assert parse_entity_key(entity_key(user, client)) == (user, client)
