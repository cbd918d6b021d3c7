"""An acceptor's processes: one, unless it was killed and restarted (or a front stopped with its
broker); each judged on its own rows and the client rows of its time."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from analysis.load.view import RunView


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


def fault_instants(run: RunView, event: str, kind: str, where: Any = None) -> list[int]:
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


def front_ends(run: RunView) -> list[tuple[int, bool]]:
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


def acceptor_files(run: RunView) -> dict[str, list[Path]]:
    """Each acceptor process's history files (``acceptor-<pid>-N``), by its pid."""
    by_pid: dict[str, list[Path]] = {}
    for f in run.files:
        m = _ACCEPTOR_FILE.match(f.name)
        if f.parent.name == "acceptor" and m:
            by_pid.setdefault(m["pid"], []).append(f)
    return by_pid


def acceptor_spans(run: RunView) -> dict[str, tuple[int, int]]:
    """Each acceptor process's first and last history row (mono_ns), by its pid: it writes
    none before its listeners are bound (its config, then its heartbeat's `start`): its
    first marks the end of its start-up. Read once per view (`incarnations`,
    `front_saturation`)."""
    return run.cached("acceptor_spans", lambda: _acceptor_spans(run))  # type: ignore[no-any-return]


def _acceptor_spans(run: RunView) -> dict[str, tuple[int, int]]:
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


def acceptor_incarnations(run: RunView) -> list[Incarnation]:
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


def within_incarnation(df: DataFrame, inc: Incarnation) -> DataFrame:
    """Client rows and Kafka-metrics scrapes inside the incarnation's time; the rest whole."""
    from pyspark.sql import functions as F

    timed = (F.col("source") == "client") | (F.col("event") == "kafka_metrics")
    inside = F.lit(True)
    if inc.lo_ns is not None:
        inside = inside & (F.col("mono_ns") > F.lit(inc.lo_ns))
    if inc.hi_ns is not None:
        inside = inside & (F.col("mono_ns") <= F.lit(inc.hi_ns))
    return df.where(~timed | inside)
