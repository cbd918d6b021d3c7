"""The run's timeline and the limits in force along it (pure; time is passed in).

The orchestrator only asks "what is due at elapsed t?" and "what are the limits now?";
keeping both answers here, free of clocks and processes, is what lets the ordering
rules (a fault ends before the next change at the same second, a phase starts after
the limits it is meant to meet) be tested without a broker.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from base.quota import config as quota_keys
from base.quota.config import INT_MAX, QuotaConfig
from harness.runner.scenario import Action, Phase, Scenario

#: Kafka's defaults for the keys a `config` row always carries (the enforcer's own).
_UNSET = QuotaConfig(listeners=())
KAFKA_DEFAULTS: dict[str, int | str] = {
    quota_keys.MAX_CONNECTIONS: _UNSET.max_connections,
    quota_keys.MAX_CONNECTIONS_PER_IP: _UNSET.max_connections_per_ip,
    quota_keys.MAX_CONNECTIONS_PER_IP_OVERRIDES: _UNSET.max_connections_per_ip_overrides_text,
    quota_keys.MAX_CONNECTION_CREATION_RATE: _UNSET.max_connection_creation_rate,
    quota_keys.QUOTA_WINDOW_NUM: _UNSET.quota_window_num,
    quota_keys.QUOTA_WINDOW_SIZE_SECONDS: _UNSET.quota_window_size_seconds,
}

# Order of events that fall on the same instant: stop what ends, then change limits,
# then start faults, then start load that should meet the new limits.
_ORDER = {"phase_stop": 0, "fault_end": 1, "change": 2, "fault_start": 3, "phase_start": 4}


@dataclass(frozen=True)
class TimelineEvent:
    at: float
    kind: str  # phase_start | phase_stop | change | fault_start | fault_end
    phase: Phase | None = None
    action: Action | None = None

    @property
    def label(self) -> str:
        if self.phase is not None:
            return f"{self.kind} {self.phase.name} ({self.phase.profile}, {self.phase.shape})"
        assert self.action is not None
        if self.action.kind == "fault":
            return f"{self.kind} {self.action.params['kind']}"
        return f"{self.action.kind} {dict(self.action.params)}"


def build_timeline(scenario: Scenario, duration: float | None = None) -> list[TimelineEvent]:
    """Every event of the run in execution order; ``duration`` clips a shortened run."""
    end = scenario.duration if duration is None else duration
    events: list[TimelineEvent] = []
    for p in scenario.load:
        if p.start >= end:
            continue
        events.append(TimelineEvent(p.start, "phase_start", phase=p))
        events.append(TimelineEvent(min(p.stop, end), "phase_stop", phase=p))
    for a in scenario.schedule:
        if a.at >= end:
            continue
        if a.kind == "fault":
            events.append(TimelineEvent(a.at, "fault_start", action=a))
            fault_end = a.end
            assert fault_end is not None
            events.append(TimelineEvent(min(fault_end, end), "fault_end", action=a))
        else:
            events.append(TimelineEvent(a.at, "change", action=a))
    events.sort(key=lambda e: (e.at, _ORDER[e.kind]))
    return events


class Cursor:
    """Hands out timeline events as they fall due, each exactly once."""

    def __init__(self, events: list[TimelineEvent]) -> None:
        self._events = events
        self._next = 0

    def due(self, elapsed: float) -> Iterator[TimelineEvent]:
        while self._next < len(self._events) and self._events[self._next].at <= elapsed:
            ev = self._events[self._next]
            self._next += 1
            yield ev

    def pending(self) -> list[TimelineEvent]:
        return self._events[self._next :]

    @property
    def next_at(self) -> float | None:
        return self._events[self._next].at if self._next < len(self._events) else None

    def done(self) -> bool:
        return self._next >= len(self._events)


def listeners_property(addresses: Mapping[str, tuple[str, int]]) -> str:
    return ",".join(f"{name}://{host}:{port}" for name, (host, port) in addresses.items())


def initial_limits(
    scenario: Scenario, addresses: Mapping[str, tuple[str, int]] | None = None
) -> dict[str, Any]:
    """The full effective limits at start, as a `config` row's detail carries them.

    Listener keys appear only where the scenario sets them: a listener without its own
    `listener.name.<l>.max.connections` / `.max.connection.creation.rate` takes the
    broker-wide value, as in Kafka (an explicit Int.MaxValue is a different limit)."""
    limits: dict[str, Any] = dict(KAFKA_DEFAULTS)
    limits.update(scenario.limits)
    if addresses is not None:
        limits["listeners"] = listeners_property(addresses)
    else:
        limits["listeners"] = ",".join(f"{n}://127.0.0.1:0" for n in scenario.listeners)
    limits["inter.broker.listener.name"] = scenario.inter_broker_listener or scenario.listeners[0]
    limits["ip_quotas"] = dict(scenario.ip_quotas)
    limits["request_quotas"] = [dict(q) for q in scenario.request_quotas]
    return limits


def apply_change(limits: Mapping[str, Any], action: Action) -> dict[str, Any]:
    """The limits after one scheduled change (a new dict; faults change nothing)."""
    out = copy.deepcopy(dict(limits))
    if action.kind == "ip_quota":
        quotas = dict(out.get("ip_quotas", {}))
        ip, rate = action.params["ip"], action.params["rate"]
        if rate is None:
            quotas.pop(ip, None)
        else:
            quotas[ip] = rate
        out["ip_quotas"] = quotas
    elif action.kind == "broker_config":
        for key, value in action.params.items():
            if value is None and key.startswith("listener.name."):
                out.pop(key, None)  # back to the broker-wide value
            elif value is None:
                out[key] = KAFKA_DEFAULTS.get(key, INT_MAX)
            else:
                out[key] = value
    elif action.kind == "request_quota":
        entity = {k: action.params.get(k) for k in ("user", "client-id") if k in action.params}
        kept = [
            q
            for q in out.get("request_quotas", [])
            if {k: q.get(k) for k in ("user", "client-id") if k in q} != entity
        ]
        if action.params.get("request_percentage") is not None:
            kept.append(dict(action.params))
        out["request_quotas"] = kept
    return out


def limits_timeline(
    scenario: Scenario, start: Mapping[str, Any] | None = None
) -> list[tuple[float, dict[str, Any]]]:
    """(at, limits) at start and after every change: what the `config` rows will say."""
    current = dict(start) if start is not None else initial_limits(scenario)
    out = [(0.0, current)]
    for a in scenario.schedule:
        if a.kind != "fault":
            current = apply_change(current, a)
            out.append((a.at, current))
    return out


def fault_windows(scenario: Scenario) -> list[tuple[str, float, float]]:
    """(kind, start, end) for the report's shading and the docs."""
    out = []
    for a in scenario.faults:
        end = a.end
        assert end is not None
        out.append((str(a.params["kind"]), a.at, end))
    return out
