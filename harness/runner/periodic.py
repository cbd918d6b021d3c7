"""A daemon thread that calls one function every interval and stops by itself.

The runner's samplers (Kafka's metrics, the kernel's listen-queue counters) each take one
reading per second into the history for the whole run. They share this loop: a reading on
schedule (a late one does not pile up: the next is due an interval after the one before),
a deadline so a forgotten sampler ends, and one last reading on `stop()` so the final
counters are in the history.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class Periodic:
    """Call ``tick`` every ``interval_s`` on a daemon thread until ``stop()`` or
    ``max_duration_s``; ``stop()`` joins the thread and calls ``tick`` once more."""

    def __init__(
        self,
        tick: Callable[[], object],
        *,
        name: str,
        interval_s: float = 1.0,
        max_duration_s: float = 24 * 3600.0,
    ) -> None:
        self.tick = tick
        self.name = name
        self.interval_s = interval_s
        self.max_duration_s = max_duration_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _loop(self) -> None:
        deadline = time.monotonic() + self.max_duration_s
        next_at = time.monotonic()
        while not self._stop.is_set() and time.monotonic() < deadline:
            self.tick()
            next_at += self.interval_s
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop, then one last reading."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s * 3 + 5)
            self._thread = None
            self.tick()
