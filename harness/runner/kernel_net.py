"""The kernel's listen-queue drops, read every second into the history.

A client whose SYN or final ACK the kernel dropped because a listening socket's accept
queue was full (or its SYN queue, without SYN cookies) is in the client history and in
no enforcer's: the `accounting` check explains such attempts with these counters. Linux
keeps them per network namespace, not per socket (`/proc/net/netstat`, group `TcpExt`):

- ``ListenOverflows``: a connection that completed its handshake found the accept queue
  full (the ACK is dropped; the client, already connected, retries);
- ``ListenDrops``: every drop on a listening socket, overflows included (so it is the
  count the check uses);
- ``TCPReqQFullDrop`` / ``TCPReqQFullDoCookies``: SYNs dropped, or answered with a SYN
  cookie, because the SYN queue was full.

Each reading is one harness row, event ``kernel_net``, at the instant the read began
(``latency_ms``: how long it took; the counters were read inside that span), with
``detail.netns`` naming the namespace counted (the runner's own: the load, the acceptor
and a local broker share it on loopback). A failed read is a row with ``reason =
"read_failed"``: a gap is recorded, never papered over.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import cast

from base import procfs
from base.history.rows import HarnessKernelNet, HarnessKernelNetDetail, Row
from harness.runner.periodic import Periodic

EVENT = "kernel_net"
NETSTAT = procfs.NET_NETSTAT
#: TcpExt counter -> the detail key it is recorded under
FIELDS = {
    "ListenOverflows": "listen_overflows",
    "ListenDrops": "listen_drops",
    "TCPReqQFullDrop": "reqq_full_drop",
    "TCPReqQFullDoCookies": "syn_cookies",
}


class NetstatError(ValueError):
    pass


def parse_netstat(text: str) -> HarnessKernelNetDetail:
    """``/proc/net/netstat`` text -> the `FIELDS` counters under their detail keys (the
    reading's part of its row's detail).

    Raises `NetstatError` when the file is malformed or the TcpExt group or a counter is
    missing (a kernel without them cannot explain a drop, and must not look as if it saw
    none)."""
    try:
        groups = procfs.parse_net_counters(text)
    except ValueError as exc:
        raise NetstatError(str(exc)) from None
    if "TcpExt" not in groups:
        raise NetstatError("no TcpExt group")
    counters = groups["TcpExt"]
    missing = [k for k in FIELDS if k not in counters]
    if missing:
        raise NetstatError(f"TcpExt has no {', '.join(missing)}")
    return cast(HarnessKernelNetDetail, {key: counters[name] for name, key in FIELDS.items()})


def namespace() -> str:
    """The network namespace this process counts in (``net:[4026531840]``)."""
    try:
        return os.readlink("/proc/self/ns/net")
    except OSError:
        return "unknown"


class KernelNetSampler:
    """Read the counters every ``interval_s`` into ``write`` (a HistoryWriter.append)."""

    def __init__(
        self,
        write: Callable[[Row], None],
        *,
        interval_s: float = 1.0,
        max_duration_s: float = 24 * 3600.0,
        read: Callable[[], str] = NETSTAT.read_text,
        clock_ns: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self.write = write
        self.read = read
        self.clock_ns = clock_ns
        self.netns = namespace()
        self.readings = 0
        self.failures = 0
        self.first: HarnessKernelNetDetail | None = None
        self.last: HarnessKernelNetDetail | None = None
        self.last_error: str | None = None
        self._every = Periodic(
            self.sample_once, name="kernel-net", interval_s=interval_s,
            max_duration_s=max_duration_s,
        )  # fmt: skip

    def sample_once(self) -> bool:
        t0 = self.clock_ns()
        try:
            counters = parse_netstat(self.read())
        except (OSError, NetstatError) as exc:
            self.failures += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            failed: HarnessKernelNetDetail = {"netns": self.netns, "error": self.last_error}
            self.write(HarnessKernelNet(t0, reason="read_failed", detail=failed))
            return False
        t1 = self.clock_ns()
        self.readings += 1
        if self.first is None:
            self.first = counters
        self.last = counters
        detail: HarnessKernelNetDetail = {**counters, "netns": self.netns}
        self.write(HarnessKernelNet(t0, latency_ms=(t1 - t0) / 1e6, detail=detail))
        return True

    def start(self) -> KernelNetSampler:
        self._every.start()
        return self

    def stop(self) -> None:
        """Stop and take one last reading."""
        self._every.stop()

    def summary(self) -> str:
        if self.first is None or self.last is None:
            return f"no reading ({self.last_error})"
        was, now = self.first, self.last
        return (
            f"{self.readings} readings in {self.netns}, {self.failures} failed; during the run "
            f"{now['listen_drops'] - was['listen_drops']} listen drops "
            f"({now['listen_overflows'] - was['listen_overflows']} accept-queue overflows), "
            f"{now['reqq_full_drop'] - was['reqq_full_drop']} SYNs dropped, "
            f"{now['syn_cookies'] - was['syn_cookies']} SYN cookies"
        )


def start_sampler(write: Callable[[Row], None], say: Callable[[str], None]) -> KernelNetSampler:
    """The orchestrator's hook: the kernel's drop counters into the harness history."""
    sampler = KernelNetSampler(write)
    if not sampler.sample_once():
        say(f"kernel listen-queue counters not readable ({sampler.last_error}): recorded as gaps")
    say(f"recording the kernel's listen-queue drops every second (event {EVENT})")
    return sampler.start()
