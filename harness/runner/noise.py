"""Noise: the neighbours of a shared CI runner, made on purpose and recorded.

Why: the gate runs where pipelines run, on two-core machines shared with a test suite or a
build. A verdict that changes when a neighbour takes the CPU cannot be trusted, and a
neighbour nobody names cannot be reproduced. `--noise cpu=N,fork=R,io=M` makes the mix a
test suite beside the gate makes, in a process group of its own:

- ``cpu=N``: N processes spinning on a CPU (a compiler, a test worker);
- ``fork=R``: R short process starts per second (``/bin/true``: a suite's subprocesses,
  a build's tool invocations: fork, exec, exit, reap);
- ``io=M``: M writers, each writing 256 KiB blocks and ``fsync``-ing every one into a file
  of at most 32 MiB in the run's folder (a database test, a build's outputs), on the disk
  the history is written to.

The group starts before the run's clock (before the target) and stops with the run, before
the analysis; every member also stops by itself at its deadline, and checks its parent, so
none outlives a runner that died. `run.json` (``noise``), the report and `verdict.json`
carry the spec; the runner's `process_stats` rows (role ``noise``) record what it took.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from base.supervisor import ManagedProcess

#: the keys of `--noise`, with what each makes
KEYS = {
    "cpu": "busy processes",
    "fork": "short process starts per second",
    "io": "fsync-heavy writers",
}
BLOCK = 256 * 1024
FILE_MAX = 32 * 1024 * 1024
#: set by `harness selftest --noise` for its runs: the spec of the one noise group it keeps
#: beside all of them, which each run records as its own (`run.json`) without starting one
NOISE_BESIDE_ENV = "HARNESS_NOISE_BESIDE"


class NoiseError(ValueError):
    """A `--noise` value refused: the key, the value and the reason."""


@dataclass(frozen=True)
class NoiseSpec:
    cpu: int = 0
    fork: float = 0.0
    io: int = 0

    @classmethod
    def parse(cls, text: str) -> NoiseSpec:
        """``cpu=N,fork=R,io=M`` (any subset, any order); refused with the key, the value
        and the reason."""
        values: dict[str, Any] = {}
        for item in (p.strip() for p in text.split(",")):
            if not item:
                continue
            key, sep, value = item.partition("=")
            key = key.strip()
            if not sep:
                raise NoiseError(f"--noise {item!r}: expected key=value, keys {', '.join(KEYS)}")
            if key not in KEYS:
                raise NoiseError(
                    f"--noise key {key!r} (value {value!r}): unknown; keys: "
                    + ", ".join(f"{k} ({v})" for k, v in KEYS.items())
                )
            if key in values:
                raise NoiseError(f"--noise key {key!r} given twice")
            try:
                number = float(value) if key == "fork" else int(value)
            except ValueError:
                kind = "a number" if key == "fork" else "a whole number"
                raise NoiseError(f"--noise key {key!r} value {value!r}: not {kind}") from None
            if number < 0 or (key != "fork" and number > 64) or (key == "fork" and number > 500):
                bound = "500" if key == "fork" else "64"
                raise NoiseError(f"--noise key {key!r} value {value!r}: must be 0 to {bound}")
            values[key] = number
        return cls(**values)

    def __bool__(self) -> bool:
        return bool(self.cpu or self.fork or self.io)

    def __str__(self) -> str:
        return f"cpu={self.cpu},fork={self.fork:g},io={self.io}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Noise:
    """The noise group of one run: `start()` before the target, `stop()` with the run."""

    def __init__(self, spec: NoiseSpec, folder: Path, max_s: float, log_path: Path) -> None:
        self.spec = spec
        self.folder = folder
        self.max_s = max_s
        self.log_path = log_path
        self.proc: ManagedProcess | None = None

    def start(self) -> Noise:
        self.folder.mkdir(parents=True, exist_ok=True)
        argv = [
            sys.executable, "-m", "harness.runner.noise",
            "--cpu", str(self.spec.cpu), "--fork", f"{self.spec.fork:g}",
            "--io", str(self.spec.io), "--dir", str(self.folder),
            "--max-s", f"{self.max_s:g}",
        ]  # fmt: skip
        self.proc = ManagedProcess("noise", argv, log_path=self.log_path)
        return self

    @property
    def pgid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop(timeout=5.0)
        for f in self.folder.glob("writer-*"):
            with contextlib.suppress(OSError):
                f.unlink()
        with contextlib.suppress(OSError):
            self.folder.rmdir()

    def record(self) -> dict[str, Any]:
        """What `run.json`, the report and `verdict.json` say of it."""
        return {**self.spec.as_dict(), "spec": str(self.spec), "max_s": self.max_s}


# -- the noise process itself --------------------------------------------------------------
def _spin(deadline: float, parent: int) -> None:
    n = 0
    while True:
        n += 1
        if n % 200_000 == 0 and (time.monotonic() >= deadline or os.getppid() != parent):
            return


def _write(path: Path, deadline: float, parent: int) -> None:
    block = os.urandom(BLOCK)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        written = 0
        while time.monotonic() < deadline and os.getppid() == parent:
            if written >= FILE_MAX:
                os.ftruncate(fd, 0)
                os.lseek(fd, 0, os.SEEK_SET)
                written = 0
            written += os.write(fd, block)
            os.fsync(fd)
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            path.unlink()


def _child(run: Any, *args: Any) -> int:
    pid = os.fork()
    if pid == 0:
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            run(*args)
        finally:
            os._exit(0)
    return pid


def _forks(rate: float, deadline: float) -> None:
    """`rate` short process starts per second until the deadline (or a stop)."""
    if rate <= 0:
        while time.monotonic() < deadline:
            time.sleep(0.2)
        return
    period = 1.0 / rate
    due = time.monotonic()
    true = "/bin/true" if os.path.exists("/bin/true") else "/usr/bin/true"
    while time.monotonic() < deadline:
        pid = os.posix_spawn(true, [true], {})
        os.waitpid(pid, 0)
        due += period
        pause = due - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        elif pause < -1.0:
            due = time.monotonic()  # fell behind (the machine is that busy): no burst


def _exit_on_term(_sig: int, _frame: Any) -> None:
    sys.exit(0)  # unwinds main's `finally`: the children are killed and reaped


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.runner.noise", description=__doc__)
    ap.add_argument("--cpu", type=int, default=0)
    ap.add_argument("--fork", type=float, default=0.0)
    ap.add_argument("--io", type=int, default=0)
    ap.add_argument("--dir", type=Path, required=True)
    ap.add_argument("--max-s", type=float, required=True)
    a = ap.parse_args(argv)
    deadline = time.monotonic() + min(a.max_s, 24 * 3600.0)
    # neighbours are nobody's to place: every CPU, whatever the runner confined itself to
    with contextlib.suppress(OSError):
        os.sched_setaffinity(0, range(os.cpu_count() or 1))
    me = os.getpid()
    children = [_child(_spin, deadline, me) for _ in range(a.cpu)]
    children += [_child(_write, a.dir / f"writer-{i}", deadline, me) for i in range(a.io)]
    signal.signal(signal.SIGTERM, _exit_on_term)
    print(f"noise: cpu={a.cpu} fork={a.fork:g} io={a.io} for at most {a.max_s:g} s", flush=True)
    try:
        _forks(a.fork, deadline)
    finally:
        for pid in children:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.waitpid(pid, 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
