"""The metrics scraper: Prometheus text -> kafka_metrics rows (no sockets: fetcher injected)."""

from __future__ import annotations

from typing import Any

from base.history.rows import FIELDS
from harness.runner.kafka_metrics import EVENT, MetricsScraper, metrics_url_for, parse_samples

TEXT = """\
# HELP jvm_threads_current x
# TYPE jvm_threads_current gauge
jvm_threads_current 42.0
# TYPE kafka_server_socket_server_metrics_connection_accept_rate gauge
kafka_server_socket_server_metrics_connection_accept_rate{listener="PLAINTEXT"} 5.5
kafka_server_socket_server_metrics_connection_accept_rate{ip="127.0.0.9"} 1.25
# TYPE kafka_server_socket_server_metrics_connection_accept_throttle_time gauge
kafka_server_socket_server_metrics_connection_accept_throttle_time{listener="PLAINTEXT"} NaN
# TYPE kafka_network_acceptor_acceptorblockedpercent_count gauge
kafka_network_acceptor_acceptorblockedpercent_count{listener="PLAINTEXT"} 1.5e9
"""


def test_parse_keeps_only_connection_and_quota_families_and_nan_is_none() -> None:
    samples = parse_samples(TEXT)
    assert ("jvm_threads_current", {}, 42.0) not in samples
    assert [s[0] for s in samples].count(
        "kafka_server_socket_server_metrics_connection_accept_rate"
    ) == 2
    assert (
        "kafka_server_socket_server_metrics_connection_accept_throttle_time",
        {"listener": "PLAINTEXT"},
        None,
    ) in samples
    assert (
        "kafka_network_acceptor_acceptorblockedpercent_count",
        {"listener": "PLAINTEXT"},
        1.5e9,
    ) in samples


def test_each_scrape_is_one_row_and_a_failure_is_recorded_not_raised() -> None:
    rows: list[dict[str, Any]] = []
    answers: list[Any] = [TEXT, OSError("connection refused")]

    def fetcher(url: str, timeout: float) -> str:
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return str(a)

    clock = iter(range(1_000, 10_000, 500))
    s = MetricsScraper(
        "http://127.0.0.1:1/metrics",
        lambda row: rows.append(dict(zip(FIELDS, row, strict=True))),
        target="broker",
        fetcher=fetcher,
        clock_ns=lambda: next(clock),
    )
    assert s.scrape_once() is True
    assert s.scrape_once() is False
    assert [r["event"] for r in rows] == [EVENT, EVENT]
    ok, bad = rows
    assert ok["mono_ns"] == 1_250  # the middle of the request
    assert ok["detail"]["target"] == "broker" and len(ok["detail"]["samples"]) == 4
    assert bad["reason"] == "scrape_failed" and "connection refused" in bad["detail"]["error"]
    assert s.scrapes == 1 and s.failures == 1


class _T:
    def __init__(self, name: str, url: str | None, broker_url: str | None) -> None:
        self.name = name
        self.metrics_url = url
        self.kafka = type("K", (), {"broker": type("B", (), {"metrics_url": broker_url})()})()


def test_endpoint_choice_per_target_and_override() -> None:
    assert metrics_url_for(_T("acceptor", "http://a/metrics", "http://b/metrics")) == (
        "http://a/metrics",
        "acceptor",
    )
    assert metrics_url_for(_T("broker", None, "http://b/metrics"))[0] == "http://b/metrics"
    assert metrics_url_for(_T("broker", None, None))[0] is None
    assert metrics_url_for(_T("broker", None, None), "http://x/metrics")[0] == "http://x/metrics"


def test_metrics_urls_one_or_one_per_broker() -> None:
    import pytest

    from harness.runner.kafka_metrics import parse_metrics_urls

    assert parse_metrics_urls(None) is None
    assert parse_metrics_urls(["http://h:7071/metrics?a=b"]) == "http://h:7071/metrics?a=b"
    assert parse_metrics_urls(["1=http://a/m", "2=http://b/m,3=https://c/m"]) == {
        1: "http://a/m",
        2: "http://b/m",
        3: "https://c/m",
    }
    for bad, why in (
        (["1=http://a/m", "1=http://b/m"], "broker 1 given twice"),
        (["2=ftp://b/m"], "expected an http"),
        (["http://a/m", "2=http://b/m"], "one URL, or N=URL"),
        (["http://a/m", "http://b/m"], "one URL, or N=URL"),
    ):
        with pytest.raises(ValueError, match=why):
            parse_metrics_urls(bad)


def test_a_broker_the_cluster_does_not_list_is_refused() -> None:
    """Scrapes credited to a broker id the cluster's metadata does not list would judge it
    by another broker's counts: nothing is recorded, and the reason is said."""
    from harness.runner.kafka_metrics import start_scraper

    target = type("T", (), {"name": "broker", "broker_addresses": {"CLIENT": [(1, "h", 1)]}})()
    opts = type("O", (), {"broker_metrics_url": {1: "http://a/m", 7: "http://b/m"}})()
    said: list[str] = []
    assert start_scraper(target, lambda _row: None, opts, said.append) is None
    assert "broker(s) [7]" in said[0] and "lists [1]" in said[0]


def test_the_acceptor_target_also_scrapes_the_kafka_behind_it(monkeypatch: Any) -> None:
    """Kafka still authenticates behind the acceptor: its exporter is scraped beside the
    acceptor's /metrics, its rows marked `upstream` so no other check reads them."""
    from harness.runner.kafka_metrics import Scrapers, start_scraper

    monkeypatch.setattr(MetricsScraper, "scrape_once", lambda self: True)  # no network
    monkeypatch.setattr(MetricsScraper, "start", lambda self: self)
    monkeypatch.setattr(MetricsScraper, "stop", lambda self: None)

    rows: list[Any] = []
    broker = type("B", (), {"metrics_url": "http://b/metrics"})()
    kafka = type("K", (), {"broker": broker, "cluster": None})()
    target = type("T", (), {"name": "acceptor", "metrics_url": "http://a/metrics",
                            "kafka": kafka, "fronts": None})()  # fmt: skip
    opts = type("O", (), {"broker_metrics_url": None})()
    scrapers = start_scraper(target, rows.append, opts, lambda _m: None)
    try:
        assert isinstance(scrapers, Scrapers)
        assert [(s.url, s.target) for s in scrapers.scrapers] == [
            ("http://a/metrics", "acceptor"),
            ("http://b/metrics", "upstream"),
        ]
    finally:
        if scrapers is not None:
            scrapers.stop()
