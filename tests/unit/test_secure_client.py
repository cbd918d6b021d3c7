"""base.security.client without sockets: SCRAM against the RFC test vectors, the SASL
exchange's state transitions on canned Kafka responses, TLS over memory BIOs."""

from __future__ import annotations

import io
import ssl
from pathlib import Path

import pytest
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from base.security import client as secure
from base.security.client import SaslError, SaslSettings, ScramClient, TlsLink, TlsSettings


def test_scram_sha1_rfc5802_vector() -> None:
    c = ScramClient("sha1", "user", "pencil", nonce="fyko+d2lbbFgONRv9qkxdawL")
    assert c.client_first() == b"n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL"
    final = c.client_final(
        b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096"
    )
    assert final == (
        b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts="
    )
    c.verify_server_final(b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ=")


def test_scram_sha256_rfc7677_vector() -> None:
    c = ScramClient("sha256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert c.client_first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = c.client_final(
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    assert final == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    c.verify_server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    with pytest.raises(SaslError) as err:
        c.verify_server_final(b"v=AAAATRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    assert err.value.round == 2 and "pencil" not in str(err.value)


def test_scram_cache_and_nonce_checks() -> None:
    cache: dict[tuple[str, bytes, int], bytes] = {}
    first = b"r=abcXYZ,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    a = ScramClient("sha256", "u", "pw", nonce="abc", cache=cache)
    a.client_final(first)
    assert len(cache) == 1
    b = ScramClient("sha256", "u", "pw", nonce="abc", cache=cache)
    assert b.client_final(first) == a.client_final(first)
    assert len(cache) == 1
    with pytest.raises(SaslError, match="nonce"):
        ScramClient("sha256", "u", "pw", nonce="zzz").client_final(first)
    with pytest.raises(SaslError, match="malformed"):
        ScramClient("sha256", "u", "pw", nonce="abc").client_final(b"garbage")
    assert "pw" not in repr(a) and "pw" not in repr(SaslSettings("PLAIN", "u", "pw"))
    assert secure.scram_name("a=b,c") == "a=3Db=2Cc"


# -- the exchange on canned bytes ---------------------------------------------------------


def _split(data: bytes) -> list[bytes]:
    frames = []
    while data:
        size = int.from_bytes(data[:4], "big")
        frames.append(data[: 4 + size])
        data = data[4 + size :]
    return frames


def _handshake_response(cid: int, error: int = 0) -> bytes:
    body = bytes(
        SaslHandshakeResponse(version=1, error_code=error, mechanisms=["PLAIN"]).encode(version=1)
    )
    payload = cid.to_bytes(4, "big") + body
    return len(payload).to_bytes(4, "big") + payload


def _auth_response(cid: int, token: bytes = b"", error: int = 0) -> bytes:
    body = bytes(
        SaslAuthenticateResponse(
            version=2, error_code=error, error_message="Authentication failed" if error else None,
            auth_bytes=token, session_lifetime_ms=0,
        ).encode(version=2)
    )  # fmt: skip
    payload = cid.to_bytes(4, "big") + b"\0" + body  # response header v1: tagged fields
    return len(payload).to_bytes(4, "big") + payload


def _auth_token(frame: bytes) -> bytes:
    # request header v2: api key, version, correlation id, client id (int16 + bytes), tags
    n = int.from_bytes(frame[12:14], "big")
    req = SaslAuthenticateRequest.decode(io.BytesIO(frame[14 + n + 1 :]), version=2)
    return bytes(req.auth_bytes)


def test_plain_one_round_pipelined() -> None:
    s = SaslSettings("plain", "alice", "secret-pw", client_id="cid")
    ex = s.exchange()
    first = ex.start(7)
    hs, auth = _split(first)
    assert hs[4:6] == (17).to_bytes(2, "big") and hs[6:8] == (1).to_bytes(2, "big")
    assert hs[8:12] == (7).to_bytes(4, "big")
    n = int.from_bytes(hs[12:14], "big")
    req = SaslHandshakeRequest.decode(io.BytesIO(hs[14 + n :]), version=1)
    assert req.mechanism == "PLAIN"
    assert auth[4:6] == (36).to_bytes(2, "big") and auth[8:12] == (7).to_bytes(4, "big")
    assert _auth_token(auth) == b"\0alice\0secret-pw"
    assert ex.response(_handshake_response(7), 7) == b""
    assert ex.round == 1
    assert ex.response(_auth_response(7), 7) is None
    assert s.principal == "User:alice"


def test_plain_wrong_password_fails_round_1() -> None:
    s = SaslSettings("PLAIN", "alice", "secret-pw", fault="wrong-password")
    ex = s.exchange()
    _, auth = _split(ex.start(1))
    token = _auth_token(auth)
    assert token.startswith(b"\0alice\0") and b"secret-pw" not in token
    ex.response(_handshake_response(1), 1)
    with pytest.raises(SaslError) as err:
        ex.response(_auth_response(1, error=58), 1)
    assert (err.value.round, err.value.error_code) == (1, 58)


def test_handshake_refused_is_round_0() -> None:
    ex = SaslSettings("SCRAM-SHA-512", "alice", "pw").exchange()
    ex.start(3)
    with pytest.raises(SaslError) as err:
        ex.response(_handshake_response(3, error=33), 3)
    assert (err.value.round, err.value.error_code) == (0, 33)


@pytest.mark.parametrize("mechanism,hash_name", [("SCRAM-SHA-256", "sha256"),
                                                 ("SCRAM-SHA-512", "sha512")])  # fmt: skip
def test_scram_exchange_against_a_canned_server(mechanism: str, hash_name: str) -> None:
    import base64
    import hashlib
    import hmac

    password, salt, iters = "p4ss", b"0123456789abcdef", 4096
    s = SaslSettings(mechanism, "bob", password)
    ex = s.exchange()
    _, auth = _split(ex.start(9))
    client_first = _auth_token(auth)
    assert client_first.startswith(b"n,,n=bob,r=")
    nonce = client_first.decode().split("r=", 1)[1]
    server_first = f"r={nonce}SRV,s={base64.b64encode(salt).decode()},i={iters}".encode()
    ex.response(_handshake_response(9), 9)
    final_frame = ex.response(_auth_response(9, server_first), 9)
    assert final_frame and ex.round == 2 and ex.due == 1
    client_final = _auth_token(final_frame)
    # the server's side (RFC 5802): check the proof, answer the signature
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, iters)
    ckey = hmac.digest(salted, b"Client Key", hash_name)
    stored = hashlib.new(hash_name, ckey).digest()
    without, _, proof = client_final.decode().rpartition(",p=")
    auth_msg = f"{client_first.decode()[3:]},{server_first.decode()},{without}".encode()
    sig = hmac.digest(stored, auth_msg, hash_name)
    recovered = bytes(a ^ b for a, b in zip(base64.b64decode(proof), sig, strict=True))
    assert hashlib.new(hash_name, recovered).digest() == stored
    skey = hmac.digest(salted, b"Server Key", hash_name)
    v = base64.b64encode(hmac.digest(skey, auth_msg, hash_name))
    assert ex.response(_auth_response(9, b"v=" + v), 9) is None
    # a wrong password fails at round 2 (the broker answers 58)
    bad = SaslSettings(mechanism, "bob", password, fault="wrong-password").exchange()
    _, auth = _split(bad.start(2))
    nonce = _auth_token(auth).decode().split("r=", 1)[1]
    bad.response(_handshake_response(2), 2)
    bad.response(_auth_response(2, f"r={nonce}X,s=AAAA,i=4096".encode()), 2)
    with pytest.raises(SaslError) as err:
        bad.response(_auth_response(2, error=58), 2)
    assert (err.value.round, err.value.error_code) == (2, 58)


def test_unknown_user_and_bad_settings() -> None:
    s = SaslSettings("SCRAM-SHA-256", "alice", "pw", fault="unknown-user")
    assert s.principal == f"User:{secure.UNKNOWN_USER}"
    _, auth = _split(s.exchange().start(1))
    assert _auth_token(auth).startswith(f"n,,n={secure.UNKNOWN_USER},".encode())
    with pytest.raises(ValueError, match="GSSAPI"):
        SaslSettings("GSSAPI", "a", "b")
    with pytest.raises(ValueError, match="fault"):
        SaslSettings("PLAIN", "a", "b", fault="nope")


# -- TLS over memory BIOs ------------------------------------------------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("cryptography")
    from base.security.certs import issue, make_ca

    d = tmp_path_factory.mktemp("pki")
    ca = make_ca()
    server = issue(ca, "broker", sans=("127.0.0.1", "localhost"))
    (d / "ca.pem").write_bytes(ca.cert_pem)
    (d / "server.pem").write_bytes(server.keystore_pem(ca))
    return {"ca": d / "ca.pem", "server": d / "server.pem"}


def _pump(client: TlsLink, server: ssl.SSLObject, sin: ssl.MemoryBIO, sout: ssl.MemoryBIO) -> bool:
    done = False
    for _ in range(20):
        done = client.handshake()
        sin.write(client.outgoing())
        try:
            server.do_handshake()
        except ssl.SSLWantReadError:
            pass
        client.feed(sout.read())
        if done:
            return True
    return done


def _server(pki: dict[str, Path]) -> tuple[ssl.SSLObject, ssl.MemoryBIO, ssl.MemoryBIO]:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pki["server"])
    sin, sout = ssl.MemoryBIO(), ssl.MemoryBIO()
    return ctx.wrap_bio(sin, sout, server_side=True), sin, sout


def test_tls_link_handshake_and_data(pki: dict[str, Path]) -> None:
    settings = TlsSettings(cafile=str(pki["ca"]))
    link = TlsLink(settings.context, "127.0.0.1")
    server, sin, sout = _server(pki)
    assert _pump(link, server, sin, sout)
    assert link.info()["tls_version"] in ("TLSv1.2", "TLSv1.3")
    sin.write(link.write(b"hello"))
    assert server.read(5) == b"hello"
    server.write(b"world")
    link.feed(sout.read())
    assert link.read() == b"world"
    assert link.read() == b""


def test_tls_session_is_resumed_when_offered(pki: dict[str, Path]) -> None:
    settings = TlsSettings(cafile=str(pki["ca"]), resume=True)
    sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    sctx.load_cert_chain(pki["server"])
    session = None
    reused = []
    for _ in range(2):
        link = TlsLink(settings.context, "127.0.0.1", session)
        sin, sout = ssl.MemoryBIO(), ssl.MemoryBIO()
        server = sctx.wrap_bio(sin, sout, server_side=True)
        assert _pump(link, server, sin, sout)
        server.write(b"x")  # TLS 1.3: the session ticket comes after the handshake
        link.feed(sout.read())
        assert link.read() == b"x"
        reused.append(link.info()["resumed"])
        session = link.obj.session
        assert session is not None and session.has_ticket
    assert reused == [False, True]


def test_tls_link_hostname_mismatch_fails(pki: dict[str, Path]) -> None:
    settings = TlsSettings(cafile=str(pki["ca"]))
    link = TlsLink(settings.context, "other.example")
    server, sin, sout = _server(pki)
    with pytest.raises(ssl.SSLCertVerificationError) as err:
        _pump(link, server, sin, sout)
    assert "certificate" in secure.tls_error(err.value)


def test_tls_link_eof_during_handshake() -> None:
    link = TlsLink(TlsSettings(check_hostname=False).context, None)
    assert not link.handshake()
    hello = link.outgoing()
    assert hello[:1] == b"\x16"  # a TLS handshake record: the ClientHello
    link.feed_eof()
    with pytest.raises(ssl.SSLError):
        link.handshake()
