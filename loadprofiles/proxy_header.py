"""PROXY protocol headers (HAProxy spec v1 text and v2 binary), TCP over IPv4 only.

The generator speaks PROXY itself so a single socket can claim any client address
(a proxy's view of many clients); HAProxy is used where the test needs a real proxy.
Kept separate from the Kafka client so the acceptor's parser can be checked against
an independent encoder.
"""

from __future__ import annotations

import ipaddress
import struct

#: the 12-byte v2 signature from the spec, section 2.2
V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
_V2_VERSION_PROXY = 0x21  # version 2, command PROXY
_V2_TCP4 = 0x11  # AF_INET, STREAM

VERSIONS = ("off", "v1", "v2")


class ProxyHeaderError(ValueError):
    """An address or port that a PROXY header cannot carry."""


def _ipv4(name: str, value: str) -> ipaddress.IPv4Address:
    try:
        return ipaddress.IPv4Address(value)
    except ValueError as exc:
        raise ProxyHeaderError(f"{name}={value!r}: not an IPv4 address ({exc})") from None


def _port(name: str, value: int) -> int:
    if not 0 <= value <= 65535:
        raise ProxyHeaderError(f"{name}={value!r}: a TCP port must be 0..65535")
    return value


def encode_v1(src_ip: str, src_port: int, dst_ip: str, dst_port: int) -> bytes:
    """``PROXY TCP4 <src> <dst> <sport> <dport>\\r\\n`` (at most 107 bytes by the spec)."""
    src, dst = _ipv4("src_ip", src_ip), _ipv4("dst_ip", dst_ip)
    sport, dport = _port("src_port", src_port), _port("dst_port", dst_port)
    return f"PROXY TCP4 {src} {dst} {sport} {dport}\r\n".encode("ascii")


def encode_v2(src_ip: str, src_port: int, dst_ip: str, dst_port: int) -> bytes:
    """Binary v2 header, command PROXY, family TCP4, no TLVs: 16 + 12 bytes."""
    src, dst = _ipv4("src_ip", src_ip), _ipv4("dst_ip", dst_ip)
    sport, dport = _port("src_port", src_port), _port("dst_port", dst_port)
    body = src.packed + dst.packed + struct.pack("!HH", sport, dport)
    return V2_SIGNATURE + struct.pack("!BBH", _V2_VERSION_PROXY, _V2_TCP4, len(body)) + body


def encode(version: str, src_ip: str, src_port: int, dst_ip: str, dst_port: int) -> bytes:
    """Header for ``version`` (``v1``/``v2``); ``off`` gives no bytes."""
    if version == "off":
        return b""
    if version == "v1":
        return encode_v1(src_ip, src_port, dst_ip, dst_port)
    if version == "v2":
        return encode_v2(src_ip, src_port, dst_ip, dst_port)
    raise ProxyHeaderError(f"proxy-protocol={version!r}: expected one of {', '.join(VERSIONS)}")
