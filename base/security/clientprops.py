"""Kafka's client configuration keys (``client.properties``): written, read, and turned into
kafka-python keyword arguments.

The file the broker launcher writes per secured listener is what Kafka's own tools take as
``--command-config``; `kafka_python_config` maps the same keys onto kafka-python, so one file
serves both. Keys outside `SUPPORTED_KEYS` are refused with their name, not ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from base import javaprops
from base.security.sasl import SaslUser, check_mechanism, client_jaas, parse_client_jaas

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: the protocols with TLS
TLS_PROTOCOLS = ("SSL", "SASL_SSL")
#: `ssl.client.auth`: whether a TLS server asks for client certificates
CLIENT_AUTH = ("none", "requested", "required")

SUPPORTED_KEYS = frozenset(
    {
        "bootstrap.servers",
        "client.id",
        "security.protocol",
        "sasl.mechanism",
        "sasl.jaas.config",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.endpoint.identification.algorithm",
    }
)


def client_properties(
    protocol: str,
    *,
    bootstrap: str | None = None,
    mechanism: str | None = None,
    user: SaslUser | None = None,
    truststore: Path | None = None,
    keystore: Path | None = None,
) -> dict[str, str]:
    """Kafka client keys for one listener: PEM trust and key stores, JAAS for SASL."""
    protocol = protocol.upper()
    if protocol not in PROTOCOLS:
        raise ValueError(f"security.protocol={protocol!r}: expected one of {', '.join(PROTOCOLS)}")
    props = {"security.protocol": protocol}
    if bootstrap:
        props["bootstrap.servers"] = bootstrap
    if protocol.startswith("SASL_"):
        if mechanism is None or user is None:
            raise ValueError(f"security.protocol={protocol}: needs a SASL mechanism and a user")
        props["sasl.mechanism"] = check_mechanism(mechanism)
        props["sasl.jaas.config"] = client_jaas(mechanism, user)
    if protocol.endswith("SSL"):
        if truststore is None:
            raise ValueError(f"security.protocol={protocol}: needs the CA (a PEM truststore)")
        props["ssl.truststore.type"] = "PEM"
        props["ssl.truststore.location"] = str(truststore)
        if keystore is not None:
            props["ssl.keystore.type"] = "PEM"
            props["ssl.keystore.location"] = str(keystore)
    return props


def render(props: Mapping[str, str], header: str = "") -> str:
    """Java properties text; values need no escaping beyond backslashes here."""
    lines = [f"# {line}" for line in header.splitlines()]
    lines += [f"{k}={props[k].replace(chr(92), chr(92) * 2)}" for k in sorted(props)]
    return "\n".join(lines) + "\n"


def parse(text: str) -> dict[str, str]:
    """Kafka's client file syntax: Java properties (`base.javaprops`)."""
    return javaprops.parse(text, "client properties")


def read(path: Path) -> dict[str, str]:
    return javaprops.read(path)


def kafka_python_config(props: Mapping[str, str]) -> dict[str, Any]:
    """kafka-python keyword arguments (``security_protocol``, ``ssl_cafile``, ...) for Kafka's
    client keys. Raises ValueError naming any key or value it cannot honour."""
    unknown = sorted(set(props) - SUPPORTED_KEYS)
    if unknown:
        raise ValueError(
            f"client config keys {unknown} are not supported; supported: "
            f"{', '.join(sorted(SUPPORTED_KEYS))}"
        )
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise ValueError(f"security.protocol={protocol!r}: expected one of {', '.join(PROTOCOLS)}")
    out: dict[str, Any] = {"security_protocol": protocol}
    if "bootstrap.servers" in props:
        out["bootstrap_servers"] = [s.strip() for s in props["bootstrap.servers"].split(",")]
    if "client.id" in props:
        out["client_id"] = props["client.id"]
    if protocol.startswith("SASL_"):
        if "sasl.mechanism" not in props or "sasl.jaas.config" not in props:
            raise ValueError(
                f"security.protocol={protocol}: needs sasl.mechanism and sasl.jaas.config"
            )
        out["sasl_mechanism"] = check_mechanism(props["sasl.mechanism"])
        username, password = parse_client_jaas(props["sasl.jaas.config"])
        out["sasl_plain_username"] = username
        out["sasl_plain_password"] = password
    if protocol.endswith("SSL"):
        for kind in ("truststore", "keystore"):
            store_type = props.get(
                f"ssl.{kind}.type", "PEM" if f"ssl.{kind}.location" in props else ""
            ).upper()
            if store_type and store_type != "PEM":
                raise ValueError(f"ssl.{kind}.type={store_type}: only PEM stores are supported")
        if "ssl.truststore.location" in props:
            out["ssl_cafile"] = props["ssl.truststore.location"]
        if "ssl.keystore.location" in props:
            # Kafka's PEM keystore holds the key and the chain in one file; so can Python's.
            out["ssl_certfile"] = props["ssl.keystore.location"]
            out["ssl_keyfile"] = props["ssl.keystore.location"]
        algorithm = props.get("ssl.endpoint.identification.algorithm", "https").lower()
        if algorithm not in ("https", ""):
            raise ValueError(
                f"ssl.endpoint.identification.algorithm={algorithm!r}: expected https or empty"
            )
        out["ssl_check_hostname"] = algorithm == "https"
    return out
