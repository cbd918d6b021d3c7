"""Explicit readiness of load processes: marker files, never log text.

With ``--ready-dir DIR`` every load process writes ``DIR/<pid>.ready`` when its
first arrival is due (load is about to flow) and ``DIR/<pid>.done`` when its
schedule is over (every arrival started and finished, or recorded not offered).
Both are written atomically (temp name + rename) and hold a small JSON object
(``pid``, ``mono_ns``, and for ``done`` the intended/offered counts). The runner
(``harness.runner.orchestrator``) polls ``phase_state``: one pure function of the
directory, so it can be tested without Locust.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

READY, DONE = "ready", "done"


def mark(ready_dir: str | os.PathLike[str] | None, kind: str, **info: Any) -> Path | None:
    """Write ``<pid>.<kind>`` (``ready`` or ``done``); nothing without a directory."""
    if not ready_dir:
        return None
    if kind not in (READY, DONE):
        raise ValueError(f"marker kind {kind!r}: expected {READY} or {DONE}")
    d = Path(ready_dir)
    d.mkdir(parents=True, exist_ok=True)
    pid = os.getpid()
    final = d / f"{pid}.{kind}"
    tmp = d / f".{pid}.{kind}.tmp"
    tmp.write_text(json.dumps({"pid": pid, "mono_ns": time.monotonic_ns(), **info}))
    os.replace(tmp, final)
    return final


def phase_state(ready_dir: str | os.PathLike[str]) -> tuple[int, int]:
    """(processes ready, processes done) in ``ready_dir`` (0, 0 if it does not exist)."""
    d = Path(ready_dir)
    if not d.is_dir():
        return 0, 0
    names = [p.name for p in d.iterdir() if not p.name.startswith(".")]
    return sum(n.endswith(".ready") for n in names), sum(n.endswith(".done") for n in names)


def first_ready_mono_ns(ready_dir: str | os.PathLike[str]) -> int | None:
    """The earliest ``mono_ns`` among the ready markers (None if none)."""
    d = Path(ready_dir)
    found: list[int] = []
    for p in d.glob("*.ready") if d.is_dir() else ():
        try:
            found.append(int(json.loads(p.read_text())["mono_ns"]))
        except (OSError, ValueError, KeyError):
            continue
    return min(found) if found else None
