"""`Run.persist` keeps a table as rows (a local checkpoint) while whole-stage code generation
is off (a small run's analysis), as Spark's columnar cache otherwise; `Run.release` frees
either way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from analysis.load import load_run
from analysis.synth import SynthSpec, generate


def _stored_rdds(spark: Any) -> set[int]:
    return {info.id() for info in spark.sparkContext._jsc.sc().getRDDStorageInfo()}


def _run(spark: Any, synth_root: Path) -> Any:
    run_dir = synth_root / "kept-tables"
    if not (run_dir / "run.json").exists():
        generate(run_dir, SynthSpec(run_id="kept", cycles=1, target_events=1500))
    return load_run(spark, run_dir)


def test_a_small_runs_table_is_kept_as_rows_and_released(spark: Any, synth_root: Path) -> None:
    assert spark.conf.get("spark.sql.codegen.wholeStage") == "false"  # the tests' session
    run = _run(spark, synth_root)
    before = _stored_rdds(spark)
    df = run.events("accept", source="acceptor").select("conn_id", "mono_ns")
    kept = run.persist(df)
    assert not kept.is_cached  # no columnar cache: its scans need no generated accessor
    stored = _stored_rdds(spark) - before
    assert len(stored) == 1  # checkpointed now (eager), its blocks in the block manager
    assert kept.count() == df.count() > 0
    run.release()
    assert _stored_rdds(spark) - before == set()


def test_with_whole_stage_generation_a_table_is_cached(spark: Any, synth_root: Path) -> None:
    run = _run(spark, synth_root)
    spark.conf.set("spark.sql.codegen.wholeStage", "true")
    try:
        kept = run.persist(run.events("accept", source="acceptor").select("conn_id"))
        assert kept.is_cached
        assert kept.count() > 0
        run.release()
        assert not kept.is_cached
    finally:
        spark.conf.set("spark.sql.codegen.wholeStage", "false")
