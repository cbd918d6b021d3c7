"""Kafka's own counters as testimony: the `kafka_metrics` scrapes agree with the limits and
with what the clients saw (both targets: the acceptor exports Kafka's names).

Each `kafka_metrics` row (harness.runner.kafka_metrics) is one scrape, a few ms long, of the
broker's JMX exporter or the acceptor's /metrics. Three rules:

- `kafka_metric_connection_count`: Kafka's `connection-count` (summed over the network
  processors of a listener) never exceeds `listener.name.<l>.max.connections`, and over
  the non-protected listeners never exceeds `max.connections`, at any scrape. A scrape
  is not a snapshot: the exporter reads each processor's gauge in turn during the few
  ms the scrape lasts, so a close read late and a registration read early can both be
  in one sum. The sum may exceed the limit by at most the connections that could have
  been registered during the scrape (client `connect_ok` by its end, first response or
  close after its start), and by no more;
- `kafka_metric_throttle_bounded`: the throttle-time averages Kafka keeps
  (`connection-accept-throttle-time`, `ip-connection-accept-throttle-time`, request
  `throttle-time`) never exceed w: every throttle they average is capped at w;
- `kafka_metric_ip_throttle_seen`: where a client saw an EOF before any response from an
  address with a rate quota (and no count limit that could explain it), Kafka's
  `ip-connection-accept-throttle-time` for that listener is a number (not NaN) in the
  scrapes that follow it within the Avg's n·w life: the broker says it throttled when and
  where the client saw it.

No scrapes at all is `unknown` ("the target exposes no metrics"), never a silent pass;
its hint names the fix (``--broker-metrics-url``), not the load (`verdict.hint_for`).

A cluster the harness did not start names its listeners its own way, and its metrics'
``listener`` labels carry those names: `listener_aliases` maps the cluster's name of each
listener the run loaded to the scenario's (run.json ``cluster_listeners``: what
DescribeConfigs said, and the listener at the bootstrap address; else the one label whose
protocol, or whose name, is the load's protocol; else the only listener that is not the
controller's), so every reader of these scrapes (`per_listener`) sees the scenario's names.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from analysis.checks.base import (
    FAIL,
    NA,
    PASS,
    UNKNOWN,
    Check,
    CheckResult,
    fmt,
    not_configured,
)
from analysis.checks.broker_side import per_broker
from analysis.model import INT_MAX
from base.history.events import UPSTREAM_METRICS
from base.history.rows import HarnessKafkaMetrics, HarnessKafkaMetricsDetail

if TYPE_CHECKING:
    from analysis.load import Run

MS = 1_000_000
SSM = "kafka_server_socket_server_metrics_"
#: a lowered max.connections is enforced by the processors' next loop (poll(300) at most)
PROCESSOR_POLL_MS = 300.0
#: listeners that are the broker's own (KRaft controller), not the run's
INTERNAL_LISTENERS = {"controller"}
#: why a metrics check judged nothing (`CheckResult.data["cause"]`; `verdict.hint_for`):
#: no endpoint scraped (or none answered), and no two scrapes around what it judges
CAUSE_NO_METRICS = "no_metrics"
CAUSE_NO_SCRAPE_PAIR = "no_scrape_pair"
#: the hint for a run without Kafka's metrics
METRICS_HINT = "pass --broker-metrics-url N=URL (the broker's JMX exporter)"


def scrapes(run: Run, *, upstream: bool = False) -> list[tuple[int, HarnessKafkaMetricsDetail]]:
    """(mono_ns, detail) of every successful scrape of the run's target, in time order
    (cached); ``upstream``: those of the Kafka behind the acceptor instead."""
    rows = run.cached("kafka_metric_scrapes", lambda: _all_scrapes(run))
    return [(ns, d) for ns, d in rows if (d.get("target") == UPSTREAM_METRICS) == upstream]


def _all_scrapes(run: Run) -> list[tuple[int, HarnessKafkaMetricsDetail]]:
    if run.lacks("kafka_metrics", source="harness"):  # no metrics endpoint: no job
        return []
    rows = (
        run.events("kafka_metrics", source="harness")
        .select("mono_ns", "reason", "detail")
        .orderBy("mono_ns")
        .collect()
    )
    out = []
    for r in rows:
        if r["reason"] == "scrape_failed" or not r["detail"]:
            continue
        try:
            out.append((int(r["mono_ns"]), HarnessKafkaMetrics.parse(r["detail"])))
        except ValueError:
            continue
    return out


def scrape_interval(ns: int, detail: HarnessKafkaMetricsDetail) -> tuple[int, int]:
    """A scrape's row is stamped at its middle; it read the gauges somewhere in here."""
    half = int(float(detail.get("scrape_ms") or 0.0) * MS / 2)
    return ns - half, ns + half


def no_scrapes(name: str, run: Run, *, taken: int = 0) -> CheckResult:
    """Unknown for want of Kafka's metrics: none scraped (``taken`` = 0), or fewer than the
    two scrapes the rule compares; the hint names the fix, not the load."""
    rows = 0 if run.lacks("kafka_metrics", source="harness") else None
    if rows is None:
        rows = run.events("kafka_metrics", source="harness").count()
    failed = rows - taken
    if taken:
        return CheckResult(
            name,
            UNKNOWN,
            observed=f"{taken} successful scrape of Kafka's metrics ({failed} failed): the "
            "rule compares two",
            expected="two or more scrapes of the broker's JMX exporter around the load",
            explanation="Kafka's counters were read once: nothing to compare them with",
            raise_hint="scrapes of Kafka's metrics before and after the load (every second "
            "while it runs: a longer run, or an exporter that answers throughout)",
            data={"cause": CAUSE_NO_SCRAPE_PAIR},
        )
    return CheckResult(
        name,
        UNKNOWN,
        observed=(
            f"no successful scrape of Kafka's metrics ({failed} failed)"
            if failed
            else "no kafka_metrics rows: the target exposed no metrics endpoint"
        ),
        expected="scrapes of the broker's JMX exporter or the acceptor's /metrics",
        explanation=(
            "the target does not expose what this check needs; for a cluster the harness did "
            "not start, "
            + METRICS_HINT
            + (" that answers (see the kafka_metrics rows' errors)" if failed else "")
        ),
        raise_hint=METRICS_HINT,
        data={"cause": CAUSE_NO_METRICS},
    )


def external(run: Run) -> bool:
    """A run against a cluster the harness did not start: run.json's ``cluster_listeners``
    (the runner records them for every such run), or a broker target whose metadata mode
    the runner could not state (it states a started broker's)."""
    meta = run.meta
    if "cluster_listeners" in meta:
        return True
    return run.target == "broker" and not (meta.get("versions") or {}).get("metadata")


def _names(text: Any) -> list[str]:
    return [n.strip().lower() for n in str(text or "").split(",") if n.strip()]


def _protocol_map(text: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in _names(text):
        name, sep, protocol = item.partition(":")
        if sep:
            out[name.strip()] = protocol.strip()
    return out


def cluster_name(
    listener: str,
    labels: set[str],
    cluster: dict[str, Any],
    protocol: str,
) -> str | None:
    """The cluster's name (lower case) of the run's ``listener`` among the metrics'
    ``labels``: as recorded (``cluster["load"]``, the listener at the bootstrap address),
    else the one label whose protocol (``listener.security.protocol.map``) or whose name is
    the load's ``protocol``, else the only label. None when none of these is one label."""
    lst = listener.lower()
    if lst in labels:
        return lst
    recorded = {str(k).lower(): str(v).lower() for k, v in (cluster.get("load") or {}).items()}
    if recorded.get(lst):
        return recorded[lst]
    protocol = protocol.lower()
    protocols = _protocol_map(cluster.get("listener.security.protocol.map"))
    same = sorted(n for n, p in protocols.items() if p == protocol and n in labels)
    if len(same) == 1:
        return same[0]
    if protocol in labels and protocol not in protocols:
        return protocol  # Kafka's default map: a listener named after its protocol
    if len(labels) == 1:
        return next(iter(labels))
    return None


def listener_aliases(run: Run) -> dict[str, str | None]:
    """{the cluster's listener label (lower case): the run's listener it is, or None for a
    listener that is the cluster's own (its controller's)} on a cluster the harness did not
    start; {} otherwise (the labels are the scenario's names). Cached."""
    return dict(run.cached("kafka_metric_listener_aliases", lambda: _aliases(run)))


def _aliases(run: Run) -> dict[str, str | None]:
    if not external(run):
        return {}
    cluster = run.meta.get("cluster_listeners") or {}
    own = set(_names(cluster.get("controller.listener.names"))) - INTERNAL_LISTENERS
    out: dict[str, str | None] = dict.fromkeys(own)
    labels = (
        {
            str(labels.get("listener") or "").lower()
            for _ns, d in run.cached("kafka_metric_scrapes", lambda: _all_scrapes(run))
            for name, labels, _v in d.get("samples", [])
            if name.startswith(SSM)
        }
        - INTERNAL_LISTENERS
        - own
        - {""}
    )
    security = run.meta.get("listener_security") or {}
    for listener in run.meta.get("listeners") or {}:
        protocol = str((security.get(listener) or {}).get("protocol") or "PLAINTEXT")
        found = cluster_name(str(listener), labels, cluster, protocol)
        if found and found != str(listener).lower():
            out[found] = str(listener).lower()
    return out


def per_listener(
    detail: HarnessKafkaMetricsDetail, metric: str, aliases: dict[str, str | None] | None = None
) -> dict[str, float | None]:
    """Sum of a family per listener (over processors); None when every sample is NaN.
    ``aliases`` (`listener_aliases`): a cluster's own listener names as the run's."""
    out: dict[str, float | None] = {}
    for name, labels, value in detail.get("samples", []):
        if name != SSM + metric:
            continue
        lst = str(labels.get("listener") or "").lower()
        if aliases and lst in aliases:
            lst = aliases[lst] or ""
        if not lst or lst in INTERNAL_LISTENERS:
            continue
        if value is None:
            out.setdefault(lst, None)
        else:
            out[lst] = (out.get(lst) or 0.0) + float(value)
    return out


def _registrations_during(run: Run) -> Any:
    """A function (lo_ns, hi_ns) -> how many client connections could have been
    registered by the broker in [lo, hi]: TCP connected by hi, and their first response
    (or EOF, or close) at or after lo. Connections registered before lo and still open
    are not counted: they are in every gauge read."""
    import numpy as np

    if not run.has_source("client"):
        return lambda _lo, _hi: 0
    from analysis.checks.broker_side import attempts

    df = attempts(run).df
    if df.empty:
        return lambda _lo, _hi: 0
    ok = df["connect_ok_ns"].astype("float64").to_numpy()
    first = df["ready_ns"].fillna(df["eof_ns"]).fillna(df["closed_ns"]).astype("float64").to_numpy()
    first = np.where(np.isnan(first), np.inf, first)

    def count(lo: int, hi: int) -> int:
        return int(np.count_nonzero((ok <= hi) & (first >= lo)))

    return count


def check_connection_count(run: Run) -> CheckResult:
    name = "kafka_metric_connection_count"
    tl = run.timeline
    if not tl.ever(lambda lim: lim.max_connections) and not any(
        v < INT_MAX for lim in tl.limits for v in lim.listener_maxes().values()
    ):
        return not_configured(name, run, "max.connections / listener.name.<l>.max.connections")
    data = scrapes(run)
    if not data:
        return no_scrapes(name, run)
    lag = int((PROCESSOR_POLL_MS + run.slack_ms) * MS)
    judged = 0
    bad: list[dict[str, Any]] = []
    worst = (0.0, 1.0, "")
    # max.connections engages on Kafka's total over every listener, the protected one
    # included (`connectionSlotAvailable`: totalCount < brokerMaxConnections): its own
    # connections there (a ZooKeeper controller's channel to itself) count too
    reached = False
    peak_all = 0.0
    registering = _registrations_during(run)
    aliases = listener_aliases(run)
    for ns, detail in data:
        counts = per_listener(detail, "connection_count", aliases)
        if not counts:
            continue
        judged_here = False
        i0, i1 = tl.index_at(ns - lag), tl.index_at(ns)
        lims = tl.limits[i0 : i1 + 1]
        broker_max = max(float(lim.max_connections) for lim in lims)
        last = lims[-1]
        total = sum(v or 0.0 for k, v in counts.items() if not last.is_protected(k))
        everything = sum(v or 0.0 for v in counts.values())
        if broker_max < INT_MAX:
            peak_all = max(peak_all, everything)
            reached = reached or everything >= broker_max
        pairs = [("broker (non-protected)", total, broker_max)]
        for lst, value in counts.items():
            pairs.append(
                (f"listener {lst}", value or 0.0, max(lim.listener_max_for(lst) for lim in lims))
            )
        for label, value, limit in pairs:
            if limit >= INT_MAX:
                continue
            judged_here = True
            reached = reached or value >= limit
            if value / limit > worst[0] / worst[1] or not worst[2]:
                worst = (value, limit, label)
            if value > limit:
                moving = registering(*scrape_interval(ns, detail))
                if value <= limit + moving:
                    continue  # within what the scrape's reads could straddle
                bad.append(
                    {
                        "mono_ns": ns,
                        "ts": run.wall(ns),
                        "why": f"Kafka's connection-count {fmt(value)} on {label} > {fmt(limit)}"
                        f" (+{moving} that could register during the scrape)",
                    }
                )
        judged += judged_here
    if not judged:
        return CheckResult(
            name,
            UNKNOWN,
            observed=f"{len(data)} scrapes, none with connection-count",
            expected="connection-count in the scrapes",
        )
    peak, limit, label = worst
    every = f", every listener {fmt(peak_all)}" if peak_all > peak else ""
    return CheckResult(
        name,
        FAIL if bad else PASS,
        observed=f"peak connection-count {fmt(peak)} ({label}{every}) vs {fmt(limit)}; "
        f"{judged} scrapes",
        expected="Kafka's own connection-count ≤ the configured maximum at every scrape",
        tolerance=f"a lowered limit applies after {fmt(PROCESSOR_POLL_MS + run.slack_ms)} ms; "
        "a sum over processors may exceed it by the connections that could register during "
        "the scrape (its gauges are read in turn, not at once)",
        witnesses=bad[:10],
        explanation="Kafka's Selector counts registered channels, a subset of its counted ones; "
        "max.connections is reached when every listener's count together (the protected "
        "listener's included) reaches it",
        judged=judged,
        exercised=reached,
        peak=float(peak),
        limit=float(limit),
    )


THROTTLE_METRICS = (
    (SSM + "connection_accept_throttle_time", "connection-accept-throttle-time"),
    (SSM + "ip_connection_accept_throttle_time", "ip-connection-accept-throttle-time"),
    ("kafka_server_request_throttle_time", "request throttle-time"),
)


def check_throttle_bounded(run: Run) -> CheckResult:
    name = "kafka_metric_throttle_bounded"
    data = scrapes(run)
    tl = run.timeline
    limited = (
        tl.ever(lambda lim: lim.broker_rate)
        or tl.ever(lambda lim: lim.ip_quota_default)
        or any(
            v < INT_MAX
            for lim in tl.limits
            for v in (*lim.ip_quotas.values(), *lim.listener_rates().values())
        )
        or any(raw.get("request_quotas") for raw in tl.raw)
    )
    if not data:
        if not limited:
            return not_configured(name, run, "every connection-rate and request quota")
        return no_scrapes(name, run)
    w = tl.limits[0].window_ms
    judged = 0
    peak = 0.0
    bad: list[dict[str, Any]] = []
    for ns, detail in data:
        for metric, kafka_name in THROTTLE_METRICS:
            for n, labels, value in detail.get("samples", []):
                if n != metric or value is None:
                    continue
                judged += 1
                peak = max(peak, float(value))
                if float(value) > w:
                    bad.append(
                        {
                            "mono_ns": ns,
                            "ts": run.wall(ns),
                            "labels": labels,
                            "why": f"Kafka's {kafka_name} average {fmt(value)} ms > w = {w} ms",
                        }
                    )
    if judged == 0:
        if not limited:
            return CheckResult(
                name,
                NA,
                observed="no throttle recorded, and no connection-rate or request quota is set",
                expected="nothing (no quota configured)",
                explanation="n/a: the rule does not apply to this run",
            )
        return CheckResult(
            name,
            UNKNOWN,
            observed=f"{len(data)} scrapes; Kafka recorded no throttle (every average is NaN)",
            expected="throttle-time averages ≤ w",
            explanation="not exercised: no connection or request was throttled",
            exercised=False,
        )
    return CheckResult(
        name,
        FAIL if bad else PASS,
        observed=f"max throttle-time average {fmt(peak)} ms over {judged} readings",
        expected=f"every throttle-time average ≤ w = {w} ms (each throttle is capped at w)",
        tolerance="none",
        witnesses=bad[:10],
        judged=judged,
    )


def check_ip_throttle_seen(run: Run) -> CheckResult:
    """Client EOFs on rate-limited addresses ↔ Kafka's ip-connection-accept-throttle-time."""
    from analysis.checks.broker_side import attempts

    name = "kafka_metric_ip_throttle_seen"
    tl = run.timeline
    if not (tl.ever(lambda lim: lim.ip_quota_default) or any(lim.ip_quotas for lim in tl.limits)):
        return not_configured(name, run, "connection_creation_rate (ip)")
    if any(lim.max_connections_per_ip < INT_MAX or lim.per_ip_overrides for lim in tl.limits):
        return CheckResult(
            name,
            NA,
            observed="a per-IP count limit is configured: an EOF may be a count reject",
            expected="EOFs attributable to the IP rate only",
            explanation="n/a: client EOFs cannot be attributed to the rate step in this run",
        )
    data = scrapes(run)
    if not data:
        return no_scrapes(name, run)
    df = attempts(run).df
    eofs = df[df["ready_ns"].isna() & df["eof_ns"].notna()]
    n, w = tl.limits[0].window_num, tl.limits[0].window_ms
    life = int(n * w * MS)
    times = [ns for ns, _ in data]
    from bisect import bisect_left

    aliases = listener_aliases(run)
    per: list[dict[str, float | None]] = [
        per_listener(d, "ip_connection_accept_throttle_time", aliases) for _, d in data
    ]
    judged = 0
    bad: list[dict[str, Any]] = []
    faults = attempts(run).faults
    skipped = 0
    for r in eofs.itertuples():
        if tl.at(int(r.eof_ns)).ip_quota(r.client_ip) >= INT_MAX:
            continue
        lo, hi = int(r.eof_ns), int(r.invoke_ns) + life
        if any(s <= hi and e >= int(r.invoke_ns) for s, e in faults):
            skipped += 1  # a fault may cut it, a restarted broker starts with fresh metrics
            continue
        i = bisect_left(times, lo)
        seen: list[bool] = []
        while i < len(times) and times[i] < hi:
            values = per[i]
            lst = str(r.listener or "").lower()
            vals = [v for k, v in values.items() if not lst or k == lst] or list(values.values())
            seen.append(any(v is not None for v in vals))
            i += 1
        if not seen:
            continue  # no scrape inside the Avg's life: nothing to compare
        judged += 1
        if not any(seen):
            bad.append(
                {
                    "client_ip": r.client_ip,
                    "client_port": int(r.client_port),
                    "mono_ns": int(r.eof_ns),
                    "ts": run.wall(int(r.eof_ns)),
                    "why": (
                        f"client EOF before any response, but {len(seen)} scrapes within n·w "
                        "show no ip-connection-accept-throttle-time"
                    ),
                }
            )
    if judged == 0:
        return CheckResult(
            name,
            UNKNOWN,
            observed=f"{len(eofs)} client EOFs; none on a rate-limited address with a scrape after",
            expected="client EOFs on rate-limited addresses to compare with Kafka's testimony",
            explanation="not exercised: no address was throttled where a scrape could see it",
            exercised=False,
        )
    return CheckResult(
        name,
        FAIL if bad else PASS,
        observed=f"{judged - len(bad)} of {judged} client EOFs confirmed by Kafka's metric"
        + (f"; {skipped} near fault windows not judged" if skipped else ""),
        expected="Kafka's ip-connection-accept-throttle-time is set after each such EOF",
        tolerance="the Avg lives n·w after its last throttle; only scrapes in that life count",
        witnesses=bad[:10],
        judged=judged,
    )


def summary(run: Run) -> dict[str, Any]:
    """Per listener: the peak accept rate and blocked time Kafka reported (for the report)."""
    out: dict[str, Any] = defaultdict(dict)
    aliases = listener_aliases(run)
    for _, d in scrapes(run):
        for lst, v in per_listener(d, "connection_accept_rate", aliases).items():
            if v is not None:
                out[lst]["peak_accept_rate"] = max(out[lst].get("peak_accept_rate", 0.0), v)
    return dict(out)


CHECKS = [
    Check(
        "kafka_metric_connection_count",
        "kafka_metrics",
        per_broker(check_connection_count),
        True,
        ("acceptor", "broker"),
        doc="Kafka's own connection-count ≤ max.connections / listener max at every scrape",
        judges_limit=True,
    ),
    Check(
        "kafka_metric_throttle_bounded",
        "kafka_metrics",
        per_broker(check_throttle_bounded),
        False,
        ("acceptor", "broker"),
        doc="Kafka's throttle-time averages (connection, IP, request) ≤ w",
    ),
    Check(
        "kafka_metric_ip_throttle_seen",
        "kafka_metrics",
        per_broker(check_ip_throttle_seen),
        False,
        ("acceptor", "broker"),
        doc="client EOFs on rate-limited addresses are confirmed by Kafka's IP throttle metric",
    ),
]
