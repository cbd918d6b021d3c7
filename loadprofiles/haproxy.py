"""A real HAProxy (Debian's /usr/sbin/haproxy) in front of the acceptor, adding PROXY headers.

For the scenario where clients sit behind a real proxy: HAProxy terminates the
client's TCP connection and opens its own to the acceptor from ``source_ip``,
prefixing a PROXY v1 (``send-proxy``) or v2 (``send-proxy-v2``) header that carries
the true client address. The acceptor then sees one TCP peer (HAProxy) for many
clients, and must apply per-IP limits to the header's address.

The config is bounded and loopback-only: it is written to a temp dir, binds
127.0.0.x only, caps ``maxconn`` and runs in the foreground as our child process.

    python -m loadprofiles.haproxy --upstream 127.0.0.1:9093 --send-proxy v2
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from base import procfs
from base.localnet import free_port
from base.supervisor import ManagedProcess
from loadprofiles.addresses import parse_ip_pool, parse_target

HAPROXY = "/usr/sbin/haproxy"

_CONFIG = """\
# written by loadprofiles/haproxy.py; loopback only, bounded
global
    maxconn {maxconn}{nbthread}

defaults
    mode tcp{splice}
    timeout connect 5s
    timeout client 60s
    timeout server 60s

frontend harness_in
    bind {listen_ip}:{listen_port}{backlog}
    maxconn {maxconn}
    default_backend harness_acceptor

backend harness_acceptor
    source {source_ip}
    server acceptor {upstream_host}:{upstream_port} {send_proxy}
"""


#: the `send_proxy` choices and the server keyword each writes
SEND_PROXY = {"v1": "send-proxy", "v2": "send-proxy-v2", "off": ""}


class HAProxyError(RuntimeError):
    """HAProxy is missing, refused its config or did not start listening."""


@dataclass
class HAProxy:
    """A running HAProxy child process."""

    process: ManagedProcess
    address: tuple[str, int]
    source_ip: str
    workdir: Path
    _own_dir: bool = field(default=False, repr=False)

    def stop(self, timeout_s: float = 10.0) -> None:
        self.process.stop(timeout_s)
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> HAProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def render_config(
    *,
    upstream: tuple[str, int],
    send_proxy: str,
    listen: tuple[str, int],
    source_ip: str,
    maxconn: int,
    threads: int | None = None,
    splice: bool = False,
    backlog: int | None = None,
) -> str:
    """The haproxy.cfg text (validated inputs only: loopback addresses; v1, v2, or off: a
    plain TCP relay with no header, as `bench/acceptor.py` measures a C relay's cost).

    ``backlog``: the listening socket's accept queue (None: HAProxy's default, the
    frontend's ``maxconn``, capped by the kernel's ``somaxconn``)."""
    if send_proxy not in SEND_PROXY:
        raise HAProxyError(f"send_proxy={send_proxy!r}: expected one of {sorted(SEND_PROXY)}")
    parse_target(f"{upstream[0]}:{upstream[1]}", "upstream")
    parse_target(f"{listen[0]}:{listen[1]}", "listen")
    parse_ip_pool(source_ip, "source_ip")
    if not 1 <= maxconn <= 100_000:
        raise HAProxyError(f"maxconn={maxconn!r}: expected 1..100000")
    if threads is not None and not 1 <= threads <= 64:
        raise HAProxyError(f"threads={threads!r}: expected 1..64 (None: HAProxy's default)")
    if backlog is not None and not 1 <= backlog <= 65_535:
        raise HAProxyError(f"backlog={backlog!r}: expected 1..65535 (None: HAProxy's default)")
    return _CONFIG.format(
        maxconn=maxconn,
        nbthread="" if threads is None else f"\n    nbthread {threads}",
        splice="\n    option splice-auto" if splice else "",
        listen_ip=listen[0],
        listen_port=listen[1],
        backlog="" if backlog is None else f" backlog {backlog}",
        source_ip=source_ip,
        upstream_host=upstream[0],
        upstream_port=upstream[1],
        send_proxy=SEND_PROXY[send_proxy],
    )


def listening(ip: str, port: int, table: Path = procfs.NET_TCP) -> bool:
    """Whether a socket listens on ``ip:port`` (IPv4), from the kernel's socket table.

    Read rather than probed: a test connection would pass through HAProxy to the
    acceptor as a connection no client made, and the checker rightly counts every
    connection the enforcer saw (``client_acceptor_agreement``)."""
    return any(s.port == port and s.ip in (ip, "0.0.0.0") for s in procfs.listen_sockets(table))


def start_haproxy(
    *,
    upstream: tuple[str, int],
    send_proxy: str = "v2",
    listen_ip: str = "127.0.0.1",
    listen_port: int = 0,
    source_ip: str = "127.0.0.250",
    maxconn: int = 4000,
    threads: int | None = None,
    splice: bool = False,
    backlog: int | None = None,
    workdir: Path | None = None,
    binary: str = HAPROXY,
    timeout_s: float = 10.0,
    own_session: bool = False,
) -> HAProxy:
    """Start HAProxy forwarding ``listen`` → ``upstream`` with a PROXY header; wait until
    it accepts connections. ``listen_port=0`` picks a free port; ``threads``: HAProxy's
    ``nbthread`` (None: one per CPU it may use); ``splice``: ``option splice-auto`` (Linux
    ``splice()`` moves the bytes between the two sockets without a copy through HAProxy);
    ``backlog``: the listening socket's accept queue (None: HAProxy's default);
    ``own_session``: in a session of its own (its own autogroup for the scheduler, as a
    service started by its own supervisor)."""
    if not Path(binary).exists():
        raise HAProxyError(
            f"{binary} not found: install Debian's package (apt-get install haproxy)"
        )
    port = listen_port or free_port(listen_ip)
    text = render_config(
        upstream=upstream,
        send_proxy=send_proxy,
        listen=(listen_ip, port),
        source_ip=source_ip,
        maxconn=maxconn,
        threads=threads,
        splice=splice,
        backlog=backlog,
    )
    own = workdir is None
    wd = Path(tempfile.mkdtemp(prefix="harness-haproxy-")) if workdir is None else workdir
    wd.mkdir(parents=True, exist_ok=True)
    cfg = wd / "haproxy.cfg"
    cfg.write_text(text)
    check = subprocess.run([binary, "-c", "-q", "-f", str(cfg)], capture_output=True, timeout=30)
    if check.returncode != 0:
        raise HAProxyError(f"haproxy refused {cfg}: {check.stderr.decode(errors='replace')}")
    # dies with its parent, however that dies: a killed Locust never leaves an HAProxy behind
    proc = ManagedProcess(
        "haproxy",
        [binary, "-db", "-f", str(cfg)],
        log_path=wd / "haproxy.log",
        own_session=own_session,
        die_with_parent=True,
    )
    handle = HAProxy(proc, (listen_ip, port), source_ip, wd, own)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise HAProxyError(f"haproxy exited with {proc.poll()}; see {wd / 'haproxy.log'}")
        if listening(listen_ip, port):
            return handle
        time.sleep(0.05)
    handle.stop()
    raise HAProxyError(f"haproxy did not listen on {listen_ip}:{port} in {timeout_s} s")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m loadprofiles.haproxy", description=__doc__)
    p.add_argument("--upstream", required=True, help="the acceptor listener, host:port")
    p.add_argument("--send-proxy", default="v2", choices=["v1", "v2"])
    p.add_argument("--listen", default="127.0.0.1:0", help="where HAProxy listens")
    p.add_argument("--source-ip", default="127.0.0.250", help="HAProxy's side to the acceptor")
    p.add_argument("--ready-file", default="", help="write host:port here once listening")
    p.add_argument("--run-for", type=float, default=3600.0, help="stop after N seconds")
    a = p.parse_args(argv)
    try:
        up = parse_target(a.upstream, "--upstream")
        lh, lp = a.listen.rsplit(":", 1)
        proxy = start_haproxy(
            upstream=up,
            send_proxy=a.send_proxy,
            listen_ip=lh,
            listen_port=int(lp),
            source_ip=a.source_ip,
        )
    except (ValueError, HAProxyError) as exc:
        print(f"haproxy: {exc}", file=sys.stderr)
        return 2
    addr = f"{proxy.address[0]}:{proxy.address[1]}"
    print(f"haproxy: listening on {addr} -> {a.upstream} ({a.send_proxy}); log in {proxy.workdir}")
    if a.ready_file:
        Path(a.ready_file).write_text(addr)
    try:
        time.sleep(a.run_for)
    except KeyboardInterrupt:
        pass
    finally:
        proxy.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
