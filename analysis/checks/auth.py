"""Kafka's failed-login delay (KIP-306), judged from the client's side of a SASL listener.

A SASL failure raised by Kafka's authenticator withholds its error response for
``connection.failed.authentication.delay.ms`` (d), then sends it and closes; the channel
stays open and counted meanwhile (`../shared/reference/kafka-security-listeners.md` §3).
The storm engine records, for every refused login, ``answer_ms``: from sending the failing
request to its answer, on the client's own clock (`sasl_fail` rows).

- Lower bound, d − 1 ms: Kafka stamps the close deadline as ``time.milliseconds() + d`` when
  the request fails and closes once ``time.milliseconds() >= deadline`` (`Selector`
  ``DelayedAuthenticationFailureClose.tryClose``); both are whole milliseconds, so the
  answer can come up to 1 ms before d after the failure, and the failure itself comes
  after the client sent the request. A refused login answered sooner was not delayed.
- Upper bound, d + 300 ms + s: the delayed closes are completed once per processor poll, and
  an idle processor polls every 300 ms (``Processor.poll`` → ``selector.poll(300)``); s is
  the slowest successful login of the same run (``sasl_done.sasl_ms``, every round trip of a
  login that was not delayed): the network and broker time this run measured on the same
  path, not a chosen margin. Without a successful login in the run the upper bound is not
  judged (its part reads unjudged).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from analysis.checks.base import FAIL, NA, PASS, UNKNOWN, Check, CheckResult, Part, fmt
from analysis.frames import detail_col

if TYPE_CHECKING:
    from analysis.load import Run

#: Kafka's default (`SocketServerConfigs.FAILED_AUTHENTICATION_DELAY_MS_DEFAULT`)
DEFAULT_DELAY_MS = 100.0
DELAY_KEY = "connection.failed.authentication.delay.ms"
#: `Processor.poll`: ``selector.poll(300)``, the longest an idle processor waits
PROCESSOR_POLL_MS = 300.0
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


def check_failed_login_delay(run: Run) -> CheckResult:
    from pyspark.sql import functions as F

    name = "client_failed_login_delay"
    fails = (
        run.events("sasl_fail", source="client")
        .select(
            "mono_ns",
            "client_ip",
            "client_port",
            detail_col("client", "sasl_fail", "error_code").cast("int").alias("code"),
            detail_col("client", "sasl_fail", "answer_ms").cast("double").alias("answer_ms"),
            detail_col("client", "sasl_fail", "round").cast("int").alias("round"),
        )
        .where(F.col("code").isin(*DELAYED_ERRORS) & F.col("answer_ms").isNotNull())
        .collect()
    )
    slowest_ok = (
        run.events("sasl_done", source="client")
        .select(detail_col("client", "sasl_done", "sasl_ms").cast("double").alias("ms"))
        .agg(F.max("ms"))
        .collect()[0][0]
    )
    expected_checks = run.expect.get("checks") or []
    if not fails:
        return CheckResult(
            name,
            UNKNOWN if name in expected_checks else NA,
            observed="no login refused with a delayed error (58, 33) by the broker",
            expected="refused logins, each answered after the failed-authentication delay",
            explanation="nothing to judge: no client's login was refused",
        )
    d = configured_delay_ms(run)
    low = d - KAFKA_CLOCK_MS
    high = d + PROCESSOR_POLL_MS + float(slowest_ok) if slowest_ok is not None else None
    bad: list[dict[str, Any]] = []
    for r in fails:
        ms = float(r["answer_ms"])
        why = None
        if ms < low:
            why = f"answered {fmt(ms)} ms after the failing request: sooner than d − 1 = {fmt(low)}"
        elif high is not None and ms > high:
            why = f"answered {fmt(ms)} ms after the failing request: later than {fmt(high)}"
        if why:
            bad.append(
                {
                    "client_ip": r["client_ip"],
                    "client_port": r["client_port"],
                    "round": r["round"],
                    "error_code": r["code"],
                    "mono_ns": int(r["mono_ns"]),
                    "ts": run.wall(int(r["mono_ns"])),
                    "why": why,
                }
            )
    answers = [float(r["answer_ms"]) for r in fails]
    parts = [
        Part("not before the delay", len(fails)),
        Part(
            "within one processor poll after it",
            len(fails) if high is not None else 0,
            hint="a successful login in the same run (its time bounds the broker's own latency)",
        ),
    ]
    return CheckResult(
        name,
        FAIL if bad else PASS,
        observed=f"{len(fails)} refused logins answered {fmt(min(answers))}–{fmt(max(answers))} ms "
        f"after the failing request (d = {fmt(d)} ms)",
        expected=f"≥ d − 1 ms = {fmt(low)} ms"
        + (f" and ≤ d + 300 ms + {fmt(float(slowest_ok))} ms = {fmt(high)} ms" if high else ""),
        tolerance="1 ms (Kafka's millisecond deadline); above: one processor poll (300 ms) plus "
        "the slowest successful login of the run",
        witnesses=bad[:10],
        judged=len(fails),
        exercised=d > 0,
        peak=min(answers),
        limit=low,
        parts=parts,
    )


CHECKS = [
    Check(
        "client_failed_login_delay",
        "auth",
        check_failed_login_delay,
        False,
        ("broker",),
        doc="a refused SASL login is answered after connection.failed.authentication.delay.ms "
        "(−1 ms) and within one processor poll (+ the run's slowest login) after it",
        judges_limit=True,
    ),
]
