"""The ``harness`` option group of every profile, parsed once.

Each option has an argparse converter, so a bad value stops Locust at parse time
(exit 2, naming option, value and reason) rather than mid-run. Converters return the
same plain types as the defaults (strings for specs, numbers for numbers), so the
options stay editable in Locust's web UI; ``Settings.from_options`` turns the parsed
namespace into one typed value per process.

No Locust import here (pure argparse): unit tests parse argument lists directly.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from base.security.client import SaslSettings, TlsSettings, settings_from_properties
from loadprofiles import addresses, arrivals, proxy_header

SHAPES = ("connect", "apiversions", "storm")
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
AUTH_FAULTS = ("off", "wrong-password", "unknown-user")
TLS_FAULTS = ("off", "stall")


def _checked(parse: Callable[[str], Any]) -> Callable[[str], str]:
    """A converter that validates a spec with ``parse`` and keeps the text."""

    def convert(text: str) -> str:
        try:
            parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text

    convert.__name__ = getattr(parse, "__name__", "spec")
    return convert


def _number(kind: type[float] | type[int], lo: float) -> Callable[[str], Any]:
    def convert(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r}: not a{'n integer' if kind is int else ' number'}"
            ) from None
        if not (math.isfinite(value) and value >= lo):
            raise argparse.ArgumentTypeError(f"{text!r}: must be >= {lo:g}")
        return value

    convert.__name__ = kind.__name__
    return convert


def _pool(option: str) -> Callable[[str], str]:
    return _checked(lambda text: addresses.parse_ip_pool(text, option))


def _target(text: str) -> str:
    return _checked(addresses.parse_target)(text) if text else text


def _command_config(text: str) -> str:
    """``--command-config``: a readable ``client.properties`` with only supported keys."""
    if not text:
        return text
    from base.security import clientprops

    try:
        props = clientprops.read(Path(text))
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"{text}: {exc.strerror or exc}") from None
    unknown = sorted(set(props) - clientprops.SUPPORTED_KEYS)
    if unknown:
        raise argparse.ArgumentTypeError(
            f"{text}: client config keys {unknown} are not supported; supported: "
            f"{', '.join(sorted(clientprops.SUPPORTED_KEYS))}"
        )
    return text


def add_options(parser: Any) -> None:
    """Locust's ``init_command_line_parser``: the ``harness`` group."""
    g = parser.add_argument_group("harness", "Kafka connection-limit harness options")
    g.add_argument(
        "--run-dir", default="", help="run directory; history -> RUN_DIR/history/client/"
    )
    g.add_argument("--run-id", default="", help="run id written in every history row")
    g.add_argument(
        "--arrival",
        type=_checked(arrivals.parse_arrival),
        default="constant:rate=20",
        help="connection arrival schedule, e.g. constant:rate=50, step:rates=10/50/100,every=5, "
        "spike:base=5,peak=200,at=10,for=2, ramp:from=0,to=200,over=30, poisson:rate=50, "
        "sawtooth:low=0,high=100,period=10",
    )
    g.add_argument("--seed", type=int, default=1, help="seed for random arrivals and payloads")
    g.add_argument(
        "--max-arrivals", type=_number(int, 0), default=0, help="stop after N arrivals (0: no cap)"
    )
    g.add_argument(
        "--source-ips",
        type=_pool("--source-ips"),
        default="",
        help="bind source addresses: 127.0.0.2-127.0.0.40",
    )
    g.add_argument("--proxy-protocol", default="off", choices=list(proxy_header.VERSIONS))
    g.add_argument(
        "--proxy-client-ips",
        type=_pool("--proxy-client-ips"),
        default="",
        help="client addresses claimed in PROXY headers",
    )
    g.add_argument("--listener-name", default="", help="listener name recorded in history rows")
    g.add_argument("--metrics-url", default="", help="acceptor /metrics for the admission tab")
    g.add_argument("--connect-timeout", type=_number(float, 0.001), default=5.0, help="seconds")
    g.add_argument("--request-timeout", type=_number(float, 0.001), default=10.0, help="seconds")
    g.add_argument("--topic", default="harness-load", help="topic for produce/metadata")
    g.add_argument(
        "--replication-factor",
        type=_number(int, 1),
        default=1,
        help="replication factor of --topic when the load creates it (a cluster: up to its "
        "brokers, so produces survive one broker down)",
    )
    g.add_argument(
        "--delayed-threshold-ms",
        type=_number(float, 0),
        default=250.0,
        help="first response slower than this = delayed then served",
    )
    g.add_argument(
        "--max-lag-ms",
        type=_number(float, 0),
        default=100.0,
        help="an arrival started later than this is not offered (cause cpu)",
    )
    g.add_argument(
        "--max-in-flight",
        type=_number(int, 1),
        default=2000,
        help="concurrent connections per process",
    )
    g.add_argument(
        "--arrival-slots",
        type=_number(int, 0),
        default=0,
        help="drivers sharing the schedule (0: auto from --processes / 1)",
    )
    g.add_argument(
        "--history-home",
        default="local",
        choices=["local", "channel"],
        help="where a Locust worker's client history goes: local (--run-dir, shared storage "
        "for workers on other machines) or channel (home to the master over Locust's own "
        "channel at the end of the schedule, checked by size and row count)",
    )
    g.add_argument(
        "--hold-ms",
        type=_number(float, 0),
        default=0.0,
        help="keep each connection open this long after its requests (concurrency per IP)",
    )
    g.add_argument("--acks", default="1", choices=["1", "all", "-1", "0"], help="produce acks")
    g.add_argument("--payload-bytes", type=_number(int, 0), default=100, help="produce record size")
    g.add_argument(
        "--via-haproxy",
        default="off",
        choices=["off", "v1", "v2"],
        help="single-IP flood: start a real HAProxy that adds a PROXY header",
    )
    g.add_argument(
        "--shape",
        default="storm",
        choices=list(SHAPES),
        help="storm/connect profiles: connect (TCP connect, close), apiversions "
        "(+ ApiVersions), storm (+ ApiVersions + Metadata)",
    )
    g.add_argument(
        "--security-protocol",
        default="",
        choices=["", *SECURITY_PROTOCOLS],
        help="engine profiles: the listener's protocol (default: --command-config's "
        "security.protocol, else PLAINTEXT); SSL at a PLAINTEXT port sends a ClientHello there",
    )
    g.add_argument(
        "--sasl-mechanism",
        default="",
        help="engine profiles: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (default: the config's)",
    )
    g.add_argument(
        "--command-config",
        type=_command_config,
        default="",
        help="a Kafka client.properties (security.protocol, sasl.mechanism, sasl.jaas.config, "
        "ssl.truststore.location/type=PEM, ssl.keystore.location/type=PEM, ...), as Kafka's "
        "tools take it",
    )
    g.add_argument(
        "--auth-fault",
        default="off",
        choices=list(AUTH_FAULTS),
        help="engine profiles, SASL: log in with a wrong password or as an unknown user",
    )
    g.add_argument(
        "--brokers",
        dest="broker_targets",
        type=_checked(addresses.parse_brokers),
        default="",
        help="engine profiles: a cluster's brokers to spread the arrivals over, "
        "NODE_ID=HOST:PORT,... (instead of --host; each connect_invoke names its broker)",
    )
    g.add_argument(
        "--hot-broker",
        default="",
        help="engine profiles with --brokers: NODE_ID:SHARE, that share of the arrivals on "
        "that broker (e.g. 2:0.5), the rest round-robin over the others",
    )
    g.add_argument(
        "--tls-fault",
        default="off",
        choices=list(TLS_FAULTS),
        help="engine profiles: stall = send half a ClientHello, then hold the connection for "
        "--hold-ms (else the connect timeout)",
    )
    g.add_argument(
        "--tls-resumption",
        default="off",
        choices=["off", "on"],
        help="engine profiles: offer the last TLS session (off: every handshake is full)",
    )
    g.add_argument(
        "--ready-dir",
        default="",
        help="each load process writes <pid>.ready here when its first arrival is due "
        "and <pid>.done when its schedule is over (the runner waits on these)",
    )


class OptionError(ValueError):
    """A bad harness option: names the option, the value and the reason."""


@dataclass
class Settings:
    """The parsed, validated harness options of one Locust process."""

    host: str
    port: int
    arrival: arrivals.ArrivalSpec
    seed: int
    max_arrivals: int | None
    duration_s: float | None
    source_ips: tuple[str, ...]
    proxy_protocol: str
    proxy_client_ips: tuple[str, ...]
    listener: str | None
    connect_timeout: float
    request_timeout: float
    topic: str
    delayed_threshold_ms: float
    max_lag_ms: float
    max_in_flight: int
    acks: int
    payload_bytes: int
    hold_ms: float = 0.0
    shape: str = "storm"
    security_protocol: str = ""
    sasl_mechanism: str = ""
    command_config: str = ""
    auth_fault: str = "off"
    tls_fault: str = "off"
    tls_resumption: bool = False
    brokers: tuple[addresses.BrokerTarget, ...] = ()
    hot_broker: tuple[int, float] | None = None
    replication_factor: int = 1

    def security(self, client_id: str) -> tuple[TlsSettings | None, SaslSettings | None]:
        """The engine's TLS and SASL settings (None, None for PLAINTEXT). Raises OptionError
        naming the option, key or file, never a secret."""
        props: dict[str, str] = {}
        if self.command_config:
            from base.security import clientprops

            try:
                props = clientprops.read(Path(self.command_config))
            except OSError as exc:
                raise OptionError(
                    f"--command-config {self.command_config}: {exc.strerror or exc}"
                ) from None
        try:
            _, tls, sasl = settings_from_properties(
                props,
                protocol=self.security_protocol or None,
                mechanism=self.sasl_mechanism or None,
                client_id=client_id,
                sasl_fault="" if self.auth_fault == "off" else self.auth_fault,
                tls_fault="" if self.tls_fault == "off" else self.tls_fault,
                tls_resume=self.tls_resumption,
            )
        except ValueError as exc:
            where = f"--command-config {self.command_config}: " if self.command_config else ""
            raise OptionError(f"{where}{exc}") from None
        return tls, sasl

    @classmethod
    def from_options(cls, o: Any, host: str | None) -> Settings:
        """One typed value from Locust's parsed options (converters already validated
        them on the command line; the web UI may have edited them since, so the specs
        are parsed again here, once per test start)."""
        if o is None:
            raise OptionError("no parsed options: run under the locust command")
        try:
            h, p = addresses.parse_target(host or "")
            spec = arrivals.parse_arrival(str(o.arrival))
            src = addresses.parse_ip_pool(str(o.source_ips), "--source-ips")
            brokers = addresses.parse_brokers(str(getattr(o, "broker_targets", "") or ""))
            hot = addresses.parse_hot_broker(str(getattr(o, "hot_broker", "") or ""), brokers)
            pci = addresses.parse_ip_pool(str(o.proxy_client_ips), "--proxy-client-ips")
        except ValueError as exc:
            raise OptionError(str(exc)) from None
        for name, value, lo in (
            ("--connect-timeout", o.connect_timeout, 0.001),
            ("--request-timeout", o.request_timeout, 0.001),
            ("--max-in-flight", o.max_in_flight, 1),
            ("--max-lag-ms", o.max_lag_ms, 0),
            ("--max-arrivals", o.max_arrivals, 0),
            ("--payload-bytes", o.payload_bytes, 0),
            ("--hold-ms", o.hold_ms, 0),
        ):
            if not (float(value) >= lo and math.isfinite(float(value))):
                raise OptionError(f"{name}: {value!r}: must be >= {lo}")
        run_time = getattr(o, "run_time", None)
        return cls(
            host=h,
            port=p,
            arrival=spec,
            seed=int(o.seed),
            max_arrivals=int(o.max_arrivals) or None,
            duration_s=float(run_time) if run_time else None,
            source_ips=src,
            proxy_protocol=o.proxy_protocol,
            proxy_client_ips=pci,
            listener=o.listener_name or None,
            connect_timeout=float(o.connect_timeout),
            request_timeout=float(o.request_timeout),
            topic=o.topic,
            replication_factor=int(getattr(o, "replication_factor", 1) or 1),
            delayed_threshold_ms=float(o.delayed_threshold_ms),
            max_lag_ms=float(o.max_lag_ms),
            max_in_flight=int(o.max_in_flight),
            acks=-1 if o.acks in ("all", "-1") else int(o.acks),
            payload_bytes=int(o.payload_bytes),
            hold_ms=float(o.hold_ms),
            shape=getattr(o, "shape", "storm"),
            security_protocol=str(getattr(o, "security_protocol", "") or ""),
            sasl_mechanism=str(getattr(o, "sasl_mechanism", "") or ""),
            command_config=str(getattr(o, "command_config", "") or ""),
            auth_fault=str(getattr(o, "auth_fault", "off") or "off"),
            tls_fault=str(getattr(o, "tls_fault", "off") or "off"),
            brokers=brokers,
            hot_broker=hot,
            tls_resumption=str(getattr(o, "tls_resumption", "off")) == "on",
        )


def arrival_slot(options: Any, worker_index: int | None) -> tuple[int, int]:
    """This process's share of the arrival schedule: (slot, slots). A Locust worker takes
    slot ``worker_index mod slots`` of ``--arrival-slots`` (default: ``--processes``, else
    the CPU count); a lone process takes the whole schedule."""
    if worker_index is None:
        return 0, options.arrival_slots or 1
    processes = options.processes or 0
    slots = options.arrival_slots or (processes if processes > 0 else (os.cpu_count() or 1))
    return max(0, worker_index) % slots, slots
