"""One connection per produce: connect → ApiVersions → Produce (acks=1) → close.

The anti-pattern of clients (serverless functions, scripts) that open a connection
for every message; it multiplies the connection rate by the message rate. Runs on the
storm engine (``--shape produce``, one record of ``--payload-bytes`` to partition 0 of
``--topic``, which is created before the first arrival or the run stops with the reason).

    locust -f loadprofiles/per_request.py --headless -u 1 -r 1 -t 20s \
        --host kafka://127.0.0.1:9092 --arrival constant:rate=50 --topic harness-load
"""

from __future__ import annotations

from typing import Any

from loadprofiles import webui  # noqa: F401  (the admission tab)
from loadprofiles.client_history import ClientHistory
from loadprofiles.driver import DriverUser, EngineDriver
from loadprofiles.options import Settings
from loadprofiles.topics import ensure_load_topic


def prepare_topic(environment: Any, s: Settings, history: ClientHistory) -> None:
    """Create ``--topic`` before the first arrival (`ensure_load_topic`)."""
    ensure_load_topic(s, history)


EngineDriver.install(profile="per_request", default_shape="produce", setup=prepare_topic)


class PerRequestUser(DriverUser):
    """Placeholder user: the process's EngineDriver runs the arrivals."""

    profile = "per_request"
