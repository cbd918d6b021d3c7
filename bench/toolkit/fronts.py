"""An acceptor as its own process for a bench: the current tree's or another commit's (``git
archive``), its ready file and counters, stopped for sure; the sessions fronts run in."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from base import procfs
from bench.toolkit.trogdor import scrape

PROJECT = Path(__file__).resolve().parents[2]
#: the project's packages, as another commit's tree may hold them (those it has are archived)
PACKAGES = ("base", "acceptor", "broker", "harness", "loadprofiles")


def start_acceptor(
    work: Path,
    tag: str,
    port: int,
    upstream_port: int,
    loop: str,
    cwd: Path | None = None,
    *,
    metrics: bool = False,
    history: bool = True,
    sets: tuple[str, ...] = (),
    own_session: bool = False,
    wrapper: tuple[str, ...] = (),
) -> subprocess.Popen[bytes]:
    """`harness acceptor` as its own process (from `cwd`'s harness/ if given).

    History on unless ``history`` is False; with ``metrics`` its /metrics listens on a free
    port (``ready_info(work, tag)``); with ``own_session`` in a session of its own, as the
    broker and as the runner starts it (its own autogroup for the scheduler); ``wrapper``:
    the command it runs under (valgrind: `bench.front_instructions`).
    """
    ready = work / f"ready-{tag}.json"
    env = dict(os.environ)
    if cwd is not None:
        env["PYTHONPATH"] = str(cwd)
    proc = subprocess.Popen(
        [*wrapper, sys.executable, "-m", "harness", "acceptor", "--loop", loop,
         "--set", f"listeners=CLIENT://127.0.0.1:{port}",
         "--set", f"listener.name.client.upstream=127.0.0.1:{upstream_port}",
         "--set", f"metrics.port={0 if metrics else -1}",
         *(arg for kv in sets for arg in ("--set", kv)),
         *(["--history", str(work / f"history-{tag}")] if history else []),
         "--run-id", f"bench-{tag}", "--ready-file", str(ready)],
        stdout=open(work / f"acceptor-{tag}.log", "w"), stderr=subprocess.STDOUT,
        cwd=str(cwd) if cwd is not None else None, env=env, start_new_session=own_session,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_process(proc)
            raise SystemExit(f"acceptor {tag} did not start; see {work / f'acceptor-{tag}.log'}")
        time.sleep(0.1)
    return proc


def ref_checkout(ref: str, dest: Path) -> Path:
    """Another commit's packages (``git archive`` of those of `PACKAGES` it has) under `dest`,
    to run its acceptor with ``cwd=dest`` beside the current one."""
    dest.mkdir(parents=True)
    root = PROJECT
    listed = subprocess.run(
        ["git", "-C", str(root), "ls-tree", "--name-only", ref],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    packages = [p for p in PACKAGES if p in listed]
    archive = subprocess.run(
        ["git", "-C", str(root), "archive", ref, *packages], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def ready_info(work: Path, tag: str) -> dict[str, Any]:
    info: dict[str, Any] = json.loads((work / f"ready-{tag}.json").read_text())
    return info


def stop_process(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def kill_descendants() -> None:
    """Kill what this bench started and left running (Trogdor JVMs after an interrupt)."""
    kids = procfs.children()
    todo, mine = [os.getpid()], []
    while todo:
        for child in kids.get(todo.pop(), []):
            mine.append(child)
            todo.append(child)
    for pid in mine:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def acceptor_accepted(metrics_url: str | None) -> float | None:
    """Connections the acceptor accepted so far (its `harness_acceptor_connections` counter)."""
    text = scrape(metrics_url)
    if text is None:
        return None
    total = 0.0  # no line yet: nothing accepted so far
    for line in text.splitlines():
        if line.startswith("harness_acceptor_connections_total{") and 'outcome="accepted"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def autogroup() -> bool | None:
    """Whether the kernel groups the scheduling of each session (``sched_autogroup``): then
    a process in a session of its own gets a CPU share of its own, whatever the number of
    threads in the other sessions."""
    try:
        return Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
    except OSError:
        return None


def add_sessions_option(ap: argparse.ArgumentParser) -> None:
    """``--sessions own|load``: where the fronts run, for the scheduler."""
    ap.add_argument(
        "--sessions",
        choices=("own", "load"),
        default="own",
        help="own: each front (acceptor, HAProxy, floor front) in a session of its own, as "
        "the broker and as the runner starts the acceptor (with the kernel's autogroup on, "
        "each session is scheduled as one group); load: the fronts in the load's session, "
        "sharing its group with Trogdor's threads (bench.acceptor's layout until session 8)",
    )
