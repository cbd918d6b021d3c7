"""History files written on another machine, moved onto the runner's clock (copies; the originals
are never changed)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass


def align_files(
    run_dir: Path, files: list[Path], reference: Any
) -> tuple[list[Path], list[dict[str, Any]]]:
    """``files`` with each one written on another machine (another boot id,
    base.history.clocks) replaced by a copy moved onto the runner's clock (run.json
    ``clock``), under ``report/.aligned/<source>/``: the originals are never changed. A
    run without a recorded clock (older runs) is read as it is."""
    if not isinstance(reference, dict) or not reference.get("boot_id"):
        return files, []
    import os

    import pyarrow.parquet as pq

    from base.history.clocks import alignment, shift_table

    out: list[Path] = []
    notes: list[dict[str, Any]] = []
    for f in files:
        shift = alignment(pq.read_schema(f).metadata, reference)
        if shift is None:
            out.append(f)
            continue
        dest = run_dir / "report" / ".aligned" / f.parent.name / f.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.tmp")
        pq.write_table(shift_table(pq.read_table(f), shift.mono_ns, shift.wall_ns), tmp)
        os.replace(tmp, dest)
        out.append(dest)
        notes.append(
            {"file": str(f.relative_to(run_dir)), "shift_ms": shift.mono_ns / 1e6,
             "error_ms": None if shift.error_ns is None else shift.error_ns / 1e6}
        )  # fmt: skip
    return out, notes
