"""Fuzz the acceptor's client-facing byte parsing: frame cutting and request headers.

Why these properties: the acceptor reads every client's bytes through `FrameDecoder` and
`parse_request_header` before anything else happens, so they are the first thing hostile
input reaches. The contract the connection code relies on is narrow: either values come out
or `FrameError` with a history reason (`bad_frame`, `frame_too_large`) is raised, and how
TCP happened to chunk the stream never changes the outcome. Anything else (IndexError,
struct.error, UnicodeDecodeError escaping) would kill a connection's pump task without a
`close` row.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest

from base.wire.framing import (
    FrameDecoder,
    FrameError,
    RequestInfo,
    correlation_id_of_response,
    java_utf8,
    parse_request_header,
)

pytestmark = pytest.mark.unit
FUZZ = settings.get_profile("fuzz")  # registered in conftest.py; not loaded globally

MAX = 4096
REASONS = {"bad_frame", "frame_too_large"}


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    """`data` cut at the given offsets (TCP may deliver any chunking)."""
    points = sorted({c % (len(data) + 1) for c in cuts})
    out, prev = [], 0
    for p in [*points, len(data)]:
        out.append(data[prev:p])
        prev = p
    return out


def run_decoder(chunks: list[bytes], max_bytes: int = MAX) -> tuple[list[bytes], str | None, int]:
    """Feed chunks until an error: (frames, error reason or None, bytes left buffered)."""
    dec = FrameDecoder(max_bytes)
    frames: list[bytes] = []
    for c in chunks:
        try:
            frames.extend(dec.feed(c))
        except FrameError as exc:
            assert exc.reason in REASONS, exc.reason
            # whole frames before the bad size in the same feed ride on the error
            return frames + exc.frames, exc.reason, dec.buffered
    return frames, None, dec.buffered


cuts = st.lists(st.integers(min_value=0, max_value=10_000), max_size=12)


@FUZZ
@given(data=st.binary(max_size=3 * MAX), cut=cuts)
def test_arbitrary_bytes_give_frames_or_a_frame_error(data: bytes, cut: list[int]) -> None:
    frames, reason, _ = run_decoder(split(data, cut))
    # the frames are an exact prefix of the stream, each within the limit
    joined = b"".join(frames)
    assert data.startswith(joined)
    for f in frames:
        (size,) = struct.unpack_from(">i", f)
        assert 0 <= size <= MAX and len(f) == size + 4
    if reason is not None:
        # the error is about the size field right after the last whole frame
        (size,) = struct.unpack_from(">i", data, len(joined))
        assert (size < 0 and reason == "bad_frame") or (size > MAX and reason == "frame_too_large")


@FUZZ
@given(data=st.binary(max_size=3 * MAX), cut1=cuts, cut2=cuts)
def test_chunking_never_changes_the_outcome(data: bytes, cut1: list[int], cut2: list[int]) -> None:
    a = run_decoder(split(data, cut1))
    b = run_decoder(split(data, cut2))
    whole = run_decoder([data])
    assert a[:2] == b[:2] == whole[:2]


@FUZZ
@given(
    payloads=st.lists(st.binary(max_size=600), max_size=8),
    cut=cuts,
)
def test_valid_frames_round_trip(payloads: list[bytes], cut: list[int]) -> None:
    stream = b"".join(frame(p) for p in payloads)
    frames, reason, buffered = run_decoder(split(stream, cut))
    assert reason is None and buffered == 0
    assert frames == [frame(p) for p in payloads]


@FUZZ
@given(
    size=st.one_of(
        st.integers(min_value=-(2**31), max_value=-1),
        st.integers(min_value=MAX + 1, max_value=2**31 - 1),
    ),
    good=st.lists(st.binary(max_size=100), max_size=3),
    tail=st.binary(max_size=64),
)
def test_bad_size_is_refused_before_any_payload(size: int, good: list[bytes], tail: bytes) -> None:
    """Like the broker's NetworkReceive: the 4 size bytes alone decide, nothing is buffered
    for a frame that can never be accepted (a 2 GiB announcement costs 4 bytes, not 2 GiB)."""
    good_bytes = b"".join(frame(p) for p in good)
    frames, reason, buffered = run_decoder([good_bytes, struct.pack(">i", size), tail])
    assert frames == [frame(p) for p in good]
    assert reason == ("bad_frame" if size < 0 else "frame_too_large")
    assert buffered == 4  # only the size field: no payload is buffered, the tail never read


@FUZZ
@given(
    size=st.sampled_from([-1, -(2**31), MAX + 1, 2**31 - 1]),
    good=st.lists(st.binary(max_size=100), min_size=1, max_size=3),
)
def test_frames_before_a_bad_size_in_the_same_read_are_not_lost(
    size: int, good: list[bytes]
) -> None:
    """Finding F3 (docs/hostile-input.md): whole requests that arrive in the same TCP read as
    a bad size field must still come out (the broker's Selector serves them one receive at a
    time before it meets the bad size); `FrameError.frames` carries them."""
    stream = b"".join(frame(p) for p in good) + struct.pack(">i", size)
    frames, reason, _ = run_decoder([stream])
    assert reason == ("bad_frame" if size < 0 else "frame_too_large")
    assert frames == [frame(p) for p in good]


@FUZZ
@given(data=st.binary(max_size=400))
def test_request_header_of_arbitrary_payload(data: bytes) -> None:
    try:
        info = parse_request_header(frame(data))
    except FrameError as exc:
        assert exc.reason == "bad_frame"
        return
    assert isinstance(info, RequestInfo)
    assert info.api_key >= 0
    assert info.client_id is None or isinstance(info.client_id, str)
    # header v1 fixed fields are the first 8 bytes, big-endian
    api_key, api_version, correlation_id = struct.unpack_from(">hhi", data)
    assert (info.api_key, info.api_version, info.correlation_id) == (
        api_key,
        api_version,
        correlation_id,
    )


@FUZZ
@given(data=st.binary(max_size=200))
def test_response_header_of_arbitrary_payload(data: bytes) -> None:
    try:
        cid = correlation_id_of_response(frame(data))
    except FrameError as exc:
        assert exc.reason == "bad_frame"
        return
    assert cid == struct.unpack_from(">i", data)[0]


def kafka_python_header(payload: bytes) -> tuple[int, int, int, str | None] | None:
    """kafka-python's reading of a v1 request header (the oracle); None where it fails."""
    import io

    from kafka.protocol.api_header import RequestHeader

    try:
        h = RequestHeader.decode(io.BytesIO(payload), flexible=False)
    except Exception:
        return None
    return h.request_api_key, h.request_api_version, h.correlation_id, h.client_id


@FUZZ
@given(
    fixed=st.tuples(
        st.integers(-(2**15), 2**15 - 1),
        st.integers(-(2**15), 2**15 - 1),
        st.integers(-(2**31), 2**31 - 1),
        st.integers(-3, 40),
    ),
    client_id=st.one_of(st.binary(max_size=40), st.text(max_size=20).map(str.encode)),
    tail=st.binary(max_size=20),
    cut=st.integers(min_value=0, max_value=80),
)
def test_request_header_reads_as_kafka_python_does(
    fixed: tuple[int, int, int, int], client_id: bytes, tail: bytes, cut: int
) -> None:
    """The in-place reader agrees with kafka-python's `RequestHeader.decode` on every
    header kafka-python reads (client ids that are valid UTF-8); where kafka-python fails
    for a reason other than UTF-8, it is a bad frame."""
    payload = (struct.pack(">hhih", *fixed) + client_id + tail)[: max(cut, 0) or None]
    oracle = kafka_python_header(payload)
    try:
        info = parse_request_header(frame(payload))
    except FrameError as exc:
        assert exc.reason == "bad_frame"
        assert oracle is None or oracle[0] < 0  # kafka-python reads a negative api key
        return
    assert info.api_key >= 0
    if oracle is not None:
        assert (info.api_key, info.api_version, info.correlation_id, info.client_id) == oracle
    else:  # kafka-python refused the client id's bytes as UTF-8: read as the broker does
        length = fixed[3]
        raw = payload[10 : 10 + length]
        assert len(raw) == length and info.client_id == java_utf8(raw)


client_ids = st.one_of(st.none(), st.text(max_size=80))


@given(
    correlation_id=st.integers(min_value=-(2**31), max_value=2**31 - 1),
    client_id=client_ids,
    version=st.integers(min_value=0, max_value=3),
    topics=st.lists(st.text(min_size=1, max_size=20), max_size=3),
    which=st.sampled_from(["api_versions", "metadata"]),
)
@settings(FUZZ, max_examples=max(50, FUZZ.max_examples // 2))
def test_request_header_round_trip(
    correlation_id: int, client_id: str | None, version: int, topics: list[str], which: str
) -> None:
    """Headers written by kafka-python (v1 and flexible v2) read back the same."""
    req: object
    if which == "api_versions":
        req = ApiVersionsRequest[version](client_software_name="fuzz", client_software_version="0")
        api_key = 18
    else:
        req = MetadataRequest[version](
            topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics]
        )
        api_key = 3
    req.with_header(correlation_id=correlation_id, client_id=client_id)  # type: ignore[attr-defined]
    wire = bytes(req.encode(header=True, framed=True))  # type: ignore[attr-defined]
    frames, reason, buffered = run_decoder([wire], max_bytes=1 << 20)
    assert reason is None and buffered == 0 and frames == [wire]
    info = parse_request_header(wire)
    assert info == RequestInfo(api_key, version, correlation_id, client_id)


@FUZZ
@given(
    prefix=st.binary(max_size=10),
    bad=st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x80"]),
    suffix=st.binary(max_size=10),
    correlation_id=st.integers(min_value=-(2**31), max_value=2**31 - 1),
)
def test_invalid_utf8_client_id_is_read_as_the_broker_reads_it(
    prefix: bytes, bad: bytes, suffix: bytes, correlation_id: int
) -> None:
    """F4 (hostile-input.md): the broker decodes a client id that is not UTF-8 with Java's
    replacement (U+FFFD) and serves the request, so the header must read, not be refused,
    with the same client id string the broker's quota manager sees."""
    client_id = prefix + bad + suffix
    assume(len(client_id) < 2**15)
    try:  # the surrounding bytes can complete a sequence ("\xc2" + "\x80"): skip those
        client_id.decode("utf-8")
    except UnicodeDecodeError:
        pass
    else:
        assume(False)
    payload = struct.pack(">hhih", 18, 3, correlation_id, len(client_id)) + client_id + b"\x00" * 8
    info = parse_request_header(frame(payload))
    assert (info.api_key, info.api_version, info.correlation_id) == (18, 3, correlation_id)
    assert info.client_id == java_utf8(client_id)
    assert "\ufffd" in info.client_id
    # Python's own replacement agrees except on surrogate-shaped sequences (see java_utf8)
    if b"\xed" not in client_id:
        assert info.client_id == client_id.decode("utf-8", errors="replace")
