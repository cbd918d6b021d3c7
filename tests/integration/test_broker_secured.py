"""A real Kafka broker with secured listeners, started once for the module by `harness broker`.

One broker serves every case: `--secure`'s three listeners (PLAINTEXT inter-broker and probe,
SASL_SSL with SCRAM-SHA-512, SSL with a client certificate requested), then SSL server-only,
SSL with mutual TLS, SASL_SSL (SCRAM-SHA-256, PLAIN), SASL_PLAINTEXT (PLAIN, SCRAM-SHA-256),
and two SSL listeners serving bad certificates (expired, wrong host). Clients
connect with kafka-python from the client.properties the broker's startup lines name, and with
raw `ssl` sockets where the TLS failure itself is the point. The passwords must never show in
the printed output, broker.log or any file outside the private folder; the last test stops the
broker and checks the private folder is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import ssl
import stat
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("cryptography", reason="the cryptography package makes the certificates")

from kafka import KafkaAdminClient
from kafka.errors import KafkaError
from kafka.net.compat import KafkaNetClient

from base.security import clientprops
from base.security.secrets import MASK, leaks
from broker import Broker, run_tool
from broker.local import LocalBroker

pytestmark = pytest.mark.integration

#: Beside `--secure`'s PLAINTEXT, SASL_SSL (SCRAM-SHA-512) and SSL (client certificate
#: requested): the other protocols, mechanisms and certificates.
EXTRA_LISTENERS = (
    "TLS=SSL",
    "MTLS=SSL:mtls",
    "SASL2=SASL_SSL:SCRAM-SHA-256,PLAIN",
    "SASLP=SASL_PLAINTEXT:PLAIN,SCRAM-SHA-256",
    "EXPIRED=SSL:cert=expired",
    "WRONGHOST=SSL:cert=wrong-host",
)
READY_TIMEOUT_S = 180


@dataclass
class SecuredBroker:
    proc: subprocess.Popen[str]
    workdir: Path
    lines: list[str] = field(default_factory=list)
    ports: dict[str, int] = field(default_factory=dict)
    configs: dict[str, Path] = field(default_factory=dict)
    private: Path | None = None
    jvm_pid: int | None = None
    reader: threading.Thread | None = None

    def read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def output(self) -> str:
        return "\n".join(self.lines)

    def passwords(self) -> list[str]:
        assert self.private is not None
        users = clientprops.read(self.private / "users.properties")
        return list(users.values())

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)  # its own session: the JVM's group too
            rc = self.proc.wait(timeout=30)
        if self.reader is not None:
            self.reader.join(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return rc


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    workdir = tmp_path_factory.mktemp("secured") / "run"
    cmd = [sys.executable, "-m", "harness", "broker", "--launcher", "local"]
    cmd += ["--workdir", str(workdir), "--ready-timeout", str(READY_TIMEOUT_S)]
    cmd += ["--secure", "--request-log"]
    for spec in EXTRA_LISTENERS:
        cmd += ["--listener", spec]
    env = {**os.environ, "HARNESS_BROKER_METRICS": "0"}
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    broker = SecuredBroker(proc=proc, workdir=workdir)
    broker.reader = threading.Thread(target=broker.read, daemon=True)
    broker.reader.start()
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S + 30
        while not any(line.startswith("Ctrl-C to stop") for line in broker.lines):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"harness broker did not start:\n{broker.output()}", pytrace=False)
            time.sleep(0.1)
        for line in broker.lines:
            kind, _, rest = line.partition(": ")
            name, _, value = rest.partition("=")
            if kind == "listener":
                broker.ports[name] = int(value.rpartition(":")[2])
            elif kind == "client-config":
                broker.configs[name] = Path(value)
            elif line.startswith("kafka ") and ", pid " in line:
                broker.jvm_pid = int(line.rpartition(", pid ")[2].rstrip(")"))
            elif kind == "private":
                broker.private = Path(rest.split(" ", 1)[0])
        yield broker
    finally:
        broker.stop()


@contextlib.contextmanager
def _admin(config: dict[str, Any], timeout_ms: int = 20000) -> Iterator[KafkaAdminClient]:
    """A bootstrapped admin client, closed on leaving.

    kafka-python 3.0.12 leaves its network thread running when the bootstrap in the
    constructor fails; it is stopped here through the client it was given.
    """
    made: list[KafkaNetClient] = []

    def client(**kwargs: Any) -> KafkaNetClient:
        made.append(KafkaNetClient(**kwargs))
        return made[-1]

    admin: KafkaAdminClient | None = None
    try:
        admin = KafkaAdminClient(
            **config,
            kafka_client=client,
            bootstrap_timeout_ms=timeout_ms,
            request_timeout_ms=timeout_ms,
            reconnect_backoff_ms=200,
        )
        yield admin
    finally:
        if admin is not None:
            admin.close()
        else:
            for c in made:
                c.close()
                c._manager._net.stop()


def _config(broker: SecuredBroker, key: str, **overrides: Any) -> dict[str, Any]:
    return {**clientprops.kafka_python_config(clientprops.read(broker.configs[key])), **overrides}


def test_startup_lines_name_each_listener_client_config_and_the_private_folder(
    secured: SecuredBroker,
) -> None:
    extra = {spec.partition("=")[0] for spec in EXTRA_LISTENERS}
    assert set(secured.ports) == {"PLAINTEXT", "SASL_SSL", "SSL"} | extra
    assert list(secured.ports)[:3] == ["PLAINTEXT", "SASL_SSL", "SSL"]  # --secure's, first
    assert {"SSL", "TLS", "MTLS", "SASL_SSL", "SASL2:PLAIN", "SASLP:SCRAM-SHA-256"} <= set(
        secured.configs
    )
    # a client configuration per run user on each SASL listener, none on the others
    users = {k for k in secured.configs if "@" in k}
    assert users == {f"{n}@{u}" for n in ("SASL_SSL", "SASL2", "SASLP") for u in ("alice", "bob")}
    assert secured.private == secured.workdir.resolve() / "private"
    assert stat.S_IMODE(secured.private.stat().st_mode) == 0o700
    for path in secured.private.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    for path in secured.configs.values():
        assert path.parent == secured.private
    # the SCRAM users' argument file is gone once the storage is formatted
    assert not (secured.private / "format.args").exists()
    sasl = clientprops.read(secured.configs["SASL_SSL"])
    assert sasl["security.protocol"] == "SASL_SSL"
    assert sasl["sasl.mechanism"] == "SCRAM-SHA-512"
    assert sasl["ssl.truststore.type"] == "PEM"
    assert sasl["bootstrap.servers"] == f"127.0.0.1:{secured.ports['SASL_SSL']}"
    for key in ("MTLS", "SSL"):  # client certificates required / requested: a keystore
        mtls = clientprops.read(secured.configs[key])
        assert mtls["ssl.keystore.type"] == "PEM" and "ssl.keystore.location" in mtls
    assert "ssl.keystore.location" not in clientprops.read(secured.configs["TLS"])


@pytest.mark.parametrize(
    "key",
    [
        "SSL",  # with the client certificate (requested)
        "TLS",  # server-only
        "MTLS",
        "SASL_SSL",  # SCRAM-SHA-512
        "SASL2",  # SCRAM-SHA-256
        "SASL2:PLAIN",
        "SASLP",  # PLAIN
        "SASLP:SCRAM-SHA-256",
    ],
)
def test_kafka_python_connects_over_each_secured_listener(secured: SecuredBroker, key: str) -> None:
    with _admin(_config(secured, key)) as admin:
        cluster = admin.describe_cluster()  # ApiVersions, then Metadata over the listener
    assert cluster["cluster_id"]
    assert len(cluster["brokers"]) == 1


@pytest.mark.parametrize("key", ["SSL", "MTLS", "SASL_SSL", "SASL2:PLAIN", "SASLP"])
def test_the_harness_admin_wire_and_probe_speak_each_secured_listener(
    secured: SecuredBroker, key: str
) -> None:
    """`harness run --bootstrap-server ... --command-config F`: the probe and the admin
    connection (quotas, broker configs) log in with Kafka's client keys from the file."""
    from base.admin.client import KafkaWire, alter_ip_quota, describe_ip_quotas
    from broker.probe import check_reachable

    listener = key.partition(":")[0]
    boot = f"127.0.0.1:{secured.ports[listener]}"
    props = clientprops.read(secured.configs[key])
    assert check_reachable(boot, client_config=props).brokers == 1
    with KafkaWire(boot, client_config=props) as wire:
        assert 49 in wire.versions()  # AlterClientQuotas, asked after the login
    ip = "127.0.0.77"
    alter_ip_quota(boot, ip, 3, client_config=props)
    try:
        assert describe_ip_quotas(boot, ip, client_config=props) == {ip: 3.0}
    finally:
        alter_ip_quota(boot, ip, None, client_config=props)


def test_a_wrong_password_or_ca_on_the_admin_wire_is_a_clear_error(
    secured: SecuredBroker, tmp_path: Path
) -> None:
    from base.admin.client import AdminError, KafkaWire
    from base.security.certs import make_ca
    from broker.errors import BrokerError
    from broker.probe import check_reachable

    boot = f"127.0.0.1:{secured.ports['SASL_SSL']}"
    props = clientprops.read(secured.configs["SASL_SSL"])
    wrong = "not-the-password-" + os.urandom(6).hex()
    bad = {**props, "sasl.jaas.config": props["sasl.jaas.config"].replace(
        _jaas_password(props["sasl.jaas.config"]), wrong)}  # fmt: skip
    with pytest.raises(AdminError) as info:
        KafkaWire(boot, client_config=bad)
    assert info.value.code == 58 and wrong not in str(info.value)
    other = tmp_path / "other-ca.pem"
    before_tls = len(_failed_logins(secured, "SASL_SSL", reason="SSL handshake failed"))
    other.write_bytes(make_ca("not the run's CA").cert_pem)
    with pytest.raises(BrokerError, match=r"over SASL_SSL.*TLS handshake") as err:
        check_reachable(boot, client_config={**props, "ssl.truststore.location": str(other)})
    assert all(p not in str(err.value) for p in secured.passwords())
    # The broker logs the refused handshake when it reads the client's alert, which can be
    # after the client has given up; wait for it so no later test counts it as its own.
    handshakes = _wait_failed_logins(secured, "SASL_SSL", before_tls, reason="SSL handshake failed")
    assert len(handshakes) > before_tls, "the broker did not log the refused TLS handshake"


def _jaas_password(jaas: str) -> str:
    return jaas.split('password="', 1)[1].split('"', 1)[0]


#: Kafka's reason for a refused SASL login; a refused TLS handshake says "SSL handshake failed".
LOGIN_FAILED = "(Authentication failed"


def _failed_logins(broker: SecuredBroker, listener: str, reason: str = LOGIN_FAILED) -> list[str]:
    """The broker's "Failed authentication" lines for connections to ``listener`` whose
    reason contains ``reason``."""
    text = (broker.workdir / "broker.log").read_text(errors="replace")
    channel = f"(channelId=127.0.0.1:{broker.ports[listener]}-"
    return [
        ln
        for ln in text.splitlines()
        if "Failed authentication" in ln and channel in ln and reason in ln
    ]


def _wait_failed_logins(
    broker: SecuredBroker, listener: str, more_than: int, reason: str = LOGIN_FAILED
) -> list[str]:
    """The lines once there are more than ``more_than`` (or after 10 s, whatever there are)."""
    deadline = time.monotonic() + 10
    lines = _failed_logins(broker, listener, reason)
    while len(lines) <= more_than and time.monotonic() < deadline:
        time.sleep(0.1)
        lines = _failed_logins(broker, listener, reason)
    return lines


@pytest.mark.parametrize(
    ("key", "username"),
    [
        ("SASL_SSL", None),  # SCRAM-SHA-512, wrong password
        ("SASL_SSL", "mallory"),  # SCRAM-SHA-512, unknown user
        ("SASL2:PLAIN", None),
        ("SASLP", None),  # PLAIN
        ("SASLP:SCRAM-SHA-256", None),
    ],
)
def test_wrong_password_fails_authentication(
    secured: SecuredBroker, key: str, username: str | None
) -> None:
    """kafka-python 3.0.12 sees the broker close after the failed-authentication delay (not
    the error response) and retries until its bootstrap timeout; the broker says why."""
    listener = key.partition(":")[0]
    before = len(_failed_logins(secured, listener))
    config = _config(secured, key, sasl_plain_password="not-the-password-at-all")
    if username is not None:
        config["sasl_plain_username"] = username
    with pytest.raises(KafkaError), _admin(config, timeout_ms=3000):
        pass
    lines = _wait_failed_logins(secured, listener, before)
    assert len(lines) > before, f"no failed login on {listener} in broker.log"
    assert all(
        "invalid credentials" in ln or "Invalid username or password" in ln for ln in lines[before:]
    ), lines[before:]


def _kafka_request(sock: socket.socket, key: int, version: int, corr: int, body: bytes) -> bytes:
    """One request (header v1) and its response body after the correlation id's 4 bytes."""
    client_id = b"harness-test"
    header = struct.pack(">hhih", key, version, corr, len(client_id)) + client_id
    sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} bytes")
        data += chunk
    (got,) = struct.unpack(">i", data[4:8])
    assert got == corr
    return data[8:]


def test_plain_wrong_password_is_answered_error_58_after_the_delay(
    secured: SecuredBroker,
) -> None:
    """Raw SaslHandshake v1 + SaslAuthenticate v0: error 58 (SASL_AUTHENTICATION_FAILED) comes
    after `connection.failed.authentication.delay.ms` (100 ms) plus up to a processor poll,
    then the broker closes."""
    with socket.create_connection(("127.0.0.1", secured.ports["SASLP"]), timeout=10) as sock:
        mech = b"PLAIN"
        handshake = _kafka_request(sock, 17, 1, 1, struct.pack(">h", len(mech)) + mech)
        assert struct.unpack(">h", handshake[:2]) == (0,)
        token = b"\0alice\0not-the-password"
        started = time.monotonic()
        answer = _kafka_request(sock, 36, 0, 2, struct.pack(">i", len(token)) + token)
        waited = time.monotonic() - started
        assert struct.unpack(">h", answer[:2]) == (58,)
        assert 0.09 <= waited < 2.0, waited
        assert sock.recv(16) == b""  # then EOF


def _tls(port: int, *, cafile: Path | None, cert: Path | None = None) -> ssl.SSLSocket:
    """A raw TLS connection to 127.0.0.1:port (the handshake done)."""
    ctx = ssl.create_default_context(cafile=str(cafile) if cafile else None)
    if cafile is None:  # trust nothing: not even the system's CAs
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if cert is not None:
        ctx.load_cert_chain(str(cert))
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        return ctx.wrap_socket(sock, server_hostname="127.0.0.1")
    except BaseException:
        sock.close()
        raise


def _api_versions(tls: ssl.SSLSocket) -> bytes:
    """Send ApiVersions v0 and return the response body ("" when the broker closed)."""
    client_id = b"harness-test"
    header = struct.pack(">hhih", 18, 0, 7, len(client_id)) + client_id
    tls.sendall(struct.pack(">i", len(header)) + header)
    size = tls.recv(4)
    if len(size) < 4:
        return b""
    (n,) = struct.unpack(">i", size)
    body = b""
    while len(body) < n:
        chunk = tls.recv(n - len(body))
        if not chunk:
            break
        body += chunk
    return body


def _requests_from(broker: SecuredBroker, client_id: str) -> list[dict[str, Any]]:
    """The request log's entries (`--request-log`) for requests sent as ``client_id``."""
    path = broker.workdir / "request.log"
    entries = []
    for line in path.read_text(errors="replace").splitlines():
        _, sep, doc = line.partition("Completed request:")
        if sep and f'"clientId":"{client_id}"' in doc:
            entries.append(json.loads(doc))
    return entries


@pytest.mark.parametrize(
    ("key", "principal"),
    [
        ("MTLS", "User:OU=harness,CN=client1"),  # RFC 2253: the subject's order reversed
        ("SSL", "User:OU=harness,CN=client1"),  # requested, and given
        ("TLS", "User:ANONYMOUS"),
        ("SASL_SSL", "User:alice"),
        ("SASL2:PLAIN", "User:alice"),
        ("SASLP:SCRAM-SHA-256", "User:alice"),
        ("SASL_SSL@bob", "User:bob"),  # each run user's own client config (a phase's sasl_user)
        ("SASLP@bob", "User:bob"),
    ],
)
def test_each_listener_gives_kafkas_principal(
    secured: SecuredBroker, key: str, principal: str
) -> None:
    client_id = f"principal-{key.replace(':', '-').replace('@', '-')}"
    with _admin(_config(secured, key, client_id=client_id)) as admin:
        admin.describe_cluster()
    deadline = time.monotonic() + 10
    while not (entries := _requests_from(secured, client_id)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert entries, f"no request from {client_id} in request.log"
    listener = key.partition(":")[0].partition("@")[0]
    assert {(e["listener"], e["principal"]) for e in entries} == {(listener, principal)}


@pytest.mark.parametrize("listener", ["TLS", "SSL"])  # SSL: a certificate requested, not needed
def test_raw_tls_with_the_run_ca_answers_api_versions(
    secured: SecuredBroker, listener: str
) -> None:
    assert secured.private is not None
    with _tls(secured.ports[listener], cafile=secured.private / "ca.pem") as tls:
        body = _api_versions(tls)
        correlation_id, error_code = struct.unpack(">ih", body[:6])
        assert (correlation_id, error_code) == (7, 0)


def test_client_without_the_ca_fails_the_tls_handshake(
    secured: SecuredBroker,
) -> None:
    with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
        _tls(secured.ports["SSL"], cafile=None)
    # kafka-python without ssl_cafile (so with the system's CAs) fails the same way. In a
    # process of its own: kafka-python 3.0.12 leaves a failed handshake's socket unclosed
    # (`KafkaConnectionManager._build_transport`), referenced long enough to be blamed on
    # whichever test runs next.
    config = _config(secured, "SSL")
    del config["ssl_cafile"]
    result = subprocess.run(
        [sys.executable, "-c", _NO_CA_CLIENT, repr(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 3, result.stdout + result.stderr
    assert "CERTIFICATE_VERIFY_FAILED" in result.stderr, result.stderr


_NO_CA_CLIENT = """
import ast, logging, sys
from kafka import KafkaAdminClient
from kafka.errors import KafkaError
logging.basicConfig(level=logging.ERROR)
try:
    KafkaAdminClient(**ast.literal_eval(sys.argv[1]), bootstrap_timeout_ms=4000).close()
except KafkaError:
    sys.exit(3)
"""


def test_mutual_tls_listener_refuses_a_client_without_a_certificate(
    secured: SecuredBroker,
) -> None:
    assert secured.private is not None
    port = secured.ports["MTLS"]
    # TLS 1.3: the client finishes its side first; the broker's alert arrives on the next read
    with pytest.raises((ssl.SSLError, ConnectionError)):
        with _tls(port, cafile=secured.private / "ca.pem") as tls:
            if _api_versions(tls) == b"":
                raise ConnectionError("closed without an answer")
    with _tls(port, cafile=secured.private / "ca.pem", cert=secured.private / "client.pem") as tls:
        assert struct.unpack(">ih", _api_versions(tls)[:6]) == (7, 0)


def test_expired_and_wrong_host_certificates_fail_verification(secured: SecuredBroker) -> None:
    assert secured.private is not None
    ca = secured.private / "ca.pem"
    with pytest.raises(ssl.SSLCertVerificationError, match="expired"):
        _tls(secured.ports["EXPIRED"], cafile=ca)
    with pytest.raises(ssl.SSLCertVerificationError, match="mismatch"):
        _tls(secured.ports["WRONGHOST"], cafile=ca)


@pytest.mark.parametrize("key", ["SASL_SSL", "MTLS"])
def test_kafkas_own_tools_connect_with_the_client_config(secured: SecuredBroker, key: str) -> None:
    bootstrap = clientprops.read(secured.configs[key])["bootstrap.servers"]
    result = run_tool(
        "kafka-broker-api-versions",
        "--bootstrap-server",
        bootstrap,
        "--command-config",
        str(secured.configs[key]),
        timeout_s=120,
        progress=lambda _: None,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"127.0.0.1:{secured.ports[key]} (id: 1" in result.stdout


def test_passwords_never_leave_the_private_folder(secured: SecuredBroker) -> None:
    assert secured.private is not None
    passwords = secured.passwords()
    assert len(passwords) == 2 and all(len(p) >= 32 for p in passwords)
    # the check can see them: the broker's real config in the private folder holds PLAIN's
    real = (secured.private / "server.properties").read_text()
    assert all(p in real for p in passwords)
    for p in passwords:
        assert p not in secured.output()
    outside = [p for p in secured.workdir.iterdir() if p.name not in ("private", "data")]
    assert secured.workdir / "broker.log" in outside
    assert leaks(outside, passwords) == []
    masked = (secured.workdir / "server.properties").read_text()
    assert f"listener.name.sasl2.plain.sasl.jaas.config={MASK}" in masked
    log = (secured.workdir / "broker.log").read_text()
    # the storage format's output (SCRAM stored keys) stays in the private folder
    assert "storedKey" not in log and "storedKey" in (secured.private / "format.log").read_text()


def test_restart_keeps_the_run_secrets_and_stop_removes_them(
    broker_factory: Callable[..., Broker],
) -> None:
    """The Python API (`start_broker`, local launcher): after kill and restart the same
    client.properties still log in (SCRAM users live in the formatted metadata log, the
    private files are written again from memory); stop removes the private folder."""
    broker = broker_factory(launcher="local", listeners=("PLAINTEXT", "S=SASL_SSL:SCRAM-SHA-256"))
    assert isinstance(broker, LocalBroker) and broker.private_dir is not None
    path = broker.client_configs["S"]
    before = path.read_text()

    def login() -> None:
        with _admin(clientprops.kafka_python_config(clientprops.read(path))) as admin:
            assert admin.describe_cluster()["cluster_id"]

    login()
    broker.kill()
    broker.restart()
    assert path.read_text() == before
    login()
    broker.stop()
    assert not broker.private_dir.exists()


def test_stop_removes_the_private_folder_and_leaves_no_jvm(secured: SecuredBroker) -> None:
    assert secured.private is not None
    passwords = secured.passwords()
    rc = secured.stop()
    assert rc == 0, secured.output()
    assert "broker stopped" in secured.output()
    assert not secured.private.exists()
    for p in passwords:
        assert p not in secured.output()
    assert leaks([secured.workdir], passwords) == []
    assert secured.jvm_pid is not None
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.killpg(secured.jvm_pid, 0)  # the JVM runs in a process group of its own
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the broker JVM (or a child) outlived `harness broker`")
