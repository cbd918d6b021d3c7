"""Run-time quota changes that must survive a restart (Kafka keeps them in its metadata log).

Why a JSON file: the acceptor is one process; an atomic rename is all the durability it
needs, and an operator can read what a restarted acceptor will enforce.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STATE_FILE = "acceptor-state.json"


@dataclass
class PersistentState:
    #: "default" -> rate for the default IP entity, "<ip>" -> rate
    ip_quotas: dict[str, int] = field(default_factory=dict)
    #: dynamic broker keys set through IncrementalAlterConfigs (None never stored): the
    #: cluster-default layer (resource "") and this broker's own layer (resource node.id)
    broker_config: dict[str, str] = field(default_factory=dict)
    node_config: dict[str, str] = field(default_factory=dict)
    #: request quotas by entity key (issue 5), e.g. "user=alice,client-id=<default>"
    request_quotas: dict[str, dict[str, float]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "ip_quotas": dict(sorted(self.ip_quotas.items())),
            "broker_config": dict(sorted(self.broker_config.items())),
            "node_config": dict(sorted(self.node_config.items())),
            "request_quotas": self.request_quotas,
        }


def load_state(state_dir: Path | None) -> PersistentState:
    if state_dir is None:
        return PersistentState()
    path = state_dir / STATE_FILE
    if not path.exists():
        return PersistentState()
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return PersistentState(
            ip_quotas={str(k): int(v) for k, v in raw.get("ip_quotas", {}).items()},
            broker_config={str(k): str(v) for k, v in raw.get("broker_config", {}).items()},
            node_config={str(k): str(v) for k, v in raw.get("node_config", {}).items()},
            request_quotas=dict(raw.get("request_quotas", {})),
        )
    except (ValueError, TypeError, AttributeError) as exc:
        raise ValueError(
            f"state.dir: {path} is not a valid acceptor state file ({exc}); "
            "fix or remove it to start from the configured limits"
        ) from exc


def save_state(state_dir: Path | None, state: PersistentState) -> None:
    if state_dir is None:
        return
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / STATE_FILE
    tmp = state_dir / f".{STATE_FILE}.tmp"
    tmp.write_text(json.dumps(state.to_json(), indent=2, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)
