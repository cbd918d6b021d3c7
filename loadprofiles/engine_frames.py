"""The storm engine's Kafka frames, sans-IO: its requests encoded once (kafka-python's own
classes; only the correlation id, bytes 8..12, is patched per connection), its responses
read at fixed offsets, and responses cut out of what a socket read.

Only the first ApiVersions response of a run is decoded in full (the versions both sides
speak); a Produce response is decoded in full (its error is per partition); an ApiVersions
or Metadata response is read where its fields sit. ``tests/unit/test_engine_frames.py``
holds each reader to kafka-python's full decode.
"""

from __future__ import annotations

import io
import time
from typing import Any

from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record.memory_records import MemoryRecordsBuilder

from base.security.client import SASL_AUTHENTICATE_KEY, SASL_HANDSHAKE_KEY

API_VERSIONS_KEY = 18
METADATA_KEY = 3
PRODUCE_KEY = 0
API_VERSIONS_VERSION = 3
METADATA_MAX_VERSION = 12
PRODUCE_MAX_VERSION = 12
#: the first flexible Produce version: its response header carries tagged fields
PRODUCE_FLEXIBLE = 9
API_NAMES = {
    API_VERSIONS_KEY: "ApiVersions",
    METADATA_KEY: "Metadata",
    PRODUCE_KEY: "Produce",
    SASL_HANDSHAKE_KEY: "SaslHandshake",
    SASL_AUTHENTICATE_KEY: "SaslAuthenticate",
}


def encode_request(request: Any, client_id: str) -> bytes:
    """A framed request (size, header, body) with correlation id 0, via kafka-python."""
    request.with_header(correlation_id=0, client_id=client_id)
    return bytes(request.encode(framed=True, header=True))


def api_versions_frame(client_id: str) -> bytes:
    return encode_request(
        ApiVersionsRequest(
            version=API_VERSIONS_VERSION,
            client_software_name="harness-loadprofiles",
            client_software_version="0.1.0",
        ),
        client_id,
    )


def metadata_frame(client_id: str, version: int = METADATA_MAX_VERSION) -> bytes:
    """Metadata for no topics (brokers and cluster id only), like a bootstrapping client."""
    return encode_request(
        MetadataRequest(
            version=version,
            topics=[],
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        ),
        client_id,
    )


def produce_frame(
    client_id: str,
    topic: str,
    value: bytes,
    *,
    acks: int,
    timeout_ms: int,
    version: int = PRODUCE_MAX_VERSION,
) -> bytes:
    """One record (``value``, no key) for partition 0 of ``topic`` in a v2 record batch."""
    builder = MemoryRecordsBuilder(2, 0, 1 << 20)
    builder.append(int(time.time() * 1000), None, value, [])
    builder.close()
    data = ProduceRequest.TopicProduceData
    return encode_request(
        ProduceRequest(
            version=version,
            transactional_id=None,
            acks=acks,
            timeout_ms=timeout_ms,
            topic_data=[
                data(
                    name=topic,
                    partition_data=[data.PartitionProduceData(index=0, records=builder.buffer())],
                )
            ],
        ),
        client_id,
    )


def produce_fields(frame: bytes, version: int) -> tuple[int, int]:
    """(error_code, throttle_time_ms) of a Produce response frame (the first partition's
    error; a response that does not decode is error -1, UNKNOWN_SERVER_ERROR's code)."""
    body = frame[9:] if version >= PRODUCE_FLEXIBLE else frame[8:]
    try:
        resp = ProduceResponse.decode(io.BytesIO(body), version=version)
        parts = [p for t in resp.responses for p in t.partition_responses]
        error = next((int(p.error_code) for p in parts if p.error_code), 0)
        return error, int(resp.throttle_time_ms or 0)
    except Exception:
        return -1, 0


def with_correlation_id(frame: bytes, cid: int) -> bytes:
    return frame[:8] + cid.to_bytes(4, "big") + frame[12:]


def api_versions_fields(frame: bytes) -> tuple[int, int]:
    """(error_code, throttle_time_ms) of an ApiVersions v3 response frame.

    Layout: size, correlation id (header v0), error_code, compact array of
    (api_key, min, max, tagged fields), throttle_time_ms. Entries with tagged
    fields (none in Kafka 4.3.1) fall back to a full decode.
    """
    error = int.from_bytes(frame[8:10], "big", signed=True)
    pos, shift, n = 10, 0, 0
    while pos < len(frame):  # unsigned varint: N + 1
        b = frame[pos]
        n |= (b & 0x7F) << shift
        pos += 1
        shift += 7
        if not b & 0x80:
            break
    count = max(0, n - 1)
    end = pos + 7 * count
    if end + 4 <= len(frame) and frame[pos + 6 : end : 7].count(0) == count:
        return error, int.from_bytes(frame[end : end + 4], "big", signed=True)
    try:
        resp = ApiVersionsResponse.decode(io.BytesIO(frame[8:]), version=API_VERSIONS_VERSION)
        return int(resp.error_code), int(resp.throttle_time_ms or 0)
    except Exception:
        return error, 0


def max_versions(frame: bytes) -> dict[int, int]:
    """The broker's highest version per API key, from a full ApiVersions response frame."""
    try:
        resp = ApiVersionsResponse.decode(io.BytesIO(frame[8:]), version=API_VERSIONS_VERSION)
    except Exception:
        return {}
    return {int(v.api_key): int(v.max_version) for v in resp.api_keys or ()}


def metadata_max_version(frame: bytes) -> int | None:
    """The broker's highest Metadata version, from a full ApiVersions response frame."""
    return max_versions(frame).get(METADATA_KEY)


def metadata_throttle(frame: bytes) -> int:
    """throttle_time_ms of a Metadata v9+ response frame: header v1 (correlation id, tagged
    fields), then the throttle (0 for a frame too short to carry one)."""
    return int.from_bytes(frame[9:13], "big", signed=True) if len(frame) >= 13 else 0


def response_fields(api: int, frame: bytes, produce_version: int) -> tuple[int, int]:
    """(error_code, throttle_time_ms) of the response to the engine's request ``api`` (a
    Metadata response carries no top-level error: 0)."""
    if api == API_VERSIONS_KEY:
        return api_versions_fields(frame)
    if api == PRODUCE_KEY:
        return produce_fields(frame, produce_version)
    return 0, metadata_throttle(frame)


def frame_end(buf: bytes) -> int:
    """Where the first whole frame of ``buf`` ends (its size field and the size it names);
    0 while it is not all there."""
    if len(buf) < 4:
        return 0
    end = int.from_bytes(buf[:4], "big") + 4
    return end if len(buf) >= end else 0


def warm_up() -> None:
    """Compile kafka-python's ApiVersions decoder now (~0.1 s the first time), not on
    the first response of a schedule, where it would show up as lag."""
    sample = ApiVersionsResponse(
        version=API_VERSIONS_VERSION,
        error_code=0,
        api_keys=[ApiVersionsResponse.ApiVersion(api_key=METADATA_KEY, min_version=0,
                                                 max_version=METADATA_MAX_VERSION)],
        throttle_time_ms=0,
    )  # fmt: skip
    body = bytes(sample.encode(version=API_VERSIONS_VERSION))
    metadata_max_version(b"\0" * 8 + body)


def compile_produce(version: int) -> None:
    """Compile kafka-python's Produce response decoder for ``version`` (the produce
    shape decodes every answer in full: the first must not pay for the compile)."""
    empty = bytes(
        ProduceResponse(version=version, responses=[], throttle_time_ms=0).encode(version=version)
    )
    head = b"\0" * (9 if version >= PRODUCE_FLEXIBLE else 8)
    produce_fields(head + empty, version)
