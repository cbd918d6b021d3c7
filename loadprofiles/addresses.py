"""Address specs of the load options: targets, source-IP pools, PROXY client IPs.

Loopback, or the benchmarking range: every address the generator binds, claims or
connects to must be in 127.0.0.0/8 or in 198.18.0.0/15 (RFC 2544: the namespaces a run
makes for its worker hosts, `harness.runner.netns`), so a mistyped option can never aim a
storm at a real network.
"""

from __future__ import annotations

import ipaddress
import itertools
from collections.abc import Iterator
from urllib.parse import urlsplit

LOOPBACK = ipaddress.IPv4Network("127.0.0.0/8")
#: RFC 2544's benchmarking range: worker hosts made as network namespaces
BENCHMARK = ipaddress.IPv4Network("198.18.0.0/15")
MAX_POOL = 65536


class AddressSpecError(ValueError):
    """A bad address option; the message names the option, the value and the reason."""

    def __init__(self, option: str, value: str, reason: str) -> None:
        super().__init__(f"{option}: {value!r}: {reason}")
        self.option, self.value, self.reason = option, value, reason


def parse_target(value: str, option: str = "--host") -> tuple[str, int]:
    """``kafka://127.0.0.1:9092`` or ``127.0.0.1:9092`` -> (host, port), loopback only."""
    text = value.strip()
    if not text:
        raise AddressSpecError(option, value, "empty; expected kafka://127.0.0.1:PORT")
    parts = urlsplit(text if "://" in text else f"kafka://{text}")
    if parts.scheme not in ("kafka", "tcp"):
        raise AddressSpecError(option, value, "scheme must be kafka:// (or none)")
    try:
        port = parts.port
    except ValueError as exc:
        raise AddressSpecError(option, value, f"bad port ({exc})") from None
    host = parts.hostname or ""
    if port is None or port == 0:
        raise AddressSpecError(option, value, "missing port; expected kafka://127.0.0.1:PORT")
    if host == "localhost":
        host = "127.0.0.1"
    _loopback(option, value, host)
    return host, port


def _loopback(option: str, value: str, host: str) -> ipaddress.IPv4Address:
    try:
        addr = ipaddress.IPv4Address(host)
    except ValueError:
        raise AddressSpecError(option, value, f"{host!r} is not an IPv4 address") from None
    if addr not in LOOPBACK and addr not in BENCHMARK:
        raise AddressSpecError(
            option, value, f"{addr} is outside 127.0.0.0/8 (loopback) and 198.18.0.0/15"
        )
    return addr


def parse_ip_pool(value: str, option: str = "--source-ips") -> tuple[str, ...]:
    """``127.0.0.2-127.0.0.40``, ``127.0.0.9`` or a comma list of both -> addresses.

    Empty means "no pool" (the kernel picks the source address).
    """
    out: list[str] = []
    for part in filter(None, (p.strip() for p in value.split(","))):
        first, dash, last = part.partition("-")
        lo = _loopback(option, value, first.strip())
        hi = _loopback(option, value, last.strip()) if dash else lo
        if int(hi) < int(lo):
            raise AddressSpecError(option, value, f"range {part} runs backwards")
        if int(hi) - int(lo) + 1 + len(out) > MAX_POOL:
            raise AddressSpecError(option, value, f"more than {MAX_POOL} addresses")
        out.extend(str(ipaddress.IPv4Address(i)) for i in range(int(lo), int(hi) + 1))
    return tuple(out)


def round_robin(pool: tuple[str, ...], start: int = 0) -> Iterator[str | None]:
    """Cycle through ``pool`` from ``start``; an empty pool yields ``None`` forever."""
    if not pool:
        return itertools.repeat(None)
    return itertools.islice(itertools.cycle(pool), start % len(pool), None)


#: one broker of a cluster the load spreads over: (node id, host, port)
BrokerTarget = tuple[int, str, int]


def parse_brokers(value: str, option: str = "--brokers") -> tuple[BrokerTarget, ...]:
    """``1=127.0.0.1:9092,2=127.0.0.1:9093`` -> ((1, host, port), ...): the brokers an
    arrival may connect to, by node id (loopback only); empty text: none (the ``--host``)."""
    text = value.strip()
    if not text:
        return ()
    out: list[BrokerTarget] = []
    for part in text.split(","):
        node, sep, address = part.strip().partition("=")
        if not sep or not node.strip().isdigit() or int(node) < 0:
            raise AddressSpecError(option, value, f"{part.strip()!r}: expected NODE_ID=HOST:PORT")
        host, port = parse_target(address, option)
        out.append((int(node), host, port))
    if len({n for n, _h, _p in out}) != len(out):
        raise AddressSpecError(option, value, "a node id is listed twice")
    return tuple(out)


def parse_hot_broker(
    value: str, brokers: tuple[BrokerTarget, ...], option: str = "--hot-broker"
) -> tuple[int, float] | None:
    """``2:0.5`` -> (node 2, half of the arrivals): a share pinned to one of ``brokers``;
    empty text: none (arrivals go round-robin over the brokers)."""
    text = value.strip()
    if not text:
        return None
    node, sep, share = text.partition(":")
    try:
        node_id, fraction = int(node), float(share)
    except ValueError:
        raise AddressSpecError(option, value, "expected NODE_ID:SHARE, e.g. 2:0.5") from None
    if not sep or not 0.0 < fraction <= 1.0:
        raise AddressSpecError(option, value, "the share must be in (0, 1]")
    if node_id not in {n for n, _h, _p in brokers}:
        raise AddressSpecError(option, value, "not one of the --brokers node ids")
    return node_id, fraction


def broker_for(
    k: int, brokers: tuple[BrokerTarget, ...], hot: tuple[int, float] | None
) -> BrokerTarget:
    """The broker arrival ``k`` connects to: ``hot``'s share of the arrivals (spread
    evenly: arrival k is hot when ⌊(k+1)·share⌋ > ⌊k·share⌋) on the hot broker, the rest
    round-robin over the others (over all when there is no hot broker)."""
    if hot is None:
        return brokers[k % len(brokers)]
    node, share = hot
    hot_so_far = int(k * share)
    if int((k + 1) * share) > hot_so_far:
        return next(b for b in brokers if b[0] == node)
    others = [b for b in brokers if b[0] != node] or list(brokers)
    return others[(k - hot_so_far) % len(others)]
