"""The Kafka release a run is judged as, and the behaviours that differ between releases.

The checker's own copy (it never imports `harness.quota`, Jepsen): each difference is one
named switch here; `harness/quota/versions.py` holds the enforcer's, and
`tests/unit/test_kafka_versions.py` keeps the two giving the same answer for every
release. The release comes from the runner's intent: its `config` rows carry
`kafka.version` (the broker's release on a broker target; on the acceptor target, the
release the runner told the acceptor to enforce as), else run.json
`versions.kafka_semantics`, else the current release. docs/kafka-versions.md says where
each switch comes from in Kafka's sources.

- `sampled_stat_overlap` (3.8.0, `SampledStat.advance` / `purgeObsoleteSamples`): n+1
  samples, a sample purged by its last event; before, n samples purged by their start.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CURRENT = "4.3.1"
_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?")


@dataclass(frozen=True)
class Semantics:
    version: tuple[int, int, int]
    #: the rate meter keeps n+1 samples and purges by last event (Kafka >= 3.8.0)
    sampled_stat_overlap: bool

    @property
    def name(self) -> str:
        return ".".join(str(x) for x in self.version)

    @property
    def meter(self) -> str:
        """How the rate meter is modelled, for the report."""
        if self.sampled_stat_overlap:
            return "n+1 samples purged by last event (Kafka >= 3.8)"
        return "n samples purged by start (Kafka < 3.8)"


def semantics_for(version: str | None) -> Semantics:
    """The semantics of `version` ("3.7.2", "4.3.1"); None or unreadable: the current."""
    m = _VERSION.match(str(version or "").strip()) or _VERSION.match(CURRENT)
    assert m is not None
    v = (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))
    return Semantics(version=v, sampled_stat_overlap=v >= (3, 8, 0))
