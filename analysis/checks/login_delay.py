"""Kafka's failed-authentication delay (KIP-306) as the checks read it: the delay a run
configured and the refusals it applies to. A leaf module: `auth` (the delay itself) and
`clients` (the slot a refused login holds meanwhile) both read it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from analysis.load import Run

#: Kafka's default (`SocketServerConfigs.FAILED_AUTHENTICATION_DELAY_MS_DEFAULT`)
DEFAULT_DELAY_MS = 100.0
DELAY_KEY = "connection.failed.authentication.delay.ms"
#: Kafka's clock for the deadline is whole milliseconds
KAFKA_CLOCK_MS = 1.0
#: SASL_AUTHENTICATION_FAILED, UNSUPPORTED_SASL_MECHANISM: the delayed refusals
DELAYED_ERRORS = (58, 33)


def configured_delay_ms(run: Run) -> float:
    """The delay the runner configured (its `config` rows; Kafka's default when unset)."""
    values = {float(raw[DELAY_KEY]) for raw in run.timeline.raw if raw.get(DELAY_KEY) is not None}
    if len(values) > 1:  # a static broker key: one value per run
        raise ValueError(f"{DELAY_KEY} changed during the run: {sorted(values)}")
    return values.pop() if values else DEFAULT_DELAY_MS
