"""The warm-up's targets: each PLAINTEXT listener's upstream Kafka, never a secured one."""

from __future__ import annotations

from harness.runner.warmup import upstreams


def test_plaintext_upstreams_only() -> None:
    props = {
        "listeners": "CLIENT://127.0.0.1:9000,SECURE://127.0.0.1:9001",
        "listener.name.client.upstream": "127.0.0.1:19092",
        "listener.name.secure.upstream": "127.0.0.1:19093",
        "listener.name.client.max.connection.creation.rate": "30",
        "listener.name.bad.upstream": "nowhere",
    }
    security = {"SECURE": {"protocol": "SASL_SSL"}}
    assert upstreams(props, security) == [("client", "127.0.0.1", 19092)]
    assert upstreams(props, {}) == [
        ("client", "127.0.0.1", 19092),
        ("secure", "127.0.0.1", 19093),
    ]
