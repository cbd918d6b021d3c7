"""The storm engine's pure pieces: its response readers held to kafka-python's full decode,
its frame cutter at the edges, and the details its steps write (`closed`, `tls_fail`, the
SASL step's outcome), without a socket or a loop."""

from __future__ import annotations

import io

import pytest
from kafka.protocol.metadata import MetadataResponse
from kafka.protocol.producer import ProduceResponse
from kafka.protocol.sasl import SaslAuthenticateResponse, SaslHandshakeResponse

from base.security.client import SaslSettings
from loadprofiles.engine_conn import Conn, Input, closed_fields, sasl_step, tls_fail_fields
from loadprofiles.engine_frames import (
    API_VERSIONS_KEY,
    METADATA_KEY,
    PRODUCE_KEY,
    frame_end,
    max_versions,
    metadata_throttle,
    produce_fields,
    response_fields,
)

pytestmark = pytest.mark.unit

MS = 1_000_000


def _frame(body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + body


def metadata(throttle: int) -> bytes:
    resp = MetadataResponse(version=12, throttle_time_ms=throttle, brokers=[], cluster_id=None,
                            controller_id=-1, topics=[])  # fmt: skip
    return _frame((7).to_bytes(4, "big") + b"\0" + bytes(resp.encode(version=12)))


def produce(version: int, error: int, throttle: int) -> bytes:
    t = ProduceResponse.TopicProduceResponse
    fields = {"index": 0, "error_code": error, "base_offset": 0, "log_append_time_ms": -1,
              "log_start_offset": 0, "record_errors": [], "error_message": None}  # fmt: skip
    part = t.PartitionProduceResponse(**fields)
    resp = ProduceResponse(version=version, responses=[t(name="lp", partition_responses=[part])],
                           throttle_time_ms=throttle)  # fmt: skip
    head = b"\0" if version >= 9 else b""
    return _frame((7).to_bytes(4, "big") + head + bytes(resp.encode(version=version)))


@pytest.mark.parametrize("throttle", [0, 1, 2_000])
def test_metadata_throttle_is_read_where_the_full_decode_finds_it(throttle: int) -> None:
    frame = metadata(throttle)
    full = MetadataResponse.decode(io.BytesIO(frame[9:]), version=12)
    assert metadata_throttle(frame) == full.throttle_time_ms == throttle
    assert response_fields(METADATA_KEY, frame, 12) == (0, throttle)


def test_a_metadata_frame_too_short_for_a_throttle_reads_none() -> None:
    assert metadata_throttle(_frame(b"\0" * 8)) == 0


@pytest.mark.parametrize(("version", "error", "throttle"), [(12, 0, 0), (12, 6, 50), (8, 6, 0)])
def test_produce_fields_are_the_first_partitions_error_and_the_throttle(
    version: int, error: int, throttle: int
) -> None:
    frame = produce(version, error, throttle)
    assert produce_fields(frame, version) == (error, throttle)
    assert response_fields(PRODUCE_KEY, frame, version) == (error, throttle)


def test_a_produce_response_that_does_not_decode_is_unknown_server_error() -> None:
    assert produce_fields(_frame(b"\0" * 9 + b"\xff"), 12) == (-1, 0)


def test_response_fields_reads_apiversions_at_its_offsets() -> None:
    # error 35 (UNSUPPORTED_VERSION), no api keys, throttle 9
    body = (7).to_bytes(4, "big") + (35).to_bytes(2, "big") + b"\x01" + (9).to_bytes(4, "big")
    assert response_fields(API_VERSIONS_KEY, _frame(body), 12) == (35, 9)


def test_an_apiversions_answer_without_its_versions_learns_nothing() -> None:
    # error 0, a null array of api keys (a compact array's length 0), throttle 0, no tags
    body = (7).to_bytes(4, "big") + b"\0\0" + b"\0" + b"\0\0\0\0" + b"\0"
    assert max_versions(_frame(body)) == {}


@pytest.mark.parametrize(
    ("buf", "end"),
    [
        (b"", 0),
        (b"\0\0\0", 0),  # not even a size
        (b"\0\0\0\x04abc", 0),  # one byte short
        (b"\0\0\0\x04abcd", 8),
        (b"\0\0\0\x04abcdX", 8),  # the next frame's first byte after it
        (b"\0\0\0\0", 4),  # an empty frame
    ],
)
def test_frame_end_is_where_the_first_whole_frame_ends(buf: bytes, end: int) -> None:
    assert frame_end(buf) == end


# -- the details ---------------------------------------------------------------------------
def conn(**fields: object) -> Conn:
    c = Conn()
    c.connect_ms = c.ready_ms = c.tls_ms = c.sasl_ms = c.eof_ms = None
    c.sasl = None
    c.errors = None
    c.phase_ns = c.req_ns = 0
    for key, value in fields.items():
        setattr(c, key, value)
    return c


def test_closed_fields_carry_only_the_stages_reached() -> None:
    c = conn(connect_ms=1.23456, ready_ms=4.5)
    assert closed_fields(c, "served", "done", "storm", None, None) == {
        "outcome": "served",
        "profile": "storm",
        "connect_ms": 1.235,
        "ready_ms": 4.5,
    }


@pytest.mark.parametrize(("reason", "closed_by"), [("eof", "eof"), ("reset", "reset")])
def test_an_eof_after_accept_says_how_the_server_ended_it(reason: str, closed_by: str) -> None:
    d = closed_fields(conn(eof_ms=2.0), "eof_after_accept", reason, "storm", None, None)
    assert d["closed_by"] == closed_by and d["eof_ms"] == 2.0


def test_the_principal_is_the_sasl_users_else_the_certificates_once_tls_was_done() -> None:
    sasl = SaslSettings(mechanism="PLAIN", user="alice", password="pw").exchange()
    both = conn(sasl=sasl, tls_ms=1.0, sasl_ms=2.0)
    assert closed_fields(both, "served", "done", "p", "User:alice", "User:CN=c")["principal"] == (
        "User:alice"
    )
    tls_only = conn(tls_ms=1.0)
    assert closed_fields(tls_only, "served", "done", "p", None, "User:CN=c")["principal"] == (
        "User:CN=c"
    )
    before_tls = conn()
    assert "principal" not in closed_fields(before_tls, "refused", "refused", "p", None, "User:CN")


def test_closed_fields_keep_the_first_three_errors() -> None:
    d = closed_fields(conn(errors=["a", "b", "c", "d"]), "served", "done", "p", None, None)
    assert d["errors"] == ["a", "b", "c"]


def test_tls_fail_fields_time_the_handshake_once_begun() -> None:
    assert tls_fail_fields("x", 0, 5 * MS) == {"error": "x"}
    assert tls_fail_fields("x", 1 * MS, 3_500_000) == {"error": "x", "tls_ms": 2.5}


# -- the SASL step -----------------------------------------------------------------------------
def handshake(error: int = 0) -> bytes:
    resp = SaslHandshakeResponse(version=1, error_code=error, mechanisms=["PLAIN"])
    return _frame((1).to_bytes(4, "big") + bytes(resp.encode(version=1)))


def authenticate(error: int = 0, token: bytes = b"") -> bytes:
    resp = SaslAuthenticateResponse(version=2, error_code=error, error_message=None,
                                    auth_bytes=token, session_lifetime_ms=0)  # fmt: skip
    return _frame((1).to_bytes(4, "big") + b"\0" + bytes(resp.encode(version=2)))


def test_a_plain_login_is_pending_then_done_with_its_time() -> None:
    ex = SaslSettings(mechanism="PLAIN", user="alice", password="pw").exchange()
    ex.start(1)
    c = conn(phase_ns=10 * MS, req_ns=10 * MS)
    assert sasl_step(ex, handshake(), 1, c, 11 * MS, "User:alice") == (Input.SASL_PENDING, None)
    inp, fields = sasl_step(ex, authenticate(), 1, c, 12_500_000, "User:alice")
    assert inp is Input.SASL_DONE
    assert fields == {"mechanism": "PLAIN", "principal": "User:alice", "rounds": 1, "sasl_ms": 2.5}


def test_a_refused_handshake_fails_in_round_0_with_its_code_and_times() -> None:
    ex = SaslSettings(mechanism="PLAIN", user="alice", password="pw").exchange()
    ex.start(1)
    c = conn(phase_ns=10 * MS, req_ns=11 * MS)
    inp, (fields, error) = sasl_step(ex, handshake(33), 1, c, 14 * MS, "User:alice")
    assert inp is Input.SASL_FAILED
    assert fields["round"] == 0 and fields["error_code"] == 33
    assert fields["sasl_ms"] == 4.0 and fields["answer_ms"] == 3.0
    assert error == "SASL round 0: error 33"


def test_a_scram_server_first_is_answered_with_the_next_round() -> None:
    ex = SaslSettings(mechanism="SCRAM-SHA-256", user="alice", password="pw").exchange()
    first = ex.start(1)
    nonce = first.split(b"r=")[-1]
    c = conn()
    assert sasl_step(ex, handshake(), 1, c, MS, "User:alice")[0] is Input.SASL_PENDING
    server_first = b"r=" + nonce + b"srv,s=c2FsdA==,i=4096"
    inp, nxt = sasl_step(ex, authenticate(token=server_first), 1, c, MS, "User:alice")
    assert inp is Input.SASL_ROUND and b"c=biws,r=" in nxt
