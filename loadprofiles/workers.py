"""Workers on other machines: what a Locust master and its workers say beyond Locust's own
messages, over Locust's own master/worker channel.

``harness run --workers N`` runs each load phase as a Locust master that waits for N
workers (``harness worker --master HOST:PORT``), each on its own machine with its own
source address. A worker has no run folder of its own: it says who it is (``HELLO``: its
index, host, pid, the address it connects from, its clock offset), that its load is about
to flow (``READY``), how many rows it has recorded so far (``PROGRESS``, once a second),
then sends its history files home in chunks (``PART``) and says it is done (``DONE``:
its counts, the files and rows it sent). The master writes what it heard into the
phase's ready folder: the roster (``workers.json``), the workers' readiness markers
(``w<index>.ready``, ``w<index>.done``), and each history file, checked by size and row
count, into ``RUN_DIR/history/client/`` (written under a dot name, then renamed: never a
half file). A worker that goes missing (Locust's heartbeat) is marked gone.

The runner (``harness.runner.workers``) reads the roster: a worker that never joined, or
whose history did not arrive whole, is named with the rows it lost.

The chunking, the assembly and the roster's verdict are pure (unit-tested); the two
``*_side`` functions are the thin Locust adapters.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: how the workers' histories reach the run folder (the ``--history-home`` option)
HOMES = ("local", "channel")
CHUNK_BYTES = 256 * 1024
ROSTER = "workers.json"

#: `harness worker` names a file here; a worker's load process touches it once it joined
JOINED_ENV = "HARNESS_WORKER_JOINED_FILE"

HELLO = "harness_worker_hello"
READY = "harness_worker_ready"
PROGRESS = "harness_worker_progress"
PART = "harness_history_part"
DONE = "harness_worker_done"


class ChunkError(ValueError):
    """A history file that did not arrive whole: names the file and what was wrong."""


# -- pure: chunks and their assembly ---------------------------------------------------------
def chunks(
    worker: int, name: str, data: bytes, rows: int, size: int = CHUNK_BYTES
) -> list[dict[str, Any]]:
    """One history file as the ``PART`` messages that carry it (at least one, even empty)."""
    pieces = [data[i : i + size] for i in range(0, len(data), size)] or [b""]
    return [
        {
            "worker": worker,
            "file": name,
            "seq": i,
            "count": len(pieces),
            "size": len(data),
            "rows": rows,
            "data": piece,
        }
        for i, piece in enumerate(pieces)
    ]


@dataclass
class Assembly:
    """The ``PART`` messages of one file, in order; ``add`` returns the whole file once its
    last chunk came and its size is the one announced (the row count is checked by the
    caller, who can read Parquet). Out of order, a changed announcement, or the wrong size:
    `ChunkError`."""

    worker: int
    file: str
    count: int
    size: int
    rows: int
    parts: list[bytes] = field(default_factory=list)

    @classmethod
    def first(cls, msg: Mapping[str, Any]) -> Assembly:
        return cls(
            int(msg["worker"]),
            str(msg["file"]),
            int(msg["count"]),
            int(msg["size"]),
            int(msg["rows"]),
        )

    def add(self, msg: Mapping[str, Any]) -> bytes | None:
        where = f"worker {self.worker} file {self.file}"
        if (int(msg["count"]), int(msg["size"]), int(msg["rows"])) != (
            self.count,
            self.size,
            self.rows,
        ):
            raise ChunkError(f"{where}: chunk {msg['seq']} announces another file")
        if int(msg["seq"]) != len(self.parts):
            raise ChunkError(f"{where}: chunk {msg['seq']} came after {len(self.parts)} chunks")
        self.parts.append(bytes(msg["data"]))
        if len(self.parts) < self.count:
            return None
        data = b"".join(self.parts)
        if len(data) != self.size:
            raise ChunkError(f"{where}: {len(data)} bytes arrived, {self.size} announced")
        return data


def home_name(file: str, worker: int, master_pid: int) -> str:
    """A worker's ``client-<host>-<pid>-NNNNN.parquet`` as it lands in the run folder:
    ``client-<host>-w<index>-<master pid>-NNNNN.parquet`` (every file of one phase carries
    the pid of the process the runner started, as with ``--processes``)."""
    stem, _, part = file.removesuffix(".parquet").rpartition("-")
    host = stem.removeprefix("client-").rpartition("-")[0] or "worker"
    return f"client-{host}-w{worker}-{master_pid}-{part}.parquet"


# -- pure: the roster and what it says -------------------------------------------------------
@dataclass(frozen=True)
class Problem:
    """One expected worker whose history is not whole: who, why, how many rows are lost."""

    worker: str
    reason: str
    rows_lost: int | None

    def text(self) -> str:
        lost = "an unknown number of" if self.rows_lost is None else str(self.rows_lost)
        return f"worker {self.worker}: {self.reason}; {lost} rows lost"


def who(entry: Mapping[str, Any]) -> str:
    """``2 (198.18.4.12, host h1 pid 812)``: a worker as the reasons name it."""
    addrs = ", ".join(entry.get("addresses") or []) or "address unknown"
    return f"{entry.get('index')} ({addrs}, host {entry.get('host')} pid {entry.get('pid')})"


def problems(roster: Mapping[str, Any], expected: int, hosts: Sequence[str] = ()) -> list[Problem]:
    """What keeps a phase's history from being whole: each of ``expected`` workers that
    never joined (named by its address when the runner made its host: ``hosts``), and each
    that joined but whose ``DONE`` did not come or whose files fell short of what it
    recorded. Empty: every worker's history is home."""
    workers = list((roster.get("workers") or {}).values())
    out: list[Problem] = []
    for w in sorted(workers, key=lambda w: int(w.get("index", 0))):
        received = int(w.get("rows_received", 0))
        done = w.get("done")
        if w.get("errors"):
            out.append(
                Problem(who(w), "history refused: " + "; ".join(w["errors"]), _lost(w, received))
            )
        elif done is None:
            why = "went missing mid-phase" if w.get("gone") else "never said it was done"
            lost = _lost(w, received)
            if lost is not None:  # what it had written by its last report, at least
                why += f" after its last report of {w.get('rows_reported')} rows (at least these)"
            out.append(Problem(who(w), f"{why}; its history did not arrive", lost))
        elif received < int(done.get("rows", 0)) or len(w.get("files") or []) < int(
            done.get("files", 0)
        ):
            out.append(
                Problem(
                    who(w),
                    f"{received} of its {done.get('rows')} rows arrived",
                    int(done.get("rows", 0)) - received,
                )
            )
    seen = {a for w in workers for a in w.get("addresses") or []}
    absent = [h for h in hosts if h not in seen]
    for i in range(max(0, expected - len(workers))):
        name = absent[i] if i < len(absent) else f"#{len(workers) + i + 1} of {expected}"
        out.append(Problem(name, "never joined the master", None))
    return out


def _lost(entry: Mapping[str, Any], received: int) -> int | None:
    reported = entry.get("rows_reported")
    return None if reported is None else max(0, int(reported) - received)


def read_roster(ready_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The roster the master wrote (``{"workers": {}}`` before any worker said hello)."""
    try:
        data = json.loads((Path(ready_dir) / ROSTER).read_text())
    except (OSError, ValueError):
        return {"workers": {}}
    return data if isinstance(data, dict) else {"workers": {}}


def source_address(host: str, port: int) -> str | None:
    """The address this machine connects to ``host`` from (the kernel's route, no packet
    sent); None when it has no route."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host, port))
            return str(s.getsockname()[0])
    except OSError:
        return None


def _atomic_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, sort_keys=True))
    os.replace(tmp, path)


# -- the master's side -----------------------------------------------------------------------
class MasterSide:
    """Receives what the workers say; writes the roster, markers and history files."""

    def __init__(self, ready_dir: Path, client_dir: Path | None, master_pid: int) -> None:
        self.ready_dir = ready_dir
        self.client_dir = client_dir
        self.master_pid = master_pid
        self.workers: dict[str, dict[str, Any]] = {}
        self.assembling: dict[tuple[str, str], Assembly] = {}

    def entry(self, node: str, index: int | None = None) -> dict[str, Any]:
        w = self.workers.setdefault(
            node,
            {
                "node": node,
                "index": index,
                "rows_received": 0,
                "bytes_received": 0,
                "files": [],
                "errors": [],
            },
        )
        if index is not None:
            w["index"] = index
        return w

    def save(self) -> None:
        _atomic_json(self.ready_dir / ROSTER, {"workers": self.workers})

    def hello(self, node: str, data: Mapping[str, Any]) -> None:
        w = self.entry(node, int(data["index"]))
        w.update({k: data[k] for k in ("host", "pid", "addresses", "home") if k in data})
        w["joined_mono_ns"] = time.monotonic_ns()
        self.save()

    def marker(self, node: str, kind: str, data: Mapping[str, Any]) -> None:
        w = self.entry(node)
        _atomic_json(
            self.ready_dir / f"w{w['index']}.{kind}",
            {"pid": w.get("pid"), "worker": w["index"], "mono_ns": time.monotonic_ns(), **data},
        )

    def progress(self, node: str, data: Mapping[str, Any]) -> None:
        w = self.entry(node)
        w["rows_reported"] = int(data["rows"])
        _take_clock(w, data)
        self.save()

    def part(self, node: str, data: Mapping[str, Any], rows_of: Callable[[bytes], int]) -> None:
        w = self.entry(node)
        key = (node, str(data["file"]))
        try:
            if int(data["seq"]) == 0:
                self.assembling[key] = Assembly.first(data)
            assembly = self.assembling.get(key)
            if assembly is None:
                raise ChunkError(f"file {data['file']}: chunk {data['seq']} without its first")
            whole = assembly.add(data)
            if whole is None:
                return
            del self.assembling[key]
            rows = rows_of(whole)
            if rows != int(data["rows"]):
                raise ChunkError(f"file {data['file']}: {rows} rows arrived, {data['rows']} sent")
        except (ChunkError, KeyError, ValueError) as exc:
            self.assembling.pop(key, None)
            w["errors"].append(str(exc))
            self.save()
            return
        name = home_name(str(data["file"]), int(w["index"] or 0), self.master_pid)
        if self.client_dir is not None:
            self.client_dir.mkdir(parents=True, exist_ok=True)
            tmp = self.client_dir / f".{name}.tmp"
            tmp.write_bytes(whole)
            os.replace(tmp, self.client_dir / name)
        w["files"].append(name)
        w["rows_received"] += rows
        w["bytes_received"] += len(whole)
        self.save()

    def done(self, node: str, data: Mapping[str, Any]) -> None:
        w = self.entry(node)
        w["done"] = dict(data)
        _take_clock(w, data)
        self.save()
        if w.get("home") == "channel":  # a local worker writes its own marker
            self.marker(node, "done", data)

    def gone(self, node: str) -> None:
        w = self.workers.get(node)
        if w is None or w.get("gone") or w.get("done") is not None:
            return
        w["gone"] = True
        self.save()
        if w.get("home") == "channel":
            self.marker(node, "done", {"gone": True})


def _take_clock(w: dict[str, Any], data: Mapping[str, Any]) -> None:
    """The worker's latest clock offset and its round trip, where a message carries them."""
    for k in ("clock_offset_ns", "clock_rtt_ns"):
        if data.get(k) is not None:
            w[k] = int(data[k])


def parquet_rows(data: bytes) -> int:
    """The row count a Parquet file's footer says."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    return int(pq.read_metadata(pa.BufferReader(data)).num_rows)


def master_side(environment: Any) -> None:
    """Register the master's handlers; from then on what workers say lands in the phase's
    ready folder (``--ready-dir``) and, sent home, in ``--run-dir``'s client history."""
    import gevent

    runner = environment.runner
    state: dict[str, MasterSide] = {}

    def side() -> MasterSide:
        if "m" not in state:
            o = environment.parsed_options
            run_dir = str(getattr(o, "run_dir", "") or "")
            ready = Path(str(getattr(o, "ready_dir", "") or "") or Path(run_dir or ".") / "ready")
            client = Path(run_dir) / "history" / "client" if run_dir else None
            state["m"] = MasterSide(ready, client, os.getpid())
        return state["m"]

    def on(kind: str, fn: Callable[[MasterSide, str, Mapping[str, Any]], None]) -> None:
        def handler(environment: Any, msg: Any, **_: Any) -> None:
            fn(side(), str(msg.node_id), msg.data)

        runner.register_message(kind, handler)

    on(HELLO, MasterSide.hello)
    on(READY, lambda m, n, d: m.marker(n, "ready", d))
    on(PROGRESS, MasterSide.progress)
    on(PART, lambda m, n, d: m.part(n, d, parquet_rows))
    on(DONE, MasterSide.done)

    def watch() -> None:
        while True:  # bounded by the master's own life (Locust's -t)
            gevent.sleep(1.0)
            if "m" not in state:
                continue
            live = {c.id: c.state for c in runner.clients.values()}
            for node in list(state["m"].workers):
                if live.get(node, "missing") == "missing":
                    state["m"].gone(node)

    gevent.spawn(watch)


# -- the worker's side -----------------------------------------------------------------------
def send_files(runner: Any, worker: int, files: Sequence[Path]) -> tuple[int, int]:
    """Every history file home over the channel, chunk by chunk: (rows, bytes) sent."""
    import gevent

    rows = size = 0
    for f in files:
        data = f.read_bytes()
        n = parquet_rows(data)
        for msg in chunks(worker, f.name, data, n):
            runner.send_message(PART, msg)
            gevent.sleep(0)  # Locust's heartbeats go between chunks
        rows, size = rows + n, size + len(data)
    return rows, size
