"""A small blocking Kafka client for the admin APIs kafka-python's KafkaAdminClient lacks.

Why not KafkaAdminClient: kafka-python 3.0 has no DescribeClientQuotas/AlterClientQuotas
calls, and it routes requests to the node it learns from Metadata, which behind an acceptor
may not be the front we want to talk to. This client talks to exactly the bootstrap address
it is given, negotiates versions with ApiVersions, and encodes/decodes every message with
kafka-python's protocol classes (`KafkaProtocol` does the framing and correlation).
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any

from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    DescribeClientQuotasRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
)
from kafka.protocol.metadata import ApiVersionsRequest
from kafka.protocol.parser import KafkaProtocol

BROKER_RESOURCE = 4
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
IP_RATE_KEY = "connection_creation_rate"


class AdminError(Exception):
    """The server answered with an error code (Kafka's name and message kept)."""

    def __init__(self, code: int, message: str | None, what: str = "") -> None:
        from kafka.errors import for_code

        self.code = code
        self.name = getattr(for_code(code), "__name__", str(code))
        self.message = message
        super().__init__(f"{what}{self.name} ({code}): {message or 'no message'}")


def split_bootstrap(bootstrap: str) -> tuple[str, int]:
    first = bootstrap.split(",")[0].strip()
    host, sep, port = first.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"--bootstrap-server {bootstrap!r}: expected host:port")
    return host.strip("[]"), int(port)


class KafkaWire:
    """One blocking connection; `request(req)` sends it and returns the decoded response."""

    def __init__(
        self,
        bootstrap: str,
        *,
        source_ip: str | None = None,
        timeout: float = 15.0,
        client_id: str = "harness-admin",
        preamble: bytes = b"",
        client_config: Mapping[str, str] | None = None,
        on_step: Callable[[str, socket.socket], None] | None = None,
    ) -> None:
        host, port = split_bootstrap(bootstrap)
        #: told each step of the connection as it completes ("connected", "tls_start",
        #: "tls_done", "sasl_done" or "sasl_fail"), with the socket: a caller that records
        #: its connections
        self._step = on_step or (lambda _step, _sock: None)
        self.sock = socket.create_connection(
            (host, port), timeout=timeout, source_address=(source_ip, 0) if source_ip else None
        )
        self._step("connected", self.sock)
        if preamble:
            self.sock.sendall(preamble)
        self.protocol = KafkaProtocol(client_id=client_id)
        self._versions: dict[int, tuple[int, int]] | None = None
        if client_config:
            try:
                self._secure(host, client_config, client_id)
            except BaseException:
                self.sock.close()
                raise

    def _secure(self, host: str, props: Mapping[str, str], client_id: str) -> None:
        """TLS and the SASL login of a Kafka client configuration (`security.protocol`,
        `sasl.*`, `ssl.*`: `base.security.clientprops`), before any admin request.
        Failures name the step and Kafka's error, never a secret (`SaslError`)."""
        import ssl

        from base.security.client import SaslError, settings_from_properties

        _, tls, sasl = settings_from_properties(props, client_id=client_id)
        if tls is not None:
            self._step("tls_start", self.sock)
            try:
                self.sock = tls.context.wrap_socket(
                    self.sock, server_hostname=tls.server_hostname or host
                )
            except ssl.SSLError as exc:
                raise ConnectionError(f"TLS handshake with {host} failed: {exc}") from None
            self._step("tls_done", self.sock)
        if sasl is None:
            return
        exchange = sasl.exchange()
        out: bytes | None = exchange.start(0)
        while out is not None:
            if out:
                self.sock.sendall(out)
            try:
                out = exchange.response(self._read_frame(), 0)
            except SaslError as exc:
                self._step("sasl_fail", self.sock)
                raise AdminError(
                    exc.error_code, f"SASL {sasl.mechanism} login: {exc}", ""
                ) from None
        self._step("sasl_done", self.sock)

    def _read_exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            data = self.sock.recv(n - len(buf))
            if not data:
                raise ConnectionError("connection closed by the server during the login (EOF)")
            buf += data
        return buf

    def _read_frame(self) -> bytes:
        """One size-prefixed frame, and not a byte more (the SASL exchange's responses)."""
        head = self._read_exact(4)
        return head + self._read_exact(int.from_bytes(head, "big"))

    def request(self, req: Any) -> Any:
        self.protocol.send_request(req)
        self.sock.sendall(self.protocol.send_bytes())
        while True:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("connection closed by the server before a response (EOF)")
            responses = self.protocol.receive_bytes(data)
            if responses:
                return responses[0][1]

    def versions(self) -> dict[int, tuple[int, int]]:
        if self._versions is None:
            resp = self.request(
                ApiVersionsRequest[3](client_software_name="harness", client_software_version="0.1")
            )
            if resp.error_code:
                resp = self.request(ApiVersionsRequest[0]())
            self._versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        return self._versions

    def version_for(self, cls: Any) -> int:
        lo, hi = self.versions().get(cls.API_KEY, (-1, -1))
        v = min(hi, cls.max_version)
        if hi < 0 or v < max(lo, cls.min_version):
            raise AdminError(35, f"{cls.__name__} is not supported by the server", "")
        return int(v)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> KafkaWire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _connection(
    bootstrap: str, wire: KafkaWire | None, kw: Mapping[str, Any]
) -> AbstractContextManager[KafkaWire]:
    """The caller's connection (left open: a connection held for a run) or one for this call."""
    return contextlib.nullcontext(wire) if wire is not None else KafkaWire(bootstrap, **kw)


# -- client quotas ------------------------------------------------------------------------
def _entity_key(entity: list[Any]) -> dict[str, str | None]:
    return {e.entity_type: e.entity_name for e in entity}


def describe_client_quotas(
    bootstrap: str,
    components: list[tuple[str, int, str | None]],
    *,
    strict: bool = False,
    **kw: Any,
) -> list[tuple[dict[str, str | None], dict[str, float]]]:
    """Raw DescribeClientQuotas: components are (entity_type, match_type, match)."""
    D = DescribeClientQuotasRequest
    with KafkaWire(bootstrap, **kw) as wire:
        v = wire.version_for(D)
        resp = wire.request(
            D[v](
                components=[
                    D.ComponentData(entity_type=t, match_type=m, match=n) for t, m, n in components
                ],
                strict=strict,
            )
        )
    if resp.error_code:
        raise AdminError(resp.error_code, resp.error_message, "DescribeClientQuotas: ")
    return [(_entity_key(e.entity), {x.key: x.value for x in e.values}) for e in resp.entries or []]


def component(entity_type: str, name: str | None) -> tuple[str, int, str | None]:
    """None = every entity of the type, "default" / "<default>" = the default entity."""
    if name is None:
        return (entity_type, MATCH_SPECIFIED, None)
    if name in ("default", "<default>"):
        return (entity_type, MATCH_DEFAULT, None)
    return (entity_type, MATCH_EXACT, name)


def describe_ip_quotas(bootstrap: str, ip: str | None = None, **kw: Any) -> dict[str, float]:
    """{"default" | "<ip>": connection_creation_rate} for one IP, the default, or all."""
    rows = describe_client_quotas(bootstrap, [component("ip", ip)], strict=ip is not None, **kw)
    out: dict[str, float] = {}
    for entity, values in rows:
        if IP_RATE_KEY in values:
            out[entity.get("ip") or "default"] = values[IP_RATE_KEY]
    return out


def alter_client_quota(
    bootstrap: str,
    entity: Mapping[str, str | None],
    ops: Mapping[str, float | None],
    *,
    validate_only: bool = False,
    wire: KafkaWire | None = None,
    **kw: Any,
) -> None:
    """One AlterClientQuotas entry; `None` values remove the key. Raises AdminError.
    Sent on `wire` when given, else on a connection of its own (`kw`: KafkaWire's)."""
    A = AlterClientQuotasRequest
    entry = A.EntryData(
        entity=[A.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in entity.items()],
        ops=[
            A.EntryData.OpData(key=k, value=0.0 if v is None else float(v), remove=v is None)
            for k, v in ops.items()
        ],
    )
    with _connection(bootstrap, wire, kw) as w:
        resp = w.request(A[w.version_for(A)](entries=[entry], validate_only=validate_only))
    for e in resp.entries:
        if e.error_code:
            raise AdminError(e.error_code, e.error_message, "AlterClientQuotas: ")


def alter_ip_quota(bootstrap: str, ip: str | None, rate: float | None, **kw: Any) -> None:
    """Set (or with rate=None remove) connection_creation_rate for an IP or the default (None)."""
    alter_client_quota(bootstrap, {"ip": ip}, {IP_RATE_KEY: rate}, **kw)


def alter_broker_config(
    bootstrap: str,
    changes: Mapping[str, str | None],
    *,
    broker: str = "",
    wire: KafkaWire | None = None,
    **kw: Any,
) -> None:
    """IncrementalAlterConfigs on the BROKER resource ("" = cluster default); None deletes.
    Sent on `wire` when given, else on a connection of its own (`kw`: KafkaWire's)."""
    I = IncrementalAlterConfigsRequest  # noqa: E741
    resource = I.AlterConfigsResource(
        resource_type=BROKER_RESOURCE,
        resource_name=broker,
        configs=[
            I.AlterConfigsResource.AlterableConfig(
                name=k, config_operation=1 if v is None else 0, value=v
            )
            for k, v in changes.items()
        ],
    )
    with _connection(bootstrap, wire, kw) as w:
        resp = w.request(I[w.version_for(I)](resources=[resource], validate_only=False))
    for r in resp.responses:
        if r.error_code:
            raise AdminError(r.error_code, r.error_message, "IncrementalAlterConfigs: ")


def describe_broker_configs(
    bootstrap: str,
    broker: str,
    keys: list[str] | None = None,
    *,
    wire: KafkaWire | None = None,
    **kw: Any,
) -> dict[str, str | None]:
    """DescribeConfigs of the BROKER resource ``broker`` (a node id; "" = the cluster-wide
    dynamic defaults): ``{name: value}`` for ``keys`` (None: every key). A sensitive key's
    value is None, as Kafka sends it. Raises AdminError (e.g. CLUSTER_AUTHORIZATION_FAILED
    when the principal may not describe the cluster's configs)."""
    D = DescribeConfigsRequest
    resource = D.DescribeConfigsResource(
        resource_type=BROKER_RESOURCE, resource_name=broker, configuration_keys=keys
    )
    with _connection(bootstrap, wire, kw) as w:
        v = w.version_for(D)
        fields: dict[str, Any] = {"resources": [resource]}
        if v >= 1:
            fields["include_synonyms"] = False
        if v >= 3:
            fields["include_documentation"] = False
        resp = w.request(D[v](**fields))
    out: dict[str, str | None] = {}
    for r in resp.results:
        if r.error_code:
            raise AdminError(r.error_code, r.error_message, "DescribeConfigs: ")
        for c in r.configs:
            out[c.name] = None if c.is_sensitive else c.value
    return out
