"""The fronts' metadata log (acceptor.state) and the dynamic config that applies it
(acceptor.dynamic): two fronts of one cluster share `state.dir`, as two brokers
share Kafka's metadata log. No socket, no event loop: `poll` is what the server's timer
calls."""

from __future__ import annotations

from pathlib import Path

import pytest

from acceptor.config import parse_acceptor_config, quota_engines
from acceptor.dynamic import DynamicConfig
from acceptor.state import (
    LOG_FILE,
    ClientQuotaRecord,
    ConfigRecord,
    MetadataLog,
    decode,
    encode,
)
from base.quota.config import ConfigError
from base.quota.faults import FAULT_KEY
from base.quota.requests import DEFAULT

pytestmark = pytest.mark.unit


def front(state: Path, node: int | None, **extra: str) -> DynamicConfig:
    props = {
        "listeners": "CLIENT://127.0.0.1:0",
        "listener.name.client.upstream": "127.0.0.1:9092",
        "max.connections": "100",
        "state.dir": str(state),
        **({"node.id": str(node)} if node is not None else {}),
        **extra,
    }
    cfg = parse_acceptor_config(props)
    quotas, requests = quota_engines(cfg)
    d = DynamicConfig(cfg, quotas, requests, lambda: None)
    d.restore()
    return d


def test_a_record_round_trips_through_its_line() -> None:
    batch = [
        ClientQuotaRecord((("ip", None),), "connection_creation_rate", 5.0),
        ClientQuotaRecord((("user", "alice"), ("client-id", None)), "request_percentage", 50.0),
        ConfigRecord(None, "max.connections", "9"),
        ConfigRecord(2, "max.connections", None),
    ]
    line = encode(batch)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode(line, "here") == batch
    with pytest.raises(ValueError, match=r"state\.dir: here is not a metadata log line"):
        decode(b'{"records": [{"type": "acl"}]}', "here")


def test_a_quota_set_on_one_front_reaches_the_other_at_its_poll(tmp_path: Path) -> None:
    one, two = front(tmp_path, 1), front(tmp_path, 2)
    one.set_ip_quota("127.0.0.9", 3)
    assert one.ip_quotas() == {"127.0.0.9": 3}
    assert one.quotas.ip_quota_for("127.0.0.9") == 3
    assert two.ip_quotas() == {} and two.quotas.ip_quota_for("127.0.0.9") != 3
    assert two.poll() is True
    assert two.ip_quotas() == {"127.0.0.9": 3} and two.quotas.ip_quota_for("127.0.0.9") == 3
    assert two.poll() is False  # nothing new
    two.set_request_quota("alice", DEFAULT, "request_percentage", 40.0)
    assert one.poll() is True
    alice = {"user=alice,client-id=<default>": {"request_percentage": 40.0}}
    assert one.state.request_quotas == alice
    assert one.request_quotas.quota_for("alice", "x") == 40.0


def test_cluster_default_configs_reach_every_front_and_per_broker_ones_only_theirs(
    tmp_path: Path,
) -> None:
    one, two = front(tmp_path, 1), front(tmp_path, 2)
    one.alter_broker_config({"max.connections": "50"})  # resource "": every broker
    two.alter_broker_config({"max.connections": "20"}, node=2)  # resource "2": broker 2
    one.poll()
    two.poll()
    assert one.quota_cfg.max_connections == 50
    assert two.quota_cfg.max_connections == 20  # its own layer wins over the default
    assert one.state.node_config == {} and two.state.node_config == {"max.connections": "20"}
    two.alter_broker_config({"max.connections": None}, node=2)  # reveals the default
    assert two.quota_cfg.max_connections == 50
    assert two.limits()["node.id"] == 2


def test_fronts_apply_the_log_in_one_order(tmp_path: Path) -> None:
    one, two = front(tmp_path, 1), front(tmp_path, 2)
    one.set_ip_quota(None, 5)
    two.set_ip_quota(None, 7)  # committed after one's: two applies one's first, then its own
    one.poll()
    assert one.ip_quotas() == two.ip_quotas() == {"default": 7}


def test_a_restarted_front_replays_the_log_and_the_fault_forgets_it(tmp_path: Path) -> None:
    one = front(tmp_path, 1)
    one.set_ip_quota("127.0.0.9", 3)
    one.alter_broker_config({"max.connections": "40"})
    again = front(tmp_path, 1)
    assert again.ip_quotas() == {"127.0.0.9": 3} and again.quota_cfg.max_connections == 40
    forgot = front(tmp_path, 1, **{FAULT_KEY: "state_not_restored"})
    assert forgot.ip_quotas() == {} and forgot.quota_cfg.max_connections == 100
    one.set_ip_quota("127.0.0.9", None)
    assert forgot.poll() is True  # later changes still reach it
    assert forgot.ip_quotas() == {}


def test_a_bad_change_commits_nothing(tmp_path: Path) -> None:
    one = front(tmp_path, 1)
    with pytest.raises(ConfigError):
        one.alter_broker_config({"max.connections": "-3"})
    assert not (tmp_path / LOG_FILE).exists() or (tmp_path / LOG_FILE).read_bytes() == b""


def test_half_a_line_waits_and_a_corrupt_line_is_named(tmp_path: Path) -> None:
    log = MetadataLog(tmp_path)
    line = encode([ConfigRecord(None, "max.connections", "9")])
    (tmp_path / LOG_FILE).write_bytes(line[:10])
    assert log.read_new() == [] and log.offset == 0
    (tmp_path / LOG_FILE).write_bytes(line + b"{not json\n")
    with pytest.raises(ValueError, match=r"metadata.log line 2"):
        log.read_new()


def test_the_seeded_faults_break_what_they_name(tmp_path: Path) -> None:
    fault = {FAULT_KEY: "cluster_change_ignored"}
    one, deaf = front(tmp_path / "a", 1), front(tmp_path / "a", 2, **fault)
    one.set_ip_quota("127.0.0.9", 3)
    assert deaf.poll() is False and deaf.ip_quotas() == {}  # another front's change lost
    deaf.set_ip_quota("127.0.0.8", 2)  # its own still applies
    assert deaf.ip_quotas() == {"127.0.0.8": 2}
    fault = {FAULT_KEY: "other_broker_config_applied"}
    nosy, two = front(tmp_path / "b", 1, **fault), front(tmp_path / "b", 2)
    two.alter_broker_config({"max.connections": "20"}, node=2)
    nosy.poll()
    assert nosy.quota_cfg.max_connections == 20  # broker 2's own limit enforced on broker 1
