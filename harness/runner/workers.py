"""The runner's side of load from many hosts (``harness run --workers N``).

Each engine phase runs as a Locust master (`harness.runner.loadgen`) that waits for N
workers, ``harness worker --master HOST:PORT`` on N machines (or, with ``--worker-netns``,
in N namespaces the run made: `harness.runner.netns`). What the workers said is in the
phase's roster (`loadprofiles.workers`); here it is judged: a worker that never joined
stops the phase from starting (the run says why and exits 3), and one whose history did
not come home whole is written down where the analysis looks for an incomplete history
(`base.history.writer.incomplete_markers`), naming the worker and the rows lost, so
the verdict is ``unknown`` and never judged as if whole.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from loadprofiles.workers import Problem, problems, read_roster

#: the prefix of an ip quota entity that names a worker host (``worker:2``)
WORKER_ENTITY = "worker:"
#: an incomplete-history marker's errno name: the worker's host is down (to the run)
LOST_CODE = "EHOSTDOWN"


def worker_argv(master: str, processes: int | None = None) -> list[str]:
    """``harness worker`` as a machine (or namespace) runs it."""
    argv = [sys.executable, "-m", "harness", "worker", "--master", master]
    if processes:
        argv += ["--processes", str(processes)]
    return argv


def resolve_entities(quotas: Mapping[str, int], hosts: Sequence[str]) -> dict[str, int]:
    """``worker:J`` ip quota entities as worker J's address (1-based); other entities as
    they are. Raises ValueError naming the entity when there is no such worker."""
    out: dict[str, int] = {}
    for entity, rate in quotas.items():
        if entity.startswith(WORKER_ENTITY):
            j = entity.removeprefix(WORKER_ENTITY)
            if not j.isdigit() or not 1 <= int(j) <= len(hosts):
                raise ValueError(
                    f"ip_quotas.{entity}={rate!r}: the run has worker hosts 1-{len(hosts)}"
                )
            entity = hosts[int(j) - 1]
        out[entity] = rate
    return out


def named_workers(quotas: Mapping[str, Any]) -> list[str]:
    return [e for e in quotas if e.startswith(WORKER_ENTITY)]


def problems_before_start(ready_dir: Path, expected: int, hosts: Sequence[str]) -> str:
    """Why a phase waiting for ``expected`` workers did not start: who joined, who not."""
    roster = read_roster(ready_dir)
    absent = [p.worker for p in problems(roster, expected, hosts) if "never joined" in p.reason]
    came = len(roster.get("workers") or {})
    return (
        f"{came} of {expected} worker(s) joined its master; never joined: "
        + (", ".join(absent) or "none (they joined but their load never flowed)")
        + "; the phase did not start"
    )


def judge(
    ready_dir: Path, expected: int, hosts: Sequence[str], client_dir: Path
) -> tuple[list[Problem], list[dict[str, Any]]]:
    """The phase's roster, judged: each problem also written as an incomplete-history
    marker in ``client_dir`` (what `harness analyze` reads); returns the problems and the
    roster's summary for the phase's rows and run.json."""
    roster = read_roster(ready_dir)
    for w in (roster.get("workers") or {}).values():
        if w.get("home") == "local":  # it wrote into the shared run folder itself
            w.update(written(client_dir, w))
    found = problems(roster, expected, hosts)
    client_dir.mkdir(parents=True, exist_ok=True)
    for i, p in enumerate(found):
        lost = "" if p.rows_lost is None else str(p.rows_lost)
        marker = client_dir / f".worker-{ready_dir.name}-{i}.incomplete-{LOST_CODE}-{lost}"
        text = {"writer": f"worker {p.worker} of phase {ready_dir.name}", "reason": p.reason}
        if p.rows_lost is not None:
            text["rows_lost"] = p.rows_lost  # type: ignore[assignment]
        marker.write_text(json.dumps(text))
    return found, summary(roster)


def written(client_dir: Path, worker: Mapping[str, Any]) -> dict[str, Any]:
    """What a worker that writes into the shared run folder left there: its files
    (``client-<host>-<pid>-NNNNN.parquet``) and their rows, as the roster counts them."""
    import pyarrow.parquet as pq

    files = sorted(client_dir.glob(f"client-{worker.get('host')}-{worker.get('pid')}-*.parquet"))
    rows = sum(pq.read_metadata(f).num_rows for f in files)
    return {
        "files": [f.name for f in files],
        "rows_received": rows,
        "bytes_received": sum(f.stat().st_size for f in files),
    }


def summary(roster: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per worker: index, host, addresses, clock offset and bound, rows recorded and home."""
    keys = (
        "index",
        "host",
        "pid",
        "addresses",
        "clock_offset_ns",
        "clock_rtt_ns",
        "rows_reported",
        "rows_received",
        "bytes_received",
        "gone",
    )
    rows = [{k: w.get(k) for k in keys} for w in (roster.get("workers") or {}).values()]
    return sorted(rows, key=lambda w: int(w.get("index") or 0))


def worker_line(w: Mapping[str, Any]) -> str:
    """One worker of a phase as the runner says it: rows home, its clock offset and bound."""
    addrs = ", ".join(w.get("addresses") or []) or "address unknown"
    text = f"worker {w.get('index')} ({addrs}): {w.get('rows_received') or 0} rows home"
    offset, rtt = w.get("clock_offset_ns"), w.get("clock_rtt_ns")
    if offset is not None and rtt is not None:
        text += f", clock offset {offset / 1e6:+.1f} ms ± {rtt / 2e6:.1f} ms"
    return text + (", gone" if w.get("gone") else "")
