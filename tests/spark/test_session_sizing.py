"""A small run's shuffle settings apply for the analysis only; the caller's come back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from analysis.load import history_rows
from analysis.session import SMALL_RUN_EVENTS, SMALL_RUN_JVM, sized_conf, sized_for
from analysis.synth import SynthSpec, generate


def test_small_run_settings_are_scoped_to_the_analysis(spark: Any) -> None:
    assert sized_conf(SMALL_RUN_EVENTS) == {}  # a large run keeps the session's settings
    spark.conf.set("spark.sql.shuffle.partitions", "3")
    spark.conf.set("spark.sql.adaptive.enabled", "true")
    try:
        with sized_for(spark, SMALL_RUN_EVENTS - 1):
            assert spark.conf.get("spark.sql.shuffle.partitions") == "1"
            assert spark.conf.get("spark.sql.adaptive.enabled") == "false"
            # interpreted expressions, no generated stage: what a small run is judged with
            assert spark.conf.get("spark.sql.codegen.factoryMode") == "NO_CODEGEN"
            assert spark.conf.get("spark.sql.codegen.wholeStage") == "false"
        assert spark.conf.get("spark.sql.shuffle.partitions") == "3"
        assert spark.conf.get("spark.sql.adaptive.enabled") == "true"
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", "4")


def test_history_rows_counts_the_parquet_footers(tmp_path: Path) -> None:
    info = generate(tmp_path / "run", SynthSpec(run_id="rows", cycles=1, target_events=2000))
    assert history_rows(tmp_path / "run") == info["events"]
    assert history_rows(tmp_path / "missing") == 0


def test_a_small_runs_jvm_keeps_native_reflection_and_one_partition(spark: Any) -> None:
    """The tests' session is a small run's (`build_session(small=True)`)."""
    conf = spark.sparkContext.getConf()
    assert SMALL_RUN_JVM in (conf.get("spark.driver.extraJavaOptions") or "")
    assert "-Dsun.reflect.inflationThreshold=2147483647" in SMALL_RUN_JVM
    assert spark.sparkContext.defaultParallelism == 1
