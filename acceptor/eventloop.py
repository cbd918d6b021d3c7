"""The acceptor's event loop: uvloop where installed (every acceptor process uses this)."""

from __future__ import annotations

import asyncio


def new_event_loop(kind: str = "auto") -> asyncio.AbstractEventLoop:
    if kind in ("auto", "uvloop"):
        try:
            import uvloop

            return uvloop.new_event_loop()
        except ImportError:
            if kind == "uvloop":
                raise
    return asyncio.new_event_loop()
