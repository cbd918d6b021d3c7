"""The sans-IO framer and header helpers, against bytes kafka-python itself produced."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.protocol.admin import DescribeClientQuotasRequest, DescribeClientQuotasResponse
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest

from base.wire.framing import (
    FrameDecoder,
    FrameError,
    correlation_id_of_response,
    decode_request,
    encode_response,
    java_utf8,
    parse_request_header,
)


def _request(req: Any, correlation_id: int, client_id: str | None = "cli") -> bytes:
    req.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(req.encode(header=True, framed=True))


def test_frames_are_cut_at_size_boundaries_whatever_the_chunking() -> None:
    frames = [_request(ApiVersionsRequest[v](), i) for i, v in enumerate((0, 1, 2, 3))]
    stream = b"".join(frames)
    for chunk in (1, 3, 7, len(stream)):
        dec = FrameDecoder(1024)
        got: list[bytes] = []
        for i in range(0, len(stream), chunk):
            got.extend(dec.feed(stream[i : i + chunk]))
        assert got == frames
        assert dec.buffered == 0


def test_incomplete_frame_is_held_back() -> None:
    frame = _request(ApiVersionsRequest[0](), 1)
    dec = FrameDecoder(1024)
    assert dec.feed(frame[:-1]) == []
    assert dec.buffered == len(frame) - 1
    assert dec.feed(frame[-1:]) == [frame]


def test_negative_size_is_bad_frame() -> None:
    with pytest.raises(FrameError) as err:
        FrameDecoder(1024).feed(struct.pack(">i", -5) + b"xx")
    assert err.value.reason == "bad_frame"


def test_oversized_frame_is_refused_before_its_payload_arrives() -> None:
    dec = FrameDecoder(100)
    with pytest.raises(FrameError) as err:
        dec.feed(struct.pack(">i", 101))
    assert err.value.reason == "frame_too_large"
    # exactly the limit is fine
    assert FrameDecoder(100).feed(struct.pack(">i", 100) + b"\0" * 100) != []


def test_http_garbage_reads_as_an_oversized_frame() -> None:
    with pytest.raises(FrameError) as err:
        FrameDecoder(104857600).feed(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert err.value.reason == "frame_too_large"


@pytest.mark.parametrize(
    ("req", "flexible"),
    [
        (ApiVersionsRequest[0](), False),
        (ApiVersionsRequest[3](), True),
        (MetadataRequest[12](), True),
    ],
)
def test_request_header_fields_from_flexible_and_classic_headers(req: Any, flexible: bool) -> None:
    frame = _request(req, 4242, "my-client")
    info = parse_request_header(frame)
    assert (info.api_key, info.api_version, info.correlation_id, info.client_id) == (
        req.API_KEY,
        req.API_VERSION,
        4242,
        "my-client",
    )


def test_null_client_id() -> None:
    info = parse_request_header(_request(ApiVersionsRequest[1](), 9, None))
    assert info.client_id is None and info.correlation_id == 9


# `new String(bytes, UTF_8)` on the JDK 17 the broker runs on, printed as UTF-16 code units
# (F4, docs/hostile-input.md; a 200,000-input differential run against the JVM agreed).
JAVA_DECODED = [
    (b"\xff\xfe", "\ufffd\ufffd"),
    (b"caf\xe9", "caf\ufffd"),
    (b"\xed\xa0\x80", "\ufffd"),  # a surrogate: one U+FFFD in Java, three in Python's "replace"
    (b"\xed\xa0A", "\ufffdA"),
    (b"\xed\xa0", "\ufffd"),
    (b"ok\x80\x80", "ok\ufffd\ufffd"),
    (b"\xc3", "\ufffd"),
    (b"\xc3(", "\ufffd("),
    (b"\xf8\x88\x80\x80\x80", "\ufffd" * 5),
    (b"\xf0\x9f\x98", "\ufffd"),
    (b"\xe2\x82", "\ufffd"),
    (b"\xf4\x90\x80\x80", "\ufffd" * 4),
    (b"\xc0\xaf", "\ufffd" * 2),
    (b"\xe0\x80\xaf", "\ufffd" * 3),
    ("h\u00e9 \U0001f600".encode(), "h\u00e9 \U0001f600"),
]


@pytest.mark.parametrize(("raw", "java"), JAVA_DECODED)
def test_client_id_that_is_not_utf8_reads_as_the_broker_reads_it(raw: bytes, java: str) -> None:
    """F4: served with U+FFFD like the broker, not refused; the frame itself is untouched."""
    assert java_utf8(raw) == java
    frame = _request(ApiVersionsRequest[3](), 77, "Z" * len(raw)).replace(b"Z" * len(raw), raw)
    info = parse_request_header(frame)
    assert (info.api_key, info.api_version, info.correlation_id, info.client_id) == (
        18,
        3,
        77,
        java,
    )


def test_lenient_client_id_path_still_refuses_a_short_header() -> None:
    # the client id promises 4 bytes, 2 are there, one of them not UTF-8
    with pytest.raises(FrameError) as err:
        parse_request_header(struct.pack(">ihhih", 12, 18, 3, 1, 4) + b"\xff\xfe")
    assert err.value.reason == "bad_frame"


def test_truncated_header_is_bad_frame() -> None:
    with pytest.raises(FrameError) as err:
        parse_request_header(struct.pack(">i", 3) + b"\x00\x12\x00")
    assert err.value.reason == "bad_frame"


def test_admin_request_round_trip_and_response_correlation() -> None:
    D = DescribeClientQuotasRequest
    req = D[1](
        components=[D.ComponentData(entity_type="ip", match_type=0, match="1.2.3.4")], strict=True
    )
    frame = _request(req, 77)
    decoded = decode_request(D, frame, 1)
    assert decoded.components[0].match == "1.2.3.4" and decoded.strict is True
    resp = DescribeClientQuotasResponse[1](
        throttle_time_ms=0, error_code=0, error_message=None, entries=[]
    )
    out = encode_response(resp, 77)
    assert correlation_id_of_response(out) == 77
    assert DescribeClientQuotasResponse.decode(out[4:], version=1, header=True).error_code == 0


@given(st.lists(st.binary(max_size=64), max_size=20), st.integers(min_value=1, max_value=50))
def test_any_payloads_survive_any_chunking(payloads: list[bytes], chunk: int) -> None:
    frames = [struct.pack(">i", len(p)) + p for p in payloads]
    stream = b"".join(frames)
    dec = FrameDecoder(64)
    got: list[bytes] = []
    for i in range(0, len(stream), chunk):
        got.extend(dec.feed(stream[i : i + chunk]))
    assert got == frames


def _reference_cut(
    chunks: list[bytes], max_bytes: int
) -> tuple[list[bytes], str | None, list[bytes], int]:
    """The stream read so far, cut from its start after every read: (frames of earlier
    reads, the error, the frames of the read that met it, bytes left)."""
    stream, pos, out = b"", 0, []
    for chunk in chunks:
        stream += chunk
        new = []
        while len(stream) - pos >= 4:
            (size,) = struct.unpack_from(">i", stream, pos)
            if size < 0 or size > max_bytes:
                return out, "bad_frame" if size < 0 else "frame_too_large", new, len(stream) - pos
            if len(stream) - pos - 4 < size:
                break
            new.append(stream[pos : pos + 4 + size])
            pos += 4 + size
        out += new
    return out, None, [], len(stream) - pos


@given(
    st.lists(st.binary(max_size=64), max_size=20),
    st.lists(st.integers(min_value=0, max_value=2_000), max_size=8),
    st.binary(max_size=6),
)
def test_frames_errors_and_leftovers_are_those_of_the_stream_cut_whole(
    payloads: list[bytes], cuts: list[int], tail: bytes
) -> None:
    """However the reads fall (held pieces joined once, a read at a frame boundary cut in
    place), the decoder answers what cutting the whole stream read so far answers."""
    stream = b"".join(struct.pack(">i", len(p)) + p for p in payloads) + tail
    points = sorted({c % (len(stream) + 1) for c in cuts})
    chunks = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    dec, got = FrameDecoder(48), []
    result: tuple[list[bytes], str | None, list[bytes], int] | None = None
    for chunk in chunks:
        try:
            got.extend(dec.feed(chunk))
        except FrameError as exc:
            result = got, exc.reason, exc.frames, dec.buffered
            break
    assert (result or (got, None, [], dec.buffered)) == _reference_cut(chunks, 48)


def test_a_read_that_is_one_whole_frame_is_not_copied() -> None:
    frame = _request(ApiVersionsRequest[0](), 1)
    (got,) = FrameDecoder(1024).feed(frame)
    assert got is frame


def test_whole_frames_before_a_bad_size_travel_with_the_error() -> None:
    good = [_request(ApiVersionsRequest[0](), i) for i in range(2)]
    dec = FrameDecoder(1024)
    with pytest.raises(FrameError) as err:
        dec.feed(b"".join(good) + struct.pack(">i", -7) + b"tail")
    assert err.value.reason == "bad_frame"
    assert err.value.frames == good
    assert dec.buffered == 8  # the bad size field and what followed it, nothing before


def test_null_non_nullable_array_is_refused_as_bad_frame() -> None:
    from base.wire.framing import check_nulls

    D = DescribeClientQuotasRequest
    frame = _request(D[1](components=None, strict=False), 3)
    req = decode_request(D, frame, 1)  # decodes as sent ...
    assert req.components is None
    with pytest.raises(FrameError) as err:  # ... and is refused as Kafka refuses it
        check_nulls(req, D, 1)
    assert err.value.reason == "bad_frame" and "Components" in str(err.value)
