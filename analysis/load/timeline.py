"""The config timeline: the limits in force at every instant of a run, one version per change."""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from analysis.load.files import RunDirError
from analysis.model import INT_MAX, Limits
from base.history.rows import HarnessConfig

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from pyspark.sql import Column


@dataclass
class ConfigTimeline:
    """The limits in force at every instant: version i holds from starts[i] on."""

    starts: list[int]
    limits: list[Limits]
    raw: list[dict[str, Any]] = field(default_factory=list)

    def index_at(self, mono_ns: int) -> int:
        return max(0, bisect_right(self.starts, mono_ns) - 1)

    def at(self, mono_ns: int) -> Limits:
        return self.limits[self.index_at(mono_ns)]

    @property
    def changes(self) -> list[int]:
        """Instants of dynamic changes (after the initial version)."""
        return self.starts[1:]

    def version_col(self, ns: Column) -> Column:
        """0-based config version in force at `ns` (a CASE over the few change instants)."""
        from pyspark.sql import functions as F

        expr = F.lit(0)
        for i, start in enumerate(self.starts[1:], start=1):
            expr = F.when(ns >= F.lit(start), F.lit(i)).otherwise(expr)
        return expr

    def value_col(self, ns: Column, pick: Callable[[Limits], float]) -> Column:
        """A per-row limit: pick(limits in force at ns)."""
        from pyspark.sql import functions as F

        values = [float(pick(lim)) for lim in self.limits]
        if len(set(values)) == 1:
            return F.lit(values[0])
        return F.element_at(F.array(*[F.lit(v) for v in values]), self.version_col(ns) + 1)

    def ever(self, pick: Callable[[Limits], float]) -> bool:
        """Was this limit set (not Int.MaxValue) in any version?"""
        return any(float(pick(lim)) < INT_MAX for lim in self.limits)


def config_timeline(
    rows: Sequence[tuple[int, str | None]], run_limits: dict[str, Any] | None
) -> ConfigTimeline:
    """Build the timeline from (mono_ns, detail) config rows sorted by time."""
    rows = sorted(rows, key=lambda r: r[0])
    starts: list[int] = []
    limits: list[Limits] = []
    raw: list[dict[str, Any]] = []
    if run_limits and not rows:  # config rows are authoritative; run.json only seeds
        starts.append(-(2**62))
        limits.append(Limits.from_config(run_limits))
        raw.append(dict(run_limits))
    for ns, detail in rows:
        try:
            parsed = HarnessConfig.parse(detail)
        except ValueError as exc:
            raise RunDirError(f"config row at mono_ns={ns}: detail is not JSON ({exc})") from None
        lim = Limits.from_config(parsed)
        if starts and starts[-1] == ns:
            limits[-1], raw[-1] = lim, parsed
            continue
        if not starts:
            ns = -(2**62)  # the first config also covers anything recorded before it
        starts.append(ns)
        limits.append(lim)
        raw.append(parsed)
    if not starts:
        starts, limits, raw = [-(2**62)], [Limits()], [{}]
    return ConfigTimeline(starts, limits, raw)


def is_runner_row(detail: dict[str, Any]) -> bool:
    return detail.get("origin") == "runner"


def parse(ns: int, detail: str | None) -> dict[str, Any]:
    try:
        return HarnessConfig.parse(detail)
    except ValueError as exc:
        raise RunDirError(f"config row at mono_ns={ns}: detail is not JSON ({exc})") from None


def limit_values(lim: Limits) -> dict[str, Any]:
    """The connection limits of one version, comparable across writers (Int.MaxValue
    entries dropped: unset and Int.MaxValue mean the same in Kafka)."""
    return {
        "quota.window.num": lim.window_num,
        "quota.window.size.ms": lim.window_ms,
        "max.connections": lim.max_connections,
        "max.connections.per.ip": lim.max_connections_per_ip,
        "max.connections.per.ip.overrides": dict(sorted(lim.per_ip_overrides.items())),
        "max.connection.creation.rate": lim.broker_rate,
        "listener max.connections": {k: v for k, v in lim.listener_maxes().items() if v < INT_MAX},
        "listener max.connection.creation.rate": {
            k: v for k, v in lim.listener_rates().items() if v < INT_MAX
        },
        "ip_quotas.default": lim.ip_quota_default,
        "ip_quotas": {k: v for k, v in sorted(lim.ip_quotas.items()) if v < INT_MAX},
        "kafka.version": lim.kafka_version,
        "kafka.metadata": lim.kafka_metadata,
    }
