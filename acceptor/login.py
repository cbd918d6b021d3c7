"""A SASL login read in passing on a SASL_PLAINTEXT listener, sans-IO: who the client is.

Why read it at all: Kafka charges request quotas to (user, client-id) (KIP-124's precedence),
and on a SASL listener the user is the principal the broker authenticated. The acceptor
relays the login untouched (the broker checks the password and answers; its failed-login
delay, `connection.failed.authentication.delay.ms`, stays the broker's) and learns the user
from the exchange it relays: the name the client gave in its first SaslAuthenticate
(PLAIN's `authcid`, SCRAM's `n=`), confirmed by the broker's last successful answer (PLAIN
after one round, SCRAM after two). No password or proof is kept: only the name is read out
of the token.

What Kafka charges (`../shared/reference/kafka-security-listeners.md`): nothing before a
successful login reaches its request handlers (`SaslServerAuthenticator` answers
ApiVersions, SaslHandshake and SaslAuthenticate itself), so every request taken before the
login completed is uncharged (`uncharged`). A SaslHandshake v0 (Kafka before 1.0's
clients) is followed by raw SASL tokens, not Kafka requests: the connection is relayed
untouched from then on (`raw_tokens`), its principal unknown.
"""

from __future__ import annotations

import io
import logging

from kafka.protocol.api_header import RequestHeader
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
)

from base.wire.framing import RequestInfo

__all__ = ["SASL_AUTHENTICATE", "SASL_HANDSHAKE", "Login", "sasl_user"]

log = logging.getLogger("acceptor")

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
#: successful SaslAuthenticate rounds a mechanism takes to log in (Kafka's servers)
ROUNDS = {"PLAIN": 1, "SCRAM-SHA-256": 2, "SCRAM-SHA-512": 2}
#: the principal of a connection that has not logged in (or whose mechanism is not read)
ANONYMOUS = "ANONYMOUS"


def sasl_user(mechanism: str | None, token: bytes) -> str | None:
    """The user a client's first SaslAuthenticate token names, for PLAIN and SCRAM (None:
    another mechanism, or a token that names nobody)."""
    if mechanism == "PLAIN":  # authzid NUL authcid NUL password (PlainSaslServer)
        parts = token.split(b"\x00")
        if len(parts) != 3 or not parts[1]:
            return None
        return parts[1].decode("utf-8", errors="replace")
    if mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        # client-first-message: gs2-header (`n,,` or `n,a=authzid,`) then `n=saslname,r=...`
        text = token.decode("utf-8", errors="replace")
        header_end = text.find(",", text.find(",") + 1)
        if header_end < 0:
            return None
        for attr in text[header_end + 1 :].split(","):
            if attr.startswith("n="):  # ScramFormatter.username: =2C is ',' and =3D is '='
                return attr[2:].replace("=2C", ",").replace("=3D", "=") or None
        return None
    return None


class Login:
    """One connection's SASL login as the acceptor relays it. Fed every request taken while
    the login is not done, and every SaslAuthenticate response; `principal` is the user once
    `done`."""

    __slots__ = (
        "_user",
        "done",
        "failed",
        "mechanism",
        "principal",
        "raw_tokens",
        "rounds",
        "uncharged",
    )

    def __init__(self) -> None:
        self.mechanism: str | None = None
        self._user: str | None = None
        self.rounds = 0
        self.done = False
        #: the error code of a failed SaslAuthenticate (the broker closes after its delay)
        self.failed: int | None = None
        #: SaslHandshake v0: raw SASL tokens follow, the rest is relayed untouched
        self.raw_tokens = False
        #: correlation ids of the requests taken before the login completed: not charged
        self.uncharged: set[int] = set()
        self.principal = ANONYMOUS

    def request(self, frame: bytes, info: RequestInfo) -> None:
        """A request taken before the login completed (ApiVersions, the SASL exchange)."""
        self.uncharged.add(info.correlation_id)
        if info.api_key == SASL_HANDSHAKE:
            if info.api_version == 0:
                self.raw_tokens = True
            body = self._body(frame, flexible=False)
            if body is not None:
                try:
                    req = SaslHandshakeRequest.decode(body, version=info.api_version)
                    self.mechanism = str(req.mechanism).upper()
                except Exception:  # the broker answers what it cannot read
                    self.mechanism = None
        elif info.api_key == SASL_AUTHENTICATE and self._user is None:
            body = self._body(frame, flexible=info.api_version >= 2)
            if body is not None:
                try:
                    req = SaslAuthenticateRequest.decode(body, version=info.api_version)
                except Exception:
                    return
                self._user = sasl_user(self.mechanism, bytes(req.auth_bytes or b""))

    def response(self, frame: bytes, api_version: int) -> bool:
        """A SaslAuthenticate response; True when it completed the login."""
        if self.done:
            return False
        skip = 9 if api_version >= 2 else 8  # size, correlation id (and v1 header's tags)
        try:
            resp = SaslAuthenticateResponse.decode(io.BytesIO(frame[skip:]), version=api_version)
        except Exception:
            return False
        if resp.error_code:
            self.failed = int(resp.error_code)
            return False
        self.rounds += 1
        if self.rounds < ROUNDS.get(self.mechanism or "", 1):
            return False
        self.done = True
        if self._user is not None:
            self.principal = self._user
        else:
            log.warning(
                "a SASL %s login completed whose user is not read: charged as %s",
                self.mechanism,
                ANONYMOUS,
            )
        return True

    @staticmethod
    def _body(frame: bytes, *, flexible: bool) -> io.BytesIO | None:
        buf = io.BytesIO(frame[4:])
        try:
            RequestHeader.decode(buf, flexible=flexible)
        except Exception:
            return None
        return buf
