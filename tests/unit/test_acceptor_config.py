"""Acceptor configuration: nothing starts half-configured; errors name key, value, reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from acceptor.config import (
    apply_overrides,
    load_config,
    parse_acceptor_config,
    read_properties,
)
from base.quota.config import ConfigError

BASE = {
    "listeners": "CLIENT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
    "inter.broker.listener.name": "INTERNAL",
    "listener.name.client.upstream": "127.0.0.1:9092",
    "listener.name.internal.upstream": "127.0.0.1:9093",
}


def test_defaults_and_listeners() -> None:
    cfg = parse_acceptor_config(BASE)
    assert [s.name for s in cfg.listeners] == ["CLIENT", "INTERNAL"]
    assert cfg.listener("CLIENT").upstream_port == 9092
    assert cfg.listener("INTERNAL").proxy == "off"
    assert cfg.backlog == 50
    assert cfg.idle_ms == 600000
    assert cfg.proxy_timeout_ms == 3000
    assert cfg.admin_listeners is None
    assert cfg.request_sample == 1
    assert cfg.nice == 0
    assert cfg.quota.protected("INTERNAL")
    assert not cfg.skip_ip_rate_check


@pytest.mark.parametrize(
    ("key", "value", "reason_part"),
    [
        ("listener.name.client.upstream", "nohostport", "host:port"),
        ("listener.name.client.proxy.protocol", "sometimes", "off, optional, required"),
        ("socket.listen.backlog.size", "0", "between"),
        ("socket.listen.backlog.size", "many", "integer"),
        ("admin.allowed.addresses", "10.0.0.0/33", "CIDR"),
        ("admin.listeners", "NOPE", "no listener"),
        ("harness.test.skip.ip.rate.check", "yes", "true or false"),
        ("acceptor.io", "streams", "one of protocol"),
        ("acceptor.nice", "-21", "between -20 and 19"),
        ("acceptor.nice", "20", "between -20 and 19"),
        ("max.connections.per.ip", "-1", "at least 0"),
        ("listener.name.nope.upstream", "127.0.0.1:1", "no listener"),
        ("listener.security.protocol.map", "CLIENT:TLS", "one of PLAINTEXT, SSL"),
        ("listener.security.protocol.map", "CLIENT", "NAME:PROTOCOL"),
        ("listener.security.protocol.map", "OTHER:SSL", "no listener OTHER"),
        ("listener.name.client.tls.mode", "pass-through", "has no TLS"),
        ("listener.name.nope.tls.mode", "pass-through", "no listener"),
        ("listener.name.client.ssl.keystore.location", "/tmp/x.pem", "no TLS"),
    ],
)
def test_bad_values_name_key_value_reason(key: str, value: str, reason_part: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_acceptor_config({**BASE, key: value})
    assert err.value.key == key or key in str(err.value)
    assert reason_part in err.value.reason


def test_security_protocols_and_tls_modes() -> None:
    cfg = parse_acceptor_config(
        {**BASE, "listener.security.protocol.map": "CLIENT:SASL_SSL,INTERNAL:PLAINTEXT"}
    )
    client, internal = cfg.listener("CLIENT"), cfg.listener("INTERNAL")
    assert (client.protocol, client.tls, client.opaque, client.sasl) == (
        "SASL_SSL",
        "pass-through",
        True,
        False,  # passed through: its login is inside TLS, not read
    )
    assert (internal.protocol, internal.tls, internal.opaque, internal.sasl) == (
        "PLAINTEXT",
        "",
        False,
        False,
    )
    sasl = parse_acceptor_config(
        {**BASE, "listener.security.protocol.map": "client:sasl_plaintext"}
    )
    assert sasl.listener("CLIENT").sasl and not sasl.listener("CLIENT").opaque
    # a listener named as a protocol is that protocol, as in Kafka's default map
    named = parse_acceptor_config(
        {
            "listeners": "SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
            "listener.name.ssl.upstream": "127.0.0.1:9092",
            "listener.name.plaintext.upstream": "127.0.0.1:9093",
        }
    )
    assert named.listener("SSL").opaque and not named.listener("PLAINTEXT").opaque


@pytest.mark.parametrize(
    ("extra", "key", "reason_part"),
    [
        ({"listener.name.client.tls.mode": "terminate"}, "ssl.keystore.location", "required"),
        (
            {"listener.name.client.ssl.truststore.location": "/nonexistent/ca.pem"},
            "ssl.truststore.location",
            "no such file",
        ),
        ({"listener.name.client.ssl.client.auth": "always"}, "ssl.client.auth", "one of none"),
        ({"listener.name.client.tls.mode": "inspect"}, "tls.mode", "one of pass-through"),
        ({"listener.name.client.proxy.protocol": "required"}, "proxy.protocol", "before TLS"),
    ],
)
def test_tls_listener_refusals(extra: dict[str, str], key: str, reason_part: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_acceptor_config({**BASE, "listener.security.protocol.map": "CLIENT:SSL", **extra})
    assert key in err.value.key and reason_part in err.value.reason


def test_upstream_is_required_per_listener() -> None:
    props = dict(BASE)
    del props["listener.name.internal.upstream"]
    with pytest.raises(ConfigError) as err:
        parse_acceptor_config(props)
    assert err.value.key == "listener.name.internal.upstream"
    assert "required" in err.value.reason


def test_properties_file_and_overrides(tmp_path: Path) -> None:
    f = tmp_path / "acceptor.properties"
    f.write_text(
        "# comment\n! also comment\nlisteners = CLIENT://127.0.0.1:0\n"
        "listener.name.client.upstream: 127.0.0.1:9092\n"
        "max.connections.per.ip=5\nadmin.allowed.addresses=127.0.0.0/8,\\\n  10.0.0.0/8\n",
        encoding="utf-8",
    )
    props = read_properties(f)
    assert props["admin.allowed.addresses"] == "127.0.0.0/8,10.0.0.0/8"
    cfg = load_config(
        f, ["max.connections.per.ip=7", "listener.name.client.proxy.protocol=required"]
    )
    assert cfg.quota.max_connections_per_ip == 7
    assert cfg.listener("CLIENT").proxy == "required"
    assert apply_overrides({"a": "1"}, ["a="]) == {}
    with pytest.raises(ConfigError):
        apply_overrides({}, ["novalue"])


def test_nice_is_refused_for_an_acceptor_on_a_thread() -> None:
    from acceptor.server import start_in_thread

    with pytest.raises(ConfigError) as err:
        start_in_thread({**BASE, "acceptor.nice": "5"})
    assert err.value.key == "acceptor.nice"
    assert "process" in err.value.reason
