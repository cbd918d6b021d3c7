"""The small interfaces the acceptor's components hand each other (a leaf module).

Why: every component used to hold the whole `server.Acceptor` and call back into it, so the
acceptor's modules imported each other in one cycle and any component could reach anything.
Now each component names here the few things it needs, and `server` (the only module that
knows every component) wires real objects into them. This module imports no acceptor
component: only the value modules (`recorder` for `ConnInfo` and the `Recorder` that history
rows go to, `tracker.Completed`, `charge.Charge`, `config.AcceptorConfig`).

Who provides what (and one shared value, `NewConnection`: one accepted socket from its
accept to its processor, the record admission fills in):
- `Counts`: the metrics' counters of outcomes and request times (`metrics.AcceptorMetrics`);
- `Channel`: a registered connection as processors and the admin path see it
  (`connection.Connection`, driven by `forwarding.AsyncioWire`);
- `ChannelSlot`: the processor a connection belongs to (`processor.Processor`);
- `LocalAnswers`: answers the admin requests the acceptor answers itself
  (`admin.AdminHandler`);
- `ConnectionHost`: what a registered connection calls back: the charges it decided
  recorded on the meters and their rows written, its end (`connections.Connections`);
- `ProcessorHost`: what a processor needs: a channel opened for a queued socket, whether the
  broker is over `max.connections` (`connections.Connections`);
- `Stallable`: a processor a test-scheduled stall pauses (`processor.Processor`);
- `HandOff`: where admission hands an admitted socket: a processor's queue of 20
  (`processor.Processor`, or `split.RemoteProcessor` for a processor in a process of its
  own);
- `Counted`: what a processor and a closing connection need of the connection engine: whether
  the broker is over `max.connections`, and the release of one count (the engine itself, or
  `worker.RemoteCounts` in a processor process).
"""

from __future__ import annotations

import enum
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import asyncio
    import socket

    from acceptor.charge import Charge
    from acceptor.config import AcceptorConfig
    from acceptor.recorder import ConnInfo, Recorder
    from acceptor.tracker import Completed
    from base.quota.requests import RequestCharge
    from base.wire.framing import RequestInfo


@dataclass(slots=True)
class NewConnection:
    """One accepted socket from accept to its processor: its identity, the socket, what the
    acceptor learnt before admission (the bytes read with a PROXY header), then what
    admission decided (protected listener, when it was counted, or its IP throttle while it
    is parked). Admission fills it in; a processor receives the same record."""

    info: ConnInfo
    sock: socket.socket
    tcp_accept_ns: int
    initial: bytes = b""
    proxied: bool = False
    protected: bool = False
    admitted_ns: int = 0
    throttle_ms: int = 0
    throttled_ns: int = 0


class Counts(Protocol):
    """The metrics' hot-path counters (`metrics.AcceptorMetrics`)."""

    def count(self, listener: str, ip: str, outcome: str) -> None: ...

    def request(self, client_id: str | None, latency_ms: float) -> None: ...

    def throttled(self, bucket: tuple[str, str], throttle_ms: int) -> None: ...


class ChannelSlot(Protocol):
    """The processor a registered connection belongs to (`processor.Processor`)."""

    @property
    def index(self) -> int: ...

    def touch(self, conn: Channel) -> None: ...

    def remove(self, conn: Channel) -> None: ...


class Peer(Protocol):
    """Whose request it is: all the admin path needs of a connection."""

    @property
    def info(self) -> ConnInfo: ...


class Channel(Protocol):
    """A registered connection, as the rest of the acceptor sees it."""

    info: ConnInfo
    requests: int
    bytes_in: int
    bytes_out: int
    last_active_ns: int

    @property
    def processor(self) -> ChannelSlot: ...

    @property
    def principal(self) -> str:
        """Who its requests are charged to (a SASL user once logged in; ANONYMOUS)."""

    def start(self) -> Coroutine[Any, Any, None] | None:
        """What its processor runs once it is registered (None: it ended at once)."""

    def finish(self, reason: str, *, evicted: bool = False) -> None:
        """End it once (an eviction, idle expiry or shutdown, from outside)."""


class Deferred(enum.Enum):
    """An answer the acceptor builds in another process (the split model's accepting
    process, which owns the quotas): the connection waits for it (`Connection.deferred_answer`)."""

    ANSWER = "deferred"


DEFERRED = Deferred.ANSWER


class LocalAnswers(Protocol):
    """The admin requests the acceptor answers itself (`admin.AdminHandler`)."""

    def maybe_handle(
        self, conn: Peer, frame: bytes, info: RequestInfo
    ) -> bytes | Deferred | None: ...


#: what a processor process asks of the meters (`ChargeAsked.kind`): a charge with its
#: check (answered by `charged`); whether a charge of at most `charged_ns` could throttle
#: (a response whose log line is still to come: answered by `claimed`; if it could not,
#: the response goes at once and its charge is made later); that late charge, recorded
#: without a check (no answer)
ASK_CHECK, ASK_CLAIM, ASK_LATE = "check", "claim", "late"


@dataclass(frozen=True, slots=True)
class ChargeAsked:
    """A response's request-quota charge, to be decided where the meters are: its request's
    correlation id, client id and api key, the handler time charged (a claim's: the most
    it can be), the network-thread estimate (recorded unthrottled), `at_ns`, the instant
    the meters record it at, which its `request` row then carries, the principal it is
    charged to, and what is asked (`kind`: `ASK_CHECK`, `ASK_CLAIM`, `ASK_LATE`)."""

    correlation_id: int
    client_id: str
    api_key: int
    charged_ns: int
    network_ns: int
    at_ns: int
    principal: str = "ANONYMOUS"  # the SASL user the connection logged in as
    kind: str = ASK_CHECK


class RemoteCharge(Protocol):
    """Where a processor process has a response's request-quota charge decided (the
    accepting process, which owns the meters); the answer comes to `charged` (a claim's
    to `claimed`)."""

    def __call__(self, conn: Channel, asked: ChargeAsked) -> None: ...


class ConnectionHost(Protocol):
    """What a registered connection calls back into (`connections.Connections`)."""

    @property
    def remote_charge(self) -> RemoteCharge | None:
        """Set in a processor process: charges are decided elsewhere, responses wait."""

    @property
    def admin(self) -> LocalAnswers: ...

    @property
    def request_max_bytes(self) -> int: ...

    def upstream(self, listener: str) -> tuple[str, int]: ...

    def log(self, message: str) -> None: ...

    @property
    def mutes_throttled(self) -> bool:
        """Whether a throttled connection is muted until its throttle ends (KIP-219; not
        under the seeded fault `request_mute_skipped`)."""

    def answered(self, done: Completed) -> bool:
        """A broker response answered a request: counted; whether its `request` row is
        written (sampling)."""

    def charge(self, charge: Charge) -> RequestCharge:
        """Record a charge the connection decided on the meters, with the quota check."""

    def charge_unchecked(self, charge: Charge) -> None:
        """Record a late charge, without a check (it could not throttle)."""

    def request_row(self, conn: Channel, charge: Charge) -> None: ...

    def throttle_row(self, conn: Channel, charge: Charge, outcome: RequestCharge) -> None:
        """A charge the meters throttled: counted, its `request_throttle` row written."""

    def request_quotas_enabled(self) -> bool:
        """Whether any request quota was ever set (until then no request is throttled)."""

    def connection_closed(
        self, conn: Channel, reason: str, now_ns: int, detail: dict[str, object], *, evicted: bool
    ) -> None:
        """Once per connection: release its counts, wake slot waiters, `close` row."""


class ProcessorHost(Protocol):
    """What a processor needs besides its queue (`connections.Connections`)."""

    @property
    def cfg(self) -> AcceptorConfig: ...

    @property
    def rec(self) -> Recorder: ...

    def max_connections_exceeded(self, listener: str) -> bool: ...

    def open_channel(self, processor: ChannelSlot, item: NewConnection) -> Channel: ...

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None: ...


class HandOff(Protocol):
    """A processor as admission sees it: its queue of admitted sockets."""

    @property
    def index(self) -> int: ...

    @property
    def task(self) -> asyncio.Task[None] | None: ...

    def offer(self, item: NewConnection) -> bool:
        """Queue it if there is room (Kafka's `assignNewConnection` without blocking)."""

    async def put(self, item: NewConnection) -> None:
        """Queue it, waiting for room (Kafka's acceptor blocking on the last processor)."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def queued(self) -> int: ...

    def drain_unregistered(self) -> list[NewConnection]:
        """At shutdown: the sockets queued here and never registered (to close)."""


class Counted(Protocol):
    """What processors and closing connections need of the connection engine."""

    def max_connections_exceeded(self, listener: str) -> bool: ...

    def release(self, listener: str, ip: str) -> None: ...


class Stallable(Protocol):
    """A processor a test-scheduled stall pauses (`processor.Processor`)."""

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def queued(self) -> int: ...
