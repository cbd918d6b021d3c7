"""The storm engine against a real secured Kafka broker: TLS, mutual TLS, SASL (PLAIN,
SCRAM) and the failure shapes, judged from the client history rows it writes.

One broker for the module (`broker.local.start_local` with secured listeners, as
`harness broker --listener` starts them); each case is a small bounded storm (tens of
connections, a few seconds, 127.0.0.1). No timing is asserted beyond sane latencies.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

pytest.importorskip("cryptography", reason="the cryptography package makes the certificates")

from base.history.events import conformance
from base.security import clientprops
from base.security.client import SASL_AUTHENTICATION_FAILED, settings_from_properties
from broker.local import LocalBroker, start_local
from loadprofiles import arrivals
from loadprofiles.client_history import ClientHistory
from loadprofiles.engine import EngineConfig, StormEngine

pytestmark = pytest.mark.integration

LISTENERS = (
    "PLAINTEXT",
    "TLS=SSL",
    "MTLS=SSL:mtls",
    "SASLS=SASL_SSL:SCRAM-SHA-512",
    "SASLP=SASL_PLAINTEXT:PLAIN,SCRAM-SHA-256",
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    b = start_local(
        listeners=LISTENERS,
        workdir=tmp_path_factory.mktemp("engine-secured") / "broker",
        ready_timeout_s=180,
        progress=lambda _msg: None,
    )
    try:
        # a cold JVM takes up to seconds per TLS handshake at first: warm it up (not judged)
        for listener in ("TLS", "SASLS"):
            _props_and_run_quietly(b, listener)
        yield b
    finally:
        b.stop()


def _props_and_run_quietly(broker: LocalBroker, listener: str) -> None:
    _, tls, sasl = settings_from_properties(_props(broker, listener))
    cfg = EngineConfig(
        host="127.0.0.1", port=broker.listener_ports[listener], shape="apiversions",
        max_lag_ms=5000.0, tls=tls, sasl=sasl,
    )  # fmt: skip
    spec = arrivals.parse_arrival("constant:rate=50")
    schedule = arrivals.split(arrivals.arrival_times(spec, max_arrivals=100), 0, 1)
    StormEngine(cfg, ClientHistory(None, "warm")).run(schedule, time.monotonic_ns())


def _props(broker: LocalBroker, key: str) -> dict[str, str]:
    props = clientprops.read(broker.client_configs[key])
    props.pop("bootstrap.servers", None)
    return props


def _password(broker: LocalBroker) -> str:
    props = clientprops.read(broker.client_configs["SASLS"])
    return clientprops.kafka_python_config(props)["sasl_plain_password"]  # type: ignore[no-any-return]


def storm(
    broker: LocalBroker,
    listener: str,
    tmp_path: Path,
    *,
    config: str | None = None,
    n: int = 40,
    rate: float = 40.0,
    shape: str = "apiversions",
    **kw: Any,
) -> tuple[Any, list[dict[str, Any]], Path]:
    props = _props(broker, config or listener) if (config or listener) != "PLAINTEXT" else {}
    tls_keys = {
        k: kw.pop(k) for k in ("protocol", "sasl_fault", "tls_fault", "tls_resume") if k in kw
    }
    _, tls, sasl = settings_from_properties(props, **tls_keys)
    hist_dir = tmp_path / "history"
    hist = ClientHistory(hist_dir, "t")
    cfg = EngineConfig(
        host="127.0.0.1",
        port=broker.listener_ports[listener],
        shape=shape,
        listener=listener,
        max_lag_ms=5000.0,
        connect_timeout_s=kw.pop("connect_timeout_s", 5.0),
        tls=tls,
        sasl=sasl,
        **kw,
    )
    engine = StormEngine(cfg, hist, conn_prefix="s-")
    spec = arrivals.parse_arrival(f"constant:rate={rate}")
    schedule = arrivals.split(arrivals.arrival_times(spec, max_arrivals=n), 0, 1)
    stats = engine.run(schedule, time.monotonic_ns() + 20_000_000)
    hist.close()
    rows = pq.read_table(hist_dir / "client").to_pylist()
    assert conformance(rows) == []
    for r in rows:
        r["d"] = json.loads(r["detail"]) if r["detail"] else {}
    return stats, rows, hist_dir


def by_event(rows: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [r for r in rows if r["event"] == name]


def outcomes(rows: list[dict[str, Any]]) -> Counter[str]:
    return Counter(r["d"]["outcome"] for r in by_event(rows, "closed"))


def served(rows: list[dict[str, Any]]) -> int:
    """Connections served (some late on a busy 2-core machine: delayed_served), or -1 if
    any other outcome."""
    out = outcomes(rows)
    if set(out) - {"served", "delayed_served"}:
        return -1
    return out["served"] + out["delayed_served"]


def assert_no_secret(broker: LocalBroker, hist_dir: Path) -> None:
    password = _password(broker)
    for path in hist_dir.rglob("*"):
        if path.is_file():
            assert password.encode() not in path.read_bytes(), path


def test_ssl_storm_is_served_with_tls_rows(broker: LocalBroker, tmp_path: Path) -> None:
    stats, rows, _ = storm(broker, "TLS", tmp_path, shape="storm")
    assert stats.offered == 40 and served(rows) == 40, stats.summary()
    done = by_event(rows, "tls_done")
    assert len(by_event(rows, "tls_start")) == len(done) == 40
    for r in done:
        assert 0 < r["d"]["tls_ms"] < 5000 and r["d"]["tls_version"] in ("TLSv1.2", "TLSv1.3")
        assert r["d"]["resumed"] is False
    for r in by_event(rows, "closed"):
        d = r["d"]
        assert d["connect_ms"] <= d["connect_ms"] + d["tls_ms"] <= d["ready_ms"]
    assert len(by_event(rows, "request_ok")) == 80  # ApiVersions and Metadata over TLS


def _authenticated(broker: LocalBroker, listener: str) -> float:
    """Kafka's successful-authentication-total on ``listener`` (every processor), scraped."""
    import urllib.request

    assert broker.metrics_url is not None, "the broker runs with its JMX exporter here"
    with urllib.request.urlopen(broker.metrics_url, timeout=5) as resp:
        text = resp.read().decode()
    names = tuple(  # the exporter's name for the counter, with or without "_total"
        f"kafka_server_socket_server_metrics_successful_authentication{s}{{" for s in ("", "_total")
    )
    wanted = f'listener="{listener}"'
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(names) and wanted in line
    )


def test_tls_connect_shape_closes_once_the_broker_has_authenticated_it(
    broker: LocalBroker, tmp_path: Path
) -> None:
    """The ``connect`` shape over TLS 1.3 waits for the broker's session ticket before it
    closes: the broker has then read the client's Finished, so Kafka counts every one of
    them authenticated (closing right after our own Finished left most uncounted)."""
    before = _authenticated(broker, "TLS")
    stats, rows, _ = storm(broker, "TLS", tmp_path, shape="connect", n=40, rate=40)
    assert outcomes(rows) == {"connected": 40}, stats.summary()
    assert {r["d"]["tls_version"] for r in by_event(rows, "tls_done")} == {"TLSv1.3"}
    deadline = time.monotonic() + 15  # the exporter reads the counters when scraped
    while _authenticated(broker, "TLS") - before < 40 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _authenticated(broker, "TLS") - before == 40


def test_tls_resumption_is_an_option(broker: LocalBroker, tmp_path: Path) -> None:
    """The engine offers the last session (its reuse is unit-tested against a Python TLS
    server); this broker as started here does not resume TLS sessions at all (a blocking
    ``ssl`` client gets no reuse either), so only the recording is judged."""
    stats, rows, _ = storm(broker, "TLS", tmp_path, n=20, rate=20, tls_resume=True)
    assert served(rows) == 20, stats.summary()
    resumed = [r["d"]["resumed"] for r in by_event(rows, "tls_done")]
    assert len(resumed) == 20 and resumed[0] is False
    assert all(isinstance(x, bool) for x in resumed)


def test_mutual_tls_storm(broker: LocalBroker, tmp_path: Path) -> None:
    stats, rows, _ = storm(broker, "MTLS", tmp_path)
    assert served(rows) == 40, stats.summary()
    # Kafka's principal for the run's client certificate (docs/security.md): reversed RDNs
    principals = {r["d"]["principal"] for r in by_event(rows, "tls_done")}
    assert principals == {"User:OU=harness,CN=client1"}, principals
    assert {r["d"]["principal"] for r in by_event(rows, "closed")} == principals
    # without the client certificate the broker refuses the handshake
    props = _props(broker, "MTLS")
    for key in ("ssl.keystore.location", "ssl.keystore.type"):
        props.pop(key, None)
    _, tls, _ = settings_from_properties(props)
    hist = ClientHistory(None, "t")
    cfg = EngineConfig(
        host="127.0.0.1", port=broker.listener_ports["MTLS"], shape="apiversions",
        max_lag_ms=5000.0, tls=tls,
    )  # fmt: skip
    engine = StormEngine(cfg, hist)
    schedule = arrivals.split(
        arrivals.arrival_times(arrivals.parse_arrival("constant:rate=20"), max_arrivals=5), 0, 1
    )
    st = engine.run(schedule, time.monotonic_ns())
    assert set(st.outcomes) <= {"tls_failed", "eof_after_accept"} and st.offered == 5


def test_sasl_ssl_scram_sha512_storm(broker: LocalBroker, tmp_path: Path) -> None:
    stats, rows, hist_dir = storm(broker, "SASLS", tmp_path, shape="storm")
    assert served(rows) == 40, stats.summary()
    done = by_event(rows, "sasl_done")
    assert len(done) == 40 and len(by_event(rows, "tls_done")) == 40
    user = clientprops.kafka_python_config(_props(broker, "SASLS"))["sasl_plain_username"]
    for r in done:
        assert r["d"]["mechanism"] == "SCRAM-SHA-512" and r["d"]["rounds"] == 2
        assert r["d"]["principal"] == f"User:{user}"
        assert 0 < r["d"]["sasl_ms"] < 5000
    for r in by_event(rows, "closed"):
        d = r["d"]
        assert d["connect_ms"] + d["tls_ms"] + d["sasl_ms"] <= d["ready_ms"] + 0.01
        assert d["principal"] == f"User:{user}"
    # ready is the first response after login (ApiVersions), not a SASL answer
    assert {r["api_key"] for r in by_event(rows, "ready")} == {18}
    assert_no_secret(broker, hist_dir)


def test_sasl_plaintext_plain_and_scram256(broker: LocalBroker, tmp_path: Path) -> None:
    stats, rows, _ = storm(broker, "SASLP", tmp_path / "plain")
    assert served(rows) == 40, stats.summary()
    assert {r["d"]["rounds"] for r in by_event(rows, "sasl_done")} == {1}
    assert not by_event(rows, "tls_start")
    stats, rows, _ = storm(broker, "SASLP", tmp_path / "scram", config="SASLP:SCRAM-SHA-256", n=20)
    assert served(rows) == 20, stats.summary()
    assert {r["d"]["mechanism"] for r in by_event(rows, "sasl_done")} == {"SCRAM-SHA-256"}


@pytest.mark.parametrize(
    "listener,fault,round_",
    [("SASLS", "wrong-password", 2), ("SASLS", "unknown-user", 1), ("SASLP", "wrong-password", 1)],
)
def test_failed_logins_end_with_error_58(
    broker: LocalBroker, tmp_path: Path, listener: str, fault: str, round_: int
) -> None:
    stats, rows, hist_dir = storm(broker, listener, tmp_path, n=20, rate=20, sasl_fault=fault)
    assert outcomes(rows) == {"auth_failed": 20}, stats.summary()
    fails = by_event(rows, "sasl_fail")
    assert len(fails) == 20
    for r in fails:
        assert r["d"]["error_code"] == SASL_AUTHENTICATION_FAILED and r["d"]["round"] == round_
        # the broker withholds the answer for connection.failed.authentication.delay.ms (100)
        assert r["d"]["sasl_ms"] >= 90, r["d"]
    assert not by_event(rows, "sasl_done") and not by_event(rows, "ready")
    assert_no_secret(broker, hist_dir)


@pytest.mark.parametrize("listener", ["PLAINTEXT", "SASLP"])
def test_client_hello_to_a_non_tls_port_fails_without_response(
    broker: LocalBroker, tmp_path: Path, listener: str
) -> None:
    """PLAINTEXT: closed at once. SASL_PLAINTEXT: the ClientHello reads as a frame over
    512 KiB, a failed authentication, so the close waits for the failed-auth delay."""
    props = {"security.protocol": "SSL"}
    if listener == "SASLP":
        props["ssl.truststore.location"] = _props(broker, "TLS")["ssl.truststore.location"]
    _, tls, _ = settings_from_properties(props)
    hist = ClientHistory(tmp_path / "history", "t")
    cfg = EngineConfig(
        host="127.0.0.1", port=broker.listener_ports[listener], shape="apiversions",
        max_lag_ms=5000.0, tls=tls,
    )  # fmt: skip
    schedule = arrivals.split(
        arrivals.arrival_times(arrivals.parse_arrival("constant:rate=40"), max_arrivals=20), 0, 1
    )
    stats = StormEngine(cfg, hist).run(schedule, time.monotonic_ns())
    hist.close()
    rows = pq.read_table(tmp_path / "history" / "client").to_pylist()
    for r in rows:
        r["d"] = json.loads(r["detail"]) if r["detail"] else {}
    # the server closes without a TLS alert: to the client this is a close after accept,
    # as a connection quota's close is (`_tls_peer_closed`), so it reads as an EOF
    assert outcomes(rows) == {"eof_after_accept": 20}, stats.summary()
    fails = by_event(rows, "tls_fail")
    assert len(fails) == 20 and {r["reason"] for r in fails} <= {"eof", "reset"}
    assert {r["reason"] for r in by_event(rows, "closed")} <= {"eof", "reset"}
    assert not by_event(rows, "ready") and not by_event(rows, "request_ok")
    if listener == "SASLP":
        assert min(r["d"]["tls_ms"] for r in fails) >= 90


def test_stalled_handshake_holds_its_slot(broker: LocalBroker, tmp_path: Path) -> None:
    stats, rows, _ = storm(broker, "TLS", tmp_path, n=10, rate=20, tls_fault="stall", hold_ms=1500)
    assert outcomes(rows) == {"tls_stalled": 10}, stats.summary()
    for r in by_event(rows, "closed"):
        assert 1400 <= r["latency_ms"] < 5000
    assert not by_event(rows, "tls_done")


def test_unsupported_client_key_is_named(broker: LocalBroker) -> None:
    props = _props(broker, "TLS")
    props["ssl.cipher.suites"] = "TLS_AES_128_GCM_SHA256"
    with pytest.raises(ValueError, match=r"ssl\.cipher\.suites"):
        settings_from_properties(props)


def test_locust_storm_with_command_config_leaks_no_secret(
    broker: LocalBroker, tmp_path: Path
) -> None:
    """The storm profile under Locust, `--command-config` the broker's SCRAM client.properties:
    served, and the password is in none of the written files nor the process output."""
    from base.history import read_history
    from loadprofiles.launch import locust_command, run

    options = {
        "arrival": "constant:rate=20",
        "max_arrivals": 30,
        "max_lag_ms": 2000,
        "command_config": str(broker.client_configs["SASLS"]),
    }
    host = f"127.0.0.1:{broker.listener_ports['SASLS']}"
    argv = locust_command("storm", host=host, run_time_s=6, run_dir=tmp_path, options=options)
    done = run(argv, timeout_s=60)
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "Traceback" not in out, out[-4000:]
    assert "arrivals: intended 30, offered 30" in out, out[-2000:]
    rows = read_history(tmp_path, "client").to_pylist()
    assert len([r for r in rows if r["event"] == "sasl_done"]) == 30
    password = _password(broker)
    assert password not in out
    assert_no_secret(broker, tmp_path)


def test_options_take_the_command_config(broker: LocalBroker, tmp_path: Path) -> None:
    import argparse

    from loadprofiles import options

    parser = argparse.ArgumentParser()
    options.add_options(parser)
    config = str(broker.client_configs["SASLS"])
    o = parser.parse_args(["--command-config", config, "--auth-fault", "wrong-password"])
    o.run_time = None
    s = options.Settings.from_options(o, "127.0.0.1:9092")
    tls, sasl = s.security("c")
    assert tls is not None and sasl is not None and sasl.fault == "wrong-password"
    assert sasl.mechanism == "SCRAM-SHA-512" and _password(broker) not in repr(s.security("c"))
    bad = tmp_path / "bad.properties"
    bad.write_text("security.protocol=SSL\nssl.cipher.suites=X\n")
    with pytest.raises(SystemExit):
        parser.parse_args(["--command-config", str(bad)])
    s.command_config = str(bad)
    with pytest.raises(options.OptionError, match=r"ssl\.cipher\.suites"):
        s.security("c")
    s.command_config = ""
    s.security_protocol = "SASL_SSL"
    with pytest.raises(options.OptionError, match=r"sasl\.jaas\.config"):
        s.security("c")


def test_handshake_that_never_finishes_is_bounded_by_the_connect_timeout(
    tmp_path: Path,
) -> None:
    """A port that accepts (the kernel's backlog) but never answers the ClientHello."""
    import socket

    from base.security.client import TlsSettings

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        hist = ClientHistory(tmp_path / "history", "t")
        cfg = EngineConfig(
            host="127.0.0.1", port=silent.getsockname()[1], shape="apiversions",
            max_lag_ms=5000.0, connect_timeout_s=0.5, tls=TlsSettings(check_hostname=False),
        )  # fmt: skip
        schedule = arrivals.split(
            arrivals.arrival_times(arrivals.parse_arrival("constant:rate=20"), max_arrivals=3),
            0,
            1,
        )
        stats = StormEngine(cfg, hist).run(schedule, time.monotonic_ns())
        hist.close()
    assert stats.outcomes == {"timeout": 3}, stats.summary()
    rows = pq.read_table(tmp_path / "history" / "client").to_pylist()
    fails = [r for r in rows if r["event"] == "tls_fail"]
    assert len(fails) == 3
    for r in fails:
        d = json.loads(r["detail"])
        assert d["error"] == "handshake timeout" and 450 <= d["tls_ms"] < 3000


def test_wrong_ca_fails_the_handshake(broker: LocalBroker, tmp_path: Path) -> None:
    from base.security.certs import make_ca

    other = tmp_path / "other-ca.pem"
    other.write_bytes(make_ca("not the run's CA").cert_pem)
    props = _props(broker, "TLS")
    props["ssl.truststore.location"] = str(other)
    _, tls, _ = settings_from_properties(props)
    hist = ClientHistory(tmp_path / "history", "t")
    cfg = EngineConfig(
        host="127.0.0.1", port=broker.listener_ports["TLS"], shape="apiversions",
        max_lag_ms=5000.0, tls=tls,
    )  # fmt: skip
    schedule = arrivals.split(
        arrivals.arrival_times(arrivals.parse_arrival("constant:rate=20"), max_arrivals=3), 0, 1
    )
    stats = StormEngine(cfg, hist).run(schedule, time.monotonic_ns())
    hist.close()
    assert stats.outcomes == {"tls_failed": 3}, stats.summary()
    rows = pq.read_table(tmp_path / "history" / "client").to_pylist()
    errors = {json.loads(r["detail"])["error"] for r in rows if r["event"] == "tls_fail"}
    assert len(errors) == 1 and errors.pop().startswith("certificate:"), errors
