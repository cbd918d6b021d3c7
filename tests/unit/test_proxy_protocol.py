"""PROXY protocol v1/v2: parsing as bytes trickle in, optional pass-through, and refusals."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from base.wire.proxy import V2_SIGNATURE, ProxyError, ProxyHeaderReader, encode_v1, encode_v2


def _feed_bytewise(reader: ProxyHeaderReader, data: bytes):
    for i in range(len(data)):
        out = reader.feed(data[i : i + 1])
        if out is not None:
            header, rest = out
            return header, rest + data[i + 1 :]
    return None


@pytest.mark.parametrize("encode", [encode_v1, encode_v2])
def test_tcp4_header_then_kafka_bytes(encode) -> None:
    data = encode("10.1.2.3", 40000, "127.0.0.1", 9092) + b"\x00\x00\x00\x05kafka"
    header, rest = _feed_bytewise(ProxyHeaderReader(), data)
    assert (header.src_ip, header.src_port, header.dst_ip, header.dst_port) == (
        "10.1.2.3",
        40000,
        "127.0.0.1",
        9092,
    )
    assert header.family == "TCP4"
    assert rest == b"\x00\x00\x00\x05kafka"


@pytest.mark.parametrize("encode", [encode_v1, encode_v2])
def test_tcp6(encode) -> None:
    header, rest = ProxyHeaderReader().feed(encode("2001:db8::1", 1, "::1", 2))
    assert header.family == "TCP6" and header.src_ip == "2001:db8::1" and rest == b""


def test_v1_unknown_and_v2_local_carry_no_address() -> None:
    h1, _ = ProxyHeaderReader().feed(b"PROXY UNKNOWN\r\n")
    h2, _ = ProxyHeaderReader().feed(encode_v2("1.1.1.1", 1, "2.2.2.2", 2, local=True))
    assert h1.src_ip is None and h1.family == "UNKNOWN"
    assert h2.src_ip is None and h2.family == "LOCAL"


def test_optional_passes_kafka_bytes_through() -> None:
    data = b"\x00\x00\x00\x0a\x00\x12\x00\x03rest"
    header, rest = ProxyHeaderReader(optional=True).feed(data)
    assert header is None and rest == data


def test_optional_still_parses_a_header() -> None:
    header, _ = ProxyHeaderReader(optional=True).feed(encode_v1("10.0.0.1", 5, "10.0.0.2", 6))
    assert header.src_ip == "10.0.0.1"


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x00\x00\x00\x0a\x00\x12",  # Kafka bytes where a header is required
        b"PROXY TCP4 10.0.0.1 10.0.0.2 5\r\n",  # missing port
        b"PROXY TCP4 10.0.0.1 10.0.0.2 70000 6\r\n",  # port out of range
        b"PROXY TCP4 ::1 10.0.0.2 1 2\r\n",  # family mismatch
        b"PROXY TCP9 a b 1 2\r\n",
        b"PROXY TCP4 " + b"1" * 120,  # no CRLF within 107 bytes
        V2_SIGNATURE + bytes([0x31, 0x11, 0, 12]) + b"\0" * 12,  # version 3
        V2_SIGNATURE + bytes([0x21, 0x11, 0, 4]) + b"\0" * 4,  # address block too short
    ],
)
def test_garbage_is_refused(garbage: bytes) -> None:
    with pytest.raises(ProxyError):
        _feed_bytewise(ProxyHeaderReader(), garbage)


def test_incomplete_header_waits() -> None:
    r = ProxyHeaderReader()
    assert r.feed(b"PROXY TCP4 10.0.0.1") is None
    assert r.feed(b" 10.0.0.2 1 2\r\n")[0].src_port == 1


@given(
    st.ip_addresses(v=4).map(str),
    st.integers(0, 65535),
    st.integers(0, 65535),
    st.booleans(),
    st.binary(max_size=32),
)
def test_round_trip(src: str, sport: int, dport: int, v2: bool, tail: bytes) -> None:
    enc = encode_v2 if v2 else encode_v1
    header, rest = ProxyHeaderReader().feed(enc(src, sport, "127.0.0.1", dport) + tail)
    assert (header.src_ip, header.src_port, header.dst_port, header.version) == (
        src,
        sport,
        dport,
        2 if v2 else 1,
    )
    assert rest == tail
