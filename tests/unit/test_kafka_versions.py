"""Kafka's releases differ in how they enforce; each difference is one named switch, kept
by the enforcer (`harness/quota/versions.py`) and the checker (`analysis/versions.py`)
apart (Jepsen) and held to the same answer here, with a trace each switch changes."""

from __future__ import annotations

import random

import pytest

from analysis.model import RateMeter as ModelMeter
from analysis.versions import semantics_for
from harness.acceptor.config import parse_acceptor_config
from harness.quota.config import ConfigError
from harness.quota.meter import RateMeter as EngineMeter
from harness.quota.versions import parse_version, semantics

pytestmark = pytest.mark.unit

RELEASES = ["2.7.0", "2.8.2", "3.6.2", "3.7.2", "3.8.0", "3.9.1", "4.0.0", "4.3.1", "4.4.0"]


@pytest.mark.parametrize("release", RELEASES)
def test_the_enforcer_and_the_checker_agree_on_every_switch(release: str) -> None:
    engine, model = semantics(release), semantics_for(release)
    assert engine.version == model.version
    assert engine.sampled_stat_overlap == model.sampled_stat_overlap
    assert engine.sampled_stat_overlap == (engine.version >= (3, 8, 0))


#: 10 at t=0 and 10 at t=999 fill two samples; at t=11 000 the first sample's *start* is
#: n·w old (purged before 3.8) but its last event is not (kept from 3.8 on)
TRACE = [0] * 10 + [999] * 10 + [11_000] * 3


def _decisions(meter: EngineMeter | ModelMeter, trace: list[int]) -> list[int]:
    if isinstance(meter, EngineMeter):
        return [meter.record_bounded(1.0, t, 1000) for t in trace]
    return [meter.record_bounded(t) for t in trace]


@pytest.mark.parametrize("overlap", [True, False])
def test_engine_and_model_meters_decide_alike_in_each_release(overlap: bool) -> None:
    rng = random.Random(7)
    trace = sorted(rng.randrange(0, 40_000) for _ in range(400))
    for t in (TRACE, trace):
        engine = EngineMeter(11, 1000, 2.0, legacy=not overlap)
        model = ModelMeter(2.0, 11, 1000, overlap=overlap)
        assert _decisions(engine, t) == _decisions(model, t)


def test_the_meter_switch_changes_a_decision() -> None:
    new = _decisions(ModelMeter(2.0, 11, 1000, overlap=True), TRACE)
    old = _decisions(ModelMeter(2.0, 11, 1000, overlap=False), TRACE)
    assert new != old


def test_the_acceptor_enforces_as_the_release_it_is_told() -> None:
    base = {"listeners": "CLIENT://127.0.0.1:0", "listener.name.client.upstream": "h:1"}
    assert parse_acceptor_config(base).kafka.name == "4.3.1"
    old = parse_acceptor_config({**base, "kafka.version": "3.7.2"}).kafka
    assert old.name == "3.7.2" and not old.sampled_stat_overlap


@pytest.mark.parametrize(
    "value, reason", [("4.x", "expected a Kafka release"), ("2.6.3", "need Kafka 2.7.0")]
)
def test_a_release_the_model_cannot_judge_is_refused_naming_the_key(
    value: str, reason: str
) -> None:
    with pytest.raises(ConfigError) as err:
        parse_version(value)
    assert err.value.key == "kafka.version" and reason in err.value.reason


def test_release_is_the_one_spelling_of_a_version() -> None:
    from harness.quota.config import ConfigError
    from harness.quota.versions import release

    assert release("3.9") == "3.9.0" and release(" 4.4.0 ") == "4.4.0"
    with pytest.raises(ConfigError, match=r"--kafka-version=.2.6.3.*2.7.0 or newer"):
        release("2.6.3", key="--kafka-version")


def test_another_release_runs_on_the_local_launcher_only() -> None:
    """Images hold the default release and an existing cluster runs its own: asking either
    for another is refused before anything starts."""
    from harness.broker import BrokerError, start_broker

    for kw in ({"launcher": "container"}, {"bootstrap_server": "127.0.0.1:9"}):
        with pytest.raises(BrokerError, match=r"use the local launcher for Kafka 3\.9\.1"):
            start_broker(version="3.9.1", progress=lambda _m: None, **kw)
