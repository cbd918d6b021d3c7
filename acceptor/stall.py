"""Scheduled processor stalls: make one network processor lag, as a stuck Kafka network thread.

Why: a processor's new-connection queue (20 in Kafka) only fills when the processor falls
behind the acceptor, e.g. a network thread stuck in a long GC pause or busy with a large
batch while connections keep arriving. The acceptor's processors share one event loop and
register a connection far faster than one is admitted, so under ordinary load every queue
holds at most one socket and the queue bound is never exercised. A scenario that must judge
it says, in its `acceptor:` properties,

    harness.test.processor.stall = CLIENT/0@8+10[,LISTENER/INDEX@AT+FOR...]

(processor 0 of listener CLIENT stops iterating 8 s after the acceptor started, for 10 s).
While stalled, the processor registers nothing; the acceptor's round robin fills its queue,
then skips it (Kafka's `assignNewConnection`), and blocks only when every queue is full.
The stall is a test condition, not an enforcement rule: it uses the processors' existing
pause/resume hooks and costs nothing when unset. Each stall writes `processor_stall` rows
(`reason` = `start` / `end`, `listener`, `processor`), so the checker sees it.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from base.history.rows import AcceptorProcessorStall, AcceptorProcessorStallDetail
from base.quota.config import ConfigError

if TYPE_CHECKING:
    from collections.abc import Callable

    from acceptor.config import AcceptorConfig
    from acceptor.ports import Stallable
    from acceptor.recorder import Recorder

STALL_KEY = "harness.test.processor.stall"
_ITEM = re.compile(r"^([A-Za-z0-9_\-]+)/(\d+)@(\d+(?:\.\d+)?)\+(\d+(?:\.\d+)?)$")


@dataclass(frozen=True, slots=True)
class Stall:
    listener: str
    index: int
    at_s: float
    for_s: float


def parse_stalls(cfg: AcceptorConfig) -> tuple[Stall, ...]:
    """`LISTENER/INDEX@AT+FOR[,...]` (blank = none); a bad item is a `ConfigError`."""
    value = cfg.properties.get(STALL_KEY, "").strip()
    names = [ls.name for ls in cfg.listeners]
    threads = cfg.quota.num_network_threads
    out = []
    for item in filter(None, (s.strip() for s in value.split(","))):
        m = _ITEM.match(item)
        if not m:
            raise ConfigError(
                STALL_KEY, value, f"{item!r}: expected LISTENER/INDEX@AT+FOR (seconds)"
            )
        st = Stall(m.group(1).upper(), int(m.group(2)), float(m.group(3)), float(m.group(4)))
        if st.listener not in names or st.index >= threads:
            raise ConfigError(
                STALL_KEY,
                value,
                f"{item!r}: no processor {st.index} on listener {st.listener} "
                f"(listeners {names}, num.network.threads {threads})",
            )
        out.append(st)
    return tuple(out)


def schedule_stalls(
    stalls: tuple[Stall, ...], processor: Callable[[str, int], Stallable], rec: Recorder
) -> list[asyncio.TimerHandle]:
    """Arm every stall (times from now, the acceptor's start); `processor(listener, index)`
    finds the processor to pause."""
    loop = asyncio.get_running_loop()
    handles = []

    def row(
        st: Stall,
        reason: str,
        delay_ms: float | None = None,
        detail: AcceptorProcessorStallDetail | None = None,
    ) -> None:
        rec.write(
            AcceptorProcessorStall(
                time.monotonic_ns(),
                listener=st.listener,
                processor=st.index,
                reason=reason,
                delay_ms=delay_ms,
                detail=detail,
            )
        )

    for st in stalls:

        def begin(st: Stall = st) -> None:
            processor(st.listener, st.index).pause()
            row(st, "start", delay_ms=st.for_s * 1000)

        def end(st: Stall = st) -> None:
            proc = processor(st.listener, st.index)
            proc.resume()
            row(st, "end", detail={"queued": proc.queued()})

        handles.append(loop.call_later(st.at_s, begin))
        handles.append(loop.call_later(st.at_s + st.for_s, end))
    return handles
