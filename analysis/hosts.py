"""Host names in `max.connections.per.ip.overrides`, resolved the way Kafka resolves them.

Kafka 4.3.1 (`SocketServer.ConnectionQuotas.updateMaxConnectionsPerIpOverride`, and the
initial value) maps every override key through `InetAddress.getByName(host)`: an IP
literal is parsed as such (`[::1]` is ::1, `::ffff:1.2.3.4` is the IPv4 1.2.3.4), and a
name resolves to the *first* address of `getAllByName`, IPv4 before IPv6 (Java's default
`java.net.preferIPv6Addresses=false`). The connection's address is then looked up by
equality, so an override `localhost:2` limits 127.0.0.1 (from /etc/hosts) and nothing
else. The checker resolves with its own code (`socket.getaddrinfo`), never by asking
the enforcer. A name that does not resolve makes Kafka refuse the config
(UnknownHostException); the checker keeps it as written, so it matches no connection.
"""

from __future__ import annotations

import ipaddress
import socket
from functools import lru_cache


def ip_literal(text: str) -> str | None:
    """The canonical address of an IP literal as Java's getByName parses it, else None."""
    t = text.strip()
    if t.startswith("[") and t.endswith("]"):
        t = t[1:-1]
    try:
        addr = ipaddress.ip_address(t)
    except ValueError:
        return _java_dotted_v4(t)
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return str(addr.ipv4_mapped)
    return str(addr)


def _java_dotted_v4(t: str) -> str | None:
    """Java's `IPAddressUtil.textToNumericFormatV4` for the dotted forms Python refuses:
    one to four decimal parts, leading zeros read as decimal (`017.0.0.1` is 17.0.0.1,
    where the resolver's inet_aton would read octal), the last part filling the bytes left
    (`127.1` is 127.0.0.1). Anything else (hex parts, out of range) is not a literal here."""
    parts = t.split(".")
    if not 1 <= len(parts) <= 4 or not all(p.isascii() and p.isdigit() for p in parts):
        return None
    *head, last = (int(p) for p in parts)
    room = 4 - len(head)
    if any(p > 255 for p in head) or last >= 256**room:
        return None
    value = 0
    for p in head:
        value = value * 256 + p
    return str(ipaddress.IPv4Address(value * 256**room + last))


@lru_cache(maxsize=256)
def kafka_address(host: str) -> str:
    """The address Kafka's `InetAddress.getByName(host)` gives for an override key."""
    literal = ip_literal(host)
    if literal is not None:
        return literal
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError):
        return host
    v4 = [str(i[4][0]) for i in infos if i[0] == socket.AF_INET]
    v6 = [str(i[4][0]) for i in infos if i[0] == socket.AF_INET6]
    ordered = v4 + v6
    return ip_literal(ordered[0]) or ordered[0] if ordered else host


def resolve_overrides(overrides: dict[str, int]) -> dict[str, int]:
    """Override keys as Kafka holds them (addresses); a later key wins on a collision,
    as Kafka's map construction keeps the last."""
    return {kafka_address(k): v for k, v in overrides.items()}
