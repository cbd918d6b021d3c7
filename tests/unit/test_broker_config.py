"""server.properties for the single-node KRaft broker: the wiring the launcher owns."""

from __future__ import annotations

import re

import pytest

from broker.config import (
    CONTROLLER_LISTENER,
    DEFAULTS,
    ListenerPlan,
    normalise_listeners,
    parse_advertised_listeners,
    parse_host_port,
    render_properties,
    server_properties,
)
from broker.errors import BrokerError


def _plan(**kw: object) -> ListenerPlan:
    base: dict[str, object] = {
        "names": ("CLIENT", "INTERNAL"),
        "ports": {"CLIENT": 1111, "INTERNAL": 2222},
        "controller_port": 3333,
        "advertised": {},
        "inter_broker_listener": "INTERNAL",
    }
    base.update(kw)
    return ListenerPlan(**base)  # type: ignore[arg-type]


def _split(value: str) -> dict[str, str]:
    return dict(item.split("://", 1) for item in value.split(","))


def test_listeners_include_the_internal_controller_on_loopback() -> None:
    props = server_properties(_plan(), "/data")
    assert _split(props["listeners"]) == {
        "CLIENT": "127.0.0.1:1111",
        "INTERNAL": "127.0.0.1:2222",
        CONTROLLER_LISTENER: "127.0.0.1:3333",
    }
    assert props["controller.listener.names"] == CONTROLLER_LISTENER
    assert props["controller.quorum.voters"] == "1@127.0.0.1:3333"
    assert props["process.roles"] == "broker,controller"
    assert props["log.dirs"] == "/data"


def test_every_listener_maps_to_plaintext() -> None:
    props = server_properties(_plan(), "/data")
    mapping = dict(item.split(":") for item in props["listener.security.protocol.map"].split(","))
    assert mapping == {"CLIENT": "PLAINTEXT", "INTERNAL": "PLAINTEXT", "CONTROLLER": "PLAINTEXT"}


def test_advertised_never_lists_the_controller_and_defaults_to_the_real_port() -> None:
    props = server_properties(_plan(advertised={"CLIENT": "127.0.0.1:19092"}), "/data")
    advertised = _split(props["advertised.listeners"])
    assert advertised == {"CLIENT": "127.0.0.1:19092", "INTERNAL": "127.0.0.1:2222"}
    assert props["inter.broker.listener.name"] == "INTERNAL"


def test_caller_properties_override_defaults_but_not_the_wiring() -> None:
    props = server_properties(_plan(), "/d", {"max.connections.per.ip": "7", "num.partitions": "3"})
    assert props["max.connections.per.ip"] == "7"
    assert props["num.partitions"] == "3"
    assert DEFAULTS["num.partitions"] == "1"
    with pytest.raises(BrokerError, match=r"config listeners='x'"):
        server_properties(_plan(), "/d", {"listeners": "x"})


def test_fast_test_defaults_are_present() -> None:
    props = server_properties(_plan(), "/d")
    assert props["offsets.topic.replication.factor"] == "1"
    assert props["transaction.state.log.replication.factor"] == "1"
    assert props["min.insync.replicas"] == "1"
    assert props["group.initial.rebalance.delay.ms"] == "0"
    assert props["auto.create.topics.enable"] == "true"


def test_normalise_defaults_inter_broker_to_first_listener_and_uppercases() -> None:
    names, adv, inter = normalise_listeners(["client", "internal"], None, None, {})
    assert names == ("CLIENT", "INTERNAL")
    assert adv == {}
    assert inter == "CLIENT"


def test_normalise_folds_advertised_listeners_property_in() -> None:
    _, adv, inter = normalise_listeners(
        ["CLIENT", "INTERNAL"],
        {"INTERNAL": "127.0.0.1:9"},
        None,
        {
            "advertised.listeners": "CLIENT://127.0.0.2:19092",
            "inter.broker.listener.name": "INTERNAL",
        },
    )
    assert adv == {"CLIENT": "127.0.0.2:19092", "INTERNAL": "127.0.0.1:9"}
    assert inter == "INTERNAL"


@pytest.mark.parametrize(
    ("listeners", "advertised", "inter", "props", "message"),
    [
        ([], None, None, {}, "at least one"),
        (["CONTROLLER"], None, None, {}, "internal KRaft controller"),
        (["A", "a"], None, None, {}, "unique"),
        (["A B"], None, None, {}, "not a valid listener name"),
        (["A"], {"B": "127.0.0.1:1"}, None, {}, "not one of the listeners"),
        (["A"], {"CONTROLLER": "127.0.0.1:1"}, None, {}, "controller listener"),
        (["A"], {"A": "nohost"}, None, {}, "host:port"),
        (["A"], {"A": "h:70000"}, None, {}, "host:port"),
        (["A"], None, "B", {}, "inter.broker.listener.name='B'"),
        (["A"], None, None, {"node.id": "2"}, "config node.id='2'"),
        (["A"], None, None, {"advertised.listeners": "garbage"}, "NAME://host:port"),
    ],
)
def test_bad_listener_requests_are_refused_with_the_reason(
    listeners: list[str],
    advertised: dict[str, str] | None,
    inter: str | None,
    props: dict[str, str],
    message: str,
) -> None:
    with pytest.raises(BrokerError, match=message):
        normalise_listeners(listeners, advertised, inter, props)


def test_parse_host_port_and_advertised() -> None:
    assert parse_host_port("127.0.0.1:9092", key="k") == ("127.0.0.1", 9092)
    assert parse_host_port("[::1]:9092", key="k") == ("::1", 9092)
    assert parse_advertised_listeners("a://h:1, B://h:2") == {"A": "h:1", "B": "h:2"}


def test_render_properties_is_sorted_and_escapes_backslashes() -> None:
    text = render_properties({"b": "2", "a": "x\\y"})
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert lines == ["a=x\\\\y", "b=2"]


def test_values_with_line_breaks_are_refused() -> None:
    with pytest.raises(BrokerError, match="line breaks"):
        server_properties(_plan(), "/d", {"x": "1\nlisteners=evil"})


def test_the_probe_asks_metadata_at_a_version_the_broker_knows() -> None:
    from broker.probe import metadata_request

    assert metadata_request({3: (0, 13)}).API_VERSION == 12  # ours at most
    assert metadata_request({3: (0, 11)}).API_VERSION == 11  # Kafka 2.8: v12 closes the socket
    assert metadata_request({3: (0, 2)}).API_VERSION == 2  # before allow_auto_topic_creation


def test_zookeeper_mode_wires_a_broker_id_and_no_controller() -> None:
    from broker.config import ListenerPlan, server_properties

    plan = ListenerPlan(names=("PLAINTEXT",), ports={"PLAINTEXT": 9092}, controller_port=2181,
                        zookeeper="127.0.0.1:2181")  # fmt: skip
    props = server_properties(plan, "/d")
    assert props["zookeeper.connect"] == "127.0.0.1:2181" and props["broker.id"] == "1"
    assert "process.roles" not in props and "controller.quorum.voters" not in props
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9092"
    assert props["zookeeper.session.timeout.ms"] == "3000"


def test_a_listen_host_moves_the_client_listeners_there_and_the_controller_stays() -> None:
    props = server_properties(_plan(host="198.18.3.1", advertised={"INTERNAL": "x:1"}), "/d")
    assert _split(props["listeners"]) == {
        "CLIENT": "198.18.3.1:1111",
        "INTERNAL": "198.18.3.1:2222",
        CONTROLLER_LISTENER: "127.0.0.1:3333",
    }
    # advertised where it listens, unless advertised elsewhere
    assert _split(props["advertised.listeners"]) == {"CLIENT": "198.18.3.1:1111", "INTERNAL": "x:1"}
    assert props["controller.quorum.voters"] == "1@127.0.0.1:3333"
    zk = server_properties(_plan(host="198.18.3.1", zookeeper="127.0.0.1:3333"), "/d")
    assert _split(zk["listeners"]) == {"CLIENT": "198.18.3.1:1111", "INTERNAL": "198.18.3.1:2222"}
    assert zk["zookeeper.connect"] == "127.0.0.1:3333"


@pytest.mark.parametrize(
    ("host", "listeners", "reason"),
    [
        ("bridge", ("PLAINTEXT",), "expected an IPv4 address of this machine"),
        ("::1", ("PLAINTEXT",), "expected an IPv4 address of this machine"),
        ("198.18.3.1", ("PLAINTEXT", "SSL=SSL"), "certificates name 127.0.0.1 only"),
    ],
)
def test_a_listen_host_is_checked_naming_it_and_why(
    host: str, listeners: tuple[str, ...], reason: str
) -> None:
    from broker.config import check_listen_host, parse_listener

    with pytest.raises(
        BrokerError, match=f"listen_host={re.escape(repr(host))}.*{re.escape(reason)}"
    ):
        check_listen_host(host, [parse_listener(t) for t in listeners])
    assert check_listen_host("198.18.3.1", [parse_listener("PLAINTEXT")]) == "198.18.3.1"
    assert check_listen_host("127.0.0.1", [parse_listener(t) for t in listeners[1:]]) == "127.0.0.1"


def test_an_existing_cluster_takes_no_listen_host() -> None:
    from broker import start_broker

    with pytest.raises(BrokerError, match=r"listen_host=.198\.18\.3\.1. with bootstrap_server"):
        start_broker(bootstrap_server="127.0.0.1:9", listen_host="198.18.3.1")
