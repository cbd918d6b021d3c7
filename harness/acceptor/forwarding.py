"""One registered connection as two asyncio Protocols (client side, upstream side).

Why callbacks rather than streams: per new connection, streams cost two StreamReader/
StreamWriter pairs and two pump tasks, and every read wakes a future; with Protocols the
bytes go from `data_received` to the other transport's `write` synchronously (the streams
flavour, ~20 % more CPU per connection, was removed in issue 14). Every decision about
requests, throttles and ends is `relay.Relay`'s; this module only moves the bytes.
"""

from __future__ import annotations

import asyncio
import time
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from harness.acceptor.broker_charge import kafka_address
from harness.acceptor.ports import ChargeAsked
from harness.acceptor.relay import (
    UPSTREAM_EOF_GRACE_S,
    Closable,
    Relay,
    set_rst_on_close,
)
from harness.wire.framing import FrameDecoder, FrameError, correlation_id_of_response

if TYPE_CHECKING:
    from harness.acceptor.ports import RemoteCharge
    from harness.quota.requests import RequestCharge


def _abort_with_rst(transport: asyncio.BaseTransport | None) -> None:
    if transport is None:
        return
    set_rst_on_close(transport.get_extra_info("socket"))
    if isinstance(transport, asyncio.Transport):
        transport.abort()
    else:
        transport.close()


def _nowhere(data: bytes) -> None:
    """No client transport (never happens once data flows): local answers have nowhere to go."""


class _Side(asyncio.Protocol):
    def __init__(self, conn: ProtoConnection, client: bool) -> None:
        self.conn = conn
        self.client = client

    def data_received(self, data: bytes) -> None:
        if self.client:
            self.conn.on_client_data(data)
        else:
            self.conn.on_upstream_data(data)

    def eof_received(self) -> bool:
        return self.conn.on_eof(self.client)

    def connection_lost(self, exc: Exception | None) -> None:
        self.conn.on_lost(self.client, exc)

    def pause_writing(self) -> None:  # our write buffer towards this side is full
        self.conn.pause_reading(not self.client, "backpressure")

    def resume_writing(self) -> None:
        self.conn.resume_reading(not self.client, "backpressure")


class ProtoConnection(Relay):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._req_decoder = FrameDecoder(self.host.request_max_bytes)
        self._resp_decoder = FrameDecoder(2**31 - 1)
        self._ct: asyncio.Transport | None = None
        self._ut: asyncio.Transport | None = None
        self._paused: dict[bool, set[str]] = {True: set(), False: set()}
        self._eof_passed = False  # the client's EOF was written upstream
        # responses held until the broker's request log has the handler time of the first
        # (`broker_charge.RequestLog.wait`), and when they were read
        self._held: list[bytes] | None = None
        self._held_since_ns = 0
        self._eof_after_held = False  # the broker's EOF came while responses were held
        #: correlation ids of held responses whose charges are being decided elsewhere
        self._charges_owed: set[int] = set()

    # -- lifecycle -----------------------------------------------------------------------
    async def _open_client(self) -> None:
        loop = asyncio.get_running_loop()
        self._ct, _ = await loop.connect_accepted_socket(lambda: _Side(self, True), self.sock)

    async def _open_upstream(self, host: str, port: int) -> asyncio.Transport:
        loop = asyncio.get_running_loop()
        ut, _ = await loop.create_connection(lambda: _Side(self, False), host, port)
        return ut

    def _started(self, upstream: Closable) -> None:
        # TCP_NODELAY: admission set it on the client's socket (as Kafka's acceptor does);
        # both loops' create_connection set it on the upstream's
        self._ut = ut = cast(asyncio.Transport, upstream)  # uvloop's is not a subclass
        if self.charges is not None:  # before the first request is forwarded
            sockname = ut.get_extra_info("sockname")
            if isinstance(sockname, tuple):
                self.upstream_addr = kafka_address(sockname)
                self.charges.register(self.upstream_addr)
        if self.initial:
            initial, self.initial = self.initial, b""
            self.on_client_data(initial, counted=True)
        if "upstream" in self._paused[True]:
            self.resume_reading(True, "upstream")
        self._pump()

    # -- flow control --------------------------------------------------------------------
    def _transport(self, client: bool) -> asyncio.Transport | None:
        return self._ct if client else self._ut

    def pause_reading(self, client: bool, why: str) -> None:
        reasons = self._paused[client]
        if not reasons:
            t = self._transport(client)
            if t is not None and not t.is_closing():
                t.pause_reading()
        reasons.add(why)

    def resume_reading(self, client: bool, why: str) -> None:
        reasons = self._paused[client]
        reasons.discard(why)
        if not reasons and not self.closed:
            t = self._transport(client)
            if t is not None and not t.is_closing():
                t.resume_reading()

    # -- data ----------------------------------------------------------------------------
    def on_client_data(self, data: bytes, counted: bool = False) -> None:
        if self.closed or self._closing is not None:  # closing: nothing more is read
            return
        if not counted:
            self.bytes_in += len(data)
            self.touch()
        if self._ut is None:  # the upstream is not up yet: keep the bytes, in order
            if not self.initial:
                self.upstream_wanted()
                self.pause_reading(True, "upstream")  # one read's worth until it is up
            self.initial += data
            return
        try:
            if self.received(self._req_decoder, data):
                self.pause_reading(True, "closing")
            self._pump()
        except Exception as exc:  # a bug must end this connection visibly, not leak it
            self.internal_error(exc)

    def _pump(self) -> None:
        """Take requests while the channel is readable (Kafka's processor: one request,
        then muted until its response is sent and its throttle is over; all of them while
        no request can be throttled, the gate's `pipelined`)."""
        if self._ut is None or self.closed:
            return
        gate = self.gate
        gate.pipelined = self.may_pipeline()
        to_client = self._ct.write if self._ct is not None else _nowhere
        while not self.closed and not self.awaiting_answer:
            item = gate.take()
            if item is None:
                break
            if not self.step(item, to_client):
                return
        # what the client pipelined stays unread (in the kernel) while a request is in
        # flight, as on Kafka's muted channel; one read's worth of frames waits in the gate
        held = "in_flight" in self._paused[True]
        if len(gate) and (not gate.readable or self.awaiting_answer):
            if not held:
                self.pause_reading(True, "in_flight")
        elif held:
            self.resume_reading(True, "in_flight")
        self._pass_eof_when_forwarded()

    def _pass_eof_when_forwarded(self) -> None:
        """The client's half-close goes upstream once every request it sent before it was
        forwarded (the broker reads them all, then the EOF)."""
        ut = self._ut
        if not self._client_eof or self._eof_passed or self.closed or ut is None:
            return
        if len(self.gate) or self.initial:
            return
        self._eof_passed = True
        if ut.can_write_eof() and not ut.is_closing():
            ut.write_eof()
        else:
            self.finish("client_eof")

    _readable_again = _pump

    def forward(self, frame: bytes) -> None:
        if self._ut is not None:
            self.gate.forwarded_ns = time.monotonic_ns()
            self._ut.write(frame)

    def write_client(self, data: bytes) -> None:
        if self._ct is not None:
            self._ct.write(data)

    def on_upstream_data(self, data: bytes) -> None:
        if self.closed:
            return
        self.touch()
        ct = self._ct
        try:
            frames = self._resp_decoder.feed(data)
            if not frames or ct is None:
                return
            if self._held is not None:  # behind a response waiting for its log line
                self._held.extend(frames)
                return
            remote = self.host.remote_charge
            if remote is not None and self.host.request_quotas_enabled():
                self._ask_charges(frames, remote)
                return
            charges, addr = self.charges, self.upstream_addr
            if charges is not None and addr is not None:
                cid = correlation_id_of_response(frames[0])
                if charges.pending(addr, cid):
                    gate = self.gate
                    now = time.monotonic_ns()
                    if charges.should_hold(gate.client_id, gate.api_key, now - gate.forwarded_ns):
                        self._held = frames
                        self._held_since_ns = now
                        charges.wait(addr, cid, self._release_held)
                        return
                    gate.charge_later()  # it cannot throttle: charged when the line comes
            self._deliver(frames)
        except FrameError as exc:
            self.finish("upstream_" + exc.reason, detail={"error": str(exc)})
        except Exception as exc:
            self.internal_error(exc)

    def _ask_charges(
        self, frames: list[bytes], remote: RemoteCharge, read_ns: int | None = None
    ) -> None:
        """A processor process's responses while request quotas exist: each one's charge is
        decided where the meters are (`remote`); they are held until every answer came
        (`charged`), then sent as they would have been, throttle and mute included.

        With the broker's request log read, the charge is Kafka's handler time from its
        line: a response whose line has not come yet waits for it first (at most
        `broker_charge.HOLD_MAX_S`; then `read_ns` says when it was read). Unlike one
        process, which holds only a response whose charge could throttle it, every such
        response waits: whether it could is known where the meters are."""
        now = time.monotonic_ns()
        charges, addr = self.charges, self.upstream_addr
        if charges is not None and addr is not None and read_ns is None:
            cid = correlation_id_of_response(frames[0])
            if charges.pending(addr, cid):
                self._held, self._held_since_ns = frames, now
                charges.wait(addr, cid, partial(self._line_came, remote))
                return
        arrived_ns = now if read_ns is None else read_ns
        owed: set[int] = set()
        if self.asked is None:
            self.asked = {}
        for frame in frames:
            cid = correlation_id_of_response(frame)
            pending = self._order.peek(cid)
            if pending is None:  # answers nothing forwarded: sent as it is
                continue
            broker_ns = arrived_ns - pending.sent_ns
            handler_ns, network_ns, read = None, 0, None
            if charges is not None and addr is not None:
                read = self.log_line(charges, addr, cid, broker_ns, now - arrived_ns)
                handler_ns, network_ns, _held = read
            charged_ns = (
                handler_ns
                if handler_ns is not None
                else self.gate.charged_ns(broker_ns, pending.allowance_ns)
            )
            owed.add(cid)
            self.asked[cid] = (now, read)
            asked = ChargeAsked(
                cid, pending.client_id or "", pending.api_key, charged_ns, network_ns, now
            )
            remote(self, asked)
        if not owed:
            if read_ns is None:
                self._deliver(frames)
            else:  # after a hold: sent as a held response is, the EOF meanwhile included
                self._held = frames
                self._release_held()
            return
        self._held, self._held_since_ns, self._charges_owed = frames, arrived_ns, owed

    def _line_came(self, remote: RemoteCharge) -> None:
        """The held responses' log line was read (or the hold is over): their charges now."""
        frames, self._held = self._held, None
        if frames is None or self.closed:
            return
        try:
            self._ask_charges(frames, remote, read_ns=self._held_since_ns)
        except Exception as exc:
            self.internal_error(exc)

    def charged(self, correlation_id: int, charge: RequestCharge) -> None:
        """The decided charge of a held response (`_ask_charges`)."""
        if self.closed or correlation_id not in self._charges_owed:
            return
        self.gate.decided[correlation_id] = charge
        self._charges_owed.discard(correlation_id)
        if not self._charges_owed:
            self._release_held()

    def _deliver(self, frames: list[bytes], arrived_ns: int | None = None) -> None:
        ct = self._ct
        if ct is None:
            return
        payload, answered = self.answers(frames, arrived_ns)
        ct.write(payload)
        if answered:
            for _ in range(answered):
                self.gate.response_sent()
            self._pump()

    def _release_held(self) -> None:
        """The held responses' log line came (or the hold is over): charge and send them."""
        frames, self._held = self._held, None
        if frames is None or self.closed:
            return
        try:
            self._deliver(frames, self._held_since_ns)
        except FrameError as exc:
            self.finish("upstream_" + exc.reason, detail={"error": str(exc)})
        except Exception as exc:
            self.internal_error(exc)
        if self._eof_after_held and not self.closed:
            self._eof_after_held = False
            self.on_eof(False)

    def on_eof(self, client: bool) -> bool:
        """Half-close: propagate it; the other side's EOF (or a grace period) ends it."""
        if self.closed:
            return False
        if client:
            self._client_eof = True
            if self._upstream_eof:
                self.finish("upstream_eof")
                return False
            if self._ut is None and not len(self.gate) and not self.initial:
                self.finish("client_eof")  # nothing was sent: nothing to answer
                return False
            self._pass_eof_when_forwarded()
            return True
        if self._held is not None:  # the held responses go to the client first
            self._eof_after_held = True
            return True
        self._upstream_eof = True
        if self._client_eof:
            self.finish("client_eof")
            return False
        ct = self._ct
        if ct is not None and ct.can_write_eof() and not ct.is_closing():
            ct.write_eof()
        self.later(UPSTREAM_EOF_GRACE_S, self.finish, "upstream_eof")
        return True

    def on_lost(self, client: bool, exc: Exception | None) -> None:
        if self.closed:
            return
        if client:
            if exc is None:
                self.finish("client_eof")
            else:
                self.finish("reset", reset=True, detail={"error": repr(exc)})
        elif exc is None:
            self.finish("upstream_eof")
        else:
            self.finish("upstream_reset", reset=True, detail={"error": repr(exc)})

    # -- the end -------------------------------------------------------------------------
    def _sides(self) -> tuple[asyncio.Transport | None, asyncio.Transport | None]:
        return self._ct, self._ut

    def _abort(self, side: Any) -> None:
        _abort_with_rst(side)
