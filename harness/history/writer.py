"""Buffered, atomic Parquet history writer.

Callers (an asyncio acceptor, gevent Locust users, the runner) must never block on
disk: `record()` appends a tuple to a list under a lock; a background thread turns
the buffer into a Parquet part file. A part is written under a dot-name and renamed
when closed, so a crash never leaves a half file for Spark to read.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from harness.history.schema import COLUMNS, EVENTS, SCHEMA

_OPTIONAL = COLUMNS[6:]  # everything after `event`
_OPTIONAL_SET = frozenset(_OPTIONAL)


def now_us() -> int:
    return time.time_ns() // 1000


class HistoryWriter:
    """Writes rows of the shared schema for one source into ``<history>/<source>/``.

    ``history_dir`` is ``runs/<run-id>/history``. ``name`` distinguishes writers of
    the same source (one per process: ``client-<pid>``).
    """

    def __init__(
        self,
        history_dir: str | os.PathLike[str],
        source: str,
        run_id: str,
        *,
        name: str | None = None,
        max_rows: int = 50_000,
        flush_interval_s: float = 1.0,
        background: bool = True,
        strict_events: bool = True,
    ) -> None:
        if source not in EVENTS:
            raise ValueError(f"unknown history source {source!r}; expected one of {sorted(EVENTS)}")
        self.source = source
        self.run_id = run_id
        self.dir = Path(history_dir) / source
        self.dir.mkdir(parents=True, exist_ok=True)
        self.name = name or f"{source}-{os.getpid()}"
        self.max_rows = max_rows
        self.flush_interval_s = flush_interval_s
        self.strict_events = strict_events
        self._events = EVENTS[source]
        self._rows: list[tuple[Any, ...]] = []
        self._lock = threading.Lock()
        self._io_lock = threading.Lock()
        self._seq = 0
        self._part = 0
        self._closed = False
        self.rows_written = 0
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(
                target=self._loop, name=f"history-{self.name}", daemon=True
            )
            self._thread.start()

    # -- recording -------------------------------------------------------------------
    def record(
        self,
        event: str,
        *,
        ts_us: int | None = None,
        mono_ns: int | None = None,
        detail: Mapping[str, Any] | str | None = None,
        **fields: Any,
    ) -> int:
        """Append one row; returns its ``seq``. Unknown field names are a bug: KeyError.

        The hot path only stores references: building columns and serialising
        ``detail`` to JSON happen in the flush thread, off the caller's event loop.
        A ``detail`` mapping is copied shallowly, so callers may reuse theirs.
        """
        if self.strict_events and event not in self._events:
            raise ValueError(f"event {event!r} is not a {self.source} event")
        if fields and not fields.keys() <= _OPTIONAL_SET:
            raise KeyError(f"unknown history fields: {sorted(fields.keys() - _OPTIONAL_SET)}")
        if detail is not None and not isinstance(detail, str):
            detail = dict(detail)
        ts = time.time_ns() // 1000 if ts_us is None else ts_us
        mono = time.monotonic_ns() if mono_ns is None else mono_ns
        with self._lock:
            if self._closed:
                raise RuntimeError(f"history writer {self.name} is closed")
            self._seq += 1
            seq = self._seq
            self._rows.append((seq, ts, mono, event, fields, detail))
            full = len(self._rows) >= self.max_rows
        if full:
            self._wake.set()
        return seq

    # -- flushing --------------------------------------------------------------------
    def _table(self, rows: list[tuple[Any, ...]]) -> pa.Table:
        n = len(rows)
        columns: dict[str, list[Any]] = {
            "run_id": [self.run_id] * n,
            "source": [self.source] * n,
            "seq": [r[0] for r in rows],
            "ts": [r[1] for r in rows],
            "mono_ns": [r[2] for r in rows],
            "event": [r[3] for r in rows],
        }
        for name in _OPTIONAL:
            if name == "detail":
                columns[name] = [
                    d
                    if d is None or isinstance(d, str)
                    else json.dumps(d, sort_keys=True, default=str)
                    for d in (r[5] for r in rows)
                ]
            else:
                columns[name] = [r[4].get(name) for r in rows]
        return pa.Table.from_arrays(
            [pa.array(columns[f.name], type=f.type) for f in SCHEMA], schema=SCHEMA
        )

    def flush(self) -> Path | None:
        """Write buffered rows as one atomic part file; returns its path (None if empty)."""
        with self._lock:
            rows, self._rows = self._rows, []
        if not rows:
            return None
        with self._io_lock:
            table = self._table(rows)
            self._part += 1
            final = self.dir / f"{self.name}-{self._part:05d}.parquet"
            tmp = self.dir / f".{final.name}.tmp"
            pq.write_table(table, tmp)
            os.replace(tmp, final)
            self.rows_written += len(rows)
            return final

    def _loop(self) -> None:
        while not self._closed:
            self._wake.wait(self.flush_interval_s)
            self._wake.clear()
            try:
                self.flush()
            except Exception as exc:  # keep the rows' owner alive; report loudly
                print(f"history writer {self.name}: flush failed: {exc!r}", flush=True)

    def close(self) -> None:
        """Flush everything and stop the background thread. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.flush()

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_history(run_dir_or_history: str | os.PathLike[str], source: str | None = None) -> pa.Table:
    """Read a run's history (all sources, or one) as one Arrow table, sorted by ts, seq.

    For tests and small tools; the analysis reads the same files with Spark.
    """
    root = Path(run_dir_or_history)
    if (root / "history").is_dir():
        root = root / "history"
    sources = [source] if source else [p.name for p in sorted(root.iterdir()) if p.is_dir()]
    files = [
        f for s in sources if (root / s).is_dir() for f in sorted((root / s).glob("*.parquet"))
    ]
    if not files:
        return SCHEMA.empty_table()
    tables = [pq.read_table(f, schema=SCHEMA) for f in files]
    table = pa.concat_tables(tables)
    return table.sort_by([("ts", "ascending"), ("source", "ascending"), ("seq", "ascending")])
