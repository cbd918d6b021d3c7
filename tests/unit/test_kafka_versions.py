"""Kafka's releases differ in how they enforce; each difference is one named switch, kept
by the enforcer (`base/quota/versions.py`) and the checker (`analysis/versions.py`)
apart (Jepsen) and held to the same answer here, with a trace each switch changes."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from acceptor.config import parse_acceptor_config
from analysis.model import RateMeter as ModelMeter
from analysis.versions import CURRENT as CHECKER_CURRENT
from analysis.versions import semantics_for
from base.quota.config import ConfigError
from base.quota.meter import RateMeter as EngineMeter
from base.quota.versions import CURRENT, parse_version, semantics

pytestmark = pytest.mark.unit

RELEASES = ["2.7.0", "2.8.2", "3.6.2", "3.7.2", "3.8.0", "3.9.1", "4.0.0", "4.3.1", "4.4.0"]


def test_the_default_release_is_one_for_the_broker_the_enforcer_and_the_checker() -> None:
    from broker.artifacts import KAFKA_VERSION

    assert KAFKA_VERSION == CURRENT == CHECKER_CURRENT
    assert semantics().version == semantics_for(None).version == parse_version(CURRENT)


@pytest.mark.parametrize("metadata", [None, "kraft", "zookeeper"])
@pytest.mark.parametrize("release", RELEASES)
def test_the_enforcer_and_the_checker_agree_on_every_switch(
    release: str, metadata: str | None
) -> None:
    if metadata == "zookeeper" and release >= "4":
        with pytest.raises(ConfigError, match="no ZooKeeper mode"):
            semantics(release, metadata)
        assert not semantics_for(release, metadata).zookeeper_cluster_actions
        return
    engine, model = semantics(release, metadata), semantics_for(release, metadata)
    assert engine.version == model.version
    assert engine.sampled_stat_overlap == model.sampled_stat_overlap
    assert engine.sampled_stat_overlap == (engine.version >= (3, 8, 0))
    assert engine.zookeeper_cluster_actions == model.zookeeper_cluster_actions
    assert engine.exempt_api_keys == set(model.exempt_api_keys)
    if metadata is None:  # the default mode: ZooKeeper before 3.3, as the launcher's
        assert engine.zookeeper_cluster_actions == (engine.version < (3, 3, 0))
    # nothing is both exempt and not served, and WriteTxnMarkers is exempt everywhere
    assert not set(model.exempt_api_keys) & set(model.not_served_api_keys)
    assert 27 in engine.exempt_api_keys


def test_the_metadata_switch_changes_what_is_charged() -> None:
    """A ZooKeeper broker answers LeaderAndIsr (4) without a charge; the enforcer told
    KRaft charges what reaches it (a KRaft broker would not serve it at all)."""
    from base.quota.requests import RequestQuotas

    charged = {}
    for mode in ("zookeeper", "kraft"):
        rq = RequestQuotas(exempt_api_keys=semantics("3.6.2", mode).exempt_api_keys)
        rq.set_quota(None, "hot", "request_percentage", 1.0)
        charged[mode] = [
            rq.record_request("ANONYMOUS", "hot", 4, 50_000_000, t).throttle_ms
            for t in range(0, 200, 10)
        ]
    assert not any(charged["zookeeper"]) and any(charged["kraft"])


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
    assert parse_acceptor_config(base).kafka.name == CURRENT == "4.4.0"
    old = parse_acceptor_config({**base, "kafka.version": "3.7.2"}).kafka
    assert old.name == "3.7.2" and not old.sampled_stat_overlap and old.metadata == "kraft"
    zk = parse_acceptor_config({**base, "kafka.version": "2.8.2"}).kafka
    assert zk.metadata == "zookeeper" and 4 in zk.exempt_api_keys
    told = parse_acceptor_config({**base, "kafka.version": "2.8.2", "kafka.metadata": "kraft"})
    assert told.kafka.exempt_api_keys == {27}
    for bad, reason in (("zk", "expected kraft or zookeeper"), ("zookeeper", "no ZooKeeper")):
        with pytest.raises(ConfigError) as err:
            parse_acceptor_config({**base, "kafka.metadata": bad})
        assert err.value.key == "kafka.metadata" and reason in err.value.reason


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
    from base.quota.config import ConfigError
    from base.quota.versions import release

    assert release("3.9") == "3.9.0" and release(" 4.4.0 ") == "4.4.0"
    with pytest.raises(ConfigError, match=r"--kafka-version=.2.6.3.*2.7.0 or newer"):
        release("2.6.3", key="--kafka-version")


def test_another_release_is_refused_where_it_cannot_run() -> None:
    """An existing cluster runs its own release, and a container runs KRaft only: asking
    either for what it cannot be is refused before anything starts (a KRaft release other
    than the default runs in its own image: tests/integration/test_container_versions.py)."""
    from broker import BrokerError, start_broker
    from broker.images import _image_release

    with pytest.raises(BrokerError, match=r"existing cluster runs its own release"):
        start_broker(version="3.9.1", bootstrap_server="127.0.0.1:9", progress=lambda _m: None)
    with pytest.raises(BrokerError, match=r"2\.8\.2.*ZooKeeper mode.*local launcher only"):
        start_broker(version="2.8.2", launcher="container", progress=lambda _m: None)
    with pytest.raises(BrokerError, match=r"zookeeper with launcher=.container.*local launcher"):
        start_broker(
            version="3.6.2", zookeeper=True, launcher="container", progress=lambda _m: None
        )
    assert _image_release("3.9") == "3.9.0"
    with pytest.raises(BrokerError, match=r"--kafka-version='3\.2\.3'.*KRaft.*3\.3"):
        _image_release("3.2.3")
    with pytest.raises(BrokerError, match=r"2\.7\.0 or newer"):
        _image_release("2.6.0")


def test_the_runner_states_the_metadata_mode_it_knows() -> None:
    """A started broker's mode is stated (a container runs KRaft; a local broker with its
    ZooKeeper runs ZooKeeper mode); an existing cluster's is not known, so not stated."""
    from broker import ExternalBroker
    from broker.container import ContainerBroker
    from harness.runner.kafka_side import metadata_mode

    assert metadata_mode(ContainerBroker.__new__(ContainerBroker)) == "kraft"
    assert metadata_mode(type("Local", (), {"zookeeper": object()})()) == "zookeeper"
    assert metadata_mode(ExternalBroker.__new__(ExternalBroker)) is None
    assert metadata_mode(None) is None


@pytest.mark.parametrize(
    "kw",
    [{"version": "2.8.2"}, {"request_log": True}],
    ids=["zookeeper-release", "request-log"],
)
def test_a_container_cluster_refuses_what_it_cannot_run(tmp_path: Path, kw: dict[str, Any]) -> None:
    """Checked before any Docker call: a cluster in containers runs KRaft releases and no
    request log (secured listeners it runs: tests/integration/test_container.py)."""
    from broker import BrokerError
    from broker.cluster import start_cluster

    with pytest.raises(BrokerError, match=r"launcher='container': containers run KRaft"):
        start_cluster(3, launcher="container", workdir=tmp_path, progress=lambda _m: None, **kw)
