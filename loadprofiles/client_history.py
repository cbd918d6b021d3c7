"""The client history writer of one load process: typed rows buffered, Parquet parts.

A row is built by its event's row class (`base.history.rows`: only the event's columns
and `detail` keys, mypy-checked) and appended as it is: one plain tuple, one C-level
``list.append`` (``append`` is the buffer's own bound method). ``seq`` and ``ts`` are not
computed per row: at flush, ``seq`` numbers the rows and ``ts`` is derived from
``mono_ns`` and the wall/monotonic offset measured when the writer started (``ts =
wall_at_start + (mono_ns − mono_at_start)``; a row's own ``ts_ns`` is not used), so the
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
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from base.history.clocks import boot_id, file_metadata, shift_details
from base.history.rows import FIELDS, ClientRow
from base.history.schema import SCHEMA
from base.history.writer import row_arrays

#: a sealed buffer: rows in `FIELDS` order
Batch = list[ClientRow]


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
        self._rows: Batch = []
        #: the hot path: one typed row (`base.history.rows`), appended as it is; the owner
        #: thread only (see the module docstring)
        self.append = self._rows.append
        self._sealed: list[Batch] = []
        self._seq = 0
        self._part = 0
        self.rows_written = 0
        self.closed = False

    # -- recording ----------------------------------------------------------------------
    def pending(self) -> int:
        return len(self._rows) + sum(len(b) for b in self._sealed)

    # -- flushing -----------------------------------------------------------------------
    def seal(self) -> None:
        """Owner thread only: hand the current buffers over for writing."""
        if not self._rows:
            return
        batch = self._rows.copy()
        self._rows.clear()  # in place: `append` stays bound to the buffer
        self._sealed.append(batch)  # list.append/pop are atomic: no lock needed

    def drain(self) -> list[Batch]:
        """Any thread: the sealed batches, oldest first."""
        out: list[Batch] = []
        while self._sealed:
            out.append(self._sealed.pop(0))
        return out

    def table(self, batch: Batch) -> pa.Table:
        n = len(batch)
        cols: list[Any] = list(zip(*batch, strict=True)) if n else [()] * len(FIELDS)
        mono = np.asarray(cols[1], dtype=np.int64) + self.skew_ns
        ts_us = (mono - self._mono0 + self._wall0) // 1000
        seq = np.arange(self._seq + 1, self._seq + 1 + n, dtype=np.int64)
        self._seq += n
        arrays = [
            pa.array([self.run_id] * n, pa.string()),
            pa.array(["client"] * n, pa.string()),
            pa.array(seq),
            pa.array(ts_us, pa.timestamp("us", tz="UTC")),
            pa.array(mono),
            *row_arrays(cols),
        ]
        sample = self.clock_sample
        meta = file_metadata(
            self._boot_id,
            self._wall0 - self._mono0 if sample is None else sample[0],
            self.clock_offset_ns,
            self.clock_rtt_ns,
            None if sample is None else (sample[1], sample[2]),
        )
        table = pa.Table.from_arrays(arrays, schema=SCHEMA.with_metadata(meta))
        if self.skew_ns:  # the monotonic instants inside detail read late too
            table = shift_details(table, self.skew_ns)
        return table

    def write(self, batches: list[Batch]) -> Path | None:
        """Write batches as one atomic part file (one writing thread at a time)."""
        batches = [b for b in batches if b]
        if not batches or self.dir is None:
            return None
        table = self.table(batches[0] if len(batches) == 1 else [r for b in batches for r in b])
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
