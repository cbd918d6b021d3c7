"""Kafka's connection-limit keys: parsing, validation, dynamic updates, effective limits."""

from __future__ import annotations

import pytest

from base.quota import (
    INT_MAX,
    ConfigError,
    ListenerSpec,
    QuotaConfig,
    apply_dynamic_update,
    parse_config,
)

TWO = "CLIENT://127.0.0.1:19092,REPLICATION://127.0.0.1:19093"


def fake_resolve(host: str) -> str:
    """Deterministic resolver: IP literals as is, a few known names, others fail."""
    known = {"localhost": "127.0.0.1", "proxy.example": "127.0.0.9"}
    if host in known:
        return known[host]
    if host.replace(".", "").isdigit() or ":" in host:
        return host
    raise OSError(f"unknown host {host}")


def parse(**props: str) -> QuotaConfig:
    return parse_config({k.replace("_", "."): v for k, v in props.items()}, resolve=fake_resolve)


class TestDefaults:
    def test_kafka_defaults(self) -> None:
        cfg = parse_config({"listeners": "CLIENT://127.0.0.1:19092"})
        assert cfg.listeners == (ListenerSpec("CLIENT", "127.0.0.1", 19092),)
        assert cfg.max_connections == INT_MAX
        assert cfg.max_connections_per_ip == INT_MAX
        assert cfg.max_connection_creation_rate == INT_MAX
        assert (cfg.quota_window_num, cfg.quota_window_size_seconds) == (11, 1)
        assert cfg.num_network_threads == 3
        assert cfg.socket_request_max_bytes == 104857600
        assert cfg.listener_max("CLIENT") == INT_MAX
        assert cfg.inter_broker_listener_name is None

    def test_listener_names_are_upper_cased(self) -> None:
        cfg = parse_config({"listeners": "client://127.0.0.1:1,rep://[::1]:2"})
        assert cfg.listener_names == ("CLIENT", "REP")
        assert cfg.listener("REP").host == "::1"


class TestProtected:
    def test_inter_broker_listener_is_protected_only_with_two_listeners(self) -> None:
        cfg = parse_config({"listeners": TWO, "inter.broker.listener.name": "replication"})
        assert cfg.inter_broker_listener_name == "REPLICATION"
        assert cfg.protected("REPLICATION") and not cfg.protected("CLIENT")
        one = parse_config(
            {"listeners": "REPLICATION://127.0.0.1:1", "inter.broker.listener.name": "REPLICATION"}
        )
        assert not one.protected("REPLICATION")

    def test_default_inter_broker_listener_is_plaintext(self) -> None:
        # security.inter.broker.protocol defaults to PLAINTEXT: a listener of that name is it.
        cfg = parse_config({"listeners": "PLAINTEXT://127.0.0.1:1,CLIENT://127.0.0.1:2"})
        assert cfg.inter_broker_listener_name == "PLAINTEXT"
        assert cfg.protected("PLAINTEXT")

    def test_unknown_inter_broker_listener_is_refused(self) -> None:
        with pytest.raises(ConfigError) as e:
            parse_config({"listeners": TWO, "inter.broker.listener.name": "INTERNAL"})
        assert e.value.key == "inter.broker.listener.name"
        assert "CLIENT, REPLICATION" in e.value.reason


class TestLimits:
    def test_listener_prefixed_keys_use_lower_case_names(self) -> None:
        cfg = parse_config(
            {
                "listeners": TWO,
                "listener.name.client.max.connections": "50",
                "listener.name.client.max.connection.creation.rate": "30",
            }
        )
        assert cfg.listener_max("CLIENT") == 50
        assert cfg.listener_rate("CLIENT") == 30
        assert cfg.listener_max("REPLICATION") == INT_MAX
        props = cfg.to_properties()
        assert props["listener.name.client.max.connections"] == 50
        assert props["listener.name.client.max.connection.creation.rate"] == 30
        assert props["listener.name.replication.max.connections"] == INT_MAX

    def test_overrides_by_ip_and_host_name(self) -> None:
        cfg = parse_config(
            {
                "listeners": TWO,
                "max.connections.per.ip": "5",
                "max.connections.per.ip.overrides": "localhost:2, 127.0.0.7:9 ,::1:3",
            },
            resolve=fake_resolve,
        )
        assert dict(cfg.max_connections_per_ip_overrides) == {
            "127.0.0.1": 2,
            "127.0.0.7": 9,
            "::1": 3,
        }
        assert cfg.max_connections_for_ip("127.0.0.1") == 2
        assert cfg.max_connections_for_ip("127.0.0.2") == 5
        props = cfg.to_properties()
        assert props["max.connections.per.ip.overrides"] == "localhost:2, 127.0.0.7:9 ,::1:3"
        assert props["max.connections.per.ip.overrides.resolved"] == {
            "127.0.0.1": 2,
            "127.0.0.7": 9,
            "::1": 3,
        }

    def test_localhost_resolves_to_ipv4_loopback_with_the_real_resolver(self) -> None:
        cfg = parse_config({"listeners": TWO, "max.connections.per.ip.overrides": "localhost:4"})
        assert dict(cfg.max_connections_per_ip_overrides) == {"127.0.0.1": 4}

    def test_per_ip_zero_only_with_overrides(self) -> None:
        with pytest.raises(ConfigError) as e:
            parse_config({"listeners": TWO, "max.connections.per.ip": "0"})
        assert e.value.key == "max.connections.per.ip"
        assert "max.connections.per.ip.overrides" in e.value.reason
        cfg = parse_config(
            {
                "listeners": TWO,
                "max.connections.per.ip": "0",
                "max.connections.per.ip.overrides": "127.0.0.1:10",
            }
        )
        assert cfg.max_connections_for_ip("127.0.0.2") == 0

    def test_zero_rates_and_counts_are_legal_broker_wide(self) -> None:
        cfg = parse_config(
            {"listeners": TWO, "max.connection.creation.rate": "0", "max.connections": "0"}
        )
        assert (cfg.max_connection_creation_rate, cfg.max_connections) == (0, 0)

    def test_to_properties_names_every_limit(self) -> None:
        props = parse_config(
            {"listeners": TWO, "inter.broker.listener.name": "REPLICATION"}
        ).to_properties()
        for key in (
            "listeners",
            "inter.broker.listener.name",
            "max.connections",
            "max.connections.per.ip",
            "max.connections.per.ip.overrides",
            "max.connection.creation.rate",
            "quota.window.num",
            "quota.window.size.seconds",
            "num.network.threads",
            "socket.request.max.bytes",
        ):
            assert key in props, key
        assert props["listeners"] == TWO
        assert props["quota.window.num"] == 11

    def test_unknown_keys_are_left_alone(self) -> None:
        cfg = parse_config({"listeners": TWO, "listener.name.client.upstream": "127.0.0.1:9092"})
        assert cfg.listener_names == ("CLIENT", "REPLICATION")


@pytest.mark.parametrize(
    ("props", "key", "reason_part"),
    [
        ({"max.connections": "-1"}, "max.connections", "at least 0"),
        ({"max.connections": "ten"}, "max.connections", "32-bit integer"),
        ({"max.connections": "2147483648"}, "max.connections", "32-bit integer"),
        ({"max.connection.creation.rate": "1.5"}, "max.connection.creation.rate", "32-bit"),
        ({"max.connections.per.ip": "-3"}, "max.connections.per.ip", "at least 0"),
        ({"quota.window.num": "0"}, "quota.window.num", "at least 1"),
        ({"quota.window.size.seconds": "0"}, "quota.window.size.seconds", "at least 1"),
        ({"num.network.threads": "0"}, "num.network.threads", "at least 1"),
        ({"socket.request.max.bytes": "0"}, "socket.request.max.bytes", "at least 1"),
        (
            {"listener.name.client.max.connections": "0"},
            "listener.name.client.max.connections",
            "greater than 0",
        ),
        (
            {"listener.name.client.max.connection.creation.rate": "0"},
            "listener.name.client.max.connection.creation.rate",
            "greater than 0",
        ),
        (
            {"listener.name.CLIENT.max.connections": "5"},
            "listener.name.CLIENT.max.connections",
            "listener.name.client.max.connections",
        ),
        (
            {"listener.name.other.max.connections": "5"},
            "listener.name.other.max.connections",
            "no listener OTHER",
        ),
        (
            {"max.connections.per.ip.overrides": "127.0.0.1"},
            "max.connections.per.ip.overrides",
            "host:count",
        ),
        (
            {"max.connections.per.ip.overrides": "127.0.0.1:x"},
            "max.connections.per.ip.overrides",
            "not an integer",
        ),
        (
            {"max.connections.per.ip.overrides": "nohost.invalid:3"},
            "max.connections.per.ip.overrides",
            "not a valid IP or resolvable host",
        ),
        ({"listeners": "CLIENT:/127.0.0.1:1"}, "listeners", "NAME://host:port"),
        ({"listeners": "A://h:1,a://h:2"}, "listeners", "different name"),
        ({"listeners": "A://h:70000"}, "listeners", "0..65535"),
        ({"listeners": ""}, "listeners", "at least one"),
    ],
)
def test_bad_values_name_key_value_and_reason(
    props: dict[str, str], key: str, reason_part: str
) -> None:
    full = {"listeners": TWO, **props}
    with pytest.raises(ConfigError) as e:
        parse_config(full, resolve=fake_resolve)
    err = e.value
    assert err.key == key
    assert err.value == full[key]
    assert reason_part in err.reason
    assert str(err) == f"{key}={full[key]!r}: {err.reason}"


class TestDynamicUpdate:
    def base(self) -> QuotaConfig:
        return parse_config(
            {
                "listeners": TWO,
                "inter.broker.listener.name": "REPLICATION",
                "max.connections": "100",
                "listener.name.client.max.connections": "40",
            },
            resolve=fake_resolve,
        )

    def test_reconfigurable_keys_apply(self) -> None:
        new = apply_dynamic_update(
            self.base(),
            {
                "max.connections": "10",
                "max.connections.per.ip": "3",
                "max.connections.per.ip.overrides": "proxy.example:50",
                "max.connection.creation.rate": "7",
                "listener.name.client.max.connections": "8",
                "listener.name.replication.max.connection.creation.rate": "9",
            },
            resolve=fake_resolve,
        )
        assert new.max_connections == 10
        assert new.max_connections_per_ip == 3
        assert dict(new.max_connections_per_ip_overrides) == {"127.0.0.9": 50}
        assert new.max_connection_creation_rate == 7
        assert new.listener_max("CLIENT") == 8
        assert new.listener_rate("REPLICATION") == 9

    def test_delete_falls_back_to_static_then_default(self) -> None:
        base = self.base()
        changed = apply_dynamic_update(
            base,
            {
                "max.connections": "5",
                "listener.name.client.max.connections": "6",
                "listener.name.replication.max.connections": "7",
            },
        )
        restored = apply_dynamic_update(
            changed,
            {
                "max.connections": None,
                "listener.name.client.max.connections": None,
                "listener.name.replication.max.connections": None,
                "max.connection.creation.rate": None,
            },
        )
        assert restored.max_connections == 100  # static value
        assert restored.listener_max("CLIENT") == 40  # static value
        # no own value: the broker-wide one (Kafka's valuesWithPrefixOverride)
        assert restored.listener_max("REPLICATION") == 100
        assert restored.max_connection_creation_rate == INT_MAX

    @pytest.mark.parametrize(
        ("key", "value", "reason_part"),
        [
            ("listener.name.client.max.connections", "0", "greater than 0"),
            ("listener.name.client.max.connection.creation.rate", "-1", "greater than 0"),
            ("quota.window.num", "5", "not dynamically reconfigurable"),
            ("listeners", "X://h:1", "not dynamically reconfigurable"),
            ("num.network.threads", "8", "not dynamically reconfigurable"),
            ("socket.send.buffer.bytes", "8", "not a dynamically reconfigurable"),
            ("max.connections", "-2", "at least 0"),
        ],
    )
    def test_refused_updates(self, key: str, value: str, reason_part: str) -> None:
        with pytest.raises(ConfigError) as e:
            apply_dynamic_update(self.base(), {key: value})
        assert (e.value.key, e.value.value) == (key, value)
        assert reason_part in e.value.reason

    def test_per_ip_zero_rule_holds_dynamically(self) -> None:
        with pytest.raises(ConfigError) as e:
            apply_dynamic_update(self.base(), {"max.connections.per.ip": "0"})
        assert e.value.key == "max.connections.per.ip"
        ok = apply_dynamic_update(
            self.base(),
            {"max.connections.per.ip": "0", "max.connections.per.ip.overrides": "127.0.0.1:1"},
        )
        assert ok.max_connections_per_ip == 0

    def test_refused_update_changes_nothing(self) -> None:
        base = self.base()
        with pytest.raises(ConfigError):
            apply_dynamic_update(base, {"max.connections": "1", "quota.window.num": "3"})
        assert base.max_connections == 100
