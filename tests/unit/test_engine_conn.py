"""The storm engine's connections driven through `engine_conn.TRANSITIONS` with no socket
and no real time: a fake clock, a fake epoll, and scripted sockets whose peer answers as
Kafka (kafka-python's response classes), over TLS (a server `SSLObject` on memory BIOs) and
SASL where asked, or misbehaves as told.

Each scenario is a plain function returning its engine (with its trace of steps) and the
rows it wrote; the tests assert outcomes and rows, the fake history checks every row a
connection writes against the row of the step that wrote it (`Rows.row`), and
`test_every_row_is_exercised` runs them all and fails on a row of the table none of them
took.
"""

from __future__ import annotations

import errno
import json
import re
import ssl
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest
from kafka.protocol.metadata import ApiVersionsResponse, MetadataResponse
from kafka.protocol.producer import ProduceResponse
from kafka.protocol.sasl import SaslAuthenticateResponse, SaslHandshakeResponse

from base.history.events import conformance
from base.history.rows import FIELDS, Row
from base.history.writer import encode_detail
from base.security.client import SaslSettings, TlsSettings
from loadprofiles.engine import EngineConfig, StormEngine
from loadprofiles.engine_conn import TRANSITIONS, Input, State, TransitionError, Write

pytestmark = pytest.mark.unit

MS = 1_000_000
IN, OUT = 0x001, 0x004  # EPOLLIN, EPOLLOUT


# -- Kafka's answers -------------------------------------------------------------------------
def _frame(body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + body


def api_versions(cid: int, error: int = 0, throttle: int = 0) -> bytes:
    version = ApiVersionsResponse.ApiVersion
    resp = ApiVersionsResponse(
        version=3,
        error_code=error,
        api_keys=[
            version(api_key=18, min_version=0, max_version=4),
            version(api_key=3, min_version=0, max_version=12),
            version(api_key=0, min_version=0, max_version=12),
        ],
        throttle_time_ms=throttle,
    )
    return _frame(cid.to_bytes(4, "big") + bytes(resp.encode(version=3)))


def metadata(cid: int, throttle: int = 0) -> bytes:
    resp = MetadataResponse(version=12, throttle_time_ms=throttle, brokers=[], cluster_id=None,
                            controller_id=-1, topics=[])  # fmt: skip
    return _frame(cid.to_bytes(4, "big") + b"\0" + bytes(resp.encode(version=12)))


def produce(cid: int, error: int = 0) -> bytes:
    t = ProduceResponse.TopicProduceResponse
    part = t.PartitionProduceResponse(index=0, error_code=error, base_offset=0,
                                      log_append_time_ms=-1, log_start_offset=0,
                                      record_errors=[], error_message=None)  # fmt: skip
    resp = ProduceResponse(version=12, responses=[t(name="lp", partition_responses=[part])],
                           throttle_time_ms=0)  # fmt: skip
    return _frame(cid.to_bytes(4, "big") + b"\0" + bytes(resp.encode(version=12)))


def sasl_handshake(cid: int, error: int = 0) -> bytes:
    resp = SaslHandshakeResponse(version=1, error_code=error, mechanisms=["PLAIN"])
    return _frame(cid.to_bytes(4, "big") + bytes(resp.encode(version=1)))


def sasl_authenticate(cid: int, error: int = 0, token: bytes = b"") -> bytes:
    resp = SaslAuthenticateResponse(version=2, error_code=error, error_message=None,
                                    auth_bytes=token, session_lifetime_ms=0)  # fmt: skip
    return _frame(cid.to_bytes(4, "big") + b"\0" + bytes(resp.encode(version=2)))


# -- the fakes ---------------------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.ns = 1_000 * MS

    def __call__(self) -> int:
        return self.ns


class Peer:
    """The broker end of one socket: Kafka that answers each request frame, or what a
    scenario tells it (`after`: what follows each request: "serve", "silent", "eof",
    "reset", "bad_cid", or "serve_then_eof")."""

    connect_result = errno.EINPROGRESS
    so_error = 0
    connects = True  # the connect completes at the first poll
    after = "serve"
    proxy = False  # a PROXY v1 header comes first
    sasl_error: tuple[int, int] | None = None  # (round, error code)
    #: per send call, in order: bytes taken (None: all), or an exception raised
    sends: ClassVar[list[int | BaseException | None]] = []
    peername: BaseException | None = None

    def __init__(self, sock: Sock) -> None:
        self.sock = sock
        self.buf = b""
        self.script = list(type(self).sends)
        self.sasl_round = 0

    # the socket's calls
    def send(self, data: bytes) -> int:
        step = self.script.pop(0) if self.script else None
        if isinstance(step, BaseException):
            raise step
        n = len(data) if step is None else min(step, len(data))
        if n == 0:
            raise BlockingIOError
        self.take(data[:n])
        return n

    def take(self, data: bytes) -> None:
        self.requests(data)

    def requests(self, data: bytes) -> None:
        self.buf += data
        if self.proxy:
            head, sep, rest = self.buf.partition(b"\r\n")
            if not sep:
                return
            assert head.startswith(b"PROXY TCP4 ")
            self.sock.proxy_header = head
            self.buf, self.proxy = rest, False
        while len(self.buf) >= 4 and len(self.buf) >= 4 + int.from_bytes(self.buf[:4], "big"):
            end = 4 + int.from_bytes(self.buf[:4], "big")
            frame, self.buf = self.buf[:end], self.buf[end:]
            self.request(frame)

    def request(self, frame: bytes) -> None:
        api, cid = int.from_bytes(frame[4:6], "big"), int.from_bytes(frame[8:12], "big")
        self.sock.apis.append(api)
        after = self.after
        if after == "silent":
            return
        if after in ("eof", "reset"):
            self.reply(b"" if after == "eof" else ConnectionResetError(errno.ECONNRESET, "reset"))
            return
        if after == "bad_cid":
            cid += 1
        self.reply(self.answer(api, cid, frame))
        if after == "serve_then_eof" and api != 18:
            self.reply(b"")

    def answer(self, api: int, cid: int, frame: bytes) -> bytes:
        if api == 17:
            self.sasl_round = 0
            return sasl_handshake(cid, self._sasl_error(0))
        if api == 36:
            self.sasl_round += 1
            error = self._sasl_error(self.sasl_round)
            nonce = re.search(rb"r=([A-Za-z0-9+/=]+)", frame)
            if error or nonce is None or self.sasl_round > 1:
                return sasl_authenticate(cid, error)
            first = b"r=" + nonce.group(1) + b"srv,s=" + b"c2FsdA==" + b",i=4096"
            return sasl_authenticate(cid, 0, first)
        if api == 18:
            return api_versions(cid)
        if api == 0:
            return produce(cid)
        return metadata(cid)

    def _sasl_error(self, rnd: int) -> int:
        return self.sasl_error[1] if self.sasl_error and self.sasl_error[0] == rnd else 0

    def reply(self, item: bytes | BaseException) -> None:
        self.sock.inbox.append(item)


class TlsPeer(Peer):
    """Kafka behind TLS: a server `SSLObject` on memory BIOs."""

    context: ssl.SSLContext
    #: what the server does with the ClientHello: "handshake", "silent", "eof"
    hello = "handshake"

    def __init__(self, sock: Sock) -> None:
        super().__init__(sock)
        self.sin, self.sout = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.obj = self.context.wrap_bio(self.sin, self.sout, server_side=True)
        self.done = False

    def take(self, data: bytes) -> None:
        if not self.done and self.hello != "handshake":
            if self.hello == "eof":
                self.reply(b"")
            self.hello = "silent"
            return
        self.sin.write(data)
        if not self.done:
            try:
                self.obj.do_handshake()
                self.done = True
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLError:
                self.hello = "silent"
        if self.done:
            try:
                plain = self.obj.read(65536)
            except (ssl.SSLWantReadError, ssl.SSLZeroReturnError):
                plain = b""
            if plain:
                self.requests(plain)
        self.flush()

    def reply(self, item: bytes | BaseException) -> None:
        if isinstance(item, bytes) and item:
            self.obj.write(item)
            self.flush()
        else:
            super().reply(item)

    def flush(self) -> None:
        out = self.sout.read()
        if out:
            self.sock.inbox.append(out)


class Sock:
    """A non-blocking socket as the engine uses it; its peer decides what happens."""

    def __init__(self, net: Net, fd: int) -> None:
        self.net = net
        self.fd = fd
        self.inbox: deque[bytes | BaseException] = deque()
        self.apis: list[int] = []
        self.closed = False
        self.proxy_header = b""
        self.peer = net.peer(self)

    def setsockopt(self, *_: Any) -> None:
        pass

    def bind(self, _: Any) -> None:
        pass

    def fileno(self) -> int:
        return self.fd

    def connect_ex(self, _: Any) -> int:
        return self.peer.connect_result

    def getsockname(self) -> tuple[str, int]:
        return "127.0.0.1", 40_000 + self.fd

    def getpeername(self) -> tuple[str, int]:
        if self.peer.peername is not None:
            raise self.peer.peername
        return "127.0.0.1", 9092

    def getsockopt(self, *_: Any) -> int:
        return self.peer.so_error

    def send(self, data: bytes) -> int:
        return self.peer.send(bytes(data))

    def recv(self, _: int) -> bytes:
        if not self.inbox:
            raise BlockingIOError
        item = self.inbox.popleft()
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        self.closed = True

    def ready(self, mask: int, engine: StormEngine) -> int:
        c = engine._conns.get(self.fd)
        ev = 0
        if mask & OUT and (c is None or c.state is not State.CONNECTING or self.peer.connects):
            script = self.peer.script
            ev |= OUT if not script or script[0] != 0 else 0
        if mask & IN and self.inbox:
            ev |= IN
        return ev


class Net:
    """The fake kernel: sockets made with `peer`, an epoll over them, the clock it moves
    (each poll with nothing ready sleeps its whole timeout; one with events, 0.1 ms)."""

    def __init__(self, peer: type[Peer], stop_in: State | None = None) -> None:
        self.peer = peer
        self.clock = Clock()
        self.socks: list[Sock] = []
        self.watched: dict[int, int] = {}
        self.engine: StormEngine | None = None
        self.stop_in = stop_in

    def socket(self) -> Sock:
        sock = Sock(self, 10 + len(self.socks))
        self.socks.append(sock)
        return sock

    def epoll(self) -> Net:
        return self

    def register(self, fd: int, mask: int) -> None:
        assert fd not in self.watched
        self.watched[fd] = mask

    def modify(self, fd: int, mask: int) -> None:
        assert fd in self.watched
        self.watched[fd] = mask

    def unregister(self, fd: int) -> None:
        del self.watched[fd]

    def close(self) -> None:
        pass

    def poll(self, timeout_s: float) -> list[tuple[int, int]]:
        engine = self.engine
        assert engine is not None
        if self.stop_in is not None and any(
            c.state is self.stop_in for c in engine._conns.values()
        ):
            engine.stop()
            return []
        by_fd = {s.fd: s for s in self.socks if not s.closed}
        ready = [
            (fd, ev)
            for fd, mask in self.watched.items()
            if fd in by_fd and (ev := by_fd[fd].ready(mask, engine))
        ]
        self.clock.ns += MS // 10 if ready else round(timeout_s * 1e9)
        return ready


class Rows:
    """ClientHistory as the engine calls it: each connection's row is checked against the
    row of `TRANSITIONS` its last step took."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.engine: StormEngine | None = None

    def append(self, row: Row) -> None:
        r = dict(zip(FIELDS, row, strict=True))
        r["detail"] = encode_detail(r["detail"])  # as stored
        event, conn_id = r["event"], r["conn_id"]
        assert event is not None and row[0] is None  # ts derived from mono_ns at the flush
        if conn_id is not None:
            assert self.engine is not None and self.engine.trace is not None
            steps = [t for t in self.engine.trace if t[0] == conn_id]
            assert steps, f"{event} before any step of {conn_id}"
            _, before, inp, _ = steps[-1]
            writes = TRANSITIONS[(before, inp)].writes
            assert Write(_event(event)) in writes, f"{event} is no write of {before}, {inp}"
        self.rows.append({**r, "source": "client"})

    def seal(self) -> None:
        pass

    def of(self, event: str) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["event"] == event]

    def closed(self) -> dict[str, Any]:
        (row,) = self.of("closed")
        return {"reason": row["reason"], **json.loads(row["detail"])}


def _event(name: str) -> Any:
    from base.history.events import event

    return event("client", name)


class Run:
    def __init__(self, engine: StormEngine, rows: Rows, net: Net) -> None:
        self.engine, self.rows, self.net = engine, rows, net
        self.trace = engine.trace or []

    @property
    def steps(self) -> list[tuple[State, Input, State]]:
        return [(a, i, b) for _, a, i, b in self.trace]

    @property
    def sock(self) -> Sock:
        return self.net.socks[0]


def run(peer: type[Peer], stop_in: State | None = None, arrivals: int = 1, **cfg: Any) -> Run:
    net = Net(peer, stop_in)
    rows = Rows()
    config = EngineConfig(host="127.0.0.1", port=9092, max_lag_ms=1e9, connect_timeout_s=0.05,
                          request_timeout_s=0.05, **cfg)  # fmt: skip
    engine = StormEngine(config, rows, conn_prefix="t-", clock=net.clock,  # type: ignore[arg-type]
                         new_socket=net.socket, epoll=net.epoll)  # fmt: skip
    engine.trace = []
    net.engine = rows.engine = engine
    engine.run([(k, k * 0.001) for k in range(arrivals)], net.clock.ns)
    assert conformance(rows.rows) == []
    return Run(engine, rows, net)


def peer(**attrs: Any) -> type[Peer]:
    base = attrs.pop("base", Peer)
    return type("ScriptedPeer", (base,), attrs)


S, I = State, Input  # noqa: E741


# -- the pki for TLS ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("cryptography")
    from base.security.certs import issue, make_ca

    d = tmp_path_factory.mktemp("pki")
    ca, other = make_ca(), make_ca("another CA")
    server = issue(ca, "broker", sans=("127.0.0.1", "localhost"))
    (d / "ca.pem").write_bytes(ca.cert_pem)
    (d / "other.pem").write_bytes(other.cert_pem)
    (d / "server.pem").write_bytes(server.keystore_pem(ca))
    return {"ca": d / "ca.pem", "other": d / "other.pem", "server": d / "server.pem"}


def tls_peer(pki: dict[str, Path], tickets: int = 2, **attrs: Any) -> type[Peer]:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pki["server"])
    ctx.num_tickets = tickets
    return peer(base=TlsPeer, context=ctx, **attrs)


def tls(pki: dict[str, Path], ca: str = "ca", **kw: Any) -> TlsSettings:
    return TlsSettings(cafile=str(pki[ca]), **kw)


PLAIN = SaslSettings(mechanism="PLAIN", user="alice", password="secret")


# -- scenarios: plaintext ----------------------------------------------------------------------
def served(shape: str = "storm", **cfg: Any) -> Run:
    return run(Peer, shape=shape, **cfg)


def test_a_storm_connection_is_served_with_every_row_in_order() -> None:
    r = served()
    assert [x["event"] for x in r.rows.rows if x["conn_id"]] == [
        "connect_invoke", "connect_ok", "ready", "request_ok", "request_ok", "closed",
    ]  # fmt: skip
    assert r.steps == [
        (S.NEW, I.INVOKED, S.CONNECTING),
        (S.CONNECTING, I.CONNECTED, S.UP),
        (S.UP, I.SENT, S.AWAITING),
        (S.AWAITING, I.ANSWERED, S.UP),
        (S.UP, I.SENT, S.AWAITING),
        (S.AWAITING, I.ANSWERED, S.UP),
        (S.UP, I.FINISH, S.DONE),
    ]
    assert r.sock.apis == [18, 3] and r.sock.closed
    assert r.rows.closed()["outcome"] == "served"


def test_the_produce_shape_sends_one_record_after_apiversions() -> None:
    r = served("produce")
    assert r.sock.apis == [18, 0]
    assert r.rows.closed()["outcome"] == "served"


def test_a_connect_answered_at_once_needs_no_poll() -> None:
    r = run(peer(connect_result=0), shape="connect")
    assert r.steps == [
        (S.NEW, I.INVOKED, S.CONNECTING),
        (S.CONNECTING, I.CONNECTED, S.UP),
        (S.UP, I.FINISH, S.DONE),
    ]
    assert r.rows.closed()["outcome"] == "connected"


@pytest.mark.parametrize(
    ("script", "inp", "reason"),
    [
        ({"connect_result": errno.ECONNREFUSED}, I.CONNECT_FAILED, "refused"),
        ({"so_error": errno.ECONNREFUSED}, I.CONNECT_FAILED, "refused"),
        ({"so_error": errno.ECONNRESET}, I.CONNECT_FAILED, "reset"),
        ({"connects": False}, I.TIMEOUT, "timeout"),
    ],
)
def test_a_failed_connect_is_its_connect_fail(
    script: dict[str, Any], inp: Input, reason: str
) -> None:
    r = run(peer(**script))
    assert r.steps[-1] == (S.CONNECTING, inp, S.DONE)
    (fail,) = r.rows.of("connect_fail")
    assert fail["reason"] == reason
    assert r.rows.closed()["outcome"] == reason


@pytest.mark.parametrize(
    ("after", "reason", "outcome"),
    [
        ("eof", "eof", "eof_after_accept"),
        ("reset", "reset", "eof_after_accept"),
        ("bad_cid", "reset", "eof_after_accept"),
        ("silent", "timeout", "timeout"),
    ],
)
def test_a_request_that_fails_is_its_request_fail(after: str, reason: str, outcome: str) -> None:
    r = run(peer(after=after))
    inp = I.TIMEOUT if after == "silent" else I.FAILED
    assert r.steps[-1] == (S.AWAITING, inp, S.DONE)
    (fail,) = r.rows.of("request_fail")
    assert fail["reason"] == reason and fail["api_key"] == 18
    closed = r.rows.closed()
    assert closed["outcome"] == outcome
    if after == "bad_cid":
        assert closed["errors"] == ["correlation id mismatch"]


def test_a_partly_sent_request_is_sent_when_the_socket_takes_it() -> None:
    r = run(peer(sends=[10, None]))
    assert (S.UP, I.SENT_PART, S.SENDING) in r.steps
    assert (S.SENDING, I.SENT, S.AWAITING) in r.steps
    assert r.rows.closed()["outcome"] == "served"


@pytest.mark.parametrize(
    ("sends", "inp", "reason"),
    [
        ([10, BrokenPipeError(errno.EPIPE, "pipe")], I.FAILED, "reset"),
        ([10, 0], I.TIMEOUT, "timeout"),
    ],
)
def test_a_request_stuck_half_sent_fails(sends: list[Any], inp: Input, reason: str) -> None:
    r = run(peer(sends=sends))
    assert r.steps[-1] == (S.SENDING, inp, S.DONE)
    assert r.rows.of("request_fail")[0]["reason"] == reason


def test_a_send_refused_at_once_fails_the_request_from_up() -> None:
    r = run(peer(sends=[BrokenPipeError(errno.EPIPE, "pipe")]))
    assert r.steps[-1] == (S.UP, I.FAILED, S.DONE)
    assert r.rows.closed()["reason"] == "reset"


def test_a_hold_keeps_the_connection_open_then_closes_it_done() -> None:
    r = run(Peer, hold_ms=20.0)
    assert (S.UP, I.HOLD, S.HOLDING) in r.steps
    assert r.steps[-1] == (S.HOLDING, I.TIMEOUT, S.DONE)
    closed = r.rows.of("closed")[0]
    assert closed["mono_ns"] - r.rows.of("request_ok")[-1]["mono_ns"] >= 20 * MS
    assert r.rows.closed()["outcome"] == "served"


def test_a_server_close_during_the_hold_is_noted_and_the_hold_kept() -> None:
    r = run(peer(after="serve_then_eof"), hold_ms=20.0)
    assert (S.HOLDING, I.PEER_CLOSED, S.HOLDING) in r.steps
    assert r.steps[-1] == (S.HOLDING, I.TIMEOUT, S.DONE)
    assert r.rows.closed()["outcome"] == "served"


# -- PROXY -----------------------------------------------------------------------------------
def test_a_proxy_header_claims_the_client_address_before_any_request() -> None:
    r = run(peer(proxy=True), proxy_protocol="v1", proxy_client_ips=("198.18.0.7",))
    assert r.sock.proxy_header == b"PROXY TCP4 198.18.0.7 127.0.0.1 40010 9092"
    invoke = r.rows.of("connect_invoke")[0]
    assert invoke["client_ip"] == "198.18.0.7"
    assert r.rows.closed()["outcome"] == "served"


@pytest.mark.parametrize(
    ("script", "cfg", "reason", "error"),
    [
        ({"peername": OSError(errno.ENOTCONN, "gone")}, {}, "eof", "PROXY header"),
        ({}, {"proxy_client_ips": ("::1",)}, "reset", "PROXY header: "),
    ],
)
def test_a_proxy_header_that_cannot_go_fails_the_request(
    script: dict[str, Any], cfg: dict[str, Any], reason: str, error: str
) -> None:
    r = run(peer(**script), proxy_protocol="v1", **cfg)
    assert r.steps[-1] == (S.UP, I.FAILED, S.DONE)
    closed = r.rows.closed()
    assert closed["reason"] == reason and closed["errors"][0].startswith(error)


# -- SASL ---------------------------------------------------------------------------------------
def test_a_plain_login_is_pipelined_then_the_shape_runs() -> None:
    r = run(Peer, sasl=PLAIN)
    assert r.sock.apis == [17, 36, 18, 3]
    assert (S.AWAITING, I.SASL_PENDING, S.AWAITING) in r.steps
    assert (S.AWAITING, I.SASL_DONE, S.UP) in r.steps
    (done,) = r.rows.of("sasl_done")
    assert json.loads(done["detail"])["rounds"] == 1 and done["api_key"] == 36
    closed = r.rows.closed()
    assert closed["outcome"] == "served" and closed["principal"] == "User:alice"


def test_a_refused_login_is_its_sasl_fail() -> None:
    r = run(peer(sasl_error=(1, 58)), sasl=PLAIN)
    assert r.steps[-1] == (S.AWAITING, I.SASL_FAILED, S.DONE)
    fail = json.loads(r.rows.of("sasl_fail")[0]["detail"])
    assert fail["error_code"] == 58 and fail["round"] == 1
    assert r.rows.closed()["outcome"] == "auth_failed"


def test_a_scram_login_sends_its_second_round() -> None:
    scram = SaslSettings(mechanism="SCRAM-SHA-256", user="alice", password="secret")
    r = run(peer(sasl_error=(2, 58)), sasl=scram)
    assert (S.AWAITING, I.SASL_ROUND, S.UP) in r.steps
    assert r.sock.apis == [17, 36, 36]
    assert json.loads(r.rows.of("sasl_fail")[0]["detail"])["round"] == 2


# -- TLS ----------------------------------------------------------------------------------------
def test_a_tls_storm_connection_is_served(pki: dict[str, Path]) -> None:
    r = run(tls_peer(pki), tls=tls(pki))
    assert [s for s in r.steps if s[0] is S.UP or s[0] is S.HANDSHAKING][:2] == [
        (S.UP, I.TLS_START, S.HANDSHAKING),
        (S.HANDSHAKING, I.HANDSHAKE_DONE, S.UP),
    ]
    assert r.sock.apis == [18, 3]
    assert json.loads(r.rows.of("tls_done")[0]["detail"])["tls_version"] == "TLSv1.3"
    assert r.rows.closed()["outcome"] == "served"


def test_a_tls13_connect_waits_for_the_session_ticket(pki: dict[str, Path]) -> None:
    r = run(tls_peer(pki), shape="connect", tls=tls(pki))
    assert r.steps[-3:] == [
        (S.UP, I.SETTLE, S.SETTLING),
        (S.SETTLING, I.SETTLED, S.UP),
        (S.UP, I.FINISH, S.DONE),
    ]
    assert r.rows.closed()["outcome"] == "connected"


def no_ticket(pki: dict[str, Path], after: str) -> Run:
    """A TLS 1.3 server that sends no session ticket, then closes ("eof") or waits."""

    class NoTicket(tls_peer(pki, tickets=0)):  # type: ignore[misc]
        def take(self, data: bytes) -> None:
            was = self.done
            super().take(data)
            if self.done and not was and after == "eof":
                self.sock.inbox.append(b"")

    return run(NoTicket, shape="connect", tls=tls(pki))


@pytest.mark.parametrize(
    ("after", "inp", "reason"),
    [("eof", I.PEER_CLOSED, "eof"), ("silent", I.TIMEOUT, "timeout")],
)
def test_a_tls13_connect_without_a_ticket_ends_on_the_close_or_the_timeout(
    pki: dict[str, Path], after: str, inp: Input, reason: str
) -> None:
    r = no_ticket(pki, after)
    assert r.steps[-1] == (S.SETTLING, inp, S.DONE)
    assert r.rows.closed()["reason"] == reason


def test_a_tls13_connect_whose_finished_cannot_go_fails_in_settling(pki: dict[str, Path]) -> None:
    # ClientHello taken, Finished held back, then the send fails
    r = run(tls_peer(pki, sends=[None, 0, BrokenPipeError(errno.EPIPE, "pipe")]),
            shape="connect", tls=tls(pki))  # fmt: skip
    assert r.steps[-1] == (S.SETTLING, I.TLS_FAILED, S.DONE)
    assert r.rows.closed()["outcome"] == "tls_failed"


def test_a_certificate_from_another_ca_fails_the_handshake(pki: dict[str, Path]) -> None:
    r = run(tls_peer(pki), tls=tls(pki, ca="other"))
    assert r.steps[-1] == (S.HANDSHAKING, I.TLS_FAILED, S.DONE)
    fail = r.rows.of("tls_fail")[0]
    assert fail["reason"] == "tls" and "certificate" in json.loads(fail["detail"])["error"]
    assert r.rows.closed()["outcome"] == "tls_failed"


@pytest.mark.parametrize(
    ("hello", "inp", "outcome"),
    [("eof", I.PEER_CLOSED, "eof_after_accept"), ("silent", I.TIMEOUT, "timeout")],
)
def test_a_handshake_the_server_drops_or_ignores(
    pki: dict[str, Path], hello: str, inp: Input, outcome: str
) -> None:
    r = run(tls_peer(pki, hello=hello), tls=tls(pki))
    assert r.steps[-1] == (S.HANDSHAKING, inp, S.DONE)
    assert r.rows.closed()["outcome"] == outcome


def test_a_stalled_client_hello_holds_the_slot_for_the_connect_timeout(
    pki: dict[str, Path],
) -> None:
    r = run(tls_peer(pki, hello="silent"), tls=tls(pki, fault="stall"))
    assert r.steps[-2:] == [(S.HANDSHAKING, I.HOLD, S.HOLDING), (S.HOLDING, I.TIMEOUT, S.DONE)]
    assert r.rows.closed()["outcome"] == "tls_stalled"


def test_a_tls_context_that_cannot_start_fails_at_tls_start(pki: dict[str, Path]) -> None:
    r = run(tls_peer(pki), tls=tls(pki), tls_server_name=".bad")  # refused by ssl
    assert r.steps[-2:] == [
        (S.UP, I.TLS_START, S.HANDSHAKING),
        (S.HANDSHAKING, I.TLS_FAILED, S.DONE),
    ]
    assert [x["event"] for x in r.rows.rows][-3:] == ["tls_start", "tls_fail", "closed"]


# -- stopped mid-run -----------------------------------------------------------------------------
def _abort_in(state: State, pki: dict[str, Path]) -> Run:
    if state is S.CONNECTING:
        return run(peer(connects=False), stop_in=state)
    if state is S.SENDING:
        return run(peer(sends=[10, 0]), stop_in=state)
    if state is S.AWAITING:
        return run(peer(after="silent"), stop_in=state)
    if state is S.HOLDING:
        return run(Peer, stop_in=state, hold_ms=20.0)
    if state is S.HANDSHAKING:
        return run(tls_peer(pki, hello="silent"), stop_in=state, tls=tls(pki))
    return run(tls_peer(pki, tickets=0), stop_in=state, shape="connect", tls=tls(pki))


WAITING = (S.CONNECTING, S.HANDSHAKING, S.SENDING, S.AWAITING, S.SETTLING, S.HOLDING)


@pytest.mark.parametrize("state", WAITING)
def test_a_stop_drops_a_waiting_connection_without_an_outcome(
    state: State, pki: dict[str, Path]
) -> None:
    r = _abort_in(state, pki)
    assert r.steps[-1] == (state, I.ABORT, S.DONE)
    assert r.engine.stats.aborted == 1 and r.rows.of("closed") == []
    assert r.sock.closed


# -- the table ---------------------------------------------------------------------------------
def test_an_input_a_state_has_no_row_for_is_a_transition_error() -> None:
    engine = StormEngine(EngineConfig(host="127.0.0.1", port=9), None)
    from loadprofiles.engine_conn import Conn

    c = Conn()
    c.conn_id, c.state = "t-0", S.AWAITING
    with pytest.raises(TransitionError, match="no step for HOLD in AWAITING"):
        engine._go(c, I.HOLD)
    engine._ep.close()


def _all_scenarios(pki: dict[str, Path]) -> list[Callable[[], Run]]:
    return [
        served,
        lambda: served("produce"),
        lambda: run(peer(connect_result=0), shape="connect"),
        lambda: run(peer(so_error=errno.ECONNREFUSED)),
        lambda: run(peer(connects=False)),
        lambda: run(peer(after="eof")),
        lambda: run(peer(after="silent")),
        lambda: run(peer(sends=[10, None])),
        lambda: run(peer(sends=[10, BrokenPipeError(errno.EPIPE, "pipe")])),
        lambda: run(peer(sends=[10, 0])),
        lambda: run(peer(sends=[BrokenPipeError(errno.EPIPE, "pipe")])),
        lambda: run(Peer, hold_ms=20.0),
        lambda: run(peer(after="serve_then_eof"), hold_ms=20.0),
        lambda: run(peer(sasl_error=(1, 58)), sasl=PLAIN),
        lambda: run(Peer, sasl=PLAIN),
        lambda: run(
            peer(sasl_error=(2, 58)),
            sasl=SaslSettings(mechanism="SCRAM-SHA-256", user="alice", password="secret"),
        ),
        lambda: run(tls_peer(pki), tls=tls(pki)),
        lambda: run(tls_peer(pki), shape="connect", tls=tls(pki)),
        lambda: no_ticket(pki, "eof"),
        lambda: no_ticket(pki, "silent"),
        lambda: run(
            tls_peer(pki, sends=[None, 0, BrokenPipeError(errno.EPIPE, "pipe")]),
            shape="connect",
            tls=tls(pki),
        ),
        lambda: run(tls_peer(pki), tls=tls(pki, ca="other")),
        lambda: run(tls_peer(pki, hello="eof"), tls=tls(pki)),
        lambda: run(tls_peer(pki, hello="silent"), tls=tls(pki)),
        lambda: run(tls_peer(pki, hello="silent"), tls=tls(pki, fault="stall")),
        *[(lambda s=s: _abort_in(s, pki)) for s in WAITING],
    ]


def test_every_row_is_exercised(pki: dict[str, Path]) -> None:
    taken: set[tuple[State, Input]] = set()
    for scenario in _all_scenarios(pki):
        taken |= {(a, i) for a, i, _ in scenario().steps}
    missing = sorted(f"{s.name} --{i.name}-->" for s, i in set(TRANSITIONS) - taken)
    assert missing == [], f"rows of TRANSITIONS no scenario took: {missing}"
