"""What the split model's two kinds of process say to each other over their `split.Link`:
one named, typed value per message (a leaf module).

Why named values: the link carries `marshal`led tuples (the cheapest encoding of plain
values there is), and a positional tuple of 14 fields read back by index in another file is
how a field gets moved on one side and not the other. Each message here is a `NamedTuple`
with a wire tag; `encode` makes the plain tuple the link sends, `decode` the value back,
and both sides read fields by name (`match` on the class).
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = [
    "Admin",
    "Answer",
    "Charge",
    "Charged",
    "Claimed",
    "Conn",
    "Count",
    "Message",
    "Ready",
    "Release",
    "Request",
    "Stalls",
    "Stop",
    "Throttled",
    "Took",
    "decode",
    "encode",
]


# -- to a processor process ---------------------------------------------------------------------
class Conn(NamedTuple):
    """One admitted socket for `processor` (its fd travels beside it by `SCM_RIGHTS`): the
    `ports.NewConnection` fields, and its address family (the receiver need not ask)."""

    processor: int
    listener: str
    conn_id: str
    client_ip: str
    client_port: int
    sock_ip: str
    sock_port: int
    tcp_accept_ns: int
    admitted_ns: int
    protected: bool
    proxied: bool
    initial: bytes
    family: int


class Charged(NamedTuple):
    """A response's request-quota outcome, decided by the accepting process's meters."""

    conn_id: str
    correlation_id: int
    throttle_ms: int
    exempt: bool
    user: str
    client: str
    quota: float
    rate: float


class Answer(NamedTuple):
    """The answer to an `Admin` request (`response` None: the close `reason` asks for)."""

    conn_id: str
    correlation_id: int
    response: bytes | None
    reason: str
    message: str


class Stalls(NamedTuple):
    """The test-scheduled stalls of its processors: (listener, index, at_s, for_s), timed
    from `armed_ns`."""

    armed_ns: int
    items: list[tuple[str, int, float, float]]


class Stop(NamedTuple):
    """Shut down: close every connection, write their rows, flush, end."""


# -- back to the accepting process --------------------------------------------------------------
class Ready(NamedTuple):
    """The processors run."""


class Took(NamedTuple):
    """A processor's iteration registered `n` queued sockets: room again in its queue."""

    listener: str
    processor: int
    n: int


class Release(NamedTuple):
    """A registered connection ended (Kafka's `ConnectionQuotas.dec`)."""

    listener: str
    ip: str


class Count(NamedTuple):
    """A metrics counter (`ports.Counts.count`)."""

    listener: str
    ip: str
    outcome: str


class Request(NamedTuple):
    """A request's time, for the metrics (`ports.Counts.request`)."""

    client_id: str | None
    latency_ms: float


class Throttled(NamedTuple):
    """A request-quota throttle, for the metrics (`ports.Counts.throttled`)."""

    user: str
    client: str
    throttle_ms: int


class Admin(NamedTuple):
    """A request the acceptor answers itself, from one connection, to be answered where
    the quotas are (`Answer`)."""

    conn_id: str
    listener: str
    client_ip: str
    client_port: int
    sock_ip: str
    sock_port: int
    frame: bytes


class Charge(NamedTuple):
    """A response's request-handler charge to record at `now_ms` (`Charged` answers)."""

    conn_id: str
    correlation_id: int
    client_id: str
    api_key: int
    charged_ns: int
    network_ns: int
    now_ms: int
    principal: str = "ANONYMOUS"  # the SASL user the connection logged in as
    #: `ports.ASK_CHECK` (answered by `Charged`), `ASK_CLAIM` (`charged_ns` the most it can
    #: be; answered by `Claimed`) or `ASK_LATE` (recorded without a check; no answer)
    kind: str = "check"


class Claimed(NamedTuple):
    """Whether a charge asked as a claim could throttle its response (`hold`: it waits for
    its log line; else it goes at once and is charged late)."""

    conn_id: str
    correlation_id: int
    hold: bool


Message = (
    Conn | Charged | Answer | Stalls | Stop | Ready | Took | Release | Count | Request | Throttled
    | Admin | Charge | Claimed
)  # fmt: skip

_CLASSES: tuple[type[Any], ...] = (
    Conn, Charged, Answer, Stalls, Stop, Ready, Took, Release, Count, Request, Throttled, Admin,
    Charge, Claimed,
)  # fmt: skip
_TAG = {cls: i for i, cls in enumerate(_CLASSES)}


def encode(msg: Message) -> tuple[Any, ...]:
    """The plain tuple the link marshals: the message's tag, then its fields."""
    return (_TAG[type(msg)], *msg)


def decode(raw: tuple[Any, ...]) -> Message:
    msg: Message = _CLASSES[raw[0]](*raw[1:])
    return msg
