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

By what it loads: `files` (the history's parts, their footers and tally, run.json, the
harness rows), `clocks` (files moved onto the runner's clock), `timeline` (the limits at
every instant), `testimony` (the runner's rows against the enforcer's, per broker), `run`
(`Run` and its views), `incarnations` (an acceptor's processes), `fronts` (one acceptor per
broker); `load_run` here puts them together. Every name is imported from this package.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from analysis.load.clocks import align_files
from analysis.load.files import (
    RunDirError,
    detail_mentions,
    harness_rows,
    history_files,
    history_rows,
    history_table,
    read_history,
    read_run_json,
    row_count,
    spark_schema,
    tally,
    tally_of,
)
from analysis.load.fronts import front_pids
from analysis.load.incarnations import (
    Incarnation,
    acceptor_files,
    acceptor_incarnations,
    acceptor_spans,
    fault_instants,
    front_ends,
)
from analysis.load.run import Run
from analysis.load.testimony import (
    PROPAGATED,
    Testimony,
    applied_on_front,
    as_stated,
    for_node,
    pinned_runner_rows,
    testimony_of,
    timeline_of,
)
from analysis.load.timeline import ConfigTimeline, config_timeline, is_runner_row, limit_values

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "IN_MEMORY_EVENTS",
    "PROPAGATED",
    "ConfigTimeline",
    "Incarnation",
    "Run",
    "RunDirError",
    "Testimony",
    "acceptor_files",
    "acceptor_incarnations",
    "acceptor_spans",
    "align_files",
    "applied_on_front",
    "as_stated",
    "config_timeline",
    "detail_mentions",
    "fault_instants",
    "fits_in_memory",
    "for_node",
    "front_ends",
    "front_pids",
    "history_files",
    "history_rows",
    "history_table",
    "is_runner_row",
    "limit_values",
    "load_run",
    "pinned_runner_rows",
    "read_history",
    "read_run_json",
    "spark_schema",
    "tally",
    "tally_of",
    "testimony_of",
    "timeline_of",
]


#: a history of fewer rows than this is read once into the driver and handed to Spark as
#: one in-memory table: every check's jobs then scan memory, not a few hundred small
#: Parquet parts each (measured in bench/analysis.py and docs/analysis.md, "speed")
IN_MEMORY_EVENTS = 100_000


def fits_in_memory(files: list[Path]) -> bool:
    """Fewer than `IN_MEMORY_EVENTS` rows in these files (their Parquet footers)?"""
    return 0 < sum(row_count(f) for f in files) < IN_MEMORY_EVENTS


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
    table = history_table(files) if in_memory else None
    if table is not None:  # read once: the DataFrame's rows and the tally's
        history = spark.createDataFrame(table, schema=spark_schema())
    else:
        history = read_history(spark, files, in_memory)
    limits = meta.get("limits") if isinstance(meta.get("limits"), dict) else None
    cfg_rows, offset = harness_rows(files)
    testimony = testimony_of(cfg_rows)
    if testimony.runner:  # judge by what the runner intended, never the enforcer's word
        timeline = timeline_of(testimony, limits)
    else:
        timeline = config_timeline(cfg_rows, limits)
    run = Run(
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
    if table is not None:
        run.cached("tally", lambda: tally_of(table))
    return run
