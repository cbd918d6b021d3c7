"""Locust command lines for load phases (pure), so the exact flags are unit-tested.

Each phase is one headless Locust process (docs/loadprofiles.md): the arrival
schedule lives in the profile (open model), Locust's ``-t`` bounds it in time and
``--max-arrivals`` in count. ``--web`` swaps headless for the web UI on a loopback
port, auto-started and auto-quit so the scenario's schedule still holds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from harness.runner.scenario import CLOSED_PROFILES, ENGINE_PROFILES, PER_WORKER, Phase


@dataclass(frozen=True)
class LoadTarget:
    host: str
    port: int
    metrics_url: str | None = None
    #: the listener's Kafka client configuration (``client.properties``) when it is secured
    command_config: str | None = None
    #: a cluster's brokers on the phase's listener, (node id, host, port): an engine
    #: profile spreads its arrivals over them (``--brokers``)
    brokers: tuple[tuple[int, str, int], ...] = ()
    #: whether an engine profile's arrivals may spread over them (False: an existing
    #: cluster, where they stay on the bootstrap broker, the first)
    spread_all: bool = True


#: how long after its schedule a phase's master waits for its workers' histories (the
#: last connections' timeouts, then the files over the channel)
WORKERS_HOME_S = 30.0


@dataclass(frozen=True)
class Workers:
    """A phase run as a Locust master for ``count`` workers on other machines (or worker
    hosts the run made): they join at ``host:port`` within ``wait_s`` or the phase does not
    start; each takes its share of the arrivals (``--arrival-slots``) and sends its history
    home over Locust's channel (``--history-home channel``, loadprofiles.workers)."""

    count: int
    host: str
    port: int
    wait_s: float
    #: "channel": histories home over Locust's channel; "local": each worker writes into
    #: the run folder itself (storage every machine shares at the same path)
    home: str = "channel"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def max_arrivals(phase: Phase) -> int:
    """The phase's intended arrival count: it ends the arrival schedule after the phase's
    duration, while Locust's ``-t`` (duration + start-up allowance) only bounds the tail."""
    if phase.max_arrivals is not None:
        return phase.max_arrivals
    from loadprofiles.arrivals import parse_arrival  # pure module: no gevent

    expected = parse_arrival(phase.arrival).expected_count(phase.duration)
    return max(1, math.ceil(expected - 1e-6))


def ready_dir(run_dir: Path, phase: Phase) -> Path:
    """Where the phase's load processes write their readiness markers
    (``loadprofiles.readiness``: ``<pid>.ready`` when load is about to flow, ``<pid>.done``
    when the schedule is over); the runner waits on these, never on log text."""
    return run_dir / "loadgen" / phase.name


def locust_argv(
    phase: Phase,
    *,
    locust_bin: str,
    profile_dir: Path,
    target: LoadTarget,
    run_dir: Path,
    run_id: str,
    seed: int,
    web_port: int | None = None,
    startup_allowance_s: float = 0.0,
    workers: Workers | None = None,
) -> list[str]:
    """The full command line for one phase; ``web_port`` None = headless.

    Locust's ``-t`` runs from its own start, before the profile drives any load, so it
    gets ``startup_allowance_s`` on top; the arrival count (``--max-arrivals``) is what
    ends an arrival phase on time."""
    # workers send their histories home after the schedule: time for that before -t
    home_s = WORKERS_HOME_S if workers is not None else 0.0
    duration = max(1, math.ceil(phase.duration + startup_allowance_s + home_s))
    csv_prefix = run_dir / "locust" / phase.name
    argv = [
        locust_bin,
        "-f",
        str(profile_dir / f"{phase.profile}.py"),
        "-u",
        str(max(phase.users, workers.count if workers else 0)),
        "-r",
        f"{max(phase.spawn_rate, workers.count if workers else 0):g}",
        "-t",
        f"{duration}s",
        "--host",
        f"kafka://{target.host}:{target.port}",
        "--run-dir",
        str(run_dir),
        "--run-id",
        run_id,
        "--seed",
        str(seed),
        "--listener-name",
        phase.listener,
        "--csv",
        str(csv_prefix),
        "--html",
        str(csv_prefix) + ".html",
        "--only-summary",
        "--stop-timeout",
        "3",
        "--ready-dir",
        str(ready_dir(run_dir, phase)),
    ]
    if phase.profile not in CLOSED_PROFILES:
        # Through HAProxy the proxy writes the PROXY header (carrying our bound source
        # addresses); the generator itself then sends none.
        via_haproxy = phase.via == "haproxy"
        argv += [
            "--arrival",
            phase.arrival,
            "--max-arrivals",
            str(max_arrivals(phase)),
            # per worker: none bound, each worker connects from its machine's own address
            "--source-ips",
            "" if phase.source_ips == PER_WORKER else phase.source_ips,
            "--proxy-protocol",
            "off" if via_haproxy else phase.proxy_protocol,
        ]
        if via_haproxy:
            argv += ["--via-haproxy", phase.proxy_protocol]
        if phase.proxy_client_ips:
            argv += ["--proxy-client-ips", phase.proxy_client_ips]
    else:
        argv += ["--source-ips", phase.source_ips]
    if target.metrics_url:
        argv += ["--metrics-url", target.metrics_url]
    if target.command_config:
        argv += ["--command-config", target.command_config]
    if target.brokers:
        # every broker: an engine profile spreads its arrivals over them, kafka-python
        # clients follow metadata and are attributed by the address they reached; "bootstrap":
        # an engine profile's arrivals all go to the first
        spread = (phase.spread == "all" and target.spread_all) or (
            phase.profile not in ENGINE_PROFILES
        )
        brokers = target.brokers if spread else target.brokers[:1]
        argv += ["--brokers", ",".join(f"{n}={h}:{p}" for n, h, p in brokers)]
        # the load's topic survives one broker down (acks=all needs its replicas in sync)
        argv += ["--replication-factor", str(min(3, len(target.brokers)))]
        if phase.hot_broker is not None:
            argv += ["--hot-broker", f"{phase.hot_broker[0]}:{phase.hot_broker[1]:g}"]
    if web_port is None:
        argv.insert(3, "--headless")
    else:
        argv += [
            "--web-host",
            "127.0.0.1",
            "--web-port",
            str(web_port),
            "--autostart",
            "--autoquit",
            "5",
        ]
    if workers is not None:
        argv += [
            "--master",
            "--master-bind-host",
            workers.host,
            "--master-bind-port",
            str(workers.port),
            "--expect-workers",
            str(workers.count),
            "--expect-workers-max-wait",
            f"{max(1, math.ceil(workers.wait_s))}",
            "--arrival-slots",
            str(workers.count),
            "--history-home",
            workers.home,
        ]
    argv += list(phase.extra_args)
    return argv
