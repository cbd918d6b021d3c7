"""Request quotas (KIP-124) at the acceptor, with KIP-219 throttling: the response carries
throttle_time_ms and the channel is muted for that long."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.acceptor import AcceptorHandle, start_in_thread
from harness.acceptor.testing import bootstrap, connect, ping, wait_until
from harness.admin.client import KafkaWire, alter_client_quota, describe_client_quotas
from harness.history import read_history


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
