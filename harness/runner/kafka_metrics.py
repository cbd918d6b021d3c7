"""Kafka's own metrics as testimony: scrape a Prometheus endpoint every second into the history.

The endpoint is the JMX exporter agent the local broker runs with (``broker.metrics_url``),
an existing cluster's exporter (``--broker-metrics-url``), or the acceptor's own
``/metrics``, which exports the same names (docs/metrics.md). Each scrape becomes one
harness row, event ``kafka_metrics``, at the instant of the scrape:

``detail`` = ``{"url": ..., "target": "broker"|"acceptor", "scrape_ms": 3.1,
"samples": [[name, {label: value}, value], ...]}`` with only the connection and quota
families below (the JVM's own metrics are left out) and NaN written as ``null``. A
scrape that fails is a row with ``reason = "scrape_failed"`` and ``detail.error``: a gap
in the testimony is recorded, never papered over.

Against a cluster the harness did not start, `cluster_listeners` reads the bootstrap
broker's listener keys and the scenario's static settings with DescribeConfigs for
run.json (``cluster_listeners``): the checks find the load's listener under the cluster's
own name in these scrapes (docs/metrics.md).

The scraper runs on `periodic.Periodic` (a daemon thread that stops by itself); one
GET at a time with a timeout shorter than the interval, so a hung exporter cannot pile
requests up.
"""

from __future__ import annotations

import math
import time
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from base.history.events import UPSTREAM_METRICS
from base.history.rows import HarnessKafkaMetrics, HarnessKafkaMetricsDetail, Row
from harness.runner.periodic import Periodic

#: The families a run records (Kafka names as the JMX exporter maps them; docs/metrics.md).
PREFIXES = (
    "kafka_server_socket_server_metrics_",
    "kafka_network_acceptor_",
    "kafka_server_request_",
    # the broker's JVM heap and non-heap in use (a soak's memory beside its RSS)
    "jvm_memory_used_bytes",
)
EVENT = "kafka_metrics"

Sample = tuple[str, dict[str, str], float | None]
Write = Callable[[Row], None]


def parse_samples(text: str, prefixes: Iterable[str] = PREFIXES) -> list[Sample]:
    """Prometheus text -> [(name, labels, value)] of the wanted families; NaN -> None."""
    from prometheus_client.parser import text_string_to_metric_families

    wanted = tuple(prefixes)
    out: list[Sample] = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if not s.name.startswith(wanted):
                continue
            value: float | None = float(s.value)
            if value is not None and (math.isnan(value) or math.isinf(value)):
                value = None
            out.append((s.name, dict(s.labels), value))
    return out


def fetch(url: str, timeout_s: float) -> str:
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:
        return str(resp.read().decode("utf-8", errors="replace"))


class MetricsScraper:
    """Scrape ``url`` every ``interval_s`` into ``write`` (a HistoryWriter.append)."""

    def __init__(
        self,
        url: str,
        write: Write,
        *,
        target: str,
        broker: int | None = None,
        interval_s: float = 1.0,
        max_duration_s: float = 24 * 3600.0,
        fetcher: Callable[[str, float], str] = fetch,
        clock_ns: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self.url = url
        self.write = write
        self.target = target
        #: a cluster: the node whose exporter this is (every row names it)
        self.broker = broker
        self._who: HarnessKafkaMetricsDetail = {"url": url, "target": target}
        if broker is not None:
            self._who["broker"] = broker
        self.interval_s = interval_s
        self.max_duration_s = max_duration_s
        self.fetcher = fetcher
        self.clock_ns = clock_ns
        self.scrapes = 0
        self.failures = 0
        self.last_error: str | None = None
        self._every = Periodic(
            self.scrape_once,
            name="kafka-metrics",
            interval_s=interval_s,
            max_duration_s=max_duration_s,
        )

    def scrape_once(self) -> bool:
        """One scrape and one row; True when the endpoint answered."""
        t0 = self.clock_ns()
        try:
            text = self.fetcher(self.url, max(0.2, self.interval_s * 0.8))
            samples = parse_samples(text)
        except Exception as exc:  # an exporter that fails is recorded, not fatal
            t1 = self.clock_ns()
            self.failures += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            failed: HarnessKafkaMetricsDetail = {**self._who, "error": self.last_error}
            self.write(HarnessKafkaMetrics((t0 + t1) // 2, reason="scrape_failed", detail=failed))
            return False
        t1 = self.clock_ns()
        self.scrapes += 1
        detail: HarnessKafkaMetricsDetail = {
            **self._who,
            "scrape_ms": round((t1 - t0) / 1e6, 3),
            "samples": [[n, labels, v] for n, labels, v in samples],
        }
        self.write(HarnessKafkaMetrics((t0 + t1) // 2, latency_ms=(t1 - t0) / 1e6, detail=detail))
        return True

    def start(self) -> MetricsScraper:
        self._every.start()
        return self

    def stop(self) -> None:
        """Stop and take one last scrape, so the final counters are in the history."""
        self._every.stop()

    def summary(self) -> str:
        tail = f"; last error {self.last_error}" if self.last_error else ""
        return f"{self.scrapes} scrapes of {self.url}, {self.failures} failed{tail}"


def parse_metrics_urls(values: Sequence[str] | str | None) -> dict[int, str] | str | None:
    """``--broker-metrics-url`` values: one URL (the run's one exporter), or ``N=URL`` per
    broker of a cluster (repeatable, or comma-separated) for a cluster the harness did not
    start. Raises ValueError naming the value it cannot take."""
    if not values:
        return None
    items = [values] if isinstance(values, str) else list(values)
    parts = [p.strip() for item in items for p in item.split(",") if p.strip()]
    per_node: dict[int, str] = {}
    plain: list[str] = []
    for part in parts:
        node, sep, url = part.partition("=")
        if sep and node.strip().isdigit() and not part.startswith(("http://", "https://")):
            n = int(node)
            if n in per_node:
                raise ValueError(f"--broker-metrics-url {part!r}: broker {n} given twice")
            url = url.strip()
            per_node[n] = url
        else:
            plain.append(part)
            url = part
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"--broker-metrics-url {part!r}: expected an http(s) URL")
    if (plain and per_node) or len(plain) > 1:
        raise ValueError(
            f"--broker-metrics-url {', '.join(parts)}: one URL, or N=URL for each broker"
        )
    return per_node or plain[0]


def metrics_url_for(target: Any, override: str | None = None) -> tuple[str | None, str]:
    """Which endpoint to scrape for a run target, and which kind it is.

    ``override`` (``--broker-metrics-url``) wins; else the acceptor's /metrics for target
    acceptor, the broker's JMX exporter for target broker. (None, why) when there is none.
    """
    kind = str(getattr(target, "name", "broker"))
    if override:
        return override, kind
    if kind == "acceptor":
        url = getattr(target, "metrics_url", None)
        return (url, kind) if url else (None, "the acceptor serves no /metrics")
    url = getattr(target.kafka.broker, "metrics_url", None)
    if url:
        return url, kind
    return None, (
        "the broker has no JMX exporter (external cluster: pass --broker-metrics-url, "
        "or it could not be resolved)"
    )


def cluster_listeners(target: Any, say: Callable[[str], None]) -> dict[str, Any] | None:
    """run.json's ``cluster_listeners`` for a run against an existing cluster (None for a
    broker or an acceptor the harness started, whose listeners are the scenario's).

    Kafka's metrics label each listener with the cluster's own name, which need not be the
    scenario's: the bootstrap broker's listener keys are read with DescribeConfigs
    (`base.admin.listeners`, over the run's admin login) and ``load`` maps the
    scenario's loaded listener to the cluster's listener at the bootstrap address. A
    principal that may not describe the configs leaves ``error`` instead; the checker then
    maps the names from the scraped labels (`analysis.checks.kafka_metrics`)."""
    name, broker = target.kafka.external_listener, target.kafka.broker
    if name is None or broker is None:
        return None
    from base.admin.listeners import read_listeners
    from base.security.secrets import mask
    from harness.runner.admin_changes import admin_source_ip

    bootstrap = str(broker.bootstrap)
    scenario = target.kafka.scenario
    static = static_settings(scenario)
    try:
        found = read_listeners(
            bootstrap,
            client_config=target.kafka.admin_config,
            source_ip=admin_source_ip(scenario, broker.host),
            also=tuple(static),
        )
    except Exception as exc:  # e.g. CLUSTER_AUTHORIZATION_FAILED: said, never fatal
        why = mask(f"{type(exc).__name__}: {exc}")
        say(
            f"note: the cluster's listeners could not be read with DescribeConfigs ({why}); "
            "the metric checks take its listener names from the scraped metrics' labels"
        )
        return {"read_with": None, "error": why, "load": {}}
    load = found.pop("load_listener", None)
    theirs = found.pop("also", {})
    out = {"read_with": "DescribeConfigs", **found, "load": {name: load} if load else {}}
    if static:
        out["static"] = compare_static(static, theirs, say)
    listed = ", ".join(parse_names(found.get("listeners")))
    if load:
        say(
            f"the cluster's listener at {bootstrap} is {load} (broker {found['node']}: "
            f"{listed}): Kafka's metrics for the scenario's {name} are read under that name"
        )
    else:
        say(
            f"note: no listener of broker {found['node']} ({listed}) is at {bootstrap}; the "
            "metric checks take its listener names from the scraped metrics' labels"
        )
    return out


def static_settings(scenario: Any) -> dict[str, str]:
    """The scenario's static broker settings (those a running cluster cannot take through
    the admin API): the existing cluster keeps its own, and the checker judges by these."""
    from harness.runner.kafka_side import broker_properties, is_dynamic
    from harness.runner.schedule import initial_limits

    props = broker_properties(initial_limits(scenario))
    return {k: v for k, v in props.items() if not is_dynamic(k)}


def _same(a: str | None, b: str) -> bool:
    if a is None:
        return False
    try:
        return float(a) == float(b)
    except ValueError:
        return a.strip() == b.strip()


def compare_static(
    scenario: dict[str, str], cluster: dict[str, str | None], say: Callable[[str], None]
) -> dict[str, dict[str, Any]]:
    """``{key: {"scenario": v, "cluster": v, "same": bool}}`` for each static setting; every
    key that differs is said, with what it means for the verdict."""
    out = {
        k: {"scenario": v, "cluster": cluster.get(k), "same": _same(cluster.get(k), v)}
        for k, v in sorted(scenario.items())
    }
    differ = {k: d for k, d in out.items() if not d["same"]}
    for key, d in differ.items():
        say(
            f"note: the cluster's static {key} is {d['cluster']}, the scenario's "
            f"{d['scenario']}: the checker judges by the scenario's, so a check of it may "
            "fail or pass for that difference alone (set the cluster's, or the scenario's, "
            "to match)"
        )
    if not differ:
        say(f"the cluster's static settings equal the scenario's ({', '.join(sorted(out))})")
    return out


def parse_names(listeners: str | None) -> list[str]:
    """The listener names of a ``listeners`` value, in order."""
    from base.admin.listeners import parse_listeners

    return list(parse_listeners(listeners))


def start_scraper(
    target: Any, write: Write, opts: Any, say: Callable[[str], None]
) -> MetricsScraper | Scrapers | None:
    """The orchestrator's hook: scrape the run target's metrics into the harness history
    (``write``: its writer's append).

    Returns None (and says why) when there is nothing to scrape; the metric checks are
    then `unknown` for this run. ``opts.broker_metrics_url`` overrides the endpoint.
    """
    if target is None:
        return None
    given = getattr(opts, "broker_metrics_url", None)
    if isinstance(given, dict):  # N=URL: a cluster the harness did not start, per broker
        return _per_broker_scrapers(target, write, given, say)
    url, kind = metrics_url_for(target, given)
    if url is None:
        say(f"Kafka metrics not recorded: {kind}")
        return None
    cluster = target.kafka.cluster
    fronts = target.fronts.metrics if target.fronts is not None else {}
    if cluster is not None and fronts and not given:
        # a fronted cluster: every front's own metrics and every broker's behind it
        scrapers = [MetricsScraper(u, write, target=kind, broker=n) for n, u in fronts.items()]
        scrapers += [
            MetricsScraper(b.metrics_url, write, target=UPSTREAM_METRICS, broker=b.plan.node_id)
            for b in cluster.brokers
            if b.metrics_url
        ]
        say(
            f"recording the metrics of {len(fronts)} acceptors and of the "
            f"{len(scrapers) - len(fronts)} brokers behind them every second (event {EVENT})"
        )
        return Scrapers([sc.start() for sc in scrapers])
    if cluster is not None and not getattr(opts, "broker_metrics_url", None):
        # a cluster: every broker's own exporter, each row naming its broker
        nodes = [(b.plan.node_id, b.metrics_url) for b in cluster.brokers if b.metrics_url]
        if len(nodes) != len(cluster.brokers):
            say("Kafka metrics not recorded: a broker of the cluster has no JMX exporter")
            return None
        scrapers = [MetricsScraper(u, write, target=kind, broker=n).start() for n, u in nodes]
        say(f"recording Kafka's metrics from {len(nodes)} brokers every second (event {EVENT})")
        return Scrapers(scrapers)
    scraper = MetricsScraper(url, write, target=kind)
    if not scraper.scrape_once():
        say(f"Kafka metrics at {url} did not answer ({scraper.last_error}); retrying every second")
    say(f"recording Kafka's metrics from {url} every second (event {EVENT})")
    upstream = getattr(target.kafka.broker, "metrics_url", None)
    if kind != "acceptor" or not upstream or given:
        return scraper.start()
    # behind the acceptor Kafka still authenticates every TLS and SASL connection: its
    # counters are scraped too, as the rows of target "upstream" (kept apart by the checks)
    behind = MetricsScraper(upstream, write, target=UPSTREAM_METRICS)
    say(f"recording the metrics of the Kafka behind the acceptor from {upstream} too")
    return Scrapers([scraper.start(), behind.start()])


def _per_broker_scrapers(
    target: Any, write: Write, urls: dict[int, str], say: Callable[[str], None]
) -> Scrapers | None:
    """One scraper per broker the user named; a node the cluster's metadata does not list
    is refused (scrapes credited to the wrong broker would judge it by another's counts)."""
    kind = str(getattr(target, "name", "broker"))
    known = {n for addrs in getattr(target, "broker_addresses", {}).values() for n, *_ in addrs}
    unknown = sorted(set(urls) - known) if known else []
    if unknown:
        say(
            f"Kafka metrics not recorded: --broker-metrics-url names broker(s) {unknown}, "
            f"which the cluster's metadata does not list (it lists {sorted(known)})"
        )
        return None
    missing = sorted(known - set(urls))
    if missing:
        say(f"no --broker-metrics-url for broker(s) {missing}: their metric checks judge nothing")
    scrapers = [
        MetricsScraper(u, write, target=kind, broker=n).start() for n, u in sorted(urls.items())
    ]
    say(f"recording Kafka's metrics from {len(scrapers)} brokers every second (event {EVENT})")
    return Scrapers(scrapers)


class Scrapers:
    """Scrapers stopped together: a cluster's, one per broker, or the acceptor's and that
    of the broker behind it."""

    def __init__(self, scrapers: list[MetricsScraper]) -> None:
        self.scrapers = scrapers

    def stop(self) -> None:
        for s in self.scrapers:
            s.stop()

    def summary(self) -> str:
        return "; ".join(
            f"{s.target if s.broker is None else f'broker {s.broker}'}: {s.summary()}"
            for s in self.scrapers
        )
