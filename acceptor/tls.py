"""TLS where the acceptor ends it (`listener.name.<l>.tls.mode=terminate`): the context it
serves clients with, the one it opens the broker with, and a client certificate's principal
as Kafka names it.

Why terminate at all: on a TLS listener passed through, the acceptor reads no request, so
request quotas (KIP-124) cannot be charged there. Terminated, the client's TLS ends here
(the acceptor's own certificate, from the run's CA) and the acceptor speaks TLS again to the
broker, so it reads every request as on PLAINTEXT, and the SASL exchange on SASL_SSL
(`login.Login`). Connection quotas still come first: a connection is admitted (or delayed,
or closed) before its processor starts the handshake, as Kafka's acceptor thread decides
before any TLS byte is read.

Kafka has no handshake timeout short of `connections.max.idle.ms`; asyncio's default is
60 s, so the handshake is given the idle timeout instead.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from acceptor.config import AcceptorConfig, ListenerSettings
from base.quota.config import ConfigError

__all__ = ["ListenerTls", "kafka_principal", "listener_tls"]

_VERIFY = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


@dataclass(frozen=True)
class ListenerTls:
    """One terminating listener's TLS: towards the client and towards the broker."""

    server: ssl.SSLContext
    upstream: ssl.SSLContext
    #: the handshake's time limit (s): Kafka's idle expiry (it has no handshake timeout)
    handshake_timeout_s: float
    #: the client's certificate names the principal (ssl.client.auth requested or required)
    reads_certificate: bool
    #: the principal lists the subject's RDNs in their written order: never in production
    #: (the fault hook `principal_written_order`, base.quota.faults)
    written_order: bool = False


def _load(key: str, path: str, load: object) -> None:
    try:
        load()  # type: ignore[operator]
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise ConfigError(key, path, f"not a usable PEM file: {exc}") from None


def listener_tls(cfg: AcceptorConfig, spec: ListenerSettings) -> ListenerTls | None:
    """The contexts of a terminating listener (None for any other). A file that cannot be
    loaded is a `ConfigError` naming its key."""
    if not spec.terminates:
        return None
    prefix = f"listener.name.{spec.name.lower()}."
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    _load(
        prefix + "ssl.keystore.location",
        spec.keystore,
        lambda: server.load_cert_chain(spec.keystore),
    )
    server.verify_mode = _VERIFY[spec.client_auth]
    if spec.client_auth != "none":
        _load(
            prefix + "ssl.truststore.location",
            spec.truststore,
            lambda: server.load_verify_locations(spec.truststore),
        )
    upstream = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    _load(
        prefix + "ssl.truststore.location",
        spec.truststore,
        lambda: upstream.load_verify_locations(spec.truststore),
    )
    if spec.upstream_keystore:
        _load(
            prefix + "upstream.ssl.keystore.location",
            spec.upstream_keystore,
            lambda: upstream.load_cert_chain(spec.upstream_keystore),
        )
    idle_s = cfg.idle_ms / 1000 if cfg.idle_ms > 0 else 24 * 3600.0
    return ListenerTls(
        server,
        upstream,
        idle_s,
        spec.client_auth != "none",
        written_order=cfg.faults.policy().principal_written_order(),
    )


def kafka_principal(der: bytes | None, *, written_order: bool = False) -> str | None:
    """A client certificate's principal under Kafka's default `ssl.principal.mapping.rules`:
    `X500Principal.getName()`, RFC 2253, the subject's RDNs in reverse order (`CN=client1,
    OU=harness` is `OU=harness,CN=client1`). None without a certificate (ANONYMOUS).
    `written_order`: the seeded fault's name, the RDNs as the certificate lists them."""
    if not der:
        return None
    from cryptography import x509

    subject = x509.load_der_x509_certificate(der).subject
    # rfc4514_string lists the RDNs last first, as RFC 2253 does
    rdns = subject.rdns if written_order else reversed(subject.rdns)
    return ",".join(rdn.rfc4514_string() for rdn in rdns)
