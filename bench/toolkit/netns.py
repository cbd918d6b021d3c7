"""The kernel's TCP counters of this network namespace, and a bench re-run in a private one
(loopback only, as root with util-linux ``unshare``) so that they count its traffic alone."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from base import procfs


def _progress(msg: str) -> None:
    print(f"[bench] {msg}", flush=True)


#: kernel TCP counters read around every Trogdor round: (file section, name)
NET_COUNTERS = (
    ("TcpExt", "ListenOverflows"),
    ("TcpExt", "ListenDrops"),
    ("TcpExt", "TCPAbortOnClose"),
    ("TcpExt", "TCPAbortOnData"),
    # a connect's SYN sent again: its client waited 1 s (ConnectionStress gives up after 500 ms
    # and still counts the attempt as a success, so this is where a dropped SYN shows)
    ("TcpExt", "TCPSynRetrans"),
    ("Tcp", "OutRsts"),
    ("Tcp", "EstabResets"),
    ("Tcp", "PassiveOpens"),
)


def net_counters() -> dict[str, int]:
    """The NET_COUNTERS of this network namespace (/proc/net/snmp and /proc/net/netstat)."""
    return parse_net_counters(procfs.NET_SNMP.read_text() + procfs.NET_NETSTAT.read_text())


def parse_net_counters(text: str) -> dict[str, int]:
    """NET_COUNTERS from /proc/net/{snmp,netstat} text, under their names."""
    groups = procfs.parse_net_counters(text)
    return {name: groups[g][name] for g, name in NET_COUNTERS if name in groups.get(g, {})}


_NETNS_ENV = "BENCH_ACCEPTOR_NETNS"


def in_private_netns() -> bool:
    """Whether this process is the re-run in its own network namespace."""
    return bool(os.environ.get(_NETNS_ENV))


def reexec_in_netns(
    argv: list[str], module: str = "bench.acceptor", progress: Callable[[str], None] = _progress
) -> int | None:
    """Run `module` (this bench) again in a private network namespace (loopback only);
    None: cannot."""
    if os.environ.get(_NETNS_ENV) or os.geteuid() != 0 or not shutil.which("unshare"):
        return None
    # The re-run has loopback only: what the broker fetches from Maven Central on first use
    # is fetched now. Without its JMX exporter the direct path has no connection count.
    from broker import BrokerError
    from broker.artifacts import jmx_exporter

    try:
        jmx_exporter(progress=progress)
    except BrokerError as exc:  # the broker says so again, and starts without it
        progress(f"no JMX exporter for the broker: {exc}")
    env = dict(os.environ, **{_NETNS_ENV: "1"})
    cmd = ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "sh"]
    cmd += [sys.executable, "-m", module, *argv]
    proc = subprocess.Popen(cmd, env=env, cwd=str(Path(__file__).resolve().parents[2]))
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        return proc.wait()
