"""The admission view behind the Locust tab: counters in, rates and limits out (pure)."""

from __future__ import annotations

import pytest

from loadprofiles.admission import AdmissionView, count_limits, parse_metrics, rate_limits


def metrics(accepted: float, delayed: float, ip_acc: dict[str, float], closed_ip: float) -> str:
    lines = [
        "# TYPE harness_acceptor_connections_total counter",
        f'harness_acceptor_connections_total{{listener="CLIENT",outcome="accepted"}} {accepted}',
        f'harness_acceptor_connections_total{{listener="CLIENT",outcome="delayed"}} {delayed}',
        f'harness_acceptor_connections_total{{listener="CLIENT",outcome="closed"}} {accepted}',
        "# TYPE harness_acceptor_ip_connections_total counter",
    ]
    for ip, value in ip_acc.items():
        lines.append(
            f'harness_acceptor_ip_connections_total{{ip="{ip}",outcome="accepted"}} {value}'
        )
    lines.append(
        'harness_acceptor_ip_connections_total{ip="127.0.0.9",outcome="throttle_closed"} '
        f"{closed_ip}"
    )
    lines += [
        "# TYPE harness_acceptor_limit gauge",
        'harness_acceptor_limit{key="max.connection.creation.rate"} 20.0',
        'harness_acceptor_limit{key="listener.name.client.max.connection.creation.rate"} '
        "2.147483647e+09",
        'harness_acceptor_limit{key="max.connections.per.ip"} 3.0',
        'harness_acceptor_limit{key="ip.connection_creation_rate.127.0.0.9"} 4.0',
        'harness_acceptor_limit{key="quota.window.num"} 11.0',
        "# TYPE kafka_server_socket_server_metrics_connection_count gauge",
        'kafka_server_socket_server_metrics_connection_count{listener="CLIENT"} 7.0',
    ]
    return "\n".join(lines) + "\n"


def test_parse_picks_the_admission_counters_and_limits() -> None:
    scrape = parse_metrics(metrics(10, 2, {"127.0.0.9": 6}, 1))
    assert scrape.listeners[("CLIENT", "accepted")] == 10
    assert scrape.ips[("127.0.0.9", "throttle_closed")] == 1
    assert scrape.open_connections == {"CLIENT": 7}
    assert rate_limits(scrape.limits) == {
        "max.connection.creation.rate": 20,
        "ip.connection_creation_rate.127.0.0.9": 4,
    }  # the unlimited listener rate (Int.MaxValue) is not a line to draw
    assert count_limits(scrape.limits) == {"max.connections.per.ip": 3}


def test_rates_are_counter_deltas_over_the_poll_interval() -> None:
    view = AdmissionView(top_ips=2)
    view.ingest(metrics(10, 2, {"127.0.0.9": 6, "127.0.0.2": 1, "127.0.0.3": 0}, 1), 100.0)
    assert view.points == type(view.points)()  # one scrape is no rate yet
    view.ingest(metrics(30, 12, {"127.0.0.9": 16, "127.0.0.2": 4, "127.0.0.3": 1}, 5), 102.0)
    point = view.points[-1]
    assert point["listeners"]["CLIENT"] == {
        "accepted": 10.0,
        "delayed": 5.0,
        "throttle_closed": 0.0,
        "rejected": 0.0,
    }
    assert list(point["ips"]) == ["127.0.0.9", "127.0.0.2"]  # busiest two only
    assert point["ips"]["127.0.0.9"]["throttle_closed"] == 2.0
    rows = {r["name"]: r for r in view.table()}
    assert rows["CLIENT"]["limit"] == "max.connection.creation.rate=20"
    assert rows["127.0.0.9"]["limit"] == "ip.connection_creation_rate.127.0.0.9=4"
    assert rows["127.0.0.2"]["accepted"] == 1.5


def test_a_restarted_acceptor_does_not_give_negative_rates() -> None:
    view = AdmissionView()
    view.ingest(metrics(100, 0, {}, 0), 10.0)
    view.ingest(metrics(4, 0, {}, 0), 11.0)  # counters reset by a restart
    assert view.points[-1]["listeners"]["CLIENT"]["accepted"] == 4.0


def test_errors_are_kept_for_the_tab_not_raised() -> None:
    view = AdmissionView()
    view.failed("http://127.0.0.1:1/metrics: connection refused")
    assert view.snapshot()["error"].endswith("connection refused")
    with pytest.raises(ValueError):
        view.ingest("this is { not prometheus", 1.0)
