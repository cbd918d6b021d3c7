"""Fuzz the PROXY protocol v1/v2 reader (base.wire.proxy).

Why: on a `proxy.protocol=required|optional` listener these are the first bytes the
acceptor reads from an unauthenticated peer, before any limit applies. The acceptor's
header task catches only `ProxyError` (and OSError/timeout); any other exception escaping
`ProxyHeaderReader.feed` would end that task without closing the socket: a descriptor leak
per hostile connection. So: arbitrary bytes, in any chunking, give "need more", a header
(plus the untouched bytes after it) or `ProxyError`; and what `encode_v1`/`encode_v2` write
reads back exactly.
"""

from __future__ import annotations

import ipaddress
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from base.wire.proxy import (
    V1_PREFIX,
    V2_SIGNATURE,
    ProxyError,
    ProxyHeader,
    ProxyHeaderReader,
    encode_v1,
    encode_v2,
)

pytestmark = pytest.mark.unit
FUZZ = settings.get_profile("fuzz")  # registered in conftest.py; not loaded globally

Result = tuple[ProxyHeader | None, bytes] | None


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    out, prev = [], 0
    for p in [*points, len(data)]:
        out.append(data[prev:p])
        prev = p
    return [c for c in out if c] or [b""]


def read(chunks: list[bytes], optional: bool) -> tuple[str, Result, int]:
    """('done'|'more'|'error', result, bytes fed until then)."""
    reader = ProxyHeaderReader(optional=optional)
    fed = 0
    for c in chunks:
        fed += len(c)
        try:
            result = reader.feed(c)
        except ProxyError:
            return "error", None, fed
        if result is not None:
            return "done", result, fed
    return "more", None, fed


cuts = st.lists(st.integers(min_value=0, max_value=400), max_size=8)

# byte soup that starts like a header often enough to reach the parsers' inner branches
header_like = st.one_of(
    st.binary(max_size=300),
    st.builds(lambda tail: V1_PREFIX + tail, st.binary(max_size=120)),
    st.builds(
        lambda words, crlf, tail: V1_PREFIX + b" ".join(words) + (b"\r\n" if crlf else b"") + tail,
        st.lists(
            st.one_of(
                st.sampled_from([b"TCP4", b"TCP6", b"UNKNOWN", b"UDP4", b"", b"tcp4"]),
                st.from_regex(rb"\A[0-9a-fA-F:.%]{0,45}\Z"),
                st.integers(-5, 70000).map(lambda i: str(i).encode()),
                st.binary(max_size=8),
            ),
            max_size=7,
        ),
        st.booleans(),
        st.binary(max_size=20),
    ),
    st.builds(
        lambda vc, fam, length, body: V2_SIGNATURE + struct.pack(">BBH", vc, fam, length) + body,
        st.integers(0, 255),
        st.sampled_from([0x00, 0x11, 0x12, 0x21, 0x22, 0x31, 0x32, 0x13, 0xFF]),
        st.integers(0, 80),
        st.binary(max_size=120),
    ),
)


@FUZZ
@given(data=header_like, cut=cuts, optional=st.booleans())
def test_any_bytes_give_need_more_a_header_or_proxy_error(
    data: bytes, cut: list[int], optional: bool
) -> None:
    state, result, fed = read(split(data, cut), optional)
    check(data, state, result, fed, optional)


def check(data: bytes, state: str, result: Result, fed: int, optional: bool) -> None:
    """What the acceptor relies on when `feed` says "done"."""
    if state != "done":
        return
    assert result is not None
    header, rest = result
    if header is None:
        assert optional  # only an optional listener passes a header-less stream through
        assert rest == data[:fed]  # untouched
        return
    assert header.version in (1, 2)
    assert header.family in ("TCP4", "TCP6", "UDP4", "UDP6", "UNKNOWN", "LOCAL")
    assert data[:fed].endswith(rest)
    if header.src_ip is not None:
        ipaddress.ip_address(header.src_ip)
        assert header.src_port is not None and 0 <= header.src_port <= 65535
    if header.version == 1:
        consumed = fed - len(rest)
        assert consumed <= 107 and data[consumed - 2 : consumed] == b"\r\n"


@FUZZ
@given(data=header_like, cut1=cuts, cut2=cuts, optional=st.booleans())
def test_chunking_never_changes_the_outcome(
    data: bytes, cut1: list[int], cut2: list[int], optional: bool
) -> None:
    """What a header means cannot depend on how TCP cut it (only how much was needed)."""
    a = read(split(data, cut1), optional)
    b = read(split(data, cut2), optional)
    whole = read([data], optional)
    for state, result, fed in (a, b):
        if whole[0] == "done" and state == "done":
            assert result is not None and whole[1] is not None
            assert result[0] == whole[1][0]
            # the bytes after the header: same stream, possibly less of it read so far
            assert (result[1] + data[fed:]) == (whole[1][1] + data[whole[2] :])
        elif state != "more":
            assert state == whole[0], (state, whole[0])


v4 = st.ip_addresses(v=4).map(str)
v6 = st.ip_addresses(v=6).map(str)
ports = st.integers(0, 65535)
addr_pairs = st.one_of(st.tuples(v4, v4), st.tuples(v6, v6))


@FUZZ
@given(addrs=addr_pairs, sport=ports, dport=ports, tail=st.binary(max_size=50), cut=cuts)
def test_v1_round_trip(
    addrs: tuple[str, str], sport: int, dport: int, tail: bytes, cut: list[int]
) -> None:
    src, dst = addrs
    raw = encode_v1(src, sport, dst, dport)
    state, result, fed = read(split(raw + tail, cut), optional=False)
    assert state == "done" and result is not None
    header, rest = result
    fam = "TCP4" if ipaddress.ip_address(src).version == 4 else "TCP6"
    assert header == ProxyHeader(
        1, fam, str(ipaddress.ip_address(src)), sport, str(ipaddress.ip_address(dst)), dport
    )
    assert rest + (raw + tail)[fed:] == tail


@FUZZ
@given(
    addrs=addr_pairs,
    sport=ports,
    dport=ports,
    local=st.booleans(),
    tail=st.binary(max_size=50),
    cut=cuts,
    optional=st.booleans(),
)
def test_v2_round_trip(
    addrs: tuple[str, str],
    sport: int,
    dport: int,
    local: bool,
    tail: bytes,
    cut: list[int],
    optional: bool,
) -> None:
    src, dst = addrs
    raw = encode_v2(src, sport, dst, dport, local=local)
    state, result, fed = read(split(raw + tail, cut), optional=optional)
    assert state == "done" and result is not None
    header, rest = result
    if local:
        assert header == ProxyHeader(2, "LOCAL")
    else:
        fam = "TCP4" if ipaddress.ip_address(src).version == 4 else "TCP6"
        assert header == ProxyHeader(2, fam, src, sport, dst, dport)
    assert rest + (raw + tail)[fed:] == tail


@FUZZ
@given(
    addrs=addr_pairs,
    sport=ports,
    dport=ports,
    version=st.sampled_from([1, 2]),
    pos=st.integers(0, 200),
    byte=st.integers(0, 255),
)
def test_single_byte_mutations_of_valid_headers(
    addrs: tuple[str, str], sport: int, dport: int, version: int, pos: int, byte: int
) -> None:
    src, dst = addrs
    raw = (encode_v1 if version == 1 else encode_v2)(src, sport, dst, dport)
    mutated = bytearray(raw)
    mutated[pos % len(raw)] = byte
    for optional in (False, True):
        state, result, fed = read([bytes(mutated)], optional)
        check(bytes(mutated), state, result, fed, optional)


@FUZZ
@given(data=st.binary(min_size=1, max_size=200).filter(lambda b: b[:1] not in (b"P", b"\r")))
def test_optional_listener_passes_kafka_bytes_through_untouched(data: bytes) -> None:
    state, result, _ = read([data], optional=True)
    assert state == "done" and result == (None, data)
    assert read([data], optional=False)[0] == "error"
