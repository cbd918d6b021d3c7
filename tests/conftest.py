"""Test layout: unit (no JVM, no sockets), local (real sockets on loopback, no JVM),
integration (real sockets, real Kafka), spark (a local SparkSession), browser (headless
Debian Chromium via Playwright), fuzz (tests/fuzz, bounded Hypothesis/atheris runs).

Warnings: ``filterwarnings`` in pyproject.toml (each filter there says why).
"""

from __future__ import annotations

import os
import sys
import traceback
import warnings
from collections.abc import Generator
from types import FrameType
from typing import Any

import pytest
from hypothesis import settings

# No Hypothesis deadline anywhere: on a shared machine a per-example deadline measures the
# neighbours, not the code (timing claims live in bench/). The fuzz folder's own profile
# (tests/fuzz/conftest.py) bounds its example counts on top of this.
settings.register_profile("harness", deadline=None)
settings.load_profile("harness")

# Several harness runs at once on the suite's workers: CPU placement is for one run on the
# machine (each would confine its broker and load to the same other CPU); its own tests
# ask for it explicitly (harness.runner.placement).
os.environ.setdefault("HARNESS_PLACEMENT", "off")

# PySpark workers must use this interpreter (pyarrow lives here).
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

# The suite's local brokers (and those of the `harness run`s it starts, which inherit this)
# compile with C1 only: each lives seconds to a minute, too short for C2's compilations to
# pay back their CPU, and the suite is CPU-bound on two cores. Measured on the runner's
# end-to-end and broker modules: 125 -> 104 CPU-s for the same 17 tests (docs/status.md).
# Kafka's own timers and limits are untouched; `harness` runs outside the suite keep the
# JVM's default. Set HARNESS_BROKER_JVM_OPTS (even empty) to choose otherwise.
os.environ.setdefault("HARNESS_BROKER_JVM_OPTS", "-XX:TieredStopAtLevel=1")

# The `harness analyze` runs the suite starts (each scenario run's, the CLI's) judge small
# histories in one warm Spark session per test process, the analysis server of
# analysis/server.py, instead of a JVM each: 18 against 47 CPU-s for a 10 k-event `ci-gate`
# run (docs/status.md). Set HARNESS_ANALYSIS_SERVER (even empty) to choose otherwise; tests
# of the analysis's own start and interruption unset it.
_ANALYSIS_SERVER: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    controller = bool(config.getoption("numprocesses", 0)) and not worker
    if "HARNESS_ANALYSIS_SERVER" in os.environ or controller:
        return  # chosen outside, or an xdist controller (each worker has its own server)
    path = f"/tmp/harness-analysis-{worker or 'main'}-{os.getpid()}.sock"
    os.environ["HARNESS_ANALYSIS_SERVER"] = path
    _ANALYSIS_SERVER.append(path)


def pytest_unconfigure(config: pytest.Config) -> None:
    from pathlib import Path

    from analysis.remote import remove_server

    for path in _ANALYSIS_SERVER:
        remove_server(Path(path))


# kafka-python 3.0.12 defines its protocol classes from JSON schemas read with
# importlib.resources.read_text/open_text (deprecated since Python 3.11): 218
# DeprecationWarnings, all at `import kafka`, none from our code. Importing it once here with
# exactly those two silenced keeps them out of every run, including `pytest -W error` (a
# command-line -W outranks the ini filters).
with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore", r"(read|open)_text is deprecated\. Use files\(\) instead", DeprecationWarning
    )
    import kafka  # noqa: F401

# Modules under tests/unit that bind or connect real TCP sockets on loopback (found by
# recording socket.bind/socket.connect audit events over a `-m unit` run): they are `local`,
# not `unit`. The guard below keeps the list honest: a `unit` test that binds or connects an
# IPv4/IPv6 socket fails and says so.
LOCAL_MODULES = frozenset(
    {
        "tests/unit/test_bench_accept_floor.py",
        "tests/unit/test_bench_front_cost.py",
        "tests/unit/test_kafka_client.py",
        "tests/unit/test_kafka_client_engine.py",
        "tests/unit/test_localnet.py",
    }
)
KINDS = ("unit", "local", "integration", "spark", "browser")
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # A test's folder gives its marker, so `-m unit` and friends always work; a test that
    # already has one of the kinds keeps it, and a listed module is `local`.
    for item in items:
        if any(item.get_closest_marker(kind) for kind in KINDS):
            continue
        rel = _module(item)
        if rel in LOCAL_MODULES:
            item.add_marker(pytest.mark.local)
            continue
        parts = item.path.parts
        for kind in ("unit", "integration", "spark", "browser"):
            if kind in parts:
                item.add_marker(getattr(pytest.mark, kind))
    if os.environ.get("PYTEST_XDIST_WORKER"):
        _longest_first(items)


# -- `make test`: pytest -n N --dist loadfile ---------------------------------------------------
# A module's tests run on one worker (its module-scoped brokers start once). The modules whose
# tests start containers share one worker: one lists every container of the harness that a
# compose run left, another sweeps those of harness processes that are gone.
CONTAINER_MODULES = frozenset(
    {"tests/integration/test_compose.py", "tests/integration/test_container.py"}
)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadfile":
        return None  # xdist's own
    from xdist.scheduler import LoadFileScheduling

    # xdist's default reorders the modules by their number of tests, most first: the
    # one-test scenario runs (minutes each) started last and left the other workers idle at
    # the end. The modules go in the order `_longest_first` gave them.
    config.option.loadscopereorder = False

    class ModuleScheduling(LoadFileScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return "containers" if module in CONTAINER_MODULES else module

    return ModuleScheduling(config, log)


def _module(item: pytest.Item) -> str:
    return os.path.relpath(str(item.path), _ROOT).replace(os.sep, "/")


def _longest_first(items: list[pytest.Item]) -> None:
    """On a worker: the longest modules first (the container modules, then those with a `slow`
    test), so that none of them starts last and leaves the other workers idle at the end.
    Every worker sorts alike (xdist requires one order)."""
    rank: dict[str, int] = {}
    for item in items:
        module = _module(item)
        if item.get_closest_marker("container") and module not in CONTAINER_MODULES:
            raise pytest.UsageError(
                f"{module} starts containers: add it to CONTAINER_MODULES in tests/conftest.py"
            )
        first = 0 if module in CONTAINER_MODULES else 1 if item.get_closest_marker("slow") else 2
        rank[module] = min(rank.get(module, first), first)
    order = {id(item): (rank[_module(item)], i) for i, item in enumerate(items)}
    items.sort(key=lambda item: order[id(item)])


# -- the guard: `unit` means no network sockets ---------------------------------------------
_net_calls: list[str] = []
_watching = False
_INET = {2, 10}  # AF_INET, AF_INET6 (an AF_UNIX socketpair, e.g. asyncio's self-pipe, is fine)


#: py4j's functions that tell the JVM of a dropped object: the finalizer's, and the method its
#: FinalizerWorker thread calls (a ClientServer gateway, as PySpark's, queues them to it)
_PY4J_COLLECTORS = frozenset({"_garbage_collect_object", "garbage_collect_object"})


def _py4j_collecting(frame: FrameType | None) -> bool:
    """Whether py4j is telling its JVM that Python dropped a Java object: a Spark session an
    earlier module of this worker started does that whenever the collector runs, in whatever
    test is running then (not the test's own doing). ``frame`` is the socket call's."""
    while frame is not None:
        code = frame.f_code
        if code.co_name in _PY4J_COLLECTORS and "py4j" in code.co_filename:
            return True
        frame = frame.f_back
    return False


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _watching and event in ("socket.bind", "socket.connect"):
        sock = args[0]
        if getattr(sock, "family", None) in _INET and not _py4j_collecting(sys._getframe(1)):
            where = traceback.extract_stack(limit=8)[:-1]
            ours = [f for f in where if "site-packages" not in f.filename]
            frame = (ours or where)[-1]
            _net_calls.append(
                f"{event}{args[1]!r} at {os.path.basename(frame.filename)}:{frame.lineno}"
            )


sys.addaudithook(_audit)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    global _watching
    watch = item.get_closest_marker("unit") is not None
    _net_calls.clear()
    _watching = watch
    try:
        result = yield
    finally:
        _watching = False
    if watch and _net_calls:
        calls = ", ".join(sorted(set(_net_calls))[:5])
        pytest.fail(
            f"a `unit` test opened network sockets ({calls}): mark it `local` "
            "(tests/conftest.py LOCAL_MODULES) or `integration`",
            pytrace=False,
        )
    return result


# -- every history a real writer wrote in this session keeps to events.py ---------------------
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """After the whole run: every Parquet history the product's writers wrote under this
    session's temporary folders (the acceptor, the storm engine, the profiles, the runner)
    holds only events, columns and `detail` keys `base/history/events.py` declares. Hand-
    built test histories (`analysis.synth`, files named ``*-synth-*``) are not the writers'
    and are skipped. A key a writer adds without declaring it fails the session here."""
    factory = getattr(session.config, "_tmp_path_factory", None)
    if hasattr(session.config, "workerinput"):
        return  # an xdist worker: the controller reads every worker's folders once
    if factory is None or exitstatus not in (0, 1):
        return
    try:
        base = factory.getbasetemp()
    except (OSError, ValueError):
        return
    import pyarrow.parquet as pq

    from base.history.events import conformance

    problems: dict[str, str] = {}
    checked = 0
    for path in sorted(base.glob("**/history/**/*.parquet")):
        if "-synth-" in path.name or path.name.startswith("."):
            continue
        try:
            rows = pq.read_table(path).to_pylist()
        except Exception:  # a file a test truncated on purpose
            continue
        checked += 1
        for problem in conformance(rows, limit=5):
            problems.setdefault(problem, str(path))
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if problems:
        if reporter is not None:
            reporter.write_line(
                f"history conformance: {len(problems)} undeclared event, column or detail key "
                f"in {checked} history files written this session (base/history/events.py):",
                red=True,
            )
            for problem, where in list(problems.items())[:20]:
                reporter.write_line(f"  {problem}  ({where})", red=True)
        session.exitstatus = 1
    elif reporter is not None and checked:
        reporter.write_line(f"history conformance: {checked} history files, every row declared")
