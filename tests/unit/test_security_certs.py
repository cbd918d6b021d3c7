"""The run's throwaway CA and certificates: PKCS#8 keys, SANs, chains, subjects, expiry."""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
from pathlib import Path

import pytest

pytest.importorskip("cryptography", reason="the cryptography package makes the certificates")

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from base.security.certs import (
    CLIENT_PRINCIPAL,
    WRONG_HOST,
    TlsBundle,
    issue,
    make_ca,
)

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def bundle() -> TlsBundle:
    return TlsBundle.generate()


def _sans(cert: x509.Certificate) -> list[str]:
    ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    ips = [str(ip) for ip in ext.get_values_for_type(x509.IPAddress)]
    return ips + ext.get_values_for_type(x509.DNSName)


def test_every_key_is_unencrypted_pkcs8_pem(bundle: TlsBundle) -> None:
    for issued in (
        bundle.ca,
        bundle.broker,
        bundle.acceptor,
        bundle.client,
        bundle.expired,
        bundle.wrong_host,
    ):
        pem = issued.key_pem.decode()
        assert pem.startswith("-----BEGIN PRIVATE KEY-----\n")  # PKCS#8, not SEC1/PKCS#1
        assert "EC PRIVATE KEY" not in pem and "RSA PRIVATE KEY" not in pem
        assert isinstance(issued.key, ec.EllipticCurvePrivateKey)


def test_keystore_pem_is_key_then_chain(bundle: TlsBundle) -> None:
    text = bundle.broker.keystore_pem(bundle.ca).decode()
    assert text.index("BEGIN PRIVATE KEY") < text.index("BEGIN CERTIFICATE")
    assert text.count("BEGIN CERTIFICATE") == 2  # the broker's, then the CA's
    certs = x509.load_pem_x509_certificates(text.encode())
    assert certs[0] == bundle.broker.cert and certs[1] == bundle.ca.cert


def test_broker_certificate_names_the_loopback_address_and_localhost(bundle: TlsBundle) -> None:
    assert _sans(bundle.broker.cert) == ["127.0.0.1", "localhost"]
    assert _sans(bundle.acceptor.cert) == ["127.0.0.1", "localhost"]
    ip = ipaddress.ip_address("127.0.0.1")
    ext = bundle.broker.cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert ip in ext.value.get_values_for_type(x509.IPAddress)
    usage = bundle.broker.cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usage


def test_chains_verify_against_the_ca(bundle: TlsBundle) -> None:
    for issued in (
        bundle.broker,
        bundle.acceptor,
        bundle.client,
        bundle.expired,
        bundle.wrong_host,
    ):
        issued.cert.verify_directly_issued_by(bundle.ca.cert)
    other = make_ca("another CA")
    with pytest.raises((ValueError, Exception)):
        bundle.broker.cert.verify_directly_issued_by(other.cert)
    ca_ext = bundle.ca.cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert ca_ext.ca is True


def test_client_certificate_subject_and_kafka_principal(bundle: TlsBundle) -> None:
    subject = bundle.client.cert.subject
    assert subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "client1"
    assert subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)[0].value == "harness"
    # RFC 2253 (what Kafka's principal builder uses) reverses the certificate order.
    assert subject.rfc4514_string() == CLIENT_PRINCIPAL == "OU=harness,CN=client1"
    usage = bundle.client.cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.CLIENT_AUTH in usage


def test_subjects_are_fixed_across_runs(bundle: TlsBundle) -> None:
    again = TlsBundle.generate()
    assert again.client.cert.subject == bundle.client.cert.subject
    assert again.client.key_pem != bundle.client.key_pem  # fresh keys every run


def test_expired_certificate_is_really_expired(bundle: TlsBundle) -> None:
    now = dt.datetime.now(dt.UTC)
    assert bundle.expired.cert.not_valid_after_utc < now - dt.timedelta(hours=23)
    assert bundle.broker.cert.not_valid_before_utc < now < bundle.broker.cert.not_valid_after_utc


def test_wrong_host_certificate_does_not_name_the_loopback_address(bundle: TlsBundle) -> None:
    assert _sans(bundle.wrong_host.cert) == [WRONG_HOST]


def test_python_ssl_loads_the_files_and_checks_expiry_and_host(
    bundle: TlsBundle, tmp_path: Path
) -> None:
    """What kafka-python does with them: load the CA and the combined key+chain file."""
    ca = tmp_path / "ca.pem"
    ca.write_bytes(bundle.ca.cert_pem)
    client = tmp_path / "client.pem"
    client.write_bytes(bundle.client.keystore_pem(bundle.ca))
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.load_cert_chain(certfile=str(client))  # key and chain in one file
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    keystore = tmp_path / "broker.pem"
    keystore.write_bytes(bundle.broker.keystore_pem(bundle.ca))
    server.load_cert_chain(str(keystore))


def test_issue_honours_explicit_validity() -> None:
    ca = make_ca()
    start = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    cert = issue(ca, "x", not_before=start, not_after=start + dt.timedelta(days=1)).cert
    assert cert.not_valid_before_utc == start
    assert cert.not_valid_after_utc == start + dt.timedelta(days=1)


def test_server_cert_picks_good_expired_or_wrong_host(bundle: TlsBundle) -> None:
    assert bundle.server_cert("good") is bundle.broker
    assert bundle.server_cert("expired") is bundle.expired
    assert bundle.server_cert("wrong-host") is bundle.wrong_host
    with pytest.raises(ValueError, match="expected one of"):
        bundle.server_cert("nope")
