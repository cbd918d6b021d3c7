"""A throwaway certificate authority and its certificates, made fresh for every run (no I/O).

Every key is ECDSA P-256 and is written as unencrypted PKCS#8 (``BEGIN PRIVATE KEY``): Kafka's
PEM stores load no other key format (PKCS#1 and SEC1 keys fail). Subjects are fixed, so the
SSL principal of the client certificate is the same in every run: ``CN=client1,OU=harness``
is Kafka's principal ``OU=harness,CN=client1`` (RFC 2253 reverses the attribute order).

``make_ca`` and ``issue`` build certificates; ``TlsBundle.generate`` builds everything a run
needs (the CA, the broker's and an acceptor's certificates for 127.0.0.1/localhost, the client
certificate and two bad ones for bad-input tests: an expired broker certificate and one for
another host).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: The names every broker certificate is valid for: clients connect to the loopback address.
LOOPBACK_SANS = ("127.0.0.1", "localhost")
#: The client certificate's subject, written in certificate order (most significant first).
CLIENT_CN = "client1"
CLIENT_OU = "harness"
#: Kafka's SSL principal for the client certificate (RFC 2253: the order reversed).
CLIENT_PRINCIPAL = f"OU={CLIENT_OU},CN={CLIENT_CN}"
#: The host the wrong-host certificate names instead of the loopback address.
WRONG_HOST = "wrong-host.invalid"
#: How long the good certificates are valid: a run, with room to spare.
VALID_DAYS = 7


@dataclass(frozen=True)
class Issued:
    """A private key and its certificate, with the chain up to (not including) the CA."""

    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @property
    def key_pem(self) -> bytes:
        """The private key as unencrypted PKCS#8 PEM (``BEGIN PRIVATE KEY``)."""
        return self.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def keystore_pem(self, ca: Issued | None = None) -> bytes:
        """Kafka's PEM keystore file: the PKCS#8 key, then the certificate chain."""
        return self.key_pem + self.cert_pem + (ca.cert_pem if ca is not None else b"")


def _name(common_name: str, unit: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if unit is not None:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit))
    return x509.Name(attrs)


def _san(names: Sequence[str]) -> x509.SubjectAlternativeName:
    general: list[x509.GeneralName] = []
    for name in names:
        try:
            general.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            general.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(general)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


def make_ca(common_name: str = "harness run CA", *, valid_days: int = VALID_DAYS) -> Issued:
    """A self-signed CA certificate (basic constraints CA, path length 0)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    name = _name(common_name, CLIENT_OU)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=valid_days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Issued(key, cert)


def issue(
    ca: Issued,
    common_name: str,
    *,
    unit: str | None = CLIENT_OU,
    sans: Sequence[str] = (),
    server: bool = True,
    client: bool = False,
    not_before: dt.datetime | None = None,
    not_after: dt.datetime | None = None,
) -> Issued:
    """A certificate signed by ``ca``, for a TLS server, a TLS client or both.

    ``not_before``/``not_after`` default to five minutes ago and ``VALID_DAYS`` ahead; pass
    both in the past for an expired certificate.
    """
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    start = not_before if not_before is not None else now - dt.timedelta(minutes=5)
    end = not_after if not_after is not None else now + dt.timedelta(days=VALID_DAYS)
    usages = [
        u
        for u, on in (
            (ExtendedKeyUsageOID.SERVER_AUTH, server),
            (ExtendedKeyUsageOID.CLIENT_AUTH, client),
        )
        if on
    ]
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name, unit))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=True,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
            critical=False,
        )
    )
    if sans:
        builder = builder.add_extension(_san(sans), critical=False)
    return Issued(key, builder.sign(ca.key, hashes.SHA256()))


@dataclass(frozen=True)
class TlsBundle:
    """Everything TLS a run needs, made by one CA."""

    ca: Issued
    #: the broker's certificate, valid for ``LOOPBACK_SANS``
    broker: Issued
    #: a server certificate for an acceptor that terminates TLS in front of the broker (same
    #: CA, so the clients trust both), valid for ``LOOPBACK_SANS``
    acceptor: Issued
    #: the client certificate for mutual TLS (subject ``CN=client1, OU=harness``)
    client: Issued
    #: a broker certificate that expired yesterday (bad-input tests)
    expired: Issued
    #: a broker certificate valid only for ``WRONG_HOST`` (bad-input tests)
    wrong_host: Issued

    @classmethod
    def generate(cls) -> TlsBundle:
        ca = make_ca()
        now = _now()
        return cls(
            ca=ca,
            broker=issue(ca, "broker", sans=LOOPBACK_SANS),
            acceptor=issue(ca, "acceptor", sans=LOOPBACK_SANS),
            client=issue(ca, CLIENT_CN, unit=CLIENT_OU, server=False, client=True),
            expired=issue(
                ca,
                "broker-expired",
                sans=LOOPBACK_SANS,
                not_before=now - dt.timedelta(days=3),
                not_after=now - dt.timedelta(days=1),
            ),
            wrong_host=issue(ca, "broker-wrong-host", sans=(WRONG_HOST,)),
        )

    def server_cert(self, which: str) -> Issued:
        """``"good"`` (the broker's), ``"expired"`` or ``"wrong-host"``."""
        try:
            return {"good": self.broker, "expired": self.expired, "wrong-host": self.wrong_host}[
                which
            ]
        except KeyError:
            raise ValueError(
                f"certificate {which!r}: expected one of good, expired, wrong-host"
            ) from None
