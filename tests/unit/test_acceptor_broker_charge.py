"""The broker's request-log lines as the acceptor reads them (acceptor.broker_charge):
the sans-IO parser on bytes, and the file tail with a time-injected hold."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from acceptor.broker_charge import (
    LoggedRequest,
    RequestLog,
    RequestLogParser,
    kafka_address,
    network_estimate,
    parse_line,
)
from acceptor.charge import Logged, decide
from acceptor.tracker import Completed

#: a real Kafka 4.3.1 line (kafka.request.logger at DEBUG, pattern %m%n)
REAL = (
    b'Completed request:{"isForwarded":false,"requestHeader":{"requestApiKey":3,'
    b'"requestApiVersion":12,"correlationId":1,"clientId":"harness-broker-probe",'
    b'"requestApiKeyName":"METADATA"},"request":{"topics":[],"allowAutoTopicCreation":false,'
    b'"includeTopicAuthorizedOperations":false},"response":{"throttleTimeMs":0,"brokers":'
    b'[{"nodeId":1,"host":"127.0.0.1","port":40567,"rack":null}],"clusterId":'
    b'"LkVd5T6oRQ-ee-uzVICT_A","controllerId":1,"topics":[]},"connection":'
    b'"127.0.0.1:40567-127.0.0.1:57384-0-0","totalTimeMs":8.626,"requestQueueTimeMs":0.607,'
    b'"localTimeMs":7.831,"remoteTimeMs":0.0,"throttleTimeMs":0,"responseQueueTimeMs":0.061,'
    b'"sendTimeMs":0.125,"securityProtocol":"PLAINTEXT","principal":"User:ANONYMOUS",'
    b'"listener":"PLAINTEXT","clientInformation":{"softwareName":"harness",'
    b'"softwareVersion":"0.1.0"}}'
)


def line(cid: int, remote: str, local_ms: str, send_ms: str = "0.01", client: str = "c") -> bytes:
    return (
        b'Completed request:{"isForwarded":false,"requestHeader":{"requestApiKey":18,'
        b'"requestApiVersion":3,"correlationId":'
        + str(cid).encode()
        + b',"clientId":"'
        + client.encode()
        + b'","requestApiKeyName":"API_VERSIONS"},"request":{},'
        b'"response":{"errorCode":0},"connection":"127.0.0.1:9092-'
        + remote.encode()
        + b'-1-7","totalTimeMs":1.0,"requestQueueTimeMs":0.1,"localTimeMs":'
        + local_ms.encode()
        + b',"remoteTimeMs":0.0,"throttleTimeMs":0,'
        b'"responseQueueTimeMs":0.01,"sendTimeMs":' + send_ms.encode() + b',"listener":"P"}'
    )


def test_a_real_line_gives_the_remote_the_correlation_id_and_the_handler_time() -> None:
    assert parse_line(REAL) == LoggedRequest("127.0.0.1:57384", 1, 3, 7_831_000, 125_000, 8_626_000)


def test_the_network_estimate_is_the_send_time_that_fits_before_the_response_came() -> None:
    # total 1 ms, of which send 0.2 ms: 0.8 ms passed before the response was dequeued
    logged = LoggedRequest("a:1", 1, 3, 100_000, 200_000, 1_000_000)
    assert network_estimate(logged, 5_000_000) == 200_000  # a slow hop: all of it
    assert network_estimate(logged, 900_000) == 100_000  # the rest came after the bytes left
    assert network_estimate(logged, 700_000) == 0  # (clocks: never negative)


@pytest.mark.parametrize(
    ("text", "ns"), [("0.0", 0), ("0.001", 1000), ("12.5", 12_500_000), ("1.0E-3", 1000)]
)
def test_local_time_is_read_to_the_microsecond_whatever_the_number_form(text: str, ns: int) -> None:
    parsed = parse_line(line(5, "127.0.0.1:1", text))
    assert parsed is not None and parsed.local_ns == ns


def test_a_client_chosen_string_cannot_fake_the_connection_or_the_time() -> None:
    # inside a JSON string quotes are escaped: the real top-level fields come last
    sneaky = 'x\\",\\"connection\\":\\"1.2.3.4:1-6.6.6.6:6-0-0\\",\\"localTimeMs\\":999'
    parsed = parse_line(line(9, "127.0.0.1:4000", "0.004", client=sneaky))
    assert parsed == LoggedRequest("127.0.0.1:4000", 9, 18, 4000, 10_000, 1_000_000)


@pytest.mark.parametrize(
    "bad",
    [
        b"",
        b"[2026-11-24 01:00:00] INFO something else (kafka.server)",
        REAL.replace(b"Completed request:", b"Completed:"),
        REAL.replace(b'"localTimeMs":7.831,', b""),
        REAL.replace(b"127.0.0.1:40567-127.0.0.1:57384-0-0", b"nonsense"),
        REAL.replace(b'"correlationId":1,', b""),
        REAL.replace(b"7.831", b"7.8.3"),
    ],
)
def test_other_or_damaged_lines_are_skipped(bad: bytes) -> None:
    assert parse_line(bad) is None


def test_the_parser_keeps_a_partial_line_until_its_end_comes() -> None:
    p = RequestLogParser()
    a, b = line(1, "127.0.0.1:1", "0.002"), line(2, "127.0.0.1:1", "0.003")
    data = a + b"\n" + b + b"\n"
    cut = len(a) + 40
    first = p.feed(data[:cut])
    second = p.feed(data[cut:])
    assert [r.correlation_id for r in first] == [1]
    assert [(r.correlation_id, r.local_ns) for r in second] == [(2, 3000)]
    assert p.feed(b"") == []


def test_the_parser_filters_by_remote_before_parsing() -> None:
    p = RequestLogParser()
    data = b"\n".join([line(1, "127.0.0.1:1", "1"), line(2, "127.0.0.1:2", "2"), b"junk", b""])
    got = p.feed(data, {"127.0.0.1:2"}.__contains__)
    assert [(r.remote, r.correlation_id) for r in got] == [("127.0.0.1:2", 2)]


def test_addresses_are_written_as_kafka_writes_a_remote() -> None:
    assert kafka_address(("127.0.0.1", 5000)) == "127.0.0.1:5000"
    assert kafka_address(("::1", 5000, 0, 0)) == "0:0:0:0:0:0:0:1:5000"
    assert kafka_address(("fe80::a:1%lo", 7, 0, 1)) == "fe80:0:0:0:0:0:a:1:7"


def test_a_response_is_charged_the_logged_handler_time_not_the_wall_time() -> None:
    done = Completed(3, 13, "c", 900_000, 10, 10, 0, 7)
    charge = decide(done, "ANONYMOUS", 0, None)  # no request log read: the wall time
    assert (charge.handler_ns, charge.source, charge.network_ns) == (900_000, None, 0)
    charge = decide(done, "ANONYMOUS", 0, Logged(4000, 10_000, 250_000))
    assert (charge.handler_ns, charge.source) == (4000, "broker_log")
    assert (charge.network_ns, charge.held_ns) == (10_000, 250_000)
    charge = decide(done, "ANONYMOUS", 0, Logged(None, 10_000))  # no line: no estimate
    assert (charge.handler_ns, charge.source, charge.network_ns) == (900_000, "wall", 0)


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _append(path: Path, *lines: bytes) -> None:
    with open(path, "ab") as f:
        f.write(b"".join(x + b"\n" for x in lines))


def test_the_tail_keeps_only_registered_connections_and_follows_a_rollover(tmp_path: Path) -> None:
    path = tmp_path / "request.log"
    _append(path, line(1, "127.0.0.1:7", "9"))  # before anyone registered: nobody's
    log = RequestLog(path)
    log.register("127.0.0.1:7")
    _append(path, line(2, "127.0.0.1:7", "0.005"), line(3, "127.0.0.1:8", "0.006"))
    assert log.take("127.0.0.1:7", 1) is None
    got = log.take("127.0.0.1:7", 2)
    assert got is not None and got.local_ns == 5000
    assert log.take("127.0.0.1:7", 2) is None  # once
    assert log.take("127.0.0.1:8", 3) is None  # not registered
    os.rename(path, tmp_path / "request.log.1")  # log4j's rollover
    _append(tmp_path / "request.log.1", line(4, "127.0.0.1:7", "0.001"))
    _append(path, line(5, "127.0.0.1:7", "0.002"))
    assert log.ready("127.0.0.1:7", 5) and log.ready("127.0.0.1:7", 4)
    log.unregister("127.0.0.1:7")
    assert log.take("127.0.0.1:7", 5) is None
    log.close()


def test_no_line_is_awaited_while_the_file_does_not_exist(tmp_path: Path) -> None:
    path = tmp_path / "request.log"
    log = RequestLog(path)
    log.register("127.0.0.1:9")
    assert not log.live and not log.pending("127.0.0.1:9", 1)
    _append(path, line(1, "127.0.0.1:9", "0.002"))  # the broker started writing it
    assert log.live and log.ready("127.0.0.1:9", 1)
    log.close()


def test_a_wait_ends_when_the_line_comes_or_after_its_limit(tmp_path: Path) -> None:
    path = tmp_path / "request.log"
    path.touch()
    clock = _Clock()
    asked: list[tuple[str, str, int, int]] = []

    def near_quota(principal: str, client_id: str, api_key: int, ns: int) -> bool:
        asked.append((principal, client_id, api_key, ns))
        return ns > 1000

    log = RequestLog(path, hold_when=near_quota, hold_max_s=0.02, poll_s=0, clock=clock)
    addr = "127.0.0.1:9"
    log.register(addr)
    resumed: list[int] = []

    async def scenario() -> None:
        assert log.pending(addr, 1)
        assert log.should_hold("alice", "c", 3, 5000) and not log.should_hold("u", "c", 3, 10)
        assert asked == [("alice", "c", 3, 5000), ("u", "c", 3, 10)]
        log.wait(addr, 1, lambda: resumed.append(1))
        await asyncio.sleep(0.01)
        assert resumed == []  # still waiting, the clock has not moved
        _append(path, line(1, addr, "0.003"))
        await asyncio.sleep(0.01)
        assert resumed == [1]
        got = log.take(addr, 1)
        assert got is not None and got.local_ns == 3000
        # a line that never comes: released at the limit, then charged wall time
        for cid in (2, 3, 4):
            assert log.pending(addr, cid)
            log.wait(addr, cid, lambda c=cid: resumed.append(c))  # type: ignore[misc]
            await asyncio.sleep(0.005)
            clock.now += 0.021
            await asyncio.sleep(0.005)
            assert resumed[-1] == cid and log.take(addr, cid) is None
        assert not log.live and not log.pending(addr, 5)  # three timeouts in a row
        _append(path, line(5, addr, "0.001"))
        assert log.take(addr, 5) is not None and log.live  # a line revives it
        # a late charge outlives its connection: its line is still read
        log.wait(addr, 6, lambda: resumed.append(6), late=True)
        log.wait(addr, 7, lambda: resumed.append(7))  # a held response: dropped
        log.unregister(addr)
        _append(path, line(6, addr, "0.004"))
        await asyncio.sleep(0.01)
        assert resumed[-1] == 6 and 7 not in resumed
        assert log.take(addr, 6) is None  # forgotten once its late charge was resumed
        assert (log.held, log.late, log.timed_out, log.found) == (5, 1, 3, 2)

    asyncio.run(scenario())
    log.close()


def test_could_throttle_is_an_upper_bound_of_the_record() -> None:
    from base.quota.requests import RequestQuotas

    q = RequestQuotas(11, 1)
    assert not q.could_throttle("", "c", 3, 10**9, 0)  # no quota at all: nothing charged
    q.set_quota(None, "c", "request_percentage", 10.0)  # 100 ms per second
    assert not q.could_throttle("", "other", 3, 10**9, 0)  # no quota for this bucket
    assert not q.could_throttle("", "c", 27, 10**9, 0)  # WriteTxnMarkers: exempt
    # 10 % over the shortest window (10 of 11 samples): up to 1 s charged at once is fine
    assert not q.could_throttle("", "c", 3, 999_000_000, 0)
    assert q.could_throttle("", "c", 3, 1_001_000_000, 0)
    now = 0
    for _ in range(200):  # charges that never throttle while could_throttle says no
        ns = 9_000_000
        says = q.could_throttle("", "c", 3, ns, now)
        charge = q.record_request("", "c", 3, ns, now)
        assert says or charge.throttle_ms == 0
        now += 37
    assert says  # and near the quota it says it could


def test_could_throttle_leaves_the_meter_as_the_charges_made_it() -> None:
    """Asking whether a charge could throttle must not change later throttles: before, the
    question made the bucket's meter (its first window starting at the question, not at the
    first charge) and purged it at times no charge was made, which moved where later
    windows start; the checker's replay of the charges then disagreed by a few ms
    (selftest: clean `request-quota-two-entities` failed `request_quota_model`)."""
    from base.quota.requests import RequestQuotas

    def throttles(ask: bool) -> list[int]:
        q = RequestQuotas(11, 1)
        q.set_quota(None, "c", "request_percentage", 1.0)  # 10 ms per second
        out = []
        # asked before the first charge (no meter yet), and after 11 s of silence (every
        # sample of the first charges expired), each time a little before the charge
        for ask_at, at in ((0, 700), (800, 900), (12_300, 12_900), (13_000, 13_100)):
            if ask:
                q.could_throttle("", "c", 0, 5_000_000, ask_at)
            out.append(q.record_request("", "c", 0, 105_000_000, at).throttle_ms)
        return out

    assert throttles(ask=True) == throttles(ask=False)
    assert any(throttles(ask=False))  # the charges throttle: the windows matter
