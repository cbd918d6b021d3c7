"""Kafka's own metrics through the Prometheus JMX exporter: a real broker, a small storm.

The local broker runs with the exporter agent (broker.artifacts.jmx_exporter); the
run's scraper (harness.runner.kafka_metrics) reads it. During a storm of connections on
the listener, Kafka's `connection-accept-rate{listener}` must move and its
`connection-count` must count the storm's open sockets: the testimony is real.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

import pytest

from base.history.rows import FIELDS
from broker import Broker
from harness.runner.kafka_metrics import EVENT, MetricsScraper, fetch, parse_samples

pytestmark = pytest.mark.integration

SSM = "kafka_server_socket_server_metrics_"


def _value(samples: list[Any], name: str, **labels: str) -> float:
    """Sum of a family's samples whose labels include ``labels`` (over processors)."""
    total = 0.0
    for n, lab, v in samples:
        if n == name and all(lab.get(k) == want for k, want in labels.items()) and v is not None:
            total += float(v)
    return total


@pytest.fixture(scope="module")
def rate_broker(module_broker_factory: Callable[..., Broker]) -> Broker:
    return module_broker_factory(properties={"max.connection.creation.rate": "50"})


def test_exporter_shows_the_listener_accept_rate_moving_during_a_storm(
    rate_broker: Broker,
) -> None:
    url = getattr(rate_broker, "metrics_url", None)
    assert url, "the local broker must run the JMX exporter (HARNESS_BROKER_METRICS unset)"
    rows: list[dict[str, Any]] = []
    scraper = MetricsScraper(
        url, lambda row: rows.append(dict(zip(FIELDS, row, strict=True))), target="broker"
    )
    # the first answer after the broker's start loads the exporter's classes: it may take
    # longer than a scrape's timeout (0.8 x the interval) on a busy machine
    before = parse_samples(fetch(url, 5))
    assert scraper.scrape_once(), scraper.last_error
    rate0 = _value(before, SSM + "connection_accept_rate", listener="PLAINTEXT")
    count0 = _value(before, SSM + "connection_count", listener="PLAINTEXT")

    storm = 40
    socks = [socket.create_connection(("127.0.0.1", rate_broker.port), timeout=10)]
    try:
        for _ in range(storm - 1):
            socks.append(socket.create_connection(("127.0.0.1", rate_broker.port), timeout=10))
        deadline = time.monotonic() + 20
        while True:  # the processors register the sockets a moment after the accept
            scraper.scrape_once()
            after = parse_samples(fetch(url, 5))
            count1 = _value(after, SSM + "connection_count", listener="PLAINTEXT")
            if count1 >= count0 + storm or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        for s in socks:
            s.close()
    rate1 = _value(after, SSM + "connection_accept_rate", listener="PLAINTEXT")
    broker1 = _value(after, SSM + "broker_connection_accept_rate")
    # 40 accepts in a fresh meter's padded 10 s window: the rate rises by about 4/s
    assert rate1 >= rate0 + storm / 11.5, (rate0, rate1)
    assert broker1 >= storm / 11.5
    assert count1 >= count0 + storm, (count0, count1)
    # the AcceptorBlockedPercent meter and the throttle-time averages are exported too
    names = {n for n, _, _ in after}
    assert "kafka_network_acceptor_acceptorblockedpercent_count" in names
    assert SSM + "connection_accept_throttle_time" in names
    assert SSM + "ip_connection_accept_throttle_time" in names
    # and the scraper recorded them as kafka_metrics rows with the layout docs/history.md gives
    assert rows and all(r["event"] == EVENT for r in rows)
    scraped = [r["detail"] for r in rows if "samples" in r["detail"]]
    assert scraped, rows
    detail = scraped[-1]
    assert detail["target"] == "broker" and detail["url"] == url
    assert any(s[0] == SSM + "connection_accept_rate" for s in detail["samples"])
