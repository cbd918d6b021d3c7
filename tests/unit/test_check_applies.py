"""Whether a check applies is read from the run's config timeline in Python, before any
Spark job (`Check.applies`, `base.not_applicable`): a limit set at no time of the run is
`n/a` with the very result the check itself gives then; a limit set at any time (even
only after a change) applies; a check the scenario expects is left to say `unknown`."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from analysis.checks import ALL_CHECKS, NA
from analysis.checks.base import Check, CheckResult, not_applicable, not_configured
from analysis.load import config_timeline

BY_NAME = {c.name: c for c in ALL_CHECKS}

#: the config that sets each check's limit (the rest of the keys unset)
SETS: dict[str, dict[str, Any]] = {
    "max_connections": {"max.connections": 10},
    "eviction_rule": {"max.connections": 10},
    "listener_max_connections": {"listener.name.plain.max.connections": 5},
    "max_connections_per_ip": {"max.connections.per.ip": 3},
    "client_ip_concurrency": {"max.connections.per.ip.overrides": {"127.0.0.9": 2}},
    "broker_rate_span": {"max.connection.creation.rate": 20},
    "listener_rate_span": {"listener.name.plain.max.connection.creation.rate": 5},
    "ip_rate_span": {"ip_quotas": {"127.0.0.9": 4}},
    "request_throttle_mutes": {"request_quotas": [{"user": "a", "request_percentage": 5}]},
    "request_quota_model": {"request_quotas": [{"user": "a", "request_percentage": 5}]},
    "client_request_quota_buckets": {"request_quotas": {"user=a": 5}},
    "late_charge_could_not_throttle": {
        "request_quotas": [{"client-id": "c", "request_percentage": 1}]
    },
}


def fake_run(*configs: dict[str, Any], expect: dict[str, Any] | None = None) -> Any:
    """What `applies` may read: the config timeline and run.json, no Spark."""
    rows = [(1000 * i, json.dumps(c)) for i, c in enumerate(configs)]
    return SimpleNamespace(
        timeline=config_timeline(rows, None), meta={}, expect=expect or {}, spark=None
    )


def declared() -> list[Check]:
    return [c for c in ALL_CHECKS if c.applies is not None]


#: checks whose `applies` reads the scenario's expectations, not the config timeline
BY_EXPECT = {"steady_fairness"}


def test_every_declared_check_is_covered_here() -> None:
    assert {c.name for c in declared()} == set(SETS) | BY_EXPECT


def test_fairness_without_a_bound_is_na_before_any_job() -> None:
    check = BY_NAME["steady_fairness"]

    def run(expect: dict[str, Any], clients: bool = True) -> Any:
        r = fake_run({"quota.window.num": 11}, expect=expect)
        r.has_source = lambda source: clients and source == "client"
        return r

    na = not_applicable(check, run({}))
    assert na is not None and na.verdict == NA and na.judged == 0
    assert check.applies(run({"fairness_p99_ratio": 3.0})) is None  # type: ignore[misc]
    # no client rows: the check's own `unknown`; expected by the scenario: its own say
    assert check.applies(run({}, clients=False)) is None  # type: ignore[misc]
    assert not_applicable(check, run({"checks": ["steady_fairness"]})) is None


@pytest.mark.parametrize("name", sorted(SETS))
def test_unset_for_the_whole_run_is_na_as_the_check_says(name: str) -> None:
    check = BY_NAME[name]
    run = fake_run({"quota.window.num": 11})
    what = check.applies(run)  # type: ignore[misc]
    assert what
    result = not_applicable(check, run)
    assert isinstance(result, CheckResult)
    expected = not_configured(name, run, what)
    assert (result.name, result.verdict, result.observed, result.expected) == (
        name,
        NA,
        expected.observed,
        expected.expected,
    )
    assert (result.judged, result.exercised, result.peak, result.limit) == (0, None, None, None)
    assert (result.family, result.judges_limit) == (check.family, check.judges_limit)


@pytest.mark.parametrize("name", sorted(SETS))
def test_set_at_any_time_applies(name: str) -> None:
    check = BY_NAME[name]
    assert check.applies(fake_run(SETS[name])) is None  # type: ignore[misc]
    # set only by a change during the run
    assert check.applies(fake_run({}, SETS[name])) is None  # type: ignore[misc]
    # set, then unset by a change
    assert not_applicable(check, fake_run(SETS[name], {})) is None


@pytest.mark.parametrize("name", sorted(SETS))
def test_expected_by_the_scenario_is_left_to_the_check(name: str) -> None:
    run = fake_run({}, expect={"checks": [name]})
    assert not_applicable(BY_NAME[name], run) is None


def test_a_check_without_applies_is_always_run() -> None:
    check = next(c for c in ALL_CHECKS if c.applies is None)
    assert not_applicable(check, fake_run({})) is None
