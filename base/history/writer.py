"""Buffered, atomic Parquet history writer.

Callers (an asyncio acceptor, gevent Locust users, the runner) must never block on disk
nor pay for a row's encoding: a row is ONE tuple in ``ROW`` order (`base.history.rows.Row`)
appended to a list under a lock, handed to `append()` as it is (no dict per row, nothing
encoded), built by its event's row class (`base.history.rows`: it takes only the event's
columns and `detail` keys). A row's ``ts_ns`` left None is derived at the flush from its
``mono_ns`` and the two clocks read together when the writer started (as
`loadprofiles.client_history` does), so the hot path reads one clock.

A background thread turns the buffer into columns: ``zip(*rows)`` transposes a chunk of
rows in C, each column becomes an Arrow array, ``detail`` mappings are JSON-encoded there
(never on the caller's thread), ``seq`` numbers the rows in append order and ``ts``
becomes microseconds. It works in chunks of ``CHUNK`` rows and yields the GIL between
them, so an event loop sharing the process waits for it at most about one chunk's
conversion (~1 ms), never a whole flush; pyarrow is imported and warmed up when the writer
is created, not at the first flush under load. A part is written under a dot-name and
renamed when closed, so a crash never leaves a half file for Spark to read.

When a part cannot be written (a full disk, a folder gone), the writer stops writing: the
half-written part is emptied and renamed to ``.<name>.incomplete-<ERRNO>-<rows lost>``
beside the parts (no new space needed), with the reason inside where the disk allows; every
later row is counted, not kept, and the marker renamed to the final count at `close`. The
parts already written stay as they are, and the analysis (`incomplete_markers`) judges what
was written and says the history is incomplete.
"""

from __future__ import annotations

import errno
import json
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from base.history.events import BY_SOURCE, OPEN
from base.history.rows import FIELDS, Row
from base.history.schema import COLUMNS, EVENTS, SCHEMA

#: a buffered row's slots, in order: ``ts`` is in ns (``time.time_ns()``) until the flush
#: divides it; ``run_id``, ``source`` and ``seq`` are not buffered (constant or derived)
ROW: tuple[str, ...] = ("ts_ns", "mono_ns", "event", *COLUMNS[6:])
assert ROW == FIELDS, "base.history.rows is stale: python -m base.history.codegen"
#: rows converted per step of a flush (the GIL is yielded between steps)
CHUNK = 2048
_TYPES = [SCHEMA.field(name).type for name in COLUMNS[5:]]  # event, conn_id, ..., detail
_TS_TYPE = SCHEMA.field("ts").type
# json.dumps(d, sort_keys=True, default=str) builds an encoder per call; one is enough
_ENCODE = json.JSONEncoder(sort_keys=True, default=str).encode


def now_us() -> int:
    return time.time_ns() // 1000


def encode_detail(detail: Any) -> str | None:
    """A row's ``detail`` as stored: None, a string as given, a mapping as sorted JSON."""
    if detail is None or detail.__class__ is str:
        return detail
    return _ENCODE(detail)


def row_arrays(cols: list[Any]) -> list[pa.Array]:
    """The columns from ``event`` to ``detail`` of rows transposed (``cols[i]``: every
    row's ``ROW[i]``), as Arrow arrays of SCHEMA's types: a mapping `detail` as sorted JSON.
    Every writer of typed rows builds its batches here (`ClientHistory` too)."""
    arrays = [pa.array(col, t) for col, t in zip(cols[2:-1], _TYPES[:-1], strict=True)]
    arrays.append(pa.array([encode_detail(d) for d in cols[-1]], pa.string()))
    return arrays


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
        self._rows: list[Row] = []
        # the clocks read together once: a row's ts from its mono_ns when it has none
        self._wall_minus_mono = time.time_ns() - time.monotonic_ns()
        self._lock = threading.Lock()
        self._io_lock = threading.Lock()
        self._seq = 0  # rows appended so far (the last row's seq)
        self._part = 0
        self._closed = False
        #: rows appended after close are dropped (counted in `rows_late`), not refused: an
        #: acceptor's connections may still end while it shuts down
        self.drop_after_close = False
        self.rows_late = 0
        self.rows_written = 0
        #: why writing stopped (None while it works) and the rows lost since
        self.failure: str | None = None
        self.rows_lost = 0
        self._errno = ""
        self._marker: Path | None = None
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        # pyarrow's first conversion imports pandas (~0.2-1 s holding the GIL): here, at
        # start-up, instead of in the first flush while the caller's loop is under load
        self._batch([], 0)
        if background:
            self._thread = threading.Thread(
                target=self._loop, name=f"history-{self.name}", daemon=True
            )
            self._thread.start()

    # -- recording -------------------------------------------------------------------
    def append(self, row: Row) -> None:
        """The hot path: one row in ``ROW`` order, taken as it is.

        Only the event name is checked here; the caller built the row from typed
        parameters (an event's row class, `acceptor.recorder`) and must not mutate
        a ``detail`` mapping afterwards. Raises RuntimeError once the writer is closed
        (unless `drop_after_close`).
        """
        if self.strict_events and row[2] not in self._events:
            raise ValueError(f"event {row[2]!r} is not a {self.source} event")
        with self._lock:
            if self._closed:
                if self.drop_after_close:
                    self.rows_late += 1
                    return
                raise RuntimeError(f"history writer {self.name} is closed")
            self._seq += 1
            if self.failure is not None:
                self.rows_lost += 1
                return
            rows = self._rows
            rows.append(row)
            if len(rows) >= self.max_rows:
                self._wake.set()

    # -- flushing --------------------------------------------------------------------
    def _batch(self, rows: list[Row], first_seq: int) -> pa.RecordBatch:
        """One chunk of rows as a record batch of SCHEMA; seq numbers from ``first_seq``."""
        n = len(rows)
        cols: list[Any] = list(zip(*rows, strict=True)) if n else [()] * len(ROW)
        ts_us = self._ts_ns(cols[0], cols[1]) // 1000
        arrays = [
            pa.array([self.run_id] * n, pa.string()),
            pa.array([self.source] * n, pa.string()),
            pa.array(np.arange(first_seq, first_seq + n, dtype=np.int64)),
            pa.array(ts_us, _TS_TYPE),
            pa.array(np.asarray(cols[1], dtype=np.int64)),
        ]
        arrays += row_arrays(cols)
        return pa.RecordBatch.from_arrays(arrays, schema=SCHEMA)

    def _ts_ns(self, ts: tuple[int | None, ...], mono: tuple[int, ...]) -> Any:
        """The rows' ``ts_ns``; those left None derived from their ``mono_ns``."""
        missing = ts.count(None)
        if not missing:
            return np.asarray(ts, dtype=np.int64)
        derived = np.asarray(mono, dtype=np.int64) + self._wall_minus_mono
        if missing == len(ts):
            return derived
        given = np.asarray([-1 if t is None else t for t in ts], dtype=np.int64)
        return np.where(given < 0, derived, given)

    def _table(self, rows: list[Row], first_seq: int) -> pa.Table:
        batches = []
        for start in range(0, len(rows), CHUNK):
            batches.append(self._batch(rows[start : start + CHUNK], first_seq + start))
            time.sleep(0)  # let a waiting event loop have the GIL between chunks
        return pa.Table.from_batches(batches, schema=SCHEMA)

    def flush(self) -> Path | None:
        """Write buffered rows as one atomic part file; returns its path (None if empty)."""
        with self._io_lock:  # parts and seq numbers in append order
            with self._lock:
                rows, self._rows = self._rows, []
                first_seq = self._seq - len(rows) + 1
            if not rows:
                return None
            if self.failure is not None:
                self.rows_lost += len(rows)
                return None
            table = self._table(rows, first_seq)
            self._part += 1
            final = self.dir / f"{self.name}-{self._part:05d}.parquet"
            tmp = self.dir / f".{final.name}.tmp"
            try:
                pq.write_table(table, tmp)
                os.replace(tmp, final)
            except OSError as exc:
                self._stop_writing(exc, len(rows), tmp)
                return None
            self.rows_written += len(rows)
            return final

    @property
    def marker(self) -> Path | None:
        """Where a writer that had to stop says why (`incomplete_markers`); None while it
        writes. Its name carries the error and the rows lost, so a disk with no room even
        for the marker's text still tells them (a rename needs no data block)."""
        return self._marker

    def _stop_writing(self, exc: OSError, lost: int, tmp: Path) -> None:
        """A part could not be written: keep every part already written as it is, stop
        writing, and leave the marker (the half part's own inode, emptied: no new space)."""
        with self._lock:
            self.failure = f"{exc.strerror or exc} ({type(exc).__name__})"
            self._errno = errno.errorcode.get(exc.errno or 0, "EIO")
            self.rows_lost += lost + len(self._rows)
            self._rows = []
        self._write_marker(half=tmp)
        print(
            f"history writer {self.name}: cannot write {tmp.name} ({self.failure}); "
            f"writing stopped, {self.rows_lost} rows lost so far; marker {self._marker}",
            flush=True,
        )

    def _write_marker(self, half: Path | None = None) -> None:
        """Name the marker after the error and the rows lost so far (renaming the earlier
        marker, or else the emptied ``half`` part, or else a new empty file), then write the
        reason into it as far as the disk allows."""
        new = self.dir / f".{self.name}.incomplete-{self._errno}-{self.rows_lost}"
        try:
            if self._marker is not None and self._marker.exists():
                os.replace(self._marker, new)
            elif half is not None and half.exists():
                os.truncate(half, 0)
                os.replace(half, new)
            else:
                new.touch()
            self._marker = new
        except OSError:
            return
        text = json.dumps(
            {
                "writer": self.name,
                "source": self.source,
                "reason": self.failure,
                "rows_written": self.rows_written,
                "rows_lost": self.rows_lost,
            }
        )
        try:
            with open(new, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError:
            pass

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
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.flush()
        if self.failure is not None:
            self._write_marker()  # the final count of rows lost

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def incomplete_markers(history_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """What every writer that had to stop left (`HistoryWriter.marker`): its name, the
    error and the rows lost from the marker's name, and the reason from its text where the
    disk had room for it."""
    out = []
    for path in sorted(Path(history_dir).glob("*/.*.incomplete*")):
        writer, _, tail = path.name[1:].rpartition(".incomplete")
        code, _, lost = tail.lstrip("-").partition("-")
        number = getattr(errno, code, None) if code else None
        info: dict[str, Any] = {
            "writer": writer,
            "reason": f"{os.strerror(number)} ({code})" if number else "unknown",
            "rows_lost": int(lost) if lost.isdigit() else None,
        }
        try:
            text = json.loads(path.read_text(encoding="utf-8") or "{}")
        except (OSError, ValueError):
            text = {}
        if isinstance(text, dict):
            info.update({k: v for k, v in text.items() if v is not None})
        info["marker"] = str(path)
        out.append(info)
    return out


def check_row(
    source: str, event: str, columns: Mapping[str, Any], detail: Mapping[str, Any] | str | None
) -> None:
    """KeyError unless every non-null column in `columns` and every key of a `detail`
    mapping is one event `event` of `source` declares (`base.history.events`)."""
    ev = BY_SOURCE[source][event]
    extra = [k for k, v in columns.items() if v is not None and k not in ev.columns]
    if extra:
        raise KeyError(f"{source} event {event!r} has no column(s) {sorted(extra)}")
    if detail is not None and not isinstance(detail, str) and ev.detail is not OPEN:
        keys = set(detail) - ev.detail
        if keys:
            raise KeyError(f"{source} event {event!r} has no detail key(s) {sorted(keys)}")


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
