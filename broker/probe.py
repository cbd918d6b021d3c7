"""Ask a Kafka listener whether it is really Kafka and really serving.

"Ready" means what a client needs: the listener answers ApiVersions and its Metadata lists at
least one broker (a KRaft broker answers ApiVersions a moment before it is unfenced; a producer
with acks=all started in that moment fails). Framing and messages come from kafka-python's
protocol classes; this module only moves the bytes.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from broker.errors import BrokerError

CLIENT_ID = "harness-broker-probe"
_API_VERSIONS_VERSION = 3
_METADATA_VERSION = 12


@dataclass(frozen=True)
class ProbeResult:
    """What one probe saw."""

    #: api_key -> (min_version, max_version) as the broker reported them
    api_versions: dict[int, tuple[int, int]]
    #: number of brokers the Metadata response lists (None when not asked)
    brokers: int | None

    def inferred_version(self) -> str:
        """Kafka version implied by the APIs ("4.0+"-style); exact versions need the jar/log."""
        from kafka.protocol.broker_version_data import infer_broker_version_from_api_versions

        version = infer_broker_version_from_api_versions(self.api_versions)
        return ".".join(str(p) for p in version) + "+"


def _roundtrip(sock: socket.socket, request: Any, deadline: float) -> Any:
    from kafka.protocol.parser import KafkaProtocol

    proto = KafkaProtocol(client_id=CLIENT_ID)
    proto.send_request(request)
    sock.sendall(proto.send_bytes())
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("no response in time")
        sock.settimeout(remaining)
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("connection closed by the broker")
        responses = proto.receive_bytes(chunk)
        if responses:
            return responses[0][1]


def probe(host: str, port: int, *, timeout_s: float = 5.0, metadata: bool = True) -> ProbeResult:
    """One connection: ApiVersions, then (optionally) Metadata. Raises OSError/TimeoutError."""
    from kafka.protocol.metadata import ApiVersionsRequest

    deadline = time.monotonic() + timeout_s
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        req = ApiVersionsRequest[_API_VERSIONS_VERSION](
            client_software_name="harness", client_software_version="0.1.0"
        )
        resp = _roundtrip(sock, req, deadline)
        if resp.error_code != 0:
            raise ConnectionError(f"ApiVersions error code {resp.error_code}")
        versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        if not versions:
            raise ConnectionError("ApiVersions listed no APIs")
        brokers: int | None = None
        if metadata:
            meta = _roundtrip(sock, metadata_request(versions), deadline)
            brokers = len(meta.brokers)
    return ProbeResult(api_versions=versions, brokers=brokers)


def metadata_request(versions: Mapping[int, tuple[int, int]]) -> Any:
    """Metadata for no topics, at the highest version both sides know (an older broker,
    Kafka 2.8's v11, refuses v12 and closes the connection)."""
    from kafka.protocol.metadata import MetadataRequest

    version = min(_METADATA_VERSION, versions.get(MetadataRequest.API_KEY, (0, 0))[1])
    if version < 4:  # allow_auto_topic_creation came in v4
        return MetadataRequest[version](topics=[])
    return MetadataRequest[version](topics=[], allow_auto_topic_creation=False)


def secured_probe(
    bootstrap: str, client_config: Mapping[str, str], *, timeout_s: float = 10.0
) -> ProbeResult:
    """`probe` over a secured listener: TLS and the SASL login of Kafka's client keys
    (``--command-config``), then ApiVersions and Metadata, on the admin client's wire."""
    from base.admin.client import KafkaWire

    with KafkaWire(
        bootstrap, timeout=timeout_s, client_id=CLIENT_ID, client_config=client_config
    ) as wire:
        versions = wire.versions()
        meta = wire.request(metadata_request(versions))
    return ProbeResult(api_versions=versions, brokers=len(meta.brokers))


def check_reachable(
    bootstrap: str, *, timeout_s: float = 10.0, client_config: Mapping[str, str] | None = None
) -> ProbeResult:
    """Probe an existing cluster's bootstrap address (secured by ``client_config``, Kafka's
    client keys, when given), turning failures into a BrokerError."""
    from broker.config import parse_host_port

    host, port = parse_host_port(bootstrap, key="bootstrap_server")
    protocol = (client_config or {}).get("security.protocol", "PLAINTEXT").upper()
    from base.admin.client import AdminError

    try:
        if client_config:
            return secured_probe(bootstrap, client_config, timeout_s=timeout_s)
        return probe(host, port, timeout_s=timeout_s)
    except ValueError as exc:  # a client key the harness cannot honour
        raise BrokerError(f"--command-config: {exc}") from exc
    except (OSError, TimeoutError, ConnectionError, AdminError) as exc:
        raise BrokerError(
            f"{bootstrap} does not answer Kafka's ApiVersions/Metadata over {protocol} ({exc}); "
            f"check the address and that a Kafka listener ({protocol}) is there"
        ) from exc


def cluster_brokers(
    bootstrap: str, *, client_config: Mapping[str, str] | None = None, timeout_s: float = 10.0
) -> list[tuple[int, str, int]]:
    """The brokers a cluster's Metadata lists on the bootstrap's listener: (node id, host,
    port) in node order (the addresses its clients would connect to)."""
    from base.admin.client import KafkaWire

    with KafkaWire(
        bootstrap, timeout=timeout_s, client_id=CLIENT_ID, client_config=client_config
    ) as wire:
        meta = wire.request(metadata_request(wire.versions()))
    return sorted((int(b.node_id), str(b.host), int(b.port)) for b in meta.brokers)
