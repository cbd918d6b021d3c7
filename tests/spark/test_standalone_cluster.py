"""`harness analyze --spark-master spark://…` on a real standalone Spark cluster.

A master and one worker are started from the installed PySpark (`bin/spark-class`,
org.apache.spark.deploy.master.Master / worker.Worker) on 127.0.0.1 with free ports; a
small synthetic run is analysed there by `harness analyze` in a subprocess (one
SparkContext per process: the tests' local session lives in this one), and its verdict
must equal the local-mode verdict of the same history, check by check. The cluster's
processes are stopped in the fixture's teardown (SIGTERM to each process group, then
SIGKILL after a bounded wait).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from analysis import analyze_run
from analysis.synth import SynthSpec, generate
from base.localnet import free_port
from base.supervisor import ManagedProcess
from bench.catalog_verdicts import differences

pytestmark = pytest.mark.spark

START_TIMEOUT_S = 60.0


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def _wait_for(proc: ManagedProcess, needle: str, timeout: float) -> None:
    """Until `needle` is in the process's log; a process that exits or a timeout fails."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if needle in proc.log_path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            pytest.fail(f"{proc.name} exited ({proc.poll()}) before '{needle}':\n{proc.tail()}")
        time.sleep(0.2)
    pytest.fail(f"{proc.name}: no '{needle}' within {timeout:.0f} s:\n{proc.tail()}")


@pytest.fixture
def standalone_master(tmp_path: Path) -> Iterator[tuple[str, ManagedProcess, ManagedProcess]]:
    """A standalone master with one registered worker (1 core, 1 GiB): URL, master, worker."""
    spark_class = _spark_home() / "bin" / "spark-class"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java: a standalone Spark cluster needs a JVM")
    env = {
        **os.environ,
        "SPARK_HOME": str(_spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_DIRS": str(tmp_path / "local"),
        "PYSPARK_PYTHON": sys.executable,
    }
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    procs: list[ManagedProcess] = []
    try:
        argv = [str(spark_class), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                "--port", str(port), "--webui-port", str(free_port())]  # fmt: skip
        master = ManagedProcess(
            "spark-master",
            argv,
            log_path=tmp_path / "master.log",
            env=env,
        )
        procs.append(master)
        _wait_for(master, "I have been elected leader", START_TIMEOUT_S)
        argv = [str(spark_class), "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                "--port", str(free_port()), "--webui-port", str(free_port()), "--cores", "1",
                "--memory", "1g", "--work-dir", str(tmp_path / "work"), url]  # fmt: skip
        worker = ManagedProcess(
            "spark-worker",
            argv,
            log_path=tmp_path / "worker.log",
            env=env,
        )
        procs.append(worker)
        _wait_for(master, "Registering worker", START_TIMEOUT_S)
        yield url, master, worker
    finally:
        for proc in reversed(procs):  # worker first; each stop is bounded (TERM, then KILL)
            proc.stop(timeout=10.0)


def test_cluster_verdict_equals_local(
    spark: Any,
    standalone_master: tuple[str, ManagedProcess, ManagedProcess],
    synth_root: Path,
    tmp_path: Path,
) -> None:
    url, master, worker = standalone_master
    local_run = synth_root / "cluster-local"
    if not (local_run / "run.json").exists():
        generate(local_run, SynthSpec(run_id="cluster", cycles=1, target_events=3000))
    cluster_run = tmp_path / "cluster-run"
    shutil.copytree(local_run / "history", cluster_run / "history")
    shutil.copy2(local_run / "run.json", cluster_run / "run.json")

    local = analyze_run(local_run, spark=spark, report=False)
    argv = [sys.executable, "-m", "harness", "analyze", str(cluster_run), "--no-html",
            "--spark-master", url]  # fmt: skip
    proc = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    remote = json.loads((cluster_run / "report" / "verdict.json").read_text())
    # the analysis really ran on the cluster: the master registered it, the worker ran
    # its executor
    assert "Registering app harness-analyze" in master.log_path.read_text()
    assert "Asked to launch executor" in worker.log_path.read_text()
    assert differences(local, remote) == []
    assert local["verdict"] == remote["verdict"] == "pass"
    assert {c["name"] for c in local["checks"]} == {c["name"] for c in remote["checks"]}
