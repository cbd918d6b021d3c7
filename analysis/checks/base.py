"""The shape every check shares: a result value, a registry entry, and Jepsen's merge.

A check is a pure function of the run (history + metadata) returning a `CheckResult`.
A check that raises yields `unknown` with the error, never `pass`: a crashed checker
proves nothing. Verdicts merge fail > unknown > pass.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from analysis.load import Run

PASS, FAIL, UNKNOWN = "pass", "fail", "unknown"
_RANK = {PASS: 0, UNKNOWN: 1, FAIL: 2}
MAX_WITNESSES = 10


@dataclass
class CheckResult:
    name: str
    verdict: str
    observed: str
    expected: str
    tolerance: str = ""
    witnesses: list[dict[str, Any]] = field(default_factory=list)
    explanation: str = ""
    family: str = ""
    needs_load: bool = False
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "family": self.family,
            "verdict": self.verdict,
            "observed": self.observed,
            "expected": self.expected,
            "tolerance": self.tolerance,
            "witnesses": self.witnesses[:MAX_WITNESSES],
            "explanation": self.explanation,
            "needs_load": self.needs_load,
        }


CheckFn = Callable[["Run"], CheckResult]


@dataclass(frozen=True)
class Check:
    name: str
    family: str
    fn: CheckFn
    needs_load: bool
    targets: tuple[str, ...] = ("acceptor",)
    doc: str = ""


def merge(verdicts: Iterable[str]) -> str:
    worst = PASS
    for v in verdicts:
        if _RANK.get(v, 1) > _RANK[worst]:
            worst = v if v in _RANK else UNKNOWN
    return worst


def run_check(check: Check, run: Run) -> CheckResult:
    """Run one check; an exception becomes `unknown` naming the error."""
    try:
        result = check.fn(run)
    except Exception as exc:  # the checker broke, the system under test did not pass
        tb = traceback.format_exc(limit=3)
        return CheckResult(
            check.name,
            UNKNOWN,
            observed=f"check crashed: {type(exc).__name__}: {exc}",
            expected="the check to run to completion",
            explanation=f"the checker itself failed, so nothing is proven.\n{tb}",
            family=check.family,
            needs_load=check.needs_load,
        )
    result.name = check.name
    result.family = check.family
    result.needs_load = check.needs_load
    if result.verdict not in _RANK:
        result.explanation += f" (invalid verdict {result.verdict!r} treated as unknown)"
        result.verdict = UNKNOWN
    return result


def witness(row: Mapping[str, Any], why: str, **extra: Any) -> dict[str, Any]:
    """A witness names the connection (conn_id / client_ip:port / time) and why it broke."""
    out: dict[str, Any] = {}
    for key in ("conn_id", "client_ip", "client_port", "listener"):
        if row.get(key) is not None:
            out[key] = row[key]
    ts = row.get("ts") or row.get("accept_ts") or row.get("admit_ts") or row.get("connect_ok_ts")
    if ts is not None:
        out["ts"] = ts.isoformat() if hasattr(ts, "isoformat") else str(ts)
    for key in ("mono_ns", "accept_ns", "t1_ns"):
        if row.get(key) is not None:
            out["mono_ns"] = int(row[key])
            break
    out.update(extra)
    out["why"] = why
    return out


def not_limited(name: str, run: Run, what: str) -> CheckResult:
    """Policy for a rule with no applicable limit (Int.MaxValue throughout the run).

    `pass` ("not limited"): nothing was promised, so nothing was broken — unless the
    scenario's expect.checks names this check, then `unknown`: the scenario meant to test a
    limit that was never configured, so the run proves nothing about it.
    """
    expected_checks = run.expect.get("checks") or []
    if name in expected_checks:
        return CheckResult(
            name,
            UNKNOWN,
            observed=f"not limited: {what} is Int.MaxValue for the whole run",
            expected=f"{what} configured (the scenario lists this check as meaningful)",
            explanation="the scenario expected this limit to be tested but it was never set",
        )
    return CheckResult(
        name,
        PASS,
        observed=f"not limited: {what} is Int.MaxValue for the whole run",
        expected="nothing (no limit configured)",
        explanation="no limit was configured, so there is nothing to violate",
    )


def fmt(x: float | None, digits: int = 1) -> str:
    if x is None:
        return "-"
    if float(x) >= 2_147_483_647:
        return "Int.MaxValue"
    if float(x) == int(x):
        return str(int(x))
    return f"{x:.{digits}f}"
