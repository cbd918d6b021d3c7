"""Config testimony: the enforcer took every change the runner made, and no other.

The runner writes its own `config` rows (`detail.origin = "runner"`): the limits it
intended, written once the target acknowledged them, with `applied_from_mono_ns` when it
started applying. The enforcer (our acceptor) writes a row on start and on every admin
change it applied, before it answers. Both stamp the host's CLOCK_MONOTONIC, so for every
runner row the enforcer's last row inside [applied_from, acknowledged] must carry the same
limits; an enforcer row outside every bracket must equal the version then in force. A
front of a fronted cluster that did not take the change itself applies it from the shared
metadata log after the acknowledgement: its bracket ends at its first such row (before
the runner's next change), as each Kafka broker applies a committed record in its own time.
The checker judges every other rule by the runner's limits (analysis.load), so a change
the enforcer never took also shows up there as the enforcer breaking the runner's limits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from analysis.checks.base import FAIL, PASS, UNKNOWN, Check, CheckResult, witness
from analysis.load import applied_on_front, as_stated, limit_values
from analysis.model import Limits

if TYPE_CHECKING:
    from analysis.load import Run

NAME = "config_testimony"


def _diff(want: dict[str, Any], got: dict[str, Any]) -> str:
    keys = [k for k in want if want.get(k) != got.get(k)]
    return "; ".join(f"{k}: runner {want.get(k)!r}, enforcer {got.get(k)!r}" for k in keys)


def check_config_testimony(run: Run) -> CheckResult:
    runner, enforcer = run.testimony.runner, run.testimony.enforcer
    expected = "the enforcer's config rows carry every change the runner applied, and no other"
    tolerance = (
        "none beyond the runner's bracket [applied_from, acknowledged]: both writers stamp "
        "the host's CLOCK_MONOTONIC and the acceptor records a change before answering"
    )
    if not runner:
        return CheckResult(
            NAME,
            UNKNOWN,
            observed=f"no runner config rows ({len(enforcer)} enforcer rows)",
            expected=expected,
            explanation=(
                "the runner left no testimony of its own (older run or hand-built history): "
                "the limits judged are the enforcer's own, so a lost change cannot be seen"
            ),
        )
    if not enforcer:
        return CheckResult(
            NAME,
            UNKNOWN,
            observed=f"{len(runner)} runner config rows; the target wrote none of its own",
            expected=expected,
            explanation=(
                "the target (Kafka itself) records no config rows here, so its limits "
                "cannot be compared; every check judges by the runner's limits"
            ),
            judged=0,
        )
    r_vals = [(ns, d, limit_values(Limits.from_config(d))) for ns, d in runner]
    e_vals = [(ns, limit_values(Limits.from_config(d))) for ns, d in enforcer]
    brackets: list[tuple[int, int]] = []
    wit: list[dict[str, Any]] = []
    # an acceptor killed and restarted: each process testifies for the runner's rows of
    # its own life (a restarted one's first row must then equal the limits in force)
    inc = run.incarnation
    life = (inc.first_ns, inc.last_ns) if inc is not None else None
    judged = 0
    for i, (ns, detail, want) in enumerate(r_vals):
        lo = detail.get("applied_from_mono_ns")
        lo = int(lo) if isinstance(lo, int) else ns
        hi = ns
        if run.front_node is not None and not any(
            as_stated(want, vals) == want for e_ns, vals in e_vals if lo <= e_ns <= ns
        ):  # one front of a cluster: a change another front took, applied from the log
            hi = applied_on_front(run.testimony, i, want) or ns
        brackets.append((lo, hi))
        if life is not None and (ns < life[0] or lo > life[1]):
            continue
        judged += 1
        inside = [vals for e_ns, vals in e_vals if lo <= e_ns <= hi]
        before = [vals for e_ns, vals in e_vals if e_ns < lo]
        state = inside[-1] if inside else (before[-1] if before else None)
        if state is not None:
            state = as_stated(want, state)
        cause = detail.get("cause") or ("start" if i == 0 else "change")
        if state is None:
            wit.append(
                witness(
                    {"mono_ns": ns, "ts": run.wall(ns)},
                    f"runner {cause}: the enforcer had recorded no limits by then",
                )
            )
        elif state != want:
            what = "never took the change" if not inside else "took different limits"
            wit.append(
                witness(
                    {"mono_ns": ns, "ts": run.wall(ns)},
                    f"runner {cause}: the enforcer {what} ({_diff(want, state)})",
                )
            )
    first_ack = r_vals[0][0]
    for e_ns, vals in e_vals:
        if e_ns <= first_ack or any(lo <= e_ns <= hi for lo, hi in brackets):
            continue
        in_force = [want for ns, _d, want in r_vals if ns <= e_ns][-1]
        vals = as_stated(in_force, vals)
        if vals != in_force:
            wit.append(
                witness(
                    {"mono_ns": e_ns, "ts": run.wall(e_ns)},
                    f"the enforcer changed its limits with no change from the runner "
                    f"({_diff(in_force, vals)})",
                )
            )
    if life is not None:
        judged += sum(1 for e_ns, _v in e_vals if e_ns > first_ack)
    changes = len(runner) - 1
    observed = (
        f"{len(runner)} runner rows ({changes} change(s)), {len(enforcer)} enforcer rows; "
        f"{len(wit)} disagreement(s)"
    )
    return CheckResult(
        NAME,
        FAIL if wit else PASS,
        observed=observed,
        expected=expected,
        tolerance=tolerance,
        witnesses=sorted(wit, key=lambda w: int(w.get("mono_ns") or 0)),
        explanation=(
            "the enforcer's limits differ from what the runner applied; the other checks "
            "judged by the runner's limits"
            if wit
            else "the enforcer recorded exactly the limits the runner applied"
        ),
        judged=judged,
    )


CHECKS = [
    Check(
        NAME,
        "config",
        check_config_testimony,
        False,
        doc="the enforcer's config rows match every change the runner applied",
    ),
]
