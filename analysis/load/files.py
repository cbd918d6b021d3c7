"""The run directory's files: the history's Parquet parts (listed, counted from their
footers, read with the explicit schema, tallied per event), run.json, and the harness
rows' `config` rows and clock offset."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from analysis.load.view import RunView


class RunDirError(ValueError):
    """The run directory cannot be analysed (missing, empty, unreadable)."""


def spark_schema() -> Any:
    """The shared Arrow schema (base.history.schema) as a Spark StructType."""
    from pyspark.sql import types as T

    from base.history.schema import SCHEMA

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


def harness_rows(files: list[Path]) -> tuple[list[tuple[int, str | None]], int | None]:
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


#: the columns `tally_of` reads
TALLY_COLUMNS = ["source", "event", "principal"]


def tally_of(table: Any) -> dict[tuple[str, str], tuple[int, int]]:
    """Rows per (source, event) of an Arrow table of history rows, and of those the rows
    naming a principal."""
    d = (
        table.group_by(["source", "event"])
        .aggregate([("event", "count"), ("principal", "count")])
        .to_pydict()
    )
    keyed = zip(d["source"], d["event"], d["event_count"], d["principal_count"], strict=True)
    return {(source, event): (rows, named) for source, event, rows, named in keyed}


def tally(run: RunView) -> dict[tuple[str, str], tuple[int, int]]:
    """`tally_of` the run's files: three columns read with Arrow (no Spark job), once per
    run or view (`load_run` gives an in-memory run the tally of the table it read)."""

    def build() -> dict[tuple[str, str], tuple[int, int]]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        tables = [pq.read_table(f, columns=TALLY_COLUMNS) for f in run.files]
        if not tables:
            return {}
        return tally_of(pa.concat_tables([t.replace_schema_metadata(None) for t in tables]))

    return run.cached("tally", build)  # type: ignore[no-any-return]


def detail_mentions(run: RunView, source: str, key: str) -> bool:
    """Whether some row of ``source`` may name ``key`` in its ``detail``: the JSON text of
    that source's files searched for ``"key"`` with Arrow (no Spark job), once per run.
    False proves that no row names it, in the run and in every view of it (a view's rows
    come from these files); True only that one may."""

    def build() -> bool:
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        needle = json.dumps(key)
        for f in run.files:
            if f.parent.name != source:
                continue
            detail = pq.read_table(f, columns=["detail"])["detail"]
            if pc.any(pc.match_substring(detail, needle)).as_py():
                return True
        return False

    return run.cached(f"detail-mentions-{source}-{key}", build)  # type: ignore[no-any-return]


def row_count(f: Path) -> int:
    import pyarrow.parquet as pq

    return int(pq.ParquetFile(f).metadata.num_rows)


def read_history(spark: SparkSession, files: list[Path], in_memory: bool) -> DataFrame:
    """The history as one DataFrame: in memory (`fits_in_memory`, read with Arrow), else a
    Parquet scan; the same schema and rows either way (tests/spark/test_in_memory.py
    judges a run both ways)."""
    if in_memory:
        return spark.createDataFrame(history_table(files), schema=spark_schema())
    return spark.read.schema(spark_schema()).parquet(*[str(f) for f in files])


def history_table(files: list[Path]) -> Any:
    """The history of these files as one Arrow table of the shared schema."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from base.history.schema import SCHEMA

    tables = [pq.read_table(f).select(SCHEMA.names).cast(SCHEMA) for f in files]
    return pa.concat_tables([t.replace_schema_metadata(None) for t in tables])
