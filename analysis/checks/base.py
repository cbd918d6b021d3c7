"""The shape every check shares: a result value, a registry entry, and Jepsen's merge.

A check is a pure function of the run (history + metadata) returning a `CheckResult`.
Four verdicts, and each claims only what was judged:

- `pass`: the rule applied, was judged on `judged` events and held;
- `fail`: the rule was broken (witnesses name where);
- `unknown`: the rule applies but could not be judged: the check crashed, the target
  does not expose what it needs, the generator fell short, or the load never reached the
  limit (`not_exercised`: `exercised=False` with the `peak` seen against the `limit`);
- `n/a`: the rule does not apply to this run (the limit is not configured for the whole
  run, `not_configured`). Never counted as a pass; it merges as nothing.

A rule often has parts judged on different events (a per-IP count reject is never
served, and it is closed at once: the second is judged only where the client's EOF time
is trusted). A check lists them as `Part`s with their own `judged` counts; a part that
judged nothing makes a passing check `unknown`, naming the part and the load that would
judge it, so a check never reads as exercised in a part it never saw.

Verdicts merge fail > unknown > pass; n/a only when every check is n/a.
A check that judges a configured limit (`Check(judges_limit=True)`) says whether the load
reached it (`exercised`); the gate (analysis.verdict.overall) needs at least one such
check exercised and passed.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from analysis.model import INT_MAX

if TYPE_CHECKING:
    from analysis.load import Run

PASS, FAIL, UNKNOWN, NA = "pass", "fail", "unknown", "n/a"
VERDICTS = (PASS, FAIL, UNKNOWN, NA)
_RANK = {NA: -1, PASS: 0, UNKNOWN: 1, FAIL: 2}
MAX_WITNESSES = 10
NOT_EXERCISED = "not exercised: the load never reached the limit"


@dataclass(frozen=True)
class Part:
    """One part of a check's rule and the events it was judged on."""

    name: str
    judged: int
    #: what was judged, or why nothing was (e.g. "steady clients only")
    note: str = ""
    #: the load that would judge it when `judged` is 0
    hint: str = ""

    def describe(self) -> str:
        return f"{self.name}: {self.judged} judged" + (f", {self.note}" if self.note else "")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "judged": self.judged, "note": self.note, "hint": self.hint}


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
    #: how many events (connections, spans, requests...) the rule was judged on
    judged: int = 0
    #: for a configured limit: did the load reach it? None when the notion does not apply
    exercised: bool | None = None
    #: the highest value the load reached, and the limit it is compared with (same unit)
    peak: float | None = None
    limit: float | None = None
    #: what to raise when not exercised (e.g. "the arrival rate of 127.0.0.9")
    raise_hint: str = ""
    judges_limit: bool = False
    #: the rule's parts, each with its own judged count (empty: the rule is one part)
    parts: list[Part] = field(default_factory=list)

    def unjudged_parts(self) -> list[Part]:
        return [p for p in self.parts if p.judged <= 0]

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
            "judged": self.judged,
            "exercised": self.exercised,
            "peak": self.peak,
            "limit": self.limit,
            "raise_hint": self.raise_hint,
            "judges_limit": self.judges_limit,
            "parts": [p.to_dict() for p in self.parts],
            # a cluster: each broker's own result (analysis.checks.broker_side.per_broker)
            **({"per_broker": self.data["per_broker"]} if "per_broker" in self.data else {}),
            # instants a check publishes for benches to bucket (e.g. accounting's lost attempts)
            **({"series": self.data["series"]} if "series" in self.data else {}),
        }


CheckFn = Callable[["Run"], CheckResult]
#: whether a check's rule applies, read in Python before any Spark job (the run's config
#: timeline and run.json): None when it applies, else what is not configured (the `what`
#: its `not_configured` result names)
AppliesFn = Callable[["Run"], "str | None"]


@dataclass(frozen=True)
class Check:
    name: str
    family: str
    fn: CheckFn
    needs_load: bool
    targets: tuple[str, ...] = ("acceptor",)
    doc: str = ""
    #: judges a configured limit: counts towards "at least one limit exercised and passed"
    judges_limit: bool = False
    #: the limit it judges is configured at some time of the run (`AppliesFn`); the same
    #: test the check itself makes, so `not_applicable` answers `n/a` without running it
    applies: AppliesFn | None = None
    #: the shared frames it reads whenever it runs (`analysis.frames.SHARED`): built once
    #: for the run before the checks start, so its time is its own
    frames: tuple[str, ...] = ()


def merge(verdicts: Iterable[str]) -> str:
    """Jepsen's merge: fail > unknown > pass; n/a merges as nothing (all n/a → n/a)."""
    worst = NA
    for v in verdicts:
        rank = _RANK.get(v, _RANK[UNKNOWN])
        if rank > _RANK[worst]:
            worst = v if v in _RANK else UNKNOWN
    return worst


def merge_parts(results: Iterable[CheckResult]) -> list[Part]:
    """The parts of one check judged on several views (fronts, processes): each part's
    judged counts summed, in first-seen order."""
    parts: dict[str, Part] = {}
    for r in results:
        for p in r.parts:
            seen = parts.get(p.name)
            total = p.judged + (seen.judged if seen is not None else 0)
            # the note of a view that judged the part (a view that saw nothing says why
            # only while no view judged it)
            note = p.note if seen is None or (p.judged > 0 and seen.judged <= 0) else seen.note
            parts[p.name] = Part(p.name, total, note, p.hint)
    return list(parts.values())


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
            judges_limit=check.judges_limit,
            data={"crashed": True},
        )
    result.name = check.name
    result.family = check.family
    result.needs_load = check.needs_load
    result.judges_limit = check.judges_limit
    if result.verdict == PASS and result.judged <= 0 and check.judges_limit:
        # no check passes on nothing: a limit judged on zero events proves nothing
        result.verdict = UNKNOWN
        result.exercised = False if result.exercised is None else result.exercised
        result.explanation = f"nothing was judged (0 events). {result.explanation}".strip()
    unjudged = result.unjudged_parts()
    if result.verdict == PASS and unjudged:
        # exercised only in the parts it judged: a part that saw nothing proves nothing
        result.verdict = UNKNOWN
        # unknown only for want of events in a part: merged with other views (fronts,
        # processes) it adds nothing, and the merged parts say whether any view judged it
        result.data["parts_unjudged_only"] = True
        names = ", ".join(f"{p.name} ({p.note})" if p.note else p.name for p in unjudged)
        result.explanation = f"part(s) judged on 0 events: {names}. {result.explanation}".strip()
        hints = [p.hint for p in unjudged if p.hint]
        if hints:
            result.raise_hint = "; ".join(hints)
    if result.verdict not in _RANK:
        result.explanation += f" (invalid verdict {result.verdict!r} treated as unknown)"
        result.verdict = UNKNOWN
    return result


def not_applicable(check: Check, run: Run) -> CheckResult | None:
    """The check's `n/a` result when its limit is not configured at any time of the run,
    decided before any Spark job (`Check.applies`): the very result the check gives then
    (`not_configured`), so no job starts for it. None when the rule applies, and when the
    scenario's expect.checks names the check (that `unknown` is the check's own to give,
    with what it saw)."""
    if check.applies is None:
        return None
    what = check.applies(run)
    if what is None:
        return None
    result = not_configured(check.name, run, what)
    if result.verdict != NA:
        return None
    result.family = check.family
    result.needs_load = check.needs_load
    result.judges_limit = check.judges_limit
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


def not_configured(name: str, run: Run, what: str) -> CheckResult:
    """The rule's limit is Int.MaxValue for the whole run: `n/a`, never `pass`.

    `unknown` instead when the scenario's expect.checks names this check: the scenario
    meant to test a limit that was never configured, so the run proves nothing about it.
    """
    expected_checks = run.expect.get("checks") or []
    observed = f"not configured: {what} (unset / Int.MaxValue for the whole run)"
    if name in expected_checks:
        return CheckResult(
            name,
            UNKNOWN,
            observed=observed,
            expected=f"{what} configured (the scenario lists this check as meaningful)",
            explanation="the scenario expected this limit to be tested but it was never set",
            exercised=False,
            raise_hint=f"configure {what}",
        )
    return CheckResult(
        name,
        NA,
        observed=observed,
        expected="nothing (no limit configured)",
        explanation="n/a: the rule does not apply to this run",
    )


not_limited = not_configured  # the older name


def not_exercised(
    name: str,
    what: str,
    peak: float,
    limit: float,
    *,
    judged: int = 0,
    unit: str = "",
    hint: str = "",
    expected: str = "",
) -> CheckResult:
    """The limit is configured but the load never reached it: `unknown`, with the peak."""
    u = f" {unit}" if unit else ""
    return CheckResult(
        name,
        UNKNOWN,
        observed=f"{NOT_EXERCISED} (peak {fmt(peak)}{u} vs limit {fmt(limit)}{u})",
        expected=expected or f"load reaching {what}",
        explanation=(
            f"{what} was configured but never approached, so the run proves nothing about it"
            + (f"; raise {hint}" if hint else "")
        ),
        judged=judged,
        exercised=False,
        peak=float(peak),
        limit=float(limit),
        raise_hint=hint or f"the load against {what}",
        data={"not_exercised": True},
    )


def adds_nothing(r: CheckResult) -> bool:
    """A view's result (one broker's, one acceptor process's) that proves nothing either
    way: nothing to judge, a limit the load never reached there, or a pass that is unknown
    only because one of its parts saw no event there (a restarted front whose clients were
    all refused while its broker was down connected none: the merged parts count what the
    other views judged). Merged with the other
    views it adds nothing; it stays visible in `observed` and the per-broker table."""
    if r.verdict == NA:
        return True
    return r.verdict == UNKNOWN and (
        r.judged == 0
        or bool(r.data.get("not_exercised"))
        or bool(r.data.get("parts_unjudged_only"))
    )


def cluster_nodes(run: Run) -> list[int]:
    """The node ids of a run against a cluster (`run.json` ``brokers``); [] for one broker.
    A cluster's per-broker rules are judged per broker (`broker_side.per_broker`)."""
    brokers = run.meta.get("brokers") or {}
    nodes = sorted(int(n) for n in brokers) if isinstance(brokers, dict) else []
    return nodes if len(nodes) > 1 else []


def nothing_judged(name: str, what: str, expected: str = "") -> CheckResult:
    """A model-free rule with zero relevant events: `unknown`, never `pass`."""
    return CheckResult(
        name,
        UNKNOWN,
        observed=f"0 {what}: nothing to judge",
        expected=expected or f"at least one {what}",
        explanation="no relevant event was recorded, so the rule was not judged",
        judged=0,
        exercised=False,
    )


def fmt(x: float | None, digits: int = 1) -> str:
    if x is None:
        return "-"
    if float(x) >= INT_MAX:
        return "Int.MaxValue"
    if float(x) == int(x):
        return str(int(x))
    return f"{x:.{digits}f}"
