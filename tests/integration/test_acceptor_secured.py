"""The acceptor in front of a real secured Kafka broker: TLS passed through untouched, and
SASL_PLAINTEXT logins read in passing for the principal requests are charged to.

One broker for the module with a TLS listener and a SASL_PLAINTEXT one (SCRAM-SHA-256 and
PLAIN), each advertising the acceptor's port, so kafka-python clients that follow metadata
stay behind the front. The clients are kafka-python (the same library the steady profile
runs) configured from the broker's own `client.properties`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("cryptography", reason="the cryptography package makes the certificates")

from kafka import KafkaProducer

from acceptor import AcceptorHandle, start_in_thread
from acceptor.testing import history_rows, wait_until
from base.admin.client import AdminError, KafkaWire, alter_client_quota
from base.history.rows import AcceptorRequest, ClientRequestOk
from base.localnet import free_port
from base.security import clientprops
from base.security.certs import CLIENT_PRINCIPAL
from broker.local import LocalBroker, start_local

pytestmark = pytest.mark.integration

SASL_AUTHENTICATE, SASL_HANDSHAKE = 36, 17


@pytest.fixture(scope="module")
def fronted(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[LocalBroker, dict[str, int]]]:
    ports = {n: free_port() for n in ("TLS", "SASLP", "MTLS", "SASLS")}
    broker = start_local(
        listeners=(
            "PLAINTEXT",
            "TLS=SSL",
            "SASLP=SASL_PLAINTEXT:SCRAM-SHA-256,PLAIN",
            "MTLS=SSL:mtls",
            "SASLS=SASL_SSL:SCRAM-SHA-512",
        ),
        advertised={n: f"127.0.0.1:{p}" for n, p in ports.items()},
        workdir=tmp_path_factory.mktemp("acceptor-secured") / "broker",
        ready_timeout_s=180,
        progress=lambda _msg: None,
        metrics=False,
    )
    try:
        yield broker, ports
    finally:
        broker.stop()


@pytest.fixture
def acceptor(
    fronted: tuple[LocalBroker, dict[str, int]], tmp_path: Path
) -> Iterator[Callable[..., AcceptorHandle]]:
    broker, ports = fronted
    handles: list[AcceptorHandle] = []
    files = broker.security_files
    assert files is not None

    def _start(**props: str) -> AcceptorHandle:
        base = {
            "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
            "listener.security.protocol.map": (
                "TLS:SSL,SASLP:SASL_PLAINTEXT,MTLS:SSL,SASLS:SASL_SSL"
            ),
            **{
                f"listener.name.{n.lower()}.upstream": f"127.0.0.1:{broker.listener_ports[n]}"
                for n in ports
            },
            # MTLS and SASLS: TLS ends at the acceptor (its own certificate, the run's CA)
            **{
                f"listener.name.{n}.{k}": v
                for n in ("mtls", "sasls")
                for k, v in (
                    ("tls.mode", "terminate"),
                    ("ssl.keystore.location", str(files.acceptor_keystore)),
                    ("ssl.truststore.location", str(files.ca)),
                )
            },
            "listener.name.mtls.ssl.client.auth": "required",
            "listener.name.mtls.upstream.ssl.keystore.location": str(files.client_keystore),
            "metrics.port": "0",
            **props,
        }
        h = start_in_thread(base, history_dir=tmp_path / "history", run_id="secured")
        handles.append(h)
        return h

    yield _start
    for h in handles:
        h.stop()


def _config(broker: LocalBroker, key: str) -> dict[str, str]:
    return clientprops.read(broker.client_configs[key])


def _produce(broker: LocalBroker, key: str, n: int, client_id: str) -> None:
    config = clientprops.kafka_python_config(_config(broker, key))
    producer = KafkaProducer(
        **config,
        client_id=client_id,
        acks=1,
        request_timeout_ms=15000,
    )
    try:
        for i in range(n):
            producer.send("secured", f"m{i}".encode()).get(timeout=30)
    finally:
        producer.close(timeout=10)


def test_tls_passes_through_untouched(
    fronted: tuple[LocalBroker, dict[str, int]], acceptor: Callable[..., AcceptorHandle]
) -> None:
    broker, _ports = fronted
    h = acceptor()
    _produce(broker, "TLS", 5, "tls-producer")  # handshakes with the broker, through us
    closes: list[dict[str, Any]] = []

    def all_closed() -> bool:
        closes[:] = [r for r in history_rows(h, "close") if r["listener"] == "TLS"]
        return len(closes) >= 2 and len(closes) == len(
            [r for r in history_rows(h, "register") if r["listener"] == "TLS"]
        )

    wait_until(all_closed, 20)
    assert all(r["bytes"] > 0 for r in closes)  # TLS records both ways
    assert [r for r in history_rows(h, "request") if r["listener"] == "TLS"] == []
    assert all(json.loads(r["detail"])["requests"] == 0 for r in closes)  # no frame read


def test_sasl_login_names_the_principal_and_is_not_charged(
    fronted: tuple[LocalBroker, dict[str, int]], acceptor: Callable[..., AcceptorHandle]
) -> None:
    broker, _ports = fronted
    h = acceptor()
    _produce(broker, "SASLP", 3, "alice-producer")  # SCRAM-SHA-256 as alice

    def rows() -> list[dict[str, Any]]:
        return [r for r in history_rows(h, "request") if r["listener"] == "SASLP"]

    wait_until(lambda: any(r["api_key"] == 0 for r in rows()), 20)
    login = [r for r in rows() if r["api_key"] in (SASL_HANDSHAKE, SASL_AUTHENTICATE)]
    assert login and all(json.loads(r["detail"])["charge_source"] == "login" for r in login)
    produce = [r for r in rows() if r["api_key"] == 0]
    assert produce and {r["principal"] for r in produce} == {"alice"}
    assert all(
        not r["detail"] or AcceptorRequest.parse(r["detail"]).get("charge_source") != "login"
        for r in produce
    )


def test_per_user_request_quota_throttles_only_that_user(
    fronted: tuple[LocalBroker, dict[str, int]], acceptor: Callable[..., AcceptorHandle]
) -> None:
    broker, ports = fronted
    h = acceptor()
    bootstrap = f"127.0.0.1:{ports['SASLP']}"
    # set through the acceptor (it answers AlterClientQuotas), logged in as alice
    alter_client_quota(
        bootstrap,
        {"user": "alice"},
        {"request_percentage": 0.01},
        client_config=_config(broker, "SASLP"),
    )
    _produce(broker, "SASLP", 20, "alice-producer")
    _produce(broker, "SASLP@bob", 20, "bob-producer")
    throttles = history_rows(h, "request_throttle")
    assert throttles, "alice's requests were never throttled"
    buckets = {json.loads(r["detail"])["bucket"]["user"] for r in throttles}
    assert buckets == {"alice"} and {r["principal"] for r in throttles} == {"alice"}


def test_a_wrong_password_is_the_brokers_refusal(
    fronted: tuple[LocalBroker, dict[str, int]], acceptor: Callable[..., AcceptorHandle]
) -> None:
    broker, ports = fronted
    h = acceptor()
    bad = dict(_config(broker, "SASLP"))
    jaas = bad["sasl.jaas.config"]
    start = jaas.index('password="') + len('password="')
    bad["sasl.jaas.config"] = jaas[:start] + "wrong" + jaas[jaas.index('"', start) :]
    t0 = time.monotonic()
    with pytest.raises(AdminError):
        KafkaWire(f"127.0.0.1:{ports['SASLP']}", client_config=bad).close()
    assert time.monotonic() - t0 < 15
    wait_until(lambda: any(r["listener"] == "SASLP" for r in history_rows(h, "close")), 20)
    auth = [r for r in history_rows(h, "request") if r["api_key"] == SASL_AUTHENTICATE]
    assert auth and {r["principal"] for r in auth} == {"ANONYMOUS"}  # never logged in


def test_terminated_mutual_tls_charges_the_certificate_principal(
    fronted: tuple[LocalBroker, dict[str, int]], acceptor: Callable[..., AcceptorHandle]
) -> None:
    """TLS ends at the acceptor: the client's certificate names the principal as Kafka
    maps it (RDNs reversed), every request is read and charged to it."""
    broker, _ports = fronted
    h = acceptor()
    _produce(broker, "MTLS", 3, "mtls-producer")
    wait_until(lambda: any(r["api_key"] == 0 for r in history_rows(h, "request")), 20)
    produce = [r for r in history_rows(h, "request") if r["listener"] == "MTLS"]
    assert produce and {r["principal"] for r in produce} == {CLIENT_PRINCIPAL}


def test_terminated_sasl_ssl_reads_the_login(
    fronted: tuple[LocalBroker, dict[str, int]], acceptor: Callable[..., AcceptorHandle]
) -> None:
    broker, _ports = fronted
    h = acceptor()
    _produce(broker, "SASLS", 3, "sasls-producer")
    wait_until(lambda: any(r["api_key"] == 0 for r in history_rows(h, "request")), 20)
    rows = [r for r in history_rows(h, "request") if r["listener"] == "SASLS"]
    assert {r["principal"] for r in rows if r["api_key"] == 0} == {"alice"}
    login = [r for r in rows if r["api_key"] in (SASL_HANDSHAKE, SASL_AUTHENTICATE)]
    assert login and all(json.loads(r["detail"])["charge_source"] == "login" for r in login)


def test_a_client_that_does_not_trust_the_front_fails_its_handshake(
    fronted: tuple[LocalBroker, dict[str, int]], acceptor: Callable[..., AcceptorHandle]
) -> None:
    """A client without a certificate on the mutual-TLS listener: the acceptor's handshake
    refuses it, the close row says so, and the broker never sees it."""
    import socket
    import ssl

    _broker, ports = fronted
    h = acceptor()
    files = _broker.security_files
    assert files is not None
    ctx = ssl.create_default_context(cafile=str(files.ca))
    got: bytes | Exception
    with socket.create_connection(("127.0.0.1", ports["MTLS"]), timeout=10) as raw:
        try:  # TLS 1.3: the refusal of the certificate comes after the client's finish
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                tls.sendall(b"\0\0\0\0")
                got = tls.recv(10)
        except (ssl.SSLError, ConnectionError) as exc:
            got = exc
    assert got == b"" or isinstance(got, Exception)  # refused, never answered
    wait_until(
        lambda: any(
            r["listener"] == "MTLS" and r["reason"] == "tls_handshake_failed"
            for r in history_rows(h, "close")
        ),
        20,
    )


@pytest.mark.parametrize("fault", ["", "tls_before_quota"])
def test_a_quota_closes_before_any_tls_byte(
    fronted: tuple[LocalBroker, dict[str, int]],
    acceptor: Callable[..., AcceptorHandle],
    fault: str,
) -> None:
    """On a listener the acceptor terminates, an IP-throttled connection is closed without
    its handshake ever completing (Kafka decides on its acceptor thread, before TLS); the
    seeded fault `tls_before_quota` handshakes first, and the client sees it finish."""
    import socket
    import ssl

    from base.admin.client import alter_ip_quota

    broker, ports = fronted
    files = broker.security_files
    assert files is not None
    h = acceptor(**({"harness.test.fault": fault} if fault else {}))
    alter_ip_quota(
        f"127.0.0.1:{ports['SASLP']}", "127.0.0.7", 1.0, client_config=_config(broker, "SASLP")
    )
    ctx = ssl.create_default_context(cafile=str(files.ca))

    def handshake(_: int) -> bool:
        raw = socket.create_connection(
            ("127.0.0.1", ports["SASLS"]), timeout=5, source_address=("127.0.0.7", 0)
        )
        try:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1"):
                return True
        except (ssl.SSLError, ConnectionError, TimeoutError):
            return False
        finally:
            raw.close()

    # 20 at once from one address, against 1 a second: about half are throttled and closed
    with ThreadPoolExecutor(20) as pool:
        finished = sum(pool.map(handshake, range(20)))
    wait_until(lambda: len(history_rows(h, "throttle_close")) >= 2, 20)
    admitted = len([r for r in history_rows(h, "admit") if r["client_ip"] == "127.0.0.7"])
    assert admitted >= 1
    if fault:
        assert finished > admitted  # throttled connections finished TLS: caught by the check
    else:
        assert finished == admitted


def test_the_greedy_profile_logs_in_and_is_muted_as_its_user(
    fronted: tuple[LocalBroker, dict[str, int]],
    acceptor: Callable[..., AcceptorHandle],
    tmp_path: Path,
) -> None:
    """greedy on SASL_PLAINTEXT through the acceptor: it logs in (SCRAM, as alice) with the
    listener's client keys, pipelines, and alice's request quota throttles and mutes it."""
    from base.history import read_history
    from loadprofiles.launch import locust_command, run

    broker, ports = fronted
    h = acceptor()
    bootstrap = f"127.0.0.1:{ports['SASLP']}"
    alter_client_quota(
        bootstrap, {"user": "alice"}, {"request_percentage": 0.01},
        client_config=_config(broker, "SASLP"),
    )  # fmt: skip
    argv = locust_command(
        "greedy", host=bootstrap, run_time_s=6, run_dir=tmp_path / "load", users=1,
        options={"command_config": str(broker.client_configs["SASLP"]), "greedy_hold_s": 3},
    )  # fmt: skip
    done = run(argv, timeout_s=60)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    rows = read_history(tmp_path / "load", "client").to_pylist()
    logins = [r for r in rows if r["event"] == "sasl_done"]
    assert logins and all(json.loads(r["detail"])["principal"] == "alice" for r in logins)
    throttled = [
        r for r in rows
        if r["event"] == "request_ok" and ClientRequestOk.parse(r["detail"]).get("throttle_time_ms")
    ]  # fmt: skip
    assert throttled, "alice's greedy requests were never throttled"
    mutes = [r for r in history_rows(h, "request_throttle") if r["principal"] == "alice"]
    assert mutes
