"""Worker "hosts" on one machine: network namespaces the run makes and removes itself.

``harness run --workers N --worker-netns`` tries load from N machines on one: N network
namespaces, each with its own address on a veth pair joined to one bridge, the run's
target listening on the bridge's (host) side. Addresses come from the benchmarking range
198.18.0.0/15 only (RFC 2544), never from 10/8, 172.16/12 or 192.168/16: a /24 per run,
``198.18.<i>.0/24``, the host side ``.1``, worker *j* (1-based) ``.(10 + j)``.

Every name starts with ``PREFIX`` and the run's index *i* (``hkw<i>br`` the bridge,
``hkw<i>n<j>`` a namespace, ``hkw<i>v<j>`` the host end of its veth pair). The index is
taken by creating the bridge (the kernel refuses a second of one name), and the bridge's
alias records the owner's pid, so `sweep` removes what a run that died left behind
without touching a live one's. `remove` is idempotent; callers use it in ``finally``.

The hosts share one temporary folder, ``<tmp>/hkw<i>-tmp`` (`WorkerHosts.tmp`): what runs
in them is given it as ``TMPDIR``, so what a process killed there could not clean up goes
with the hosts (`remove`, and `sweep` after a run that died).

``ip`` (iproute2) does the work; it needs root (CAP_NET_ADMIN). `permitted` says whether
this process may.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass

PREFIX = "hkw"
#: the benchmarking range (RFC 2544): the only addresses a namespace here is given
RANGE = ipaddress.IPv4Network("198.18.0.0/15")
MAX_HOSTS = 200
INDEXES = range(1, 256)


class NetnsError(RuntimeError):
    """A namespace, link or address the run could not make: names which and why."""


def subnet(index: int) -> ipaddress.IPv4Network:
    """The /24 of run index ``index`` (inside `RANGE`)."""
    net = ipaddress.IPv4Network(f"198.18.{index}.0/24")
    assert net.subnet_of(RANGE)
    return net


def host_address(index: int) -> str:
    return str(subnet(index).network_address + 1)


def worker_address(index: int, j: int) -> str:
    """Worker ``j`` (1-based) of run index ``index``."""
    if not 1 <= j <= MAX_HOSTS:
        raise NetnsError(f"worker {j}: between 1 and {MAX_HOSTS} worker hosts")
    return str(subnet(index).network_address + 10 + j)


def tmp_dir(index: int) -> str:
    """The temporary folder of run index ``index``'s hosts."""
    return os.path.join(tempfile.gettempdir(), f"{PREFIX}{index}-tmp")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20, check=False)
    if check and proc.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {proc.stderr.strip() or proc.returncode}")
    return proc


def permitted() -> str | None:
    """None when this process may make namespaces; else why not."""
    name = f"{PREFIX}probe{os.getpid()}"
    try:
        made = _ip("netns", "add", name, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"ip netns: {exc}"
    if made.returncode != 0:
        return f"ip netns add: {made.stderr.strip()} (needs root: CAP_NET_ADMIN)"
    _ip("netns", "del", name, check=False)
    return None


@dataclass
class WorkerHosts:
    """N namespaces on one bridge; `exec_prefix(j)` runs a command inside host ``j``."""

    index: int
    count: int

    @property
    def bridge(self) -> str:
        return f"{PREFIX}{self.index}br"

    def namespace(self, j: int) -> str:
        return f"{PREFIX}{self.index}n{j}"

    def _veth(self, j: int) -> tuple[str, str]:
        return f"{PREFIX}{self.index}v{j}", f"{PREFIX}{self.index}p{j}"

    @property
    def host(self) -> str:
        """The target's side of the bridge: where the target listens, the master binds."""
        return host_address(self.index)

    @property
    def addresses(self) -> list[str]:
        return [worker_address(self.index, j) for j in range(1, self.count + 1)]

    def exec_prefix(self, j: int) -> list[str]:
        return ["ip", "netns", "exec", self.namespace(j)]

    @property
    def tmp(self) -> str:
        """The hosts' temporary folder: ``TMPDIR`` of what runs in them (removed with them)."""
        return tmp_dir(self.index)

    @classmethod
    def create(cls, count: int) -> WorkerHosts:
        """Take a free index, make the bridge and ``count`` hosts; on any failure remove
        what was made and raise `NetnsError`."""
        if not 1 <= count <= MAX_HOSTS:
            raise NetnsError(f"--workers {count}: between 1 and {MAX_HOSTS} namespaces")
        sweep()
        for index in INDEXES:
            hosts = cls(index, count)
            if _ip("link", "add", hosts.bridge, "type", "bridge", check=False).returncode == 0:
                break
        else:
            raise NetnsError(f"no free {PREFIX}<i>br bridge name in {INDEXES}")
        try:
            hosts._build()
        except BaseException:
            hosts.remove()
            raise
        return hosts

    def _build(self) -> None:
        br, prefix = self.bridge, subnet(self.index).prefixlen
        _ip("link", "set", br, "alias", f"owner={os.getpid()}")
        shutil.rmtree(self.tmp, ignore_errors=True)  # the index is ours: nothing there is live
        os.mkdir(self.tmp, 0o700)
        _ip("addr", "add", f"{self.host}/{prefix}", "dev", br)
        _ip("link", "set", br, "up")
        for j in range(1, self.count + 1):
            ns, (outer, inner) = self.namespace(j), self._veth(j)
            _ip("netns", "add", ns)
            _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
            _ip("link", "set", inner, "netns", ns)
            _ip("link", "set", outer, "master", br, "up")
            inside = ("-n", ns)
            _ip(*inside, "addr", "add", f"{worker_address(self.index, j)}/{prefix}", "dev", inner)
            _ip(*inside, "link", "set", inner, "up")
            _ip(*inside, "link", "set", "lo", "up")

    def remove(self) -> list[str]:
        """Remove every namespace and the bridge (a veth goes with its namespace); what
        could not be removed is returned, never raised."""
        return _remove(self.index)


def _names(kind: Sequence[str]) -> list[str]:
    out = _ip(*kind, check=False).stdout
    return [line.split()[0].rstrip(":").split("@")[0] for line in out.splitlines() if line.strip()]


def _remove(index: int) -> list[str]:
    mine = f"{PREFIX}{index}"
    left: list[str] = []
    for ns in _names(("netns", "list")):
        if ns.startswith(f"{mine}n"):
            if _ip("netns", "del", ns, check=False).returncode != 0:
                left.append(ns)
    # a veth's host end goes with its namespace, a moment later: look again before saying
    # one is left (bounded: 20 looks, 2 s)
    for _look in range(20):
        links = [n for n in _links() if n.startswith(f"{mine}v") or n == f"{mine}br"]
        for link in links:
            _ip("link", "del", link, check=False)
        if not links:
            break
        time.sleep(0.1)
    else:
        left += links
    tmp = tmp_dir(index)
    shutil.rmtree(tmp, ignore_errors=True)
    if os.path.lexists(tmp):
        left.append(tmp)
    return left


def _links() -> list[str]:
    """Link names (``ip -o link``: ``N: name@peer: <...>``)."""
    out = _ip("-o", "link", "show", check=False).stdout
    return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line]


def _owner(bridge: str) -> int | None:
    out = _ip("-o", "link", "show", bridge, check=False).stdout
    _, found, rest = out.partition("alias owner=")
    return int(rest.split()[0]) if found and rest.split()[0].isdigit() else None


def sweep() -> list[str]:
    """Remove what runs that are gone left behind (their owner pid no longer lives);
    returns the indexes cleaned, as bridge names."""
    cleaned = []
    for link in _links():
        if not (link.startswith(PREFIX) and link.endswith("br")):
            continue
        index = link[len(PREFIX) : -2]
        owner = _owner(link)
        if index.isdigit() and (owner is None or not _alive(owner)):
            _remove(int(index))
            cleaned.append(link)
    return cleaned


def leftovers(index: int) -> list[str]:
    """Names of run index ``index`` still present (empty once removed)."""
    mine = f"{PREFIX}{index}"
    found = [n for n in _names(("netns", "list")) if n.startswith(f"{mine}n")]
    return found + [n for n in _links() if n.startswith(f"{mine}v") or n == f"{mine}br"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
