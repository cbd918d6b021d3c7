"""Which catalog scenario catches which seeded fault: the one place this mapping lives.

Every fault in ``base.quota.faults.FAULTS`` names the rule it breaks; here each gets
the scenario(s) that exercise that rule with the checks that judge it. ``harness
selftest`` runs each fault against its scenarios, then each scenario once without any
fault (the false-fail control). ``CI_FAULTS`` is the fast subset CI runs: faults whose
scenario is the 20 s ``ci-gate``, so four runs cover three faults and their clean run.
"""

from __future__ import annotations

from dataclasses import dataclass

from base.quota.faults import FAULTS

__all__ = ["CI_FAULTS", "FAULT_SCENARIOS", "Job", "PlanError", "build_plan", "clean_scenarios"]

#: fault name -> the catalog scenarios that cover its rule
FAULT_SCENARIOS: dict[str, tuple[str, ...]] = {
    # exact equality with the bound is a matter of ms timing: the 5/s flood of
    # single-ip-flood sits at its bound for ~1500 decisions (window sizes in steps of 200 ms
    # can equal the count exactly); ci-gate's 1/s needs a window of exactly 10 000 ms
    "violation_at_bound": ("ci-gate", "single-ip-flood"),
    "throttle_uncapped": ("quota-change",),
    "window_n_samples": ("ci-gate",),
    "no_unrecord_ip_throttle": ("ci-gate",),
    "ip_rate_override_ignored": ("ip-rate-override",),
    "ip_default_not_reapplied": ("quota-change",),
    "ip_count_off_by_one": ("ip-count",),
    "max_connections_off_by_one": ("max-connections-protected", "eviction-order"),
    "listener_max_ignored": ("listener-max",),
    "listener_defaults_not_inherited": ("protected-inherits-max", "broker-rate-protected"),
    "protected_counts_broker_rate": ("broker-rate-protected",),
    "protected_evicted": ("protected-over-max",),
    "evict_most_recent": ("eviction-order",),
    "rate_delay_not_waited": ("broker-rate",),
    "delay_doubled": ("broker-rate",),
    "slot_wait_while_free": ("broker-rate",),
    "queue_larger_than_20": ("processor-stall",),
    "request_wrong_entity": ("request-quota-two-entities",),
    "request_throttle_uncapped": ("request-quota-two-entities",),
    "skip_ip_rate_check": ("ci-gate",),
    # the blind spots of the gate's first twenty (issue 28): each needs its own load
    "max_connections_total_off_by_one": ("max-connections-listeners",),
    "ip_count_reject_close_late": ("ip-count",),
    "proxy_source_ignored": ("haproxy-flood",),
    "request_mute_skipped": ("request-quota-greedy",),
    # the fault shows while a bucket's window is shorter than n windows: a young bucket,
    # or one whose samples have gaps (greedy clients muted and pipelining); seldom on
    # request-quota's steady producer, whose bucket stays over its quota. Both process
    # models make the claim (split: where the meters are), so both catch it on greedy
    "late_charge_n_windows": ("request-quota-greedy", "request-quota"),
    # issue 34: a connection taken and never recorded (only `accounting` sees it)
    "accept_unrecorded": ("ci-gate",),
    "state_not_restored": ("acceptor-crash",),
    # issue 29: secured listeners (the acceptor ends TLS on ssl-storm and mutual-tls-quota)
    "user_quota_ignored": ("user-request-quota",),
    "principal_not_reversed": ("mutual-tls-quota",),
    "tls_before_quota": ("ssl-storm",),
    "failed_login_delay_dropped": ("auth-failure-storm",),
    # issue 30: a cluster fronted by one acceptor per broker
    "cluster_change_ignored": ("cluster-quota-change",),
    "other_broker_config_applied": ("cluster-quota-change",),
}

#: the fast subset for CI (all on the 20 s ci-gate scenario)
CI_FAULTS: tuple[str, ...] = ("skip_ip_rate_check", "no_unrecord_ip_throttle", "window_n_samples")


class PlanError(ValueError):
    pass


@dataclass(frozen=True)
class Job:
    """One run: a scenario with a fault (or ``fault=None``: the clean control run)."""

    scenario: str
    fault: str | None

    @property
    def label(self) -> str:
        return f"{self.fault or 'clean'} @ {self.scenario}"

    @property
    def slug(self) -> str:
        return f"{self.fault or 'clean'}--{self.scenario}"


def _split(text: str | None) -> list[str] | None:
    if text is None:
        return None
    return [s.strip() for s in text.split(",") if s.strip()]


def build_plan(faults: str | None = None, scenarios: str | None = None) -> list[Job]:
    """Fault runs (catalog order of faults), then one clean run per scenario used.

    ``faults``/``scenarios``: comma-separated names restricting the plan (``None`` = all).
    """
    known = [f.name for f in FAULTS]
    wanted = _split(faults)
    if wanted is not None:
        bad = [f for f in wanted if f not in FAULT_SCENARIOS]
        if bad:
            raise PlanError(f"--faults: unknown {bad}; known: {', '.join(known)}")
    only = _split(scenarios)
    used = {s for ss in FAULT_SCENARIOS.values() for s in ss}
    if only is not None:
        bad = [s for s in only if s not in used]
        if bad:
            raise PlanError(
                f"--scenarios: {bad} cover no fault; scenarios with faults: {sorted(used)}"
            )
    jobs: list[Job] = []
    for name in known:
        if wanted is not None and name not in wanted:
            continue
        for sc in FAULT_SCENARIOS[name]:
            if only is None or sc in only:
                jobs.append(Job(sc, name))
    if not jobs:
        raise PlanError("no fault covers the scenarios asked for")
    for sc in clean_scenarios(jobs):
        jobs.append(Job(sc, None))
    return jobs


def clean_scenarios(jobs: list[Job]) -> list[str]:
    """The scenarios of the fault jobs, once each, in first-use order."""
    seen: dict[str, None] = {}
    for j in jobs:
        if j.fault is not None:
            seen.setdefault(j.scenario, None)
    return list(seen)
