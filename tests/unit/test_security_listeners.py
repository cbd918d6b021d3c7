"""Secured listeners: the --listener syntax, the broker keys they render (the reference's traps),
the client.properties written for each, and their mapping onto kafka-python."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from base.security import clientprops
from base.security.sasl import SaslUser
from broker.cli import configure, listener_specs
from broker.config import (
    SECURE_LISTENERS,
    ListenerPlan,
    ListenerSpec,
    check_secured_plan,
    parse_listener,
    scram_mechanisms,
    security_properties,
    server_properties,
)
from broker.errors import BrokerError

pytestmark = pytest.mark.unit

USERS = (SaslUser("alice", "pw-alice-xyz"), SaslUser("bob", "pw-bob-xyz"))
KEYSTORES = {"good": "/p/broker.pem", "expired": "/p/exp.pem", "wrong-host": "/p/wh.pem"}


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("client", ListenerSpec("CLIENT")),
        ("PLAINTEXT", ListenerSpec("PLAINTEXT")),
        ("SSL=SSL", ListenerSpec("SSL", "SSL")),
        ("mtls=ssl:mtls", ListenerSpec("MTLS", "SSL", client_auth="required")),
        ("S=SSL:mtls=requested", ListenerSpec("S", "SSL", client_auth="requested")),
        ("BAD=SSL:cert=expired", ListenerSpec("BAD", "SSL", cert="expired")),
        (
            "SASL=SASL_SSL:SCRAM-SHA-512,plain",
            ListenerSpec("SASL", "SASL_SSL", ("SCRAM-SHA-512", "PLAIN")),
        ),
        ("P=SASL_PLAINTEXT:PLAIN", ListenerSpec("P", "SASL_PLAINTEXT", ("PLAIN",))),
    ],
)
def test_parse_listener(text: str, spec: ListenerSpec) -> None:
    assert parse_listener(text) == spec
    assert parse_listener(str(spec)) == spec  # str() is the same syntax


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("X=TLS", "protocol 'TLS'"),
        ("X=SASL_SSL", "needs a mechanism"),
        ("X=SSL:PLAIN", "SASL mechanism PLAIN on a SSL listener"),
        ("X=SASL_SSL:GSSAPI", "unknown option 'GSSAPI'"),
        ("X=SSL:mtls=maybe", "mtls='maybe'"),
        ("X=SASL_PLAINTEXT:PLAIN,mtls", "need SSL or SASL_SSL"),
        ("X=SSL:cert=old", "cert='old'"),
        ("1X=SSL", "not a valid listener name"),
    ],
)
def test_bad_listener_specs_say_why(text: str, message: str) -> None:
    with pytest.raises(BrokerError, match=message.replace("(", r"\(")):
        parse_listener(text)


def test_secured_plan_keeps_plaintext_first_and_inter_broker() -> None:
    specs = [parse_listener(t) for t in SECURE_LISTENERS]
    check_secured_plan(specs, "PLAINTEXT")
    with pytest.raises(BrokerError, match="must be PLAINTEXT"):
        check_secured_plan(specs[1:], "SASL_SSL")
    with pytest.raises(BrokerError, match="inter-broker listener must be PLAINTEXT"):
        check_secured_plan(specs, "SSL")
    check_secured_plan([parse_listener("A"), parse_listener("B")], "B")  # all PLAINTEXT: as before


def test_security_properties_are_listener_prefixed() -> None:
    specs = [
        parse_listener("SSL=SSL"),
        parse_listener("MTLS=SSL:mtls"),
        parse_listener("SASL_SSL=SASL_SSL:SCRAM-SHA-512,PLAIN"),
        parse_listener("SASLP=SASL_PLAINTEXT:SCRAM-SHA-256"),
        parse_listener("BAD=SSL:cert=wrong-host"),
    ]
    props = security_properties(specs, users=USERS, truststore="/p/ca.pem", keystores=KEYSTORES)
    # Nothing unprefixed: a broker-level sasl.jaas.config is ignored, and on SASL_SSL only the
    # listener-prefixed ssl.client.auth is honoured.
    assert all(k.startswith("listener.name.") for k in props)
    assert props["listener.name.ssl.ssl.keystore.type"] == "PEM"
    assert props["listener.name.ssl.ssl.keystore.location"] == "/p/broker.pem"
    assert props["listener.name.ssl.ssl.client.auth"] == "none"
    assert props["listener.name.mtls.ssl.client.auth"] == "required"
    assert props["listener.name.mtls.ssl.truststore.location"] == "/p/ca.pem"
    assert props["listener.name.sasl_ssl.ssl.client.auth"] == "none"
    assert props["listener.name.sasl_ssl.sasl.enabled.mechanisms"] == "SCRAM-SHA-512,PLAIN"
    assert props["listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"].endswith(
        "ScramLoginModule required;"
    )
    plain = props["listener.name.sasl_ssl.plain.sasl.jaas.config"]
    assert 'user_alice="pw-alice-xyz"' in plain and 'user_bob="pw-bob-xyz"' in plain
    assert props["listener.name.saslp.sasl.enabled.mechanisms"] == "SCRAM-SHA-256"
    assert not any(k.startswith("listener.name.saslp.ssl.") for k in props)
    assert props["listener.name.bad.ssl.keystore.location"] == "/p/wh.pem"
    assert scram_mechanisms(specs) == ("SCRAM-SHA-256", "SCRAM-SHA-512")


def test_protocol_map_lists_each_listener_protocol_and_the_controller() -> None:
    specs = {s.name: s for s in map(parse_listener, SECURE_LISTENERS)}
    plan = ListenerPlan(
        names=tuple(specs),
        ports={"PLAINTEXT": 1, "SASL_SSL": 2, "SSL": 3},
        controller_port=4,
        inter_broker_listener="PLAINTEXT",
        specs=specs,
    )
    props = server_properties(plan, "/d")
    assert props["listener.security.protocol.map"] == (
        "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL,CONTROLLER:PLAINTEXT"
    )
    assert props["inter.broker.listener.name"] == "PLAINTEXT"
    assert [s.name for s in plan.secured] == ["SASL_SSL", "SSL"]


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    configure(parser)
    return parser.parse_args(list(argv))


def test_cli_secure_flag_is_the_three_listener_broker() -> None:
    assert listener_specs(_args("--secure")) == SECURE_LISTENERS
    assert SECURE_LISTENERS == (
        "PLAINTEXT",
        "SASL_SSL=SASL_SSL:SCRAM-SHA-512",
        "SSL=SSL:mtls=requested",
    )
    assert listener_specs(_args("--secure", "--listener", "P=SASL_PLAINTEXT:PLAIN"))[-1] == (
        "P=SASL_PLAINTEXT:PLAIN"
    )
    assert listener_specs(_args()) == ("PLAINTEXT",)


def test_cli_refuses_secured_listeners_it_cannot_serve(capsys: pytest.CaptureFixture[str]) -> None:
    from broker.cli import run

    assert run(_args("--secure", "--bootstrap-server", "127.0.0.1:9")) == 2
    assert "existing cluster" in capsys.readouterr().err
    assert run(_args("--sasl-user", "carol")) == 2
    assert "needs a SASL listener" in capsys.readouterr().err
    assert run(_args("--listener", "X=SASL_SSL")) == 2
    assert "needs a mechanism" in capsys.readouterr().err


def test_client_properties_round_trip_into_kafka_python(tmp_path: Path) -> None:
    props = clientprops.client_properties(
        "SASL_SSL",
        bootstrap="127.0.0.1:9093",
        mechanism="SCRAM-SHA-512",
        user=USERS[0],
        truststore=tmp_path / "ca.pem",
    )
    path = tmp_path / "client.properties"
    path.write_text(clientprops.render(props, "header\nsecond line"))
    read = clientprops.read(path)
    assert read == props
    assert read["ssl.truststore.type"] == "PEM" and "ssl.keystore.location" not in read
    cfg = clientprops.kafka_python_config(read)
    assert cfg == {
        "security_protocol": "SASL_SSL",
        "bootstrap_servers": ["127.0.0.1:9093"],
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "alice",
        "sasl_plain_password": "pw-alice-xyz",
        "ssl_cafile": str(tmp_path / "ca.pem"),
        "ssl_check_hostname": True,
    }


def test_mutual_tls_client_properties_carry_the_pem_keystore(tmp_path: Path) -> None:
    props = clientprops.client_properties(
        "SSL", truststore=tmp_path / "ca.pem", keystore=tmp_path / "client.pem"
    )
    assert props["ssl.keystore.type"] == "PEM"
    cfg = clientprops.kafka_python_config(props)
    assert cfg["ssl_certfile"] == cfg["ssl_keyfile"] == str(tmp_path / "client.pem")
    assert "sasl_mechanism" not in cfg


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"security.protocol": "SSL", "ssl.truststore.password": "x"}, "not supported"),
        ({"security.protocol": "SSL", "ssl.truststore.type": "JKS"}, "only PEM"),
        ({"security.protocol": "SASL_SSL"}, "needs sasl.mechanism"),
        ({"security.protocol": "TLS"}, "expected one of"),
        (
            {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "GSSAPI",
             "sasl.jaas.config": 'x required username="a" password="b";'},
            "GSSAPI",
        ),
        ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "x"}, "https"),
    ],
)  # fmt: skip
def test_client_config_keys_the_harness_cannot_honour_are_named(
    props: dict[str, str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        clientprops.kafka_python_config(props)


def test_empty_endpoint_identification_turns_hostname_checks_off() -> None:
    cfg = clientprops.kafka_python_config(
        {"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": ""}
    )
    assert cfg["ssl_check_hostname"] is False


def test_properties_parser_handles_comments_colons_and_continuations() -> None:
    text = "# c\n! c2\na = 1\nb: 2\nc=x\\\n  y\nd=C:\\\\path\n"
    assert clientprops.parse(text) == {"a": "1", "b": "2", "c": "xy", "d": "C:\\path"}


def test_cli_bad_sasl_user_names_are_a_clear_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from broker.cli import run

    args = _args(
        "--secure", "--launcher", "local", "--sasl-user", "a,b", "--workdir", str(tmp_path / "wd")
    )
    assert run(args) == 1
    err = capsys.readouterr().err
    assert "config security: SASL user 'a,b'" in err and "Traceback" not in err
    assert not (tmp_path / "wd").exists()  # refused before anything was made
