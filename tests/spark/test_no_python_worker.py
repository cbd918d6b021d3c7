"""An analysis starts no Python worker: every table the driver hands Spark goes as Arrow
(`columns.driver_table`), never as a list PySpark makes a Python RDD of, whose first job
starts Spark's Python worker daemon and forks a worker (0.7 s and more of a cold analysis)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from analysis.columns import driver_table
from analysis.synth import SynthSpec, generate

#: run in a process of its own: a JVM no other test's Python worker lives in
SCRIPT = """
import sys
from pathlib import Path
from pyspark import SparkContext
from analysis import analyze_run
from analysis.session import build_session
from base import procfs
spark = build_session("local[2]", small=True)
verdict = analyze_run(Path(sys.argv[1]), spark=spark, report=False)
jvm = SparkContext._gateway.proc.pid
children = []
for entry in procfs.PROC.iterdir():
    if entry.name.isdigit():
        try:
            stat = procfs.read_stat(entry.name)
        except OSError:
            continue
        if stat.ppid == jvm and stat.comm.startswith("python"):  # pyspark.daemon, its workers
            children.append(stat.comm)
print("verdict", verdict["verdict"], "python children", sorted(children))
spark.stop()
"""


def test_a_conforming_analysis_forks_no_python_worker(synth_root: Path) -> None:
    run_dir = synth_root / "no-python-worker"
    if not (run_dir / "run.json").exists():
        # client_acceptor_agreement hands Spark the clients' load ends as a driver table
        generate(run_dir, SynthSpec(run_id="no-python-worker", scale=0.28, cycles=1))
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(run_dir)],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    ).stdout
    assert "python children []" in out, out
    assert "verdict pass" in out, out


def test_driver_table_holds_the_rows_in_their_columns_and_none(spark: Any) -> None:
    rows = [("10.0.0.1", 5, 9092), ("10.0.0.2", None, 9093)]
    df = driver_table(spark, rows, [("ip", "string"), ("n", "long"), ("port", "int")])
    assert [tuple(r) for r in df.orderBy("ip").collect()] == rows
    assert df.dtypes == [("ip", "string"), ("n", "bigint"), ("port", "int")]
    empty = driver_table(spark, [], [("stall_a", "long"), ("stall_b", "long")])
    assert empty.dtypes == [("stall_a", "bigint"), ("stall_b", "bigint")]
    assert empty.count() == 0
