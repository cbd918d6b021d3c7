"""Every connection from one address, as when many clients sit behind one proxy or NAT.

Default: all connections bind 127.0.0.9 (``--source-ips`` to change). With
``--proxy-protocol v1|v2`` each connection also sends a PROXY header claiming a
different client address (``--proxy-client-ips``, default 127.0.1.1-127.0.1.200),
which the acceptor must use for its per-IP limits. With ``--via-haproxy v1|v2`` a real
HAProxy (Debian's /usr/sbin/haproxy) is started in front of ``--host`` and adds the
header itself: then the TCP peer the acceptor sees is HAProxy, the header carries
this generator's true source addresses. Each arrival bootstraps as the storm's do
(connect → ApiVersions → Metadata → close), on the storm engine.

    locust -f loadprofiles/single_ip_flood.py --headless -u 1 -r 1 -t 20s \
        --host kafka://127.0.0.1:9092 --arrival constant:rate=50 --proxy-protocol v2
"""

from __future__ import annotations

from typing import Any, cast

from locust import events

from loadprofiles import (
    addresses,
    webui,  # noqa: F401  (the admission tab)
)
from loadprofiles.client_history import ClientHistory
from loadprofiles.driver import DriverUser, EngineDriver
from loadprofiles.options import Settings

DEFAULT_SOURCE_IPS = "127.0.0.9"
DEFAULT_PROXY_CLIENT_IPS = "127.0.1.1-127.0.1.200"

_haproxy: Any = None


def flood_setup(environment: Any, s: Settings, history: ClientHistory) -> None:
    """The flood's defaults; with ``--via-haproxy``, HAProxy in front of the target (no
    silent fallback to a direct connection: that would be another test)."""
    global _haproxy
    if not s.source_ips:
        s.source_ips = addresses.parse_ip_pool(DEFAULT_SOURCE_IPS)
    o = environment.parsed_options
    if o.via_haproxy != "off":
        from loadprofiles.haproxy import HAProxyError, start_haproxy

        s.proxy_protocol = "off"  # HAProxy adds the header
        if _haproxy is None:  # one per process, kept across test starts (the web UI's)
            try:
                _haproxy = start_haproxy(upstream=(s.host, s.port), send_proxy=o.via_haproxy)
            except HAProxyError as exc:
                raise ValueError(f"--via-haproxy: {exc}") from None
            print(
                f"loadprofiles: HAProxy {_haproxy.address} -> {s.host}:{s.port} ({o.via_haproxy})"
            )
        s.host, s.port = _haproxy.address
    elif s.proxy_protocol != "off" and not s.proxy_client_ips:
        s.proxy_client_ips = addresses.parse_ip_pool(DEFAULT_PROXY_CLIENT_IPS)


def _stop_haproxy(environment: Any, **_: Any) -> None:
    global _haproxy
    if _haproxy is not None:
        _haproxy.stop()
        _haproxy = None


EngineDriver.install(profile="single_ip_flood", default_shape="storm", setup=flood_setup)
cast(Any, events).quitting.add_listener(_stop_haproxy)


class SingleIpFloodUser(DriverUser):
    """Placeholder user: the process's EngineDriver runs the arrivals."""

    profile = "single_ip_flood"
