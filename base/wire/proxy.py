"""PROXY protocol v1 (text) and v2 (binary) as a sans-IO reader and encoders.

Why: many clients behind one load balancer share its TCP address, so per-IP limits must key
on the client address the balancer reports in its PROXY header (HAProxy's spec,
https://www.haproxy.org/download/2.9/doc/proxy-protocol.txt). The reader takes bytes as they
arrive and says "need more", "here is the header (and the bytes after it)" or raises
`ProxyError`; with ``optional=True`` a stream that does not start like a header is passed
through untouched (header ``None``).
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
V1_PREFIX = b"PROXY "
V1_MAX = 107  # the spec's worst case, CRLF included
_V2_FIXED = 16

_FAMILIES = {0x11: ("TCP4", 12), 0x12: ("UDP4", 12), 0x21: ("TCP6", 36), 0x22: ("UDP6", 36)}


class ProxyError(Exception):
    """A malformed PROXY header: the connection is closed with reason `bad_proxy_header`."""


@dataclass(frozen=True, slots=True)
class ProxyHeader:
    version: int
    #: "TCP4", "TCP6", "UNKNOWN" (v1) or "LOCAL" (v2 health checks): no client address
    family: str
    src_ip: str | None = None
    src_port: int | None = None
    dst_ip: str | None = None
    dst_port: int | None = None


class ProxyHeaderReader:
    """Feed bytes until `feed` returns ``(header, rest)``; ``rest`` is Kafka data."""

    def __init__(self, *, optional: bool = False) -> None:
        self.optional = optional
        self._buf = bytearray()
        self.done = False

    def feed(self, data: bytes) -> tuple[ProxyHeader | None, bytes] | None:
        if self.done:
            return None, bytes(data)
        self._buf += data
        buf = bytes(self._buf)
        result: tuple[ProxyHeader | None, bytes] | None
        if buf[:12] == V2_SIGNATURE[: len(buf[:12])] and buf[:1] == b"\r":
            result = _parse_v2(buf)
        elif buf[:6] == V1_PREFIX[: len(buf[:6])] and buf[:1] == b"P":
            result = _parse_v1(buf)
        elif self.optional:
            result = (None, buf)
        else:
            raise ProxyError(f"no PROXY header: stream starts with {buf[:16]!r}")
        if result is not None:
            self.done = True
            self._buf.clear()
        return result


def _parse_v1(buf: bytes) -> tuple[ProxyHeader, bytes] | None:
    end = buf.find(b"\r\n")
    if end < 0:
        if len(buf) >= V1_MAX:
            raise ProxyError("PROXY v1 header longer than 107 bytes")
        return None
    if end + 2 > V1_MAX:
        raise ProxyError("PROXY v1 header longer than 107 bytes")
    try:
        line = buf[:end].decode("ascii")
    except UnicodeDecodeError as exc:
        raise ProxyError("PROXY v1 header is not ASCII") from exc
    parts = line.split(" ")
    rest = buf[end + 2 :]
    if len(parts) >= 2 and parts[1] == "UNKNOWN":
        return ProxyHeader(1, "UNKNOWN"), rest
    if len(parts) != 6 or parts[1] not in ("TCP4", "TCP6"):
        raise ProxyError(f"malformed PROXY v1 header {line!r}")
    _, fam, src, dst, sport, dport = parts
    want = 4 if fam == "TCP4" else 6
    try:
        src_ip = ipaddress.ip_address(src)
        dst_ip = ipaddress.ip_address(dst)
    except ValueError as exc:
        raise ProxyError(f"bad address in PROXY v1 header {line!r}") from exc
    if src_ip.version != want or dst_ip.version != want:
        raise ProxyError(f"address family mismatch in PROXY v1 header {line!r}")
    ports = []
    for p in (sport, dport):
        if not p.isdigit() or (len(p) > 1 and p[0] == "0") or not 0 <= int(p) <= 65535:
            raise ProxyError(f"bad port {p!r} in PROXY v1 header")
        ports.append(int(p))
    return ProxyHeader(1, fam, str(src_ip), ports[0], str(dst_ip), ports[1]), rest


def _parse_v2(buf: bytes) -> tuple[ProxyHeader, bytes] | None:
    if len(buf) < _V2_FIXED:
        return None
    ver_cmd, fam, length = struct.unpack_from(">BBH", buf, 12)
    if ver_cmd >> 4 != 2:
        raise ProxyError(f"PROXY v2 header with version {ver_cmd >> 4}")
    cmd = ver_cmd & 0x0F
    if cmd not in (0, 1):
        raise ProxyError(f"PROXY v2 header with unknown command {cmd}")
    if len(buf) < _V2_FIXED + length:
        return None
    body = buf[_V2_FIXED : _V2_FIXED + length]
    rest = buf[_V2_FIXED + length :]
    if cmd == 0:
        return ProxyHeader(2, "LOCAL"), rest
    if fam == 0x00:
        return ProxyHeader(2, "UNKNOWN"), rest
    if fam not in _FAMILIES:
        raise ProxyError(f"PROXY v2 header with unknown family 0x{fam:02x}")
    name, need = _FAMILIES[fam]
    if length < need:
        raise ProxyError(f"PROXY v2 {name} address block of {length} bytes, need {need}")
    if need == 12:
        src = ipaddress.IPv4Address(body[0:4])
        dst = ipaddress.IPv4Address(body[4:8])
        sport, dport = struct.unpack_from(">HH", body, 8)
    else:
        src6 = ipaddress.IPv6Address(body[0:16])
        dst6 = ipaddress.IPv6Address(body[16:32])
        src, dst = src6, dst6  # type: ignore[assignment]
        sport, dport = struct.unpack_from(">HH", body, 32)
    return ProxyHeader(2, name, str(src), sport, str(dst), dport), rest


def encode_v1(src_ip: str, src_port: int, dst_ip: str, dst_port: int) -> bytes:
    fam = "TCP4" if ipaddress.ip_address(src_ip).version == 4 else "TCP6"
    return f"PROXY {fam} {src_ip} {dst_ip} {src_port} {dst_port}\r\n".encode("ascii")


def encode_v2(
    src_ip: str, src_port: int, dst_ip: str, dst_port: int, *, local: bool = False
) -> bytes:
    if local:
        return V2_SIGNATURE + struct.pack(">BBH", 0x20, 0x00, 0)
    src = ipaddress.ip_address(src_ip)
    dst = ipaddress.ip_address(dst_ip)
    fam = 0x11 if src.version == 4 else 0x21
    body = src.packed + dst.packed + struct.pack(">HH", src_port, dst_port)
    return V2_SIGNATURE + struct.pack(">BBH", 0x21, fam, len(body)) + body
