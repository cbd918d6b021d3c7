"""The client history writer of one load process: column buffers, Parquet parts.

A row is a handful of ``list.append`` calls on column buffers (no dict, no tuple per
row); ``seq`` and ``ts`` are not even computed per row: at flush, ``seq`` numbers the
rows and ``ts`` is derived from ``mono_ns`` and the wall/monotonic offset measured
when the writer started (``ts = wall_at_start + (mono_ns − mono_at_start)``), so the
two clocks of a row never disagree and the hot path reads one clock.

Ownership, so no lock is needed on the hot path: rows are appended by one thread
(the storm engine's, or the gevent hub's greenlets), which also ``seal()``s the
buffers at safe points; any thread may ``drain()`` the sealed batches and
``write()`` them (Arrow conversion + Parquet + atomic rename: a part is written under
a dot-name and renamed when complete, so Spark never reads half a file).

No gevent, no Locust here: unit tests drive it directly.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from base.history import events
from base.history.clocks import boot_id, file_metadata, shift_details
from base.history.schema import EVENTS, SCHEMA
from base.history.writer import check_row

#: the per-row columns kept in buffers (the rest are constant or derived at flush)
BUFFERED = (
    "event",
    "mono_ns",
    "conn_id",
    "listener",
    "client_ip",
    "client_port",
    "sock_ip",
    "sock_port",
    "reason",
    "api_key",
    "client_id",
    "latency_ms",
    "bytes",
    "detail",
)
_ALWAYS_NULL = ("processor", "delay_ms", "principal")
_RECORD_FIELDS = frozenset(BUFFERED) - {"event", "mono_ns", "detail"}

Batch = dict[str, list[Any]]


def _empty() -> Batch:
    return {c: [] for c in BUFFERED}


class ClientHistory:
    """Client rows of one process → ``<history>/client/<name>-NNNNN.parquet``.

    ``name`` defaults to ``client-<host>-<pid>`` (the runner finds a phase's rows by
    the Locust process id in that name).
    """

    def __init__(
        self,
        history_dir: str | os.PathLike[str] | None,
        run_id: str,
        *,
        name: str | None = None,
        clock_offset_ns: int = 0,
        simulated_skew_ns: int = 0,
    ) -> None:
        self.run_id = run_id
        #: None: rows are buffered (for live statistics) and dropped, never written
        self.dir = Path(history_dir) / "client" if history_dir is not None else None
        if self.dir is not None:
            self.dir.mkdir(parents=True, exist_ok=True)
        self.name = name or f"client-{socket.gethostname()}-{os.getpid()}"
        # one instant read on both clocks; ts of every row derives from mono_ns
        self._mono0 = time.monotonic_ns()
        self._wall0 = time.time_ns()
        #: this process's offset to a reference (e.g. the Locust master's) clock:
        #: reference_time ≈ local_time + clock_offset_ns, within clock_rtt_ns / 2; kept in
        #: every part's metadata with the boot id (base.history.clocks)
        self.clock_offset_ns = clock_offset_ns
        self.clock_rtt_ns: int | None = None
        #: read with the offset: (this process's wall-minus-monotonic, the reference's boot
        #: id and wall-minus-monotonic), loadprofiles.clock.OnOffset
        self.clock_sample: tuple[int, str, int] | None = None
        #: a test's stand-in for another machine (loadprofiles.clock.simulated_skew_ns): both
        #: clocks read this much later, under a boot id of their own
        self.skew_ns = simulated_skew_ns
        self._boot_id = boot_id() + (f"+skew{simulated_skew_ns}" if simulated_skew_ns else "")
        self._cols = _empty()
        self._bind()
        self._sealed: list[Batch] = []
        self._seq = 0
        self._part = 0
        self.rows_written = 0
        self.closed = False

    def _bind(self) -> None:
        c = self._cols
        # bound appends: the hot path calls these without attribute lookups
        self.a_event = c["event"].append
        self.a_mono = c["mono_ns"].append
        self.a_conn = c["conn_id"].append
        self.a_listener = c["listener"].append
        self.a_cip = c["client_ip"].append
        self.a_cport = c["client_port"].append
        self.a_sip = c["sock_ip"].append
        self.a_sport = c["sock_port"].append
        self.a_reason = c["reason"].append
        self.a_api = c["api_key"].append
        self.a_client_id = c["client_id"].append
        self.a_latency = c["latency_ms"].append
        self.a_bytes = c["bytes"].append
        self.a_detail = c["detail"].append

    # -- recording ----------------------------------------------------------------------
    def row(
        self,
        event: str,
        mono_ns: int,
        conn_id: str | None,
        listener: str | None,
        client_ip: str | None,
        client_port: int | None,
        reason: str | None,
        api_key: int | None,
        client_id: str | None,
        latency_ms: float | None,
        nbytes: int | None,
        detail: str | None,
        sock_ip: str | None = None,
    ) -> None:
        """The hot path: one row; ``sock_*`` = ``client_*`` but for ``sock_ip`` when a
        PROXY header claimed ``client_ip`` (the port is the socket's in both)."""
        self.a_event(event)
        self.a_mono(mono_ns)
        self.a_conn(conn_id)
        self.a_listener(listener)
        self.a_cip(client_ip)
        self.a_cport(client_port)
        self.a_sip(sock_ip or client_ip)
        self.a_sport(client_port)
        self.a_reason(reason)
        self.a_api(api_key)
        self.a_client_id(client_id)
        self.a_latency(latency_ms)
        self.a_bytes(nbytes)
        self.a_detail(detail)

    def record(
        self,
        event: str,
        *,
        ts_us: int | None = None,
        mono_ns: int | None = None,
        detail: Mapping[str, Any] | str | None = None,
        **fields: Any,
    ) -> int:
        """``HistoryWriter.record``'s interface (``loadprofiles.kafka_client.Recorder``).

        ``ts_us`` is accepted for that interface and ignored: ts derives from mono_ns.
        """
        if event not in EVENTS["client"]:
            raise ValueError(f"event {event!r} is not a client event")
        if fields.keys() - _RECORD_FIELDS:
            raise KeyError(f"unknown history fields: {sorted(fields.keys() - _RECORD_FIELDS)}")
        check_row("client", event, fields, detail)
        if detail is not None and not isinstance(detail, str):
            detail = events.detail("client", event, **detail)
        c = self._cols
        c["event"].append(event)
        c["mono_ns"].append(time.monotonic_ns() if mono_ns is None else mono_ns)
        c["detail"].append(detail)
        for name in _RECORD_FIELDS:
            c[name].append(fields.get(name))
        return len(c["event"])

    def pending(self) -> int:
        return len(self._cols["event"]) + sum(len(b["event"]) for b in self._sealed)

    # -- flushing -----------------------------------------------------------------------
    def seal(self) -> None:
        """Owner thread only: hand the current buffers over for writing."""
        if not self._cols["event"]:
            return
        batch = self._cols
        self._cols = _empty()
        self._bind()
        self._sealed.append(batch)  # list.append/pop are atomic: no lock needed

    def drain(self) -> list[Batch]:
        """Any thread: the sealed batches, oldest first."""
        out: list[Batch] = []
        while self._sealed:
            out.append(self._sealed.pop(0))
        return out

    def table(self, batch: Batch) -> pa.Table:
        n = len(batch["event"])
        mono = np.asarray(batch["mono_ns"], dtype=np.int64) + self.skew_ns
        ts_us = (mono - self._mono0 + self._wall0) // 1000
        seq = np.arange(self._seq + 1, self._seq + 1 + n, dtype=np.int64)
        self._seq += n
        arrays: dict[str, Any] = {
            "run_id": pa.array([self.run_id] * n, pa.string()),
            "source": pa.array(["client"] * n, pa.string()),
            "seq": pa.array(seq),
            "ts": pa.array(ts_us, pa.timestamp("us", tz="UTC")),
            "mono_ns": pa.array(mono),
        }
        for name in _ALWAYS_NULL:
            arrays[name] = pa.nulls(n, SCHEMA.field(name).type)
        for name in BUFFERED:
            if name != "mono_ns":
                arrays[name] = pa.array(batch[name], SCHEMA.field(name).type)
        sample = self.clock_sample
        meta = file_metadata(
            self._boot_id,
            self._wall0 - self._mono0 if sample is None else sample[0],
            self.clock_offset_ns,
            self.clock_rtt_ns,
            None if sample is None else (sample[1], sample[2]),
        )
        table = pa.Table.from_arrays(
            [arrays[f.name] for f in SCHEMA], schema=SCHEMA.with_metadata(meta)
        )
        if self.skew_ns:  # the monotonic instants inside detail read late too
            table = shift_details(table, self.skew_ns)
        return table

    def write(self, batches: list[Batch]) -> Path | None:
        """Write batches as one atomic part file (one writing thread at a time)."""
        batches = [b for b in batches if b["event"]]
        if not batches or self.dir is None:
            return None
        merged = (
            batches[0]
            if len(batches) == 1
            else {c: [v for b in batches for v in b[c]] for c in BUFFERED}
        )
        table = self.table(merged)
        self._part += 1
        final = self.dir / f"{self.name}-{self._part:05d}.parquet"
        tmp = self.dir / f".{final.name}.tmp"
        pq.write_table(table, tmp)
        os.replace(tmp, final)
        self.rows_written += table.num_rows
        return final

    def flush(self) -> Path | None:
        """Seal and write now (only when the caller is the appending thread, or it is idle)."""
        self.seal()
        return self.write(self.drain())

    def close(self) -> None:
        if not self.closed:
            self.flush()
            self.closed = True
