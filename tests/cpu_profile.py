"""Where the suite's CPU goes: `pytest -p tests.cpu_profile` (with or without `-n N`).

`make test` runs on as many workers as keep the CPUs busy, so its time is the suite's CPU
divided by the CPUs, and a test's wall time says little about what it costs the others.
This plugin puts each pytest process (each xdist worker) in a cgroup of its own (cgroup v1
`cpuacct`, as root), so every process a test starts is counted, also one that outlives its
parent (a Spark JVM, a broker), and writes one JSON line per test to `$HARNESS_TEST_CPU`
(default `test-cpu.jsonl`): `{"id", "wall", "cpu"}` (seconds). Containers run in the Docker
engine's cgroups and are not counted. `python -m tests.cpu_profile FILE` sums it per module.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import time
from collections.abc import Generator
from pathlib import Path

import pytest

ROOT = Path("/sys/fs/cgroup/cpuacct")


def _group() -> Path:
    group = ROOT / f"pytest-{os.getpid()}"
    if not group.is_dir():
        try:
            group.mkdir()
            (group / "cgroup.procs").write_text(str(os.getpid()))
        except OSError as exc:
            pytest.exit(f"tests.cpu_profile needs a writable {ROOT} (root, cgroup v1): {exc}")
    return group


def _usage_s(group: Path) -> float:
    return int((group / "cpuacct.usage").read_text()) / 1e9


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None]:
    group = _group()
    c0, t0 = _usage_s(group), time.monotonic()
    try:
        return (yield)
    finally:
        row = {"id": item.nodeid, "wall": time.monotonic() - t0, "cpu": _usage_s(group) - c0}
        with open(os.environ.get("HARNESS_TEST_CPU", "test-cpu.jsonl"), "a") as out:
            out.write(json.dumps({k: round(v, 2) if k != "id" else v for k, v in row.items()}))
            out.write("\n")


def pytest_unconfigure(config: pytest.Config) -> None:
    """Back to the root group, and this one removed (kept while a process started here
    still lives in it)."""
    group = ROOT / f"pytest-{os.getpid()}"
    if group.is_dir():
        try:
            (ROOT / "cgroup.procs").write_text(str(os.getpid()))
            group.rmdir()
        except OSError:
            pass


def summary(path: Path, top: int = 30) -> str:
    """CPU and wall per module, most CPU first, and per folder."""
    per: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for line in path.read_text().splitlines():
        row = json.loads(line)
        module = row["id"].split("::")[0]
        per[module][0] += row["cpu"]
        per[module][1] += row["wall"]
        per[module][2] += 1
    folders: dict[str, float] = collections.defaultdict(float)
    for module, (cpu, _, _) in per.items():
        folders[module.split("/")[1] if "/" in module else module] += cpu
    lines = [
        f"{sum(v[2] for v in per.values()):.0f} tests, {sum(folders.values()):.0f} CPU-s: "
        + ", ".join(f"{k} {v:.0f}" for k, v in sorted(folders.items(), key=lambda kv: -kv[1]))
    ]
    for module, (cpu, wall, n) in sorted(per.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"{cpu:7.1f} CPU-s {wall:7.1f} s wall {n:4.0f} tests  {module}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary(Path(sys.argv[1] if len(sys.argv) > 1 else "test-cpu.jsonl")))
