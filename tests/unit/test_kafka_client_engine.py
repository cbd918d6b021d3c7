"""The storm engine against small local sockets: outcomes, rows, pre-encoded requests.

A threaded fake Kafka (loopback) answers ApiVersions v3 and Metadata v12 with frames
encoded by kafka-python's response classes, or misbehaves (close at once, stall); no
JVM. Timing is not asserted beyond "late arrivals are not offered".
"""

from __future__ import annotations

import argparse
import io
import json
import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from base.history.events import conformance
from base.history.rows import ClientClosed, ClientConnectInvoke, ClientRequestOk
from base.history.schema import SCHEMA
from loadprofiles import arrivals, clock, options, readiness
from loadprofiles.client_history import ClientHistory
from loadprofiles.engine import EngineConfig, StormEngine
from loadprofiles.engine_frames import (
    api_versions_fields,
    api_versions_frame,
    metadata_frame,
    with_correlation_id,
)
from loadprofiles.proxy_header import V2_SIGNATURE


def _frame(body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + body


def api_versions_response(cid: int, *, throttle: int = 0, error: int = 0) -> bytes:
    resp = ApiVersionsResponse(
        version=3,
        error_code=error,
        api_keys=[
            ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=4),
            ApiVersionsResponse.ApiVersion(api_key=3, min_version=0, max_version=13),
        ],
        throttle_time_ms=throttle,
    )
    return _frame(cid.to_bytes(4, "big") + bytes(resp.encode(version=3)))


def metadata_response(cid: int, *, throttle: int = 0) -> bytes:
    resp = MetadataResponse(
        version=12,
        throttle_time_ms=throttle,
        brokers=[],
        cluster_id=None,
        controller_id=-1,
        topics=[],
    )
    return _frame(cid.to_bytes(4, "big") + b"\x00" + bytes(resp.encode(version=12)))


def produce_response(cid: int, *, error: int = 0, throttle: int = 0) -> bytes:
    """Produce v12 (header v1), one partition."""
    t = ProduceResponse.TopicProduceResponse
    part = t.PartitionProduceResponse(index=0, error_code=error, base_offset=0,
                                      log_append_time_ms=-1, log_start_offset=0,
                                      record_errors=[], error_message=None)  # fmt: skip
    resp = ProduceResponse(version=12, responses=[t(name="lp", partition_responses=[part])],
                           throttle_time_ms=throttle)  # fmt: skip
    return _frame(cid.to_bytes(4, "big") + b"\x00" + bytes(resp.encode(version=12)))


class FakeKafka(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.requests: list[bytes] = []
        #: the PROXY header of each connection (mode "proxy": read before any frame)
        self.proxy_headers: list[bytes] = []
        #: the answer to every Produce (mode "produce-error": NOT_LEADER_OR_FOLLOWER)
        self.produce_error = 6 if mode == "produce-error" else 0
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(socketserver.BaseRequestHandler):
    server: FakeKafka

    def handle(self) -> None:
        sock: socket.socket = self.request
        mode = self.server.mode
        if mode == "close":
            sock.recv(4096)
            return
        if mode == "stall":
            time.sleep(1.0)
            return
        buf = b""
        if mode == "proxy":
            buf = self._proxy_header(sock)
        data = b"-"
        while data:
            while len(buf) >= 4 and len(buf) >= 4 + int.from_bytes(buf[:4], "big"):
                size = int.from_bytes(buf[:4], "big")
                frame, buf = buf[: 4 + size], buf[4 + size :]
                self.server.requests.append(frame)
                api = int.from_bytes(frame[4:6], "big")
                cid = int.from_bytes(frame[8:12], "big")
                if api == 18:
                    sock.sendall(api_versions_response(cid, throttle=3))
                elif api == 0:
                    err = self.server.produce_error
                    sock.sendall(produce_response(cid, error=err, throttle=9))
                else:
                    sock.sendall(metadata_response(cid))
            data = sock.recv(65536)
            buf += data

    def _proxy_header(self, sock: socket.socket) -> bytes:
        """Read a v1 or v2 PROXY header; what came after it is returned."""
        buf = b""
        while len(buf) < 16:
            buf += sock.recv(65536)
        if buf.startswith(V2_SIGNATURE):
            end = 16 + int.from_bytes(buf[14:16], "big")
        else:
            while b"\r\n" not in buf:
                buf += sock.recv(65536)
            end = buf.index(b"\r\n") + 2
        while len(buf) < end:
            buf += sock.recv(65536)
        self.server.proxy_headers.append(buf[:end])
        return buf[end:]


@pytest.fixture
def fake_kafka(request: pytest.FixtureRequest) -> Iterator[FakeKafka]:
    server = FakeKafka(getattr(request, "param", "serve"))
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield server
    server.shutdown()
    server.server_close()


def run(
    port: int, tmp_path: Path, n: int = 5, *, start_offset_s: float = 0.01, **kw: Any
) -> tuple[Any, list[dict[str, Any]]]:
    hist = ClientHistory(tmp_path / "history", "t")
    kw.setdefault("max_lag_ms", 5000.0)  # a busy test machine must not turn these red
    cfg = EngineConfig(host="127.0.0.1", port=port, **kw)
    engine = StormEngine(cfg, hist, conn_prefix="c1-")
    spec = arrivals.parse_arrival("constant:rate=200")
    schedule = arrivals.split(arrivals.arrival_times(spec, max_arrivals=n), 0, 1)
    stats = engine.run(schedule, time.monotonic_ns() + int(start_offset_s * 1e9))
    hist.close()
    table = pq.read_table(tmp_path / "history" / "client")
    rows = table.to_pylist()
    # every row the engine wrote is one its event's definition allows (no undeclared key)
    assert conformance(rows) == []
    for r in rows:
        r["d"] = json.loads(r["detail"]) if r["detail"] else {}
    return stats, rows


def events(rows: list[dict[str, Any]], conn_id: str) -> list[str]:
    return [r["event"] for r in sorted(rows, key=lambda r: r["seq"]) if r["conn_id"] == conn_id]


def test_storm_shape_is_served_with_every_row(fake_kafka: FakeKafka, tmp_path: Path) -> None:
    port = fake_kafka.server_address[1]
    stats, rows = run(port, tmp_path, 5, source_ips=("127.0.0.2", "127.0.0.3"))
    assert stats.offered == 5 and stats.outcomes == {"served": 5}
    assert events(rows, "c1-0") == [
        "connect_invoke",
        "connect_ok",
        "ready",
        "request_ok",
        "request_ok",
        "closed",
    ]
    ok = [r for r in rows if r["event"] == "request_ok"]
    assert sorted({r["api_key"] for r in ok}) == [3, 18]
    # ApiVersions' throttle time was read at its fixed offset
    assert all(r["d"].get("throttle_time_ms") == 3 for r in ok if r["api_key"] == 18)
    closed = [r for r in rows if r["event"] == "closed"]
    assert all(r["d"]["outcome"] == "served" and r["reason"] == "done" for r in closed)
    # source addresses round-robin by global arrival index
    invokes = sorted((r for r in rows if r["event"] == "connect_invoke"), key=lambda r: r["seq"])
    assert [r["client_ip"] for r in invokes] == ["127.0.0.2", "127.0.0.3"] * 2 + ["127.0.0.2"]
    assert all(r["client_port"] for r in invokes)
    # the requests on the wire are the pre-encoded frames with only the correlation id patched
    apiv = [f for f in fake_kafka.requests if f[4:6] == b"\x00\x12"]
    template = api_versions_frame("harness-storm")
    assert len(apiv) == 5 and len({f[8:12] for f in apiv}) == 5
    assert all(f[:8] + f[12:] == template[:8] + template[12:] for f in apiv)


def test_pre_encoded_request_decodes_as_kafka_python_request() -> None:
    frame = with_correlation_id(api_versions_frame("harness-x"), 77)
    assert int.from_bytes(frame[8:12], "big") == 77
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert int.from_bytes(frame[4:6], "big") == ApiVersionsRequest.API_KEY
    meta = metadata_frame("harness-x", 9)
    assert int.from_bytes(meta[6:8], "big") == 9


@pytest.mark.parametrize("throttle", [0, 7, 70000])
def test_api_versions_fixed_offsets_match_the_full_decode(throttle: int) -> None:
    frame = api_versions_response(5, throttle=throttle)
    full = ApiVersionsResponse.decode(io.BytesIO(frame[8:]), version=3)
    assert api_versions_fields(frame) == (full.error_code, full.throttle_time_ms)


def test_api_versions_error_code_is_read() -> None:
    assert api_versions_fields(api_versions_response(5, error=35))[0] == 35


def test_connect_shape_connects_and_closes(fake_kafka: FakeKafka, tmp_path: Path) -> None:
    stats, rows = run(fake_kafka.server_address[1], tmp_path, 3, shape="connect")
    assert stats.outcomes == {"connected": 3}
    assert events(rows, "c1-1") == ["connect_invoke", "connect_ok", "closed"]
    assert fake_kafka.requests == []


def test_refused(tmp_path: Path) -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    stats, rows = run(port, tmp_path, 2)
    assert stats.outcomes == {"refused": 2}
    fails = [r for r in rows if r["event"] == "connect_fail"]
    assert [r["reason"] for r in fails] == ["refused", "refused"]
    assert all(r["d"]["outcome"] == "refused" for r in rows if r["event"] == "closed")


@pytest.mark.parametrize("fake_kafka", ["close"], indirect=True)
def test_closed_after_accept(fake_kafka: FakeKafka, tmp_path: Path) -> None:
    stats, rows = run(fake_kafka.server_address[1], tmp_path, 3)
    assert stats.outcomes == {"eof_after_accept": 3}
    closed = [r for r in rows if r["event"] == "closed"]
    assert all(r["d"]["closed_by"] in ("eof", "reset") and "eof_ms" in r["d"] for r in closed)
    assert {r["reason"] for r in rows if r["event"] == "request_fail"} <= {"eof", "reset"}


@pytest.mark.parametrize("fake_kafka", ["stall"], indirect=True)
def test_no_response_times_out(fake_kafka: FakeKafka, tmp_path: Path) -> None:
    stats, rows = run(fake_kafka.server_address[1], tmp_path, 2, request_timeout_s=0.2)
    assert stats.outcomes == {"timeout": 2}
    fail = [r for r in rows if r["event"] == "request_fail"]
    assert [r["reason"] for r in fail] == ["timeout", "timeout"]
    assert all(r["latency_ms"] >= 200 for r in fail)


@pytest.mark.parametrize("fake_kafka", ["stall"], indirect=True)
def test_max_in_flight_is_not_offered(fake_kafka: FakeKafka, tmp_path: Path) -> None:
    stats, rows = run(
        fake_kafka.server_address[1], tmp_path, 3, max_in_flight=1, request_timeout_s=0.5
    )
    assert stats.offered == 1 and stats.not_offered == {"cpu": 2}
    not_offered = [r for r in rows if r["reason"] == "not_offered"]
    assert len(not_offered) == 2 and all("in flight" in r["d"]["why"] for r in not_offered)
    assert all("intended_mono_ns" in r["d"] for r in not_offered)


def test_late_arrivals_are_not_offered(fake_kafka: FakeKafka, tmp_path: Path) -> None:
    # the schedule started 1 s ago: every arrival is due far beyond --max-lag-ms
    stats, rows = run(
        fake_kafka.server_address[1], tmp_path, 4, start_offset_s=-1.0, max_lag_ms=100.0
    )
    assert stats.offered == 0 and stats.not_offered == {"cpu": 4}
    assert not [r for r in rows if r["event"] == "connect_invoke"]
    assert stats.max_lag_ms >= 900


def test_client_history_columns_ts_and_seq(tmp_path: Path) -> None:
    h = ClientHistory(tmp_path / "history", "run-1", name="client-x-1")
    mono = time.monotonic_ns()
    h.append(
        ClientConnectInvoke(mono, "c1", "L", "127.0.0.2", 4000, "127.0.0.2", 4000, "cid", "{}")
    )
    h.append(ClientRequestOk(mono + 1_000_000, "c1", api_key=18, detail={"offset": 1}))
    with pytest.raises(TypeError, match="principal"):
        ClientClosed(mono, "c1", principal="x")  # type: ignore[call-arg]  # not a client column
    path = h.flush()
    assert path is not None and path.name == "client-x-1-00001.parquet"
    table = pq.read_table(path)
    assert table.schema.remove_metadata() == SCHEMA
    rows = table.to_pylist()
    assert [r["seq"] for r in rows] == [1, 2]
    assert rows[1]["detail"] == '{"offset": 1}' and rows[0]["sock_port"] == 4000
    # ts follows mono_ns exactly: 1 ms apart
    assert (rows[1]["ts"] - rows[0]["ts"]).total_seconds() == pytest.approx(0.001)
    assert abs(rows[0]["ts"].timestamp() - time.time()) < 5
    assert not list((tmp_path / "history" / "client").glob(".*"))  # no temp file left


def test_options_are_refused_at_parse_time() -> None:
    p = argparse.ArgumentParser(exit_on_error=False)
    options.add_options(p)
    ns = p.parse_args(["--arrival", "constant:rate=5", "--max-in-flight", "3"])
    assert ns.max_in_flight == 3 and ns.arrival == "constant:rate=5"
    for argv, needle in (
        (["--arrival", "constant:rate=-1"], "rate"),
        (["--source-ips", "10.0.0.1"], "loopback"),
        (["--max-in-flight", "0"], ">= 1"),
        (["--connect-timeout", "nan"], ">= 0.001"),
    ):
        with pytest.raises(argparse.ArgumentError, match=needle):
            p.parse_args(argv)


def test_settings_from_options() -> None:
    p = argparse.ArgumentParser()
    options.add_options(p)
    ns = p.parse_args(["--source-ips", "127.0.0.2-127.0.0.4", "--shape", "connect"])
    ns.run_time = None
    s = options.Settings.from_options(ns, "kafka://127.0.0.1:9092")
    assert s.source_ips == ("127.0.0.2", "127.0.0.3", "127.0.0.4") and s.shape == "connect"
    with pytest.raises(options.OptionError, match="loopback"):
        options.Settings.from_options(ns, "kafka://10.1.1.1:9092")


def test_readiness_markers(tmp_path: Path) -> None:
    d = tmp_path / "ready"
    assert readiness.phase_state(d) == (0, 0)
    readiness.mark(d, readiness.READY, start_mono_ns=5)
    assert readiness.phase_state(d) == (1, 0)
    assert readiness.first_ready_mono_ns(d) is not None
    readiness.mark(d, readiness.DONE, intended=1, offered=1)
    assert readiness.phase_state(d) == (1, 1)
    assert readiness.mark(None, readiness.READY) is None


def test_clock_offset_estimate() -> None:
    # worker sends at 1000, master reads 5600 when the worker's clock says 1100+... the
    # symmetric estimate puts the master 4550 ahead with a 100 ns round trip
    assert clock.estimate(1000, 5600, 1100) == (4550, 100)


def test_master_start_on_the_local_clock() -> None:
    # a master 3 s ahead announces a start 1 s from its now: locally that is 1 s from now
    master_now = time.time_ns() + 3_000_000_000
    start = clock.local_start_mono_ns(master_now + 1_000_000_000, 3_000_000_000)
    assert abs(start - time.monotonic_ns() - 1_000_000_000) < 50_000_000


@pytest.mark.parametrize("fake_kafka", ["close"], indirect=True)
def test_a_close_during_the_tls_handshake_is_an_eof_after_accept(
    fake_kafka: FakeKafka, tmp_path: Path
) -> None:
    """A server that reads the ClientHello and closes without an alert (Kafka's connection
    quotas close before any TLS byte is read): the attempt reads as a close after accept
    (`eof`/`reset`, outcome ``eof_after_accept``), as a plaintext one does, so a broker
    target's checks see the quota's close; a TLS alert is a TLS failure instead."""
    from base.security.client import TlsSettings

    tls = TlsSettings(check_hostname=False)
    stats, rows = run(fake_kafka.server_address[1], tmp_path, 3, shape="apiversions", tls=tls)
    assert stats.outcomes == {"eof_after_accept": 3}, stats.summary()
    for conn in {r["conn_id"] for r in rows if r["conn_id"]}:
        assert events(rows, conn) == ["connect_invoke", "connect_ok", "tls_start", "tls_fail",
                                      "closed"]  # fmt: skip
    ends = [r for r in rows if r["event"] in ("tls_fail", "closed")]
    assert {r["reason"] for r in ends} <= {"eof", "reset"}, ends
    assert all("eof_ms" in r["d"] for r in rows if r["event"] == "closed")


def test_arrivals_spread_over_brokers_and_pass_over_one_that_refused(
    fake_kafka: FakeKafka, tmp_path: Path
) -> None:
    live = fake_kafka.server_address[1]
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead = s.getsockname()[1]
    s.close()  # nothing listens there now: broker 2 is down
    brokers = ((1, "127.0.0.1", live), (2, "127.0.0.1", dead), (3, "127.0.0.1", live))
    stats, rows = run(live, tmp_path, 30, brokers=brokers)
    invokes = sorted((r for r in rows if r["event"] == "connect_invoke"), key=lambda r: r["seq"])
    nodes = [r["d"]["broker"] for r in invokes]
    # round-robin 1, 2, 3, ...; once broker 2's refusal is seen, its turns go to the
    # brokers up (Kafka's reconnect back-off, 1 s: the whole schedule here). Arrivals made
    # before the engine saw the refusal (a busy machine can hold its loop that long) still
    # went to broker 2, and each was refused.
    assert nodes[:3] == [1, 2, 3], nodes
    seen = min(r["mono_ns"] for r in rows if r["event"] == "connect_fail")
    after = [r["d"]["broker"] for r in invokes if r["mono_ns"] > seen]
    assert after and 2 not in after, nodes
    refused = nodes.count(2)
    outcomes = dict(stats.outcomes)  # served, or delayed_served on a slow machine
    assert outcomes.pop("refused") == refused, stats.outcomes
    assert set(outcomes) <= {"served", "delayed_served"}, stats.outcomes
    assert sum(outcomes.values()) == 30 - refused, stats.outcomes


def test_a_hot_broker_takes_its_share_of_the_arrivals(
    fake_kafka: FakeKafka, tmp_path: Path
) -> None:
    port = fake_kafka.server_address[1]
    brokers = tuple((n, "127.0.0.1", port) for n in (1, 2, 3))
    _stats, rows = run(port, tmp_path, 8, brokers=brokers, hot_broker=(2, 0.5))
    nodes = [r["d"]["broker"] for r in rows if r["event"] == "connect_invoke"]
    assert sorted(nodes).count(2) == 4 and nodes.count(1) == 2 and nodes.count(3) == 2, nodes


def test_produce_shape_sends_one_record_on_each_new_connection(
    fake_kafka: FakeKafka, tmp_path: Path
) -> None:
    """The per-request profile's shape: ApiVersions, then one Produce (the pre-encoded
    frame, correlation id patched) per connection; the answer's throttle time is read."""
    port = fake_kafka.server_address[1]
    stats, rows = run(port, tmp_path, 4, shape="produce", topic="lp", value=b"v" * 20, acks=-1)
    assert stats.outcomes == {"served": 4}
    assert [
        r["api_key"] for r in rows if r["event"] == "request_ok" and r["conn_id"] == "c1-2"
    ] == [
        18,
        0,
    ]
    produced = [r for r in rows if r["event"] == "request_ok" and r["api_key"] == 0]
    assert len(produced) == 4 and all(r["d"] == {"throttle_time_ms": 9} for r in produced)
    frames = [f for f in fake_kafka.requests if f[4:6] == b"\x00\x00"]
    req = ProduceRequest.decode(io.BytesIO(frames[0][4:]), version=12, header=True)
    assert req.acks == -1 and req.topic_data[0].name == "lp"
    assert len({f[8:12] for f in frames}) == 4


@pytest.mark.parametrize("fake_kafka", ["produce-error"], indirect=True)
def test_a_produce_error_is_served_with_its_code(fake_kafka: FakeKafka, tmp_path: Path) -> None:
    stats, rows = run(fake_kafka.server_address[1], tmp_path, 2, shape="produce", topic="lp")
    assert stats.outcomes == {"served": 2}  # answered: the connection was served
    produced = [r for r in rows if r["event"] == "request_ok" and r["api_key"] == 0]
    assert {r["d"]["error_code"] for r in produced} == {6}


def test_the_produce_shape_refuses_acks_0() -> None:
    with pytest.raises(ValueError, match=r"--acks: 0: .*acks=0 gets none"):
        EngineConfig(host="h", port=1, shape="produce", acks=0)


@pytest.mark.parametrize("fake_kafka", ["proxy"], indirect=True)
@pytest.mark.parametrize("version", ["v1", "v2"])
def test_a_proxy_header_claims_each_arrivals_client_address(
    fake_kafka: FakeKafka, tmp_path: Path, version: str
) -> None:
    """The single-IP flood's shape: one socket address, a PROXY header per connection
    claiming client address k mod n; rows carry the claimed address as ``client_ip``
    and the socket's as ``sock_ip`` (the port is the socket's in both)."""
    claimed = ("127.0.1.1", "127.0.1.2", "127.0.1.3")
    stats, rows = run(fake_kafka.server_address[1], tmp_path, 4, source_ips=("127.0.0.9",),
                      proxy_protocol=version, proxy_client_ips=claimed)  # fmt: skip
    assert stats.outcomes == {"served": 4}
    invokes = sorted((r for r in rows if r["event"] == "connect_invoke"), key=lambda r: r["seq"])
    assert [r["client_ip"] for r in invokes] == [*claimed, claimed[0]]
    assert {r["sock_ip"] for r in rows if r["conn_id"]} == {"127.0.0.9"}
    assert all(r["client_port"] == r["sock_port"] for r in invokes)
    assert all(r["d"]["proxy_protocol"] == version for r in invokes)
    assert len(fake_kafka.proxy_headers) == 4
    first = fake_kafka.proxy_headers[0]
    if version == "v1":
        assert first.startswith(b"PROXY TCP4 127.0.1.")
        assert b" 127.0.0.1 " in first
    else:
        assert first.startswith(V2_SIGNATURE) and first[16:19] == bytes([127, 0, 1])


def test_a_bad_proxy_protocol_is_refused_with_the_option() -> None:
    with pytest.raises(ValueError, match="--proxy-protocol: 'v9'"):
        EngineConfig(host="h", port=1, proxy_protocol="v9")
