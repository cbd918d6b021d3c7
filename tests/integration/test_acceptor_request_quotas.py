"""Request quotas (KIP-124) at the acceptor, with KIP-219 throttling: the response carries
throttle_time_ms and the channel is muted for that long."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from acceptor import AcceptorHandle, start_in_thread
from acceptor.testing import bootstrap, connect, nonconformant_rows, ping, wait_until
from base.admin.client import KafkaWire, alter_client_quota, describe_client_quotas
from base.history import read_history


@pytest.fixture
def acceptor(kafka_broker: Any, tmp_path: Path) -> Iterator[AcceptorHandle]:
    h = start_in_thread(
        {
            "listeners": "CLIENT://127.0.0.1:0",
            "listener.name.client.upstream": kafka_broker.bootstrap,
            "quota.window.num": "2",
            "metrics.port": "-1",
            "state.dir": str(tmp_path / "state"),
        },
        history_dir=tmp_path / "history",
        run_id="rq",
    )
    yield h
    try:
        assert nonconformant_rows(h) == []
    finally:
        h.stop()


def test_request_percentage_throttles_the_hog_only(acceptor: AcceptorHandle) -> None:
    boot = bootstrap(acceptor.address("CLIENT"))
    alter_client_quota(boot, {"client-id": "hog"}, {"request_percentage": 0.2})
    assert describe_client_quotas(boot, [("client-id", 0, "hog")], strict=True) == [
        ({"client-id": "hog"}, {"request_percentage": 0.2})
    ]
    hog = KafkaWire(boot, client_id="hog")
    polite = connect(acceptor.address("CLIENT"))  # client id "harness-admin": no quota
    throttles = []
    for _ in range(300):  # bounded: stops at the first throttled response
        resp = ping(hog)
        ping(polite)
        if resp.throttle_time_ms:
            throttles.append(resp.throttle_time_ms)
            break
    assert throttles and 0 < throttles[0] <= 1000
    after = ping(hog)  # served once the mute ends
    assert after.error_code == 0
    hog.close()
    polite.close()
    writer = acceptor.acceptor.rec.writer
    assert writer is not None
    writer.flush()
    rows = read_history(writer.dir.parent, "acceptor").to_pylist()
    thr = [r for r in rows if r["event"] == "request_throttle"]
    assert {r["client_id"] for r in thr} == {"hog"}
    assert thr[0]["delay_ms"] == throttles[0]
    detail = json.loads(thr[0]["detail"])
    assert detail["quota"] == 0.2 and detail["bucket"] == {"user": "", "client-id": "hog"}
    # muted: the next hog request reached the broker only after the throttle time
    later = [
        r
        for r in rows
        if r["event"] == "request" and r["client_id"] == "hog" and r["mono_ns"] > thr[0]["mono_ns"]
    ]
    assert later and later[0]["mono_ns"] - thr[0]["mono_ns"] >= 0.9 * throttles[0] * 1e6
    # and the change is a config row with the request quota
    assert acceptor.acceptor.config_writer is not None
    acceptor.acceptor.config_writer.flush()
    configs = read_history(writer.dir.parent, "harness").to_pylist()
    last = json.loads(configs[-1]["detail"])
    assert last["request_quotas"] == {"client-id=hog": {"request_percentage": 0.2}}


def test_byte_rate_quotas_still_go_to_the_broker(
    acceptor: AcceptorHandle, kafka_broker: Any
) -> None:
    boot = bootstrap(acceptor.address("CLIENT"))
    try:
        alter_client_quota(boot, {"user": "bytes-test"}, {"producer_byte_rate": 1048576.0})
        want = [({"user": "bytes-test"}, {"producer_byte_rate": 1048576.0})]
        # KRaft applies the change through its metadata log: visible shortly after
        wait_until(
            lambda: (
                describe_client_quotas(
                    kafka_broker.bootstrap, [("user", 0, "bytes-test")], strict=True
                )
                == want
            ),
            timeout=30,
            what="the broker's quota",
        )
    finally:
        alter_client_quota(
            kafka_broker.bootstrap, {"user": "bytes-test"}, {"producer_byte_rate": None}
        )
    assert acceptor.acceptor.request_quotas.quotas() == []


def test_request_rows_can_be_sampled(kafka_broker: Any, tmp_path: Path) -> None:
    h = start_in_thread(
        {
            "listeners": "CLIENT://127.0.0.1:0",
            "listener.name.client.upstream": kafka_broker.bootstrap,
            "metrics.port": "-1",
            "history.request.sample": "4",
        },
        history_dir=tmp_path / "history",
        run_id="sample",
    )
    try:
        c = connect(h.address("CLIENT"))
        for _ in range(12):
            ping(c)
        c.close()
    finally:
        h.stop()
    rows = read_history(tmp_path / "history", "acceptor").to_pylist()
    reqs = [r for r in rows if r["event"] == "request"]
    assert len(reqs) == 3 and all(json.loads(r["detail"]) == {"sample": 4} for r in reqs)


# -- KIP-219: one request in flight per connection -----------------------------------------
def _api_versions(correlation_id: int, client_id: str) -> bytes:
    from kafka.protocol.metadata import ApiVersionsRequest

    req = ApiVersionsRequest[3](client_software_name="harness-test", client_software_version="0")
    req.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(req.encode(header=True, framed=True))


class _Responses:
    """Responses read off a raw socket, each with its arrival time and throttle_time_ms."""

    def __init__(self, sock: Any) -> None:
        from base.wire.framing import FrameDecoder

        self.sock = sock
        self.decoder = FrameDecoder(2**31 - 1)
        self.ready: list[tuple[int, int]] = []

    def next(self) -> tuple[int, int]:
        import time

        from kafka.protocol.metadata import ApiVersionsResponse

        while not self.ready:
            data = self.sock.recv(65536)
            assert data, "the server closed the connection"
            now = time.monotonic_ns()
            for frame in self.decoder.feed(data):
                resp = ApiVersionsResponse[3].decode(frame[4:], version=3, header=True)
                self.ready.append((now, int(resp.throttle_time_ms)))
        return self.ready.pop(0)


def _pipelined_pair(addr: tuple[str, int], client_id: str) -> tuple[int, int, int, int]:
    """Drive `client_id` over its request quota, let the mute pass, then send two requests
    in ONE write. Returns (sent_ns, first_ns, first_throttle_ms, second_ns)."""
    import time

    from acceptor.testing import raw

    sock = raw(addr, timeout=15)
    try:
        responses = _Responses(sock)
        throttle = 0
        for cid in range(300):  # bounded: stops at the first throttled response
            sock.sendall(_api_versions(cid, client_id))
            _, throttle = responses.next()
            if throttle:
                break
        assert throttle > 0, "never throttled"
        time.sleep(throttle / 1000)  # that mute is over; the bucket is still over its quota
        sent = time.monotonic_ns()
        sock.sendall(_api_versions(1000, client_id) + _api_versions(1001, client_id))
        first, first_throttle = responses.next()
        second, _ = responses.next()
        return sent, first, first_throttle, second
    finally:
        sock.close()


def test_pipelined_requests_wait_for_the_throttle_as_on_the_broker(
    acceptor: AcceptorHandle, kafka_broker: Any
) -> None:
    # Kafka's processor reads one request, mutes the channel until its response is sent and
    # its throttle is over (KafkaChannel.ChannelMuteState), so the second of two pipelined
    # requests is read only after the first one's throttle: its response cannot come earlier
    # than first_throttle after the throttle started. The throttle started after the first
    # request was sent and before its response arrived, so the bound with no tolerance is
    # second - first >= first_throttle - (first - sent).
    import os

    quota = {"request_percentage": 0.01}
    from base.admin.client import split_bootstrap

    targets = {
        "acceptor": (acceptor.address("CLIENT"), f"pipe-acceptor-{os.getpid()}"),
        "broker": (split_bootstrap(kafka_broker.bootstrap), f"pipe-broker-{os.getpid()}"),
    }
    acceptor_boot = bootstrap(acceptor.address("CLIENT"))
    alter_client_quota(acceptor_boot, {"client-id": targets["acceptor"][1]}, quota)
    broker_id = targets["broker"][1]
    alter_client_quota(kafka_broker.bootstrap, {"client-id": broker_id}, quota)
    try:
        wait_until(
            lambda: (
                describe_client_quotas(
                    kafka_broker.bootstrap, [("client-id", 0, broker_id)], strict=True
                )
                == [({"client-id": broker_id}, quota)]
            ),
            timeout=30,
            what="the broker's request quota",
        )
        seen = {}
        for name, (addr, client_id) in targets.items():
            sent, first, throttle, second = _pipelined_pair(addr, client_id)
            assert throttle > 0, name
            bound_ns = throttle * 1_000_000 - (first - sent)
            seen[name] = (throttle, (second - first) / 1e6, bound_ns / 1e6)
        for name, (_throttle, gap_ms, bound_ms) in seen.items():
            assert gap_ms >= bound_ms, (name, seen)
    finally:
        alter_client_quota(
            kafka_broker.bootstrap, {"client-id": broker_id}, {"request_percentage": None}
        )


def _long_polls(boot: str, client_id: str, topic: str, n: int) -> list[tuple[float, int]]:
    """`n` Fetch requests (v11, max_wait_ms 300) on an empty partition, one after another:
    (latency ms, throttle_time_ms) of each."""
    import time

    from kafka.protocol.consumer import FetchRequest as F

    part = F.FetchTopic.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1024)
    req = F[11](
        replica_id=-1,
        max_wait_ms=300,
        min_bytes=1,
        max_bytes=1 << 20,
        topics=[F.FetchTopic(topic=topic, partitions=[part])],
    )
    out = []
    with KafkaWire(boot, client_id=client_id) as wire:
        for _ in range(n):
            t0 = time.monotonic()
            resp = wire.request(req)
            out.append(((time.monotonic() - t0) * 1000, int(resp.throttle_time_ms)))
            assert resp.error_code == 0
    return out


def test_a_long_poll_is_not_charged_its_wait_as_on_the_broker(
    acceptor: AcceptorHandle, kafka_broker: Any
) -> None:
    # Kafka charges a fetch its handler time, set when KafkaApis.handle returns, before the
    # DelayedFetch waits max_wait_ms in purgatory. Six back-to-back 300 ms long polls are
    # >= 100 % of a thread when charged their wall time, so a 50 % quota (halfway) throttles
    # them; the broker charges under a millisecond each and does not. The acceptor charges
    # the broker time beyond max_wait_ms (the expiry's lateness and the answer's way back:
    # 6-40 ms on the loaded 2-core machine), below 50 % unless that passes 150 ms a poll.
    import os

    from kafka.admin import KafkaAdminClient, NewTopic

    topic = f"longpoll-{os.getpid()}"
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        admin.close()
    quota = {"request_percentage": 50.0}
    mine = bootstrap(acceptor.address("CLIENT"))
    cid = {"acceptor": f"poll-acceptor-{os.getpid()}", "broker": f"poll-broker-{os.getpid()}"}
    alter_client_quota(mine, {"client-id": cid["acceptor"]}, quota)
    alter_client_quota(kafka_broker.bootstrap, {"client-id": cid["broker"]}, quota)
    try:
        wait_until(
            lambda: (
                describe_client_quotas(
                    kafka_broker.bootstrap, [("client-id", 0, cid["broker"])], strict=True
                )
                == [({"client-id": cid["broker"]}, quota)]
            ),
            timeout=30,
            what="the broker's request quota",
        )
        polls = {
            "acceptor": _long_polls(mine, cid["acceptor"], topic, 6),
            "broker": _long_polls(kafka_broker.bootstrap, cid["broker"], topic, 6),
        }
    finally:
        alter_client_quota(
            kafka_broker.bootstrap, {"client-id": cid["broker"]}, {"request_percentage": None}
        )
    for name, results in polls.items():
        assert all(ms >= 300 for ms, _ in results), (name, polls)  # they did wait
        assert [t for _, t in results] == [0] * 6, (name, polls)
    # the history says what was charged, next to the broker time (for the checker's model)
    from acceptor.testing import history_rows

    fetches = [
        r
        for r in history_rows(acceptor, "request")
        if r["client_id"] == cid["acceptor"] and r["api_key"] == 1
    ]
    assert len(fetches) == 6
    for r in fetches:
        charged = json.loads(r["detail"])["charged_ms"]
        assert 0 <= charged == pytest.approx(r["latency_ms"] - 300, abs=1e-3)
