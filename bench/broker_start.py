"""Cold versus warm start of the local Kafka broker, measured in one run.

Cold means an empty artifact cache (and, if you point Maven at an empty repository,
an empty Maven repository too):

    MAVEN_OPTS=-Dmaven.repo.local=$(mktemp -d) HARNESS_CACHE_DIR=$(mktemp -d) \
        .venv/bin/python -m bench.broker_start

Without those variables the "cold" start reuses the cache and both numbers are warm.
"""

from __future__ import annotations

import time

from broker import start_broker


def main() -> None:
    t = time.monotonic()
    broker = start_broker(
        launcher="local",
        progress=lambda m: print(f"[{time.monotonic() - t:6.1f}s] {m}", flush=True),
    )
    cold = time.monotonic() - t
    broker.stop()
    t = time.monotonic()
    broker = start_broker(launcher="local", progress=lambda m: None)
    warm = time.monotonic() - t
    broker.stop()
    print(f"first start={cold:.1f}s second start={warm:.1f}s ratio={cold / warm:.1f}")


if __name__ == "__main__":
    main()
