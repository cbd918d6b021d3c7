"""`Run`: everything a check reads (metadata, the history, the timeline, derived tables built once
per run or view) and its views (one acceptor process, one broker, one front)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analysis.load.files import detail_mentions, harness_rows, read_history, tally
from analysis.load.fronts import front_pids, on_front, writer_pid
from analysis.load.incarnations import Incarnation, acceptor_incarnations, within_incarnation
from analysis.load.testimony import Testimony, for_node, testimony_of, timeline_of
from analysis.load.timeline import ConfigTimeline
from analysis.versions import Semantics, semantics_for

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import DataFrame, SparkSession


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
            if not files:  # no row: the history's columns, nothing read (Spark prunes it)
                return self.history.where(F.lit(False))
            if self.in_memory:  # one table already: filter it, read nothing again
                return self.history.where(F.col("source") == source)
            df = read_history(self.spark, files, False).where(F.col("source") == source)
            if self.front_node is not None:
                df = on_front(df, self.front_node)
            return df if self.incarnation is None else within_incarnation(df, self.incarnation)

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

    def lacks_detail(self, key: str, *, source: str) -> bool:
        """No row from ``source`` names ``key`` in its ``detail`` (`detail_mentions`: the
        JSON text searched with Arrow, no Spark job). True proves it for this run and
        every view of it; False only that some row may."""
        return not detail_mentions(self, source, key)

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
        table of this run or of any view of it is stored.

        Kept as Spark's columnar cache, or, while whole-stage code generation is off (a
        small run's analysis: `session.sized_conf`), as rows (a local checkpoint, made
        now): without whole-stage generation a cached table is read back row by row
        through column accessors generated and compiled (Janino) for each set of columns
        a query reads, 27 classes in a cold 4.4 k-event analysis; a checkpoint's rows are
        read as they are (that analysis's JVM CPU 9.1 -> 7.4 s, bench/results/NOTES.md)."""
        from pyspark import StorageLevel

        if self.spark.conf.get("spark.sql.codegen.wholeStage", "true") == "false":
            kept = df.localCheckpoint(eager=True, storageLevel=StorageLevel.MEMORY_AND_DISK)
        else:
            kept = df.persist(StorageLevel.MEMORY_AND_DISK)
        with _LOCKS_GUARD:
            self._persisted.append(kept)
        return kept

    def release(self) -> None:
        """Free every table `persist` kept for this run and its views (the analysis's end):
        a cached one unpersisted, a checkpointed one's blocks (its RDD's) removed."""
        with _LOCKS_GUARD:
            kept, self._persisted[:] = list(self._persisted), []
        for df in kept:
            if df.is_cached:
                df.unpersist()
            else:  # a local checkpoint: the plan is a scan of the checkpointed RDD
                df._jdf.logicalPlan().rdd().unpersist(False)

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
        files = [f for f in self.files if writer_pid(f) not in others]
        history = read_history(self.spark, files, self.in_memory)
        testimony = testimony_of(harness_rows(files)[0])
        if self.front_node is not None:  # one front of a cluster, restarted
            history = on_front(history, self.front_node)
            testimony = for_node(testimony, self.front_node)
        return replace(
            self,
            history=within_incarnation(history, inc),
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
        (`on_front`), every runner row; no other front's rows. A front is a separate
        enforcer (its own meters and counts, as every Kafka broker), so every acceptor
        check reads it like a run of one broker; the view names no cluster."""
        from dataclasses import replace

        others = {p for n, pids in self.fronts().items() if n != node for p in pids}
        files = [f for f in self.files if writer_pid(f) not in others]
        history = on_front(read_history(self.spark, files, self.in_memory), node)
        meta = {k: v for k, v in self.meta.items() if k != "brokers"}
        testimony = testimony_of(harness_rows(files)[0])
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
