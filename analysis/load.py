"""Reading a run directory: run.json, the history (explicit schema) and the config timeline.

The `config` rows in history/harness are authoritative and time-varying; run.json's
"limits" only seeds the timeline when a run has no config row before its first event.
Dot-files under history/ are parts still being written and are never read.

Two writers leave `config` rows: the runner (`detail.origin = "runner"`: the limits it
intended, written once the target acknowledged them) and the enforcer (our acceptor, on
start and on every admin change it applied). The checker judges by the runner's limits
(Jepsen: never take the enforcer's word for its own configuration); a version starts at
the enforcer's record of the same limits when that lies within the runner's bracket
[applied_from, acknowledged], else at the acknowledgement. Runs without runner rows
(older runs, synthetic histories) fall back to every config row.
"""

from __future__ import annotations

import json
import re
import threading
from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analysis.model import INT_MAX, Limits
from analysis.versions import Semantics, semantics_for
from harness.history.rows import HarnessConfig

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from pyspark.sql import Column, DataFrame, SparkSession


class RunDirError(ValueError):
    """The run directory cannot be analysed (missing, empty, unreadable)."""


def spark_schema() -> Any:
    """The shared Arrow schema (harness.history.schema) as a Spark StructType."""
    from pyspark.sql import types as T

    from harness.history.schema import SCHEMA

    mapping = {
        "string": T.StringType(),
        "int64": T.LongType(),
        "int32": T.IntegerType(),
        "int16": T.ShortType(),
        "double": T.DoubleType(),
    }
    fields = []
    for f in SCHEMA:
        kind = "timestamp" if str(f.type).startswith("timestamp") else str(f.type)
        spark_type = T.TimestampType() if kind == "timestamp" else mapping[kind]
        fields.append(T.StructField(f.name, spark_type, True))
    return T.StructType(fields)


def history_files(run_dir: Path) -> list[Path]:
    root = run_dir / "history"
    return sorted(
        p
        for p in root.rglob("*.parquet")
        if not any(part.startswith((".", "_")) for part in p.relative_to(root).parts)
    )


def history_rows(run_dir: Path) -> int:
    """Rows in the run's history, from the Parquet footers (no Spark needed). A file that
    is not readable Parquet (cut short by a full disk, or a crash while it was written)
    stops the analysis with a RunDirError naming it: a verdict on part of a history could
    blame the enforcer for rows that were lost, so none is given."""
    import pyarrow.parquet as pq

    rows = 0
    damaged: list[str] = []
    for f in history_files(run_dir):
        try:
            rows += pq.ParquetFile(f).metadata.num_rows
        except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
            damaged.append(f"{f} ({exc})")
    if damaged:
        raise RunDirError(
            f"{len(damaged)} history file(s) not readable as Parquet: {'; '.join(damaged)}. "
            "Nothing was judged. Moving them aside judges the rest, and that verdict then "
            "covers only the rows that were read."
        )
    return rows


def read_run_json(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "run.json"
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise RunDirError(f"{path}: not valid JSON ({exc}); fix or remove it") from None
    if not isinstance(data, dict):
        raise RunDirError(f"{path}: expected a JSON object")
    return data


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


def _parse(ns: int, detail: str | None) -> dict[str, Any]:
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


@dataclass
class Testimony:
    """Both writers' config rows, (mono_ns, parsed detail) sorted by time."""

    runner: list[tuple[int, dict[str, Any]]]
    enforcer: list[tuple[int, dict[str, Any]]]


def as_stated(want: dict[str, Any], got: dict[str, Any]) -> dict[str, Any]:
    """The enforcer's values (`limit_values`) for what the runner stated: a runner that did
    not state the release to enforce as or its metadata mode (older runs, a launcher that
    does not set them, compose) is not contradicted by the enforcer naming its default."""
    for key in ("kafka.version", "kafka.metadata"):
        if want.get(key) is None and key in got:
            got = {**got, key: None}
    return got


#: the cause on a front's `config` row when it applied a change another front of its
#: cluster took (harness.acceptor.server: read from the shared metadata log)
PROPAGATED = "metadata_log"


def applied_on_front(testimony: Testimony, i: int, want: Any) -> int | None:
    """A fronted cluster: when this front applied the runner's change ``i`` that another
    front took (Kafka's brokers apply a committed quota record each in its own time): its
    first `PROPAGATED` row after the runner's acknowledgement and before the runner started
    its next change, carrying the runner's limits ``want`` (`limit_values`); None if it
    wrote none."""
    runner = testimony.runner
    ack_ns = runner[i][0]
    nxt = runner[i + 1][1].get("applied_from_mono_ns") if i + 1 < len(runner) else None
    until_ns = int(nxt) if isinstance(nxt, int) else None
    for e_ns, d in testimony.enforcer:
        if e_ns <= ack_ns:
            continue
        if until_ns is not None and e_ns >= until_ns:
            break
        vals = as_stated(want, limit_values(Limits.from_config(d)))
        if d.get("cause") == PROPAGATED and vals == want:
            return e_ns
    return None


def pinned_runner_rows(testimony: Testimony, propagated: bool = False) -> list[tuple[int, str]]:
    """The runner's rows, each at the instant the enforcer recorded the same limits inside
    the runner's bracket (else at the runner's acknowledgement). ``propagated`` (one front
    of a cluster): a change the front applied from the metadata log after the runner's
    acknowledgement holds from then (`applied_on_front`)."""
    out: list[tuple[int, str]] = []
    enforcer = [(ns, limit_values(Limits.from_config(d))) for ns, d in testimony.enforcer]
    for i, (ns, detail) in enumerate(testimony.runner):
        at = ns
        lo = detail.get("applied_from_mono_ns")
        if isinstance(lo, int):
            want = limit_values(Limits.from_config(detail))
            inside = [
                e_ns
                for e_ns, vals in enforcer
                if lo <= e_ns <= ns and as_stated(want, vals) == want
            ]
            if inside:
                at = inside[-1]
            elif propagated:
                at = applied_on_front(testimony, i, want) or ns
        out.append((at, json.dumps(detail)))
    return out


#: guards the creation of `Run._locks` entries (checks judged at once)
_LOCKS_GUARD = threading.Lock()


@dataclass
class Run:
    """Everything a check needs: metadata, the history DataFrame, derived frames."""

    run_dir: Path
    meta: dict[str, Any]
    spark: SparkSession
    history: DataFrame
    timeline: ConfigTimeline
    files: list[Path]
    clock_offset_ns: int | None = None  # wall (ts) minus mono_ns, from the harness rows
    testimony: Testimony = field(default_factory=lambda: Testimony([], []))
    #: history files written on another machine, moved onto the runner's clock
    #: (`align_files`): one entry per file, its shift and the shift's error bound
    aligned: list[dict[str, Any]] = field(default_factory=list)
    #: the history was read into memory (`read_history`), not scanned from Parquet
    in_memory: bool = False
    #: a cluster run narrowed to one broker (`on_broker`): that broker's node id
    node: int | None = None
    #: a run whose acceptor was killed and restarted, seen through one of its processes
    #: (`during`): that incarnation
    incarnation: Incarnation | None = None
    #: a fronted cluster seen through one broker's acceptor (`front`): that broker's id
    front_node: int | None = None
    _cache: dict[str, Any] = field(default_factory=dict)
    #: one lock per key of `_cache` (shared with it): checks judged at once build each
    #: table once (`verdict.CHECK_THREADS`)
    _locks: dict[str, threading.RLock] = field(default_factory=dict)
    #: the cached tables that stand for the narrowed broker's own (`on_broker`)
    _own: dict[str, Any] = field(default_factory=dict)
    #: every DataFrame persisted for this run (`persist`), shared with its views (a process,
    #: a front, a broker: the same list), so `release` frees them all when the run is judged
    _persisted: list[Any] = field(default_factory=list)

    @property
    def clock_error_ns(self) -> int:
        """The bound on where rows moved from another machine's clock lie (the largest
        of their files' offset bounds; 0 when nothing was moved). A file moved without a
        measured bound counts as unbounded here: 1 s."""
        bounds = [a["error_ms"] for a in self.aligned]
        if not bounds:
            return 0
        return max(1_000_000_000 if b is None else int(b * 1e6) for b in bounds)

    def wall(self, mono_ns: int) -> str | None:
        """ISO wall time of a monotonic instant (for witnesses that only carry mono_ns)."""
        if self.clock_offset_ns is None:
            return None
        import datetime as dt

        return dt.datetime.fromtimestamp(
            (mono_ns + self.clock_offset_ns) / 1e9, tz=dt.UTC
        ).isoformat()

    @property
    def target(self) -> str:
        return str(
            self.meta.get("target") or ("acceptor" if self.has_source("acceptor") else "broker")
        )

    @property
    def expect(self) -> dict[str, Any]:
        value = self.meta.get("expect") or {}
        return value if isinstance(value, dict) else {}

    @property
    def semantics(self) -> Semantics:
        """The Kafka release this run is judged as (analysis.versions): the runner's
        `kafka.version`, else run.json's `versions.kafka_semantics`, else the current; in
        the runner's `kafka.metadata` mode, else run.json's `versions.metadata`, else the
        release's default."""
        first = self.timeline.limits[0] if self.timeline.limits else None
        versions = self.meta.get("versions") or {}
        version = first.kafka_version if first is not None else None
        if version is None:
            version = versions.get("kafka_semantics")
        metadata = first.kafka_metadata if first is not None else None
        return semantics_for(version, metadata or versions.get("metadata"))

    @property
    def slack_ms(self) -> float:
        return float(self.expect.get("slack_ms") or 50.0)

    def has_source(self, source: str) -> bool:
        return (self.run_dir / "history" / source).is_dir() and any(
            f.parent.name == source for f in self.files
        )

    def source(self, source: str) -> DataFrame:
        """One source's rows, read from its own folder only (no scan of the others)."""

        def build() -> DataFrame:
            from pyspark.sql import functions as F

            files = [f for f in self.files if f.parent.name == source]
            if not files:
                return self.spark.createDataFrame([], spark_schema())
            if self.in_memory:  # one table already: filter it, read nothing again
                return self.history.where(F.col("source") == source)
            df = read_history(self.spark, files, False).where(F.col("source") == source)
            if self.front_node is not None:
                df = _on_front(df, self.front_node)
            return df if self.incarnation is None else _windowed(df, self.incarnation)

        return self.cached(f"source-{source}", build)  # type: ignore[no-any-return]

    def events(self, *names: str, source: str | None = None) -> DataFrame:
        from pyspark.sql import functions as F

        df = self.source(source) if source else self.history
        return df.where(F.col("event").isin(*names)) if names else df

    def lacks(self, *names: str, source: str, principal: bool = False) -> bool:
        """No row of these events from ``source`` (with ``principal`` set, none naming a
        principal) in this run or view. Answered from `tally` (Python, no Spark job) when
        it has none or is exact (the whole run); only a view (a process, a front) that may
        have windowed its rows away asks Spark. So a check can say there is nothing to
        judge before it plans a job."""
        counts = tally(self)
        if not any(counts.get((source, name), (0, 0))[principal] for name in names):
            return True
        if self.incarnation is None and self.front_node is None:  # every file, unwindowed
            return False
        from pyspark.sql import functions as F

        rows = self.events(*names, source=source)
        return rows.where(F.col("principal").isNotNull()).isEmpty() if principal else rows.isEmpty()

    def span_ns(self) -> tuple[int, int]:
        """First and last mono_ns of the run (parquet min/max over one column)."""

        def build() -> tuple[int, int]:
            from pyspark.sql import functions as F

            row = self.history.agg(F.min("mono_ns"), F.max("mono_ns")).first()
            if row is None or row[0] is None:
                return (0, 0)
            return (int(row[0]), int(row[1]))

        return self.cached("span", build)  # type: ignore[no-any-return]

    def scenario_t0_ns(self) -> int:
        """t = 0 of the scenario's schedule: the first `phase_start` (the runner starts its
        clock when the load flows), else the history's first row. Read once per run."""

        def build() -> int:
            row = self.events("phase_start", source="harness").agg({"mono_ns": "min"}).first()
            return int(row[0]) if row is not None and row[0] is not None else self.span_ns()[0]

        return self.cached("t0", build)  # type: ignore[no-any-return]

    def cached(self, key: str, build: Callable[[], Any]) -> Any:
        """A derived table built once per run and shared by every view of it; in a view
        narrowed to one broker (`on_broker`), the keys it narrows give that broker's part
        of the run's table (narrowed once, when first asked)."""
        with _LOCKS_GUARD:
            lock = self._locks.setdefault(key, threading.RLock())
        with lock:  # tables are built from others, never the reverse: no lock cycle
            if key not in self._cache:
                self._cache[key] = build()
            if key in self._own:
                narrow = self._own[key]
                if callable(narrow):
                    self._own[key] = narrow(self._cache[key])
                return self._own[key]
            return self._cache[key]

    def persist(self, df: DataFrame) -> DataFrame:
        """``df`` kept by Spark (memory, then disk) until `release`: the one way a derived
        table of this run or of any view of it is stored."""
        from pyspark import StorageLevel

        kept = df.persist(StorageLevel.MEMORY_AND_DISK)
        with _LOCKS_GUARD:
            self._persisted.append(kept)
        return kept

    def release(self) -> None:
        """Free every table `persist` kept for this run and its views (the analysis's end)."""
        with _LOCKS_GUARD:
            kept, self._persisted[:] = list(self._persisted), []
        for df in kept:
            df.unpersist()

    def incarnations(self) -> list[Incarnation]:
        """The acceptor's processes in this run, in order: one, unless the acceptor was
        killed (`acceptor_kill`) and restarted. Each wrote its own history files
        (``acceptor-<pid>-NNNNN.parquet``); a killed one's end at its last flush."""
        return self.cached("incarnations", lambda: acceptor_incarnations(self))  # type: ignore[no-any-return]

    def during(self, inc: Incarnation) -> Run:
        """This run seen through one acceptor process: its history files only, the client
        rows and Kafka-metrics scrapes of its time (from the previous process's kill, so an
        attempt made while no front answered and accepted by the restarted one is whole),
        every other runner row; derived tables built afresh. Checks read it like any run."""
        from dataclasses import replace

        others = {p for i in self.incarnations() if i.index != inc.index for p in i.pids}
        files = [f for f in self.files if _writer_pid(f) not in others]
        history = read_history(self.spark, files, self.in_memory)
        testimony = testimony_of(_harness_rows(files)[0])
        if self.front_node is not None:  # one front of a cluster, restarted
            history = _on_front(history, self.front_node)
            testimony = for_node(testimony, self.front_node)
        return replace(
            self,
            history=_windowed(history, inc),
            files=files,
            incarnation=inc,
            testimony=testimony,
            _cache={},
            _locks={},
            _own=dict(self._own),
        )

    def on_broker(self, node: int, narrow: dict[str, Callable[[Any], Any]]) -> Run:
        """This run seen through one broker of its cluster: the same history, limits and
        shared tables, with each table named in ``narrow`` (a `cached` key) replaced by
        ``narrow[key](the run's table)``. Checks read it like any run; `node` says which
        broker it is."""
        from dataclasses import replace

        timeline = self.timeline
        if any(d.get("node.id") is not None for _ns, d in self.testimony.runner):
            timeline = timeline_of(self.testimony, self.meta.get("limits"), node)
        return replace(self, node=node, timeline=timeline, _own=dict(narrow))

    def fronts(self) -> dict[int, set[str]]:
        """A cluster fronted by one acceptor per broker: each front's process ids by the
        broker it stands for (the `node.id` its `config` rows name); {} otherwise."""
        return self.cached("fronts", lambda: front_pids(self.files))  # type: ignore[no-any-return]

    def front(self, node: int) -> Run:
        """This run seen through the acceptor of broker ``node`` alone: its history files
        (rows and `config` rows), the client rows of the attempts that reached that broker
        (`_on_front`), every runner row; no other front's rows. A front is a separate
        enforcer (its own meters and counts, as every Kafka broker), so every acceptor
        check reads it like a run of one broker; the view names no cluster."""
        from dataclasses import replace

        others = {p for n, pids in self.fronts().items() if n != node for p in pids}
        files = [f for f in self.files if _writer_pid(f) not in others]
        history = _on_front(read_history(self.spark, files, self.in_memory), node)
        meta = {k: v for k, v in self.meta.items() if k != "brokers"}
        testimony = testimony_of(_harness_rows(files)[0])
        timeline = self.timeline
        if testimony.runner:  # each change holds on this front from when it applied it
            timeline = timeline_of(testimony, meta.get("limits"), node, propagated=True)
            testimony = for_node(testimony, node)
        return replace(
            self,
            meta=meta,
            timeline=timeline,
            history=history,
            files=files,
            node=node,
            front_node=node,
            testimony=testimony,
            _cache={},
            _locks={},
            _own={
                "kafka_metric_scrapes": lambda every: [
                    (ns, d) for ns, d in every if d.get("broker") == node
                ]
            },
        )


@dataclass(frozen=True)
class Incarnation:
    """One acceptor process of a run (`Run.incarnations`)."""

    index: int
    #: its accepting process (the first to write), and every process of it (`split`)
    pid: str
    pids: tuple[str, ...]
    files: tuple[Path, ...]
    #: its client rows and scrapes: (the previous process's kill, its own kill]; None = open
    lo_ns: int | None
    hi_ns: int | None
    #: killed (`acceptor_kill`): what it had not flushed is lost
    crashed: bool
    #: its first and last history rows (a killed one's last: its last flush)
    first_ns: int
    last_ns: int
    #: stopped with its broker (`broker_kill` on a fronted cluster): its history is whole,
    #: and the clients it left in its listening socket's queue were reset by the stop
    stopped: bool = False
    #: the process before it was stopped with its broker (not killed)
    after_stop: bool = False


_ACCEPTOR_FILE = re.compile(r"^acceptor-(?P<pid>\d+)-\d+\.parquet$")
#: an acceptor process writes its rows (`acceptor-<pid>-N`) and its `config` rows
#: (`acceptor-config-<pid>-N`, among the harness rows)
_WRITER = re.compile(r"^acceptor-(?:config-)?(?P<pid>\d+)-\d+\.parquet$")


def _writer_pid(f: Path) -> str | None:
    m = _WRITER.match(f.name)
    return m["pid"] if m and f.parent.name in ("acceptor", "harness") else None


def front_pids(files: list[Path]) -> dict[int, set[str]]:
    """Each front's process ids by its broker's node id, from the `node.id` in its
    `config` rows (``acceptor-config-<pid>-N``); {} when no front names a broker."""
    import pyarrow.parquet as pq

    out: dict[int, set[str]] = {}
    for f in files:
        m = _WRITER.match(f.name)
        if not m or f.parent.name != "harness":
            continue
        for d in pq.read_table(f, columns=["detail"])["detail"].to_pylist():
            node = HarnessConfig.parse(d).get("node.id")
            if node is not None:
                out.setdefault(int(node), set()).add(m["pid"])
                break
    return out


def _on_front(df: DataFrame, node: int) -> DataFrame:
    """Client rows of the attempts that reached broker ``node`` (their `connect_invoke`'s
    ``detail.broker``; a socket's later rows follow its attempt); every other row whole.
    A client row of no attempt with a broker (one the load could not attribute) is in no
    front's view."""
    from pyspark.sql import functions as F

    from analysis.columns import detail_col, socket_rows

    client = F.col("source") == "client"
    broker = F.when(
        F.col("event") == "connect_invoke",
        detail_col("client", "connect_invoke", "broker").cast("int"),
    )
    mine = (
        df.where(client)
        .withColumn("_broker", F.last(broker, ignorenulls=True).over(socket_rows()))
        .where(F.col("_broker") == F.lit(node))
        .drop("_broker")
    )
    return df.where(~client).unionByName(mine)


def fault_instants(run: Run, event: str, kind: str, where: Any = None) -> list[int]:
    """When the runner wrote `event` (fault_start / fault_end) for faults of `kind` (and
    `where`, a column condition, if given); in one front's view of a cluster (`Run.front`),
    only those that hit its broker or its front (``detail.broker``, default node 1)."""
    from pyspark.sql import functions as F

    df = run.events(event, source="harness").where(f"reason = '{kind}'")
    rows = (
        (df if where is None else df.where(where))
        .select("mono_ns", F.get_json_object("detail", "$.broker").alias("node"))
        .collect()
    )
    if run.front_node is not None:
        rows = [r for r in rows if int(r["node"] or 1) == run.front_node]
    return sorted(int(r["mono_ns"]) for r in rows)


def front_ends(run: Run) -> list[tuple[int, bool]]:
    """When the runner ended an acceptor process, in time order, and whether it crashed:
    `acceptor_kill` (SIGKILL, True), or a fronted broker's `broker_kill`, which stops that
    broker's front with it (SIGTERM: its history flushed, False)."""
    from pyspark.sql import functions as F

    kills = [(ns, True) for ns in fault_instants(run, "fault_start", "acceptor_kill")]
    stops = fault_instants(
        run,
        "fault_start",
        "broker_kill",
        where=F.get_json_object("detail", "$.front_stopped") == "true",
    )
    return sorted([*kills, *((ns, False) for ns in stops)])


def acceptor_files(run: Run) -> dict[str, list[Path]]:
    """Each acceptor process's history files (``acceptor-<pid>-N``), by its pid."""
    by_pid: dict[str, list[Path]] = {}
    for f in run.files:
        m = _ACCEPTOR_FILE.match(f.name)
        if f.parent.name == "acceptor" and m:
            by_pid.setdefault(m["pid"], []).append(f)
    return by_pid


def acceptor_spans(run: Run) -> dict[str, tuple[int, int]]:
    """Each acceptor process's first and last history row (mono_ns), by its pid: it writes
    none before its listeners are bound (its config, then its heartbeat's `start`): its
    first marks the end of its start-up. Read once per view (`incarnations`,
    `front_saturation`)."""
    return run.cached("acceptor_spans", lambda: _acceptor_spans(run))  # type: ignore[no-any-return]


def _acceptor_spans(run: Run) -> dict[str, tuple[int, int]]:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    out: dict[str, tuple[int, int]] = {}
    for pid, files in acceptor_files(run).items():
        ns = pa.concat_arrays(
            [pq.read_table(f, columns=["mono_ns"])["mono_ns"].combine_chunks() for f in files]
        )
        bounds = pc.min_max(ns)
        if bounds["min"].as_py() is not None:
            out[pid] = (int(bounds["min"].as_py()), int(bounds["max"].as_py()))
    return out


def acceptor_incarnations(run: Run) -> list[Incarnation]:
    """The run's acceptors, one per life between the runner's `acceptor_kill` faults (and,
    on a fronted cluster, its `broker_kill` faults, which stop the broker's front): no
    kill, no split (a `split` acceptor's processor processes write files of their own
    beside its accepting process's, and are one acceptor). Each process's files
    (``acceptor-<pid>-N``) belong to the life in which its first row falls."""
    ends = front_ends(run)
    kills = [ns for ns, _crash in ends]
    if not kills:
        return []
    by_pid = acceptor_files(run)
    lives: dict[int, list[tuple[int, int, str]]] = {}
    for pid, (lo, hi) in acceptor_spans(run).items():
        life = sum(1 for k in kills if k <= lo)
        lives.setdefault(life, []).append((lo, hi, pid))
    if len(lives) < 2:
        return []
    out: list[Incarnation] = []
    order = sorted(lives)
    for i, life in enumerate(order):
        procs = sorted(lives[life])  # the accepting process starts first
        out.append(
            Incarnation(
                index=i,
                pid=procs[0][2],
                pids=tuple(p for _lo, _hi, p in procs),
                files=tuple(sorted(f for _lo, _hi, p in procs for f in by_pid[p])),
                lo_ns=kills[life - 1] if life else None,
                hi_ns=kills[life] if i < len(order) - 1 and life < len(kills) else None,
                crashed=i < len(order) - 1 and ends[life][1],
                first_ns=min(lo for lo, _hi, _p in procs),
                last_ns=max(hi for _lo, hi, _p in procs),
                stopped=i < len(order) - 1 and not ends[life][1],
                after_stop=i > 0 and not ends[order[i - 1]][1],
            )
        )
    return out


def _windowed(df: DataFrame, inc: Incarnation) -> DataFrame:
    """Client rows and Kafka-metrics scrapes inside the incarnation's time; the rest whole."""
    from pyspark.sql import functions as F

    timed = (F.col("source") == "client") | (F.col("event") == "kafka_metrics")
    inside = F.lit(True)
    if inc.lo_ns is not None:
        inside = inside & (F.col("mono_ns") > F.lit(inc.lo_ns))
    if inc.hi_ns is not None:
        inside = inside & (F.col("mono_ns") <= F.lit(inc.hi_ns))
    return df.where(~timed | inside)


def testimony_of(cfg_rows: list[tuple[int, str | None]]) -> Testimony:
    """`config` rows split into what the runner intended and what the enforcer applied."""
    parsed = sorted(((ns, _parse(ns, d)) for ns, d in cfg_rows), key=lambda r: r[0])
    return Testimony(
        runner=[r for r in parsed if is_runner_row(r[1])],
        enforcer=[r for r in parsed if not is_runner_row(r[1])],
    )


def for_node(testimony: Testimony, node: int | None) -> Testimony:
    """The runner's rows for one broker of a cluster: once a broker has a per-broker change
    of its own (Kafka's BROKER resource "<id>"), the runner writes, for every change, one
    row of the cluster's limits and one per such broker (``node.id``) with that broker's;
    broker ``node`` is judged by its own row of each change where there is one, else by the
    cluster's. ``node`` None: the cluster's rows only."""
    chosen: dict[tuple[Any, Any], tuple[int, dict[str, Any]]] = {}
    for ns, d in testimony.runner:
        tagged = d.get("node.id")
        if tagged is not None and tagged != node:
            continue
        key = (d.get("cause"), d.get("applied_from_mono_ns", ns))
        if tagged is not None or key not in chosen:
            chosen[key] = (ns, d)
    return Testimony(sorted(chosen.values(), key=lambda r: r[0]), testimony.enforcer)


def timeline_of(
    testimony: Testimony, limits: Any, node: int | None = None, propagated: bool = False
) -> ConfigTimeline:
    """The limits judged at every instant of a run with runner rows: the runner's rows for
    ``node`` (`for_node`), each pinned where the enforcer recorded it
    (`pinned_runner_rows`)."""
    pinned = pinned_runner_rows(for_node(testimony, node), propagated=propagated)
    return config_timeline(pinned, limits if isinstance(limits, dict) else None)


def _harness_rows(files: list[Path]) -> tuple[list[tuple[int, str | None]], int | None]:
    """`config` rows and the wall-minus-monotonic clock offset (ns), read with Arrow from
    the small harness parts: a few rows, no Spark job."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    rows: list[tuple[int, str | None]] = []
    offsets: list[int] = []
    for f in files:
        if f.parent.name != "harness":
            continue
        t = pq.read_table(f, columns=["source", "event", "ts", "mono_ns", "detail"])
        ts_us = t["ts"].cast("int64").to_pylist()
        offsets += [u * 1000 - m for u, m in zip(ts_us, t["mono_ns"].to_pylist(), strict=True)]
        t = t.filter(pc.and_(pc.equal(t["event"], "config"), pc.equal(t["source"], "harness")))
        rows += zip(t["mono_ns"].to_pylist(), t["detail"].to_pylist(), strict=True)
    offset = sorted(offsets)[len(offsets) // 2] if offsets else None
    return rows, offset


def align_files(
    run_dir: Path, files: list[Path], reference: Any
) -> tuple[list[Path], list[dict[str, Any]]]:
    """``files`` with each one written on another machine (another boot id,
    harness.history.clocks) replaced by a copy moved onto the runner's clock (run.json
    ``clock``), under ``report/.aligned/<source>/``: the originals are never changed. A
    run without a recorded clock (older runs) is read as it is."""
    if not isinstance(reference, dict) or not reference.get("boot_id"):
        return files, []
    import os

    import pyarrow.parquet as pq

    from harness.history.clocks import alignment, shift_table

    out: list[Path] = []
    notes: list[dict[str, Any]] = []
    for f in files:
        shift = alignment(pq.read_schema(f).metadata, reference)
        if shift is None:
            out.append(f)
            continue
        dest = run_dir / "report" / ".aligned" / f.parent.name / f.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.tmp")
        pq.write_table(shift_table(pq.read_table(f), shift.mono_ns, shift.wall_ns), tmp)
        os.replace(tmp, dest)
        out.append(dest)
        notes.append(
            {"file": str(f.relative_to(run_dir)), "shift_ms": shift.mono_ns / 1e6,
             "error_ms": None if shift.error_ns is None else shift.error_ns / 1e6}
        )  # fmt: skip
    return out, notes


def tally(run: Run) -> dict[tuple[str, str], tuple[int, int]]:
    """Rows per (source, event) in the run's files, and of those the rows naming a
    principal: read with Arrow (three columns, no Spark job), once per run or view."""

    def build() -> dict[tuple[str, str], tuple[int, int]]:
        import pyarrow.parquet as pq

        out: dict[tuple[str, str], tuple[int, int]] = {}
        for f in run.files:
            t = pq.read_table(f, columns=["source", "event", "principal"])
            d = (
                t.group_by(["source", "event"])
                .aggregate([("event", "count"), ("principal", "count")])
                .to_pydict()
            )
            keyed = zip(
                d["source"], d["event"], d["event_count"], d["principal_count"], strict=True
            )
            for source, event, rows, named in keyed:
                seen = out.get((source, event), (0, 0))
                out[(source, event)] = (seen[0] + rows, seen[1] + named)
        return out

    return run.cached("tally", build)  # type: ignore[no-any-return]


#: a history of fewer rows than this is read once into the driver and handed to Spark as
#: one in-memory table: every check's jobs then scan memory, not a few hundred small
#: Parquet parts each (measured in bench/analysis.py and docs/analysis.md, "speed")
IN_MEMORY_EVENTS = 100_000


def _rows(f: Path) -> int:
    import pyarrow.parquet as pq

    return int(pq.ParquetFile(f).metadata.num_rows)


def fits_in_memory(files: list[Path]) -> bool:
    """Fewer than `IN_MEMORY_EVENTS` rows in these files (their Parquet footers)?"""
    return 0 < sum(_rows(f) for f in files) < IN_MEMORY_EVENTS


def read_history(spark: SparkSession, files: list[Path], in_memory: bool) -> DataFrame:
    """The history as one DataFrame: in memory (`fits_in_memory`, read with Arrow), else a
    Parquet scan; the same schema and rows either way (tests/spark/test_in_memory.py
    judges a run both ways)."""
    import pyarrow.parquet as pq

    if in_memory:
        import pyarrow as pa

        from harness.history.schema import SCHEMA

        tables = [pq.read_table(f).select(SCHEMA.names).cast(SCHEMA) for f in files]
        table = pa.concat_tables([t.replace_schema_metadata(None) for t in tables])
        return spark.createDataFrame(table, schema=spark_schema())
    return spark.read.schema(spark_schema()).parquet(*[str(f) for f in files])


def load_run(spark: SparkSession, run_dir: str | Path) -> Run:
    """Open a run directory for analysis; a missing or empty one is a clear error."""
    path = Path(run_dir)
    if not path.is_dir():
        raise RunDirError(f"{path}: no such run directory (expected runs/<run-id>/ with history/)")
    files = history_files(path)
    if not files:
        raise RunDirError(
            f"{path}: no history (no *.parquet under {path / 'history'}); "
            "was the run started, or is it still writing its first part?"
        )
    meta = read_run_json(path)
    files, aligned = align_files(path, files, meta.get("clock"))
    in_memory = fits_in_memory(files)
    history = read_history(spark, files, in_memory)
    limits = meta.get("limits") if isinstance(meta.get("limits"), dict) else None
    cfg_rows, offset = _harness_rows(files)
    testimony = testimony_of(cfg_rows)
    if testimony.runner:  # judge by what the runner intended, never the enforcer's word
        timeline = timeline_of(testimony, limits)
    else:
        timeline = config_timeline(cfg_rows, limits)
    return Run(
        path,
        meta,
        spark,
        history,
        timeline,
        files,
        clock_offset_ns=offset,
        testimony=testimony,
        aligned=aligned,
        in_memory=in_memory,
    )
