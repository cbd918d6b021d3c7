"""Java's ``InetAddress.getByName``, the way Kafka 4.3.1 reads an address in a quota.

Kafka turns every ``ip`` quota entity name and every ``max.connections.per.ip.overrides``
host into an address with ``InetAddress.getByName`` (``ClientQuotaControlManager.
isValidIpEntity``, ``ClientQuotaMetadataManager.handleIpQuota``, ``ConnectionQuotas``). Its
literal parsing is not the C library's, so handing the text to ``getaddrinfo`` answers
differently for exactly the inputs an operator can type by mistake. Observed with the JDK
the broker runs on (OpenJDK 17.0.15) and read in its ``IPAddressUtil``:

===================  ==========================  ===============================
text                 Java (Kafka)                glibc ``getaddrinfo``
===================  ==========================  ===============================
``[::1]``            ``::1`` (brackets dropped)  unknown host
``0x7f.0.0.1``       refused (ambiguous literal)  ``127.0.0.1``
``017.0.0.1``        ``17.0.0.1`` (decimal)      ``15.0.0.1`` (octal)
``::ffff:1.2.3.4``   ``1.2.3.4`` (an IPv4 addr)  ``::ffff:1.2.3.4``
``127.1``            ``127.0.0.1``               ``127.0.0.1``
``[127.0.0.1]``      refused                     unknown host
===================  ==========================  ===============================

Only names that are not literals go to the resolver (``getaddrinfo``, IPv4 first as Java
without ``java.net.preferIPv6Addresses``). The result is the address's text as the
acceptor keys it (dotted quad, or compressed IPv6).
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable

__all__ = ["java_get_by_name", "lookup_host", "text_to_numeric_v4"]

_HEX = "0123456789abcdefABCDEF"
_V4_LAST_FIELD_MAX = (0xFFFFFFFF, 0xFFFFFF, 0xFFFF, 0xFF)


def text_to_numeric_v4(src: str) -> bytes | None:
    """``IPAddressUtil.textToNumericFormatV4``: 1-4 DECIMAL parts (``a``, ``a.b``, ``a.b.c``,
    ``a.b.c.d``, the last filling the remaining bytes), leading zeros read as decimal."""
    if not 0 < len(src) <= 15:
        return None
    out = bytearray(4)
    value, index, new_octet = 0, 0, True
    for ch in src:
        if ch == ".":
            if new_octet or value > 0xFF or index == 3:
                return None
            out[index] = value
            index += 1
            value, new_octet = 0, True
        elif "0" <= ch <= "9":
            value = value * 10 + (ord(ch) - 48)
            new_octet = False
        else:
            return None
    if new_octet or value >= 1 << ((4 - index) * 8):
        return None
    out[index:] = value.to_bytes(4 - index, "big")
    return bytes(out)


def _bsd_field(text: str) -> int | None:
    if re.fullmatch(r"0[xX][0-9a-fA-F]+", text):
        return int(text[2:], 16)
    if re.fullmatch(r"0[0-7]*", text):
        return int(text, 8)
    if re.fullmatch(r"[0-9]+", text):
        return int(text)
    return None


def is_bsd_parsable_v4(src: str) -> bool:
    """``IPAddressUtil.isBsdParsableV4``: would BSD ``inet_aton`` read it (hex/octal parts)?"""
    if not src or not src[0].isascii() or not src[0].isdigit():
        return False
    if src[-1] == "." or src[-1] not in _HEX:
        return False
    parts = src.split(".")
    if len(parts) > 4:
        return False
    for i, part in enumerate(parts):
        value = _bsd_field(part)
        if value is None:
            return False
        last = i == len(parts) - 1
        if value > (_V4_LAST_FIELD_MAX[i] if last else 0xFF):
            return False
    return True


def _v6_literal(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """``textToNumericFormatV6``, IPv4-mapped addresses converted to IPv4 as Java does."""
    try:
        addr = ipaddress.IPv6Address(text)
    except ValueError:
        # Java reads an embedded IPv4 part (``::ffff:a.b.c.d``) with the decimal v4 parser,
        # which accepts leading zeros that Python refuses
        head, sep, tail = text.rpartition(":")
        v4 = text_to_numeric_v4(tail) if sep and tail.count(".") == 3 else None
        if v4 is None:
            return None
        try:
            addr = ipaddress.IPv6Address(head + sep + str(ipaddress.IPv4Address(v4)))
        except ValueError:
            return None
    mapped = addr.ipv4_mapped
    return mapped if mapped is not None else addr


def lookup_host(host: str) -> str:
    """A name (not a literal) through the system resolver, IPv4 first as Java prefers."""
    infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    if not infos:
        raise OSError(f"no address for {host}")
    v4 = [i for i in infos if i[0] == socket.AF_INET]
    addr = str((v4 or infos)[0][4][0])
    return ipaddress.ip_address(addr.split("%", 1)[0]).compressed


def java_get_by_name(host: str, lookup: Callable[[str], str] = lookup_host) -> str:
    """``InetAddress.getByName(host)`` as text; ``OSError`` where Java throws
    ``UnknownHostException`` (the message names the host, as Java's does)."""
    if not host:
        return "127.0.0.1"  # Java: the loopback address
    ipv6_expected = False
    if host[0] == "[":
        if len(host) > 2 and host[-1] == "]":
            host, ipv6_expected = host[1:-1], True
        else:
            raise OSError(f"{host}: invalid IPv6 address literal")
    if host[0] in _HEX or host[0] == ":":
        if not ipv6_expected:
            v4 = text_to_numeric_v4(host)
            if v4 is not None:
                return str(ipaddress.IPv4Address(v4))
            if is_bsd_parsable_v4(host):
                raise OSError(f"{host}: Invalid IP address literal (ambiguous)")
        literal, zone = host, ""
        if "%" in host:
            literal, _, zone = host.partition("%")
        addr = _v6_literal(literal)
        if addr is None:
            if ":" in host or ipv6_expected:
                raise OSError(f"{host}: invalid IPv6 address literal")
        elif zone:
            if isinstance(addr, ipaddress.IPv4Address):
                raise OSError(f"{host}: invalid IPv4-mapped address")
            if not zone.isdigit():  # an interface name: Java looks for a matching scope
                raise OSError(f"{host}: no scope_id found")
            return addr.compressed
        else:
            return addr.compressed
    elif ipv6_expected:
        raise OSError(f"[{host}]: invalid IPv6 address literal")
    return lookup(host)
