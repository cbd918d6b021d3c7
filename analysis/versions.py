"""The Kafka release a run is judged as, and the behaviours that differ between releases.

The checker's own copy (it never imports `base.quota`, Jepsen): each difference is one
named switch here; `base/quota/versions.py` holds the enforcer's, and
`tests/unit/test_kafka_versions.py` keeps the two giving the same answer for every
release. The release comes from the runner's intent: its `config` rows carry
`kafka.version` (the broker's release on a broker target; on the acceptor target, the
release the runner told the acceptor to enforce as), else run.json
`versions.kafka_semantics`, else the current release. docs/kafka-versions.md says where
each switch comes from in Kafka's sources.

- `sampled_stat_overlap` (3.8.0, `SampledStat.advance` / `purgeObsoleteSamples`): n+1
  samples, a sample purged by its last event; before, n samples purged by their start.
- `zookeeper_cluster_actions` (the metadata mode: the runner's `kafka.metadata`, else
  run.json `versions.metadata`, else ZooKeeper before 3.3): a ZooKeeper-mode broker serves
  LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown and AlterIsr and answers
  them exempt from request quotas, as it does WriteTxnMarkers; a KRaft broker serves none
  of them and exempts WriteTxnMarkers only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: the release a run with no recorded release is judged as (base.quota.versions.CURRENT,
#: held equal by tests/unit/test_kafka_versions.py)
CURRENT = "4.4.0"
_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?")


#: the cluster actions a broker answers with `sendResponseExemptThrottle` (KafkaApis.handle)
EXEMPT_KRAFT = {27: "WriteTxnMarkers"}
EXEMPT_ZOOKEEPER = {
    4: "LeaderAndIsr",
    5: "StopReplica",
    6: "UpdateMetadata",
    7: "ControlledShutdown",
    27: "WriteTxnMarkers",
    56: "AlterIsr",
}
#: cluster actions a broker does not serve at all (not in its listener's ApiVersionManager):
#: no quota outcome is defined for them, so the request model does not judge them
NOT_SERVED_KRAFT = {
    4: "LeaderAndIsr",
    5: "StopReplica",
    6: "UpdateMetadata",
    7: "ControlledShutdown",
    52: "Vote",
    53: "BeginQuorumEpoch",
    54: "EndQuorumEpoch",
    56: "AlterPartition",
    58: "Envelope",
    62: "BrokerRegistration",
    63: "BrokerHeartbeat",
    67: "AllocateProducerIds",
}
NOT_SERVED_ZOOKEEPER = {
    52: "Vote",
    53: "BeginQuorumEpoch",
    54: "EndQuorumEpoch",
    55: "DescribeQuorum",
    58: "Envelope",
    62: "BrokerRegistration",
    63: "BrokerHeartbeat",
}


@dataclass(frozen=True)
class Semantics:
    version: tuple[int, int, int]
    #: the rate meter keeps n+1 samples and purges by last event (Kafka >= 3.8.0)
    sampled_stat_overlap: bool
    #: metadata in ZooKeeper: the controller-to-broker cluster actions are served, exempt
    zookeeper_cluster_actions: bool = False

    @property
    def exempt_api_keys(self) -> dict[int, str]:
        """API keys answered without a request-quota charge, with their names."""
        return EXEMPT_ZOOKEEPER if self.zookeeper_cluster_actions else EXEMPT_KRAFT

    @property
    def not_served_api_keys(self) -> dict[int, str]:
        """Cluster actions this broker closes the connection on (no quota outcome)."""
        if not self.zookeeper_cluster_actions:
            return NOT_SERVED_KRAFT
        if self.version < (3, 0, 0):  # AllocateProducerIds came in 3.0
            return {**NOT_SERVED_ZOOKEEPER, 67: "AllocateProducerIds"}
        return NOT_SERVED_ZOOKEEPER

    @property
    def name(self) -> str:
        return ".".join(str(x) for x in self.version)

    @property
    def meter(self) -> str:
        """How the rate meter is modelled, for the report."""
        if self.sampled_stat_overlap:
            return "n+1 samples purged by last event (Kafka >= 3.8)"
        return "n samples purged by start (Kafka < 3.8)"


def semantics_for(version: str | None, metadata: str | None = None) -> Semantics:
    """The semantics of `version` ("3.7.2", "4.4.0"; None or unreadable: the current) in
    `metadata` mode ("kraft" or "zookeeper"; None: ZooKeeper before 3.3, as the launcher
    and the enforcer default; ZooKeeper is never a 4.x mode)."""
    m = _VERSION.match(str(version or "").strip()) or _VERSION.match(CURRENT)
    assert m is not None
    v = (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))
    mode = str(metadata or "").strip().lower() or ("zookeeper" if v < (3, 3, 0) else "kraft")
    return Semantics(
        version=v,
        sampled_stat_overlap=v >= (3, 8, 0),
        zookeeper_cluster_actions=mode == "zookeeper" and v < (4, 0, 0),
    )
