"""One connection per produce: connect → ApiVersions → Produce (acks=1) → close.

The anti-pattern of clients (serverless functions, scripts) that open a connection
for every message; it multiplies the connection rate by the message rate.

    locust -f loadprofiles/per_request.py --headless -u 1 -r 1 -t 20s \
        --host kafka://127.0.0.1:9092 --arrival constant:rate=50 --topic harness-load
"""

from __future__ import annotations

from loadprofiles import webui  # noqa: F401  (the admission tab)
from loadprofiles.common import ArrivalUser, Settings, listen, payload, prepare_topic
from loadprofiles.kafka_client import KafkaConnection


class PerRequestUser(ArrivalUser):
    """One driver; every arrival is a produce on a brand-new connection."""

    profile = "per_request"
    _value: bytes = b""
    _settings_cache: Settings | None = None

    def drive(self, s: Settings, slot: int, slots: int) -> None:
        self._settings_cache = s
        self._value = payload(s.payload_bytes, s.seed)
        super().drive(s, slot, slots)

    def session(self, conn: KafkaConnection) -> None:
        s = self._settings_cache
        assert s is not None
        conn.api_versions()
        conn.produce(s.topic, self._value, acks=s.acks)


listen("test_start", prepare_topic)
