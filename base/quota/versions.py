"""Which Kafka the engine enforces as: each behaviour that differs between Kafka
releases is one named switch, set from `kafka.version` (docs/kafka-versions.md).

The checker keeps its own copy of these switches (`analysis/versions.py`, never
importing this module: Jepsen); `tests/unit/test_kafka_versions.py` holds the two to the
same answer for every version and shows each switch changing a decision.

Switches:

- `sampled_stat_overlap` (Kafka 3.8.0, `clients/.../metrics/stats/SampledStat.java`:
  `advance`, `purgeObsoleteSamples`, `Sample.lastEventMs`): the rate meter keeps n+1
  samples and purges a sample by its last event, so a sample that started before the
  window but overlaps it still counts. Before 3.8.0: n samples, purged by their start.
  Every quota meter uses it: broker, listener and per-IP connection rates and request
  quotas.
- `zookeeper_cluster_actions` (the metadata mode, `kafka.metadata`; ZooKeeper mode ended
  in 4.0.0): a ZooKeeper-mode broker serves the controller-to-broker cluster actions
  LeaderAndIsr (4), StopReplica (5), UpdateMetadata (6), ControlledShutdown (7) and
  AlterIsr (56) and answers them with `sendResponseExemptThrottle`, as it does
  WriteTxnMarkers (27); a KRaft broker serves none of them (they are not in its listener's
  `ApiVersionManager`) and exempts only WriteTxnMarkers (`KafkaApis.handle`, 2.8.2–4.4.0;
  docs/kafka-versions.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from base.quota.config import ConfigError

__all__ = [
    "CURRENT",
    "METADATA_KEY",
    "OLDEST",
    "VERSION_KEY",
    "KafkaSemantics",
    "default_metadata",
    "parse_version",
    "semantics",
]

#: the acceptor configuration keys: the release, and its metadata mode (kraft|zookeeper)
VERSION_KEY = "kafka.version"
METADATA_KEY = "kafka.metadata"
#: cluster actions a broker answers exempt from request quotas, by metadata mode
EXEMPT_KRAFT: frozenset[int] = frozenset({27})  # WriteTxnMarkers
EXEMPT_ZOOKEEPER: frozenset[int] = frozenset({4, 5, 6, 7, 27, 56})
#: the version the harness runs and enforces as by default: the newest release that passes
#: the whole reference pass (docs/kafka-versions.md); `broker` starts it by default
CURRENT = "4.4.0"
#: the first release with every connection quota the catalog uses (KIP-612's rates: 2.7.0)
OLDEST = (2, 7, 0)

_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?$")


def parse_version(text: str, key: str = VERSION_KEY) -> tuple[int, int, int]:
    """`3.7.2` -> (3, 7, 2); a bad or too old version is a ConfigError naming the key."""
    m = _VERSION.match(text.strip())
    if m is None:
        raise ConfigError(key, text, "expected a Kafka release like 3.9.1 or 4.4.0")
    version = (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))
    if version < OLDEST:
        raise ConfigError(
            key,
            text,
            "connection-rate quotas (KIP-612) need Kafka 2.7.0 or newer",
        )
    return version


@dataclass(frozen=True)
class KafkaSemantics:
    """The behaviours of one Kafka release that the engine models differently."""

    version: tuple[int, int, int]
    #: n+1 samples purged by last event (3.8.0+); else n samples purged by start
    sampled_stat_overlap: bool
    #: metadata in ZooKeeper: the controller-to-broker cluster actions are served, exempt
    zookeeper_cluster_actions: bool = False

    @property
    def name(self) -> str:
        return ".".join(str(x) for x in self.version)

    @property
    def metadata(self) -> str:
        return "zookeeper" if self.zookeeper_cluster_actions else "kraft"

    @property
    def exempt_api_keys(self) -> frozenset[int]:
        """The API keys the broker answers without charging a request quota."""
        return EXEMPT_ZOOKEEPER if self.zookeeper_cluster_actions else EXEMPT_KRAFT


def release(text: str, key: str = VERSION_KEY) -> str:
    """`parse_version` as ``X.Y.Z`` text (``4.3`` -> ``4.3.0``); a ConfigError naming the key."""
    return ".".join(str(p) for p in parse_version(text, key))


def default_metadata(version: tuple[int, int, int]) -> str:
    """The metadata mode a release runs in unless told: ZooKeeper before 3.3 (KRaft was not
    production-ready), KRaft from it (4.0 removed ZooKeeper)."""
    return "zookeeper" if version < (3, 3, 0) else "kraft"


def semantics(version: str = CURRENT, metadata: str | None = None) -> KafkaSemantics:
    """The switches of ``version`` in ``metadata`` mode (None: the release's default)."""
    v = parse_version(version)
    mode = (metadata or default_metadata(v)).strip().lower()
    if mode not in ("kraft", "zookeeper"):
        raise ConfigError(METADATA_KEY, str(metadata), "expected kraft or zookeeper")
    if mode == "zookeeper" and v >= (4, 0, 0):
        raise ConfigError(METADATA_KEY, str(metadata), f"Kafka {version} has no ZooKeeper mode")
    return KafkaSemantics(
        version=v,
        sampled_stat_overlap=v >= (3, 8, 0),
        zookeeper_cluster_actions=mode == "zookeeper",
    )
