"""Connection storm: many new clients at once, each connect → ApiVersions → Metadata → close.

What a fleet restart looks like to a broker: every client opens a fresh connection
and bootstraps. Shape comes from ``--arrival`` (e.g. ``spike:base=5,peak=200,at=10,for=2``);
``--shape connect|apiversions`` cuts each arrival short (see ``connect.py``). Runs on the
wire-speed engine (``loadprofiles.engine``), one driver per process (``driver.py``).

    locust -f loadprofiles/storm.py --headless -u 1 -r 1 -t 20s \
        --host kafka://127.0.0.1:9092 --arrival constant:rate=100 --run-dir runs/x
"""

from __future__ import annotations

from loadprofiles import webui  # noqa: F401  (the admission tab)
from loadprofiles.driver import DriverUser, EngineDriver

EngineDriver.install(profile="storm", default_shape="storm")


class StormUser(DriverUser):
    """Placeholder user: the process's EngineDriver runs the arrivals."""

    profile = "storm"
