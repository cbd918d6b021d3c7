"""Where the acceptor ends TLS: its contexts from the run's PEM files (a bad file is a
config error naming its key) and a client certificate's principal as Kafka names it."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("cryptography", reason="the cryptography package makes the certificates")

from cryptography.hazmat.primitives.serialization import Encoding

from acceptor.config import parse_acceptor_config
from acceptor.tls import kafka_principal, listener_tls
from base.quota.config import ConfigError
from base.security.certs import CLIENT_PRINCIPAL, TlsBundle
from base.security.material import RunSecurity

pytestmark = pytest.mark.unit


def _cfg(tmp_path: Path, **extra: str) -> tuple[object, object]:
    files = RunSecurity.generate().write(tmp_path / "private")
    props = {
        "listeners": "CLIENT://127.0.0.1:0",
        "listener.name.client.upstream": "127.0.0.1:9092",
        "listener.security.protocol.map": "CLIENT:SSL",
        "listener.name.client.tls.mode": "terminate",
        "listener.name.client.ssl.keystore.location": str(files.acceptor_keystore),
        "listener.name.client.ssl.truststore.location": str(files.ca),
        **extra,
    }
    cfg = parse_acceptor_config(props)
    return cfg, cfg.listener("CLIENT")


def test_a_certificate_principal_is_its_subject_reversed() -> None:
    client = TlsBundle.generate().client
    der = client.cert.public_bytes(Encoding.DER)
    assert kafka_principal(der) == CLIENT_PRINCIPAL == "OU=harness,CN=client1"
    assert kafka_principal(None) is None and kafka_principal(b"") is None


def test_contexts_of_a_terminating_listener(tmp_path: Path) -> None:
    cfg, spec = _cfg(tmp_path, **{"listener.name.client.ssl.client.auth": "required"})
    tls = listener_tls(cfg, spec)  # type: ignore[arg-type]
    assert tls is not None and tls.reads_certificate
    assert tls.handshake_timeout_s == 600.0  # connections.max.idle.ms: Kafka has no other


def test_a_file_that_is_not_pem_names_its_key(tmp_path: Path) -> None:
    bad = tmp_path / "not.pem"
    bad.write_text("not a certificate\n")
    cfg, spec = _cfg(tmp_path, **{"listener.name.client.ssl.keystore.location": str(bad)})
    with pytest.raises(ConfigError) as err:
        listener_tls(cfg, spec)  # type: ignore[arg-type]
    assert err.value.key == "listener.name.client.ssl.keystore.location"
    assert "PEM" in err.value.reason
