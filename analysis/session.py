"""One SparkSession per analysis, bound to loopback and quiet.

`local[*]` by default; `--spark-master` or SPARK_MASTER points at a cluster (history is
Parquet, so any cluster that sees the run directory can read it). PYSPARK_PYTHON must be
this interpreter before the JVM starts, or pandas UDF workers miss pyarrow.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING

from base import procfs
from base.javapath import locate_java

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Below this many history rows a run is all per-job overhead (see `sized_for`).
SMALL_RUN_EVENTS = 200_000
#: The open-file limit an analysis needs: Spark's driver JVM alone opens about 300 files
#: (its jars) before it answers (measured: it fails to start at `ulimit -n 300`, starts
#: at 384), and the analysis then reads every history part; 1024 leaves room for both.
MIN_OPEN_FILES = 1024


#: a small run's expressions interpreted, no whole-stage code generation (`sized_conf`);
#: `spark.sql.codegen.factoryMode` is Spark's own switch between generated and interpreted
#: expressions (FALLBACK, its default, generates and falls back on a compile error)
SMALL_RUN_CODEGEN = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}
#: the driver JVM of a small run's analysis (`build_session`): C1-compiled code only, and
#: core reflection's native accessors kept. py4j calls every JVM method it is asked for by
#: reflection, and JDK 17 replaces a method's native accessor by a generated class after
#: 15 calls (`sun.reflect.inflationThreshold`): 548 classes made and loaded in a cold
#: 4.4 k-event analysis, for calls whose count a short analysis never repays (its JVM CPU
#: 8.4 -> 7.2 s; bench/results/NOTES.md). Ignored by JDK 18 and later, whose reflection
#: is method handles.
SMALL_RUN_JVM = (
    "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m "
    "-Dsun.reflect.inflationThreshold=2147483647"
)
#: where the driver JVM's class archives live (`analysis.cds` makes them; beside Kafka's
#: jars, `make clean` removes both)
CACHE = Path(__file__).resolve().parent.parent / ".cache" / "spark-cds"
#: set by `build` for the JVM that writes the archive
CDS_DUMP_ENV = "HARNESS_SPARK_CDS_DUMP"
CDS_OFF_ENV = "HARNESS_SPARK_CDS"


def java_path() -> Path | None:
    """The `java` PySpark launches (`base.javapath`), its links resolved."""
    found = locate_java()
    return None if found is None else Path(found).resolve()


def archive_path() -> Path | None:
    """The archive's name for this JVM build and Spark classpath (None: no java found)."""
    java = java_path()
    if java is None:
        return None
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    key = f"{java}:{java.stat().st_mtime_ns}:{pyspark.__version__}:{jars.stat().st_mtime_ns}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return CACHE / f"spark-{pyspark.__version__}-{digest}.jsa"


def cds_options() -> str:
    """The driver JVM's options for its class archive (`analysis.cds`): write it (the
    JVM `analysis.cds.build` starts), read it (when made), or nothing."""
    dump = os.environ.get(CDS_DUMP_ENV)
    if dump:
        return f"-XX:ArchiveClassesAtExit={dump}"
    if os.environ.get(CDS_OFF_ENV) == "off":
        return ""
    path = archive_path()
    if path is None or not path.is_file():
        return ""
    return f"-XX:SharedArchiveFile={path} -Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off"


#: the driver's scratch folders (Spark's `spark.local.dir`: its block manager's files, the
#: shuffle's, a small run's kept tables): one per process that starts a JVM, named by its pid
#: and start time. A JVM killed before its shutdown hooks ran (an analysis server whose
#: client went away: `analysis.server`) leaves its folder behind; the next session started
#: on the machine removes it (`sweep_local_dirs`).
LOCAL_DIR_PREFIX = "harness-spark-"


def local_dir() -> Path:
    """This process's driver scratch folder (in ``TMPDIR``)."""
    pid = os.getpid()
    return Path(tempfile.gettempdir()) / f"{LOCAL_DIR_PREFIX}{pid}-{procfs.start_time(pid)}"


def sweep_local_dirs() -> list[Path]:
    """Remove the scratch folders (in ``TMPDIR``) of processes that are gone; returns them."""
    removed = []
    for path in Path(tempfile.gettempdir()).glob(f"{LOCAL_DIR_PREFIX}*"):
        pid, _, started = path.name.removeprefix(LOCAL_DIR_PREFIX).partition("-")
        if pid.isdigit() and started and not procfs.alive(int(pid), started):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


class EnvironmentProblem(RuntimeError):
    """The machine cannot run the analysis as set up (said before any JVM starts)."""


def ensure_open_files(minimum: int = MIN_OPEN_FILES) -> int:
    """Raise this process's soft open-file limit to its hard one (no privilege needed; the
    JVM inherits it) and return it; an EnvironmentProblem when even that is below
    ``minimum``."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 65_536)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    if soft != resource.RLIM_INFINITY and soft < minimum:
        raise EnvironmentProblem(
            f"the open-file limit is {soft} (ulimit -n) and the analysis needs at least "
            f"{minimum}: Spark's JVM alone opens about 300 files before it starts; raise it "
            "(ulimit -n 4096) and run `harness analyze` again"
        )
    return int(soft)


def build_session(
    master: str | None = None, app_name: str = "harness-analyze", small: bool = False
) -> SparkSession:
    """The session; `small` (a history under SMALL_RUN_EVENTS rows) starts the driver JVM
    with C1-compiled code only (`SMALL_RUN_JVM`, -XX:TieredStopAtLevel=1): a short
    analysis spends much of its CPU in the C2 compiler, whose code arrives too late to pay
    for itself (a cold 12 k event analysis took 19-23 s instead of 31-33 s at load average
    ~5), with the class archive `make setup` made (`analysis.cds`), if there is one, and
    with one partition for a table made from the driver's rows (the history, read into
    memory: `load.IN_MEMORY_EVENTS`), not four slices of a few hundred rows, each a task
    of every job that scans it. Only a JVM this call starts is affected; a large run keeps
    the default tiered compilation and four partitions."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    master = master or os.environ.get("SPARK_MASTER") or "local[*]"
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "4")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "200000")
        .config("spark.sql.adaptive.enabled", "true")
        # lower() by the JVM's case mapping, not ICU's: Spark 4's default builds an ICU break
        # iterator per row (7 % of the driver JVM's samples judging five small histories,
        # JFR), and the strings lowered here are Kafka listener names, ASCII
        .config("spark.sql.icu.caseMappings.enabled", "false")
        .config("spark.driver.memory", os.environ.get("SPARK_DRIVER_MEMORY", "3g"))
        .config("spark.python.worker.reuse", "true")
        .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
    )
    if small:
        builder = builder.config(
            "spark.driver.extraJavaOptions", f"{SMALL_RUN_JVM} {cds_options()}".strip()
        ).config("spark.default.parallelism", "1")
    if "SPARK_LOCAL_DIRS" not in os.environ:  # an operator's own choice wins (Spark's rule)
        sweep_local_dirs()
        own = local_dir()
        own.mkdir(exist_ok=True)
        builder = builder.config("spark.local.dir", str(own))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def sized_conf(events: int) -> dict[str, str]:
    """Shuffle settings for a history of `events` rows.

    A small run's analysis is all per-job overhead: adaptive execution materialises every
    shuffle as a job of its own and re-plans after it (99 jobs instead of 48 for the 12 k
    event bench run, 9.1 s against 5.6 s warm), and four shuffle partitions of a few kB
    are four tasks for nothing. Nor does generated code pay for itself on a few thousand
    rows: every new query's Java source is compiled (Janino) before a row is read, so a
    small run's expressions are interpreted and no stage is fused into one generated class
    (`SMALL_RUN_CODEGEN`; the Spark tests' module of five restart histories: 84 -> 63
    CPU-s). Large runs keep adaptive execution, four partitions and generated code.
    """
    if events < SMALL_RUN_EVENTS:
        return {
            "spark.sql.adaptive.enabled": "false",
            "spark.sql.shuffle.partitions": "1",
            **SMALL_RUN_CODEGEN,
        }
    return {}


@contextmanager
def sized_for(spark: SparkSession, events: int) -> Iterator[None]:
    """`sized_conf(events)` set on the session for the block, then the caller's values back.

    A block ending on an exception keeps that exception: a signal that lands inside a py4j
    call leaves its connection holding that call's answer, so the next call (this restore)
    fails with a py4j error that would otherwise replace the interruption."""
    conf = sized_conf(events)
    before = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    except BaseException:
        with suppress(Exception):
            _restore(spark, before)
        raise
    _restore(spark, before)


def _restore(spark: SparkSession, before: dict[str, str | None]) -> None:
    for key, old in before.items():
        if old is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, old)


def end_jvm(timeout_s: float = 30.0) -> None:
    """End the driver JVM this process launched, once its session stopped, and wait for it:
    for a process about to exit (`harness analyze`), which then leaves no JVM behind.

    py4j's gateway is shut first, so the JVM exits at once: otherwise its threads blocked in
    native socket reads hold HotSpot's exit for 300 ms (`VM_Exit` waits that long for
    threads in native code), and whoever reads this process's output waits for the JVM's
    too (it inherits stdout). A JVM still there after ``timeout_s`` is killed; then its
    scratch folder (`local_dir`) is removed."""
    import subprocess

    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None or SparkContext._active_spark_context is not None:
        return
    proc = getattr(gateway, "proc", None)
    gateway.shutdown()
    SparkContext._gateway = None
    SparkContext._jvm = None
    if proc is None:
        return
    proc.stdin.close()  # PythonGatewayServer exits when its stdin closes
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    shutil.rmtree(local_dir(), ignore_errors=True)  # emptied by the JVM's hooks, unless killed
