"""TLS and SASL client state for the storm engine, sans-IO: bytes in, bytes out, no sockets.

* `TlsLink`: one connection's TLS over ``ssl.MemoryBIO`` (an ``ssl.SSLObject``): the engine
  feeds it what the socket read and sends what it has to send; the handshake, encryption and
  decryption never touch a socket, so they run under the engine's epoll loop.
* `SaslExchange`: one connection's SaslHandshake v1 + SaslAuthenticate v2 (PLAIN: one
  round; SCRAM-SHA-256/512: client-first, then client-final against the server-first, then
  the server-final's ``v=`` verified). Requests are kafka-python's own classes.
* `ScramClient`: RFC 5802 with ``hashlib``/``hmac``; the salted password is cached per
  (password, salt, iterations) in the `SaslSettings` of a run (the broker's salt is stable,
  so PBKDF2 runs once per user, not per connection).

Secrets: the password, the salted password, the keys and the client proof exist only in
these objects' memory. ``repr`` hides them; nothing here formats them into an exception
text or a returned error string (`SaslError` messages name the round and the Kafka error,
never a token).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import io
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36
SASL_HANDSHAKE_VERSION = 1
SASL_AUTHENTICATE_VERSION = 2
#: Kafka's SASL_AUTHENTICATION_FAILED, UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE
SASL_AUTHENTICATION_FAILED = 58
UNSUPPORTED_SASL_MECHANISM = 33
#: error_code recorded for a failure the client itself found (bad server signature...)
CLIENT_ERROR = -1

PLAIN = "PLAIN"
SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MECHANISMS = (PLAIN, *SCRAM_HASHES)
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: a user no broker has (the unknown-user fault)
UNKNOWN_USER = "harness-no-such-user"


class SaslError(Exception):
    """A failed exchange: the round (0 handshake, 1 and 2 authenticate), Kafka's error code
    and a reason without any secret."""

    def __init__(self, round_: int, error_code: int, reason: str) -> None:
        super().__init__(f"SASL round {round_}: error {error_code}: {reason}")
        self.round = round_
        self.error_code = error_code
        self.reason = reason


# -- SCRAM (RFC 5802, RFC 7677) -----------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def scram_name(name: str) -> str:
    """RFC 5802 saslname: ``=`` as ``=3D``, ``,`` as ``=2C``."""
    return name.replace("=", "=3D").replace(",", "=2C")


class ScramClient:
    """One SCRAM exchange. ``cache`` maps (password, salt, iterations) to the salted password
    (a run's cache: PBKDF2 runs once per user)."""

    __slots__ = ("_auth", "_bare", "_cache", "_hash", "_nonce", "_pw", "_salted", "user")

    def __init__(
        self,
        hash_name: str,
        user: str,
        password: str,
        *,
        nonce: str | None = None,
        cache: dict[tuple[str, bytes, int], bytes] | None = None,
    ) -> None:
        self._hash = hash_name
        self.user = user
        self._pw = password
        self._nonce = nonce if nonce is not None else _b64(os.urandom(18))
        self._cache = cache if cache is not None else {}
        self._bare = f"n={scram_name(user)},r={self._nonce}"
        self._auth = ""
        self._salted = b""

    def __repr__(self) -> str:
        return f"ScramClient({self._hash}, user={self.user!r})"

    def client_first(self) -> bytes:
        return ("n,," + self._bare).encode()

    def client_final(self, server_first: bytes) -> bytes:
        """The client-final message (with the proof) for the server-first message."""
        try:
            text = server_first.decode()
            attrs = dict(part.split("=", 1) for part in text.split(","))
            nonce, salt, iters = attrs["r"], base64.b64decode(attrs["s"]), int(attrs["i"])
        except (UnicodeDecodeError, ValueError, KeyError) as exc:
            raise SaslError(
                1, CLIENT_ERROR, f"malformed server-first ({type(exc).__name__})"
            ) from None
        if "e" in attrs:
            raise SaslError(1, CLIENT_ERROR, f"server error {attrs['e']}")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise SaslError(1, CLIENT_ERROR, "server nonce does not extend the client nonce")
        key = (self._pw, salt, iters)
        salted = self._cache.get(key)
        if salted is None:
            salted = hashlib.pbkdf2_hmac(self._hash, self._pw.encode(), salt, iters)
            self._cache[key] = salted
        self._salted = salted
        without_proof = f"c=biws,r={nonce}"
        self._auth = f"{self._bare},{text},{without_proof}"
        client_key = hmac.digest(salted, b"Client Key", self._hash)
        stored_key = hashlib.new(self._hash, client_key).digest()
        signature = hmac.digest(stored_key, self._auth.encode(), self._hash)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        return f"{without_proof},p={_b64(proof)}".encode()

    def verify_server_final(self, server_final: bytes) -> None:
        try:
            text = server_final.decode()
            attrs = dict(part.split("=", 1) for part in text.split(","))
        except (UnicodeDecodeError, ValueError):
            raise SaslError(2, CLIENT_ERROR, "malformed server-final") from None
        if "e" in attrs:
            raise SaslError(2, CLIENT_ERROR, f"server error {attrs['e']}")
        server_key = hmac.digest(self._salted, b"Server Key", self._hash)
        expected = hmac.digest(server_key, self._auth.encode(), self._hash)
        try:
            got = base64.b64decode(attrs.get("v", ""), validate=True)
        except ValueError:
            got = b""
        if not hmac.compare_digest(expected, got):
            raise SaslError(2, CLIENT_ERROR, "server signature mismatch")


# -- SASL over Kafka ----------------------------------------------------------------------


def _frame(request: Any, client_id: str) -> bytes:
    request.with_header(correlation_id=0, client_id=client_id)
    return bytes(request.encode(framed=True, header=True))


def with_correlation_id(frame: bytes, cid: int) -> bytes:
    return frame[:8] + cid.to_bytes(4, "big") + frame[12:]


def handshake_frame(mechanism: str, client_id: str) -> bytes:
    return _frame(
        SaslHandshakeRequest(version=SASL_HANDSHAKE_VERSION, mechanism=mechanism), client_id
    )


def authenticate_frame(token: bytes, client_id: str) -> bytes:
    return _frame(
        SaslAuthenticateRequest(version=SASL_AUTHENTICATE_VERSION, auth_bytes=token), client_id
    )


def handshake_error(frame: bytes) -> int:
    """error_code of a SaslHandshake v1 response frame (size, correlation id, body)."""
    resp = SaslHandshakeResponse.decode(io.BytesIO(frame[8:]), version=SASL_HANDSHAKE_VERSION)
    return int(resp.error_code)


def authenticate_fields(frame: bytes) -> tuple[int, bytes]:
    """(error_code, auth_bytes) of a SaslAuthenticate v2 response frame (response header
    v1: correlation id, then tagged fields). The error message is not kept: it could echo
    client input."""
    resp = SaslAuthenticateResponse.decode(io.BytesIO(frame[9:]), version=SASL_AUTHENTICATE_VERSION)
    return int(resp.error_code), bytes(resp.auth_bytes or b"")


@dataclass
class SaslSettings:
    """A run's SASL client settings; the password never shows in ``repr``."""

    mechanism: str
    user: str
    password: str = field(repr=False)
    #: "" (log in), "wrong-password" or "unknown-user" (failure shapes)
    fault: str = ""
    client_id: str = "harness-storm"
    _cache: dict[tuple[str, bytes, int], bytes] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.mechanism = self.mechanism.strip().upper()
        if self.mechanism not in MECHANISMS:
            raise ValueError(
                f"SASL mechanism {self.mechanism!r}: expected one of {', '.join(MECHANISMS)}"
            )
        if self.fault not in ("", "wrong-password", "unknown-user"):
            raise ValueError(f"SASL fault {self.fault!r}: expected wrong-password or unknown-user")
        self._handshake = handshake_frame(self.mechanism, self.client_id)

    @property
    def login_user(self) -> str:
        return UNKNOWN_USER if self.fault == "unknown-user" else self.user

    @property
    def principal(self) -> str:
        return f"User:{self.login_user}"

    def _password(self) -> str:
        # a wrong password that is not the right one with a suffix (nothing to grep for)
        return "wrong-" + os.urandom(9).hex() if self.fault == "wrong-password" else self.password

    def exchange(self) -> SaslExchange:
        return SaslExchange(self)


class SaslExchange:
    """One connection's login. ``start()`` gives the first bytes to send (SaslHandshake and
    the first SaslAuthenticate, pipelined); ``response(frame)`` takes each response frame
    and returns the next frame to send, ``b""`` while another response is due, or ``None``
    when logged in; it raises `SaslError` on a failure."""

    __slots__ = ("_scram", "_settings", "due", "round")

    def __init__(self, settings: SaslSettings) -> None:
        self._settings = settings
        self._scram: ScramClient | None = None
        #: 0: the SaslHandshake response is next; 1, 2: SaslAuthenticate round n
        self.round = 0
        #: responses still due before the next request may be sent
        self.due = 0

    def __repr__(self) -> str:
        return f"SaslExchange({self._settings.mechanism}, round={self.round})"

    @property
    def mechanism(self) -> str:
        return self._settings.mechanism

    def start(self, cid: int) -> bytes:
        s = self._settings
        user, password = s.login_user, s._password()
        if s.mechanism == PLAIN:
            token = b"\0" + user.encode() + b"\0" + password.encode()
        else:
            self._scram = ScramClient(SCRAM_HASHES[s.mechanism], user, password, cache=s._cache)
            token = self._scram.client_first()
        self.due = 2
        return with_correlation_id(s._handshake, cid) + with_correlation_id(
            authenticate_frame(token, s.client_id), cid
        )

    def response(self, frame: bytes, cid: int) -> bytes | None:
        self.due -= 1
        if self.round == 0:
            try:
                error = handshake_error(frame)
            except Exception:
                raise SaslError(0, CLIENT_ERROR, "malformed SaslHandshake response") from None
            if error:
                raise SaslError(0, error, "SaslHandshake refused")
            self.round = 1
            return b""
        try:
            error, token = authenticate_fields(frame)
        except Exception:
            raise SaslError(
                self.round, CLIENT_ERROR, "malformed SaslAuthenticate response"
            ) from None
        if error:
            raise SaslError(self.round, error, "SaslAuthenticate refused")
        scram = self._scram
        if scram is None:  # PLAIN: one round
            return None
        if self.round == 1:
            self.round = 2
            self.due = 1
            return with_correlation_id(
                authenticate_frame(scram.client_final(token), self._settings.client_id), cid
            )
        scram.verify_server_final(token)
        return None


# -- TLS over memory BIOs -------------------------------------------------------------------


@dataclass
class TlsSettings:
    """A run's TLS client settings: one ``SSLContext`` for every connection."""

    cafile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    check_hostname: bool = True
    server_hostname: str | None = None
    resume: bool = False
    #: "" (finish the handshake) or "stall": send part of the ClientHello, then nothing
    fault: str = ""
    context: ssl.SSLContext = field(init=False, repr=False)
    #: ``User:<subject in RFC 2253 order>`` of the client certificate, as Kafka's default
    #: principal builder names it (None without a certificate)
    principal: str | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        if self.fault not in ("", "stall"):
            raise ValueError(f"TLS fault {self.fault!r}: expected stall")
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.cafile:
            ctx.load_verify_locations(cafile=self.cafile)
        else:
            ctx.load_default_certs()
        ctx.check_hostname = self.check_hostname
        ctx.verify_mode = ssl.CERT_REQUIRED if self.check_hostname or self.cafile else ssl.CERT_NONE
        if self.certfile:
            ctx.load_cert_chain(self.certfile, self.keyfile or self.certfile)
            self.principal = certificate_principal(self.certfile)
        self.context = ctx


def certificate_principal(path: str) -> str | None:
    """``User:`` + the first certificate's subject in RFC 2253 order (reversed from the
    order it was written in: ``CN=client1, OU=harness`` is ``OU=harness,CN=client1``)."""
    try:
        from cryptography import x509
    except ImportError:
        return None
    with open(path, "rb") as f:
        pem = f.read()
    start = pem.find(b"-----BEGIN CERTIFICATE-----")
    if start < 0:
        return None
    try:
        cert = x509.load_pem_x509_certificate(pem[start:])
    except ValueError:
        return None
    return f"User:{cert.subject.rfc4514_string()}"


class TlsLink:
    """One connection's TLS state over two memory BIOs.

    ``handshake()`` advances the handshake (True when done; raises ``ssl.SSLError`` on a
    failure); ``outgoing()`` takes the bytes to send; ``feed``/``feed_eof`` give it what the
    socket read; ``write`` encrypts; ``read`` decrypts what has arrived.
    """

    __slots__ = ("_in", "_out", "closed", "obj")

    def __init__(
        self, context: ssl.SSLContext, server_hostname: str | None, session: Any = None
    ) -> None:
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        #: the peer closed (close_notify or EOF) while reading
        self.closed = False
        self.obj = context.wrap_bio(
            self._in, self._out, server_side=False, server_hostname=server_hostname,
            session=session,
        )  # fmt: skip

    def handshake(self) -> bool:
        try:
            self.obj.do_handshake()
        except ssl.SSLWantReadError:
            return False
        return True

    def outgoing(self) -> bytes:
        return self._out.read()

    def feed(self, data: bytes) -> None:
        self._in.write(data)

    def feed_eof(self) -> None:
        self._in.write_eof()

    def write(self, data: bytes) -> bytes:
        """Encrypt ``data``; returns the ciphertext to send."""
        self.obj.write(data)
        return self._out.read()

    def read(self) -> bytes:
        """All plaintext available now (b"" if none yet); sets ``closed`` when the peer
        closed; raises ``ssl.SSLError`` on a broken record."""
        chunks = []
        while True:
            try:
                chunk = self.obj.read(65536)
            except ssl.SSLWantReadError:
                break
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                self.closed = True
                break
            if not chunk:
                self.closed = True
                break
            chunks.append(chunk)
        return b"".join(chunks)

    def close_notify(self) -> bytes:
        """Our close_notify alert, to send before closing (as Kafka's own clients do)."""
        try:
            self.obj.unwrap()
        except (ssl.SSLWantReadError, ssl.SSLError):
            pass  # the peer's close_notify is not awaited
        return self._out.read()

    def info(self) -> dict[str, Any]:
        return {"tls_version": self.obj.version(), "resumed": bool(self.obj.session_reused)}


def tls_error(exc: BaseException) -> str:
    """A short, secret-free name for a TLS failure."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"certificate: {exc.verify_message}"
    if isinstance(exc, ssl.SSLError):
        return str(exc.reason or type(exc).__name__)
    return type(exc).__name__


# -- settings from Kafka's client keys ------------------------------------------------------


def settings_from_properties(
    props: Mapping[str, str],
    *,
    protocol: str | None = None,
    mechanism: str | None = None,
    client_id: str = "harness-storm",
    sasl_fault: str = "",
    tls_fault: str = "",
    tls_resume: bool = False,
) -> tuple[str, TlsSettings | None, SaslSettings | None]:
    """(security protocol, TLS settings, SASL settings) from Kafka's client keys (a
    ``client.properties``, `base.security.clientprops.parse`); ``protocol`` and
    ``mechanism`` override the file's. Raises ValueError naming any key or value it cannot
    honour, without a secret in the text."""
    from base.security.clientprops import kafka_python_config

    props = dict(props)
    if protocol:
        props["security.protocol"] = protocol.upper()
    if mechanism:
        props["sasl.mechanism"] = mechanism.upper()
    kp = kafka_python_config(props)
    proto = str(kp["security_protocol"])
    tls: TlsSettings | None = None
    if proto.endswith("SSL") or tls_fault:
        cafile = kp.get("ssl_cafile")
        try:
            tls = TlsSettings(
                cafile=cafile,
                certfile=kp.get("ssl_certfile"),
                keyfile=kp.get("ssl_keyfile"),
                check_hostname=bool(kp.get("ssl_check_hostname", True)),
                resume=tls_resume,
                fault=tls_fault,
            )
        except (OSError, ssl.SSLError) as exc:
            what = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise ValueError(
                f"ssl.truststore.location/ssl.keystore.location: cannot load: {what}"
            ) from None
    sasl: SaslSettings | None = None
    if proto.startswith("SASL_"):
        sasl = SaslSettings(
            str(kp["sasl_mechanism"]),
            str(kp["sasl_plain_username"]),
            str(kp["sasl_plain_password"]),
            fault=sasl_fault,
            client_id=client_id,
        )
    elif sasl_fault:
        raise ValueError(f"SASL fault {sasl_fault!r}: needs a SASL_PLAINTEXT or SASL_SSL protocol")
    return proto, tls, sasl
