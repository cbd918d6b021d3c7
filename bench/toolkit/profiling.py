"""Samplers around a block (py-spy, perf) and py-spy's collapsed stacks as shares."""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")


#: the project's package folders, as a profile's frame names them
PROJECT_ROOTS = ("base/", "acceptor/", "broker/", "loadprofiles/", "harness/", "bench/")


def _frame_name(frame: str) -> str:
    m = _FRAME.match(frame.strip())
    if not m:
        return frame.strip()
    path = m["file"]
    short = path.split("site-packages/", 1)[-1]
    for root in (*PROJECT_ROOTS, "asyncio/"):
        if root in short:
            short = root + short.split(root, 1)[1]
            break
    return f"{m['func']} ({short})"


def py_spy() -> str | None:
    """The py-spy command (on PATH or beside this interpreter), None when not installed."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    return spy if Path(spy).exists() else None


def collapsed_stacks(raw: str) -> Iterator[tuple[list[str], int]]:
    """py-spy's raw (collapsed) output -> each stack's frames, outermost first, and its
    sample count; lines that are not a stack are skipped."""
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            yield stack.split(";"), int(count)


def hot_spots(raw: str, top: int = 15) -> dict[str, Any]:
    """py-spy's collapsed stacks -> self and inclusive shares of all samples, by function."""
    self_c: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for stack, n in collapsed_stacks(raw):
        frames = [_frame_name(f) for f in stack]
        frames = [f for f in frames if not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        total += n
        self_c[frames[-1]] += n
        for f in set(frames):
            incl[f] += n
    return {
        "samples": total,
        "self": [(f, round(100 * c / total, 1)) for f, c in self_c.most_common(top)],
        "inclusive": [
            (f, round(100 * c / total, 1))
            for f, c in incl.most_common()
            if any(root in f for root in PROJECT_ROOTS)
        ][:top],
    }


@contextlib.contextmanager
def sampling(cmd: list[str]) -> Iterator[None]:
    """A sampler (py-spy, perf) running for the block; SIGINT ends it, as both write their
    output on SIGINT."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
