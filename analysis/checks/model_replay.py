"""Model replay: every recorded admission decision agrees with the checker's own model.

Target acceptor: the recorded rate delay (ms), the outcome (admit / throttle_close /
reject) and the per-IP throttle ms must equal the model's, within a tolerance of a few
ms for rounding (default 2 ms, run.json expect.delay_tolerance_ms). Any disagreement is
a fail with the first disagreeing connections as witnesses.

Target broker: only the client side exists, so arrival = the client's connect_ok, served
vs EOF is the outcome, and the ready latency is a lower bound on the delay. The client's
connect_ok is not Kafka's accept (the acceptor thread blocks for each rate delay while the
kernel completes handshakes into the backlog; per-IP decisions flip on millisecond
timing), so on a broker target the replay is a **diagnostic**: its agreement figure is
reported (`n/a`, data.agreement) and never decides the verdict. What client-side
observation can prove is judged by analysis.checks.broker_side (docs/kafka-reference.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from analysis.checks.base import FAIL, NA, PASS, UNKNOWN, Check, CheckResult, fmt
from analysis.replay import replay

if TYPE_CHECKING:
    from analysis.load import Run


def _result(run: Run, mode: str) -> CheckResult:
    out = run.cached(f"replay-{mode}", lambda: replay(run, mode))
    summaries = out[out["kind"] == "summary"]
    if summaries.empty:  # no connection rows at all (e.g. only steady clients' requests)
        return CheckResult(
            "model_replay",
            UNKNOWN if mode == "acceptor" else NA,
            observed="no connections to replay",
            expected="connection rows to replay through the model",
            explanation="nothing was recorded that the replay could judge",
            data={"agreement": None, "connections": 0},
        )
    summary = summaries.iloc[0]
    dis = out[out["kind"] == "disagree"].sort_values("mono_ns")
    n = int(summary["n_conns"])
    agree = int(summary["n_agree"])
    bad = n - agree
    tol = float(run.expect.get("delay_tolerance_ms") or 2.0)
    wit = []
    for _, r in dis.head(10).iterrows():
        w = {
            k: (None if r[k] is None or r[k] != r[k] else r[k])
            for k in ("conn_id", "client_ip", "client_port", "listener")
        }
        w = {k: (int(v) if k == "client_port" and v is not None else v) for k, v in w.items()}
        w["mono_ns"] = int(r["mono_ns"])
        w["ts"] = run.wall(int(r["mono_ns"]))
        w["why"] = f"{r['what']}" + (
            f": recorded {fmt(r['recorded'])}, model {fmt(r['model'])}"
            if "ms" in str(r["what"])
            else ""
        )
        wit.append({k: v for k, v in w.items() if v is not None})
    rate = agree / n if n else 1.0
    observed = (
        f"{agree}/{n} connections agree ({rate:.2%}); "
        f"delays recorded {summary['n_delayed_recorded']}"
        f" / model {summary['n_delayed_model']}"
    )
    diagnostics: list[dict[str, object]] = []
    if mode == "acceptor":
        observed += f"; max |delay diff| {fmt(summary['max_abs_delay_diff'])} ms"
        verdict = FAIL if bad else PASS
        if n == 0:
            verdict = UNKNOWN
        tolerance = f"{fmt(tol)} ms on delays and throttles; outcomes exact"
        sem = run.semantics
        expected = (
            "every delay, outcome and IP throttle equals the model's, judged as Kafka "
            f"{sem.name} (rate meter: {sem.meter})"
        )
    else:
        verdict = NA  # a diagnostic: the client clock is not Kafka's accept
        diagnostics, wit = wit, []  # disagreements are not violations on this target
        tolerance = "diagnostic only: the client clock (connect_ok) is not Kafka's accept"
        expected = (
            "agreement figure only (client outcomes vs the model replayed at connect_ok); "
            "the broker-side checks judge what the client can prove"
        )
    return CheckResult(
        "model_replay",
        verdict,
        observed=observed,
        expected=expected,
        tolerance=tolerance,
        witnesses=wit,
        explanation=(
            "replayed the recorded arrivals through the checker's independent model of Kafka's "
            "ConnectionQuotas"
            + (
                f"; {bad} connection(s) disagree, the first are listed"
                if bad and mode == "acceptor"
                else ""
            )
            + (
                f"; diagnostic on a broker target: {bad} connection(s) disagree with the "
                "model replayed at the client's clock (data.disagreements); not a verdict"
                if mode != "acceptor"
                else ""
            )
            + ("" if n else "; no connections to replay")
        ),
        data={
            "agreement": rate,
            "connections": n,
            **({"disagreements": diagnostics} if mode != "acceptor" else {}),
        },
    )


def check_model_replay(run: Run) -> CheckResult:
    return _result(run, "acceptor" if run.has_source("acceptor") else "client")


CHECKS = [
    Check(
        "model_replay",
        "model",
        check_model_replay,
        True,
        ("acceptor", "broker"),
        doc="recorded decisions equal the independent model's (delay, outcome, throttle)",
        frames=("acceptor_conns", "client_conns"),
    ),
]
