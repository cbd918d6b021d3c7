"""Connect-only storm: each arrival is a TCP connect then close (``--shape connect``,
the default here), or connect, ApiVersions, close (``--shape apiversions``).

Like for like with Trogdor's ``ConnectionStress`` CONNECT (in Kafka 4.3.1 a bare TCP
connect and close): the generator's own ceiling without a Kafka request. Closed rows
carry ``outcome: connected`` (connected, asked nothing, closed by us).

    locust -f loadprofiles/connect.py --headless -u 1 -r 1 -t 20s \
        --host kafka://127.0.0.1:9092 --arrival constant:rate=2000 --run-dir runs/x
"""

from __future__ import annotations

from loadprofiles import webui  # noqa: F401  (the admission tab)
from loadprofiles.driver import DriverUser, EngineDriver

EngineDriver.install(profile="connect", default_shape="connect")


class ConnectUser(DriverUser):
    """Placeholder user: the process's EngineDriver runs the arrivals."""

    profile = "connect"
