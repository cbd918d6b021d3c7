"""Every connection from one address, as when many clients sit behind one proxy or NAT.

Default: all connections bind 127.0.0.9 (``--source-ips`` to change). With
``--proxy-protocol v1|v2`` each connection also sends a PROXY header claiming a
different client address (``--proxy-client-ips``, default 127.0.1.1-127.0.1.200),
which the acceptor must use for its per-IP limits. With ``--via-haproxy v1|v2`` a real
HAProxy (Debian's /usr/sbin/haproxy) is started in front of ``--host`` and adds the
header itself: then the TCP peer the acceptor sees is HAProxy, the header carries
this generator's true source addresses.

    locust -f loadprofiles/single_ip_flood.py --headless -u 1 -r 1 -t 20s \
        --host kafka://127.0.0.1:9092 --arrival constant:rate=50 --proxy-protocol v2
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

from locust.runners import MasterRunner

from loadprofiles import webui  # noqa: F401  (the admission tab)
from loadprofiles.common import ArrivalUser, Settings, listen, settings
from loadprofiles.kafka_client import ClientConfig, KafkaConnection

_haproxy: Any = None


class SingleIpFloodUser(ArrivalUser):
    """One driver; every arrival comes from the same source address."""

    profile = "single_ip_flood"
    default_source_ips = "127.0.0.9"
    default_proxy_client_ips = "127.0.1.1-127.0.1.200"

    def connection_config(self, s: Settings) -> ClientConfig:
        config = super().connection_config(s)
        if _haproxy is not None:
            host, port = _haproxy.address
            config = dataclasses.replace(config, host=host, port=port)
        return config

    def session(self, conn: KafkaConnection) -> None:
        conn.api_versions()
        conn.metadata()


def _start_haproxy(environment: Any, **_: Any) -> None:
    global _haproxy
    o = environment.parsed_options
    if o.via_haproxy == "off" or isinstance(environment.runner, MasterRunner) or _haproxy:
        return
    from loadprofiles.haproxy import HAProxyError, start_haproxy

    try:
        s = settings(environment, None)
        _haproxy = start_haproxy(upstream=(s.host, s.port), send_proxy=o.via_haproxy)
    except (ValueError, HAProxyError) as exc:
        # no silent fallback to a direct connection: that would be another test
        print(f"loadprofiles: error: --via-haproxy: {exc}", file=sys.stderr, flush=True)
        environment.process_exit_code = 2
        environment.runner.quit()
        return
    print(f"loadprofiles: HAProxy {_haproxy.address} -> {s.host}:{s.port} ({o.via_haproxy})")


listen("test_start", _start_haproxy)


def _stop_haproxy(environment: Any, **_: Any) -> None:
    global _haproxy
    if _haproxy is not None:
        _haproxy.stop()
        _haproxy = None


listen("quitting", _stop_haproxy)
