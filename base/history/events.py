"""Every history event, once: its source, the columns it fills and the `detail` keys it
may carry. Writers name their rows by these; `analysis/` reads `detail` keys through
`Event.key`, so a key one side renames fails at import or in a test, not as a silent
null in a verdict. `base.history.schema.EVENTS` is derived from here, and
`conformance` checks written rows against it (docs/history.md says what each means).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ALL",
    "BY_SOURCE",
    "CHARGE_SOURCES",
    "CLOSED_BY",
    "OPEN",
    "OUTCOMES",
    "VOCABULARIES",
    "Event",
    "checked",
    "conformance",
    "detail",
    "detail_template",
    "event",
    "loads_detail",
]

#: columns every row has (not listed per event)
COMMON = frozenset({"run_id", "source", "seq", "ts", "mono_ns", "event", "detail"})
#: a connection's identity, on every per-connection row of the acceptor and the client
CONN = frozenset({"conn_id", "listener", "client_ip", "client_port", "sock_ip", "sock_port"})
#: `detail` may carry any key (a config row: every limit under its Kafka key)
OPEN: frozenset[str] = frozenset({"*"})


@dataclass(frozen=True)
class Event:
    source: str
    name: str
    columns: frozenset[str]
    detail: frozenset[str]
    doc: str

    def key(self, key: str) -> str:
        """A `detail` key of this event, for readers: raises if the event has no such key."""
        if self.detail is not OPEN and key not in self.detail:
            raise KeyError(f"{self.source} event {self.name!r} has no detail key {key!r}")
        return key


#: the closed value vocabularies of `detail` keys, defined once (rows.py types each key of
#: this name as a Literal of them): a client's `closed` outcome (loadprofiles.outcomes), who
#: closed a connection (client `closed`: the peer's EOF or a reset; acceptor
#: `throttle_close`: the per-IP rate or the stop), what a request's charge was taken from
OUTCOMES = (
    "served",
    "delayed_served",
    "eof_after_accept",
    "refused",
    "reset",
    "timeout",
    "connected",
    "tls_failed",
    "tls_stalled",
    "auth_failed",
)
CLOSED_BY = ("eof", "reset", "ip_rate", "shutdown")
CHARGE_SOURCES = ("broker_log", "wall", "late", "broker_log_late", "wall_late", "login")
VOCABULARIES: dict[str, tuple[str, ...]] = {
    "outcome": OUTCOMES,
    "closed_by": CLOSED_BY,
    "charge_source": CHARGE_SOURCES,
}

#: ``kafka_metrics.detail.target`` of the scrapes of the Kafka behind the acceptor (the
#: acceptor target's own rows say ``acceptor``): kept apart by every reader
UPSTREAM_METRICS = "upstream"


def _ev(source: str, name: str, columns: Iterable[str], detail: Iterable[str], doc: str) -> Event:
    return Event(source, name, frozenset(columns), frozenset(detail), doc)


def _a(name: str, columns: Iterable[str], detail: Iterable[str], doc: str) -> Event:
    return _ev("acceptor", name, columns, detail, doc)


def _c(name: str, columns: Iterable[str], detail: Iterable[str], doc: str) -> Event:
    return _ev("client", name, {*CONN, "client_id", *columns}, detail, doc)


def _h(name: str, columns: Iterable[str], detail: Iterable[str], doc: str) -> Event:
    return _ev("harness", name, columns, detail, doc)


_REQUEST = {"api_key", "client_id", "principal"}
_CHARGE = {"charged_ms", "charge_source", "network_ms", "held_ms", "late_ms"}

ALL: tuple[Event, ...] = (
    # -- the acceptor (the enforcer) ------------------------------------------------------
    _a("accept", CONN, {"protected", "tcp_accept_mono_ns", "proxy_header"},
       "socket taken (and its PROXY header read); the rate step runs now (Kafka's t0)"),
    _a("delay", {*CONN, "delay_ms", "reason"}, {"broker_delay_ms", "listener_delay_ms"},
       "the rate step asked for a delay"),
    _a("blocked", {"listener", "delay_ms", "reason"}, {"start_mono_ns"},
       "the listener's acceptor was blocked (rate, slot, rate+slot, queue_full)"),
    _a("listener_close", {"listener"}, {"queued"},
       "the listening socket closed at the stop; `queued`: the connections then in its "
       "accept queue, never accepted (the kernel resets them with the socket)"),
    _a("admit", {*CONN, "delay_ms"}, set(), "counted (Kafka's t1 of the IP step)"),
    _a("register", {*CONN, "processor", "delay_ms"},
       {"queue_depth", "iteration", "in_iteration"}, "a processor started serving it"),
    _a("reject", {*CONN, "reason"}, {"count", "max"}, "per-IP count: closed at once"),
    _a("throttle_close", {*CONN, "delay_ms", "reason"},
       {"throttle_start_mono_ns", "end_ms", "closed_by"},
       "per-IP rate: the parked socket was closed"),
    _a("evict", {*CONN, "processor", "reason"}, set(), "LRU channel shed over max.connections"),
    _a("close", {*CONN, "processor", "reason", "bytes"},
       {"bytes_in", "bytes_out", "requests", "duration_ms", "error", "unanswered", "then",
        "counted", "tcp_accept_mono_ns", "registered"},
       "a connection ended"),
    _a("request", {*CONN, "processor", *_REQUEST, "latency_ms", "bytes"},
       {"sample", *_CHARGE}, "one request answered"),
    _a("request_throttle", {*CONN, "processor", *_REQUEST, "delay_ms"},
       {"bucket", "quota", "rate", "broker_time_ms", *_CHARGE},
       "a request-quota violation muted the channel"),
    _a("admin", {*CONN, "reason", *_REQUEST}, OPEN, "a quota/config change or refusal"),
    _a("loop_lag", {"delay_ms", "reason"},
       {"due_mono_ns", "period_ms", "threshold_ms", "armed"},
       "the heartbeat: the event loop ran late while an admission waited"),
    _a("processor_stall", {"listener", "processor", "reason", "delay_ms"}, {"queued"},
       "a test-scheduled processor stall began or ended"),
    # -- the clients (the generator) -------------------------------------------------------
    _c("connect_invoke", set(),
       {"intended_mono_ns", "profile", "clock_offset_ns", "clock_rtt_ns", "broker",
        "proxy_protocol"},
       "an attempt starts (a Locust worker on another host: its clock offset; a cluster: "
       "the node id of the broker it connects to; the PROXY header version it sends)"),
    _c("connect_fail", {"latency_ms", "reason"},
       {"intended_mono_ns", "profile", "cause", "why"},
       "TCP connect failed, or an intended arrival was not offered"),
    _c("connect_ok", {"latency_ms"}, set(), "TCP handshake completed"),
    _c("ready", {"latency_ms", "api_key"}, set(), "first Kafka response"),
    _c("request_ok", {"api_key", "latency_ms", "bytes", "reason"},
       {"offset", "profile", "throttle_time_ms", "in_flight_ms", "principal", "error_code"},
       "a request got its response (kafka-python's sockets: in_flight_ms, send to response; "
       "principal, the user it logged in as)"),
    _c("request_fail", {"api_key", "latency_ms", "reason"}, {"error", "profile"},
       "a request got no response"),
    _c("closed", {"latency_ms", "reason"},
       {"outcome", "closed_by", "connect_ms", "ready_ms", "eof_ms", "error", "profile",
        "errors", "tls_ms", "sasl_ms", "principal"},
       "the client is done with the connection"),
    _c("tls_start", {"latency_ms"}, set(),
       "the client starts its TLS handshake (latency_ms: since connect_invoke)"),
    _c("tls_done", {"latency_ms"}, {"tls_ms", "tls_version", "resumed", "principal"},
       "the TLS handshake completed (tls_ms: its own duration; principal: Kafka's name for "
       "the client certificate offered, RFC 2253 order)"),
    _c("tls_fail", {"latency_ms", "reason"}, {"error", "tls_ms"},
       "the TLS handshake failed, timed out, or the server closed during it"),
    _c("sasl_done", {"latency_ms", "api_key"}, {"mechanism", "principal", "rounds", "sasl_ms"},
       "SASL login succeeded (principal: the user it logged in as; never a secret)"),
    _c("sasl_fail", {"latency_ms", "reason", "api_key"},
       {"error", "error_code", "round", "mechanism", "principal", "sasl_ms", "answer_ms"},
       "SASL login failed: Kafka's error code and the round (0 handshake, 1-2 authenticate); "
       "answer_ms: from sending the failing request to its answer"),
    _ev("client", "loop_lag", {"listener", "client_id", "latency_ms", "reason"},
        {"engine", "from_mono_ns", "until_mono_ns", "period_ms", "threshold_ms"},
        "the storm engine's heartbeat: its loop could not look at its sockets (`start`: the "
        "period and threshold; `stall`: latency_ms how late, [from, until] the stretch in "
        "which an observation of it may have been late)"),
    # -- the harness (the runner) ----------------------------------------------------------
    _h("config", {"reason"}, OPEN, "every limit in force (runner: intended; acceptor: applied)"),
    _h("phase_start", set(), OPEN, "a load phase starts"),
    _h("phase_end", set(), OPEN, "a load phase ends"),
    _h("fault_start", {"reason"}, OPEN, "an injected fault starts"),
    _h("fault_end", {"reason"}, OPEN, "an injected fault ends"),
    _h("run_start", set(), {"scenario", "target", "seed", "duration_s"}, "the run starts"),
    _h("run_end", {"reason"}, {"scenario", "target", "error"}, "the run ends"),
    _h("kafka_metrics", {"latency_ms", "reason"},
       {"url", "target", "scrape_ms", "samples", "error", "broker"},
       "one scrape of Prometheus metrics (a cluster: the broker whose exporter it is; "
       f"target {UPSTREAM_METRICS!r}: the Kafka behind the acceptor)"),
    _h("kernel_net", {"latency_ms", "reason"},
       {"listen_overflows", "listen_drops", "reqq_full_drop", "syn_cookies", "netns", "error"},
       "one reading of the kernel's listen-queue drop counters (per network namespace)"),
    _h("process_stats", {"latency_ms"},
       {"role", "pgids", "processes", "fds", "rss_kb", "cpu_s", "bytes", "files", "loop_busy",
        "loop_busy_pid", "loop_others", "loop_wait", "loop_read_mono_ns", "loop_read_ms"},
       "one reading of a role's processes (descriptors, RSS, CPU, its busiest main thread's "
       "share of the time since the last reading), the history's size, the runner's own "
       "process (role runner) or the whole machine's busy CPU (role machine)"),
)  # fmt: skip

BY_SOURCE: dict[str, dict[str, Event]] = {}
for _e in ALL:
    BY_SOURCE.setdefault(_e.source, {})[_e.name] = _e


def event(source: str, name: str) -> Event:
    return BY_SOURCE[source][name]


def detail(source: str, name: str, /, **fields: Any) -> str:
    """The `detail` of one row of event `name` of `source`, as stored (JSON, sorted keys).
    Every writer builds its details here: a key the event does not declare raises
    KeyError, a value JSON cannot hold raises TypeError, at the write, not in a verdict."""
    return json.dumps(checked(source, name, fields), sort_keys=True)


def checked(source: str, name: str, fields: Mapping[str, Any], /) -> Mapping[str, Any]:
    """`fields` as event `name`'s `detail` mapping, its keys checked as `detail` checks
    them (KeyError on one the event does not declare); encoded later, off the hot path."""
    ev = BY_SOURCE[source][name]
    if ev.detail is not OPEN and not ev.detail.issuperset(fields):
        extra = sorted(set(fields) - ev.detail)
        raise KeyError(f"{source} event {name!r} has no detail key(s) {extra}")
    return fields


def detail_template(source: str, name: str, /, slots: Iterable[str], **fields: Any) -> str:
    """`detail(...)` with ``%d`` where each integer of `slots` goes, in sorted key order,
    for a hot path that fills it with ``%`` (the storm engine's ``connect_invoke``)."""
    marks = {k: f"@{k}@" for k in slots}
    text = detail(source, name, **fields, **marks).replace("%", "%%")
    for mark in marks.values():
        text = text.replace(json.dumps(mark), "%d")
    return text


def loads_detail(text: str | None, /) -> dict[str, Any]:
    """A stored `detail` as its mapping ({} for none); readers go through a row class's
    ``parse`` (`base.history.rows`), which types it as that event's detail."""
    if not text:
        return {}
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError(f"a history detail is a JSON object, not {type(value).__name__}")
    return value


def conformance(rows: Iterable[Mapping[str, Any]], limit: int = 20) -> list[str]:
    """What in `rows` (history rows as dicts) no event definition allows: an unknown event,
    a column it does not fill, a `detail` key it does not carry. At most `limit` lines,
    each once."""
    out: list[str] = []
    seen: set[str] = set()

    def say(msg: str) -> None:
        if msg not in seen and len(out) < limit:
            seen.add(msg)
            out.append(msg)

    for row in rows:
        source, name = row.get("source"), row.get("event")
        ev = BY_SOURCE.get(str(source), {}).get(str(name))
        if ev is None:
            say(f"unknown event {source}/{name}")
            continue
        for col, value in row.items():
            if value is not None and col not in COMMON and col not in ev.columns:
                say(f"{source}/{name}: column {col} is not one of its columns")
        detail = row.get("detail")
        if detail is None or ev.detail is OPEN:
            continue
        try:
            parsed = json.loads(detail) if isinstance(detail, str) else detail
        except json.JSONDecodeError:
            say(f"{source}/{name}: detail is not JSON")
            continue
        if not isinstance(parsed, Mapping):
            say(f"{source}/{name}: detail is not an object")
            continue
        for key in parsed:
            if key not in ev.detail:
                say(f"{source}/{name}: detail key {key!r} is not one of its keys")
    return out
