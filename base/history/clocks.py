"""Which clock a history file's instants are on, and moving a file's rows onto another.

Every row carries ``mono_ns`` (CLOCK_MONOTONIC of the machine that wrote it) and ``ts``
(its wall clock). Processes on one kernel share CLOCK_MONOTONIC, so the rows of one
machine compare directly, whatever process or container wrote them; the kernel's boot id
(``/proc/sys/kernel/random/boot_id``, the same in every container on it) names that
clock. A Locust worker on another machine has its own: it measures its offset to the
master's wall clock (``loadprofiles.clock``: master ≈ local + offset, within RTT/2) and
its history files carry in their Parquet metadata the boot id, the writer's own
wall-minus-monotonic and that offset. The runner records its machine's pair in run.json
(``clock``). Before any check reads them, the analysis moves the rows of a file written
under another boot id onto the runner's monotonic clock (`alignment`):

    mono' = mono + (file wall−mono + offset) − (runner wall−mono),   ts' = ts + offset

and the monotonic instants inside ``detail`` (keys ending ``_mono_ns``) with them. The
error is the offset estimate's, at most half the best ping's round trip (``clock_rtt_ns``).
A file without a boot id (written before this existed, or by a writer on the runner's
machine) is on the runner's clock.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

BOOT_ID_FILE = Path("/proc/sys/kernel/random/boot_id")
#: Parquet metadata keys of a history file written off the runner's machine
BOOT_ID = b"boot_id"
WALL_MINUS_MONO = b"wall_minus_mono_ns"
OFFSET = b"clock_offset_ns"
RTT = b"clock_rtt_ns"
#: the reference process's (the Locust master's) boot id and wall-minus-monotonic, read in
#: the same exchange as the offset (WALL_MINUS_MONO then too): a wall clock that is being
#: slewed or stepped moves wall-minus-monotonic, so all three are taken together
REFERENCE_BOOT_ID = b"reference_boot_id"
REFERENCE_WALL_MINUS_MONO = b"reference_wall_minus_mono_ns"


def boot_id() -> str:
    """This kernel's boot id ("" where the kernel does not say)."""
    try:
        return BOOT_ID_FILE.read_text().strip()
    except OSError:
        return ""


def host_clock() -> dict[str, Any]:
    """This machine's clock identity and wall-minus-monotonic (run.json ``clock``)."""
    return {"boot_id": boot_id(), "wall_minus_mono_ns": time.time_ns() - time.monotonic_ns()}


def file_metadata(
    boot: str,
    wall_minus_mono_ns: int,
    offset_ns: int,
    rtt_ns: int | None,
    reference: tuple[str, int] | None = None,
) -> dict[bytes, bytes]:
    """The metadata a writer puts in each history file it writes; `reference`: the boot id
    and wall-minus-monotonic of the clock the offset is to, read with it."""
    meta = {
        BOOT_ID: boot.encode(),
        WALL_MINUS_MONO: str(wall_minus_mono_ns).encode(),
        OFFSET: str(offset_ns).encode(),
    }
    if rtt_ns is not None:
        meta[RTT] = str(rtt_ns).encode()
    if reference is not None:
        meta[REFERENCE_BOOT_ID] = reference[0].encode()
        meta[REFERENCE_WALL_MINUS_MONO] = str(reference[1]).encode()
    return meta


@dataclass(frozen=True)
class Shift:
    """What to add to one file's instants to put them on the reference clock."""

    mono_ns: int
    wall_ns: int
    #: the bound on the error: half the offset estimate's round trip (None: not measured)
    error_ns: int | None


def alignment(meta: Mapping[bytes, bytes] | None, reference: Mapping[str, Any]) -> Shift | None:
    """The shift of a file with Parquet metadata ``meta`` onto ``reference`` (run.json
    ``clock``); None when the file is on that clock already (same boot id, or either side
    recorded none)."""
    meta = meta or {}
    boot = meta.get(BOOT_ID, b"").decode()
    ref_boot = str(reference.get("boot_id") or "")
    ref_wm = reference.get("wall_minus_mono_ns")
    if not boot or not ref_boot or boot == ref_boot or not isinstance(ref_wm, int):
        return None
    wall_minus_mono = int(meta[WALL_MINUS_MONO])
    offset = int(meta.get(OFFSET, b"0"))
    if meta.get(REFERENCE_BOOT_ID, b"").decode() == ref_boot and REFERENCE_WALL_MINUS_MONO in meta:
        # the offset is to a process on the runner's kernel (its monotonic clock), and its
        # wall-minus-monotonic was read in the same exchange: the run's start reading would
        # be off by whatever the wall clock was slewed or stepped since
        ref_wm = int(meta[REFERENCE_WALL_MINUS_MONO])
    rtt = meta.get(RTT)
    return Shift(
        mono_ns=wall_minus_mono + offset - ref_wm,
        wall_ns=offset,
        error_ns=int(rtt) // 2 if rtt is not None else None,
    )


def shift_table(table: pa.Table, mono_ns: int, wall_ns: int) -> pa.Table:
    """``table`` with ``mono_ns``, ``ts`` and every ``*_mono_ns`` key of ``detail`` moved by
    the given amounts (the schema and its metadata kept)."""
    mono = pc.add(table["mono_ns"], pa.scalar(mono_ns, pa.int64()))
    ts_type = table.schema.field("ts").type
    ts = pc.add(table["ts"].cast(pa.int64()), pa.scalar(wall_ns // 1000, pa.int64())).cast(ts_type)
    table = _set(table, "mono_ns", mono)
    return shift_details(_set(table, "ts", ts), mono_ns)


def shift_details(table: pa.Table, mono_ns: int) -> pa.Table:
    """``table`` with every ``*_mono_ns`` key of its ``detail`` moved by ``mono_ns``."""
    detail = pa.array([_shift_detail(d, mono_ns) for d in table["detail"].to_pylist()], pa.string())
    return _set(table, "detail", detail)


def _set(table: pa.Table, name: str, column: Any) -> pa.Table:
    field = table.schema.field(name)
    out = table.set_column(table.schema.get_field_index(name), field, column)
    return out.replace_schema_metadata(table.schema.metadata)


def _shift_detail(detail: str | None, mono_ns: int) -> str | None:
    if detail is None or "_mono_ns" not in detail:
        return detail
    parsed = json.loads(detail)
    if not isinstance(parsed, dict):
        return detail
    for key, value in parsed.items():
        if key.endswith("_mono_ns") and isinstance(value, int):
            parsed[key] = value + mono_ns
    return json.dumps(parsed, sort_keys=True)
