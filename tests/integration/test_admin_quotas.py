"""The admin path: Kafka's quota/config APIs answered by the acceptor, `harness quotas`, and
the same client against the real broker."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from acceptor import AcceptorHandle
from acceptor.testing import (
    api_versions_frame,
    bootstrap,
    raw,
    read_outcome,
    round_trip,
    wait_until,
)
from base.admin import cli as quotas_cli
from base.admin.client import (
    AdminError,
    alter_broker_config,
    alter_client_quota,
    alter_ip_quota,
    describe_client_quotas,
    describe_ip_quotas,
)
from base.history import read_history
from harness.cli import main as harness_main
from tests.integration.conftest import acceptor_starter

Start = Callable[..., AcceptorHandle]


@pytest.fixture
def start(kafka_broker: Any, tmp_path: Path) -> Iterator[Start]:
    defaults = {"quota.window.num": "2"}
    with acceptor_starter(kafka_broker.bootstrap, tmp_path, "admin", defaults) as start:
        yield start


def history(h: AcceptorHandle, source: str) -> list[dict[str, Any]]:
    for w in (h.acceptor.rec.writer, h.acceptor.config_writer):
        assert w is not None
        w.flush()
    assert h.acceptor.history_dir is not None
    return read_history(h.acceptor.history_dir, source).to_pylist()


def test_harness_quotas_cli_sets_an_ip_quota_that_takes_effect(
    start: Start, capsys: pytest.CaptureFixture[str]
) -> None:
    h = start()
    boot = bootstrap(h.address("CLIENT"))
    assert (
        harness_main(
            [
                "quotas",
                "--bootstrap-server",
                boot,
                "--alter",
                "--ip",
                "127.0.0.2",
                "--add-config",
                "connection_creation_rate=1",
            ]
        )
        == 0
    )
    assert "Completed updating config for ip 127.0.0.2." in capsys.readouterr().out
    assert (
        harness_main(["quotas", "--bootstrap-server", boot, "--describe", "--entity-type", "ips"])
        == 0
    )
    assert (
        "Quota configs for ip '127.0.0.2' are connection_creation_rate=1.0"
        in capsys.readouterr().out
    )
    # within one window: quota 1/s over (n-1)=1 padded window allows one, then throttles
    outcomes = [round_trip(h.address("CLIENT"), "127.0.0.2", timeout=10) for _ in range(2)]
    assert outcomes[0] == "ok" and outcomes[1] in ("eof", "reset")
    assert [round_trip(h.address("CLIENT"), "127.0.0.3") for _ in range(4)] == ["ok"] * 4
    admin = [r for r in history(h, "acceptor") if r["event"] == "admin"]
    assert [r["reason"] for r in admin] == ["applied"]
    configs = [json.loads(r["detail"]) for r in history(h, "harness") if r["event"] == "config"]
    assert configs[0]["ip_quotas"] == {} and configs[-1]["ip_quotas"] == {"127.0.0.2": 1}
    assert configs[-1]["max.connections"] == 2147483647 and "listeners" in configs[-1]


def test_default_ip_quota_and_delete(start: Start) -> None:
    h = start()
    boot = bootstrap(h.address("CLIENT"))
    alter_ip_quota(boot, None, 7)
    alter_ip_quota(boot, "127.0.0.9", 3)
    assert describe_ip_quotas(boot) == {"default": 7.0, "127.0.0.9": 3.0}
    assert describe_ip_quotas(boot, "default") == {"default": 7.0}
    assert describe_ip_quotas(boot, "127.0.0.9") == {"127.0.0.9": 3.0}
    assert h.call(lambda: h.acceptor.quotas.ip_quotas()) == {None: 7, "127.0.0.9": 3}
    alter_ip_quota(boot, "127.0.0.9", None)
    assert describe_ip_quotas(boot) == {"default": 7.0}
    assert h.call(lambda: h.acceptor.quotas.ip_quota_for("127.0.0.9")) == 7
    assert quotas_cli  # the module under test is importable on its own


BAD_ALTERATIONS = [
    ({"ip": "127.0.0.2"}, {"connection_creation_rate": 2.5}),
    ({"ip": "127.0.0.2"}, {"connection_creation_rate": 0.0}),
    ({"ip": "127.0.0.2"}, {"request_percentage": 10.0}),
    ({"ip": "no-such-host.invalid"}, {"connection_creation_rate": 5.0}),
    ({"ip": "127.0.0.2", "user": "alice"}, {"connection_creation_rate": 5.0}),
]


@pytest.mark.parametrize(("entity", "ops"), BAD_ALTERATIONS)
def test_validation_errors_are_the_brokers(
    start: Start, kafka_broker: Any, entity: dict[str, str], ops: dict[str, float]
) -> None:
    h = start()
    errors = []
    for boot in (bootstrap(h.address("CLIENT")), kafka_broker.bootstrap):
        with pytest.raises(AdminError) as err:
            alter_client_quota(boot, entity, ops)
        errors.append((err.value.code, err.value.message))
    assert errors[0] == errors[1]
    assert h.call(lambda: h.acceptor.quotas.ip_quotas()) == {}


UNSET_REMOVALS = [
    ({"ip": "127.0.0.3"}, {"connection_creation_rate": None}),  # never set
    ({"ip": None}, {"connection_creation_rate": None}),  # no default either
    ({"ip": "127.0.0.3"}, {"request_percentage": None}),  # not an ip key: removals unchecked
    ({"ip": "127.0.0.3"}, {"no.such.key": None}),
    ({"user": "nobody"}, {"request_percentage": None}),
    ({"user": "nobody", "client-id": "c"}, {"request_percentage": None}),
]


@pytest.mark.parametrize(("entity", "ops"), UNSET_REMOVALS)
def test_removing_an_unset_key_is_accepted_as_by_the_broker(
    start: Start, kafka_broker: Any, entity: dict[str, str | None], ops: dict[str, float | None]
) -> None:
    # ClientQuotaControlManager.alterClientQuotaEntity: a removal is not validated and
    # writes a record only when the key is set, so removing an unset key is a success
    h = start()
    for boot in (bootstrap(h.address("CLIENT")), kafka_broker.bootstrap):
        alter_client_quota(boot, entity, ops)  # raises AdminError on a refusal
    assert h.call(lambda: h.acceptor.quotas.ip_quotas()) == {}
    assert h.call(lambda: h.acceptor.request_quotas.quotas()) == []
    rows = [r for r in history(h, "acceptor") if r["event"] == "admin"]
    assert [r["reason"] for r in rows] == ["applied"]


@pytest.mark.parametrize(
    ("entity", "key"),
    [
        ({"ip": "127.0.0.2"}, "connection_creation_rate"),
        ({"ip": "localhost"}, "connection_creation_rate"),  # printed as given
        ({"user": "u1"}, "request_percentage"),
        ({"user": "u1", "client-id": None}, "request_percentage"),  # HashMap order, null
        ({"client-id": "c", "user": None}, "request_percentage"),
        ({"ip": "127.0.0.2", "user": "u1"}, "connection_creation_rate"),  # before the entity
    ],
)
def test_duplicate_key_is_answered_as_by_the_broker(
    start: Start, kafka_broker: Any, entity: dict[str, str | None], key: str
) -> None:
    # ClientQuotaControlManager.alterClientQuotas: the duplicate-key error is overwritten by
    # "Ignoring duplicate entity <ClientQuotaEntity>", and nothing is applied
    from kafka.protocol.admin import AlterClientQuotasRequest as A

    from base.admin.client import KafkaWire

    entry = A.EntryData(
        entity=[A.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in entity.items()],
        ops=[A.EntryData.OpData(key=key, value=5.0, remove=False)] * 2,
    )
    answers = []
    h = start()
    for boot in (bootstrap(h.address("CLIENT")), kafka_broker.bootstrap):
        with KafkaWire(boot) as wire:
            resp = wire.request(A[wire.version_for(A)](entries=[entry], validate_only=False))
        answers.append([(e.error_code, e.error_message) for e in resp.entries])
    assert answers[0] == answers[1]
    assert answers[0][0][0] == 42
    assert h.call(lambda: h.acceptor.quotas.ip_quotas()) == {}
    assert h.call(lambda: h.acceptor.request_quotas.quotas()) == []


BAD_DESCRIBE_FILTERS = [
    [("ip", 2, None), ("ip", 2, None)],  # a type twice
    [("user", 0, "alice"), ("user", 1, None)],  # twice, with different match types
    [("client-id", 2, "c1")],  # SPECIFIED with a match string
    [("ip", 2, "127.0.0.1")],
    [("ip", 0, None)],  # EXACT without a match
    [("ip", 1, "127.0.0.1")],  # DEFAULT with a match
    [("user", 2, "alice"), ("ip", 2, None)],  # match string reported before the combination
    [("topic", 2, None)],
]


@pytest.mark.parametrize("components", BAD_DESCRIBE_FILTERS)
def test_describe_filter_errors_are_the_brokers(
    start: Start, kafka_broker: Any, components: list[tuple[str, int, str | None]]
) -> None:
    h = start()
    errors = []
    for boot in (bootstrap(h.address("CLIENT")), kafka_broker.bootstrap):
        with pytest.raises(AdminError) as err:
            describe_client_quotas(boot, components)
        errors.append((err.value.code, err.value.message))
    assert errors[0] == errors[1]
    assert errors[0][0] in (42, 35)  # INVALID_REQUEST / UNSUPPORTED_VERSION


def test_unauthorized_admin_is_refused_and_changes_nothing(start: Start) -> None:
    h = start(**{"admin.allowed.addresses": "127.0.0.5/32"})
    boot = bootstrap(h.address("CLIENT"))
    for call in (
        lambda: alter_ip_quota(boot, "127.0.0.2", 1, source_ip="127.0.0.1"),
        lambda: describe_ip_quotas(boot, source_ip="127.0.0.1"),
        lambda: alter_broker_config(boot, {"max.connections": "1"}, source_ip="127.0.0.1"),
        lambda: alter_client_quota(
            boot, {"user": "bob"}, {"request_percentage": 50.0}, source_ip="127.0.0.1"
        ),
    ):
        with pytest.raises(AdminError) as err:
            call()
        assert err.value.code == 31
    assert h.call(lambda: h.acceptor.quotas.ip_quotas()) == {}
    assert h.acceptor.quota_cfg.max_connections == 2147483647
    refused = [r for r in history(h, "acceptor") if r["event"] == "admin"]
    assert len(refused) == 4 and {r["reason"] for r in refused} == {"CLUSTER_AUTHORIZATION_FAILED"}
    alter_ip_quota(boot, "127.0.0.2", 4, source_ip="127.0.0.5")  # the allowed address
    assert describe_ip_quotas(boot, source_ip="127.0.0.5") == {"127.0.0.2": 4.0}


def test_admin_only_on_configured_listeners(start: Start, kafka_broker: Any) -> None:
    h = start(
        **{
            "listeners": "CLIENT://127.0.0.1:0,ADMIN://127.0.0.1:0",
            "listener.name.admin.upstream": kafka_broker.bootstrap,
            "admin.listeners": "ADMIN",
        }
    )
    with pytest.raises(AdminError) as err:
        alter_ip_quota(bootstrap(h.address("CLIENT")), None, 3)
    assert err.value.code == 31
    alter_ip_quota(bootstrap(h.address("ADMIN")), None, 3)
    assert h.call(lambda: h.acceptor.quotas.ip_quotas()) == {None: 3}


def test_broker_connection_limits_change_at_run_time(start: Start, kafka_broker: Any) -> None:
    # admin goes through the protected inter-broker listener, which max.connections spares
    h = start(
        **{
            "listeners": "CLIENT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
            "inter.broker.listener.name": "INTERNAL",
            "listener.name.internal.upstream": kafka_broker.bootstrap,
        }
    )
    addr = h.address("CLIENT")
    boot = bootstrap(h.address("INTERNAL"))
    alter_broker_config(boot, {"max.connections": "1"})
    assert h.acceptor.quota_cfg.max_connections == 1
    first = raw(addr, "127.0.0.2")
    first.sendall(api_versions_frame())
    assert read_outcome(first, 10) == "data"
    second = raw(addr, "127.0.0.3")
    second.sendall(api_versions_frame())
    assert read_outcome(second, 1.0) == "timeout"  # waits for a slot
    alter_broker_config(boot, {"max.connections": None})  # delete: back to the default
    assert read_outcome(second, 10) == "data"
    first.close()
    second.close()
    # a bad value: the same answer as the real broker's
    errors = []
    for b in (boot, kafka_broker.bootstrap):
        with pytest.raises(AdminError) as err:
            alter_broker_config(b, {"max.connections": "-1"})
        errors.append((err.value.code, err.value.message))
    assert errors[0] == errors[1]
    with pytest.raises(AdminError):
        alter_broker_config(boot, {"listener.name.client.max.connections": "0"})
    alter_broker_config(boot, {"listener.name.client.max.connection.creation.rate": "50"})
    assert h.acceptor.quota_cfg.listener_rate("CLIENT") == 50
    configs = [json.loads(r["detail"]) for r in history(h, "harness") if r["event"] == "config"]
    assert [c["max.connections"] for c in configs][:3] == [2147483647, 1, 2147483647]
    assert configs[-1]["listener.name.client.max.connection.creation.rate"] == 50


def test_quotas_survive_a_restart_with_state_dir(start: Start, tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    h = start(**{"state.dir": state})
    boot = bootstrap(h.address("CLIENT"))
    alter_ip_quota(boot, "127.0.0.2", 1)
    alter_ip_quota(boot, None, 9)
    alter_broker_config(boot, {"max.connections.per.ip": "4"})
    h.stop()
    h2 = start(**{"state.dir": state})
    boot2 = bootstrap(h2.address("CLIENT"))
    assert describe_ip_quotas(boot2) == {"127.0.0.2": 1.0, "default": 9.0}
    assert h2.acceptor.quota_cfg.max_connections_per_ip == 4
    outcomes = [round_trip(h2.address("CLIENT"), "127.0.0.2", timeout=10) for _ in range(3)]
    assert outcomes[0] == "ok" and set(outcomes[1:]) <= {"eof", "reset"}


def test_harness_quotas_against_the_real_broker(
    kafka_broker: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    boot = kafka_broker.bootstrap
    ip = "127.0.0.251"
    try:
        assert (
            harness_main(
                [
                    "quotas",
                    "--bootstrap-server",
                    boot,
                    "--alter",
                    "--entity-type",
                    "ips",
                    "--entity-name",
                    ip,
                    "--add-config",
                    "connection_creation_rate=12",
                ]
            )
            == 0
        )
        capsys.readouterr()

        def described() -> bool:  # KRaft: visible once the metadata log is applied
            assert (
                harness_main(["quotas", "--bootstrap-server", boot, "--describe", "--ip", ip]) == 0
            )
            out = capsys.readouterr().out
            return f"Quota configs for ip '{ip}' are connection_creation_rate=12.0" in out

        wait_until(described, timeout=30, what="the broker's ip quota")
        assert (
            harness_main(
                [
                    "quotas",
                    "--bootstrap-server",
                    boot,
                    "--alter",
                    "--ip",
                    ip,
                    "--add-config",
                    "request_percentage=5",
                ]
            )
            == 2
        )
        assert "Only connection quota configs" in capsys.readouterr().err
    finally:
        assert (
            harness_main(
                [
                    "quotas",
                    "--bootstrap-server",
                    boot,
                    "--alter",
                    "--ip",
                    ip,
                    "--delete-config",
                    "connection_creation_rate",
                ]
            )
            == 0
        )
    capsys.readouterr()

    def gone() -> bool:
        assert harness_main(["quotas", "--bootstrap-server", boot, "--describe", "--ip", ip]) == 0
        return capsys.readouterr().out.strip() == ""

    wait_until(gone, timeout=30, what="the deletion to show")
    assert (
        harness_main(
            [
                "quotas",
                "--bootstrap-server",
                boot,
                "--alter",
                "--ip",
                ip,
                "--delete-config",
                "connection_creation_rate",
            ]
        )
        == 2
    )
    assert "Invalid config(s): connection_creation_rate" in capsys.readouterr().err


# -- Kafka 4.3.1's answers for the edge cases of issue 14 ------------------------------------
def _on_broker_eventually(check: Callable[[], bool], what: str) -> None:
    wait_until(check, timeout=30, what=what)  # KRaft: visible once the metadata log is applied


def _ip_rows(boot: str, names: set[str | None], **filt: Any) -> list[Any]:
    """DescribeClientQuotas over ip entities, only the entities named (the shared broker
    keeps other tests' quotas), sorted."""
    comps = filt.get("components", [("ip", 2, None)])
    rows = describe_client_quotas(boot, comps, strict=filt.get("strict", False))
    return sorted(
        ((e.get("ip"), v) for e, v in rows if e.get("ip") in names), key=lambda r: str(r[0])
    )


@pytest.mark.parametrize(
    ("name", "address"),
    [
        ("[::1]", "::1"),  # Java drops the brackets of an IPv6 literal
        ("::ffff:127.0.0.41", "127.0.0.41"),  # IPv4-mapped: an IPv4 address
        ("017.0.0.1", "17.0.0.1"),  # decimal in Java, octal in glibc
        ("127.42", "127.0.0.42"),  # Java's short forms
        ("localhost", "127.0.0.1"),  # a name: through the resolver
    ],
)
def test_ip_entity_is_stored_and_matched_by_the_name_given(
    start: Start, kafka_broker: Any, name: str, address: str
) -> None:
    # ClientQuotasImage keeps the entity name of the alteration; the connection quota applies
    # to InetAddress.getByName(name) (ClientQuotaMetadataManager.handleIpQuota)
    h = start()
    mine, theirs = bootstrap(h.address("CLIENT")), kafka_broker.bootstrap
    names: set[str | None] = {name, address}
    exact = {"components": [("ip", 0, name)], "strict": True}
    by_address = {"components": [("ip", 0, address)], "strict": True}
    try:
        for boot in (mine, theirs):
            alter_ip_quota(boot, name, 17)
        _on_broker_eventually(lambda: _ip_rows(theirs, names) != [], "the broker's ip quota")
        for filt in ({}, exact, by_address):
            assert _ip_rows(mine, names, **filt) == _ip_rows(theirs, names, **filt), filt
        assert _ip_rows(mine, names) == [(name, {"connection_creation_rate": 17.0})]
        assert _ip_rows(mine, names, **by_address) == []  # the name, not the address
        # enforced on the address; config rows say so (the checker matches addresses)
        assert h.call(lambda: h.acceptor.quotas.ip_quotas()) == {address: 17}
        assert h.acceptor.ip_quotas() == {name: 17}
        configs = [json.loads(r["detail"]) for r in history(h, "harness") if r["event"] == "config"]
        assert configs[-1]["ip_quotas"] == {address: 17}
    finally:
        for boot in (mine, theirs):
            alter_ip_quota(boot, name, None)
    _on_broker_eventually(lambda: _ip_rows(theirs, names) == [], "the deletion")
    assert _ip_rows(mine, names) == [] and h.call(lambda: h.acceptor.quotas.ip_quotas()) == {}


@pytest.mark.parametrize("name", ["0x7f.0.0.1", "[127.0.0.1]", "[::1", "1.2.3.4:5", "256.0.0.1"])
def test_ip_entity_names_java_refuses(start: Start, kafka_broker: Any, name: str) -> None:
    # 0x7f.0.0.1: glibc reads it as 127.0.0.1; Java 17 refuses an ambiguous literal
    h = start()
    errors = []
    for boot in (bootstrap(h.address("CLIENT")), kafka_broker.bootstrap):
        with pytest.raises(AdminError) as err:
            alter_ip_quota(boot, name, 5)
        errors.append((err.value.code, err.value.message))
    assert errors[0] == errors[1] == (42, f"{name} is not a valid IP or resolvable host.")


def test_ipv4_mapped_entity_limits_the_ipv4_client(start: Start) -> None:
    h = start()
    alter_ip_quota(bootstrap(h.address("CLIENT")), "::ffff:127.0.0.43", 1)
    outcomes = [round_trip(h.address("CLIENT"), "127.0.0.43", timeout=10) for _ in range(2)]
    assert outcomes[0] == "ok" and outcomes[1] in ("eof", "reset")
    assert describe_ip_quotas(bootstrap(h.address("CLIENT"))) == {"::ffff:127.0.0.43": 1.0}


def test_exact_filter_returns_only_that_entity(start: Start, kafka_broker: Any) -> None:
    h = start()
    mine, theirs = bootstrap(h.address("CLIENT")), kafka_broker.bootstrap
    names: set[str | None] = {"127.0.0.44", "127.0.0.45"}
    try:
        for boot in (mine, theirs):
            alter_ip_quota(boot, "127.0.0.44", 4)
            alter_ip_quota(boot, "127.0.0.45", 5)
        _on_broker_eventually(lambda: len(_ip_rows(theirs, names)) == 2, "both quotas")
        for strict in (False, True):
            filt = {"components": [("ip", 0, "127.0.0.45")], "strict": strict}
            assert _ip_rows(mine, names, **filt) == _ip_rows(theirs, names, **filt)
            assert _ip_rows(mine, names, **filt) == [
                ("127.0.0.45", {"connection_creation_rate": 5.0})
            ]
    finally:
        for boot in (mine, theirs):
            alter_ip_quota(boot, "127.0.0.44", None)
            alter_ip_quota(boot, "127.0.0.45", None)


def _broker_value(boot: str, node: str, key: str) -> str:
    """DescribeConfigs of BROKER resource `node`: the value in force for `key`."""
    from kafka.protocol.admin import DescribeConfigsRequest as D

    from base.admin.client import KafkaWire

    with KafkaWire(boot) as wire:
        v = wire.version_for(D)
        resp = wire.request(
            D[v](
                resources=[
                    D.DescribeConfigsResource(
                        resource_type=4, resource_name=node, configuration_keys=[key]
                    )
                ],
                include_synonyms=False,
                **({"include_documentation": False} if v >= 3 else {}),
            )
        )
    (result,) = resp.results
    assert result.error_code == 0, result.error_message
    (entry,) = [c for c in result.configs if c.name == key]
    return str(entry.value)


def test_per_broker_and_cluster_default_are_separate_layers(
    start: Start, kafka_broker: Any
) -> None:
    # DynamicBrokerConfig: static < cluster default (resource "") < this broker (resource
    # "<node.id>"); deleting the per-broker value reveals the default. Same steps on both,
    # the value in force compared after each (the broker's from DescribeConfigs).
    from broker.config import NODE_ID

    node = str(NODE_ID)
    h = start()  # no node.id: the acceptor asks its upstream which broker it fronts
    mine, theirs = bootstrap(h.address("CLIENT")), kafka_broker.bootstrap
    key = "max.connection.creation.rate"
    steps: list[tuple[str, str | None, int]] = [
        ("", "1000001", 1000001),
        (node, "1000002", 1000002),
        ("", "1000003", 1000002),  # the per-broker value wins
        (node, None, 1000003),  # deleting it reveals the cluster default
        ("", None, 2147483647),
    ]
    try:
        for resource, value, expected in steps:
            for boot in (mine, theirs):
                alter_broker_config(boot, {key: value}, broker=resource)
            _on_broker_eventually(
                lambda e=expected: _broker_value(theirs, node, key) == str(e),  # type: ignore[misc]
                f"{key}={expected} on the broker",
            )
            assert h.acceptor.quota_cfg.max_connection_creation_rate == expected
    finally:
        for boot in (mine, theirs):
            alter_broker_config(boot, {key: None}, broker=node)
            alter_broker_config(boot, {key: None})


@pytest.mark.parametrize(
    ("resource", "configs"),
    [
        ("2", [("max.connections", 0, "100")]),  # not this broker
        ("x", [("max.connections", 0, "100")]),
        (" 1", [("max.connections", 0, "100")]),
        ("", [("max.connections", 0, "100"), ("max.connections", 0, "200")]),
        ("", [("max.connections", 0, None)]),  # SET with a null value
        ("", [("max.connections", 2, "100")]),  # APPEND on a non-list key
        ("", [("max.connections", 3, "100")]),  # SUBTRACT
        ("", [("max.connections", 7, "100")]),  # unknown operation
        ("", [("max.connections", 0, "-1")]),
        ("2", [("max.connections", 0, "-1")]),  # the broker id is checked first
    ],
)
def test_broker_resource_errors_are_the_brokers(
    start: Start, kafka_broker: Any, resource: str, configs: list[tuple[str, int, str | None]]
) -> None:
    from kafka.protocol.admin import IncrementalAlterConfigsRequest as I

    from base.admin.client import KafkaWire
    from broker.config import NODE_ID

    h = start(**{"node.id": str(NODE_ID)})
    request = I.AlterConfigsResource(
        resource_type=4,
        resource_name=resource,
        configs=[
            I.AlterConfigsResource.AlterableConfig(name=k, config_operation=op, value=v)
            for k, op, v in configs
        ],
    )
    answers = []
    for boot in (bootstrap(h.address("CLIENT")), kafka_broker.bootstrap):
        with KafkaWire(boot) as wire:
            resp = wire.request(I[wire.version_for(I)](resources=[request], validate_only=False))
        answers.append([(r.error_code, r.error_message) for r in resp.responses])
    assert answers[0] == answers[1]
    assert answers[0][0][0] != 0
    assert h.acceptor.quota_cfg.max_connections == 2147483647


def test_the_seeded_fault_forgets_the_kept_quotas_on_restart(start: Start, tmp_path: Path) -> None:
    from base.quota.faults import FAULT_KEY

    state = str(tmp_path / "state-fault")
    h = start(**{"state.dir": state})
    alter_ip_quota(bootstrap(h.address("CLIENT")), None, 2)
    h.stop()
    kept = start(**{"state.dir": state})
    assert describe_ip_quotas(bootstrap(kept.address("CLIENT"))) == {"default": 2.0}
    kept.stop()
    forgot = start(**{"state.dir": state, FAULT_KEY: "state_not_restored"})
    assert describe_ip_quotas(bootstrap(forgot.address("CLIENT"))) == {}


def test_two_fronts_of_a_cluster_share_quota_changes_as_kafka_brokers_do(
    start: Start, tmp_path: Path
) -> None:
    """Two acceptors sharing `state.dir` are two fronts of one cluster (docs/clusters.md):
    an IP quota and a cluster-default config sent to front 1 reach front 2 (its
    DescribeClientQuotas answers the same, its own `config` row testifies), a per-broker
    config only its own broker's front takes and applies."""
    state = str(tmp_path / "shared-state")
    one = start(**{"state.dir": state, "node.id": "1"})
    two = start(**{"state.dir": state, "node.id": "2"})
    b1, b2 = bootstrap(one.address("CLIENT")), bootstrap(two.address("CLIENT"))
    alter_ip_quota(b1, "127.0.0.2", 1)
    alter_broker_config(b1, {"max.connections.per.ip": "4"})
    assert wait_until(lambda: describe_ip_quotas(b2) == {"127.0.0.2": 1.0}, 5)
    assert wait_until(lambda: two.acceptor.quota_cfg.max_connections_per_ip == 4, 5)
    rows = [r for r in history(two, "harness") if r["event"] == "config"]
    assert any(json.loads(r["detail"])["cause"] == "metadata_log" for r in rows), rows
    with pytest.raises(AdminError, match="Unexpected broker id"):
        alter_broker_config(b1, {"max.connections.per.ip": "3"}, broker="2")
    alter_broker_config(b2, {"max.connections.per.ip": "3"}, broker="2")
    assert two.acceptor.quota_cfg.max_connections_per_ip == 3
    alter_ip_quota(b2, "127.0.0.3", 2)  # a later change: front 1 has read broker 2's too
    assert wait_until(lambda: describe_ip_quotas(b1) == {"127.0.0.2": 1.0, "127.0.0.3": 2.0}, 5)
    assert one.acceptor.quota_cfg.max_connections_per_ip == 4  # broker 2's own stays there
